"""``synthesize_tasks`` (+ ``asynthesize_tasks``, ``create_synthesis_node``): explore -> synthesize ->
filter until ``n`` tasks are kept.

Each round explores one world (the next seed training task's ``env_params``, or the default
world when the environment has no tasks) with the schema-driven explorer (or, given a chat model,
the LLM explorer of ``explore_llm.py``), writes candidate tasks with the offline synthesizer (or
an ``LLMSynthesizer``) and filters them against everything kept so far, the seed training tasks
and the held-out tasks (and, given a ``store``, the tasks it already holds). Stops at ``n`` kept
tasks or after ``max_explorations`` rounds, whichever comes first.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_evolver._llm import model_id, run_sync
from langgraph_evolver.environment import Environment, TaskEnvironmentFactory, load_environment
from langgraph_evolver.errors import ConfigError, EnvironmentFailure
from langgraph_evolver.types import Task

from .explore import exploration_task, explore_fresh, unsafe_tools
from .explore_llm import aexplore_with_model
from .facts import FACT_KEY
from .filters import DuplicateIndex, FilterReport, filter_tasks, state_fingerprint
from .profile import tool_kind
from .reach import explain_unreached, next_setup
from .store import TaskStore
from .synthesize import (
    MULTI_SHARE,
    RESOLVES_KEY,
    SYNTHESIZER_NAME,
    Describer,
    asks_several,
    phrasing_overlap,
    read_share,
    synthesize,
)
from .synthesize_llm import LLMSynthesizer

__all__ = ["MAX_TOOL_SHARE", "PipelineReport", "asynthesize_tasks", "create_synthesis_node", "synthesize_tasks"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineReport:
    """What one ``synthesize_tasks`` run did."""

    env: str
    """The environment explored."""
    requested: int
    """How many tasks were asked for."""
    kept: int
    """How many were kept (at most ``requested``)."""
    explorations: int
    """Exploration trajectories run."""
    filters: FilterReport = field(default_factory=FilterReport)
    """What each filter removed, and why."""
    phrasing_overlap: float = 0.0
    """Mean max token-Jaccard of the kept queries with the seed (train + held-out) queries."""
    by_level: dict[int, int] = field(default_factory=dict)
    """Kept tasks by difficulty (number of calls)."""
    state_changing: float = 0.0
    """Share of the kept tasks whose reference, replayed by the feasibility filter, changed the state."""
    seconds: float = 0.0
    explorer: str = "schema"
    synthesizer: str = SYNTHESIZER_NAME
    synthesizer_stats: dict[str, Any] = field(default_factory=dict)
    """An LLM synthesizer's calls, tokens and fallbacks."""
    initial_states: int = 0
    """Distinct initial states explored (worlds, or states built by ``setup`` calls on a fresh session)."""
    multi_intent: float = 0.0
    """Share of the kept tasks that ask for more than one thing (``INTENTS_KEY``; at most ``MULTI_SHARE`` where
    enough ask for one)."""
    named: float = 0.0
    """Share of the kept tasks whose request names records instead of giving their ids (``RESOLVES_KEY``: "cancel
    Jonas Weber's shipment", its lookup first), as people ask (``NAMED_SHARE``)."""
    over_cap: int = 0
    """Candidates left out unfiltered because a tool they are about had its share of the tasks (``MAX_TOOL_SHARE``),
    or because the tasks asking for several things had theirs (``MULTI_SHARE``)."""
    unreached: list[dict[str, Any]] = field(default_factory=list)
    """Tools no exploration called without an error, each with what was missing (``explain_unreached``)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _tools_of(task: Task, descriptions: Mapping[str, str]) -> frozenset[str]:
    """What a task is about: the tools it writes with, else its last call's tool."""
    calls = task.reference_solution or ()
    writes = {c.name for c in calls if tool_kind(c.name, descriptions.get(c.name, "")) == "write"}
    return frozenset(writes or ({calls[-1].name} if calls else set()))


def _writes(task: Task, descriptions: Mapping[str, str]) -> bool:
    """Whether a task's reference calls a tool ``tool_kind`` reads as a write."""
    return any(tool_kind(c.name, descriptions.get(c.name, "")) == "write" for c in task.reference_solution or ())


def _values_of(task: Task) -> frozenset[str]:
    """The text values a task's reference passes (``"=Jonas Weber"``, ``"=R2026-031"``, ``"=available"``): the
    records and choices it is about, apart from its tools (the leading ``=`` keeps them apart from tool names).
    Numbers are left out: a quantity of 1 is no record.

    Example:
        >>> from langgraph_evolver.types import Task, ToolCall
        >>> sorted(_values_of(Task(id="t", query="q", reference_solution=[
        ...     ToolCall(name="member_lookup", arguments={"who": "Jonas Weber"}),
        ...     ToolCall(name="rental_start", arguments={"bike": "BK-26", "member_id": "M-0042", "days": 3})])))
        ['=BK-26', '=Jonas Weber', '=M-0042']
    """
    values = (v for c in task.reference_solution or () if isinstance(c.arguments, dict) for v in c.arguments.values())
    return frozenset(f"={v.strip()}" for v in values if isinstance(v, str) and v.strip())


def _balanced(pool: Sequence[Task], key: Callable[[Task], frozenset[str]], before: Counter[str]) -> list[Task]:
    """``pool`` reordered so the tools its tasks are about (``key``) take turns, the tools kept least so far
    (``before``) first: each next task is the first whose most-used tool is used least, and among those the one
    whose most-used value (``_values_of``) is used least. An explorer that calls one tool that always works
    ("join the waiting list") would otherwise fill the store with it, and a model trained on that store learns to
    open every task with it; one record asked about again and again (19 of bikeshop run 1's 100 tasks named
    member M-0042 / Jonas Weber) is copied into requests about other things (session 74: "How many 700x25 inner
    tubes have we got left?" -> ``member_lookup(who="M-0042")``)."""
    counts, left, out = Counter(before), list(pool), []

    def most_used(keys: frozenset[str]) -> int:
        return max((counts[k] for k in keys), default=0)

    while left:
        best = min(range(len(left)), key=lambda i: (most_used(key(left[i])), most_used(_values_of(left[i])), i))
        task = left.pop(best)
        counts.update(key(task) | _values_of(task))
        out.append(task)
    return out


MAX_TOOL_SHARE = 0.25
"""The most of the tasks asked for that one tool may be about (``_tools_of``), or 1.5 times an even share where the
tools are few (``_tool_cap``): a write that always works, whatever its arguments ("create a sheet named 'name 35'",
"join the waiting list", "create a shipment"), is otherwise in half the synthesized tasks, and a model trained on
them opens every task with it. Fewer tasks than asked for are kept rather than more of one tool's."""


MAX_RECORD_SHARE = 0.1
"""The most of the tasks asked for that may pass one value (``_values_of``: a record's id or name, a status): the
explorer reaches some records more than others, and bikeshop run 1 kept 19 of 100 tasks about one member
(session 74). Fewer tasks than asked for are kept rather than more about one record."""


def _record_cap(n: int) -> int:
    """How many of ``n`` tasks may pass one value (``MAX_RECORD_SHARE``, always ``_MIN_CAP``).

    Example:
        >>> _record_cap(100), _record_cap(12)
        (10, 5)
    """
    return max(_MIN_CAP, math.ceil(n * MAX_RECORD_SHARE))


_STALE_READS = 3
"""Explorations in a row that keep nothing after which the tasks that only read are no longer capped at their share
(``read_share``): a server whose writes seldom replay still gets its tasks."""
_MIN_CAP = 5
_STALE = 5
"""Explorations in a row that keep nothing new while candidates are left out for the cap: exploring stops."""


def _tool_cap(n: int, n_tools: int) -> int:
    """How many of ``n`` tasks one tool may be about (``MAX_TOOL_SHARE``; 1.5 times an even share of ``n_tools``;
    always ``_MIN_CAP``: a handful of tasks is not a distribution).

    Example:
        >>> _tool_cap(100, 9), _tool_cap(100, 3), _tool_cap(12, 9)
        (25, 50, 5)
    """
    return max(_MIN_CAP, math.ceil(n * MAX_TOOL_SHARE), math.ceil(1.5 * n / max(1, n_tools)))


def _filter_preferring_writes(
    candidates: Sequence[Task],
    descriptions: Mapping[str, str],
    wanted: int,
    *,
    kept_before: Sequence[Task] = (),
    cap: int | None = None,
    record_cap: int | None = None,
    read_cap: int | None = None,
    multi_cap: int | None = None,
    **options: Any,
) -> tuple[list[Task], FilterReport, int]:
    """``filter_tasks`` one candidate at a time until ``wanted`` are kept: those that call a write tool first, up to
    the writing tools' share of ``wanted`` (``synthesize.read_share``), then those that only read, questions of one fact
    first, then the other writes. The filters stop at the number wanted (each replay starts a fresh instance: an
    MCP server process). Within each, the tools the tasks are about take turns, those least kept so far
    (``kept_before``) first, then the values they pass (``_balanced``). A candidate about a tool already in ``cap``
    tasks is left out unfiltered: it is counted in the third value returned, after the kept tasks and the filters'
    report. So is one that passes a value already in ``record_cap`` kept tasks (``_values_of``), one that only
    reads once ``read_cap`` such tasks are kept (these and before), and one that asks for more than one thing
    (``INTENTS_KEY``) once ``multi_cap`` such tasks are kept; within each pool the tasks that ask for one thing
    come first."""

    def key(task: Task) -> frozenset[str]:
        return _tools_of(task, descriptions)

    counts = Counter(k for t in kept_before for k in key(t) | _values_of(t))
    pools: dict[bool, list[Task]] = {True: [], False: []}
    for task in candidates:
        pools[_writes(task, descriptions)].append(task)
    pools[False].sort(key=lambda t: FACT_KEY not in t.metadata)  # "Who wrote Middlemarch?" before "tell me the books"
    pools = {writes: [*_balanced([t for t in pool if not asks_several(t)], key, counts),
                      *_balanced([t for t in pool if asks_several(t)], key, counts)]
             for writes, pool in pools.items()}  # fmt: skip
    multi = sum(map(asks_several, kept_before))
    n_reads = sum(not _writes(t, descriptions) for t in kept_before)
    kept: list[Task] = []
    over_cap = 0
    report = FilterReport()
    reads = round(wanted * read_share(descriptions))
    for writes, limit in ((True, wanted - reads), (False, wanted), (True, wanted)):
        pool = pools[writes]
        while pool and len(kept) < limit:
            task = pool.pop(0)
            if (
                (cap is not None and any(counts[k] >= cap for k in key(task)))
                or (record_cap is not None and any(counts[v] >= record_cap for v in _values_of(task)))
                or (multi_cap is not None and asks_several(task) and multi >= multi_cap)
                or (read_cap is not None and not writes and n_reads >= read_cap)
            ):
                over_cap += 1
                continue
            new, batch = filter_tasks([task], **options)
            report = report.merge(batch)
            kept.extend(new)
            multi += sum(map(asks_several, new))
            n_reads += 0 if writes else len(new)
            counts.update(k for t in new for k in key(t) | _values_of(t))
    return kept, report, over_cap


def _default_factory(task: Task) -> Environment:
    return load_environment(task.env)


async def asynthesize_tasks(
    env_name: str,
    n: int,
    *,
    seed: int = 0,
    env_factory: TaskEnvironmentFactory | None = None,
    seed_tasks: Sequence[Task] | None = None,
    held_out: Sequence[Task] | None = None,
    n_breadth: int = 3,
    n_depth: int = 17,
    max_ops: int = 3,
    per_exploration: int | None = 20,
    threshold: float = 0.9,
    max_explorations: int | None = None,
    embeddings: Any = None,
    describer: Describer | None = None,
    fingerprint: Callable[[Any], Any] = state_fingerprint,
    progress: bool = True,
    explorer: Any = None,
    synthesizer: Any = None,
    explorer_options: dict[str, Any] | None = None,
    store: TaskStore | None = None,
) -> tuple[list[Task], PipelineReport]:
    """Synthesize ``n`` filtered tasks for an environment (offline unless ``explorer``/``synthesizer`` is a model).

    Args:
        env_name: a registered environment name or a ``"module:factory"`` path; synthetic tasks
            carry it as ``env``.
        n: tasks wanted.
        seed: seeds exploration and synthesis (same seed, same tasks).
        env_factory: ``env_factory(task) -> Environment``, a fresh instance per call; default
            ``load_environment(task.env)``.
        seed_tasks: the seed training tasks (worlds to explore, and duplicates to avoid);
            default the environment's ``list_tasks("train")``.
        held_out: tasks that must never be re-synthesized; default ``list_tasks("test")``.
        n_breadth: breadth-phase calls per exploration.
        n_depth: depth-phase calls per exploration.
        max_ops: the most calls in one task.
        per_exploration: candidates sampled from one exploration (spreads tasks over worlds);
            ``None`` keeps all.
        threshold: embedding cosine at which a candidate is a near-duplicate.
        max_explorations: the budget of exploration rounds; default ``2 * n + 10``.
        embeddings: LangChain ``Embeddings`` for the duplicate filter; default offline MiniLM.
        describer: optional per-environment query writer (see ``synthesize``).
        fingerprint: ``fingerprint(env)`` of the state, for the feasibility filter.
        progress: show a tqdm progress bar.
        explorer: ``None`` (the schema-driven explorer, offline) or a chat model that explores
            (``explore_llm.aexplore_with_model``; a ``PolicyChatModel`` records token ids).
        synthesizer: ``None`` (the offline synthesizer), an ``LLMSynthesizer``, or a chat model
            (wrapped in an ``LLMSynthesizer`` asking ``per_exploration`` tasks per exploration).
        explorer_options: ``create_explorer_graph`` options for an LLM explorer (temperatures...).
        store: a ``TaskStore`` the tasks are meant for: the tasks it holds (same id) and their
            near-duplicates are removed (``duplicate of stored``) and exploration goes on, so
            all ``n`` kept tasks are new to it. The tasks are not written here.

    Returns:
        ``(tasks, report)``.
    """
    from tqdm.auto import tqdm

    started = time.perf_counter()
    factory = env_factory or _default_factory
    writer = synthesizer
    if writer is not None and not isinstance(writer, LLMSynthesizer):
        writer = LLMSynthesizer(writer, n_tasks=per_exploration or 5, max_ops=max_ops)
    probe = factory(Task(id="questioning-probe", query="", env=env_name))
    try:
        seeds = list(probe.list_tasks("train")) if seed_tasks is None else list(seed_tasks)
        held = list(probe.list_tasks("test")) if held_out is None else list(held_out)
    finally:
        probe.close()
    index = DuplicateIndex(embeddings, threshold=threshold)
    index.add([t.query for t in seeds], "seed")
    index.add([t.query for t in held], "held-out")
    if store is not None:
        stored = store.list()
        index.add([t.query for t in stored], "stored")
        index.add_ids([t.id for t in stored], "stored")
    budget = max_explorations if max_explorations is not None else 2 * n + 10
    kept: list[Task] = []
    report = FilterReport()
    rounds = 0
    avoid: set[str] = set()  # tools that timed out or broke the environment in an earlier exploration
    trajectories: list[Any] = []
    states: set[str] = set()
    descriptions: dict[str, str] = {}
    over_cap = stale = 0  # candidates left out for the cap; explorations in a row that kept nothing
    with tqdm(total=n, desc=f"synthesize {env_name}", disable=not progress, unit="task") as bar:
        while len(kept) < n and rounds < budget and not (stale >= _STALE and over_cap):
            world = seeds[rounds % len(seeds)] if seeds else None
            task = exploration_task(world, env=env_name, seed=seed * 1_000_003 + rounds)
            setup = next_setup(trajectories, rounds) if world is None and explorer is None else None
            if setup:  # no worlds to pick from: start from a state an earlier exploration's writes built
                task = dataclasses.replace(task, metadata={**task.metadata, "setup": setup})
            states.add(repr((task.env_params, setup or [])))
            round_seed = seed * 1_000_003 + rounds
            if explorer is None:
                try:
                    trajectory = explore_fresh(factory, task, n_breadth=n_breadth, n_depth=n_depth, seed=round_seed,
                                               avoid=avoid)  # fmt: skip
                except EnvironmentFailure:
                    if not setup:
                        raise
                    task = dataclasses.replace(task, metadata={k: v for k, v in task.metadata.items() if k != "setup"})
                    trajectory = explore_fresh(factory, task, n_breadth=n_breadth, n_depth=n_depth, seed=round_seed,
                                               avoid=avoid)  # fmt: skip
                avoid |= unsafe_tools(trajectory)
            else:
                trajectory = await aexplore_with_model(factory, task, explorer, n_breadth=n_breadth, n_depth=n_depth,
                                                       seed=round_seed, **(explorer_options or {}))  # fmt: skip
            rounds += 1
            trajectories.append(trajectory)
            if writer is not None:
                candidates = await writer.asynthesize(trajectory)
            else:
                candidates = synthesize(
                    trajectory, max_ops=max_ops, max_tasks=per_exploration, seed=seed + rounds, describer=describer
                )
            # one world only (no seed tasks): at most half the tasks from one exploration, so they come from
            # several explored initial states (next_setup); tasks that write first
            wanted = min(n - len(kept), n if seeds else max(1, -(-n // 2)))
            if seeds:
                new, batch = filter_tasks(candidates, env_factory=factory, index=index, fingerprint=fingerprint)
            else:
                descriptions.update(trajectory.metadata.get("tool_descriptions") or {})
                new, batch, over = _filter_preferring_writes(candidates, descriptions, wanted, kept_before=kept,
                                                             cap=_tool_cap(n, len(descriptions)),
                                                             record_cap=_record_cap(n),
                                                             read_cap=math.ceil(n * read_share(descriptions))
                                                             if stale < _STALE_READS else None,
                                                             multi_cap=round(n * MULTI_SHARE), env_factory=factory,
                                                             index=index, fingerprint=fingerprint)  # fmt: skip
                over_cap += over
            report = report.merge(batch)
            new = new[:wanted]
            kept.extend(new)
            stale = 0 if new else stale + 1
            bar.update(len(new))
            bar.set_postfix(explorations=rounds, candidates=report.candidates)
    changing = sum(bool((t.metadata.get("feasibility") or {}).get("state_changed")) for t in kept)
    by_level: dict[int, int] = {}
    for t in kept:
        level = int(t.metadata.get("level", len(t.reference_solution or ())))
        by_level[level] = by_level.get(level, 0) + 1
    return kept, PipelineReport(
        env=env_name,
        requested=n,
        kept=len(kept),
        explorations=rounds,
        filters=report,
        phrasing_overlap=round(phrasing_overlap(kept, [*seeds, *held]), 4),
        by_level=dict(sorted(by_level.items())),
        state_changing=round(changing / len(kept), 3) if kept else 0.0,
        multi_intent=round(sum(map(asks_several, kept)) / len(kept), 3) if kept else 0.0,
        named=round(sum(RESOLVES_KEY in t.metadata for t in kept) / len(kept), 3) if kept else 0.0,
        seconds=round(time.perf_counter() - started, 2),
        explorer="schema" if explorer is None else f"llm:{model_id(explorer)}",
        synthesizer=writer.name if writer is not None else SYNTHESIZER_NAME,
        synthesizer_stats=writer.stats.to_dict() if writer is not None else {},
        initial_states=len(states),
        over_cap=over_cap,
        unreached=explain_unreached(trajectories),
    )


def synthesize_tasks(env_name: str, n: int, **options: Any) -> tuple[list[Task], PipelineReport]:
    """Synchronous ``asynthesize_tasks`` (same arguments; see it for every option).

    Example:
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> tasks, report = synthesize_tasks("sandbox", 2, embeddings=DeterministicFakeEmbedding(size=8),
        ...                                  max_explorations=4, progress=False)
        >>> report.kept, {t.source for t in tasks}
        (2, {'synthetic'})
    """
    return run_sync(asynthesize_tasks(env_name, n, **options))


def create_synthesis_node(
    env_name: str,
    n: int,
    *,
    input_key: str = "seed_tasks",
    output_key: str = "tasks",
    report_key: str | None = "synthesis_report",
    **options: Any,
) -> Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]:
    """A LangGraph node that synthesizes ``n`` filtered tasks for ``env_name`` (``asynthesize_tasks``).

    Args:
        env_name: The environment to explore (registry name or ``"module:factory"``).
        n: Tasks wanted per run of the node.
        input_key: Optional state key holding seed tasks (``Task`` or their dicts) whose worlds are
            explored and whose queries are not re-synthesized; absent: the environment's own.
        output_key: State key the kept tasks (``Task.to_dict()`` list) are written to.
        report_key: State key for the ``PipelineReport`` dict (``None``: not written).
        **options: ``asynthesize_tasks`` options (``seed``, ``embeddings``, ``synthesizer``...).

    Example:
        >>> import asyncio
        >>> from langchain_core.embeddings import DeterministicFakeEmbedding
        >>> node = create_synthesis_node("sandbox", 1, embeddings=DeterministicFakeEmbedding(size=8), progress=False)
        >>> update = asyncio.run(node({}))
        >>> len(update["tasks"]), update["synthesis_report"]["kept"]
        (1, 1)
    """
    if "seed_tasks" in options:
        raise ConfigError("create_synthesis_node reads seed tasks from the state (input_key); drop seed_tasks=.")

    async def synthesize_node(state: Mapping[str, Any]) -> dict[str, Any]:
        seeds = state.get(input_key)
        seed_tasks = None if seeds is None else [t if isinstance(t, Task) else Task.from_dict(dict(t)) for t in seeds]
        tasks, report = await asynthesize_tasks(env_name, n, seed_tasks=seed_tasks, **options)
        update: dict[str, Any] = {output_key: [t.to_dict() for t in tasks]}
        if report_key is not None:
            update[report_key] = report.to_dict()
        return update

    synthesize_node.__name__ = "synthesize_tasks"
    return synthesize_node

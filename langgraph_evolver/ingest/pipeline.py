"""Recorded traces → trajectories, seed tasks, experiences and step labels, with a summary.

``ingest_traces`` (+ ``aingest_traces``, ``create_ingest_node``) does the work in memory (nothing is
written); ``write_ingest`` stores the result
(JSONL files, the trainable tasks in a ``TaskStore``) and ``write_label_feedback`` sends the step
labels back to LangSmith as feedback on the original LLM runs. The CLI (``__main__``) strings them
together with ``--dry-run`` and ``--write-feedback``.

Tasks: the user queries people actually sent, one task per distinct query (normalized: case,
whitespace, punctuation), ``source="trace"``, in the environment the user names. A task whose runs
include one with positive feedback (reward at or above ``positive``) takes that run's tool calls
(those that did not error) as its ``reference_solution`` and is trainable: the environment scores
it by replaying the reference (state equality) or the self-questioning judge does. Any other task is
kept for experiences and evaluation but not trained on (``metadata["trainable"] = False``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._llm import run_sync
from ..errors import ConfigError
from ..types import Task, ToolCall, Trajectory, write_jsonl
from .convert import Redact, run_feedback_reward, trajectory_from_trace, user_query
from .sources import RecordedTrace

__all__ = [
    "IngestResult",
    "aingest_traces",
    "create_ingest_node",
    "ingest_traces",
    "trace_task_id",
    "write_ingest",
    "write_label_feedback",
]


def _normalized(query: str) -> str:
    """Case, whitespace and punctuation do not make another query ("Lend Dune to Ana." = "lend dune to ana")."""
    return " ".join(re.sub(r"[^\w\s]", " ", query.casefold()).split())


def trace_task_id(query: str) -> str:
    """The id of the trace task for ``query``: the same query (normalized) always gets the same id."""
    return "trace-" + hashlib.sha1(_normalized(query).encode("utf-8")).hexdigest()[:12]


@dataclass(slots=True)
class IngestResult:
    """What ``ingest_traces`` made, and why traces were skipped."""

    trajectories: list[Trajectory] = field(default_factory=list)
    tasks: list[Task] = field(default_factory=list)
    experiences: list[Any] = field(default_factory=list)
    labelled: list[Trajectory] = field(default_factory=list)
    """Trajectories with judge labels (their steps carry the original LLM run ids)."""
    traces_read: int = 0
    runs_read: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def trainable_tasks(self) -> list[Task]:
        return [t for t in self.tasks if t.metadata.get("trainable")]

    def summary(self) -> dict[str, Any]:
        labels = [x for t in self.labelled for x in t.labels or ()]
        return {
            "traces_read": self.traces_read,
            "runs_read": self.runs_read,
            "skipped": dict(self.skipped),
            "trajectories": len(self.trajectories),
            "with_reward": sum(t.reward is not None for t in self.trajectories),
            "policy_gradient_trajectories": sum(bool(t.metadata.get("policy_gradient")) for t in self.trajectories),
            "tasks": len(self.tasks),
            "tasks_trainable": len(self.trainable_tasks),
            "tasks_not_trained": len(self.tasks) - len(self.trainable_tasks),
            "experiences": len(self.experiences),
            "labelled_steps": len(labels),
            "labels_good": sum(str(x.get("label")).upper() == "GOOD" for x in labels),
        }


def _reference(trajectory: Trajectory) -> tuple[ToolCall, ...]:
    """The calls of a run that did not come back as errors, in order, with fresh ids."""
    calls: list[ToolCall] = []
    for step in trajectory.steps:
        errored = {o.call_id for o in step.observations if o.is_error}
        for call in step.action.tool_calls:
            if call.id not in errored and isinstance(call.arguments, dict) and call.name:
                calls.append(ToolCall(name=call.name, arguments=dict(call.arguments), id=f"ref_{len(calls)}"))
    return tuple(calls)


async def aingest_traces(
    traces: Iterable[RecordedTrace],
    *,
    env: str | None = None,
    env_params: Mapping[str, Any] | None = None,
    policy_model: str | None = None,
    redact: Redact | None = None,
    positive: float = 1.0,
    reward_keys: Sequence[str] | None = None,
    extractor: Any = "rules",
    judge: Any = "reference",
) -> IngestResult:
    """Turn recorded traces into trajectories, trace tasks, experiences and step labels (in memory).

    The extractor and the judge run concurrently over the scored trajectories (each bounded by its own
    ``max_concurrency``); reading and converting the traces is synchronous.

    Args:
        traces: From ``read_langsmith_traces`` / ``read_jsonl_traces``.
        env: The environment (registry id or dotted path) the tasks run in; without it no task is trainable.
        env_params: The environment's parameters for every task; a trace's own ``env_params`` metadata
            (our rollouts record it) wins.
        policy_model: The served name of the policy being trained (token ids of other models stay unused).
        redact: ``text -> text`` applied to every text before it is kept (queries, outputs, tool I/O).
        positive: A run whose feedback score (mean over ``reward_keys``, default every key but our step
            labels) reaches it is positive: its tool calls become its task's reference.
        extractor: Self-navigating extractor spec (``"rules"``, a chat model, ...) or ``None`` for none.
        judge: Self-attributing judge spec (``"reference"``, a chat model, ...) or ``None`` for none.
    """
    clean: Callable[[str], str] = redact or (lambda text: text)
    result = IngestResult()
    seen: set[str] = set()
    drafts: list[tuple[Trajectory, dict[str, Any]]] = []
    for trace in traces:
        result.traces_read += 1
        result.runs_read += trace.runs
        root = trace.root
        if str(root["id"]) in seen:
            result.skipped["duplicate trace"] += 1
            continue
        seen.add(str(root["id"]))
        query = user_query(root)
        if query is None:
            result.skipped["no user message"] += 1
            continue
        query = clean(query)
        reward = run_feedback_reward(trace.feedback, keys=reward_keys)
        meta = (root.get("extra") or {}).get("metadata") or {}
        provisional = Task(id=trace_task_id(query), query=query, env=env or "unnamed", source="trace")
        trajectory = trajectory_from_trace(root, task=provisional, reward=reward, policy_model=policy_model,
                                           redact=redact)  # fmt: skip
        if not trajectory.steps:
            result.skipped["no LLM run"] += 1
            continue
        drafts.append((trajectory, meta))
    by_task: dict[str, list[tuple[Trajectory, dict[str, Any]]]] = {}
    for trajectory, meta in drafts:
        by_task.setdefault(trajectory.task.id, []).append((trajectory, meta))
    for task_id, group in by_task.items():
        best = max((t for t, _ in group if t.reward is not None and t.reward >= positive),
                   key=lambda t: t.reward or 0.0, default=None)  # fmt: skip
        reference = _reference(best) if best is not None else ()
        params = dict(env_params or {})
        traced_params = next((m.get("env_params") for _, m in group if isinstance(m.get("env_params"), Mapping)), None)
        if traced_params:
            params = dict(traced_params)
        trainable = bool(reference) and env is not None
        rewards = [t.reward for t, _ in group if t.reward is not None]
        task = Task(id=task_id, query=group[0][0].task.query, env=env or "unnamed", env_params=params,
                    reference_solution=reference or None, source="trace",
                    metadata={"trainable": trainable, "runs": len(group),
                              "root_run_ids": [t.metadata["root_run_id"] for t, _ in group],
                              "reference_run_id": best.metadata["root_run_id"] if best is not None else None,
                              "feedback_mean": sum(rewards) / len(rewards) if rewards else None,
                              "why_not_trained": None if trainable else (
                                  "no environment named (--env)" if reference else
                                  "no run with positive feedback (no reference solution)")})  # fmt: skip
        result.tasks.append(task)
        result.trajectories += [dataclasses.replace(t, task=task) for t, _ in group]
    scored = [t for t in result.trajectories if t.reward is not None]
    if extractor is not None and scored:
        from ..experience import aextract_experiences

        result.experiences = list((await aextract_experiences(scored, extractor)).experiences)
    if judge is not None and scored:
        from ..attribution import aattribute_batch, apply_attribution, make_judge

        bound = make_judge(judge)
        verdicts = await aattribute_batch(scored, bound)
        result.labelled = [apply_attribution(t, v) for t, v in zip(scored, verdicts, strict=True)]
    return result


def ingest_traces(traces: Iterable[RecordedTrace], **options: Any) -> IngestResult:
    """Synchronous ``aingest_traces`` (same arguments; see it for every option)."""
    return run_sync(aingest_traces(traces, **options))


def _as_trace(value: RecordedTrace | Mapping[str, Any]) -> RecordedTrace:
    if isinstance(value, RecordedTrace):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("root"), Mapping):
        return RecordedTrace(root=dict(value["root"]), feedback=list(value.get("feedback") or []),
                             runs=int(value.get("runs") or 0))  # fmt: skip
    raise ConfigError(f"A trace is a RecordedTrace or a dict with its 'root' run (and 'feedback'); got "
                      f"{type(value).__name__}.")  # fmt: skip


def create_ingest_node(
    *,
    input_key: str = "traces",
    output_key: str = "ingest",
    **options: Any,
) -> Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]:
    """A LangGraph node that ingests the recorded traces at ``input_key`` (``aingest_traces``).

    Args:
        input_key: State key holding a list of ``RecordedTrace`` or ``{"root": ..., "feedback": [...]}``.
        output_key: State key the result is written to: ``{"summary", "tasks", "trajectories",
            "experiences", "labelled"}``, every item as its dict.
        **options: ``aingest_traces`` options (``env``, ``extractor``, ``judge``, ``redact``...).
    """

    async def ingest(state: Mapping[str, Any]) -> dict[str, Any]:
        if input_key not in state:
            raise ConfigError(f"The ingest node reads traces from state[{input_key!r}], which is missing "
                              f"(state keys: {sorted(state)}); pass them or set input_key.")  # fmt: skip
        result = await aingest_traces([_as_trace(t) for t in state[input_key]], **options)
        return {output_key: {
            "summary": result.summary(),
            "tasks": [t.to_dict() for t in result.tasks],
            "trajectories": [t.to_dict() for t in result.trajectories],
            "experiences": [e.to_dict() for e in result.experiences],
            "labelled": [t.to_dict() for t in result.labelled],
        }}  # fmt: skip

    ingest.__name__ = "ingest_traces"
    return ingest


def write_ingest(result: IngestResult, out: str | Path, *, task_store: str | Path | None = None) -> dict[str, str]:
    """Write ``trajectories.jsonl``, ``tasks.jsonl`` (all tasks), ``experiences.jsonl``, ``labels.jsonl`` and
    ``summary.json`` under ``out``, and the trainable tasks into ``task_store`` (default ``out/tasks.sqlite``)."""
    from ..questioning.store import TaskStore

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: str(out / f"{name}.jsonl") for name in ("trajectories", "tasks", "experiences", "labels")}
    write_jsonl(paths["trajectories"], result.trajectories)
    write_jsonl(paths["tasks"], result.tasks)
    write_jsonl(paths["experiences"], result.experiences)
    write_jsonl(paths["labels"], [{"trajectory_id": t.id, "root_run_id": t.metadata.get("root_run_id"),
                                   "labels": [dict(x, llm_run_id=t.steps[int(x["step"])].llm_run_id
                                                   if int(x["step"]) < len(t.steps) else None)
                                              for x in t.labels or ()]} for t in result.labelled])  # fmt: skip
    store_path = Path(task_store) if task_store is not None else out / "tasks.sqlite"
    with TaskStore(store_path) as store:
        added = sum(store.add(t, synthesizer="trace-ingest", scores={"feedback_mean": t.metadata.get("feedback_mean")})
                    for t in result.trainable_tasks)  # fmt: skip
    paths["task_store"] = str(store_path)
    summary = {**result.summary(), "task_store_added": added}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    paths["summary"] = str(out / "summary.json")
    return paths


def write_label_feedback(result: IngestResult, client: Any) -> tuple[int, int]:
    """Step labels as ``step_attribution`` feedback on the original LLM runs; returns (written, failed)."""
    from ..attribution.feedback import write_langsmith_feedback

    return write_langsmith_feedback(result.labelled, client=client)

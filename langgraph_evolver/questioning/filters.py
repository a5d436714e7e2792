"""Filters for synthesized tasks: invalid references, near-duplicates, infeasible references.

1. ``drop_invalid``: no reference, an empty one, arguments that are not an object, or a tool the
   environment does not have.
2. ``DuplicateIndex`` / ``drop_duplicates``: embedding cosine (MiniLM by default) against the
   tasks already kept, the seed training tasks and the held-out tasks; a candidate at or above
   ``threshold`` is dropped, so a held-out task is never re-synthesized.
3. ``check_feasibility``: replay the reference in a fresh instance (``env_factory(task)``, reset
   with the task's ``env_params``); keep the task only if no call returns an error observation,
   the replay changes the state or reads something non-empty, and where the environment can
   score the task from its reference (the sandbox), the reference scores 1.0 against itself.
   For environments that score synthesized tasks by replay (``scores_synthetic_by_replay``), a
   task that only reads must leave something to check its answer by: the values its last read
   returned (``answers.expected_values``, stored in ``metadata["expected_values"]``), else it is
   refused ("read task with no expected answer"); the reference with that answer must score 1.0.

``filter_tasks`` chains them and returns the kept tasks with a ``FilterReport`` of what each
filter removed and why.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_evolver.reference_scoring import (  # the core's: env_tools scores by replay with them too
    EXPECTED_KEY,
    expected_answer,
    expected_values,
    state_fingerprint,
)
from langgraph_evolver.tool_results import holds_token
from langgraph_evolver.types import Action, Task

from ..environment import TaskEnvironmentFactory
from .facts import FACT_KEY
from .profile import tool_kind
from .synthesize import RESOLVES_KEY

__all__ = [
    "DuplicateIndex",
    "FilterReport",
    "check_feasibility",
    "drop_duplicates",
    "drop_invalid",
    "filter_tasks",
    "state_fingerprint",
]

EnvFactory = TaskEnvironmentFactory
"""``env_factory(task) -> Environment``: a fresh instance for the task (not yet reset)."""
_EMPTY = {"", "[]", "{}", "null", "none", '""'}


@dataclass(frozen=True, slots=True, kw_only=True)
class FilterReport:
    """What the filters did to a batch of candidates."""

    candidates: int = 0
    """Tasks that entered the filters."""
    kept: int = 0
    """Tasks that passed every filter."""
    removed: dict[str, int] = field(default_factory=dict)
    """Tasks removed by each filter: ``invalid``, ``duplicate``, ``infeasible``."""
    reasons: dict[str, int] = field(default_factory=dict)
    """Why, counted by reason (``duplicate of held-out``, ``error observation``, ...)."""

    def merge(self, other: FilterReport) -> FilterReport:
        """The sum of two reports."""
        return FilterReport(
            candidates=self.candidates + other.candidates,
            kept=self.kept + other.kept,
            removed=_add(self.removed, other.removed),
            reasons=_add(self.reasons, other.reasons),
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _add(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in [*a, *(k for k in b if k not in a)]}


def drop_invalid(tasks: Sequence[Task], *, tool_names: Sequence[str] | None = None) -> tuple[list[Task], Counter[str]]:
    """Drop tasks whose reference is missing, empty, malformed or calls an unknown tool."""
    kept, reasons = [], Counter[str]()
    known = set(tool_names) if tool_names is not None else None
    for task in tasks:
        ref = task.reference_solution
        if not ref:
            reasons["empty reference"] += 1
        elif not task.query.strip():
            reasons["empty query"] += 1
        elif any(not isinstance(c.arguments, dict) for c in ref):
            reasons["arguments not an object"] += 1
        elif known is not None and any(c.name not in known for c in ref):
            reasons["unknown tool"] += 1
        else:
            kept.append(task)
    return kept, reasons


def _normalize(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


class DuplicateIndex:
    """Queries already taken (kept, seed, held-out), searched by embedding cosine.

    Args:
        embeddings: LangChain ``Embeddings``; ``None`` loads the offline MiniLM model on first use.
        threshold: cosine at or above which a query is a near-duplicate.
    """

    def __init__(self, embeddings: Any = None, *, threshold: float = 0.9) -> None:
        self.threshold = threshold
        self._embeddings = embeddings
        self._vectors: list[Any] = []
        self._labels: list[str] = []
        self._exact: dict[str, str] = {}
        self._ids: dict[str, str] = {}

    def add_ids(self, ids: Sequence[str], label: str) -> None:
        """Task ids already taken under ``label``: a candidate with one of them is the same task."""
        for task_id in ids:
            self._ids.setdefault(task_id, label)

    def id_match(self, task_id: str) -> str | None:
        """The label ``task_id`` was taken under, if any."""
        return self._ids.get(task_id)

    def embed(self, texts: Sequence[str]) -> Any:
        """Unit-norm embeddings of ``texts`` (a numpy array, one row per text)."""
        import numpy as np

        if self._embeddings is None:
            from langgraph_evolver.embeddings import default_embeddings

            self._embeddings = default_embeddings()
        vectors = np.asarray(self._embeddings.embed_documents(list(texts)), dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)

    def add(self, queries: Sequence[str], label: str, vectors: Any = None) -> None:
        """Add ``queries`` under ``label`` (``kept``, ``seed``, ``held-out``)."""
        if not queries:
            return
        self._vectors.extend(self.embed(queries) if vectors is None else vectors)
        self._labels.extend([label] * len(queries))
        for q in queries:
            self._exact.setdefault(_normalize(q), label)

    def __len__(self) -> int:
        return len(self._labels)

    def match(self, queries: Sequence[str], vectors: Any = None) -> list[tuple[str, float] | None]:
        """For each query, ``(label, cosine)`` of its nearest entry at or above the threshold."""
        import numpy as np

        if not queries:
            return []
        out: list[tuple[str, float] | None] = [None] * len(queries)
        if self._vectors:
            vectors = self.embed(queries) if vectors is None else vectors
            sims = vectors @ np.stack(self._vectors).T
            for i, row in enumerate(sims):
                j = int(row.argmax())
                if row[j] >= self.threshold:
                    out[i] = (self._labels[j], float(row[j]))
        for i, q in enumerate(queries):
            if out[i] is None and _normalize(q) in self._exact:
                out[i] = (self._exact[_normalize(q)], 1.0)
        return out


def drop_duplicates(tasks: Sequence[Task], index: DuplicateIndex) -> tuple[list[Task], Counter[str]]:
    """Drop near-duplicates of the index and of each other; kept queries join the index."""
    kept, reasons = [], Counter[str]()
    vectors = index.embed([t.query for t in tasks]) if tasks else []
    for task, vector in zip(tasks, vectors, strict=True):
        hit = index.match([task.query], vector[None, :])[0]
        if hit is not None:
            reasons[f"duplicate of {hit[0]}"] += 1
            continue
        index.add([task.query], "kept", vector[None, :])
        kept.append(task)
    return kept, reasons


def check_feasibility(
    task: Task, env_factory: EnvFactory, *, fingerprint: Callable[[Any], Any] = state_fingerprint
) -> tuple[str | None, dict[str, Any]]:
    """Replay ``task``'s reference in a fresh instance.

    Returns:
        ``(reason, info)``: ``reason`` is ``None`` when the task is feasible, else why not;
        ``info`` has ``score`` (``None`` when the environment cannot score the task),
        ``state_changed``, ``read`` and, for a read task of an environment that scores by replay,
        ``expected_values`` (what its answer must quote; ``filter_tasks`` stores them in the task).
    """
    env = env_factory(task)
    info: dict[str, Any] = {"score": None, "state_changed": False, "read": False}
    by_replay = bool(getattr(env, "scores_synthetic_by_replay", False))
    observations: list[str] = []
    per_call: list[str] = []
    try:
        env.reset(task)
        before = fingerprint(env)
        for call in task.reference_solution or ():
            result = env.step(Action(tool_calls=(call,)))
            per_call.append("\n".join(obs.content for obs in result.observations))
            for obs in result.observations:
                if obs.is_error:
                    return f"error observation from {call.name}", info
                observations.append(obs.content)
                if tool_kind(call.name) == "read" and obs.content.strip().lower() not in _EMPTY:
                    info["read"] = True
        for index, value in task.metadata.get(RESOLVES_KEY) or ():  # a request that names a record: its lookup
            found = index < len(per_call) and holds_token(per_call[index], value)
            if not found:
                return "a lookup does not find the record the request names", info
        info["state_changed"] = fingerprint(env) != before
        if not info["state_changed"] and not info["read"]:
            return "no state change and nothing read", info
        answer = None
        if by_replay and not info["state_changed"]:  # a read task: checked by its answer
            values = expected_answer(task) or expected_values(task.query, task.reference_solution or (), observations)
            if not values:
                return "read task with no expected answer", info
            if task.metadata.get(FACT_KEY) and not any(holds_token(o, values[0]) for o in observations):
                return "the reads do not return the fact's answer", info
            if expected_answer(task) is None:
                info["expected_values"] = values
                task = dataclasses.replace(task, metadata={**task.metadata, EXPECTED_KEY: values})
            answer = f"The answer: {values[0]}."
            env.close()  # score the reference, with that answer, as an agent's episode of the task as stored
            env = env_factory(task)
            env.reset(task)
            for call in task.reference_solution or ():
                env.step(Action(tool_calls=(call,)))
            env.step(Action(content=answer))
        try:
            info["score"] = float(env.evaluate())
        except Exception:  # the environment cannot score this task itself: a judge will
            info["score"] = None
        if info["score"] is not None and info["score"] < 1.0:
            return "reference does not score 1.0 against itself", info
        return None, info
    finally:
        env.close()


def filter_tasks(
    candidates: Sequence[Task],
    *,
    env_factory: EnvFactory,
    index: DuplicateIndex,
    tool_names: Sequence[str] | None = None,
    fingerprint: Callable[[Any], Any] = state_fingerprint,
) -> tuple[list[Task], FilterReport]:
    """Run the three filters in order (invalid, duplicate, feasibility).

    A candidate whose id is taken (``DuplicateIndex.add_ids``: kept earlier, or in the store)
    is a duplicate too: the id hashes the world and the reference, so it is the same task phrased
    anew. Feasibility runs before a task joins the duplicate index, so an infeasible task never
    blocks a feasible near-duplicate. Kept tasks get ``metadata["filters"]`` (the filters
    passed) and ``metadata["feasibility"]`` (the replay's score and effects).
    """
    valid, invalid = drop_invalid(candidates, tool_names=tool_names)
    vectors = index.embed([t.query for t in valid]) if valid else []
    kept: list[Task] = []
    duplicate, infeasible = Counter[str](), Counter[str]()
    for task, vector in zip(valid, vectors, strict=True):
        taken = index.id_match(task.id)  # the same reference in the same world, phrased anew
        hit = (taken, 1.0) if taken is not None else index.match([task.query], vector[None, :])[0]
        if hit is not None:
            duplicate[f"duplicate of {hit[0]}"] += 1
            continue
        reason, info = check_feasibility(task, env_factory, fingerprint=fingerprint)
        if reason is not None:
            infeasible[reason] += 1
            continue
        index.add([task.query], "kept", vector[None, :])
        index.add_ids([task.id], "kept")
        extra = {EXPECTED_KEY: info.pop("expected_values")} if "expected_values" in info else {}
        metadata = {**task.metadata, **extra, "filters": ["valid", "novel", "feasible"], "feasibility": info}
        kept.append(dataclasses.replace(task, metadata=metadata))
    report = FilterReport(
        candidates=len(candidates),
        kept=len(kept),
        removed={
            "invalid": sum(invalid.values()),
            "duplicate": sum(duplicate.values()),
            "infeasible": sum(infeasible.values()),
        },
        reasons=dict(invalid + duplicate + infeasible),
    )
    return kept, report

"""Value objects of experience extraction: one extractor's answer per task, the batch result, the protocol.

An extractor reads the rollouts of ONE task and proposes scored experiences (``TaskExtraction``),
or a counted fallback (``error`` set, no experiences) when it failed. ``select_experiences``
turns the answers for many tasks into an ``ExtractionResult``: per task, the best
``max_per_task`` candidates scoring at least ``min_score`` are kept and the rest are recorded as
rejected; identical experiences (same id, i.e. same ``when_to_use`` and ``content``) from
different tasks are merged, their provenance united.

Example:
    >>> e = Experience(id=experience_id("w", "c"), when_to_use="w", content="c", score=0.9)
    >>> answer = TaskExtraction(task_id="a", extractor="rules", experiences=(e,))
    >>> result = select_experiences([answer], max_per_task=3, min_score=0.5)
    >>> [x.content for x in result.experiences], result.summary()["fallbacks"]
    (['c'], 0)
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from langgraph_evolver.types import Trajectory

from .types import Experience

__all__ = [
    "ExtractionResult",
    "Extractor",
    "ExtractorStats",
    "TaskExtraction",
    "experience_id",
    "group_by_task",
    "select_experiences",
]


def experience_id(when_to_use: str, content: str) -> str:
    """A stable id from the text: the same lesson always gets the same id (``exp-`` + 12 hex)."""
    digest = hashlib.sha256(f"{when_to_use.strip()}\n{content.strip()}".encode()).hexdigest()
    return f"exp-{digest[:12]}"


def group_by_task(trajectories: Iterable[Trajectory]) -> dict[str, list[Trajectory]]:
    """Trajectories grouped by ``task.id``, tasks in first-seen order, rollouts in input order."""
    groups: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault(t.task.id, []).append(t)
    return groups


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskExtraction:
    """One extractor's answer for the rollouts of one task."""

    task_id: str
    """``Task.id`` of the rollouts read."""
    extractor: str
    """Which extractor answered (``"rules"``, ``"llm:gpt-4.1-mini"``, ...)."""
    experiences: tuple[Experience, ...] = ()
    """Scored candidates, best first (before ``min_score``/``max_per_task`` selection)."""
    error: str | None = None
    """Why the extractor failed (a counted fallback: the task yields no experiences)."""
    attempts: int = 0
    """Model calls made (0 for the rules extractor)."""
    latency_s: float = 0.0
    """Wall time spent, backoff included, waiting for a concurrency slot excluded."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def fallback(self) -> bool:
        """Whether the extractor failed on this task."""
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["experiences"] = [e.to_dict() for e in self.experiences]
        return out


@dataclass(slots=True, kw_only=True)
class ExtractorStats:
    """Running totals of one extractor, for metrics (mutable: the extractor adds to it)."""

    tasks: int = 0
    """Tasks answered (fallbacks included)."""
    model_calls: int = 0
    fallbacks: int = 0
    """Tasks whose extraction failed (they yield no experiences)."""
    candidates: int = 0
    """Experiences proposed (before selection)."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, answer: TaskExtraction) -> None:
        self.tasks += 1
        self.model_calls += answer.attempts
        self.fallbacks += answer.fallback
        self.candidates += len(answer.experiences)
        self.input_tokens += answer.input_tokens
        self.output_tokens += answer.output_tokens
        self.cost_usd += answer.cost_usd

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtractionResult:
    """What ``extract_experiences`` returns: the kept experiences, the rejected ones, each task's answer."""

    experiences: tuple[Experience, ...]
    """Kept: at least ``min_score``, at most ``max_per_task`` per task, merged across tasks by id."""
    rejected: tuple[Experience, ...] = ()
    """Candidates dropped by validation (below ``min_score``) or beyond ``max_per_task``."""
    tasks: tuple[TaskExtraction, ...] = ()
    """Each task's answer, in task order."""

    @property
    def fallbacks(self) -> int:
        """Tasks whose extraction failed."""
        return sum(t.fallback for t in self.tasks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiences": [e.to_dict() for e in self.experiences],
            "rejected": [e.to_dict() for e in self.rejected],
            "tasks": [t.to_dict() for t in self.tasks],
        }

    def summary(self) -> dict[str, Any]:
        """Figures a training step logs: tasks, fallbacks, kept/rejected, model calls, tokens, cost."""
        n = len(self.tasks)
        return {
            "tasks": n,
            "fallbacks": self.fallbacks,
            "fallback_share": self.fallbacks / n if n else 0.0,
            "candidates": sum(len(t.experiences) for t in self.tasks),
            "kept": len(self.experiences),
            "rejected": len(self.rejected),
            "model_calls": sum(t.attempts for t in self.tasks),
            "input_tokens": sum(t.input_tokens for t in self.tasks),
            "output_tokens": sum(t.output_tokens for t in self.tasks),
            "cost_usd": sum(t.cost_usd for t in self.tasks),
            "mean_latency_s": sum(t.latency_s for t in self.tasks) / n if n else 0.0,
        }


@runtime_checkable
class Extractor(Protocol):
    """What every extractor offers; ``make_extractor`` builds one from a spec."""

    name: str
    """Identifies the extractor in answers and experience metadata."""
    stats: ExtractorStats

    async def aextract_task(
        self, trajectories: Sequence[Trajectory], *, max_experiences: int = 3, step: int | None = None
    ) -> TaskExtraction:
        """Propose scored experiences from the rollouts of one task; never raises for an extractor failure."""
        ...

    def extract_task(
        self, trajectories: Sequence[Trajectory], *, max_experiences: int = 3, step: int | None = None
    ) -> TaskExtraction:
        """Synchronous ``aextract_task``."""
        ...


def _unite(first: tuple[str, ...], second: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*first, *second)))


def select_experiences(
    answers: Sequence[TaskExtraction], *, max_per_task: int = 3, min_score: float = 0.5
) -> ExtractionResult:
    """Keep, per task, the best ``max_per_task`` candidates scoring at least ``min_score``; merge by id.

    Candidates are ranked by score (ties keep the extractor's order). A lesson found in several
    tasks is kept once, with the union of its source trajectories and tasks and the highest score.
    """
    kept: dict[str, Experience] = {}
    rejected: list[Experience] = []
    for answer in answers:
        ranked = sorted(answer.experiences, key=lambda e: -e.score)
        passing = [e for e in ranked if e.score >= min_score]
        rejected += [e for e in ranked if e.score < min_score] + passing[max_per_task:]
        for e in passing[:max_per_task]:
            seen = kept.get(e.id)
            if seen is None:
                kept[e.id] = e
                continue
            kept[e.id] = dataclasses.replace(
                seen,
                source_trajectory_ids=_unite(seen.source_trajectory_ids, e.source_trajectory_ids),
                source_task_ids=_unite(seen.source_task_ids, e.source_task_ids),
                score=max(seen.score, e.score),
            )
    return ExtractionResult(experiences=tuple(kept.values()), rejected=tuple(rejected), tasks=tuple(answers))

"""Value objects of self-attributing: step labels, one judge verdict per trajectory, the judge protocol.

A judge reads one trajectory and answers GOOD or BAD for each of its steps, with a short reason
(``StepLabel``). Its verdict is an ``Attribution``: the labels, or ``labels=None`` when the judge
failed and the trajectory falls back to outcome-only credit, plus what the verdict cost (attempts,
latency, tokens, dollars) and whether it came from the cache. ``apply_attribution`` writes a
verdict into a copy of the trajectory (``Trajectory.labels`` and ``metadata["attribution"]``);
``label_signs`` turns the labels into the ``+1``/``-1`` list ``adca_advantages`` takes, and
``summarize_attributions`` gives the figures a training step logs.

Example:
    >>> from langgraph_evolver.types import Action, Step, Task, Trajectory
    >>> steps = (Step(index=0, action=Action(content="hi")),)
    >>> traj = Trajectory(id="t1", task=Task(id="a", query="Say hi"), steps=steps)
    >>> verdict = Attribution(trajectory_id="t1", judge="reference",
    ...                       labels=(StepLabel(step=0, label="GOOD", reason="answered"),))
    >>> label_signs(apply_attribution(traj, verdict))
    [1]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from langgraph_evolver._llm import VerdictTally
from langgraph_evolver.types import Trajectory

__all__ = [
    "Attribution",
    "Judge",
    "JudgeStats",
    "Label",
    "StepLabel",
    "apply_attribution",
    "label_signs",
    "summarize_attributions",
]

Label = Literal["GOOD", "BAD"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepLabel:
    """The judge's verdict on one step."""

    step: int
    """The labelled step's ``Step.index``."""
    label: Label
    """``"GOOD"``: the step moved the agent toward completing the task; ``"BAD"``: it did not."""
    reason: str = ""
    """A short reason, for people reading reports."""

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "label": self.label, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepLabel:
        label = str(data["label"]).upper()
        if label not in ("GOOD", "BAD"):
            raise ValueError(f"A step label must be GOOD or BAD, got {data['label']!r}.")
        return cls(step=int(data["step"]), label=label, reason=str(data.get("reason") or ""))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True, kw_only=True)
class Attribution:
    """One judge verdict on one trajectory: a label per step, or an outcome-only fallback."""

    trajectory_id: str
    """``Trajectory.id`` of the judged trajectory."""
    labels: tuple[StepLabel, ...] | None
    """One label per step, in step order; ``None`` when the judge failed (outcome-only fallback)."""
    judge: str
    """Which judge answered (``"reference"``, ``"llm:gpt-4.1-mini"``, ...)."""
    error: str | None = None
    """Why the judge failed, when ``labels`` is ``None``."""
    attempts: int = 0
    """Model calls made for this trajectory (0 for the reference judge and cache hits)."""
    latency_s: float = 0.0
    """Wall time spent judging, backoff included, waiting for a concurrency slot excluded."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False
    """Whether the verdict came from the judge's cache (no model call)."""

    @property
    def fallback(self) -> bool:
        """Whether this trajectory falls back to outcome-only credit."""
        return self.labels is None

    @property
    def good_share(self) -> float | None:
        """Share of GOOD labels, ``None`` without labels."""
        if not self.labels:
            return None
        return sum(x.label == "GOOD" for x in self.labels) / len(self.labels)

    def to_dict(self) -> dict[str, Any]:
        return {
            "trajectory_id": self.trajectory_id,
            "labels": None if self.labels is None else [x.to_dict() for x in self.labels],
            "judge": self.judge,
            "error": self.error,
            "attempts": self.attempts,
            "latency_s": self.latency_s,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "cached": self.cached,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attribution:
        labels = data.get("labels")
        return cls(
            trajectory_id=str(data["trajectory_id"]),
            labels=None if labels is None else tuple(StepLabel.from_dict(x) for x in labels),
            judge=str(data.get("judge", "")),
            error=data.get("error"),
            attempts=int(data.get("attempts", 0)),
            latency_s=float(data.get("latency_s", 0.0)),
            input_tokens=int(data.get("input_tokens", 0)),
            output_tokens=int(data.get("output_tokens", 0)),
            cost_usd=float(data.get("cost_usd", 0.0)),
            cached=bool(data.get("cached", False)),
        )

    def summary(self) -> dict[str, Any]:
        """What ``apply_attribution`` stores in ``Trajectory.metadata["attribution"]``."""
        out = self.to_dict()
        del out["labels"], out["trajectory_id"]
        out["fallback"] = self.fallback
        out["good_share"] = self.good_share
        return out


@dataclass(slots=True, kw_only=True)
class JudgeStats(VerdictTally):
    """Running totals of one attribution judge, for metrics (``fallbacks``: trajectories whose
    verdict is an outcome-only fallback)."""

    trajectories: int = 0
    """Verdicts returned (cache hits included)."""
    cost_usd: float = 0.0

    def add(self, verdict: Attribution) -> None:
        VerdictTally.add(self, verdict)  # explicit: zero-argument super() fails in slotted dataclasses
        self.trajectories += 1
        self.cost_usd += verdict.cost_usd


@runtime_checkable
class Judge(Protocol):
    """What every attribution judge offers; ``make_judge`` builds one from a spec."""

    name: str
    """Identifies the judge in verdicts and cache keys."""
    stats: JudgeStats

    async def ajudge(self, trajectory: Trajectory) -> Attribution:
        """Label every step of ``trajectory``; never raises for a judge failure (returns a fallback)."""
        ...

    def judge(self, trajectory: Trajectory) -> Attribution:
        """Synchronous ``ajudge``."""
        ...


def apply_attribution(trajectory: Trajectory, attribution: Attribution) -> Trajectory:
    """A copy of ``trajectory`` with the verdict's labels and ``metadata["attribution"]`` set.

    Raises:
        ValueError: the verdict belongs to another trajectory, or does not label each step once.
    """
    if attribution.trajectory_id != trajectory.id:
        raise ValueError(
            f"The attribution is for trajectory {attribution.trajectory_id!r}, not {trajectory.id!r}; "
            "pair each verdict with the trajectory it judged."
        )
    labels = None
    if attribution.labels is not None:
        if [x.step for x in attribution.labels] != [s.index for s in trajectory.steps]:
            raise ValueError(
                f"Trajectory {trajectory.id!r} has steps {[s.index for s in trajectory.steps]} but the attribution "
                f"labels steps {[x.step for x in attribution.labels]}; a verdict must label each step once, in order."
            )
        labels = tuple(x.to_dict() for x in attribution.labels)
    metadata = {**trajectory.metadata, "attribution": attribution.summary()}
    return dataclasses.replace(trajectory, labels=labels, metadata=metadata)


def label_signs(trajectory: Trajectory) -> list[int] | None:
    """``+1`` per GOOD and ``-1`` per BAD step (``adca_advantages``' input), ``None`` when unlabelled."""
    if trajectory.labels is None:
        return None
    by_step = {int(x["step"]): str(x["label"]).upper() for x in trajectory.labels}
    missing = [s.index for s in trajectory.steps if s.index not in by_step]
    if missing:
        raise ValueError(f"Trajectory {trajectory.id!r} has no label for step(s) {missing}; re-run the judge.")
    return [1 if by_step[s.index] == "GOOD" else -1 for s in trajectory.steps]


def summarize_attributions(attributions: Sequence[Attribution]) -> dict[str, Any]:
    """Figures of a batch of verdicts: fallbacks, GOOD share, cache hits, tokens, cost, latency.

    Example:
        >>> a = Attribution(trajectory_id="t", judge="x", labels=None, error="unparseable", attempts=4)
        >>> summarize_attributions([a])["fallbacks"]
        1
    """
    labelled = [x for x in attributions if x.labels is not None]
    steps = [y for x in labelled for y in x.labels or ()]
    n = len(attributions)
    return {
        "trajectories": n,
        "fallbacks": n - len(labelled),
        "fallback_share": (n - len(labelled)) / n if n else 0.0,
        "steps_labelled": len(steps),
        "good_share": sum(y.label == "GOOD" for y in steps) / len(steps) if steps else None,
        "cache_hits": sum(x.cached for x in attributions),
        "model_calls": sum(x.attempts for x in attributions),
        "input_tokens": sum(x.input_tokens for x in attributions),
        "output_tokens": sum(x.output_tokens for x in attributions),
        "cost_usd": sum(x.cost_usd for x in attributions),
        "mean_latency_s": sum(x.latency_s for x in attributions) / n if n else 0.0,
    }

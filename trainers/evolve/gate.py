"""The promotion gate: a candidate replaces the incumbent only when its paired gain is surely above a minimum.

Both policies are evaluated on the same held-out tasks with the same sampling seeds (sample ``i`` of task
``t`` at turn ``j`` draws the same random numbers for both), so each task gives one difference of means
``d_t = candidate_t - incumbent_t`` and task difficulty cancels. The gain is the mean of ``d_t``; its
lower confidence bound is a percentile of the bootstrap over tasks (tasks resampled with replacement,
one-sided at ``confidence``). The candidate is promoted only when that bound is strictly above
``min_gain``: with the default ``min_gain: 0`` a candidate equal to the incumbent (every ``d_t`` = 0, bound
0) is kept out, and so is one whose gain is within the noise of the held-out set.

    >>> decision = decide({"a": 1.0, "b": 0.5, "c": 1.0}, {"a": 0.5, "b": 0.5, "c": 0.75}, min_gain=0.0)
    >>> decision.promote, decision.paired_gain, decision.tasks
    (True, 0.25, 3)
    >>> decide({"a": 0.5}, {"a": 0.5}).reason
    'lower bound 0.0000 of the paired gain is not above min_gain 0.0000'
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["GateDecision", "bootstrap_lower_bound", "decide"]

_FLOAT_NOISE = 1e-9
"""Means of rewards that cancel exactly can sum to 1e-17 instead of 0: a bound must clear min_gain by more."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GateDecision:
    """What the gate decided about one candidate, with the figures it decided on."""

    promote: bool
    paired_gain: float
    """Mean over the tasks both evaluations scored of candidate - incumbent (each a mean over k samples)."""
    lower_bound: float
    """The one-sided bootstrap lower bound of ``paired_gain`` at ``confidence``."""
    upper_bound: float
    """The matching upper bound (for the plot and the record; not used to decide)."""
    stderr: float
    """Standard error of ``paired_gain`` over tasks."""
    confidence: float
    min_gain: float
    tasks: int
    candidate_mean: float
    incumbent_mean: float
    reason: str
    """Why: 'lower bound ... above min_gain ...', or what kept the candidate out."""

    def to_dict(self) -> dict[str, Any]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


def bootstrap_lower_bound(diffs: list[float], *, confidence: float = 0.9, resamples: int = 2000,
                          seed: int = 0) -> tuple[float, float]:  # fmt: skip
    """The ``(1 - confidence)`` and ``confidence`` percentiles of the bootstrap mean of ``diffs`` (seeded)."""
    if not diffs:
        raise ValueError("no paired differences to bootstrap")
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    low = means[min(len(means) - 1, max(0, int((1.0 - confidence) * len(means))))]
    high = means[min(len(means) - 1, max(0, int(confidence * len(means)) - 1))]
    return low, high


def decide(candidate: Mapping[str, float], incumbent: Mapping[str, float], *, confidence: float = 0.9,
           min_gain: float = 0.0, resamples: int = 2000, seed: int = 0,
           min_tasks: int = 1) -> GateDecision:  # fmt: skip
    """Gate ``candidate`` against ``incumbent``, each ``task id -> mean reward`` on the same held-out tasks.

    Tasks only one side scored (a rollout that failed outside the policy on one side) are left out of the
    pairing; fewer than ``min_tasks`` paired tasks keep the incumbent.
    """
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")
    shared = sorted(set(candidate) & set(incumbent))
    diffs = [candidate[t] - incumbent[t] for t in shared]
    cand = statistics.fmean(candidate[t] for t in shared) if shared else 0.0
    inc = statistics.fmean(incumbent[t] for t in shared) if shared else 0.0
    common = {"confidence": confidence, "min_gain": min_gain, "tasks": len(shared), "candidate_mean": cand,
              "incumbent_mean": inc}  # fmt: skip
    if len(shared) < max(1, min_tasks):
        return GateDecision(promote=False, paired_gain=0.0, lower_bound=0.0, upper_bound=0.0, stderr=0.0,
                            reason=f"only {len(shared)} held-out tasks were scored for both (need {max(1, min_tasks)})",
                            **common)  # fmt: skip
    gain = statistics.fmean(diffs)
    stderr = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else 0.0
    low, high = bootstrap_lower_bound(diffs, confidence=confidence, resamples=resamples, seed=seed)
    promote = low > min_gain + _FLOAT_NOISE
    relation = "above" if promote else "not above"
    reason = f"lower bound {low:.4f} of the paired gain is {relation} min_gain {min_gain:.4f}"
    return GateDecision(promote=promote, paired_gain=gain, lower_bound=low, upper_bound=high, stderr=stderr,
                        reason=reason, **common)  # fmt: skip

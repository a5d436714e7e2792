"""The promotion gate: a candidate replaces the incumbent only when its paired gain is surely above a minimum.

Both policies are evaluated on the same held-out tasks with the same sampling seeds (sample ``i`` of task
``t`` at turn ``j`` draws the same random numbers for both), so the pairs are per (task, sample):
``pair_samples`` matches sample ``i`` of task ``t`` on both sides. A sample that failed outside the policy
on the candidate's side alone counts against the candidate (as ``WORST_REWARD``, or the incumbent's reward
when that is lower): its bad arguments may be what made the tool raise, and a candidate must not win by
crashing on the tasks it would lose. A sample failed on both sides, or on the incumbent's side alone, is
dropped (no verdict on either policy, and no credit to the candidate for the incumbent's outage). Each task
then gives one difference of means over its kept pairs, ``d_t = candidate_t - incumbent_t``, and task
difficulty cancels. The gain is the mean of ``d_t``; its lower confidence bound is a percentile of the
bootstrap over tasks (tasks resampled with replacement, one-sided at ``confidence``). The candidate is
promoted only when that bound is strictly above ``min_gain`` and at least ``min_tasks`` tasks were paired:
with the default ``min_gain: 0`` a candidate equal to the incumbent (every ``d_t`` = 0, bound 0) is kept
out, and so is one whose gain is within the noise of the held-out set.

    >>> decision = decide({"a": 1.0, "b": 0.5, "c": 1.0}, {"a": 0.5, "b": 0.5, "c": 0.75}, min_gain=0.0)
    >>> decision.promote, decision.paired_gain, decision.tasks
    (True, 0.25, 3)
    >>> decide({"a": 0.5}, {"a": 0.5}).reason
    'lower bound 0.0000 of the paired gain is not above min_gain 0.0000'
    >>> pairing = pair_samples({("a", 0): None, ("a", 1): 1.0}, {("a", 0): 0.5, ("a", 1): 1.0})
    >>> pairing.candidate, pairing.incumbent, pairing.counted_against
    ({'a': 0.5}, {'a': 0.75}, 1)
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

__all__ = ["WORST_REWARD", "GateDecision", "Pairing", "bootstrap_lower_bound", "decide", "decide_paired",
           "pair_samples", "sample_rewards"]  # fmt: skip

_FLOAT_NOISE = 1e-9
"""Means of rewards that cancel exactly can sum to 1e-17 instead of 0: a bound must clear min_gain by more."""

WORST_REWARD = 0.0
"""What a sample the candidate alone failed outside the policy scores: the floor of ``evaluate()``'s [0, 1]."""

Sample = tuple[str, int]
"""(task id, sample index): the unit the paired seeds make comparable."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GateDecision:
    """What the gate decided about one candidate, with the figures it decided on."""

    promote: bool
    paired_gain: float
    """Mean over the paired tasks of candidate - incumbent (each a mean over the task's kept sample pairs)."""
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
    min_tasks: int = 1
    pairs: int | None = None
    """(task, sample) pairs kept (``decide_paired``; None when the gate was given task means)."""
    counted_against: int = 0
    """Samples the candidate alone failed outside the policy, scored ``WORST_REWARD`` for it."""
    dropped: int = 0
    """Samples failed on both sides or on the incumbent's alone: left out."""

    def to_dict(self) -> dict[str, Any]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


@dataclass(frozen=True, slots=True)
class Pairing:
    """Per-task means over the kept (task, sample) pairs, the same task keys on both sides."""

    candidate: dict[str, float]
    incumbent: dict[str, float]
    pairs: int
    counted_against: int
    dropped: int


def sample_rewards(trajectories: Iterable[Any]) -> dict[Sample, float | None]:
    """``(task id, sample index) -> reward`` of an evaluation; None where the rollout failed outside the policy.

    A policy failure (context overflow, a runaway episode) scores 0, as in the evaluation's own figures.
    """
    from langgraph_evolver.scoring import failure_kind, outcome_reward

    return {(t.task.id, t.rollout_index): None if failure_kind(t) == "infrastructure" else outcome_reward(t) or 0.0
            for t in trajectories}  # fmt: skip


def pair_samples(candidate: Mapping[Sample, float | None], incumbent: Mapping[Sample, float | None]) -> Pairing:
    """Match sample ``i`` of task ``t`` on both sides (a sample one side lacks counts as failed there)."""
    kept: dict[str, list[tuple[float, float]]] = {}
    counted_against = dropped = 0
    for key in sorted(set(candidate) | set(incumbent)):
        cand, inc = candidate.get(key), incumbent.get(key)
        if inc is None:  # the incumbent's outage (or both sides'): no verdict, no credit
            dropped += 1
            continue
        if cand is None:  # the candidate alone failed: its loss
            cand, counted_against = min(WORST_REWARD, inc), counted_against + 1
        kept.setdefault(key[0], []).append((cand, inc))
    return Pairing(candidate={t: statistics.fmean(c for c, _ in p) for t, p in kept.items()},
                   incumbent={t: statistics.fmean(i for _, i in p) for t, p in kept.items()},
                   pairs=sum(len(p) for p in kept.values()), counted_against=counted_against,
                   dropped=dropped)  # fmt: skip


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


def decide_paired(candidate: Mapping[Sample, float | None], incumbent: Mapping[Sample, float | None],
                  **settings: Any) -> GateDecision:  # fmt: skip
    """``decide`` on the (task, sample) pairs of two evaluations (``sample_rewards`` of each)."""
    pairing = pair_samples(candidate, incumbent)
    decision = decide(pairing.candidate, pairing.incumbent, **settings)
    return replace(decision, pairs=pairing.pairs, counted_against=pairing.counted_against, dropped=pairing.dropped)


def decide(candidate: Mapping[str, float], incumbent: Mapping[str, float], *, confidence: float = 0.9,
           min_gain: float = 0.0, resamples: int = 2000, seed: int = 0,
           min_tasks: int = 1) -> GateDecision:  # fmt: skip
    """Gate ``candidate`` against ``incumbent``, each ``task id -> mean reward`` on the same held-out tasks.

    Tasks only one side has are left out of the pairing (``decide_paired`` pairs samples first, so both
    sides have the same tasks); fewer than ``min_tasks`` paired tasks keep the incumbent.
    """
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")
    need = max(1, min_tasks)
    shared = sorted(set(candidate) & set(incumbent))
    diffs = [candidate[t] - incumbent[t] for t in shared]
    cand = statistics.fmean(candidate[t] for t in shared) if shared else 0.0
    inc = statistics.fmean(incumbent[t] for t in shared) if shared else 0.0
    common = {"confidence": confidence, "min_gain": min_gain, "tasks": len(shared), "candidate_mean": cand,
              "incumbent_mean": inc, "min_tasks": need}  # fmt: skip
    if len(shared) < need:
        return GateDecision(promote=False, paired_gain=0.0, lower_bound=0.0, upper_bound=0.0, stderr=0.0,
                            reason=f"only {len(shared)} held-out tasks were paired (need {need})",
                            **common)  # fmt: skip
    gain = statistics.fmean(diffs)
    stderr = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else 0.0
    low, high = bootstrap_lower_bound(diffs, confidence=confidence, resamples=resamples, seed=seed)
    promote = low > min_gain + _FLOAT_NOISE
    relation = "above" if promote else "not above"
    reason = f"lower bound {low:.4f} of the paired gain is {relation} min_gain {min_gain:.4f}"
    return GateDecision(promote=promote, paired_gain=gain, lower_bound=low, upper_bound=high, stderr=stderr,
                        reason=reason, **common)  # fmt: skip

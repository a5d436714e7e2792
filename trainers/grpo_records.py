"""What the ranks share in one GRPO generation step, and the step's metrics computed from it.

``EvolverGRPOTrainer._generate_and_score_completions`` gathers two kinds of record across ranks:

- ``RolloutScore``, one per rollout: what every rank needs to compute the group advantages
  (gathered once, in rank order, so rank ``r``'s rollouts are a contiguous slice).
- ``RankSummary``, one per rank: its training rows and rollout counts, which set the padding
  every rank agrees on, the loss normalizer and the logged figures (gathered once; ``total``
  sums them).

``log_generation`` turns them into the step's ``reward``/``rollout/*``/``samples/*`` metrics.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from langgraph_evolver.attribution import label_signs
from langgraph_evolver.scoring import failure_kind, outcome_reward, shaped_reward, well_formed_counts
from langgraph_evolver.types import Trajectory

from .samples import Sample

__all__ = ["RankSummary", "RolloutScore", "log_generation", "version_staleness"]


def version_staleness(trajectory: Trajectory, version_steps: dict[str, int], step: int) -> tuple[int, int]:
    """``(sum of staleness, calls counted)`` over the rollout's LLM calls: for each call, the steps
    between ``step`` and the step whose weights answered it (``model_version``: what the endpoint
    reported as serving the call). Calls by versions this run did not publish are not counted."""
    total = known = 0
    for tr in trajectory.transitions:
        if tr.model_version in version_steps:
            total += step - version_steps[tr.model_version]
            known += 1
    return total, known


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutScore:
    """One rollout as the advantage computation sees it."""

    group_id: str
    """The rollouts of one task in one step share it: GRPO's group."""
    reward: float | None
    """``shaped_reward``: what the advantages are computed from; ``None`` leaves the rollout out."""
    outcome: float | None
    """``outcome_reward``: what the ``reward`` metrics report."""
    labels: list[int] | None
    """The judge's GOOD/BAD step signs (self-attributing), else ``None``."""

    @classmethod
    def of(cls, trajectory: Trajectory, *, malformed_call_penalty: float, policy_failure_reward: float,
           attributing: bool) -> RolloutScore:  # fmt: skip
        return cls(
            group_id=trajectory.group_id,
            reward=shaped_reward(trajectory, malformed_call_penalty, policy_failure_reward=policy_failure_reward),
            outcome=outcome_reward(trajectory),
            labels=label_signs(trajectory) if attributing else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RankSummary:
    """One rank's rollouts and training rows of a step, before padding rows are added."""

    samples: int
    """Its training rows, a probe row included: the busiest rank sets every rank's row count."""
    rows: int
    """Rows with trained tokens (not a probe row)."""
    transitions: int
    """LLM calls in those rows: the sequence-normalized losses divide by them."""
    trained_tokens: int
    """Trained tokens in those rows: the token-summed losses divide by them."""
    row_tokens: int
    """Tokens of those rows (prompt and completion)."""
    rollouts: int
    turns: int
    """Steps over all rollouts."""
    malformed: int
    """The policy's tool-call attempts that did not parse (``well_formed_counts``)."""
    attempts: int
    policy_failures: int
    """Rollouts that failed because of the policy (``failure_kind``): scored."""
    staleness: int
    """``version_staleness`` summed over the rollouts' LLM calls ..."""
    staleness_n: int
    """... and the calls it counted."""
    failed_reasons: str
    """The last error line of each infrastructure failure, ``"; "``-terminated."""

    @classmethod
    def of(cls, trajectories: Sequence[Trajectory], samples: Sequence[Sample], version_steps: dict[str, int],
           step: int) -> RankSummary:  # fmt: skip
        well_formed, attempts = well_formed_counts(trajectories)
        turns = staleness = staleness_n = policy_failures = 0
        reasons = ""
        for t in trajectories:
            turns += len(t.steps)
            policy_failures += failure_kind(t) == "policy"
            total, known = version_staleness(t, version_steps, step)
            staleness += total
            staleness_n += known
            if failure_kind(t) == "infrastructure" and t.errors:
                reasons += t.errors[-1][:120] + "; "
        real = [s for s in samples if s.trained_tokens]  # not a probe row
        return cls(samples=len(samples), rows=len(real), transitions=sum(s.transitions for s in real),
                   trained_tokens=sum(s.trained_tokens for s in real), row_tokens=sum(len(s) for s in real),
                   rollouts=len(trajectories), turns=turns, malformed=attempts - well_formed, attempts=attempts,
                   policy_failures=policy_failures, staleness=staleness, staleness_n=staleness_n,
                   failed_reasons=reasons)  # fmt: skip

    @classmethod
    def total(cls, ranks: Sequence[RankSummary]) -> RankSummary:
        """Every count summed over ``ranks``, the failure reasons joined in rank order."""
        return cls(**{f.name: "".join(getattr(r, f.name) for r in ranks) if f.name == "failed_reasons" else
                      sum(getattr(r, f.name) for r in ranks) for f in fields(cls)})  # fmt: skip


def log_generation(metrics: dict[str, list[Any]], scores: Sequence[RolloutScore], adv: Any, total: RankSummary,
                   rollout_s: float) -> None:  # fmt: skip
    """Append the step's reward, rollout and row figures to TRL's ``metrics`` (``adv``: the advantages' result)."""
    outcome = [s.outcome for s in scores if s.outcome is not None]
    shaped = [s.reward for s in scores if s.reward is not None]
    metrics["reward"].append(statistics.fmean(outcome) if outcome else 0.0)
    metrics["reward_std"].append(statistics.pstdev(outcome) if len(outcome) > 1 else 0.0)
    metrics["reward_shaped"].append(statistics.fmean(shaped) if shaped else 0.0)
    metrics["success"].append(sum(r == 1.0 for r in outcome) / len(outcome) if outcome else 0.0)
    metrics["zero_variance_share"].append(adv.zero_variance_share)
    metrics["frac_reward_zero_std"].append(adv.zero_variance_share)
    metrics["rollout/failed"].append(sum(s.reward is None for s in scores))
    metrics["rollout/policy_failures"].append(total.policy_failures)
    metrics["rollout/turns_mean"].append(total.turns / max(total.rollouts, 1))
    metrics["rollout/well_formed_calls"].append(1 - total.malformed / max(total.attempts, 1))
    metrics["rollout/per_s"].append(total.rollouts / max(rollout_s, 1e-9))
    metrics["samples/rows"].append(total.rows)
    metrics["samples/transitions"].append(total.transitions)
    metrics["samples/trained_tokens"].append(total.trained_tokens)
    metrics["samples/row_tokens"].append(total.row_tokens)
    if total.staleness_n:
        metrics["policy/staleness_mean"].append(total.staleness / total.staleness_n)

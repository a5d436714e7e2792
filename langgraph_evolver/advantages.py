"""Advantages from rewards: pure functions over plain lists (no torch).

Two estimators: GRPO (one advantage per rollout) and ADCA (one per step, from a judge's
GOOD/BAD step labels plus the outcome; docs/self-attributing.md).

GRPO: the rollouts of one task form a group; each rollout's advantage is its reward minus the
group mean, divided by the group's standard deviation (``scale="group"``), by the batch's
(``"batch"``) or not at all (``"none"``). A reward of ``None`` marks a rollout that failed for
reasons outside the policy (environment down, endpoint error): it is left out of its group's
baseline and gets no advantage. A group whose valid rewards are all equal teaches nothing
("zero-variance"); it is counted, because above about half of the groups GRPO barely moves.

Example:
    >>> adv = group_advantages([1.0, 0.0, 0.5, 0.5], ["a", "a", "b", "b"])
    >>> [round(a, 3) for a in adv.advantages], adv.zero_variance_groups
    ([0.707, -0.707, 0.0, 0.0], 1)
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["ADCAAdvantages", "GroupAdvantages", "adca_advantages", "adca_alpha", "group_advantages"]

Scale = Literal["group", "batch", "none"]
ProcessStandardization = Literal["trajectory", "pooled"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupAdvantages:
    """Per-rollout advantages and what the groups looked like."""

    advantages: list[float | None]
    """One per rollout; ``None`` where the reward was ``None`` (the rollout failed)."""
    groups: int
    """Groups with at least one valid reward."""
    zero_variance_groups: int
    """Groups with fewer than two valid rewards, or all valid rewards equal: no gradient."""

    @property
    def zero_variance_share(self) -> float:
        return self.zero_variance_groups / self.groups if self.groups else 0.0


def _std(values: Sequence[float]) -> float:
    """Sample standard deviation (n - 1), as TRL uses; 0.0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def group_advantages(
    rewards: Sequence[float | None],
    group_ids: Sequence[Hashable],
    *,
    scale: Scale = "group",
    eps: float = 1e-4,
    tol: float = 1e-9,
) -> GroupAdvantages:
    """GRPO advantages: ``(r - mean_group) / (std + eps)``, with ``None`` rewards left out.

    Args:
        rewards: One reward per rollout, ``None`` for a failed rollout.
        group_ids: One id per rollout; rollouts of the same task in one step share it.
        scale: ``"group"`` (divide by the group's std, GRPO), ``"batch"`` (by the std of all
            valid rewards) or ``"none"`` (Dr. GRPO: only subtract the group mean).
        eps: Added to the std before dividing.
        tol: Groups whose valid rewards differ by no more than this are zero-variance.
    """
    if len(rewards) != len(group_ids):
        raise ValueError(f"{len(rewards)} rewards but {len(group_ids)} group ids; they must pair up.")
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}.")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids):
        if rewards[i] is not None:
            members[g].append(i)
    valid = [float(r) for r in rewards if r is not None]
    batch_std = _std(valid)
    advantages: list[float | None] = [None] * len(rewards)
    zero_variance = 0
    for idx in members.values():
        values = [float(rewards[i]) for i in idx]  # type: ignore[arg-type]
        flat = len(values) < 2 or max(values) - min(values) <= tol
        zero_variance += flat
        mean = math.fsum(values) / len(values)
        denom = {"group": _std(values) + eps, "batch": batch_std + eps, "none": 1.0}[scale]
        for i, v in zip(idx, values, strict=True):
            advantages[i] = 0.0 if flat else (v - mean) / denom
    return GroupAdvantages(advantages=advantages, groups=len(members), zero_variance_groups=zero_variance)


@dataclass(frozen=True, slots=True, kw_only=True)
class ADCAAdvantages:
    """Per-step advantages of every rollout, and what the groups looked like."""

    step_advantages: list[list[float] | None]
    """One list per rollout (one value per step), ``None`` where the reward was ``None``."""
    groups: int
    zero_variance_groups: int
    """Groups whose outcome rewards are all equal (the process channel may still teach)."""
    no_signal_groups: int
    """Groups where every step advantage is 0: neither channel teaches."""
    fallbacks: int
    """Rollouts without labels (judge failed): outcome-only advantages."""

    @property
    def zero_variance_share(self) -> float:
        return self.zero_variance_groups / self.groups if self.groups else 0.0


def adca_alpha(step: int, *, alpha: float = 0.1, decay: float | None = None, cutoff: int | None = None) -> float:
    """The process-reward weight at training step ``step``.

    ``decay`` multiplies alpha once per step (``alpha * decay**step``); after ``cutoff`` steps the
    weight is 0 and ADCA is plain GRPO (outcome advantages broadcast to every step).
    """
    if cutoff is not None and step >= cutoff:
        return 0.0
    return alpha * (decay**step if decay is not None else 1.0)


def adca_advantages(
    rewards: Sequence[float | None],
    labels: Sequence[Sequence[int] | None],
    group_ids: Sequence[Hashable],
    *,
    alpha: float = 0.1,
    process_standardization: ProcessStandardization = "trajectory",
    eps: float = 1e-4,
    tol: float = 1e-9,
) -> ADCAAdvantages:
    """ADCA step advantages: standardized process and outcome rewards, summed over the suffix.

    Within each task group the process rewards (``+1`` GOOD / ``-1`` BAD) are standardized, and
    so, separately, are the outcome rewards. Step ``t`` gets ``r_t = alpha * process_t``, plus the
    standardized outcome at the last step; its advantage is ``A_t = sum_{k >= t} r_k``
    (undiscounted), to be broadcast to the tokens of that step.

    The process statistics (``process_standardization``): ``"trajectory"`` (AgentEvolver's
    formulation, the default) takes the mean and sample std of each labelled rollout's *average*
    label, so every rollout weighs the same whatever its length; ``"pooled"`` takes them over all
    steps of the group pooled, where long rollouts dominate (a success with 8 GOOD steps beside a
    failure ``[BAD, GOOD]``: pooled GOOD +0.32 / BAD -2.85, per trajectory +0.71 / -2.12).

    Args:
        rewards: Outcome reward per rollout, ``None`` for a failed rollout (no advantages).
        labels: Per rollout, one ``+1``/``-1`` per step, or ``None`` when the judge failed: that
            rollout's steps get no process reward (outcome-only), and they do not enter the
            group's process statistics.
        group_ids: Rollouts of one task in one training step share an id.
        alpha: Weight of the process channel (0.1 published; 0 = GRPO with per-step broadcast).
        process_standardization: ``"trajectory"`` (per-rollout average labels, the paper's) or
            ``"pooled"`` (all steps of the group).

    Example:
        >>> adv = adca_advantages([1.0, 0.0], [[1, 1], [1, -1]], ["a", "a"], alpha=0.1)
        >>> [[round(a, 3) for a in steps] for steps in adv.step_advantages]
        [[0.848, 0.778], [-0.848, -0.919]]
    """
    if not (len(rewards) == len(labels) == len(group_ids)):
        raise ValueError(f"{len(rewards)} rewards, {len(labels)} label lists and {len(group_ids)} group ids: "
                         "give one of each per rollout.")  # fmt: skip
    if process_standardization not in ("trajectory", "pooled"):
        raise ValueError(f"process_standardization must be 'trajectory' (AgentEvolver's) or 'pooled', "
                         f"got {process_standardization!r}.")  # fmt: skip
    for i, lab in enumerate(labels):
        if lab is not None and any(x not in (1, -1) for x in lab):
            raise ValueError(f"labels of rollout {i} must be +1 (GOOD) or -1 (BAD), got {list(lab)}.")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids):
        if rewards[i] is not None:
            members[g].append(i)
    out: list[list[float] | None] = [None] * len(rewards)
    zero_variance = no_signal = fallbacks = 0
    for idx in members.values():
        outcomes = [float(rewards[i]) for i in idx]  # type: ignore[arg-type]
        flat = len(outcomes) < 2 or max(outcomes) - min(outcomes) <= tol
        zero_variance += flat
        mean_o, std_o = math.fsum(outcomes) / len(outcomes), _std(outcomes)
        labelled = [[float(x) for x in lab] for i in idx if (lab := labels[i])]
        if process_standardization == "pooled":
            stats = [x for lab in labelled for x in lab]
        else:  # one value per rollout: its average label
            stats = [math.fsum(lab) / len(lab) for lab in labelled]
        mean_p = math.fsum(stats) / len(stats) if stats else 0.0
        std_p = _std(stats)
        group_signal = False
        for i, r in zip(idx, outcomes, strict=True):
            lab = labels[i]
            fallbacks += lab is None
            out_hat = 0.0 if flat else (r - mean_o) / (std_o + eps)
            n_steps = len(lab) if lab is not None else 0
            if lab is None or alpha == 0.0:
                process = [0.0] * n_steps
            else:
                process = [0.0 if std_p <= tol else alpha * (x - mean_p) / (std_p + eps) for x in lab]
            if n_steps == 0:  # fallback (or no steps): the outcome alone, as one value for the whole rollout
                out[i] = [out_hat]
                group_signal |= out_hat != 0.0
                continue
            step_rewards = process
            step_rewards[-1] += out_hat
            advantages, running = [0.0] * n_steps, 0.0
            for t in range(n_steps - 1, -1, -1):
                running += step_rewards[t]
                advantages[t] = running
            out[i] = advantages
            group_signal |= any(a != 0.0 for a in advantages)
        no_signal += not group_signal
    return ADCAAdvantages(step_advantages=out, groups=len(members), zero_variance_groups=zero_variance,
                          no_signal_groups=no_signal, fallbacks=fallbacks)  # fmt: skip

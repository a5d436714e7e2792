"""Advantages from rewards: pure functions over plain lists (no torch).

GRPO: the rollouts of one task form a group; each rollout's advantage is its reward minus the
group mean, divided by the group's standard deviation (``scale="group"``), by the batch's
(``"batch"``) or not at all (``"none"``). A reward of ``None`` marks a rollout that failed for
reasons outside the policy (environment down, endpoint error): it is left out of its group's
baseline and gets no advantage. A group whose valid rewards are all equal teaches nothing
("zero-variance"); it is counted, because above about half of the groups GRPO barely moves.

Example:
    >>> adv = group_advantages([1.0, 0.0, 0.5, 0.5], ["a", "a", "b", "b"])
    >>> [round(a, 3) for a in adv.advantages], adv.zero_variance_groups
    ([1.0, -1.0, 0.0, 0.0], 1)
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["GroupAdvantages", "group_advantages"]

Scale = Literal["group", "batch", "none"]


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

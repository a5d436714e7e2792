"""The one table of loss types: for each TRL ``loss_type`` the trainer accepts, how its multi-turn rows are weighted
and how TRL's aggregation of them is made exact. Every other module reads ``loss_type`` through ``loss_spec``.

TRL keeps its own per-token loss for every type (the clipped ratio, SAPO's soft gate, CISPO's clipped weight, ...);
only what the trainer must change around it differs, and that is what an entry says:

- **sequence-normalized** (grpo, sapo, dr_grpo, luspo: ``call_weight`` and ``row_factor`` set): TRL normalizes per
  row (a mean over rows of each row's token mean or sum). With merged rows a row holds several LLM calls, and
  padding/probe rows count as rows, so TRL's aggregation would weigh calls by how they were packed. The trainer
  makes them exact instead: each call's tokens carry the weight its own sequence would give them (``call_weight``,
  folded into the advantages by ``samples.trajectory_samples``) and ``row_factor`` turns TRL's per-row
  normalization into a token sum over the number of calls of the whole batch (TRL's ``dapo`` normalizer), which
  is TRL's objective with one row per call and no padding. Exact for the policy term; the KL term cannot be
  reweighted that way, so these need ``beta: 0`` (checked in the config).
- **token-summed** (dapo, bnpo, cispo, vespo): merged rows are exact as they are. bnpo averages per micro-batch
  (``micro_batch_mean``: a micro-batch of padding rows only is scaled out, and a token budget that splits
  micro-batches is refused); vespo weighs each row by a sequence-level ratio (``row_weighted``: merging is
  refused, and it folds the TIS weight in itself).

Adding a loss type is one entry here plus its exactness test against TRL's own loss (``tests/test_grpo_loss.py``);
a loss type TRL adds later is refused by the config until it has both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["LOSS_TYPES", "LossType", "loss_spec"]


@dataclass(frozen=True)
class LossType:
    """What the trainer does around TRL's loss for one ``loss_type``."""

    call_weight: Callable[[int, int], float] | None = None
    """``(trained tokens of one LLM call, max_completion_length) -> weight`` of each of its tokens (sequence-
    normalized types); None for the token-summed ones, whose rows need no reweighting."""
    row_factor: Callable[[Any, int, int], Any] | None = None
    """``(completion mask, rows of the micro-batch, max_completion_length) -> per-row factor`` which, divided by the
    calls per micro-batch and multiplied into the advantages, undoes TRL's per-row normalization (TRL aggregates
    grpo/sapo ``mean_b(sum_t / M_b) / G``, dr_grpo ``sum / (B L) / G``, luspo ``mean_b(sum_t) / G``; the target is
    ``sum / (n G)``, so the factor is M_b B, B L and B). Set exactly when ``call_weight`` is."""
    micro_batch_mean: bool = False
    """Averages over each micro-batch's tokens (bnpo): padding-only micro-batches are scaled out of the divisor."""
    row_weighted: bool = False
    """Weighs each row by a sequence-level ratio (vespo): a merged row would share it; TRL folds TIS in itself."""

    @property
    def sequence_normalized(self) -> bool:
        return self.call_weight is not None


def _token_count(mask: Any, rows: int, max_completion_length: int) -> Any:
    return mask.sum(-1).clamp(min=1.0) * rows


def _full(value: Callable[[int, int], float]) -> Callable[[Any, int, int], Any]:
    """A row factor the same for every row: ``value(rows, max_completion_length)``."""

    def factor(mask: Any, rows: int, max_completion_length: int) -> Any:
        import torch

        return torch.full((rows,), value(rows, max_completion_length), device=mask.device)

    return factor


_TOKEN_MEAN = LossType(call_weight=lambda n, length: 1.0 / max(n, 1), row_factor=_token_count)

LOSS_TYPES: dict[str, LossType] = {
    # token-summed: exact with merged and padding rows as they are
    "dapo": LossType(),
    "bnpo": LossType(micro_batch_mean=True),
    "cispo": LossType(),
    "vespo": LossType(row_weighted=True),
    # sequence-normalized: per-call weights in the advantages, TRL's per-row normalization undone
    "grpo": _TOKEN_MEAN,  # per-sequence token mean
    "sapo": _TOKEN_MEAN,
    "dr_grpo": LossType(
        call_weight=lambda n, length: 1.0 / length,  # per-sequence sum / max_completion_length
        row_factor=_full(lambda rows, length: rows * length),
    ),
    "luspo": LossType(call_weight=lambda n, length: 1.0, row_factor=_full(lambda rows, length: float(rows))),
}
"""Every loss type the config accepts, in the order its error message lists them."""


def loss_spec(name: str) -> LossType:
    """The entry of ``name``; a ValueError naming the accepted ones (the config refuses others before this)."""
    try:
        return LOSS_TYPES[name]
    except KeyError:
        raise ValueError(f"loss_type={name!r} is not in trainers/loss_types.py's table; use one of "
                         f"{', '.join(LOSS_TYPES)}.") from None  # fmt: skip

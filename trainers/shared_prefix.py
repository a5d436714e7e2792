"""A supervised batch whose rows begin alike, its shared beginning computed once.

Every chat an ``adapt`` run supervises on opens with the same system turn: the environment's tools, documented
(522 of the 578-1,507 tokens of a budget-server chat). Padded into one batch of 4, that opening is computed 4
times in the forward and the backward. Here it is computed once, with gradients, and its keys and values are
repeated for each row before the rest of each row runs over them. The loss and the gradients are those of the
ordinary forward (the opening's states do not depend on what follows it under causal attention, and autograd sums
each row's share back into the one computation); only the order of float additions differs.

Used through ``batch_loss`` by ``trainers.tiny.supervised_step(..., share_prefix=True)`` for ``trainers.evolve
adapt``'s supervise phase.
``python -m benchmarks.supervise_shared_prefix`` measures it against the ordinary step on one batch of real chats.
"""

from __future__ import annotations

from typing import Any

MIN_SHARED = 32
"""Below this many shared tokens the ordinary forward is used: the saving would not pay for a second call."""


def shared_prefix_length(ids: Any, labels: Any, mask: Any) -> int:
    """How many leading tokens every row of a batch has alike and unpadded, and that no row trains on: neither
    them nor the token after the last of them (whose prediction the last of them makes). 0 for a single row.

    Example:
        >>> import torch
        >>> ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 1, 0]])
        >>> labels = torch.tensor([[-100, -100, -100, -100, 9], [-100, -100, -100, 1, -100]])
        >>> shared_prefix_length(ids, labels, torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]))
        2
    """
    if ids.shape[0] < 2:
        return 0
    alike = ((ids == ids[:1]) & (mask == 1)).all(dim=0).long().cumprod(0).sum()
    untrained = (labels == -100).all(dim=0).long().cumprod(0).sum()
    return int(min(alike, untrained - 1, ids.shape[1] - 1))


def shared_prefix_loss(model: Any, ids: Any, labels: Any, mask: Any, prefix: int) -> Any:
    """The causal LM loss of a batch (the mean over its labelled tokens, as transformers computes it) whose rows
    share their first ``prefix`` tokens (``shared_prefix_length``): those run once, the rest of each row over
    their keys and values."""
    import torch
    import torch.nn.functional as F

    rows, width = ids.shape
    opening = model(input_ids=ids[:1, :prefix], attention_mask=mask[:1, :prefix], use_cache=True, logits_to_keep=1)
    cache = opening.cache
    cache.batch_repeat_interleave(rows)
    positions = torch.arange(prefix, width, dtype=torch.long).unsqueeze(0).expand(rows, -1)
    rest = model(input_ids=ids[:, prefix:], attention_mask=mask, cache=cache, position_ids=positions,
                 use_cache=True)  # fmt: skip
    targets = labels[:, prefix + 1 :]
    logits = rest.logits[:, :-1].float()
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100,
                            reduction="sum")  # fmt: skip
    return total / (targets != -100).sum().clamp(min=1)


def batch_loss(model: Any, ids: Any, labels: Any, mask: Any, share_prefix: bool = True) -> Any:
    """A ``padded_batches`` batch's causal LM loss: with ``share_prefix`` its shared untrained opening runs once
    where it is ``MIN_SHARED`` tokens or more (``shared_prefix_loss``), else the ordinary forward."""
    prefix = shared_prefix_length(ids, labels, mask) if share_prefix else 0
    if prefix >= MIN_SHARED:
        return shared_prefix_loss(model, ids, labels, mask, prefix)
    return model(input_ids=ids, attention_mask=mask, labels=labels).loss

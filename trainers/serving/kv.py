"""The KV cache of a running batch: transformers' ``DynamicCache`` with room to grow in place.

``DynamicLayer.update`` concatenates the new column onto the whole cache at every decode step,
copying ``rows x columns`` keys and values per layer per token: for 64 agent rows of a few
hundred prompt tokens each that copy costs more than the model itself. ``GrowableLayer`` keeps
spare columns after the filled ones and writes each step's keys and values into them; ``keys`` /
``values`` stay plain tensors (views of the filled part), so the engine's join / select / trim
can keep replacing them (the next update then copies once into a fresh buffer).

``stack_prefixes`` and ``row_kv`` move KV between a batch and the prefix cache.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from .cache import KvSlicer, _Block

__all__ = ["GrowableLayer", "new_batch_cache", "row_kv", "stack_prefixes"]


class GrowableLayer(DynamicLayer):
    """A ``DynamicLayer`` whose updates write into preallocated spare columns instead of concatenating."""

    def __init__(self, spare_columns: int = 64) -> None:
        super().__init__()
        self.spare_columns = spare_columns
        """Columns allocated beyond the filled ones when a buffer is (re)allocated."""
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None
        self._keys_view: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.keys.numel() == 0:
            self.keys, self.values = key_states, value_states  # the prefill: no copy at all
            self._keys_view = None
            return self.keys, self.values
        filled, new = self.keys.shape[-2], key_states.shape[-2]
        buffer = self._key_buffer
        if self.keys is not self._keys_view or buffer is None or buffer.shape[-2] < filled + new:
            # keys were replaced (prefill, join, select, trim) or the spare columns ran out: one copy
            shape = (*self.keys.shape[:-2], filled + new + self.spare_columns, self.keys.shape[-1])
            self._key_buffer = self.keys.new_empty(shape)
            self._value_buffer = self.values.new_empty(shape)
            self._key_buffer[..., :filled, :] = self.keys
            self._value_buffer[..., :filled, :] = self.values
        assert self._key_buffer is not None and self._value_buffer is not None
        self._key_buffer[..., filled : filled + new, :] = key_states
        self._value_buffer[..., filled : filled + new, :] = value_states
        self._view(filled + new)
        return self.keys, self.values

    def _view(self, filled: int) -> None:
        assert self._key_buffer is not None and self._value_buffer is not None
        self.keys = self._keys_view = self._key_buffer[..., :filled, :]
        self.values = self._value_buffer[..., :filled, :]

    def _owns_keys(self) -> bool:
        return self._key_buffer is not None and self.keys is self._keys_view

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows at ``indices``: one copy, spare columns included (no second copy at the next step)."""
        if not self._owns_keys():
            return super().batch_select_indices(indices)
        filled = self.keys.shape[-2]
        self._key_buffer, self._value_buffer = self._key_buffer[indices], self._value_buffer[indices]
        self._view(filled)

    def drop_leading(self, columns: int) -> None:
        """Forget the first ``columns`` columns (padding for every row): a view, no copy."""
        if not self._owns_keys():
            self.keys, self.values = self.keys[..., columns:, :], self.values[..., columns:, :]
            return
        filled = self.keys.shape[-2]
        self._key_buffer = self._key_buffer[..., columns:, :]
        self._value_buffer = self._value_buffer[..., columns:, :]
        self._view(filled - columns)

    def stack(self, other: DynamicLayer, width: int) -> None:
        """Become the rows of ``self`` then those of ``other``, each right-aligned in ``width`` columns.

        One copy into a new buffer with spare columns (concatenating left-padded copies and then
        growing would copy every column three times).
        """
        a, b = (self.keys, self.values), (other.keys, other.values)
        shape = (a[0].shape[0] + b[0].shape[0], *a[0].shape[1:-2], width + self.spare_columns, a[0].shape[-1])
        self._key_buffer, self._value_buffer = a[0].new_zeros(shape), a[1].new_zeros(shape)
        rows = a[0].shape[0]
        for buffer, mine, theirs in ((self._key_buffer, a[0], b[0]), (self._value_buffer, a[1], b[1])):
            buffer[:rows, ..., width - mine.shape[-2] : width, :] = mine
            buffer[rows:, ..., width - theirs.shape[-2] : width, :] = theirs
        self._view(width)


def new_batch_cache(config: Any, spare_columns: int) -> DynamicCache:
    """An empty cache for one batch: ``GrowableLayer``s, or transformers' own layers if ``spare_columns`` is 0."""
    cache = DynamicCache(config=config)
    if spare_columns > 0:
        cache.layers = [GrowableLayer(spare_columns) for _ in cache.layers]
    return cache


def stack_prefixes(chains: list[list[_Block]], width: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, each row's cached blocks concatenated and right-aligned in ``width`` columns (zeros before)."""
    template = next(block for chain in chains for block in chain).kv
    stacked = []
    for layer, (k0, v0) in enumerate(template):
        keys = k0.new_zeros((len(chains), k0.shape[0], width, k0.shape[-1]))
        values = v0.new_zeros((len(chains), v0.shape[0], width, v0.shape[-1]))
        for i, chain in enumerate(chains):
            if chain:
                k = torch.cat([b.kv[layer][0] for b in chain], dim=-2)
                keys[i, :, width - k.shape[-2] :] = k
                values[i, :, width - k.shape[-2] :] = torch.cat([b.kv[layer][1] for b in chain], dim=-2)
        stacked.append((keys, values))
    return stacked


def row_kv(cache: Any, mask: torch.Tensor, row: int) -> KvSlicer:
    """``kv_of`` for ``PrefixCache.insert``: the real tokens of batch row ``row`` (padding skipped).

    ``cache`` is a transformers ``DynamicCache`` (``layers[i].keys``: ``[rows, kv_heads, columns,
    head_dim]``) and ``mask`` its ``[rows, columns]`` padding mask.
    """
    columns = mask[row].nonzero()[:, 0]

    def kv_of(start: int, stop: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        cols = columns[start:stop]
        return [(layer.keys[row][:, cols], layer.values[row][:, cols]) for layer in cache.layers]

    return kv_of

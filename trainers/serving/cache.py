"""Prefix caching: the KV of prompt prefixes kept across requests, in blocks of tokens.

An agent re-sends its whole conversation at every call, and the rollouts of one task share the
system prompt, the tool list and the question: most of each prompt was already run through the
model. The cache keeps the keys and values of every full block of ``block_size`` tokens that the
engine computed (the prompt after prefill, and prompt + completion when a row finishes), chained
like vLLM's automatic prefix caching: a block is found by its model, its parent block and its
own tokens, so a hit is always an exact token prefix. The dictionary compares the token tuples
themselves, so a hash collision can never serve the wrong KV.

Entries belong to one model name (the base model or one LoRA adapter); the engine drops an
adapter's entries when the adapter is replaced or unloaded, and every entry when the base
weights change. Least recently used blocks are evicted first, leaves before their parents.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

__all__ = ["KvSlicer", "PrefillStats", "PrefixCache", "PrefixCacheStats"]

KvSlicer = Callable[[int, int], list[tuple[torch.Tensor, torch.Tensor]]]
"""``(start, stop) -> [(keys, values) per layer]`` for tokens ``start:stop`` of one sequence."""


@dataclass(slots=True, kw_only=True)
class PrefillStats:
    """What prefills cost: prompt tokens asked for vs run through the model."""

    prompt_tokens: int = 0
    """Prompt tokens of every prefilled row."""
    computed_tokens: int = 0
    """Prompt tokens actually run (the rest came from the prefix cache or an identical prompt in the same prefill)."""

    @property
    def saved_tokens(self) -> int:
        return self.prompt_tokens - self.computed_tokens


@dataclass(slots=True, kw_only=True)
class PrefixCacheStats:
    """Counters of the prefix cache since the server started."""

    queried_tokens: int = 0
    """Prompt tokens looked up (every prefilled prompt)."""
    hit_tokens: int = 0
    """Prompt tokens whose KV came from the cache instead of a forward pass."""
    inserted_blocks: int = 0
    evicted_blocks: int = 0
    invalidated_blocks: int = 0
    """Blocks dropped because their adapter or the base weights changed."""

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0


@dataclass(slots=True, eq=False)
class _Block:
    id: int
    key: tuple[str, int, tuple[int, ...]]
    kv: list[tuple[torch.Tensor, torch.Tensor]]
    """Per layer, keys and values of the block's tokens: ``[kv_heads, block_size, head_dim]``."""


class PrefixCache:
    """Keys and values of token-prefix blocks, per model name, LRU-evicted past ``max_tokens``.

    Args:
        block_size: tokens per block; only full blocks are cached.
        max_tokens: cached tokens at most (all models together).
    """

    def __init__(self, *, block_size: int = 16, max_tokens: int = 65536) -> None:
        if block_size < 1 or max_tokens < block_size:
            raise ValueError(f"need 1 <= block_size <= max_tokens, got {block_size} and {max_tokens}")
        self.block_size = block_size
        self.max_blocks = max_tokens // block_size
        self.stats = PrefixCacheStats()
        self._blocks: OrderedDict[tuple[str, int, tuple[int, ...]], _Block] = OrderedDict()
        self._next_id = 1

    def __len__(self) -> int:
        """Blocks held."""
        return len(self._blocks)

    @property
    def cached_tokens(self) -> int:
        return len(self._blocks) * self.block_size

    def match(self, model: str, tokens: Sequence[int], *, limit: int | None = None) -> list[_Block]:
        """The longest chain of cached blocks that is a prefix of ``tokens`` (at most ``limit`` tokens).

        Counts ``tokens`` as queried and the chain's tokens as hits; marks the chain recently used.
        """
        limit = len(tokens) if limit is None else min(limit, len(tokens))
        chain = self._walk(model, tokens, limit // self.block_size)
        self.stats.queried_tokens += len(tokens)
        self.stats.hit_tokens += len(chain) * self.block_size
        self._touch(chain)
        return chain

    def insert(self, model: str, tokens: Sequence[int], kv_of: KvSlicer) -> int:
        """Cache every full block of ``tokens`` that is missing; returns how many blocks were added.

        ``kv_of(start, stop)`` gives, per layer, the keys and values of ``tokens[start:stop]``
        (``[kv_heads, stop - start, head_dim]``); it is called only for missing blocks, and the
        tensors are copied, so views of a larger batch cache are fine.
        """
        b = self.block_size
        present = self._walk(model, tokens, len(tokens) // b)
        chain = list(present)
        parent = present[-1].id if present else 0
        added = 0
        for start in range(len(present) * b, len(tokens) // b * b, b):
            key = (model, parent, tuple(tokens[start : start + b]))
            kv = [(k.clone(), v.clone()) for k, v in kv_of(start, start + b)]
            block = _Block(id=self._next_id, key=key, kv=kv)
            self._next_id += 1
            self._blocks[key] = block
            chain.append(block)
            parent = block.id
            added += 1
        self.stats.inserted_blocks += added
        self._touch(chain)
        self._evict()
        return added

    def drop(self, model: str | None = None) -> int:
        """Forget the blocks of ``model`` (every block when None); returns how many were dropped."""
        if model is None:
            dropped = len(self._blocks)
            self._blocks.clear()
        else:
            keys = [key for key in self._blocks if key[0] == model]
            for key in keys:
                del self._blocks[key]
            dropped = len(keys)
        self.stats.invalidated_blocks += dropped
        return dropped

    def _walk(self, model: str, tokens: Sequence[int], max_blocks: int) -> list[_Block]:
        b = self.block_size
        chain: list[_Block] = []
        parent = 0
        for i in range(max_blocks):
            block = self._blocks.get((model, parent, tuple(tokens[i * b : (i + 1) * b])))
            if block is None:
                break
            chain.append(block)
            parent = block.id
        return chain

    def _touch(self, chain: list[_Block]) -> None:
        # Leaf first, root last: a parent is always used more recently than its children, so
        # eviction takes leaves first and never strands reachable children of an evicted parent.
        for block in reversed(chain):
            self._blocks.move_to_end(block.key)

    def _evict(self) -> None:
        while len(self._blocks) > self.max_blocks:
            self._blocks.popitem(last=False)
            self.stats.evicted_blocks += 1

"""Disjoint task pools for the sandbox: ``sft`` (warm start), ``rl`` (GRPO), ``validation`` and ``test``.

Why: the first real-model recipe supervised train tasks 00000-02999 in the warm start and then ran
GRPO on train 00000-00179, and 12 of its 40 held-out tasks repeated a supervised chat (issue 42). A
task is "the same" when it has the same id, or the same *signature*: the same query and the same
reference calls. The generator reuses names, dates and titles, so two different worlds can give the
same signature (every ``wallet_balance`` task is "How much money is in my wallet?" -> ``get_balance``).

Each pool reads its own index range of a task stream (so ids never collide) and drops every task whose
signature is already in a pool of higher priority (``test`` > ``validation`` > ``rl`` > ``sft``), read
at that pool's full capacity, then keeps drawing until it has the size asked for. A pool is therefore
the same list whatever size the other pools are asked for: ``sft:3000`` never meets ``test:300``.
The cost is that templates with few distinct signatures (``wallet_balance``: 1, ``count_events``: 9,
``contact_phone``: 20) are mostly or wholly held by the higher-priority pools.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from langgraph_evolver.types import Task

from .tasks import SPLIT_SIZES, VALIDATION_START, generate_tasks, make_task

__all__ = ["POOLS", "Pool", "is_pool", "pool_tasks", "reference_calls", "signature", "split_tasks"]


@dataclass(frozen=True)
class Pool:
    """One pool: ``capacity`` tasks from ``split``'s stream, indices ``start`` to ``stop`` (exclusive)."""

    name: str
    split: str
    start: int
    stop: int
    capacity: int
    default_size: int


POOLS: dict[str, Pool] = {  # in priority order: a pool drops the signatures of every pool before it
    "test": Pool("test", "test", 0, 1_000_000, capacity=150, default_size=75),
    "validation": Pool("validation", "train", VALIDATION_START, 300_000, capacity=150, default_size=75),
    "rl": Pool("rl", "train", 100_000, VALIDATION_START, capacity=2_000, default_size=600),
    "sft": Pool("sft", "train", 0, 100_000, capacity=50_000, default_size=4_000),
}


def is_pool(name: str) -> bool:
    return name in POOLS


def reference_calls(task: Task) -> list[list[Any]]:
    """A task's reference calls as ``[[name, arguments], ...]`` (``[]`` without a reference)."""
    return [[c.name, c.arguments] for c in task.reference_solution or []]


def signature(task: Task) -> str:
    """The (query, reference calls) key two tasks share when a model could answer one by recalling the other."""
    calls = reference_calls(task)  # a task without one: its query alone
    return json.dumps([task.query, calls], sort_keys=True, separators=(",", ":"))


@cache
def _taken(name: str) -> frozenset[str]:
    """The signatures of every pool above ``name`` (each at its full capacity)."""
    names = list(POOLS)
    taken: set[str] = set()
    for above in names[: names.index(name)]:
        taken.update(signature(t) for t in _draw(above, POOLS[above].capacity))
    return frozenset(taken)


@lru_cache(maxsize=16)
def _draw(name: str, n: int) -> tuple[Task, ...]:
    pool, taken, out = POOLS[name], _taken(name), []
    for index in range(pool.start, pool.stop):
        if len(out) == n:
            break
        task = make_task(pool.split, index)
        if signature(task) not in taken:
            out.append(task)
    if len(out) < n:
        raise ValueError(f"pool {name!r} ran out of tasks at {len(out)} (asked for {n})")
    return tuple(out)


def pool_tasks(name: str, n: int | None = None) -> list[Task]:
    """The first ``n`` tasks of pool ``name`` (its default size if ``n`` is None); deterministic."""
    if name not in POOLS:
        raise ValueError(f"unknown pool {name!r}; the sandbox has pools {list(POOLS)}")
    pool = POOLS[name]
    n = pool.default_size if n is None else n
    if not 0 <= n <= pool.capacity:
        raise ValueError(f"pool {name!r} holds at most {pool.capacity} tasks (asked for {n}): ask for fewer, or "
                         "raise its capacity in env_tools/sandbox/pools.py (it changes the pools below)")  # fmt: skip
    return list(_draw(name, n))  # the taken set is fixed, so every size is a prefix of the same stream


def split_tasks(split: str) -> list[Task]:
    """``NAME`` or ``NAME:N``: a pool (``sft``, ``rl``, ``validation``, ``test``) or the legacy ``train`` split
    (the training stream from index 0, which overlaps ``sft``: kept for the seed task set and old runs)."""
    name, _, count = split.partition(":")
    if count and not count.isdigit():
        raise ValueError(f"split {split!r}: write NAME or NAME:N with N a whole number, e.g. rl:600")
    n = int(count) if count else None
    if name in POOLS:
        return pool_tasks(name, n if n is not None else SPLIT_SIZES.get(name))
    if name in SPLIT_SIZES:
        return generate_tasks(name, n if n is not None else SPLIT_SIZES[name])
    raise ValueError(f"Unknown split {split!r}; the sandbox has the pools {list(POOLS)} and the split 'train' "
                     "(write NAME or NAME:N)")  # fmt: skip

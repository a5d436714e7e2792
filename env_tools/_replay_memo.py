"""What a reference replay found, remembered per process.

Scoring a synthesized (or trace) task replays its reference in a fresh instance of the world and compares the end
states (``ToolsEnvironment._reference_state_score``); a written MCP task with ``check`` calls reads them after
the same kind of replay (``McpEnvironment._check_score``). For an MCP server that instance is a fresh server
process (stdio) or session: about a second of CPU, as much again as the episode's own server, and the same
answer for every episode of the task (k samples, each model evaluated, each GRPO group). ``ReplayMemo`` keeps
those answers, keyed by what builds the world (the server, the task's initial state and setup calls, its
reference and what is read after it), least recently used first out.

A server whose fresh state differs from start to start (random ids, the clock) was never scored reliably by
replay; remembering its first replay changes nothing there.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["ReplayMemo", "replay_key"]

_MISSING = object()


def replay_key(*parts: Any) -> str:
    """A stable key of JSON-able ``parts`` (anything else by ``repr``).

    Example:
        >>> replay_key("srv", {"b": 1, "a": [2]}) == replay_key("srv", {"a": [2], "b": 1})
        True
    """
    return json.dumps(parts, sort_keys=True, default=repr)


class ReplayMemo:
    """A thread-safe, bounded map from ``replay_key`` to what a replay found (fingerprints, check results).

    Example:
        >>> memo, runs = ReplayMemo(max_entries=2), []
        >>> replay = lambda: runs.append(1) or ("s0", "s1")
        >>> memo.get_or_run("k", replay), memo.get_or_run("k", replay), len(runs)
        (('s0', 's1'), ('s0', 's1'), 1)
        >>> memo.hits, memo.misses
        (1, 1)
    """

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_run(self, key: str, replay: Callable[[], Any]) -> Any:
        """The remembered answer for ``key``, else ``replay()``'s (remembered unless it raised)."""
        found = self._lookup(key)
        if found is _MISSING:
            found = self._keep(key, replay())  # outside the lock: two first episodes may both replay, and agree
        return found

    async def aget_or_run(self, key: str, replay: Callable[[], Awaitable[Any]]) -> Any:
        """``get_or_run`` for an async ``replay``."""
        found = self._lookup(key)
        if found is _MISSING:
            found = self._keep(key, await replay())
        return found

    def _lookup(self, key: str) -> Any:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return self._entries[key]
            self.misses += 1
            return _MISSING

    def _keep(self, key: str, found: Any) -> Any:
        with self._lock:
            self._entries[key] = found
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return found

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

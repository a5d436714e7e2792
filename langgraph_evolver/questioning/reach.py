"""What the explorations reached, and where to start the next one (issue 39).

``explain_unreached`` names the tools no exploration called without an error and says what was
missing: the id arguments no earlier result held, and which tools' results could have held them
(their names or descriptions name the record), with how often those ran. It replaces the old advice
"raise --max-explorations", which spends time without changing what the explorer can read.

``next_setup`` gives an environment with no worlds of its own (an MCP server: one initial state)
several initial states: every other exploration starts from a fresh session on which some of an
earlier exploration's successful writes are replayed (``task.metadata["setup"]``), so tasks also
come from a world that already holds permits or bookings. Only for environments that apply
``setup`` calls (``supports_task_setup``, the MCP environment).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from langgraph_evolver.types import Trajectory

from .explore_errors import names_record as _names_record
from .profile import singular, snake, tool_entity, tool_kind

__all__ = ["explain_unreached", "next_setup"]

_MAX_SETUP = 4


def _writes(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The calls of ``trajectory`` that wrote without an error, in order, as setup calls."""
    descriptions = trajectory.metadata.get("tool_descriptions") or {}
    out = []
    for call, obs in trajectory.tool_results():
        if obs.is_error or not isinstance(call.arguments, dict):
            continue
        if tool_kind(call.name, descriptions.get(call.name, "")) == "write":
            out.append({"name": call.name, "arguments": dict(call.arguments)})
    return out


def next_setup(trajectories: Sequence[Trajectory], round_index: int) -> list[dict[str, Any]] | None:
    """Setup calls for exploration ``round_index`` (0-based), or ``None`` for the environment's own initial state.

    Even rounds start from the initial state (creations are tasks too); odd rounds replay the first 1-4 writes
    (more in later rounds) of the previous exploration, after that exploration's own setup, on a fresh session.
    """
    if round_index % 2 == 0 or not trajectories:
        return None
    previous = trajectories[-1]
    if not previous.metadata.get("task_setup"):
        return None
    writes = _writes(previous)
    if not writes:
        return None
    count = 1 + (round_index // 2) % _MAX_SETUP
    own = list(previous.task.metadata.get("setup") or [])
    return (own + writes[:count])[-2 * _MAX_SETUP :] if own else writes[:count]


def _mentions(name: str, description: str, noun: str) -> bool:
    text = f"{snake(name).replace('_', ' ')} {description}".lower()
    return bool(re.search(rf"\b{re.escape(noun)}s?\b", text))


def explain_unreached(trajectories: Sequence[Trajectory]) -> list[dict[str, Any]]:
    """The tools no exploration called without an error, each with what was missing.

    Each entry: ``tool``; ``calls`` (tries) and ``last_error``; ``missing`` (its required id arguments, e.g.
    ``["slot_id"]``); ``could_come_from`` (tools whose name or description names the record, with how many
    of their calls succeeded: the results that should have held the id).
    """
    if not trajectories:
        return []
    required: dict[str, list[str]] = {}
    descriptions: dict[str, str] = {}
    for t in trajectories:
        required.update(t.metadata.get("tool_arguments") or {})
        descriptions.update(t.metadata.get("tool_descriptions") or {})
    tries: dict[str, int] = {}
    successes: dict[str, int] = {}
    errors: dict[str, str] = {}
    for t in trajectories:
        for call, obs in t.tool_results():
            tries[call.name] = tries.get(call.name, 0) + 1
            if obs.is_error:
                errors[call.name] = obs.content[:200]
            else:
                successes[call.name] = successes.get(call.name, 0) + 1
    out = []
    for name in sorted(required):
        if successes.get(name):
            continue
        missing = [a for a in required[name] if _names_record(a)]
        sources = []
        for arg in missing:
            words = snake(arg)
            noun = singular(words[:-3]) if words.endswith("_id") else tool_entity(name)
            for other in sorted(required):
                names = tool_entity(other) == noun or _mentions(other, descriptions.get(other, ""), noun)
                if other != name and names:
                    sources.append(f"{other} ({successes.get(other, 0)} of {tries.get(other, 0)} calls answered)")
        out.append({"tool": name, "calls": tries.get(name, 0), "last_error": errors.get(name),
                    "missing": missing, "could_come_from": list(dict.fromkeys(sources))})  # fmt: skip
    return out

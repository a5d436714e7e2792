"""What a correct episode of a synthesized read task must show, decided when the task is made.

A task that only reads (its reference changes nothing) cannot be checked by the end state: every
episode leaves the state as it found it. It is checked by its answer instead. When the reference
is replayed (``questioning.filters.check_feasibility``), the values its last read returned that the question
does not already name (``expected_values``) are stored in ``task.metadata["expected_values"]``; an
explicit ``task.metadata["answer"]`` (a string or a list, by hand or from an LLM synthesizer) wins.
Environments that score synthesized tasks by replay (``env_tools.replay.replay_score``) check the
final answer for them, and the calls made (name and arguments, normalised) as partial credit.

In the core (not under ``questioning/``, which re-exports it as ``questioning.answers``) because
``env_tools`` scores by it too.

Example:
    >>> from langgraph_evolver.types import ToolCall
    >>> ref = [ToolCall(name="find_resident", arguments={"name": "Chen Li"})]
    >>> expected_values("What is the home zone of Chen Li?", ref, ['{"name": "Chen Li", "zone": "Z4"}'])
    ['Z4']
    >>> calls_match_share(ref, [ToolCall(name="find_resident", arguments={"name": "chen li "})])
    1.0
    >>> calls_match_share(ref, [ToolCall(name="find_resident", arguments={"name": "Ana"})])
    0.0
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from langgraph_evolver.environment import Environment
from langgraph_evolver.tool_results import holds_token, leaves, read_result
from langgraph_evolver.types import Task, ToolCall

__all__ = [
    "AUDIT_FIELDS",
    "EXPECTED_KEY",
    "calls_match_share",
    "expected_answer",
    "expected_values",
    "folded",
    "normalized_arguments",
    "state_fingerprint",
]

AUDIT_FIELDS = frozenset({"viewed"})
"""Top-level state fields that log what was looked at (the sandbox's ``World.viewed``), not state:
``state_fingerprint`` leaves them out, so a task that only reads does not count as changing state."""


EXPECTED_KEY = "expected_values"
"""``task.metadata`` key of the values a correct answer to a read task quotes (one is enough)."""
_MAX_VALUES = 50
_MAX_VALUE_CHARS = 200
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:/+-]*[A-Za-z0-9]|[0-9]")


def folded(text: str) -> str:
    """``text`` with case and spacing folded: two texts that fold alike say the same (a request, a value)."""
    return " ".join(text.lower().split())


def _leaves(value: Any) -> Iterator[str]:
    """The numbers and non-blank strings of parsed data (``results.leaves``), as text."""
    for leaf in leaves(value):
        if isinstance(leaf, int | float):
            yield str(leaf)
        elif isinstance(leaf, str) and leaf.strip():
            yield leaf.strip()


def _text_values(text: str) -> Iterator[str]:
    """Value-like words of a non-JSON observation: numbers, ids and names (a digit or a capital letter)."""
    for word in _WORD.findall(text):
        if any(c.isdigit() for c in word) or any(c.isupper() for c in word[1:]) or word[:1].isupper():
            yield word


def _values_of(observation: str) -> Iterator[str]:
    """The values one result holds, read as MCP servers send it (``results.read_result``): the leaves of one JSON
    document or several, each line of a list of lines whole ("old town", not "old" and "town"), and for prose
    the records it names and its value-like words."""
    parsed = read_result(observation)
    if isinstance(parsed, str):  # prose naming no record, or a JSON-encoded string: its words
        yield from _text_values(parsed)
        return
    yield from _leaves(parsed)


def expected_values(query: str, reference: Sequence[ToolCall], observations: Sequence[str]) -> list[str]:
    """The values the reference's reads returned that answer ``query``: from the last observation that has any
    (the last read answers the question; earlier ones found the ids it needed), leaving out what the question
    or the reference's arguments already name. Empty when the reads gave nothing to check an answer by."""
    given = [folded(query), *(folded(str(v)) for c in reference for v in _leaves(c.arguments))]

    def named(value: str) -> bool:
        plain = folded(value)
        return any(plain == g or holds_token(g, plain) for g in given)

    for observation in reversed(observations):
        values: list[str] = []
        for value in _values_of(observation):
            if len(value) > _MAX_VALUE_CHARS or value in values or named(value):
                continue
            values.append(value)
            if len(values) == _MAX_VALUES:
                break
        if values:
            return values
    return []


def expected_answer(task: Task) -> list[str] | None:
    """What a correct final answer to ``task`` quotes (any one of them): ``metadata["answer"]``, else
    ``metadata["expected_values"]``; ``None`` when the task carries neither."""
    answer = task.metadata.get("answer")
    if answer is not None and answer != "" and answer != []:
        return [str(a) for a in answer] if isinstance(answer, list | tuple) else [str(answer)]
    values = task.metadata.get(EXPECTED_KEY)
    return [str(v) for v in values] if values else None


def normalized_arguments(arguments: Any) -> str:
    """Arguments as a comparable string: keys sorted, strings trimmed and case-folded, 2 == 2.0."""

    def norm(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k): norm(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [norm(v) for v in value]
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float):
            return float(value)
        return folded(str(value))

    return json.dumps(norm(arguments), sort_keys=True)


def calls_match_share(reference: Sequence[ToolCall], calls: Sequence[ToolCall]) -> float:
    """The share of ``reference``'s calls the agent made with the same name and arguments (normalised); each
    agent call counts once. 0.0 for an empty reference."""
    if not reference:
        return 0.0
    made = [(c.name, normalized_arguments(c.arguments)) for c in calls]
    matched = 0
    for call in reference:
        key = (call.name, normalized_arguments(call.arguments))
        if key in made:
            made.remove(key)
            matched += 1
    return matched / len(reference)


def _by_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _by_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return sorted(([repr(k), _by_value(v)] for k, v in value.items()), key=lambda kv: kv[0])
    if isinstance(value, set | frozenset):
        return sorted(repr(_by_value(v)) for v in value)
    if isinstance(value, list | tuple):
        return [_by_value(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return repr(value)


def state_fingerprint(env: Environment) -> str:
    """A comparable snapshot of an environment's state, by value: its ``state_snapshot()`` when it has one
    (an environment whose state lives elsewhere, e.g. an MCP server), else its ``world`` or ``state``.

    Audit logs of reads (``AUDIT_FIELDS``) are left out: looking at a record does not change it.
    """
    snapshot = getattr(env, "state_snapshot", None)
    if callable(snapshot):
        return json.dumps(_by_value(snapshot()), sort_keys=True, default=repr)
    state = getattr(env, "world", None)
    if state is None:
        state = getattr(env, "state", None)
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        fields = [f.name for f in dataclasses.fields(state) if f.name not in AUDIT_FIELDS]
        state = {name: getattr(state, name) for name in fields}
    return json.dumps(_by_value(state), sort_keys=True, default=repr)

"""What the schema explorer (``questioning/explore.py``) learns from a failed call, and the two argument helpers
both use.

Three lessons, tried in order on each error:

- ``learn_offered``: values the error lists ("countries: FR, DE") become hints for the argument it complained about.
- ``learn_prerequisite``: an error that names another tool ("pay_dues first") queues that tool, then the call again.
- ``learn_match``: an error that names a value seen earlier, other than the call's own ("depot D1 is in Lyon, not in
  Berlin, where the parcel goes"; "TRK3 is created; only a parcel in transit can be held") queues a read that takes
  that value (``list_depots(city="Berlin")``, ``list_shipments(status="in_transit")``), then the call again with the
  argument the error quoted drawn from that read's result. A write that needs two records that agree (a depot in the
  parcel's city, a parcel in transit) is otherwise reached only by chance: the explorer fills each argument alone.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from typing import Any, Protocol

from langgraph_evolver.types import ToolCall, ToolObservation

from .offered import suggested_values
from .profile import snake

__all__ = [
    "MAX_RETRIES",
    "ExplorerState",
    "json_type",
    "learn_match",
    "learn_offered",
    "learn_prerequisite",
    "names_record",
    "redrawn",
]

MAX_RETRIES = 2
"""How often one tool's failed call is retried after each lesson (a prerequisite, a matching value)."""
_REDRAW = "redraw:"
"""A queued retry's id prefix; the rest is ``[[argument, failed value], ...]`` to draw again when it is made."""


class ExplorerState(Protocol):
    """What the lessons read and change of the schema explorer (``explore._Explorer``)."""

    tools: dict[str, dict[str, Any]]
    """Each tool's ``props``, ``required`` and ``writes``."""
    hints: dict[str, list[str]]
    """Values an error offered, by argument name."""
    queue: list[ToolCall]
    """Calls to make before drawing new ones."""
    retried: dict[str, int]
    seen: list[Any]
    """The values the explorer has read (``explore._Seen``: ``key``, ``value``, ``entity``, ``step``)."""
    rng: random.Random
    step: int
    last_call: ToolCall | None

    def arguments(self, name: str, *, recent: bool) -> dict[str, Any]: ...

    def candidates(
        self, arg: str, json_type: str | None, *, recent: bool, only_recent: bool = False, loose: bool = True
    ) -> list[Any]: ...


def names_record(arg: str) -> bool:
    """An ``id``/``<x>_id``/``<x>Id`` argument: only a value seen earlier can fill it, never an invented one."""
    return arg == "id" or snake(arg).endswith("_id")


def _args(call: ToolCall) -> dict[str, Any]:
    """A copy of the explorer's call's arguments (always an object: the explorer writes them)."""
    return dict(call.arguments) if isinstance(call.arguments, dict) else {}


def json_type(prop: Mapping[str, Any]) -> str | None:
    """A schema property's JSON type (the first non-null one of a list such as ``["string", "null"]``)."""
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    return kind if isinstance(kind, str) else None


def _last_failure(explorer: ExplorerState, obs: ToolObservation) -> ToolCall | None:
    call = explorer.last_call
    if call is None or call.name != obs.name or not isinstance(call.arguments, dict):
        return None
    return call


def learn_offered(explorer: ExplorerState, obs: ToolObservation) -> bool:
    """Values the error offers (``suggested_values``) become hints for the argument it names: the one whose value it
    quotes, else the one it names ('decision must be "approved" or "rejected"'), else the call's only string
    argument ("no service to 'country 15'; countries: FR, DE"). True when the error offered values."""
    call, offered = _last_failure(explorer, obs), suggested_values(obs.content)
    if call is None or not offered:
        return bool(offered)
    strings = {a: v for a, v in _args(call).items() if isinstance(v, str) and not names_record(a)}
    words = obs.content.lower().replace("_", " ")
    named = [a for a, v in strings.items() if v and v in obs.content] or [
        a for a in strings if re.search(rf"\b{re.escape(snake(a).replace('_', ' '))}\b", words)
    ]
    for arg in named or (list(strings) if len(strings) == 1 else []):
        explorer.hints[arg] = offered
    return True


def _may_retry(explorer: ExplorerState, call: ToolCall, lesson: str) -> bool:
    """Whether ``call`` may be queued again after ``lesson`` (nothing queued yet, fewer than ``MAX_RETRIES`` of that
    lesson for its tool, no argument the explorer never had); counts the retry when it may."""
    key = call.name if lesson == "prerequisite" else f"{call.name}:{lesson}"
    if explorer.queue or explorer.retried.get(key, 0) >= MAX_RETRIES:
        return False
    if any(isinstance(v, str) and v.startswith("unknown-") for v in _args(call).values()):
        return False  # an id it never had: calling another tool first would not make the same call work
    explorer.retried[key] = explorer.retried.get(key, 0) + 1
    return True


def learn_prerequisite(explorer: ExplorerState, obs: ToolObservation) -> bool:
    """An error that names another tool ("owes a fine of 1.50; pay_fine first") queues that tool, with the arguments
    it shares with the failed call and the amounts the error names, then the failed call again (``MAX_RETRIES`` per
    tool). True when it queued."""
    call = _last_failure(explorer, obs)
    if call is None:
        return False
    text = obs.content.replace(f"tool {call.name}", "")  # "Error executing tool borrow: ..." names itself
    named = [n for n in explorer.tools if n != call.name and re.search(rf"(?<![\w]){re.escape(n)}(?![\w])", text)]
    if not named or not _may_retry(explorer, call, "prerequisite"):
        return False
    first = named[0]
    args = explorer.arguments(first, recent=True)
    amounts = [float(x) for x in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", text)]
    for arg, prop in explorer.tools[first]["props"].items():
        if arg in call.arguments:
            args[arg] = call.arguments[arg]
        elif amounts and json_type(prop) in ("number", "integer") and not names_record(arg):
            value = amounts[0] if json_type(prop) == "number" else round(amounts[0])
            args[arg] = int(value) if float(value).is_integer() and json_type(prop) == "integer" else value
    explorer.queue = [ToolCall(name=first, arguments=args), ToolCall(name=call.name, arguments=_args(call))]
    return True


def _words(text: str) -> str:
    """Lower case, words only, padded: ``in_transit`` and "in transit," compare equal."""
    return " " + re.sub(r"[\W_]+", " ", text.lower()) + " "


def learn_match(explorer: ExplorerState, obs: ToolObservation) -> bool:
    """An error that quotes the call's own values and names values seen earlier under other keys: a read taking one,
    then the call again with the quoted arguments drawn from the read's result. Of the values, the one farthest from
    the first quoted value (an error states what the record is next to it, what it needs after: "D1 is in Lyon, not
    in Berlin"); an error naming one value only says what the record is ("TRK2 is delivered"), so nothing is queued.
    True when it queued."""
    call = _last_failure(explorer, obs)
    if call is None:
        return False
    text = _words(obs.content)
    quoted = [(a, v) for a, v in _args(call).items() if isinstance(v, str | int) and f" {_words(str(v)).strip()} "
              in text and not isinstance(v, bool)]  # fmt: skip
    if not quoted:
        return False
    at = text.find(_words(str(quoted[0][1])).strip())
    own = {_words(str(v)) for v in _args(call).values()}
    options: dict[str, tuple[int, str, str, Any]] = {}  # value -> (distance, read tool, argument, value)
    checked: set[str] = set()  # a value seen at many steps is looked for once
    for seen in explorer.seen:
        value = seen.value
        if not isinstance(value, str) or len(value) < 3 or names_record(seen.key) or value in checked:
            continue
        checked.add(value)
        where = text.find(_words(value))
        if where < 0 or _words(value) in own:
            continue
        taker = _reader_taking(explorer, value, exclude=call.name)
        if taker is not None:
            options[value] = (abs(where - at), *taker, value)
    if len(options) < 2 or not _may_retry(explorer, call, "match"):  # one value: what the record is, not what it needs
        return False
    _, tool, arg, value = max(options.values(), key=lambda o: o[0])
    required = explorer.tools[tool]["required"]  # no optional filter that could hide the records wanted
    args = {**{k: v for k, v in explorer.arguments(tool, recent=False).items() if k in required}, arg: value}
    redraw = json.dumps([[a, v] for a, v in quoted])
    explorer.queue = [ToolCall(name=tool, arguments=args),
                      ToolCall(name=call.name, arguments=_args(call), id=_REDRAW + redraw)]  # fmt: skip
    return True


def _reader_taking(explorer: ExplorerState, value: str, *, exclude: str) -> tuple[str, str] | None:
    """A read tool (sorted by name) and its argument that takes ``value``: one whose values seen so far include it."""
    for name in sorted(explorer.tools):
        tool = explorer.tools[name]
        if name == exclude or tool["writes"]:
            continue
        for arg, prop in tool["props"].items():
            if names_record(arg) or json_type(prop) not in ("string", None):
                continue
            allowed = prop.get("enum")
            if allowed and value in allowed:
                return name, arg
            if not allowed and value in explorer.candidates(arg, "string", recent=False, loose=False):
                return name, arg
    return None


def redrawn(explorer: ExplorerState, queued: ToolCall) -> ToolCall | None:
    """A queued call as it is to be made: a retry of ``learn_match`` with its quoted arguments drawn from the last
    step's results (another value than the one that failed); ``None`` when that result held none. Other queued
    calls as they are."""
    if not queued.id.startswith(_REDRAW):
        return queued
    args = dict(queued.arguments) if isinstance(queued.arguments, dict) else {}
    latest = {s.value for s in explorer.seen if s.step == explorer.step - 1}
    changed = False
    for arg, failed in json.loads(queued.id[len(_REDRAW) :]):
        prop = explorer.tools.get(queued.name, {}).get("props", {}).get(arg, {})
        fresh = [v for v in explorer.candidates(arg, json_type(prop), recent=False) if v in latest and v != failed]
        if fresh:
            args[arg], changed = explorer.rng.choice(fresh), True
    return ToolCall(name=queued.name, arguments=args) if changed else None

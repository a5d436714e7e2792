"""A schema-driven offline explorer: valid random tool calls, arguments from what it has seen.

No model is involved, so exploration runs offline on any environment. A breadth phase of
``n_breadth`` calls samples diverse tools (each tool at most once while unused ones can be
filled); a depth phase of ``n_depth`` calls prefers tools whose arguments can be filled from
the most recent observations (an id a search just returned, then the call that uses it). Argument
values come from every JSON value seen in earlier observations, matched by argument name in tiers
(exact name; entity id: ``booking_id`` <- an ``id`` returned by a ``*booking*`` tool or found under
a ``bookings`` key; suffix: ``outbound_flight_code`` <- ``flight_code``; last, any id-like value of
the type), and from the schema (enums, numbers named in the description, examples); nested
arguments (``$ref``, ``anyOf``, objects, arrays) are filled field by field. An ``id``/``*_id``
argument is never invented. Deterministic for a given seed.

Tools that harm the exploration are left out (``avoid``): one whose failing call took
``SLOW_FAILURE_S`` or more (a call that timed out) or that failed without parameters (it would
fail the same way again) is not called again in that exploration, and ``unsafe_tools`` names, for
the next explorations, those and any tool after whose failure every later call failed (it broke
the environment: a server that exits).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph_evolver.tool_results import read_result
from langgraph_evolver.types import Action, Step, Task, ToolCall, ToolObservation, Trajectory

from ..environment import Environment, load_environment
from .explore_errors import json_type as _json_type
from .explore_errors import learn_match, learn_offered, learn_prerequisite, redrawn
from .explore_errors import names_record as _names_record
from .lexicon import plausible_text
from .offered import numbers_named, suggested_values
from .profile import singular, snake, tool_entity, tool_kind
from .prompts import DEFAULT_EXPLORE_GOAL
from .wording import searches

__all__ = [
    "EXPLORE_QUERY",
    "SLOW_FAILURE_S",
    "aexplore",
    "exploration_task",
    "explore",
    "explore_environment",
    "explore_fresh",
    "unsafe_tools",
]

EXPLORE_QUERY = DEFAULT_EXPLORE_GOAL
"""The exploration goal (``prompts.DEFAULT_EXPLORE_GOAL``; this name is kept for old imports)."""
_SYNONYMS = {
    "origin": ("city", "home_city", "origin", "destination"),
    "destination": ("city", "destination", "origin", "home_city"),
    "query": ("name", "title"),
}
_RECENT = 2
_ID_SUFFIXES = ("id", "code", "number")
"""An argument ``<x>_<suffix>`` names a record of entity ``x`` (``booking_id``, ``airport_code``)."""
_MAX_DEPTH = 4
_BROAD_PROBES = ("", "a", "e")
"""Free text for a read tool's argument that nothing seen can fill (``search_books(query)``, ``find_member(name)``):
the empty string first (many servers match everything with it), then common letters (a substring of most names),
then words of values seen. ``query 42`` matches nothing, so a server whose ids come only from a search gave the
explorer no id at all."""
SLOW_FAILURE_S = 5.0
"""A failing call that took this long (a timeout) keeps its tool out of the rest of the exploration."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Seen:
    key: str
    """The field the value was found under (a list's items carry the list's key)."""
    value: Any
    entity: str
    """The producing tool's entity and the enclosing keys, singular (``booking flight``)."""
    step: int


def exploration_task(seed_task: Task | None = None, *, env: str | None = None, seed: int = 0) -> Task:
    """The task an exploration resets the environment with: the seed task's world, all tools.

    The seed task's ``env`` and ``env_params`` are kept (they define the world); its query and
    metadata are not (the sandbox would otherwise show only the seed task's apps).
    """
    env_name = env or (seed_task.env if seed_task is not None else "sandbox")
    params = dict(seed_task.env_params) if seed_task is not None else {}
    digest = hashlib.sha1(json.dumps([env_name, params, seed], sort_keys=True, default=str).encode()).hexdigest()
    metadata = {"seed_task_id": seed_task.id} if seed_task is not None else {}
    return Task(id=f"explore-{digest[:12]}", query=EXPLORE_QUERY, env=env_name, env_params=params, metadata=metadata)


def _id_like(key: str) -> bool:
    return key in _ID_SUFFIXES or snake(key).rsplit("_", 1)[-1] in _ID_SUFFIXES


def _harvest(value: Any, key: str, entity: str, step: int, out: list[_Seen]) -> None:
    """Collect the scalars of a parsed JSON result under their field names.

    Each value keeps the entities around it: the tool's and every enclosing key's, so an ``id``
    inside ``{"bookings": [...]}`` returned by ``search`` is a booking's id. A mapping keyed by
    ids (``{"payment_methods": {"card_7": {...}}}``) yields those keys as ``<parent>_id`` values. A camelCase key
    goes by its snake_case words (``animalId`` -> ``animal_id``, ``profile.snake``), as arguments are matched.
    """
    if isinstance(value, Mapping):
        for k, v in value.items():
            k = str(k)
            if isinstance(v, Mapping) and key and any(c.isdigit() for c in k):
                out.append(_Seen(key=f"{singular(snake(key))}_id", value=k, entity=entity, step=step))
            inner = f"{entity} {singular(snake(k))}" if isinstance(v, Mapping | list) else entity
            _harvest(v, k, inner, step, out)
    elif isinstance(value, list):
        for v in value:
            _harvest(v, key, entity, step, out)
    elif value is not None and key:
        out.append(_Seen(key=snake(key), value=value, entity=entity, step=step))


def _fits(value: Any, json_type: str | None) -> Any:
    """``value`` as an argument of ``json_type``, or ``None``: an id seen as ``3`` fills a string ``"3"`` and an id
    seen as ``"3"`` an integer (servers print ids in prose and JSON alike)."""
    if _type_ok(value, json_type):
        return value
    if json_type == "string" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if json_type == "integer" and isinstance(value, str) and re.fullmatch(r"-?\d{1,15}", value):
        return int(value)
    return None


_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def _is_date(arg: str, prop: Mapping[str, Any]) -> bool:
    """A date argument: ``format: date``/``date-time``, or a name such as ``date``, ``start_date``, ``day``."""
    words = snake(arg).lower().split("_")
    return prop.get("format") in ("date", "date-time") or "date" in words or arg.lower() == "day"


_ENDING_VERBS = frozenset({"delete", "remove", "cancel", "revoke", "release", "drop", "void", "close", "archive",
                           "throw", "discard", "terminate", "end", "destroy", "purge", "clear",
                           "withdraw"})  # fmt: skip


def _ends_record(name: str, description: str) -> bool:
    """A tool that ends the record it acts on (``revoke_permit``, "Throw a note away"): by its name's or its
    description's first word."""
    words = [snake(name).split("_", 1)[0].lower(), *re.findall(r"[a-z]+", description.lower())[:1]]
    return any(w in _ENDING_VERBS for w in words)


def _type_ok(value: Any, json_type: str | None) -> bool:
    if json_type == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if json_type == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if json_type == "boolean":
        return isinstance(value, bool)
    if json_type == "string":
        return isinstance(value, str) and bool(value)
    return not isinstance(value, Mapping | list)


class _Explorer:
    """The explorer's state: tool schemas, values seen, calls made. Drives sync and async loops."""

    def __init__(self, tools: Sequence[Mapping[str, Any]], *, seed: int, avoid: Collection[str] = ()) -> None:
        self.rng = random.Random(seed)
        self.tools: dict[str, dict[str, Any]] = {}
        names = [schema.get("function", schema)["name"] for schema in tools]
        if all(n in avoid for n in names):
            avoid = ()  # nothing else to call: avoiding every tool would explore nothing
        for schema in tools:
            fn = schema.get("function", schema)
            if fn["name"] in avoid:
                continue
            params = fn.get("parameters") or {}
            defs = {**(params.get("definitions") or {}), **(params.get("$defs") or {})}
            self.tools[fn["name"]] = {
                "props": {k: self._resolve(v, defs) for k, v in (params.get("properties") or {}).items()},
                "required": list(params.get("required") or []),
                "writes": tool_kind(fn["name"], fn.get("description") or "") == "write",
                "ends": _ends_record(fn["name"], fn.get("description") or ""),
            }
        self.listed = {tool_entity(n) for n, t in self.tools.items() if not t["writes"]} - {""}
        """What the read tools find (``bike_find``: bike): an argument named so (``rental_start(bike)``) takes one of
        their records' ids, never a made-up "bike 7" (session 73's bike shop opened no ticket, hired no bike)."""
        self.descriptions = {schema.get("function", schema)["name"]: schema.get("function", schema).get("description")
                             or "" for schema in tools}  # fmt: skip
        self.numbers = {name: numbers_named(text) for name, text in self.descriptions.items()}
        """Numbers a tool's description (then its error messages) names: "one hour today (8 to 18)" -> 8..18."""
        self._tool = ""
        self.examples: dict[str, str] = {}
        for tool in self.tools.values():  # "Date, e.g. May 3": an example value, shared by argument name
            for arg, prop in tool["props"].items():
                found = re.search(r"e\.g\.,?\s*'?([^,;()']+)", str(prop.get("description", "")))
                if found and not _names_record(arg):
                    self.examples.setdefault(arg, found.group(1).strip())
        self.suggested = {name: suggested_values(text) for name, text in self.descriptions.items()}
        """Example values a tool's description offers ("a range such as A1:D3"): a read tool's first probes."""
        self.hints: dict[str, list[str]] = {}
        """Values an error offered for the argument it complained about ("countries: FR, DE": ``country``)."""
        self.last_call: ToolCall | None = None
        self.queue: list[ToolCall] = []
        """Calls to make next: a tool an error said to call first, then the failed call (``explore_errors``)."""
        self.retried: dict[str, int] = {}
        self.seen: list[_Seen] = []
        self.probes: dict[tuple[str, str], int] = {}
        """Broad probes used so far per (tool, argument): each draw takes the next one."""
        self.used: list[str] = []
        self.written: set[str] = set()
        """Free text this exploration made up for writes (``lexicon.plausible_text``): not drawn twice."""
        self.made: set[tuple[str, str]] = set()
        self.step = 0
        self.dropped: list[str] = []
        """Tools whose failing call took ``SLOW_FAILURE_S`` or more, or had no parameters; left out from then on."""

    def _resolve(self, prop: Any, defs: Mapping[str, Any], depth: int = 0) -> dict[str, Any]:
        """``prop`` with ``$ref``s inlined and ``anyOf``/``oneOf`` narrowed to the first non-null branch."""
        if not isinstance(prop, Mapping) or depth > _MAX_DEPTH:
            return {}
        prop = dict(prop)
        ref = prop.pop("$ref", None)
        if isinstance(ref, str):
            prop = {**dict(defs.get(ref.rsplit("/", 1)[-1]) or {}), **prop}
        for key in ("anyOf", "oneOf", "allOf"):
            branches = [b for b in prop.pop(key, None) or [] if isinstance(b, Mapping) and b.get("type") != "null"]
            if branches:
                prop = {**self._resolve(branches[0], defs, depth + 1), **prop}
        if isinstance(prop.get("properties"), Mapping):
            prop["properties"] = {k: self._resolve(v, defs, depth + 1) for k, v in prop["properties"].items()}
        if "items" in prop:
            prop["items"] = self._resolve(prop["items"], defs, depth + 1)
        return prop

    def candidates(
        self, arg: str, json_type: str | None, *, recent: bool, only_recent: bool = False, loose: bool = True
    ) -> list[Any]:
        """Values seen for ``arg``: the first non-empty tier of exact name, entity id, suffix, type.

        ``booking_id`` takes a value seen under ``booking_id``; else one seen under ``id`` (or
        ``booking``) in a booking's result; else under a key sharing its suffix
        (``outbound_booking_id`` <-> ``booking_id``); else, for an id-like argument, any id-like
        value of its type (``loose=False`` leaves that last guess out). A camelCase ``arg`` is read in snake_case
        (``applicantEmail`` <- ``email``), as the keys seen are.
        """
        arg = snake(arg)
        keys = {arg, *_SYNONYMS.get(arg, ())}
        head, _, suffix = arg.rpartition("_")
        entity = head if head and suffix in _ID_SUFFIXES else None
        bare = arg if entity is None and arg in self.listed else None  # ``bike``: a bike's code or number
        tiers: tuple[list[_Seen], ...] = ([], [], [], [])
        for s in self.seen:
            value = _fits(s.value, json_type)
            if value is None:
                continue
            if value is not s.value:
                s = _Seen(key=s.key, value=value, entity=s.entity, step=s.step)
            if s.key in keys:
                tiers[0].append(s)
            elif entity is not None and s.key in (suffix, entity) and entity in s.entity:
                tiers[1].append(s)
            elif bare is not None and _id_like(s.key) and s.entity.split()[-1:] == [bare]:
                tiers[1].append(s)
            elif s.key.endswith(f"_{arg}") or (s.key not in _ID_SUFFIXES and arg.endswith(f"_{s.key}")):
                tiers[2].append(s)
            elif _names_record(arg) and _names_record(s.key):
                tiers[3].append(s)
        best = next((t for t in tiers[: 4 if loose else 3] if t), [])
        if recent:  # within the best tier, the values of the last few observations
            latest = [s for s in best if s.step >= self.step - _RECENT]
            best = latest if latest or only_recent else best
        return list(dict.fromkeys(s.value for s in best))

    def _fill(self, arg: str, prop: Mapping[str, Any], *, recent: bool, depth: int = 0) -> tuple[bool, Any]:
        json_type = _json_type(prop)
        if prop.get("enum"):
            return True, self.rng.choice(list(prop["enum"]))
        if "const" in prop:
            return True, prop["const"]
        if json_type == "object" or isinstance(prop.get("properties"), Mapping):
            return self._fill_object(prop, recent=recent, depth=depth + 1)
        if json_type == "array":
            items = prop.get("items") or {}
            ok, value = self._fill(singular(arg), items, recent=recent, depth=depth + 1)
            return ok, [value] if ok else None
        values = self.candidates(arg, json_type, recent=recent) or self._ids_to_search(arg, json_type)
        hinted = [v for v in (_fits(h, json_type) for h in self.hints.get(arg, ())) if v is not None]
        if hinted and (not values or self.rng.random() < 0.5):  # what the server said it takes
            return True, self.rng.choice(hinted)
        if values:
            return True, self.rng.choice(values)
        if self._record_arg(arg):
            return False, None
        if json_type in ("string", None) and _is_date(arg, prop):
            return True, self._date(prop)
        if json_type == "boolean":
            return True, self.rng.random() < 0.5
        if json_type in ("integer", "number"):
            named = [int(x) for x in re.findall(r"\b\d+\b", prop.get("description", ""))]
            return True, self.rng.choice(named or self.numbers.get(self._tool) or [1, 2, 3, 5, 10, 20])
        if json_type in ("string", None):
            example = self.examples.get(arg)
            if example:
                first_digit = r"(?<!\d)\d(?!\d)"
                return True, re.sub(first_digit, lambda _: str(self.rng.randint(1, 9)), example, count=1)
            if self._tool in self.tools and not self.tools[self._tool]["writes"]:
                return True, self._probe(arg)
            text = plausible_text(arg, self.rng, {*self.written, *(str(s.value) for s in self.seen)})
            text = text or f"{snake(arg).replace('_', ' ')} {self.rng.randint(2, 99)}"  # a kind lexicon does not know
            self.written.add(text)
            return True, text
        return False, None

    def _ids_to_search(self, arg: str, json_type: str | None) -> list[Any]:
        """Ids of the tool's own entity seen anywhere (``member_id`` values a bike listing showed), for the free text
        of a read that says it finds its records by id too ("A member's card, found by member id, email ... or
        name": ``member_lookup(who)``). Without them the explorer read only the member its error's example named
        (session 73: 63 of a bike shop's 443 candidates named M-0042, 11 any other member)."""
        if not searches(arg) or self.tools.get(self._tool, {}).get("writes", True):
            return []
        if not re.search(r"\bids?\b", self.descriptions.get(self._tool, "").lower()):
            return []
        key = f"{tool_entity(self._tool)}_id"
        found = (_fits(s.value, json_type) for s in self.seen if s.key == key)
        return list(dict.fromkeys(v for v in found if v is not None))

    def _probe(self, arg: str) -> str:
        """The next broad value for a read tool's free-text ``arg``: the examples its description offers, then
        ``_BROAD_PROBES``, then words seen."""
        words = sorted({w for s in self.seen if isinstance(s.value, str) for w in re.findall(r"[A-Za-z]{3,}", s.value)})
        values = [*self.suggested.get(self._tool, ()), *_BROAD_PROBES, *words[:50]]
        index = self.probes.get((self._tool, arg), 0)
        self.probes[(self._tool, arg)] = index + 1
        return values[index % len(values)]

    def _date(self, prop: Mapping[str, Any]) -> str:
        """A date seen in an earlier result, else one of the next three days (servers book the near future)."""
        seen = sorted({str(s.value)[:10] for s in self.seen if isinstance(s.value, str) and _ISO_DATE.match(s.value)})
        soon = dt.date.today() + dt.timedelta(days=self.rng.randint(1, 3))
        day = self.rng.choice(seen) if seen else soon.isoformat()
        return f"{day}T10:00:00" if prop.get("format") == "date-time" else day

    def _fill_object(self, prop: Mapping[str, Any], *, recent: bool, depth: int) -> tuple[bool, Any]:
        if depth > _MAX_DEPTH:
            return False, None
        required = set(prop.get("required") or [])
        out: dict[str, Any] = {}
        for key, sub in (prop.get("properties") or {}).items():
            if key not in required and self.rng.random() < 0.5:
                continue
            ok, value = self._fill(key, sub, recent=recent, depth=depth)
            if ok:
                out[key] = value
            elif key in required:
                return False, None
        return True, out

    def _known(self, arg: str, prop: Mapping[str, Any], *, recent: bool, depth: int = 0) -> bool:
        """Whether ``arg`` can be filled without guessing an id (recursing into objects and arrays)."""
        if prop.get("enum") or "const" in prop:
            return True
        if depth > _MAX_DEPTH:
            return False
        if isinstance(prop.get("properties"), Mapping):
            required = prop.get("required") or []
            return all(self._known(k, prop["properties"].get(k, {}), recent=recent, depth=depth + 1) for k in required)
        if _json_type(prop) == "array":
            return self._known(singular(arg), prop.get("items") or {}, recent=recent, depth=depth + 1)
        if self.candidates(arg, _json_type(prop), recent=recent, only_recent=recent, loose=False):
            return True
        return not recent and not self._record_arg(arg)

    def _record_arg(self, arg: str) -> bool:
        """Whether only a value seen can fill ``arg``: an id (``names_record``) or a record a read tool finds."""
        return _names_record(arg) or snake(arg) in self.listed

    def fillable(self, name: str, *, recent: bool = False) -> bool:
        tool = self.tools[name]
        return all(self._known(a, tool["props"].get(a, {}), recent=recent) for a in tool["required"])

    def arguments(self, name: str, *, recent: bool) -> dict[str, Any]:
        tool = self.tools[name]
        self._tool = name
        args: dict[str, Any] = {}
        for arg, prop in tool["props"].items():
            required = arg in tool["required"]
            if not required and self.rng.random() < 0.5:
                continue
            ok, value = self._fill(arg, prop, recent=recent)
            if not ok and recent:
                ok, value = self._fill(arg, prop, recent=False)
            if ok:
                args[arg] = value
            elif required:
                args[arg] = f"unknown-{arg}"
        return args

    def next_call(self, phase: str) -> ToolCall:
        """The next call; one already made with the same arguments is drawn again (up to 3 draws): it would read
        the same result, or write nothing new ("revoke permit 1" twice) or fail. A queued call goes first."""
        queued = None
        while self.queue and queued is None:
            queued = redrawn(self, self.queue.pop(0))
        if queued is not None:
            call = ToolCall(name=queued.name, arguments=queued.arguments, id=f"explore_{self.step}")
            self.made.add((call.name, json.dumps(call.arguments, sort_keys=True, default=str)))
            self.used.append(call.name)
            self.last_call = call
            return call
        for _ in range(3):
            call = self._draw(phase)
            key = (call.name, json.dumps(call.arguments, sort_keys=True, default=str))
            if key not in self.made:
                break
        self.made.add(key)
        self.last_call = call
        return call

    def _draw(self, phase: str) -> ToolCall:
        names = sorted(self.tools)
        if phase == "breadth":
            unused = [n for n in names if n not in self.used]
            pool = [n for n in unused if self.fillable(n)] or [n for n in names if self.fillable(n)] or names
            name = self.rng.choice(pool)
            recent = False
        else:
            weights = []
            for n in names:
                w = 0.0  # a tool whose ids are unknown yet would only return an error
                if self.fillable(n):
                    w = 1.0
                    needs_ids = any(_names_record(a) for a in self.tools[n]["required"])
                    if needs_ids and self.fillable(n, recent=True):
                        w += 3.0
                    if self.tools[n]["writes"]:  # a write that ends a record (cancel, revoke) after one that uses it
                        w += 0.5 if self.tools[n]["ends"] else 1.5
                    if n in self.used[-3:]:
                        w *= 0.3
                weights.append(w)
            name = self.rng.choices(names, weights=weights)[0] if any(weights) else self.rng.choice(names)
            recent = True
        call = ToolCall(name=name, arguments=self.arguments(name, recent=recent), id=f"explore_{self.step}")
        self.used.append(name)
        return call

    def observe(self, observations: Sequence[ToolObservation], seconds: float = 0.0) -> None:
        for obs in observations:
            if obs.is_error:
                # "an hour from 8 to 18": try those next; no range named: the smallest counts ("cannot order 20")
                self.numbers[obs.name] = numbers_named(obs.content, ranges_only=True) or [1, 2]
                offered = learn_offered(self, obs)  # a list of values, a tool to call first, else a matching record
                if not learn_prerequisite(self, obs) and not offered:
                    learn_match(self, obs)
                tool = self.tools.get(obs.name)
                if tool is not None and (seconds >= SLOW_FAILURE_S or not tool["props"]) and len(self.tools) > 1:
                    self.dropped.append(obs.name)
                    del self.tools[obs.name]
                continue
            entity = tool_entity(obs.name)
            data = read_result(obs.content)  # one document, several, lines, or prose naming records
            if isinstance(data, str):
                token = data.strip()  # a bare id returned by a create tool ("b101")
                if (
                    self.tools.get(obs.name, {}).get("writes")
                    and re.fullmatch(r"[\w.:-]{1,40}", token)
                    and any(c.isdigit() for c in token)
                ):
                    self.seen.append(_Seen(key=f"{entity}_id", value=token, entity=entity, step=self.step))
                continue
            # a bare list of scalars (``list_zones -> ["north", ...]``) holds values of the tool's entity
            _harvest(data, entity if isinstance(data, list) else "", entity, self.step, self.seen)
        self.step += 1


def _trajectory(task: Task, steps: list[Step], explorer: _Explorer, *, seed: int, n_breadth: int,
                n_depth: int, task_setup: bool = False) -> Trajectory:  # fmt: skip
    digest = hashlib.sha1(f"{task.id}|{seed}|{n_breadth}|{n_depth}".encode()).hexdigest()
    errors = tuple(f"step {s.index}: {o.content[:160]}" for s in steps for o in s.observations if o.is_error)
    return Trajectory(
        id=f"exploration-{digest[:12]}",
        task=task,
        steps=tuple(steps),
        finish_reason="max_turns",
        errors=errors,
        metadata={"explorer": "schema", "seed": seed, "n_breadth": n_breadth, "n_depth": n_depth,
                  "dropped_tools": list(explorer.dropped), "tool_descriptions": dict(explorer.descriptions),
                  "tool_arguments": {name: list(t["required"]) for name, t in explorer.tools.items()},
                  "task_setup": task_setup},
    )  # fmt: skip


def unsafe_tools(trajectory: Trajectory) -> set[str]:
    """The tools a later exploration should not call: those it left out (``dropped_tools``: a slow failure, a
    failure without parameters), and the last tool whose failure every later call (two or more) followed with a
    failure: it broke the environment (an MCP server's ``crash``). A tool that fails with calls that work after it
    is kept."""
    out = set(trajectory.metadata.get("dropped_tools") or ())
    failed = [any(o.is_error for o in s.observations) or not s.observations for s in trajectory.steps]
    ok = [i for i, f in enumerate(failed) if not f]
    start = (ok[-1] + 1) if ok else 0  # the first of the failures that run to the end
    if len(trajectory.steps) - start >= 3:
        out.update(c.name for c in trajectory.steps[start].action.tool_calls)
    return out


def _phases(n_breadth: int, n_depth: int) -> list[str]:
    return ["breadth"] * n_breadth + ["depth"] * n_depth


def explore(
    env: Environment, task: Task, *, n_breadth: int = 3, n_depth: int = 17, seed: int = 0, avoid: Collection[str] = ()
) -> Trajectory:
    """Explore ``env`` from ``task``'s world with schema-driven random calls.

    Args:
        env: a ``langgraph_evolver.environment.Environment`` instance (reset here with ``task``).
        task: the task whose world to explore, usually ``exploration_task(seed_task)``.
        n_breadth: calls of the breadth phase (diverse tools).
        n_depth: calls of the depth phase (conditioned on recent observations).
        seed: random seed; the same seed gives the same trajectory.
        avoid: tools not to call (``unsafe_tools`` of earlier explorations).

    Returns:
        A ``Trajectory`` with one ``Step`` per call (``node`` is ``explore_breadth`` or
        ``explore_depth``, ``policy=False``); error observations are kept and listed in ``errors``.
    """
    obs = env.reset(task)
    explorer = _Explorer(obs.tools, seed=seed, avoid=avoid)
    steps = []
    for i, phase in enumerate(_phases(n_breadth, n_depth)):
        call = explorer.next_call(phase)
        started = time.perf_counter()
        result = env.step(Action(tool_calls=(call,)))
        explorer.observe(result.observations, time.perf_counter() - started)
        steps.append(_step(i, call, result.observations, phase))
    return _trajectory(task, steps, explorer, seed=seed, n_breadth=n_breadth, n_depth=n_depth,
                       task_setup=bool(getattr(env, "supports_task_setup", False)))  # fmt: skip


def explore_fresh(factory: Callable[[Task], Environment], task: Task, **options: Any) -> Trajectory:
    """One ``explore`` of ``task`` on a fresh instance (``factory(task)``), closed after (a setup that does not
    replay raises ``EnvironmentFailure``)."""
    env = factory(task)
    try:
        return explore(env, task, **options)
    finally:
        env.close()


def explore_environment(name: str, *, seed: int = 0, **options: Any) -> Trajectory:
    """One seeded ``explore`` of a fresh instance of the environment ``name`` (``load_environment``):
    ``explore_environment("mcp:python server.py", seed=3).tool_results()`` is what the explorer called and got."""
    return explore_fresh(lambda _: load_environment(name), exploration_task(None, env=name, seed=seed), seed=seed,
                         **options)  # fmt: skip


async def aexplore(
    env: Environment, task: Task, *, n_breadth: int = 3, n_depth: int = 17, seed: int = 0, avoid: Collection[str] = ()
) -> Trajectory:
    """Async twin of ``explore`` (``areset`` / ``astep``), for remote environments."""
    obs = await env.areset(task)
    explorer = _Explorer(obs.tools, seed=seed, avoid=avoid)
    steps = []
    for i, phase in enumerate(_phases(n_breadth, n_depth)):
        call = explorer.next_call(phase)
        started = time.perf_counter()
        result = await env.astep(Action(tool_calls=(call,)))
        explorer.observe(result.observations, time.perf_counter() - started)
        steps.append(_step(i, call, result.observations, phase))
    return _trajectory(task, steps, explorer, seed=seed, n_breadth=n_breadth, n_depth=n_depth,
                       task_setup=bool(getattr(env, "supports_task_setup", False)))  # fmt: skip


def _step(index: int, call: ToolCall, observations: Sequence[ToolObservation], phase: str) -> Step:
    errors = [o.content for o in observations if o.is_error]
    return Step(
        index=index,
        action=Action(tool_calls=(call,)),
        observations=tuple(observations),
        error=errors[0][:200] if errors else None,
        node=f"explore_{phase}",
        model="schema-explorer",
        policy=False,
    )

"""Generated tool domains for the warm start: many small worlds the model never sees twice.

Supervised only on the sandbox's six apps, a small model learns those tools' names by heart and
does not read the tool list: on a new server it repeats one wrong call (issue 43). Here every chat
comes from a fresh domain, deterministic from its seed: a kind of thing to reserve (rooms, parcels,
kayaks...) and the tools around it, with names, argument names, id shapes, descriptions, date
formats and observation layouts drawn from pools, so that only reading the tool list and the
observations solves the task. Each domain has seven tools over an in-memory world:

- ``list`` (optional enum filter) -> a list of objects; ``search`` (text) -> a bare list of ids;
- ``get`` (id) -> a nested object; ``holds`` (person) -> the person's records;
- ``act`` (id, person, date, optional enum) -> the new record, whose id the next call copies;
  ``undo`` (record id) -> the record, cancelled; ``status`` (record id) -> a nested object.

Tasks take 1-4 calls with reference solutions run against the world (so every id and observation
is real): list a kind, look a field up (search or list, then get), act on a named thing (and check
the new record), act on the cheapest of a kind (a decision), cancel a person's record on a date,
move it to another date (undo then act, and check).
With ``mistake_rate`` a share of chats holds one wrong call (an id that does not exist, a date in
the wrong format, a value outside the enum, a missing argument) and its error observation before
the corrected call; the wrong call is weighted 0, out of the loss, as in the sandbox's chats
(``trainers.tiny.reference_conversation``). ``synthetic_chats`` returns ``(messages, tools)`` pairs
for ``trainers.tiny.encode_example``, the path the sandbox's chats take.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Domain",
    "make_domain",
    "sandbox_count",
    "supervised_chats",
    "supervised_tasks",
    "synthetic_chat",
    "synthetic_chats",
    "synthetic_count",
    "without_apps",
]

SYSTEM_PROMPTS = (
    "Use the tools to act for the user. When done, reply with a short answer.",
    "You can call the tools below. Read their descriptions, call them as needed, then answer briefly.",
    "Help the user with the available tools. Answer in one short sentence when finished.",
)
# (singular, plural, name pool) of the things a domain holds
THINGS = [
    ("room", "rooms", ["Aurora", "Birch", "Cedar", "Delta", "Ember", "Fjord", "Granite", "Harbor"]),
    ("book", "books", ["Dune", "Emma", "Ulysses", "Beloved", "Walden", "Ivanhoe", "Middlemarch", "Persuasion"]),
    ("parcel", "parcels", ["blue box", "tube", "crate", "envelope", "pallet", "bag", "drum", "carton"]),
    ("vehicle", "vehicles", ["Van 1", "Truck A", "Sedan", "Minibus", "Pickup", "Scooter", "Hatchback", "Coupe"]),
    ("court", "courts", ["Centre", "Court 2", "Clay East", "Grass West", "Indoor A", "Indoor B", "Annex", "Lakeside"]),
    ("desk", "desks", ["Window 3", "Corner 7", "Quiet 1", "Hub 4", "Loft 2", "Garden 5", "Studio 9", "Atrium 6"]),
    ("kayak", "kayaks", ["Otter", "Heron", "Pike", "Swift", "Drifter", "Current", "Eddy", "Tern"]),
    ("camera", "cameras", ["Leica M6", "Nikon F3", "Canon AE-1", "Pentax K1000", "Fuji X100", "Sony A7", "Olympus OM1",
                           "Minolta X700"]),
    ("locker", "lockers", ["L-North", "L-South", "L-Gym", "L-Pool", "L-Lab", "L-Hall", "L-Roof", "L-Dock"]),
    ("course", "courses", ["Pottery", "Python 101", "Watercolor", "Welding", "Yoga", "Spanish", "Chess", "Baking"]),
    ("instrument", "instruments", ["Cello", "Oboe", "Harp", "Viola", "Tuba", "Banjo", "Marimba", "Flute"]),
    ("plot", "plots", ["Plot A1", "Plot A2", "Plot B1", "Plot B4", "Plot C3", "Plot D2", "Plot E5", "Plot F1"]),
]  # fmt: skip
# (verb, record noun, undo verb)
ACTIONS = [("reserve", "reservation", "cancel"), ("borrow", "loan", "return"), ("book", "booking", "cancel"),
           ("rent", "rental", "end"), ("assign", "assignment", "revoke"), ("schedule", "appointment", "cancel"),
           ("hold", "hold", "release"), ("claim", "claim", "withdraw")]  # fmt: skip
PERSON_ARGS = ["patient", "member", "customer", "user", "owner", "guest", "employee", "student"]
PEOPLE = ["Lily Park", "Omar Haddad", "Ana Ruiz", "Jon Berg", "Mei Chen", "Sara Okafor", "Ravi Nair", "Tom Weiss"]
CATEGORIES = [["small", "medium", "large"], ["basic", "standard", "premium"], ["north", "south", "east", "west"],
              ["red", "blue", "green"], ["fiction", "science", "history"], ["indoor", "outdoor"]]  # fmt: skip
OPTIONS = [("priority", ["low", "normal", "high"]), ("channel", ["email", "sms", "none"]),
           ("size", ["S", "M", "L"]), ("shift", ["morning", "evening"])]  # fmt: skip
DETAILS = [("location", ["Floor 1", "Floor 2", "Basement", "Annex", "Dock 4", "Wing B"]),
           ("rating", [3, 4, 5]), ("owner", ["Facilities", "Ops", "Front desk", "Library"]),
           ("condition", ["new", "good", "worn"])]  # fmt: skip
LIST_VERBS = ["list", "all", "browse", "show"]
GET_VERBS = ["get", "describe", "lookup", "fetch"]
SEARCH_VERBS = ["search", "find", "query"]
DATE_FORMATS = [("YYYY-MM-DD", "{y:04d}-{m:02d}-{d:02d}"), ("DD/MM/YYYY", "{d:02d}/{m:02d}/{y:04d}"),
                ("YYYYMMDD", "{y:04d}{m:02d}{d:02d}")]  # fmt: skip
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]  # fmt: skip


def _style(words: list[str], style: str) -> str:
    if style == "camel":
        return words[0] + "".join(w.capitalize() for w in words[1:])
    return "_".join(words)


class ToolError(ValueError):
    """What the domain's tool raises for a bad call; its text is the error observation."""


@dataclass
class Domain:
    """One generated domain: its tool schemas (OpenAI format), its naming, and its world's state."""

    seed: int
    thing: str
    things: str
    verb: str
    record: str
    undo_verb: str
    names: dict[str, str]  # role -> tool name
    args: dict[str, str]  # role -> argument name
    categories: list[str]
    option: tuple[str, list[str]]
    detail: tuple[str, list[Any]]
    date_format: tuple[str, str]
    id_prefix: str
    record_prefix: str
    list_layout: str  # "json": one JSON list; "blocks": one object per line (how MCP list[dict] results read)
    error_style: str
    items: list[dict[str, Any]] = field(default_factory=list)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    tools: list[dict[str, Any]] = field(default_factory=list)

    def date(self, m: int, d: int) -> str:
        return self.date_format[1].format(y=2026, m=m, d=d)

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run a tool by name as the server would; a bad call gives the error observation."""
        role = next((r for r, n in self.names.items() if n == name), None)
        try:
            if role is None:
                raise ToolError(f"unknown tool {name!r}")
            return self._render(getattr(self, f"_{role}")(arguments))
        except ToolError as e:
            return self._error(name, str(e))

    def _render(self, value: Any) -> str:
        if isinstance(value, list) and value and isinstance(value[0], dict) and self.list_layout == "blocks":
            return "\n".join(json.dumps(v) for v in value)
        return json.dumps(value)

    def _error(self, name: str, text: str) -> str:
        if self.error_style == "json":
            return json.dumps({"error": text})
        if self.error_style == "tool":
            return f"Error executing tool {name}: {text}"
        return f"Error: {text}"

    def _arg(self, arguments: dict[str, Any], role: str, *, required: bool = True) -> Any:
        key = self.args[role]
        unknown = sorted(set(arguments) - {self.args[r] for r in self._accepts()})
        if unknown:
            raise ToolError(f"unexpected argument {unknown[0]!r}")
        if key not in arguments:
            if required:
                raise ToolError(f"missing required argument {key!r}")
            return None
        return arguments[key]

    def _accepts(self) -> list[str]:
        return ["category", "query", "item", "person", "date", "option", "record"]

    def _item(self, arguments: dict[str, Any]) -> dict[str, Any]:
        item_id = self._arg(arguments, "item")
        item = next((i for i in self.items if i["id"] == item_id), None)
        if item is None:
            raise ToolError(f"no {self.thing} with id {item_id!r}")
        return item

    def _record_of(self, arguments: dict[str, Any]) -> dict[str, Any]:
        record_id = self._arg(arguments, "record")
        if record_id not in self.records:
            raise ToolError(f"no {self.record} {record_id!r}")
        return self.records[record_id]

    def _list(self, arguments: dict[str, Any]) -> list[dict[str, Any]]:
        category = self._arg(arguments, "category", required=False)
        if category is not None and category not in self.categories:
            raise ToolError(f"{self.args['category']} must be one of {', '.join(self.categories)}, got {category!r}")
        return [{k: i[k] for k in ("id", "name", "category", "price")} for i in self.items
                if category is None or i["category"] == category]  # fmt: skip

    def _search(self, arguments: dict[str, Any]) -> list[str]:
        query = str(self._arg(arguments, "query")).lower()
        return [i["id"] for i in self.items if query in i["name"].lower()]

    def _get(self, arguments: dict[str, Any]) -> dict[str, Any]:
        item = self._item(arguments)
        key = self.detail[0]
        return {"id": item["id"], "name": item["name"],
                "details": {"category": item["category"], "price": item["price"], key: item[key]}}  # fmt: skip

    def _act(self, arguments: dict[str, Any]) -> dict[str, Any]:
        item = self._item(arguments)
        person = self._arg(arguments, "person")
        date = self._check_date(self._arg(arguments, "date"))
        option = self._arg(arguments, "option", required=False)
        if option is not None and option not in self.option[1]:
            raise ToolError(f"{self.args['option']} must be one of {', '.join(self.option[1])}, got {option!r}")
        taken = any(r["item_id"] == item["id"] and r["date"] == date and r["status"] == "active"
                    for r in self.records.values())  # fmt: skip
        if taken:
            raise ToolError(f"{self.thing} {item['id']} is already taken on {date}")
        record_id = f"{self.record_prefix}{len(self.records) + 1}"
        self.records[record_id] = {"id": record_id, "item_id": item["id"], "person": person, "date": date,
                                   "status": "active"}  # fmt: skip
        return dict(self.records[record_id])

    def _check_date(self, date: Any) -> str:
        fmt = self.date_format[0]
        digits = str(date).replace("-", "").replace("/", "")
        if not isinstance(date, str) or len(date) != len(fmt) or not digits.isdigit():
            raise ToolError(f"date must be {fmt}, got {date!r}")
        return date

    def _holds(self, arguments: dict[str, Any]) -> list[dict[str, Any]]:
        person = self._arg(arguments, "person")
        return [dict(r) for r in self.records.values() if r["person"] == person]

    def _undo(self, arguments: dict[str, Any]) -> dict[str, Any]:
        record = self._record_of(arguments)
        if record["status"] != "active":
            raise ToolError(f"{self.record} {record['id']} is already {record['status']}")
        record["status"] = "cancelled"
        return dict(record)

    def _status(self, arguments: dict[str, Any]) -> dict[str, Any]:
        record = self._record_of(arguments)
        item = next(i for i in self.items if i["id"] == record["item_id"])
        return {"id": record["id"], "status": record["status"], "date": record["date"],
                "person": record["person"], self.thing: {"id": item["id"], "name": item["name"]}}  # fmt: skip


def make_domain(seed: int) -> Domain:
    """The domain of ``seed``: the same seed gives the same tools and world."""
    rng = random.Random(seed)
    thing, things, pool = rng.choice(THINGS)
    verb, record, undo_verb = rng.choice(ACTIONS)
    style = rng.choice(["snake", "snake", "camel"])
    noun_first = rng.random() < 0.25
    arg_style = rng.choice(["snake", "camel"]) if style == "camel" else "snake"

    def tool(verb_word: str, noun: str) -> str:
        return _style([noun, verb_word] if noun_first else [verb_word, noun], style)

    names = {"list": tool(rng.choice(LIST_VERBS), things), "search": tool(rng.choice(SEARCH_VERBS), things),
             "get": tool(rng.choice(GET_VERBS), thing), "act": _style([verb, thing] if rng.random() < 0.5 else [verb],
                                                                       style),
             "undo": _style([undo_verb, record], style), "holds": tool(rng.choice(["list", "my"]), record + "s"),
             "status": tool(rng.choice(["get", "check"]), record)}  # fmt: skip
    id_word = rng.choice(["id", "id", "ref"])
    args = {"category": rng.choice(["category", "kind", "type"]), "query": rng.choice(["query", "text", "q", "name"]),
            "item": _style([thing, id_word], arg_style), "person": rng.choice(PERSON_ARGS),
            "date": rng.choice(["date", "day", "on"]), "record": _style([record, id_word], arg_style)}  # fmt: skip
    option = rng.choice(OPTIONS)
    args["option"] = option[0]
    id_prefix = rng.choice([thing[0].upper(), thing[:2].upper() + "-", thing[:3] + "_", ""])
    domain = Domain(
        seed=seed, thing=thing, things=things, verb=verb, record=record, undo_verb=undo_verb, names=names, args=args,
        categories=list(rng.choice(CATEGORIES)), option=option, detail=rng.choice(DETAILS),
        date_format=rng.choice(DATE_FORMATS), id_prefix=id_prefix,
        record_prefix=rng.choice([record[0].upper(), record[:3].upper() + "-", "#"]),
        list_layout=rng.choice(["json", "blocks"]), error_style=rng.choice(["plain", "tool", "json"]),
    )  # fmt: skip
    base = rng.randrange(1, 80) * (10 if rng.random() < 0.3 else 1)
    for k, name in enumerate(rng.sample(pool, rng.randint(4, 6))):
        category, price, detail = rng.choice(domain.categories), rng.randrange(5, 200), rng.choice(domain.detail[1])
        domain.items.append({"id": f"{id_prefix}{base + k}", "name": name, "category": category, "price": price,
                             domain.detail[0]: detail})  # fmt: skip
    domain.tools = _schemas(domain, rng)
    return domain


def _schemas(d: Domain, rng: random.Random) -> list[dict[str, Any]]:
    a, fmt = d.args, d.date_format[0]
    say = rng.choice

    def s(role: str, text: str, **extra: Any) -> dict[str, Any]:
        return {"type": "string", "description": text, **extra} if rng.random() < 0.5 else {"type": "string", **extra}

    specs = {
        "list": (say([f"List the {d.things}, optionally of one {a['category']}.", f"All {d.things} with their price.",
                      f"Browse {d.things}; filter by {a['category']} if given."]),
                 {a["category"]: s("category", f"one of {', '.join(d.categories)}", enum=d.categories)}, []),
        "search": (say([f"Search {d.things} by name; returns matching ids.", f"Find {d.thing} ids whose name "
                        "contains the text."]), {a["query"]: s("query", "part of the name")}, [a["query"]]),
        "get": (say([f"Details of one {d.thing}.", f"Describe a {d.thing} by id, with its {d.detail[0]}.",
                     f"Look up a {d.thing}."]), {a["item"]: s("item", f"{d.thing} id")}, [a["item"]]),
        "act": (say([f"{d.verb.capitalize()} a {d.thing} for someone on a date; returns the {d.record}.",
                     f"Create a {d.record} of a {d.thing}.", f"{d.verb.capitalize()} a {d.thing} ({fmt} dates)."]),
                {a["item"]: s("item", f"{d.thing} id"), a["person"]: s("person", "full name"),
                 a["date"]: {"type": "string", "description": f"date as {fmt}"},
                 a["option"]: s("option", f"one of {', '.join(d.option[1])}", enum=d.option[1])},
                [a["item"], a["person"], a["date"]]),
        "undo": (say([f"{d.undo_verb.capitalize()} a {d.record}.", f"{d.undo_verb.capitalize()} a {d.record} by id; "
                      f"its {d.thing} is free again."]), {a["record"]: s("record", f"{d.record} id")}, [a["record"]]),
        "holds": (say([f"The {d.record}s of a person.", f"List someone's {d.record}s."]),
                  {a["person"]: s("person", "full name")}, [a["person"]]),
        "status": (say([f"Status of a {d.record}.", f"Check one {d.record}."]),
                   {a["record"]: s("record", f"{d.record} id")}, [a["record"]]),
    }  # fmt: skip
    roles = list(specs)
    rng.shuffle(roles)
    return [{"type": "function", "function": {"name": d.names[r], "description": specs[r][0],
                                              "parameters": {"type": "object", "properties": specs[r][1],
                                                             "required": specs[r][2]}}} for r in roles]  # fmt: skip


# ---- tasks over a domain, solved by reference calls run against its world ----


class _Chat:
    """A chat being written: reference calls are run against the domain and their observations kept."""

    def __init__(self, domain: Domain, rng: random.Random, query: str, mistake: bool) -> None:
        self.d, self.rng, self.mistake_left = domain, rng, mistake
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": rng.choice(SYSTEM_PROMPTS)},
                                               {"role": "user", "content": query}]  # fmt: skip
        self.n = 0

    def call(self, role: str, **kw: Any) -> Any:
        """Make the reference call (role's tool, canonical argument roles) and return its decoded result.
        A pending mistake is made first when this call admits one (always by the last call)."""
        args = {self.d.args[k]: v for k, v in kw.items()}
        if self.mistake_left and (self.rng.random() < 0.5 or role in ("undo", "act", "get", "status")):
            wrong = _wrong_arguments(self.d, role, args, self.rng)
            if wrong is not None:
                self.mistake_left = False
                observation = self._step(role, wrong, weight=0)
                assert _is_error(observation), (self.d.seed, role, wrong, observation)
        observation = self._step(role, args)
        assert not _is_error(observation), (self.d.seed, role, args, observation)
        if role in ("list", "holds") and observation.startswith("{"):  # the "blocks" layout
            return [json.loads(line) for line in observation.splitlines()]
        return json.loads(observation)

    def _step(self, role: str, args: dict[str, Any], weight: int = 1) -> str:
        call_id = f"call_{self.n}"
        self.n += 1
        observation = self.d.call(self.d.names[role], args)
        turn = {"role": "assistant", "content": "",
                "tool_calls": [{"id": call_id, "type": "function",
                                "function": {"name": self.d.names[role], "arguments": args}}]}  # fmt: skip
        if not weight:
            turn["weight"] = 0
        self.messages += [turn, {"role": "tool", "tool_call_id": call_id, "content": observation}]
        return observation

    def answer(self, text: str) -> list[dict[str, Any]]:
        return [*self.messages, {"role": "assistant", "content": text}]


def _is_error(observation: str) -> bool:
    return observation.startswith(("Error", '{"error"'))


def _wrong_arguments(d: Domain, role: str, args: dict[str, Any], rng: random.Random) -> dict[str, Any] | None:
    """A plausible wrong version of a call: an id that does not exist, a date in words, a value outside
    the enum, or a required argument left out. None when the call has nothing to get wrong."""
    a = d.args
    kinds = []
    if a["item"] in args:
        kinds.append("item")
    if a["record"] in args:
        kinds.append("record")
    if a["date"] in args:
        kinds.append("date")
    if args.get(a["category"]) is not None:
        kinds.append("category")
    required = [k for k in args if k not in (a["option"], a["category"])]
    if len(args) > 1 and required:
        kinds.append("missing")
    if not kinds:
        return None
    kind, wrong = rng.choice(kinds), dict(args)
    if kind == "item":
        wrong[a["item"]] = rng.choice([i["name"] for i in d.items] + [f"{d.id_prefix}{rng.randrange(900, 999)}"])
    elif kind == "record":
        wrong[a["record"]] = f"{d.record_prefix}{rng.randrange(90, 99)}"
    elif kind == "date":
        wrong[a["date"]] = _words_date(args[a["date"]], d)
    elif kind == "category":
        wrong[a["category"]] = args[a["category"]].capitalize() + rng.choice(["", "s"])
    else:
        wrong.pop(rng.choice(required))
    return wrong


def _words_date(date: str, d: Domain) -> str:
    digits = date.replace("-", "").replace("/", "")
    if d.date_format[0] == "DD/MM/YYYY":
        day, month = int(digits[:2]), int(digits[2:4])
    else:
        month, day = int(digits[4:6]), int(digits[6:8])
    return f"{MONTHS[month - 1]} {day}"


def _when(rng: random.Random) -> tuple[int, int]:
    return rng.randint(1, 12), rng.randint(1, 28)


def _task_lookup(c: _Chat, d: Domain, rng: random.Random, item: dict[str, Any]) -> str:
    word = max(item["name"].split(), key=len)
    if rng.random() < 0.5 and sum(word.lower() in i["name"].lower() for i in d.items) == 1:
        (item_id,) = c.call("search", query=word)
    else:
        item_id = next(i["id"] for i in c.call("list") if i["name"] == item["name"])
    value = c.call("get", item=item_id)["details"][d.detail[0]]
    return f"The {d.detail[0]} of {item['name']} is {value}."


def _task_list(c: _Chat, d: Domain, rng: random.Random, category: str) -> str:
    names = [i["name"] for i in c.call("list", category=category)]
    return f"The {category} {d.things}: {', '.join(names)}." if names else f"There are no {category} {d.things}."


def _act(c: _Chat, d: Domain, rng: random.Random, item_id: str, person: str, when: tuple[int, int]) -> dict:
    kw: dict[str, Any] = {"item": item_id, "person": person, "date": d.date(*when)}
    if rng.random() < 0.3:
        kw["option"] = rng.choice(d.option[1])
    return c.call("act", **kw)


def _status_answer(c: _Chat, d: Domain, record_id: str) -> str:
    return f"{d.record.capitalize()} {record_id} is {c.call('status', record=record_id)['status']}."


def build_task(d: Domain, rng: random.Random, *, mistake: bool) -> tuple[list[dict[str, Any]], str]:
    """One task over ``d`` with its reference chat; returns the messages and the task kind."""
    people, days = rng.sample(PEOPLE, 3), [_when(rng) for _ in range(8)]
    days = list(dict.fromkeys(days))  # distinct dates: no reference call finds its thing already taken
    for person, when in zip(people[1:], days[2:], strict=False):  # others' records: the person's own is picked out
        d._act({d.args["item"]: rng.choice(d.items)["id"], d.args["person"]: person, d.args["date"]: d.date(*when)})
    item, person, when = rng.choice(d.items), people[0], days[0]
    day = f"{MONTHS[when[0] - 1]} {when[1]}"
    kind = rng.choice(["lookup", "list", "act", "cheapest", "cancel", "move", "act_status", "move_status"])
    if kind == "lookup":
        c = _Chat(d, rng, rng.choice([f"What is the {d.detail[0]} of the {d.thing} {item['name']}?",
                                      f"Tell me the {d.detail[0]} of {item['name']}."]), mistake)  # fmt: skip
        return c.answer(_task_lookup(c, d, rng, item)), kind
    if kind == "list":
        category = rng.choice(d.categories)
        c = _Chat(d, rng, f"Which {category} {d.things} are there?", mistake)
        return c.answer(_task_list(c, d, rng, category)), kind
    if kind in ("act", "act_status"):
        c = _Chat(d, rng, rng.choice([f"{d.verb.capitalize()} {item['name']} for {person} on {day}.",
                                      f"Please {d.verb} the {d.thing} {item['name']} for {person}, {day}."])
                  + (" Then tell me its status." if kind == "act_status" else ""), mistake)  # fmt: skip
        item_id = next(i["id"] for i in c.call("list") if i["name"] == item["name"])
        made = _act(c, d, rng, item_id, person, when)
        if kind == "act_status":
            return c.answer(_status_answer(c, d, made["id"])), kind
        return c.answer(f"Done: {d.record} {made['id']}."), kind
    if kind == "cheapest":
        category = rng.choice(sorted({i["category"] for i in d.items}))
        c = _Chat(d, rng, f"{d.verb.capitalize()} the cheapest {category} {d.thing} for {person} on {day}.", mistake)
        listed = c.call("list", category=category)
        cheapest = min(listed, key=lambda i: (i["price"], i["id"]))
        made = _act(c, d, rng, cheapest["id"], person, when)
        return c.answer(f"{d.verb.capitalize()}ed {cheapest['name']} ({cheapest['price']}): {d.record} {made['id']}."
                        ), kind  # fmt: skip
    # cancel or move: the person holds a record first (made before the chat, like any other state)
    held = d._act({d.args["item"]: item["id"], d.args["person"]: person, d.args["date"]: d.date(*when)})
    if kind == "cancel":
        c = _Chat(d, rng, f"{d.undo_verb.capitalize()} {person}'s {d.record} on {day}.", mistake)
        mine = next(r for r in c.call("holds", person=person) if r["date"] == d.date(*when))
        c.call("undo", record=mine["id"])
        return c.answer(f"{d.record.capitalize()} {held['id']} is cancelled."), kind
    new = days[1]
    c = _Chat(
        d,
        rng,
        f"Move {person}'s {d.record} on {day} to {MONTHS[new[0] - 1]} {new[1]}."
        + (" What is its status now?" if kind == "move_status" else ""),
        mistake,
    )
    mine = next(r for r in c.call("holds", person=person) if r["date"] == d.date(*when))
    c.call("undo", record=mine["id"])
    made = _act(c, d, rng, mine["item_id"], person, new)
    if kind == "move_status":
        return c.answer(_status_answer(c, d, made["id"])), kind
    return c.answer(f"Moved: {d.record} {made['id']} on {d.date(*new)}."), kind


def synthetic_chat(seed: int, *, mistake_rate: float = 0.0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The supervised chat of generated domain ``seed`` (its own world and task) and its tool schemas."""
    domain = make_domain(seed)
    rng = random.Random(f"task-{seed}")
    messages, _ = build_task(domain, rng, mistake=rng.random() < mistake_rate)
    return messages, domain.tools


def synthetic_chats(n: int, *, seed: int = 0, mistake_rate: float = 0.0) -> list[tuple[list[dict], list[dict]]]:
    """``n`` chats, each from its own generated domain (seeds ``seed`` .. ``seed + n - 1``)."""
    return [synthetic_chat(seed + i, mistake_rate=mistake_rate) for i in range(n)]


def synthetic_count(n_sandbox: int, share: float) -> int:
    """How many generated chats join ``n_sandbox`` sandbox chats so that they are ``share`` of all."""
    if not 0.0 <= share < 1.0:
        raise SystemExit(f"--synthetic-share must be in [0, 1) (the rest comes from the sandbox), got {share}")
    return round(n_sandbox * share / (1.0 - share))


def without_apps(tasks: list[Any], apps: list[str]) -> list[Any]:
    """``tasks`` (sandbox) less those that show or call any tool of ``apps``: leave-one-app-out, so transfer to
    those apps can be measured on the test split's tasks that use them."""
    if not apps:
        return tasks
    from env_tools.sandbox.apps import APPS

    unknown = sorted(set(apps) - set(APPS))
    if unknown:
        raise SystemExit(f"--exclude-apps: no sandbox app {', '.join(unknown)}; the apps are {', '.join(sorted(APPS))}")
    names = {name for app in apps for name in APPS[app]}
    kept = [t for t in tasks if not set(t.metadata.get("apps", ())) & set(apps)
            and not any(c.name in names for c in t.reference_solution or ())]  # fmt: skip
    if not kept:
        raise SystemExit(f"--exclude-apps {','.join(apps)} leaves no sandbox task; exclude fewer apps")
    return kept


def sandbox_count(args: Any) -> int:
    """How many chats of ``--examples`` come from the sandbox's ``sft`` pool (the rest: generated domains)."""
    return round(args.examples * (1 - args.synthetic_share))


def supervised_tasks(args: Any) -> list[Any]:
    """The sandbox tasks the warm start supervises: the first ``sandbox_count`` of the ``sft`` pool, a share of
    level 3 kept (``--l3-fraction``), less ``--exclude-apps``."""
    from env_tools.sandbox.pools import split_tasks

    from .pools import warm_start_chats

    tasks = warm_start_chats(split_tasks(f"sft:{sandbox_count(args)}"), args.l3_fraction)
    return without_apps(tasks, args.exclude_apps)


def supervised_chats(
    args: Any, tasks: list[Any] | None = None
) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """The warm start's chats (``trainers.warm_start``'s options): the reference solutions of the sandbox ``tasks``
    it drew from its ``sft`` pool (a share of level 3, less ``--exclude-apps``), then ``--synthetic-share`` of
    generated ones."""
    from .tiny import reference_conversation

    tasks = supervised_tasks(args) if tasks is None else tasks
    mistakes = random.Random(1)
    chats = [reference_conversation(t, rng=mistakes, mistake_rate=args.mistake_rate) for t in tasks]
    return chats + synthetic_chats(synthetic_count(len(tasks), args.synthetic_share), mistake_rate=args.mistake_rate)

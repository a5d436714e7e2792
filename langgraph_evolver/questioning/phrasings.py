"""Other wordings of one synthesized request: the same calls asked the way people type them (issue 43).

Every request ``describe_with_descriptions`` writes has one shape: the tool's description with the values put in
("Could you join the waiting list for book 'Beloved' with no copy on the shelf with member 'Dev Patel'?"). An
adapter trained on that shape learned the shape: library run 13's GRPO adapter solved 0.91 of the one-call
validation requests and 0.38 of the hand-written one-call requests. People write shorter, from the verb of what
they want and the names they know ("Dev Patel wants to reserve Beloved.", "Renew loan L1."). ``terse_request``
writes that shape from the tool's name (``reserve``, ``return_book``: a verb and what it acts on) and the call's
values; ``alternates`` gives a task's other wordings (that one, the same in everyday verbs, and the description's
under another draw), kept in ``task.metadata[PHRASINGS_KEY]``. The everyday verbs (``SYNONYMS``: "return" is also
"bring back" and "check in", "cancel" "call off", "create" "set up") are a table of common English, not of any
server: people name what they want in their own verb, and the tool's name is one word of many.
``trainers.evolve adapt`` teaches each supervised task under its wordings, lets GRPO draw among them, and asks its
validation part in a drawn one.

Nothing here reads a server's name or its domain: only a tool's name, its description's first word, the
arguments' names (``member_id``: a person's record, ``OWNER_KEYS``) and the records' names the exploration saw.

Example:
    >>> from langgraph_evolver.types import ToolCall
    >>> terse_clause(ToolCall(name="reserve", arguments={"member_id": "M4", "book_id": "B102"}),
    ...              "Join the waiting list for a book.", {}, {"M4": "Dev Patel", "B102": "Beloved"}, wants=True,
    ...              quote=False)
    'Dev Patel wants to reserve Beloved'
    >>> terse_clause(ToolCall(name="renew", arguments={"loan_id": "L1"}), "Renew a loan for 14 more days.", {}, {})
    'renew loan L1'
    >>> terse_clause(ToolCall(name="return_book", arguments={"loan_id": "L2"}), "Return a loan.", {},
    ...              {"L2": Owned("Dev Patel", "loan", "Middlemarch")}, wants=True)
    "Dev Patel wants to return 'Middlemarch'"
    >>> terse_clause(ToolCall(name="list_loans", arguments={"member_id": "M4"}), "Open loans of a member.", {},
    ...              {"M4": "Dev Patel"})
    "show me Dev Patel's loans"
    >>> terse_clause(ToolCall(name="cancel_booking", arguments={"booking_id": "B7"}), "Cancel a booking.", {}, {},
    ...              synonyms=random.Random(1))
    'call off booking B7'
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from langgraph_evolver.types import ToolCall, ToolObservation

from .profile import MORE_WRITE_VERBS, READ_VERBS, WRITE_VERBS, plural, singular, tool_kind
from .wording import OWNER_KEYS, Owned, arg_noun, describe_with_descriptions, id_argument, quotes, shown_value

__all__ = ["PHRASINGS_KEY", "SYNONYMS", "alternates", "phrased", "terse_clause", "terse_request", "wordings"]

PHRASINGS_KEY = "phrasings"
"""``task.metadata`` key of a synthesized task's other wordings of its request (``alternates``)."""
_VERBS = READ_VERBS | WRITE_VERBS | MORE_WRITE_VERBS
_TERSE_JOINERS = (", then ", ". Then ", " and ")
_AMOUNTS = frozenset({"amount", "quantity", "qty", "count", "number", "total", "sum", "value"})
"""Numeric arguments a request says as a bare amount ("pay fine of 1"), not by their name."""
_LOOKS = frozenset({"find", "search", "get", "lookup", "fetch", "read", "view", "show"})
SYNONYMS = {
    "add": ("put in", "include"), "approve": ("accept", "sign off on"), "assign": ("give", "hand"),
    "book": ("reserve", "schedule"), "borrow": ("check out", "take out"), "buy": ("purchase", "order"),
    "cancel": ("call off", "drop"), "close": ("shut", "wrap up"), "complete": ("finish", "finalize"),
    "create": ("make", "set up", "open"), "delete": ("remove", "get rid of"), "edit": ("change", "modify"),
    "lend": ("loan", "check out"), "move": ("transfer", "shift"), "order": ("buy", "purchase"),
    "pay": ("settle", "pay off"), "register": ("sign up", "enrol"), "reject": ("decline", "turn down"),
    "remove": ("delete", "take off"), "rename": ("retitle", "call"), "renew": ("extend", "prolong"),
    "reschedule": ("move", "rebook"), "reserve": ("hold", "put a hold on"), "refund": ("pay back", "reimburse"),
    "return": ("bring back", "check in", "hand back"), "send": ("dispatch", "mail"), "ship": ("send", "dispatch"),
    "schedule": ("book", "arrange"), "set": ("change", "make"), "submit": ("send in", "file"),
    "transfer": ("move", "send"), "update": ("change", "modify", "edit"),
}  # fmt: skip
"""Everyday English for the verbs write tools are named with (the ``colloquial`` wording): common usage, drawn up
from no server's tools or tasks."""


def _name_words(name: str) -> list[str]:
    """A tool name's words: ``return_book`` and ``returnBook`` -> ``["return", "book"]``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name).replace("_", " ").replace("-", " ")
    return [w.lower() for w in spaced.split() if w]


def _verb(name: str, description: str) -> tuple[str, str] | None:
    """The verb a tool's name starts with and what it acts on (``("return", "book")``, ``("reserve", "")``): the
    first word when it is a known verb or the description's first word; ``None`` otherwise ("zone_info")."""
    words = _name_words(name)
    if not words:
        return None
    first_described = (description.strip().split() or [""])[0].lower().strip(".,:;")
    if words[0] not in _VERBS and words[0] != first_described:
        return None
    return words[0], " ".join(words[1:])


def _person(arg: str) -> bool:
    return arg_noun(arg) in OWNER_KEYS


def terse_clause(call: ToolCall, description: str, records: Mapping[Any, str], names: Mapping[str, str] | None = None,
                 *, wants: bool = False, quote: bool = True, synonyms: random.Random | None = None
                 ) -> str | None:  # fmt: skip
    """One call asked in few words from its tool's name (see the module docstring), lower case first unless a
    name leads; ``wants`` puts the person it is for first ("Dev Patel wants to reserve Beloved") when a write
    names one; ``synonyms`` draws a write's verb from ``SYNONYMS`` ("bring back 'Beloved'") where it has some.
    ``None`` when the tool's name does not start with a verb."""
    verbed = _verb(call.name, description)
    if verbed is None:
        return None
    verb, entity = verbed
    names = names or {}
    args = {k: v for k, v in (call.arguments if isinstance(call.arguments, dict) else {}).items() if v != ""}
    if not args and call.arguments and tool_kind(call.name, description) == "read":  # a broad search
        return f"list all the {plural(singular(entity or arg_noun(next(iter(call.arguments)))))}"
    person: str | None = None
    objects: list[str] = []
    named_object = False  # an object by its own name stands for the entity ("reserve Beloved", not "book Beloved")
    for arg, value in args.items():
        named = names.get(str(value))
        if isinstance(named, Owned):  # a record found among its owner's: the owner asks, the thing is named
            person = person or str(named)
            objects.append(f"'{named.of}'" if named.of and quote else named.of or f"the {named.noun}")
            named_object = True
            continue
        if named is not None:
            shown = f"'{named}'" if quote and not _person(arg) else str(named)
            named_object = named_object or not _person(arg)
        elif id_argument(arg):
            shown = f"{arg_noun(arg)} {shown_value(arg, value, records, quote=quote)}"
        elif isinstance(value, int | float) and not isinstance(value, bool):
            shown = f"of {value}" if arg_noun(arg) in _AMOUNTS else f"{arg_noun(arg)} {value}"
        else:  # a text or a list: by its argument's name too when it is one of several ("sheet Budget, cell B3")
            shown = shown_value(arg, value, records, quote=quote and not isinstance(value, list))
            shown = f"{arg_noun(arg)} {shown}" if len(args) > 1 and not _person(arg) else shown
        if _person(arg) and person is None:
            person = shown
        else:
            objects.append(shown)
    writes = tool_kind(call.name, description) == "write"
    if not writes:
        return _terse_read(verb, entity, args, person, objects)
    said = entity and not named_object and not any(re.search(rf"\b{re.escape(entity)}\b", o) for o in objects)
    if synonyms is not None and verb in SYNONYMS:
        verb = synonyms.choice(SYNONYMS[verb])
    action = " ".join([verb, *([entity] if said else []), *objects])
    if person is None:
        return action
    if wants:
        return f"{person} wants to {action}"
    return f"{action} for {person}"


def _terse_read(verb: str, entity: str, args: Mapping[str, Any], person: str | None, objects: list[str]) -> str:
    """A read in few words: "show me Dev Patel's loans", "look up 'Beloved'", "list the members"."""
    thing = entity or "details"
    shown = [*([person] if person else []), *objects]
    if not shown:
        return f"{verb} the {plural(singular(thing)) if verb == 'list' else thing}"
    first = next(iter(args))
    if id_argument(first) or person:  # a record asked by its id or its name: its own details, or its things
        whose = singular(thing) != singular(arg_noun(first))  # list_loans(member): Dev Patel's loans
        head = f"show me {shown[0]}'s {thing}" if whose else f"look up {shown[0]}"
        return head + (f" for {' and '.join(shown[1:])}" if shown[1:] else "")
    if verb in _LOOKS:
        return f"look up {' and '.join(shown)}"
    return f"{verb} {thing} {' '.join(shown)}"


def terse_request(pairs: Sequence[tuple[ToolCall, ToolObservation]], descriptions: Mapping[str, str],
                  records: Mapping[Any, str], *, seed: int = 0, names: Mapping[str, str] | None = None,
                  colloquial: bool = False) -> str | None:  # fmt: skip
    """The calls of ``pairs`` asked in few words, one ``terse_clause`` each (drawn with ``seed``: whether a
    person leads, whether values are quoted, the joiners; ``colloquial``: the writes' verbs from ``SYNONYMS``);
    ``None`` when a tool's name has no verb."""
    rng = random.Random(f"terse-{seed}")
    quote = quotes(f"terse-{seed}")
    wants = rng.random() < 0.5
    synonyms = random.Random(f"synonyms-{seed}") if colloquial else None
    clauses = [terse_clause(call, descriptions.get(call.name, ""), records, names, wants=wants, quote=quote,
                            synonyms=synonyms) for call, _ in pairs]  # fmt: skip
    if not clauses or any(c is None for c in clauses):
        return None
    text = str(clauses[0])
    for part in clauses[1:]:
        text += rng.choice(_TERSE_JOINERS) + str(part)
    return text[:1].upper() + text[1:] + "."


def alternates(
    query: str,
    pairs: Sequence[tuple[ToolCall, ToolObservation]],
    descriptions: Mapping[str, str],
    records: Mapping[Any, str],
    *,
    seed: int = 0,
    names: Mapping[str, str] | None = None,
) -> list[str]:
    """A request's other wordings: the terse one, the terse one in everyday verbs (``SYNONYMS``; only where a
    write's verb has some) and the description's under another draw of its opening, joiners and quoting; none
    equal to ``query`` or to each other."""
    out: list[str] = []
    for text in (terse_request(pairs, descriptions, records, seed=seed, names=names),
                 terse_request(pairs, descriptions, records, seed=seed, names=names, colloquial=True),
                 describe_with_descriptions(pairs, descriptions, records, seed=seed + 1, names=names)):  # fmt: skip
        if text and text != query and text not in out:
            out.append(text)
    return out


def wordings(task: Any) -> list[str]:
    """Every wording of ``task``'s request: its own first, then its ``PHRASINGS_KEY``."""
    return [task.query, *((task.metadata or {}).get(PHRASINGS_KEY) or [])]


def phrased(task: Any, index: int) -> Any:
    """``task`` asked in its ``index``-th wording (0: its own request; counting on through its ``PHRASINGS_KEY``,
    round and round): the same task, id and reference, another request."""
    every = wordings(task)
    query = every[index % len(every)]
    return task if query == task.query else dataclasses.replace(task, query=query)

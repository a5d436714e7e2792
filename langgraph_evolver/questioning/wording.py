"""Task wording from what the tools say they do and the records the world holds (issue 39).

A tool's name says little ("cancel", "zone_info"); its description says what it does in words a user
would use ("Cancel a booking; its slot becomes free again."). ``describe_with_descriptions`` takes
the first clause of each tool's description and puts the call's arguments into it: a noun the
description names gets its value (``"a booking"`` + ``booking_id="B1"`` -> ``"booking B1"``, ``"some
months"`` + ``months=2`` -> ``"2 months"``), an id the world's records name gets that name too
(``doctor D1 (Dr Ana Ruiz)``), and what the description does not name follows as ``with ...``. A
description that is a noun phrase ("Fee per month, permit cap ... for one zone") is a question:
"Tell me the fee per month, ... for zone 'north'". A tool with no description gets a phrase made
of its name, never the bare name as an instruction ("use cancel").

Example:
    >>> from langgraph_evolver.types import ToolCall
    >>> call = ToolCall(name="cancel", arguments={"booking_id": "B1"})
    >>> clause(call, "Cancel a booking; its slot becomes free again.", {})
    'cancel booking B1'
    >>> clause(ToolCall(name="zone_info", arguments={"zone": "north"}), "Fee per month and cap for one zone.", {})
    "tell me the fee per month and cap for zone 'north'"
    >>> clause(ToolCall(name="find_slots", arguments={"doctor_id": "D1"}), "Free slots of a doctor.",
    ...        {"D1": "Dr Ana Ruiz"})
    'tell me the free slots of doctor D1 (Dr Ana Ruiz)'

A read whose every argument is empty is the explorer's broad search ("Members whose name contains the text" with
``name=""``): it asks for all of the tool's records, as people do, not for a text it never gives:

    >>> clause(ToolCall(name="find_member", arguments={"name": ""}), "Members whose name contains the text.", {})
    'tell me all the members'

A record with no name of its own but a person's (a shipment's ``recipient``, an order's ``customer``) goes
by that person's (``record_owners``): a request that names it says "Jonas Weber's shipment"
(``Owned``), as people do:

    >>> clause(ToolCall(name="cancel_shipment", arguments={"tracking_number": "TRK3"}),
    ...        "Cancel a shipment that has not been picked up yet.", {}, {"TRK3": Owned("Jonas Weber", "shipment")})
    "cancel Jonas Weber's shipment that has not been picked up yet"
    >>> clause(ToolCall(name="track", arguments={"tracking_number": "TRK3"}),
    ...        "A shipment's status and scan history.", {}, {"TRK3": Owned("Jonas Weber", "shipment")})
    "tell me Jonas Weber's shipment's status and scan history"
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from langgraph_evolver.tool_results import read_result
from langgraph_evolver.types import ToolCall, ToolObservation

from .profile import READ_VERBS, WRITE_VERBS, plural, singular, snake, tool_entity, tool_kind

__all__ = [
    "NAME_KEYS",
    "OWNER_KEYS",
    "QUOTED",
    "Owned",
    "Titled",
    "arg_noun",
    "clause",
    "describe_with_descriptions",
    "id_argument",
    "id_values",
    "quotes",
    "record_ids",
    "record_labels",
    "searches",
    "record_names",
    "record_owners",
    "shown_value",
]

_ID_SUFFIXES = ("_id", "_code", "_number", "_key")
NAME_KEYS = ("name", "title", "label", "full_name", "display_name", "nickname", "nick", "alias", "known_as",
             "short_name", "common_name")  # fmt: skip
"""Keys of a record that hold what people call it, the first found wins: a hire bike goes by its nickname
("Marge"; bikeshop, session 74), a person by their name before any nickname."""
OWNER_KEYS = ("recipient", "owner", "customer", "client", "member", "patient", "guest", "holder", "assignee",
               "requester", "sender", "user", "host", "tenant", "buyer", "employee", "student")  # fmt: skip
"""Keys of a record that hold the person it belongs to: a record with no name goes by theirs."""


class Owned(str):
    """How a request names a record by its owner's name: one with no name of its own (``"Jonas Weber's
    shipment"``), or one found only among its owner's (``of``: ``"Dev Patel's loan of 'Middlemarch'"``). The
    string is the owner's name (what a lookup searches by); ``noun`` is what the record is."""

    noun: str
    of: str

    def __new__(cls, owner: str, noun: str, of: str = "") -> Owned:
        made = super().__new__(cls, owner)
        made.noun, made.of = noun, of
        return made

    @property
    def phrase(self) -> str:
        return f"{self}'s {self.noun}" + (f" of '{self.of}'" if self.of else "")


class Titled(str):
    """A record's text label (``_text_labels``: a ticket's subject), with ``noun``, what the record is: a request
    names it as people do, "the ticket 'CSV export times out'" (``phrase``), where a name stands alone."""

    noun: str

    def __new__(cls, label: str, noun: str) -> Titled:
        made = super().__new__(cls, label)
        made.noun = noun
        return made

    @property
    def phrase(self) -> str:
        return f"the {self.noun} '{self}'" if self.noun else f"'{self}'"


_ARTICLES = r"(?:an?|the|one|some|any|several|a few|a given|given|its|their|his|her)"
_QUESTION_VERBS = frozenset({"get", "gets", "return", "returns", "fetch", "fetches", "show", "shows", "give", "gives"})
_OPENINGS = ("", "Please ", "Could you ", "I need you to ")
_JOINERS = (", then ", "; after that, ", " and then ", ". Next, ")
_IMPERATIVE = READ_VERBS | WRITE_VERBS | {"look", "tell", "list", "find", "search", "count", "check"}
QUOTED = 0.5
"""The share of synthesized requests that quote their values (``describe_with_descriptions``). People rarely
quote ("What is in cell C4 of the Budget sheet?"): an adapter taught only on quoted values copied the bare word
of a written request with the space before it (`` Budget``: 16 of 211 texts in a sheets run's held-out calls,
none in its quoted validation)."""


def quotes(key: object, share: float = QUOTED) -> bool:
    """Whether the request drawn by ``key`` (its seed) quotes its values, for a ``share`` of keys: a draw of its
    own, so the wording's other draws from the same seed stay as they were."""
    return random.Random(f"quote-{key}").random() < share


def _first_clause(description: str) -> str:
    """The description's first clause: up to the first sentence end, ``;``, ``e.g.`` or parenthesis; past a
    parenthesis that cuts a possessive from its noun ("A month's (YYYY-MM) spending per category" is "A month's
    spending per category": "tell me the month 2026-11's" asks for nothing)."""
    text = " ".join(description.strip().split())
    cut = r"(?<=[a-z0-9)])\.(?:\s|$)|;|\s\(|,?\s+e\.g\.|\n|:\s|,\s+(?:optionally|if|or|unless)\b"
    first = re.split(cut, text, maxsplit=1)[0]
    if first.endswith("'s"):
        first = re.split(cut, re.sub(r"\s\([^()]*\)", "", text), maxsplit=1)[0]
    return first.strip().rstrip(".,")


SEARCH_ARGS = ("query", "name", "title", "search", "text", "term", "keyword")
"""Words of an argument's name that make it the free text a search matches (``find_payee(text=...)``)."""


_SEARCH_WORDS = frozenset({"q", "who"})
"""Short names of a search's free text, matched as whole words (``who``: a bike-shop's ``member_lookup(who)``, by
id, email or name); a substring "q" made ``quantity`` a search."""


def searches(arg: str) -> bool:
    """Whether an argument is a search's free text by its name (``query``, ``text``, ``name_contains``, ``who``).

    >>> searches("name_contains"), searches("queryText"), searches("who"), searches("quantity")
    (True, True, True, False)
    """
    words = snake(arg).lower().split("_")
    return any(w in arg.lower() for w in SEARCH_ARGS) or bool(_SEARCH_WORDS.intersection(words))


def id_argument(arg: str) -> bool:
    """Whether an argument holds a record's id by its name (``id``, ``book_id``, ``order_code``, ``order_number``,
    ``animalId``)."""
    arg = snake(arg)
    return arg == "id" or (arg.endswith(_ID_SUFFIXES) and not any(arg == s for s in _ID_SUFFIXES))


def id_values(record: Mapping[str, Any]) -> list[str]:
    """A record's ids: the values (strings or numbers) under the keys ``id_argument`` takes."""
    return [str(v) for k, v in record.items() if id_argument(str(k)) and isinstance(v, str | int)]


def arg_noun(arg: str) -> str:
    """What an argument names: ``loan_id`` -> ``loan``, ``due_date`` -> ``due date``, ``animalId`` -> ``animal``."""
    arg = snake(arg)
    for suffix in _ID_SUFFIXES:
        if arg.endswith(suffix) and len(arg) > len(suffix):
            return arg[: -len(suffix)].replace("_", " ")
    return arg.replace("_", " ")


def shown_value(arg: str, value: Any, records: Mapping[Any, str], names: Mapping[str, str] | None = None, *,
                quote: bool = True) -> str:  # fmt: skip
    """How a value reads in a request: ids as they are (and the record's name), other strings quoted; an id in
    ``names`` by its name alone (the request names the record, the agent looks its id up). Without ``quote``,
    texts and names stand bare and a list of plain values reads as ``Date, Destination, Cost``, as people write
    them: a model taught only on quoted values copies a bare word with the space before it (`` Budget``)."""
    text = str(value)
    if names and text in names:
        name = names[text]
        return name.phrase if isinstance(name, Owned) else f"'{name}'" if quote else str(name)
    if id_argument(arg) or re.fullmatch(r"[A-Z]*-?\d[\w-]*|\d+(?:\.\d+)?", text):
        label = records.get(text)
        return f"{text} ({label})" if label and label != text else text
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list) and not quote and value and all(isinstance(v, str | int | float) for v in value):
        return ", ".join(str(v) for v in value)
    if isinstance(value, list | dict):
        return str(value)
    return f"'{text}'" if quote else text


def _article_noun(phrase: str, noun: str, *, plural: bool = True) -> re.Match[str] | None:
    """An article, up to two words and ``noun`` ("a book", "one or more overdue books"): group 1 the words, 2 an s."""
    tail = "(s?)" if plural else ""
    return re.search(rf"\b{_ARTICLES}\s+((?:[a-z]+\s+){{0,2}}?){re.escape(noun)}{tail}(?![\w-])", phrase, re.I)


def clause(call: ToolCall, description: str, records: Mapping[Any, str], names: Mapping[str, str] | None = None,
           *, quote: bool = True) -> str:  # fmt: skip
    """One call as a request, from its tool's description (see the module docstring); lower case first. Ids in
    ``names`` are shown by their record's name only; ``quote`` as ``shown_value`` takes it."""
    args = call.arguments if isinstance(call.arguments, dict) else {}
    phrase = _first_clause(description or "")
    if not phrase:
        return _from_name(call, records, names, quote=quote)
    if args and all(v == "" for v in args.values()) and tool_kind(call.name, description) == "read":  # a broad search
        return f"tell me all the {plural(tool_entity(call.name).replace('_', ' '))}"
    leading = phrase.split()[0].lower()  # before a value replaces "One book": "book B1" is not the verb "book"
    rest: list[str] = []
    owned: list[str] = []
    owner_first: Owned | None = None
    for arg, value in args.items():
        if value == "":  # a broad search (the explorer's first probe): no filter to name
            continue
        noun = arg_noun(arg)
        shown = shown_value(arg, value, records, names, quote=quote)
        owner = (names or {}).get(str(value))
        if isinstance(owner, Owned):  # "a shipment" -> "Jonas Weber's shipment"
            found = _article_noun(phrase, owner.noun, plural=False)
            if found:
                phrase = phrase.replace(found.group(0), f"{found.group(1)}{owner.phrase}", 1)
                owner_first = owner_first or owner
            else:
                owned.append(owner.phrase)
            continue
        numeric = isinstance(value, int | float) and not isinstance(value, bool) and "id" not in snake(arg).split("_")
        chosen = _choose(phrase, value, shown) if isinstance(value, str) and not id_argument(arg) else None
        if chosen is not None:  # "Move a work order to open, in_progress or done" + status="done": "... to done"
            phrase = chosen
            continue
        found = _article_noun(phrase, noun)
        amount = re.search(rf"\b(?:\d+\s+to\s+\d+|some|several|a few|a number of)\s+{re.escape(noun)}s?\b", phrase,
                           re.I) if numeric else None  # fmt: skip
        if amount:  # "some months" + months=2: "2 months"
            counted = singular(noun) if value == 1 else noun if noun.endswith("s") else f"{noun}s"
            phrase = phrase.replace(amount.group(0), f"{value} {counted}", 1)
        elif found and not numeric:
            possessive = phrase[found.end() :].startswith("'s")
            after = re.match(r"'s (\w+)", phrase[found.end() :]) if isinstance(owner, Titled) else None
            if after:  # "a ticket's priority": "priority of ticket 'CSV export times out'", not "...out's"
                tail = phrase[found.end() + after.end() :]
                phrase = f"{phrase[: found.start()]}{after.group(1)} of {noun}{found.group(2)} {shown}{tail}"
            else:
                named = shown.strip("'") if possessive else shown
                # the noun's head word stays with it: "by its plate number" -> "by plate number GMT509"
                head = re.match(r"\s+(number|code|name|id)\b", phrase[found.end() :]) if not possessive else None
                whole = found.group(0) + (head.group(0) if head else "")
                kept = f"{found.group(1)}{noun}{found.group(2)}{head.group(0) if head else ''}"
                phrase = phrase.replace(whole, f"{kept} {named}", 1)
        else:
            rest.append(f"{noun} {shown}")
    words = phrase.split()
    first = words[0].lower() if words else ""
    reads = tool_kind(call.name, description) == "read"
    if leading in _QUESTION_VERBS and reads:  # "Returns the fee ..." asks for something ("Return a loan" does not)
        phrase = "tell me " + " ".join(words[1:])
    elif leading not in _IMPERATIVE and reads:  # a noun phrase: a question
        person = isinstance(owner_first, Owned) and phrase.startswith(owner_first.phrase)  # "Jonas Weber's ..."
        lead = "" if person or first in ("the", "a", "an", "one", "every", "all") else "the "
        phrase = f"tell me {lead}{phrase if person else phrase[:1].lower() + phrase[1:]}"
    else:
        phrase = phrase[:1].lower() + phrase[1:]
    if rest:
        phrase += " with " + " and ".join(rest)
    if owned:
        phrase += " for " + " and ".join(owned)
    return phrase


def _choose(phrase: str, value: str, shown: str) -> str | None:
    """``phrase`` with the list of choices that holds ``value`` ("open, in_progress, waiting_parts or done") replaced
    by the value as shown, else ``None``: "move work order wo_7a13 to done", not "move work order wo_7a13 to open,
    in_progress, waiting_parts or done with status done" (a garage synthesis, session 71).

    >>> _choose("Move a work order to open, in_progress or done", "done", "'done'")
    "Move a work order to 'done'"
    >>> _choose("Set a ticket open or closed", "pending", "pending") is None
    True
    """
    for found in re.finditer(r"[\w-]+(?:,\s+[\w-]+)*,?\s+or\s+[\w-]+", phrase):
        items = [w.lower() for w in re.split(r",\s+|,?\s+or\s+", found.group(0))]
        if value.lower() in items:
            return phrase[: found.start()] + shown + phrase[found.end() :]
    return None


def _from_name(call: ToolCall, records: Mapping[Any, str], names: Mapping[str, str] | None = None, *,
               quote: bool = True) -> str:  # fmt: skip
    """A request from the tool's name when it has no description: its words, then the arguments."""
    args = call.arguments if isinstance(call.arguments, dict) else {}
    words = snake(call.name).replace("_", " ").strip()
    parts = [f"{arg_noun(k)} {shown_value(k, v, records, names, quote=quote)}" for k, v in args.items()]
    verb = words.split(" ", 1)[0].lower()
    if words == verb and tool_kind(call.name) == "write":  # "cancel" + booking_id: "cancel booking B1"
        return f"{verb} " + " and ".join(parts) if parts else verb
    lead = words if verb in _IMPERATIVE or tool_kind(call.name) == "write" else f"get the {words}"
    return lead + (" for " + " and ".join(parts) if parts else "")


def record_names(observations: Sequence[ToolObservation]) -> dict[str, str]:
    """The names the world's records give their ids: ``{"D1": "Dr Ana Ruiz"}`` from ``{"id": "D1", "name": ...}``;
    a record with neither a name nor an owner goes by its text label (``_text_labels``: a ticket's subject, a
    transaction's description), the first of its labels no other record holds (two tickets "in progress" have a
    state, not a name; four transactions from "FreshMart" are told apart by their description; a payee's one
    transaction is not named by the payee, which is the payee record's name too)."""
    out: dict[str, str] = {}
    labelled: dict[str, list[Titled]] = {}
    holders: dict[str, set[str]] = {}  # a text, and the records that hold it (by their own id, else by position)
    for n, record in enumerate(_records(observations)):
        own = (id_values(record) or [f"#{n}"])[0]
        for value in record.values():
            if isinstance(value, str):
                holders.setdefault(value.strip(), set()).add(own)
        if (name := _name(record)) is not None:
            for value in id_values(record):
                out.setdefault(value, name)
        elif labels := _text_labels(record):
            key = next(str(k) for k in record if id_argument(str(k)))
            noun = "" if key == "id" else arg_noun(key)
            labelled.setdefault(id_values(record)[0], [Titled(label, noun) for label in labels])
    for value, titled in labelled.items():  # a text another record holds names that one, or both
        if (label := next((t for t in titled if holders[t] == {value}), None)) is not None:
            out.setdefault(value, label)
    return out


_LABEL_WORDS = (2, 8)
"""How many words a record's text label has (``_text_labels``): one word is a state or a kind ("open"), more than
eight a sentence."""


def _text_labels(record: Mapping[str, Any]) -> list[str]:
    """What a record with an id and neither a name nor an owner may go by, as people name it, in its fields'
    order: its fields of a few plain words (``{"ticket_id": 104, "subject": "CSV export times out", "status":
    "open"}`` -> the subject; a transaction's payee, then its description), not an id, a number, a date, an
    address or a sentence (no digit, no ``@``, ``/`` or sentence punctuation). Its first id is its own, the others
    the records it refers to (a transaction's ``account_id``)."""
    if _name(record) is not None or _owner(record) is not None or not id_values(record):
        return []
    labels = []
    for key, value in record.items():
        if not isinstance(value, str) or id_argument(str(key)) or re.search(r"[\d@/.,;:!?]", value):
            continue
        if _LABEL_WORDS[0] <= len(value.split()) <= _LABEL_WORDS[1]:
            labels.append(value.strip())
    return labels


def _name(record: Mapping[str, Any]) -> str | None:
    return next((record[k] for k in NAME_KEYS if isinstance(record.get(k), str) and record[k].strip()), None)


def _owner(record: Mapping[str, Any]) -> str | None:
    """The key that holds a nameless record's owner (a person's name, not their id), None for a named record."""
    if _name(record) is not None:
        return None
    return next((k for k in OWNER_KEYS if isinstance(record.get(k), str) and record[k].strip()
                 and not any(c.isdigit() for c in record[k])), None)  # fmt: skip


def record_labels(observations: Sequence[ToolObservation]) -> list[str]:
    """What each record with an id goes by, once per record (a loan's ``loan_id``, ``book_id`` and ``member_id``
    are one record): its name, else its owner's. Two equal labels: two records answer to that name."""
    out = []
    for record in _records(observations):
        if not id_values(record):
            continue
        name, key = _name(record), _owner(record)
        if name or key is not None:
            out.append(name or record[str(key)].strip())
        else:
            out.extend(_text_labels(record))
    return out


def record_ids(observations: Sequence[ToolObservation]) -> frozenset[str]:
    """The ids the results hold as records' ids (under a key ``id_argument`` takes), not the same digits
    elsewhere (a zone's ``"cap": 2``)."""
    return frozenset(value for record in _records(observations) for value in id_values(record))


def _records(observations: Sequence[ToolObservation]) -> Iterator[Mapping[str, Any]]:
    """Every object (at any depth) in the results that are not errors."""

    def visit(value: Any) -> Iterator[Mapping[str, Any]]:
        if isinstance(value, Mapping):
            yield value
            for v in value.values():
                yield from visit(v)
        elif isinstance(value, list):
            for v in value:
                yield from visit(v)

    for obs in observations:
        if not obs.is_error:
            yield from visit(read_result(obs.content))


def record_owners(observations: Sequence[ToolObservation]) -> dict[str, tuple[str, str]]:
    """The records with no name of their own but a person's: ``{"TRK3": ("recipient", "Jonas Weber")}`` from
    ``{"tracking_number": "TRK3", "recipient": "Jonas Weber"}`` (the key, for a lookup that filters by it)."""
    out: dict[str, tuple[str, str]] = {}
    for record in _records(observations):
        if (key := _owner(record)) is not None:
            for value in id_values(record):
                out.setdefault(value, (key, record[key].strip()))
    return out


def describe_with_descriptions(
    pairs: Sequence[tuple[ToolCall, ToolObservation]],
    descriptions: Mapping[str, str],
    records: Mapping[Any, str],
    *,
    seed: int = 0,
    names: Mapping[str, str] | None = None,
    quoted: float = QUOTED,
) -> str:
    """A request for a sequence of calls, worded from the tools' descriptions and the records' names (ids in
    ``names`` by their name alone). A share ``quoted`` of requests (drawn with ``seed``) quote their texts and
    names ("with sheet 'Budget'"), the others leave them bare ("with sheet Budget"), as people write them."""
    rng = random.Random(seed)
    quote = quotes(seed, quoted)
    clauses = [clause(call, descriptions.get(call.name, ""), records, names, quote=quote) for call, _ in pairs]
    opening = rng.choice(_OPENINGS)
    joiners = [j for j in _JOINERS if not (opening == "Could you " and j.startswith("."))]
    text = clauses[0]
    for part in clauses[1:]:
        text += rng.choice(joiners) + part
    last = pairs[-1][0]
    if tool_kind(last.name, descriptions.get(last.name, "")) == "read" and not clauses[-1].startswith("tell me"):
        text += rng.choice((" and tell me what you find", " and report back", " and tell me the result"))
    text = opening + text
    return text[0].upper() + text[1:] + ("?" if text.startswith("Could") else ".")

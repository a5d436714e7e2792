"""Fact questions: one field of a record, asked for by the record's name, as people ask.

"How much does Ben Osei owe in fines?" is what users type; the synthesizer's other tasks read "tell me the
member M2 (Ben Osei)'s name, fine owed and open loans" and are checked by any one of the values the read
returned. A fact question takes one successful read of the exploration whose result holds a named record
(``{"id": "M2", "name": "Ben Osei", "fines": 2.5}``), picks one of its plain fields, and asks for it by the
record's name only ("What is Ben Osei's fines?"): the reference is the lookup that finds the record by its
name and, when the read needed the record's id, the read itself; the answer is that field's value
(``metadata["answer"]``, the same check as a hand-written task's ``answer``). The filter replays the
reference and keeps the task only when a replayed read returns that value (``FACT_KEY``).

A table (a list of rows whose first row is its headers, as spreadsheet and SQL tools return) is read as
records, one a row, each going by its label: the cell under a name header, else under the first column of
distinct texts ("What is the Qty of Toner? Read sheet 'Inventory', cells 'A1:D5'.", the read alone, named in the
request: ``table_facts``).

A record with no name goes by its owner's ("What is the status of Jonas Weber's shipment?") or, when the read
took its id, by the id ("What is the status of TRK1003?"). Nothing here reads a server's or a tool's name: the
fields are any record's keys that are not ids or names.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from langgraph_evolver.tool_results import read_result
from langgraph_evolver.types import ToolCall, ToolObservation

from .profile import singular, snake, tool_entity
from .wording import NAME_KEYS, Owned, Titled, arg_noun, id_argument, id_values, quotes, searches, shown_value

__all__ = ["FACT_KEY", "ID_SHARE", "PER_RECORD", "Fact", "fact_questions", "field_phrases", "record_rows",
           "table_facts", "table_rows"]  # fmt: skip

FACT_KEY = "fact"
"""``task.metadata`` key of a fact question: the field it asks for (the filter checks a read returns the answer)."""
_MAX_TEXT = 40
_POSSESSIVE = "What is {name}'s {field}?"
"""Not for a record named by its owner: "What is Jonas Weber's shipment's status?"."""
_PLAIN = ("Tell me {name}'s {field}.", "What is the {field} of {name}?", "Look up {name} and tell me the {field}.")
_ENTITY = "Can you find the {field} of the {entity} {name}?"
"""Only for a record named by its own name: "the shipment TRK1002" repeats what an id or an owner's name says."""
_TEMPLATES = (_POSSESSIVE, *_PLAIN, _ENTITY)
_ID_TEMPLATES = ("What is {name}'s {entity} id?", "What is the {entity} id of {name}?", "Find {name}'s {entity} id.")
"""A record's own id asked by its name ("What is Chloe Martin's member id?"): the answer is in the lookup's result."""
_COUNT_STATE = "How many of {name} are {field}?"
"""A count under a state's name (``available``, ``reserved``): "What is Beloved's available?" says nothing a person
would; "How many of Beloved are available?" has the words people ask with ("How many copies ... are available?")."""
_COUNT_PLURAL = "How many {field} does {name} have?"
_STATES = frozenset({"available", "left", "remaining", "free", "open", "active", "pending", "overdue", "due",
                     "unread", "booked", "reserved", "sold", "instock", "onhand"})  # fmt: skip
ID_SHARE = 0.25
"""The share of named records whose own id is asked too (drawn per record with the seed). People seldom ask for an
id: one of the 66 hand-written requests of the three example servers does, where asking every named record's id made
14 of a library run's 100 tasks; its adapter then answered ids where a field was asked (session 61)."""
PER_RECORD = 2
"""Fields asked per record and read (drawn with the seed): one per record left most of a record's fields unasked (a
library run kept 13 questions of 100 tasks), and people ask one fact at a time as often as they order."""


class Fact(NamedTuple):
    """One fact question: its request, reference calls, the answer and which lookup finds which id."""

    query: str
    reference: tuple[ToolCall, ...]
    answer: str
    field: str
    resolves: list[list[Any]]
    alternates: tuple[str, ...] = ()
    """Other wordings of the question (``_alternates``): the same field of the same record."""


def _fields(record: dict[str, Any], name: str) -> Iterator[tuple[str, str]]:
    """The plain fields a question can ask for: numbers and short texts that are not ids, names or the name."""
    for key, value in record.items():
        key = str(key)
        if id_argument(key) or key in NAME_KEYS or isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int | float):
            yield key, str(value)
        elif isinstance(value, str) and value.strip() and len(value) <= _MAX_TEXT and name not in value:
            if value.strip().lower() != name.lower():
                yield key, value.strip()


_UNITS = frozenset(
    "cents pence usd eur gbp kg g lb lbs oz km mi m cm mm ml l pct ms secs mins hrs kb mb gb kwh".split()
    + "seconds minutes hours days weeks months years yrs p ct".split()
)
"""Units a field's name ends with (``price_cents``, ``weight_kg``): a measure's, not a count's."""


def field_words(field: str, answer: str = "") -> str:
    """How a question names a field: its words, a trailing unit after "in" ("price in cents", not "price cents"); a
    field holding a date (``answer``) that its name does not say is one reads "joined date", not "joined".

    >>> field_words("price_cents"), field_words("weight_kg"), field_words("copies_available"), field_words("kg")
    ('price in cents', 'weight in kg', 'copies available', 'kg')
    >>> field_words("ageYears"), field_words("submittedOn"), field_words("created_at")
    ('age in years', 'submitted date', 'created time')
    >>> field_words("joined", "2024-03-01"), field_words("due_date", "2024-03-01"), field_words("joined", "yes")
    ('joined date', 'due date', 'joined')
    >>> field_words("day_rate_p"), field_words("p")
    ('day rate in pence', 'p')
    """
    words = _field_words(field)
    if re.match(r"\d{4}-\d{2}-\d{2}", answer) and not {"date", "day", "time", "on", "at", "when"} & set(words.split()):
        return f"{words} date"
    return words


def _field_words(field: str) -> str:
    words = snake(field).replace("_", " ").split()
    if len(words) > 1 and words[-1].lower() in _UNIT_WORDS:  # "total_p": "total in pence"
        return f"{' '.join(words[:-1])} in {_UNIT_WORDS[words[-1].lower()]}"
    if len(words) > 1 and words[-1].lower() in _UNITS:
        return f"{' '.join(words[:-1])} in {words[-1]}"
    if len(words) > 1 and words[-1].lower() in _WHEN:  # "submitted on" -> "submitted date"
        return " ".join([*words[:-1], _WHEN[words[-1].lower()]])
    return " ".join(words)


_UNIT_WORDS = {"p": "pence", "ct": "cents", "secs": "seconds", "mins": "minutes", "hrs": "hours",
               "yrs": "years"}  # fmt: skip
"""Units a field's name abbreviates (``day_rate_p``): a question says the word ("day rate in pence")."""
_WHEN = {"on": "date", "at": "time"}
"""A field named for when a thing happened (``submittedOn``, ``created_at``): "What is the submitted on of ..."
says nothing a person would; "the submitted date" does (session 73, shelter's applications)."""


def _count_template(field: str, answer: str) -> str | None:
    """How people ask for a whole number: a state's ("How many of Beloved are available?", "How many copies of
    Beloved are available?" for ``copies_available``), a plural noun's ("How many reservations does Beloved
    have?"; until session 64 only half the time, the other half "What is the reservations of Beloved?");
    ``None`` for anything else.

    >>> _count_template("available", "3"), _count_template("price", "3"), _count_template("copies", "2")
    ('How many of {name} are {field}?', None, 'How many {field} does {name} have?')
    >>> _count_template("price_cents", "1299") is None
    True
    """
    words = snake(field).lower().replace("_", " ").split()
    if not answer.isdigit() or words and words[-1] in _UNITS:  # "price_cents" measures: "What is the price in cents"
        return None
    if len(words) == 1 and (words[0] in _STATES or words[0].endswith(("able", "ible"))) or "".join(words) in _STATES:
        return _COUNT_STATE
    plural = [w.endswith("s") and not w.endswith(("ss", "us", "is")) for w in words]
    if len(words) == 2 and plural[0] and words[1] in _STATES:  # copies_available: "How many copies of X are available?"
        return f"How many {words[0]} of {{name}} are {words[1]}?"
    return _COUNT_PLURAL if plural[-1] and len(words) <= 2 else None


_CLAUSE = re.compile(r"[,;:()]|\band\b|\bwith\b|\bplus\b")
_LEADING = re.compile(r"^(?:its|their|the|a|an|each|every)\s+")
_PREPOSITIONS = frozenset({"on", "in", "at", "for", "under", "out", "off", "away", "behind", "overdue", "due"})


def _words(text: str) -> set[str]:
    return {singular(w) for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 2}


def field_phrases(description: str, keys: Sequence[str], entity: str = "") -> dict[str, str]:
    """The words a tool's ``description`` uses for a field of its result that it does not call by its key: the
    description cut into clauses (at commas, "and", "with"), each clause claimed by the keys whose words it has
    ("copies owned" by ``copies``), the clause that names the ``entity`` ("One book") left out; when one clause
    and one key that is not an id are left, that clause is the key's phrase. People ask in the description's
    words: "How many copies of Beloved are on the shelf?", where the result says ``"available": 1``.

    Example:
        >>> field_phrases("One book: title, author, copies owned and on the shelf, and how many reservations wait.",
        ...               ["book_id", "title", "author", "copies", "available", "reservations"], "book")
        {'available': 'on the shelf'}
        >>> field_phrases("Books whose title contains the text, with how many copies are on the shelf.",
        ...               ["book_id", "title", "available"], "book")
        {'available': 'how many copies are on the shelf'}
        >>> field_phrases("A shipment's status, destination and scan history.", ["status", "destination", "history"])
        {}
    """
    first = description.strip().split("\n")[0].lower()
    clauses = [_LEADING.sub("", c.strip(" .")) for c in _CLAUSE.split(first)]
    claimed: set[int] = set()
    unclaimed_keys = []
    for key in map(str, keys):  # ids and names claim their clauses too; only a field is paired
        parts = _words(re.sub(r"(?<=[a-z])(?=[A-Z])|_", " ", key))
        hits = [i for i, c in enumerate(clauses) if parts & _words(c)]
        claimed.update(hits)
        if not hits and not id_argument(key) and key not in NAME_KEYS:
            unclaimed_keys.append(key)
    rest = [c for i, c in enumerate(clauses) if c and i not in claimed and not _words(c) & {singular(entity)}]
    if len(rest) == 1 and len(unclaimed_keys) == 1:
        return {unclaimed_keys[0]: rest[0]}
    return {}


def _phrase_template(phrase: str) -> str | None:
    """A count question in a description's words: "how many copies are on the shelf" -> "How many copies of {name}
    are on the shelf?", "on the shelf" -> "How many of {name} are on the shelf?"; ``None`` for other phrases.

    >>> _phrase_template("how many copies are on the shelf"), _phrase_template("on the shelf")
    ('How many copies of {name} are on the shelf?', 'How many of {name} are on the shelf?')
    """
    words = phrase.split()
    if words[:2] == ["how", "many"] and len(words) >= 4:
        return f"How many {words[2]} of {{name}} {' '.join(words[3:])}?"
    if words and words[0] in _PREPOSITIONS:
        return f"How many of {{name}} are {phrase}?"
    return None


def _top_records(content: str) -> list[dict[str, Any]]:
    """The records a result is: one object, or a list of them (one level; nested records are other reads')."""
    value = read_result(content)
    if isinstance(value, dict):
        return [value]
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def fact_questions(
    pairs: Sequence[tuple[ToolCall, ToolObservation]],
    records: dict[str, str],
    writes: Callable[[str], bool],
    find: Callable[[str, str, str | None], ToolCall | None],
    *,
    owners: dict[str, tuple[str, str]] | None = None,
    seed: int = 0,
    per_record: int = PER_RECORD,
    id_share: float = ID_SHARE,
    descriptions: dict[str, str] | None = None,
) -> list[Fact]:
    """Fact questions from an exploration's successful calls (``pairs``): ``per_record`` per record and read, the
    fields drawn with ``seed``, and for ``id_share`` of the named records (drawn with ``seed``) the record's own id,
    which the lookup by its name shows. A record goes by its name (``records``: ids to names,
    ``wording.record_names``), else by its owner's (``owners``: ids to (key, owner), ``wording.record_owners``;
    "What is the status of Jonas Weber's shipment?"), else, when the read took its id, by that id ("What is the
    status of TRK1003?", the read alone). ``find(id, name, key)`` is the lookup that finds the record by its name
    or by its owner under ``key`` (``None`` when no read of the exploration does). With the tools'
    ``descriptions``, a count the read's description words without its key (``field_phrases``) is asked in those
    words half the time ("How many copies of Beloved are on the shelf?" for ``available``)."""
    rng = random.Random(seed)
    owners = owners or {}
    out: list[Fact] = []
    seen: set[tuple[str, str]] = set()
    for call, obs in pairs:
        if writes(call.name) or obs.is_error:
            continue
        args = call.arguments if isinstance(call.arguments, dict) else {}
        needs = {str(v) for k, v in args.items() if id_argument(k)}
        for record in _top_records(obs.content):
            ids = id_values(record)
            # its own id (its first) by its name or owner even where this read shows neither (a shipment's
            # ``track``); an id it refers to only by a name it holds (a transaction row's account_id is no name)
            value = next((i for n, i in enumerate(ids) if (i in records or i in owners) and (
                n == 0 or _goes_by(record, records.get(i) or owners.get(i, ("", ""))[1]))), None)  # fmt: skip
            if value is None:  # neither named nor owned: by the id the read took
                # its own id (its first): a transaction's account_id is not the transaction
                value = ids[0] if ids and needs == {ids[0]} else None
                if value is None:
                    continue
                fields = sorted(_fields(record, value))
                templates: tuple[str, ...] = (_POSSESSIVE, *_PLAIN)
                lookup, name, by_name, rows = None, _id_named(args, value), False, []
            else:
                if needs - {value}:  # the read needs ids other than this record's
                    continue
                key, name = (None, records[value]) if value in records else owners[value]
                fields, rows = sorted(_fields(record, name)), nested_rows(record)
                lookup = find(value, name, key) if fields or rows else None
                if lookup is None:
                    continue
                by_name = key is None and not isinstance(name, Titled)  # its own name: its id is asked too
                if isinstance(name, Titled):  # "What is the priority of the ticket 'CSV export times out'?"
                    name, templates = name.phrase, _PLAIN[1:]
                elif by_name:
                    templates = _TEMPLATES
                else:
                    name, templates = Owned(name, tool_entity(lookup.name)).phrase, _PLAIN
            nested = rows if by_name else []  # the rows a record lists, asked by its own name only
            if not fields and not nested:
                continue
            # the lookup, then the read when it needs the id (a search or listing shows the field itself)
            reference = (call,) if lookup is None else (lookup, call) if needs else (lookup,)
            # what the record is: the read's when it took the id (a listing of transactions finds an account's id)
            entity = tool_entity(lookup.name if lookup is not None and not needs else call.name).replace("_", " ")
            resolves = [] if lookup is None else [[0, value]]
            description = (descriptions or {}).get(call.name, "")
            phrases = field_phrases(description, list(record), tool_entity(call.name)) if description else {}
            for field, answer in rng.sample(fields, min(per_record, len(fields))):
                if (value, field) in seen:
                    continue
                seen.add((value, field))
                described = _phrase_template(phrases[field]) if field in phrases and answer.isdigit() else None
                counted = _count_template(field, answer)
                template = described
                if template is None or rng.random() < 0.5:
                    template = counted or rng.choice(templates)
                shown = {"name": name, "field": field_words(field, answer), "entity": entity}
                query = template.format(**shown)
                counts = [t for t in (described, counted) if t]  # a count reads as one
                others = _alternates(query, counts or templates, shown)
                out.append(Fact(query, reference, answer, field, resolves, others))
            for fact in _nested_facts(nested, name, reference, resolves, rng, per_record):
                if (value, fact.field) not in seen:
                    seen.add((value, fact.field))
                    out.append(fact)
            if (lookup is not None and by_name and (value, "id") not in seen
                    and random.Random(f"id-{seed}-{value}").random() < id_share):  # fmt: skip
                seen.add((value, "id"))  # the lookup's result shows the id: "What is Chloe Martin's member id?"
                query = rng.choice(_ID_TEMPLATES).format(name=name, entity=entity)
                others = _alternates(query, _ID_TEMPLATES, {"name": name, "entity": entity})
                out.append(Fact(query, (lookup,), value, "id", resolves, others))
    return out


_NESTED = (
    "What is the {field} of {name}'s {label} {noun}?",
    "Tell me the {field} of {name}'s {label} {noun}.",
    "Look up {name}'s {label} {noun} and tell me its {field}.",
)
"""A field of a record listed inside a named one, by the owner's name and the row's label: "What is the year of
Maria Santos's Honda vehicle?" (a customer's ``vehicles``), "What is the date of Luna's rabies vaccination?"."""


def nested_rows(record: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The lists of objects a record holds under its keys, each with its key: a customer's ``vehicles``, an
    animal's ``vaccinations``, an order's ``items``; objects with or without ids of their own.

    >>> nested_rows({"id": "cu_1", "name": "Maria", "vehicles": [{"make": "Honda", "year": 2019}], "tags": ["a"]})
    [('vehicles', [{'make': 'Honda', 'year': 2019}])]
    """
    return [(str(k), v) for k, v in record.items()
            if isinstance(v, list) and v and all(isinstance(r, dict) and r for r in v)]  # fmt: skip


def _nested_facts(nested: Sequence[tuple[str, list[dict[str, Any]]]], name: str, reference: tuple[ToolCall, ...],
                  resolves: list[list[Any]], rng: random.Random, per_record: int) -> Iterator[Fact]:  # fmt: skip
    """Fact questions about the rows a named record lists (``nested_rows``): per list, up to ``per_record`` rows
    (drawn with ``rng``), one plain field each asked by the owner's name and the row's label, a text that tells
    it from its siblings (``_label_column``: "Maria Santos's Honda vehicle"). The reference is the record's own
    fields': its lookup, then its read when that needs the id. No count of the rows: the filter keeps an answer a
    read returned, and a list's length seldom is one. People ask this way ("What year is Maria Santos's
    Honda?"); session 73 found such questions among a garage's hand-written requests, its adapter stopping after
    the lookup or answering a year it made up."""
    for key, rows in nested:
        noun_words = snake(key).lower().replace("_", " ").split()
        noun = " ".join([*noun_words[:-1], singular(noun_words[-1])]) if noun_words else ""
        if not noun:
            continue
        # a lone row goes by a name or a plain text that is not an id: the label column of it alone, ids left out
        label = _label_column(
            rows if len(rows) > 1 else [{k: v for k, v in rows[0].items() if not id_argument(str(k))}]
        )
        if label is None:
            continue
        for row in rng.sample(rows, min(per_record, len(rows))):
            tag = str(row[label]).strip()
            shown_tag = f"'{tag}'" if len(tag.split()) > 2 else tag  # "Grace's 'Warning light came on' ticket"
            fields = [(f, a) for f, a in sorted(_fields(row, tag)) if f != label and a.lower() != tag.lower()]
            if not fields or tag.lower() == str(name).lower() or len(tag) > _MAX_TEXT:
                continue
            field, answer = rng.choice(fields)
            shown = {"field": field_words(field, answer), "name": name, "label": shown_tag, "noun": noun}
            query = rng.choice(_NESTED).format(**shown)
            yield Fact(query, reference, answer, f"{key}.{tag}.{field}", resolves, _alternates(query, _NESTED, shown))


def _goes_by(record: dict[str, Any], name: str) -> bool:
    """Whether ``record`` holds ``name`` (its own name, owner or text label), so a question may name it by that:
    a transaction row's ``account_id`` is named "Main checking", which is the account's name, not the row's
    (budget run 1 asked "What is Main checking's amount?", answered by one transaction's amount)."""
    return bool(name) and any(isinstance(v, str) and v.strip() == str(name) for v in record.values())


def _id_named(args: dict[str, Any], value: str) -> str:
    """How a question names a record by the id its read took: the id as it is (``TRK1003``), a bare number with
    what its argument names (``ticket 104`` for ``ticket_id=104``: "What is the status of 104?" names nothing).

    Example:
        >>> _id_named({"ticket_id": 104}, "104"), _id_named({"tracking_number": "TRK1"}, "TRK1")
        ('ticket 104', 'TRK1')
    """
    if not re.fullmatch(r"\d+", value):
        return value
    key = next((k for k, v in args.items() if id_argument(k) and str(v) == value), None)
    noun = arg_noun(key) if key not in (None, "id") else ""
    return f"{noun} {value}" if noun else value


_ALTERNATES = 2
"""Other wordings a fact question keeps (``phrasings.PHRASINGS_KEY``)."""


def _alternates(query: str, templates: Sequence[str], shown: dict[str, str]) -> tuple[str, ...]:
    """Up to ``_ALTERNATES`` other wordings of ``query`` from ``templates``, none twice, drawn by the query (a
    draw of their own: the questions drawn after it stay as they were)."""
    rng = random.Random(f"alternates-{query}")
    texts = list(dict.fromkeys(t.format(**shown) for t in templates))
    others = [t for t in texts if t != query]
    return tuple(rng.sample(others, min(_ALTERNATES, len(others))))


def table_rows(value: Any) -> list[dict[str, Any]]:
    """A table's rows as records under its headers; ``[]`` for anything else. A table is a list of at least two
    rows of one length whose first row is distinct non-empty texts (``[["Item", "Amount"], ["Rent", 1200]]``)."""
    if not isinstance(value, list) or len(value) < 2 or not all(isinstance(row, list) for row in value):
        return []
    header = value[0]
    if not header or not all(isinstance(h, str) and h.strip() for h in header) or len(set(header)) < len(header):
        return []
    if any(len(row) != len(header) for row in value[1:]):
        return []
    return [dict(zip(header, row, strict=True)) for row in value[1:]]


def _label_column(rows: list[dict[str, Any]]) -> str | None:
    """The column a row goes by: a name header, else the first whose cells are distinct texts with no digit, most
    of them short (a row whose label is longer than ``_MAX_TEXT`` is not asked about: ``table_facts``). Before
    session 74 one long name ruled the column out: bikeshop's stock of 17 parts had one name of 41 characters, and
    no question about its stock was asked.

    Example:
        >>> _label_column([{"sku": "t1", "name": "Inner tube 700x25c"}, {"sku": "t2", "name": "Tube " + "x" * 40}])
        'name'
    """

    def labels(key: str) -> bool:
        cells = [row[key] for row in rows]
        texts = all(isinstance(c, str) and c.strip() for c in cells)
        return texts and len(set(cells)) == len(cells) and 2 * sum(len(c) <= _MAX_TEXT for c in cells) >= len(cells)

    keys = list(rows[0])
    named = [k for k in keys if k.lower() in NAME_KEYS and labels(k)]
    plain = [k for k in keys if labels(k) and not any(ch.isdigit() for row in rows for ch in str(row[k]))]
    return (named or plain)[0] if named or plain else None


def record_rows(value: Any) -> list[list[dict[str, Any]]]:
    """The lists of records with no id a result holds, at its top or under one of its keys (a month's
    ``{"month": "2026-11", "budgets": [{"category": "dining", "limit": 40, "spent": 20.6}, ...]}``): two or more
    objects with the same keys, none of which is an id (records with ids are asked for by ``fact_questions``)."""
    lists = [value] if isinstance(value, list) else [v for v in value.values() if isinstance(v, list)] \
        if isinstance(value, dict) else []  # fmt: skip
    out = []
    for rows in lists:
        if len(rows) < 2 or not all(isinstance(r, dict) and r for r in rows):
            continue
        if len({tuple(r) for r in rows}) == 1 and not any(id_argument(str(k)) for k in rows[0]):
            out.append(rows)
    return out


def table_facts(pairs: Sequence[tuple[ToolCall, ToolObservation]], writes: Callable[[str], bool], *,
                seed: int = 0) -> list[Fact]:  # fmt: skip
    """Fact questions from the tables the successful reads returned (``table_rows``) and their lists of records
    with no id (``record_rows``): per row, one of its plain fields (drawn with ``seed``) asked for by the row's
    label, answered by the read alone, which the request names (a table's: ``_where``, the read's arguments as a
    request shows them; a record list's: "for" them, "What is the spent of dining for month 2026-11?"). A record
    list a search returned is asked once a row, the search's text set to the row's label."""
    rng = random.Random(seed)
    out: list[Fact] = []
    seen: set[tuple[str, str, str]] = set()  # a record list's rows asked once a trajectory: the read, scope, label
    for call, obs in pairs:
        if writes(call.name) or obs.is_error:
            continue
        value = read_result(obs.content)
        quote = quotes(f"{seed}-{call.arguments}")
        args = call.arguments if isinstance(call.arguments, dict) else {}
        search = next((k for k, v in args.items() if isinstance(v, str) and searches(k)), None)
        scoped = ToolCall(name=call.name, arguments={k: v for k, v in args.items() if k != search})
        tables: list[tuple[list[dict[str, Any]], str, str, str | None, bool]] = [
            (rows, _where(call, quote=quote), "", None, False) for rows in [table_rows(value)] if rows
        ]
        tables += [(rows, "", _for(scoped, quote=quote), search, True) for rows in record_rows(value)]
        for rows, where, scope, search, listed in tables:
            key = _label_column(rows)
            if key is None:
                continue
            for row in rows:
                label = row[key].strip()
                fields = sorted(_fields(row, label))
                if not fields or len(label) > _MAX_TEXT or listed and (call.name, scope, label) in seen:
                    continue
                seen.add((call.name, scope, label))
                # a search's row is found by its label ("What is the usual category of FreshMart?": the search
                # for "FreshMart"), not by the text the exploration happened to search for ("a")
                read = call
                if listed and search is not None:
                    read = ToolCall(name=call.name, arguments={**args, search: label})
                field, answer = rng.choice(fields)
                shown = {"name": label, "field": field_words(field, answer)}

                def asked(text: str, where: str = where, scope: str = scope) -> str:
                    return f"{text[:-1]}{scope}{text[-1]} {where}".rstrip()

                counted = _count_template(field, answer) if listed else None  # "How many rows does Budget have?"
                base = (counted or rng.choice(_PLAIN)).format(**shown)
                templates = (counted,) if counted else _PLAIN
                query, others = asked(base), tuple(asked(t) for t in _alternates(base, templates, shown))
                out.append(Fact(query, (read,), answer, f"{field} of {label}", [], others))
    return out


_SIZE_ARGS = frozenset({"limit", "max_results", "page_size", "per_page", "top", "max", "size", "max_items"})
"""Arguments that cap how many rows a read returns: no one scopes a question with them ("What is Luna's breed for
limit 5?", session 72); the read with a larger cap shows the same row. An offset, page or cursor is said: without
it another page comes back."""


def _for(call: ToolCall, *, quote: bool = True) -> str:
    """The read's arguments as a request scopes a question with them (" for month 2026-11"), or nothing; a cap on
    the rows returned is left out (``_SIZE_ARGS``).

    >>> _for(ToolCall(name="searchAnimals", arguments={"species": "cat", "limit": 5}))
    " for species 'cat'"
    """
    args = call.arguments if isinstance(call.arguments, dict) else {}
    shown = [
        f"{arg_noun(k)} {shown_value(k, v, {}, quote=quote)}"
        for k, v in args.items()
        if v not in ("", None, [], {}) and snake(k).lower() not in _SIZE_ARGS
    ]
    return f" for {' and '.join(shown)}" if shown else ""


def _where(call: ToolCall, *, quote: bool = True) -> str:
    """Where a table read looks, said in the request ("Read sheet 'Inventory', cells 'A1:D3'."): a request whose
    reference takes values it never names teaches a model to make them up (an adapted sheets model opened 38 of
    88 held-out episodes with the one read four table facts had taught, whatever sheet the request named)."""
    args = call.arguments if isinstance(call.arguments, dict) else {}
    shown = [
        f"{arg_noun(k)} {shown_value(k, v, {}, quote=quote)}" for k, v in args.items() if v not in ("", None, [], {})
    ]
    return f"Read {', '.join(shown)}." if shown else ""

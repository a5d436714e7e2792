"""Fact questions: one field of a record, asked for by the record's name, as people ask.

"How much does Ben Osei owe in fines?" is what users type; the synthesizer's other tasks read "tell me the
member M2 (Ben Osei)'s name, fine owed and open loans" and are checked by any one of the values the read
returned. A fact question takes one successful read of the exploration whose result holds a named record
(``{"id": "M2", "name": "Ben Osei", "fines": 2.5}``), picks one of its plain fields, and asks for it by the
record's name only ("What is Ben Osei's fines?"): the reference is the lookup that finds the record by its
name and, when the read needed the record's id, the read itself; the answer is that field's value
(``metadata["answer"]``, the same check as a hand-written task's ``answer``). The filter replays the
reference and keeps the task only when a replayed read returns that value (``FACT_KEY``).

Nothing here reads a server's or a tool's name: the fields are any record's keys that are not ids or names.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from langgraph_evolver.tool_results import read_result
from langgraph_evolver.types import ToolCall, ToolObservation

from .profile import tool_entity
from .wording import NAME_KEYS, id_argument, id_values

__all__ = ["FACT_KEY", "Fact", "fact_questions"]

FACT_KEY = "fact"
"""``task.metadata`` key of a fact question: the field it asks for (the filter checks a read returns the answer)."""
_MAX_TEXT = 40
_TEMPLATES = ("What is {name}'s {field}?", "Tell me {name}'s {field}.", "What is the {field} of {name}?",
              "Look up {name} and tell me the {field}.",
              "Can you find the {field} of the {entity} {name}?")  # fmt: skip


class Fact(NamedTuple):
    """One fact question: its request, reference calls, the answer and which lookup finds which id."""

    query: str
    reference: tuple[ToolCall, ...]
    answer: str
    field: str
    resolves: list[list[Any]]


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
    find: Callable[[str, str], ToolCall | None],
    *,
    seed: int = 0,
) -> list[Fact]:
    """Fact questions from an exploration's successful calls (``pairs``): one per named record and read, its
    field drawn with ``seed``. ``records`` maps ids to names (``wording.record_names``); ``find(id, name)`` is
    the lookup that finds the record by its name (``None`` when no read of the exploration does)."""
    rng = random.Random(seed)
    out: list[Fact] = []
    seen: set[tuple[str, str]] = set()
    for call, obs in pairs:
        if writes(call.name) or obs.is_error:
            continue
        args = call.arguments if isinstance(call.arguments, dict) else {}
        needs = {str(v) for k, v in args.items() if id_argument(k)}
        for record in _top_records(obs.content):
            value = next((i for i in id_values(record) if i in records), None)
            if value is None or needs - {value}:  # the read needs ids other than this record's
                continue
            name = records[value]
            fields = sorted(_fields(record, name))
            lookup = find(value, name) if fields else None
            if lookup is None:
                continue
            field, answer = rng.choice(fields)
            reference = (lookup, call) if needs else (lookup,)  # a search or listing shows the field itself
            if (value, field) in seen:
                continue
            seen.add((value, field))
            template = rng.choice(_TEMPLATES)
            query = template.format(name=name, field=field.replace("_", " "),
                                    entity=tool_entity(lookup.name).replace("_", " "))  # fmt: skip
            out.append(Fact(query, reference, answer, field, [[0, value]]))
    return out

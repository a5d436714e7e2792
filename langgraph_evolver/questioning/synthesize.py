"""An offline, deterministic task synthesizer over exploration trajectories.

From each exploration trajectory it picks short sub-sequences (1-3 calls: the difficulty) of
successful calls that change state or read something non-empty, and writes a task for each:
the query is phrased generically from the tool names, arguments and the entity they act on (or
by a per-environment ``describer``), the reference solution is the calls themselves, and the
world is the exploration's (``env`` and ``env_params``), so a fresh instance rebuilds it. The
checker of such a task is the state its reference produces (feasibility-filtered afterwards). With
tool descriptions, a sequence whose ids have records' names is also written as people ask, naming
the records ("lend 'Song of Solomon' to 'Ada Novak'"), its reference preceded by the lookups that
find the ids (``_named``; ``metadata["resolves"]``, checked on replay). And a named record's one field is
asked for as a single fact ("What is Ben Osei's fines?", ``facts.fact_questions``), checked by that value.

It never looks at an environment's seed-task templates; ``phrasing_overlap`` measures how close
the synthetic queries are to the seed queries anyway, so "synthetic ≈ seed" can be checked.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from langgraph_evolver.reference_scoring import normalized_arguments
from langgraph_evolver.tool_results import holds_token
from langgraph_evolver.types import Task, ToolCall, ToolObservation, Trajectory

from .facts import FACT_KEY, fact_questions, table_facts
from .phrasings import PHRASINGS_KEY, alternates
from .profile import READ_VERBS, snake, tool_entity, tool_kind, tool_verb
from .wording import (
    Owned,
    Titled,
    arg_noun,
    describe_with_descriptions,
    id_argument,
    record_ids,
    record_labels,
    record_names,
    record_owners,
    searches,
)

__all__ = ["INTENTS_KEY", "MULTI_SHARE", "NAMED_SHARE", "RESOLVES_KEY", "SYNTHESIZER_NAME", "Describer", "asks_several",
           "describe_calls", "intents", "phrasing_overlap", "synthesize"]  # fmt: skip

SYNTHESIZER_NAME = "offline-schema"
Describer = Callable[[Sequence[tuple[ToolCall, ToolObservation]]], "str | None"]
"""``describer(calls_with_observations) -> query``; ``None`` falls back to the generic phrasing."""

_VERB_PHRASES = {
    "get": "look up", "list": "list", "search": "search", "find": "find", "read": "read",
    "fetch": "fetch", "show": "show", "count": "count", "check": "check", "create": "create",
    "add": "add", "new": "create", "save": "save", "update": "update", "edit": "edit", "set": "set",
    "move": "move", "rename": "rename", "complete": "complete", "mark": "mark", "delete": "delete",
    "remove": "remove", "cancel": "cancel", "clear": "clear", "send": "send", "book": "book",
    "pay": "pay", "request": "request", "post": "post", "reply": "reply to",
}  # fmt: skip
_OPENINGS = ("", "Please ", "Could you ", "I need you to ", "Go ahead and ")
_JOINERS = (", then ", "; after that, ", " and then ", ". Next, ")
_READ_ENDINGS = (" and tell me what you find", " and report back", "")
_EMPTY = {"", "[]", "{}", "null", "none", '""'}


def _value(value: Any) -> str:
    return f"'{value}'" if isinstance(value, str) else json.dumps(value)


def _clause(call: ToolCall, rng: random.Random) -> str:
    verb, noun = tool_verb(call.name), tool_entity(call.name).replace("_", " ")
    args = {snake(k): v for k, v in (call.arguments if isinstance(call.arguments, dict) else {}).items()}
    ids = [f"{k[:-3].replace('_', ' ')} {v}" for k, v in args.items() if k.endswith("_id")]
    rest = [f"{k.replace('_', ' ')} {_value(v)}" for k, v in args.items() if not k.endswith("_id")]
    first_own = bool(ids) and next(k for k in args if k.endswith("_id"))[:-3] == tool_entity(call.name)
    article = "an" if noun[:1] in "aeiou" else "a"
    if verb == "other":
        text = f"use {call.name}"
    elif verb in ("list", "search", "find"):
        text = f"{_VERB_PHRASES[verb]} the {noun}s" + (f" for {' and '.join(ids)}" if ids else "")
    elif first_own:
        text = f"{_VERB_PHRASES[verb]} {ids[0]}" + (f" for {' and '.join(ids[1:])}" if ids[1:] else "")
    else:
        text = f"{_VERB_PHRASES[verb]} {article} {noun}" + (f" for {' and '.join(ids)}" if ids else "")
    if rest:
        text += " with " + ", ".join(rest)
    if rng.random() < 0.35:
        text += f" (use {call.name})"
    return text


def describe_calls(pairs: Sequence[tuple[ToolCall, ToolObservation]], *, seed: int = 0) -> str:
    """A generic English request for a sequence of calls, built from names and arguments only.

    Example:
        >>> from langgraph_evolver.types import ToolCall, ToolObservation
        >>> call = ToolCall(name="complete_todo", arguments={"todo_id": 2})
        >>> describe_calls([(call, ToolObservation(call_id="", name="complete_todo", content="{}"))], seed=1)
        'Complete todo 2 (use complete_todo).'
    """
    rng = random.Random(seed)
    clauses = [_clause(call, rng) for call, _ in pairs]
    text = clauses[0]
    for clause in clauses[1:]:
        text += rng.choice(_JOINERS) + clause
    if tool_verb(pairs[-1][0].name) in READ_VERBS:
        text += rng.choice(_READ_ENDINGS)
    text = rng.choice(_OPENINGS) + text
    return text[0].upper() + text[1:] + ("?" if text.startswith(("Could", "could")) else ".")


def _successful(trajectory: Trajectory) -> list[tuple[ToolCall, ToolObservation]]:
    return [(call, obs) for call, obs in trajectory.tool_results() if not obs.is_error]


def _useful(pair: tuple[ToolCall, ToolObservation]) -> bool:
    call, obs = pair
    reads = tool_verb(call.name) in READ_VERBS
    return not reads or obs.content.strip().lower() not in _EMPTY


def _id_values(call: ToolCall) -> list[str]:
    args = call.arguments if isinstance(call.arguments, dict) else {}
    return [str(v) for k, v in args.items() if id_argument(k)]


def _mentions(obs: ToolObservation, call: ToolCall) -> bool:
    return any(holds_token(obs.content, v) for v in _id_values(call))


class _Shown(NamedTuple):
    """What one observation of the exploration holds as records, parsed once per trajectory: the ids it holds
    as records' ids (under a key ``wording.id_argument`` takes for an id: ``id``, ``book_id``,
    ``tracking_number``; not the same digits elsewhere) and the names its records go by (one per named record,
    so a name twice means two records answer to it)."""

    ids: frozenset[str]
    names: tuple[str, ...]


def _shown(obs: ToolObservation) -> _Shown:
    return _Shown(record_ids([obs]), tuple(record_labels([obs])))


def _names_id(shown: _Shown, call: ToolCall) -> bool:
    """Whether an observation holds one of ``call``'s id arguments as a record's id, not merely the same digits
    elsewhere (a zone's ``"cap": 2``)."""
    return not shown.ids.isdisjoint(_id_values(call))


INTENTS_KEY = "intents"
"""``task.metadata`` key: how many things a task asks for (``intents``): its writes and the reads whose result no
later call of it uses (a lookup whose id the next call takes is part of one request; "return loan L1, then lend
B102 to M3" is two)."""
MULTI_SHARE = 0.2
"""The most of the tasks an exploration offers (``synthesize``'s ``max_tasks``) and the store keeps (the pipeline)
that ask for more than one thing (``INTENTS_KEY``). People ask for one thing at a time, leaving the lookups to the
agent: 57 of the 66 hand-written requests of the three example servers do ("Dev Patel is bringing back
Middlemarch. Check it in.": find_member, list_loans, return_book). A window of the exploration's calls asks for
several unrelated ones ("Tell me the book Beloved. Next, return Dev Patel's loan of ..."), and the synthesizer
offered every window of up to ``max_ops`` calls alike."""


def intents(pairs: Sequence[tuple[ToolCall, ToolObservation]], writes: Callable[[str], bool]) -> int:
    """How many things ``pairs`` asks for: its writes, and its reads whose result no later call takes an id from
    (a read that does is a lookup; at least 1).

    Example:
        >>> def seen(text): return ToolObservation(call_id="c", name="t", content=text)
        >>> find = (ToolCall(name="find_member", arguments={"name": "Ada"}), seen('{"member_id": "M1"}'))
        >>> lend = (ToolCall(name="borrow", arguments={"member_id": "M1"}), seen('{"member_id": "M1"}'))
        >>> def writes(name): return name == "borrow"
        >>> intents([find, lend], writes), intents([lend, find, lend], writes)
        (1, 2)
    """
    lookups = sum(not writes(call.name) and any(_mentions(obs, later) for later, _ in pairs[i + 1 :])
                  for i, (call, obs) in enumerate(pairs))  # fmt: skip
    return max(1, len(pairs) - lookups)


def asks_several(task: Task) -> bool:
    """Whether ``task`` asks for more than one thing (its ``INTENTS_KEY``; a task without it asks for one)."""
    return int(task.metadata.get(INTENTS_KEY, 1)) > 1


NAMED_SHARE = 0.5
"""The share of an exploration's sample (``synthesize``'s ``max_tasks``) that goes first to requests naming records
(``RESOLVES_KEY``: "cancel Jonas Weber's shipment", its lookup first) where there are that many. Drawn evenly, 7 of
a shipping run's 93 kept tasks named one (session 68), against most hand-written requests, and its adapter opened
23 of 88 held-out episodes with the write, an id made up, where the request's reference looks the record up first.
Half is a choice, not a measured optimum: the other half keeps the requests that give ids. Shipping's held-out
episodes chose this, so shipping is no clean test of it; the help desk and sheets are."""


def _named_first(tasks: list[Task], n: int) -> list[Task]:
    """``tasks`` with up to ``n`` of those that name records (``RESOLVES_KEY``) moved to the front, in order."""
    named = [t for t in tasks if RESOLVES_KEY in t.metadata][:n]
    return [*named, *(t for t in tasks if not any(t is m for m in named))]


def read_share(descriptions: Mapping[str, str]) -> float:
    """The share of the tasks drawn from, and kept from, one exploration that only read: the reading tools' share of
    the tools, a third at the least. People ask about what a server holds as often as it offers ways to read it; a
    share of a third whatever the tools (the rule before) kept 13 one-fact questions of 100 library tasks, where the
    reads are half the tools.

    Example:
        >>> read_share({"search_books": "Books whose title contains the text.", "get_book": "One book.",
        ...             "borrow": "Lend a copy of a book.", "renew": "Extend a loan."})
        0.5
    """
    if not descriptions:
        return 1 / 3
    reading = sum(tool_kind(name, text) == "read" for name, text in descriptions.items())
    return max(1 / 3, reading / len(descriptions))


def _sample(tasks: list[Task], n: int, seed: int, writes: Callable[[Task], bool] | None = None,
            reads: float = 1 / 3) -> list[Task]:  # fmt: skip
    """``n`` of ``tasks`` drawn with ``seed``, those asking for more than one thing at most ``MULTI_SHARE`` of them
    (more only where too few ask for one); of each part, with ``writes`` (whether a task writes), those that only
    read at most ``reads`` (more only where too few write), and of those, up to ``NAMED_SHARE`` requests that name
    records. An exploration of a server whose records list many rows offers far more fact questions than writes
    (bikeshop, session 74: 448 of 873 candidates), and a draw in their proportion left the pipeline, which keeps
    writes first up to their share, too few to keep (27 of 100 kept tasks wrote, 48 before)."""
    rng = random.Random(seed)
    single = [t for t in tasks if not asks_several(t)]
    multi = [t for t in tasks if asks_several(t)]
    rng.shuffle(single)
    rng.shuffle(multi)
    n_multi = max(min(len(multi), round(n * MULTI_SHARE)), n - len(single))
    return rng.sample([*_take(single, n - n_multi, writes, reads), *_take(multi, n_multi, writes, reads)], n)


def _take(tasks: list[Task], n: int, writes: Callable[[Task], bool] | None, reads: float) -> list[Task]:
    """The first ``n`` of ``tasks``, those that only read at most ``reads`` of them where ``writes`` says (more only
    where too few write), requests naming records first (``NAMED_SHARE`` of each)."""
    if writes is None:
        return _named_first(tasks, round(n * NAMED_SHARE))[:n]
    writing = [t for t in tasks if writes(t)]
    reading = [t for t in tasks if not writes(t)]
    n_reads = min(len(reading), max(round(n * reads), n - len(writing)))
    return [*_named_first(writing, round((n - n_reads) * NAMED_SHARE))[: n - n_reads],
            *_named_first(reading, round(n_reads * NAMED_SHARE))[:n_reads]]  # fmt: skip


RESOLVES_KEY = "resolves"
"""``task.metadata`` key of a task that names records instead of giving their ids: ``[[i, id], ...]``, reference
call ``i`` is the lookup that finds ``id`` (feasibility checks that its replayed result holds that id)."""


def _lookup_for(
    pairs: Sequence[tuple[ToolCall, ToolObservation]],
    shown: Sequence[_Shown],
    value: str,
    name: str,
    writes: Callable[[str], bool],
    field: str | None = None,
) -> ToolCall | None:
    """A read that finds record ``value`` from its ``name``: a call of the exploration that showed the record and
    needs no id itself, its free-text argument set to the name (``search_books(query="")`` ->
    ``search_books(query="Beloved")``); an argument-free listing as it was when no such search showed it, else
    one filtered by a field of its records (``list_tickets(status="open")``: ``status`` is no search text). A
    record named by its owner (``field``: the key that holds them, ``recipient``) is found by that argument on a
    tool that showed it (``list_shipments(recipient="Jonas Weber")``), else by a listing that shows the owner's name
    (``list_tickets()`` listing no assignee finds no "alex's ticket"), never by free text. A read that shows the
    id but not the name (transactions, each with its ``account_id``) finds no account by its name."""
    listing, filtered = None, False
    if field is not None:  # a filter by owner on a tool that showed the record: list_shipments(recipient=...)
        showed = {c.name for (c, _), seen in zip(pairs, shown, strict=True) if value in seen.ids}
        for call, _ in pairs:
            args = call.arguments if isinstance(call.arguments, dict) else {}
            if call.name in showed and not writes(call.name) and isinstance(args.get(field), str):
                if not any(id_argument(k) for k in args):
                    return ToolCall(name=call.name, arguments={**args, field: name})
    for (call, obs), seen in zip(pairs, shown, strict=True):
        args = call.arguments if isinstance(call.arguments, dict) else {}
        if writes(call.name) or any(id_argument(k) for k in args) or value not in seen.ids:
            continue
        if seen.names.count(name) > 1:  # two records answer to that name here
            continue
        if field is None and name not in seen.names:  # it shows the id, not the name (a transaction's account)
            continue
        text = [k for k, v in args.items() if isinstance(v, str)]
        plain = text if field is not None else [k for k in text if not re.search(rf'"{re.escape(k)}"\s*:', obs.content)]
        if field is not None:
            key = field if field in text else None
        else:  # a text argument its records hold as a field (status="open") filters, it searches nothing
            key = next((k for k in text if searches(k)), plain[0] if plain else None)
        if key is not None and isinstance(name, Titled) and str(args[key]).lower() not in name.lower():
            key = None  # a search that found it by another field (a payee's) does not find it by its label
        if key is not None:
            return ToolCall(name=call.name, arguments={**args, key: name})
        if not plain and (field is None or name in str(obs.content)):  # it shows the owner
            if listing is None or (filtered and not text):  # a listing, else one filtered by a field as it was
                listing, filtered = ToolCall(name=call.name, arguments=dict(args)), bool(text)
    return listing


def _reached(
    pairs: Sequence[tuple[ToolCall, ToolObservation]],
    shown: Sequence[_Shown],
    value: str,
    name: str,
    records: dict[str, str],
    writes: Callable[[str], bool],
    noun: str,
    searched: frozenset[str],
) -> tuple[list[tuple[ToolCall, str]], Owned] | None:
    """A record no read finds by its name but a read of its owner's id listed (``list_loans(member_id="M4")``
    listed loan L2, "Middlemarch"), the owner found by theirs: the lookups with the id each finds (the owner's
    lookup, that read) and how a request names it, ``noun`` what the record is ("Dev Patel's loan of
    'Middlemarch'"). Only when the read lists one record by that name and takes no other id, and only for a
    kind of record no tool searches without an id (``searched``: a book ``search_books`` lists is asked for by
    its title alone)."""
    if noun in searched:
        return None
    for (call, _), seen in zip(pairs, shown, strict=True):
        ids = _id_values(call)
        if writes(call.name) or len(ids) != 1 or value not in seen.ids or seen.names.count(name) != 1:
            continue
        owner = records.get(ids[0], "")
        if not owner or owner in (ids[0], name):
            continue
        lookup = _lookup_for(pairs, shown, ids[0], owner, writes)
        if lookup is not None:
            read = ToolCall(name=call.name, arguments=dict(call.arguments) if isinstance(call.arguments, dict) else {})
            return [(lookup, ids[0]), (read, value)], Owned(owner, noun, of=name)
    return None


def _searched(
    trajectory: Trajectory, pairs: Sequence[tuple[ToolCall, ToolObservation]], writes: Callable[[str], bool]
) -> frozenset[str]:
    """The kinds of record a read lists without an id (``search_books(query)``: ``book``): by the tools' required
    arguments the explorer recorded, and by the calls made."""
    required: dict[str, list[str]] = dict(trajectory.metadata.get("tool_arguments") or {})
    for call, _ in pairs:
        required.setdefault(call.name, list(call.arguments) if isinstance(call.arguments, dict) else [])
    return frozenset(tool_entity(name) for name, args in required.items()
                     if not writes(name) and not any(id_argument(str(a)) for a in args))  # fmt: skip


def _named(
    pairs: Sequence[tuple[ToolCall, ToolObservation]],
    shown: Sequence[_Shown],
    chosen: Sequence[tuple[ToolCall, ToolObservation]],
    records: dict[str, str],
    owners: dict[str, tuple[str, str]],
    writes: Callable[[str], bool],
    searched: frozenset[str] = frozenset(),
) -> tuple[list[ToolCall], dict[str, str], list[list[Any]]]:
    """How ``chosen`` reads when it names records as people do ("lend 'Beloved' to 'Chloe Martin'"): the lookups
    to put first, ``{id: name}`` for the ids the request names, and which lookup finds which id. An id is named
    only when a lookup finds it and no other record it lists by that name, and no earlier call of the task
    produced it."""
    names: dict[str, str] = {}
    lookups: list[ToolCall] = []
    resolves: list[list[Any]] = []
    own = {(c.name, normalized_arguments(c.arguments)) for c, _ in chosen}
    signatures: list[tuple[str, str]] = []
    earlier = ""
    for call, obs in chosen:
        for key, raw in (call.arguments if isinstance(call.arguments, dict) else {}).items():
            value, name = str(raw), records.get(str(raw), "")
            field, name = owners[value] if not name and value in owners else (None, name)
            if not id_argument(key) or value in names or not name or name == value:
                continue
            if holds_token(earlier, value):
                continue
            lookup = _lookup_for(pairs, shown, value, name, writes, field)
            named: Any = Owned(name, tool_entity(lookup.name)) if field and lookup else name
            found = [(lookup, value)] if lookup is not None else []
            if (
                lookup is None
                and field is None
                and (reached := _reached(pairs, shown, value, name, records, writes, arg_noun(key), searched))
            ):
                found, named = reached
            if not found or any((c.name, normalized_arguments(c.arguments)) in own for c, _ in found):
                continue
            for call_found, resolved in found:
                signature = (call_found.name, normalized_arguments(call_found.arguments))
                if signature not in signatures:
                    signatures.append(signature)
                    lookups.append(call_found)
                resolves.append([signatures.index(signature), resolved])
            names[value] = named
        earlier += "\n" + obs.content
    return lookups, names, resolves


_CREATES = frozenset({"create", "add", "new", "save", "send", "book", "post", "request", "insert"})


def _with_producers(
    pairs: list[tuple[ToolCall, ToolObservation]],
    shown: Sequence[_Shown],
    window: list[int],
    writes: Callable[[str], bool] | None = None,
) -> list[int]:
    """``window`` plus the calls that created the ids it uses (a fresh world lacks them): the last earlier
    create-verb call whose result names the id, else the first call that named it when that call writes
    (``apply_permit`` returned permit 2; a ``list_*`` that showed it first means it was there already)."""
    chosen = set(window)
    for i in window:
        for j in range(i - 1, -1, -1):
            if tool_verb(pairs[j][0].name) in _CREATES and _mentions(pairs[j][1], pairs[i][0]):
                chosen.add(j)
                break
        else:
            first = next((j for j in range(i) if _names_id(shown[j], pairs[i][0])), None)
            if first is not None and writes is not None and writes(pairs[first][0].name):
                chosen.add(first)
    return sorted(chosen)


def _repeats_a_call(pairs: Sequence[tuple[ToolCall, ToolObservation]]) -> bool:
    """Whether a call comes twice with the same arguments ("list the doctors. Next, list the doctors"; a second
    "revoke permit 1" that changes nothing)."""
    seen = set()
    for call, _ in pairs:
        key = (call.name, normalized_arguments(call.arguments))
        if key in seen:
            return True
        seen.add(key)
    return False


def _sequences(
    pairs: list[tuple[ToolCall, ToolObservation]],
    shown: Sequence[_Shown],
    max_ops: int,
    writes: Callable[[str], bool] | None = None,
) -> Iterable[list[int]]:
    for i in range(len(pairs)):
        for k in range(1, max_ops + 1):
            if i - k + 1 >= 0:
                seq = _with_producers(pairs, shown, list(range(i - k + 1, i + 1)), writes)
                if len(seq) <= max_ops:
                    yield seq
        producers = [j for j in range(i) if _mentions(pairs[j][1], pairs[i][0])]
        if producers and producers[-1] < i - 1:
            seq = _with_producers(pairs, shown, [producers[-1], i], writes)
            if len(seq) <= max_ops:
                yield seq


def synthesize(
    trajectory: Trajectory,
    *,
    max_ops: int = 3,
    max_tasks: int | None = None,
    seed: int = 0,
    describer: Describer | None = None,
) -> list[Task]:
    """Write tasks from one exploration trajectory (deterministic for a seed).

    Args:
        trajectory: an exploration trajectory (``explore``); its task gives ``env`` and
            ``env_params``.
        max_ops: the most calls in one task (difficulty = number of calls, 1-3 by default).
        max_tasks: keep at most this many (sampled with ``seed``, at most ``MULTI_SHARE`` of them asking for more
            than one thing where enough ask for one); ``None`` keeps all.
        seed: seeds the phrasing choices and the sampling.
        describer: optional per-environment ``describer(pairs) -> query``.

    Returns:
        New ``Task`` objects, each with its own id ``synthetic-<hash>`` (never the seed's),
        ``source="synthetic"``, a fresh reference tuple, and metadata ``level``,
        ``confidence``, ``exploration_id``, ``synthesizer``.
    """
    pairs = _successful(trajectory)
    descriptions: dict[str, str] = dict(trajectory.metadata.get("tool_descriptions") or {})

    def writes(name: str) -> bool:
        return tool_kind(name, descriptions.get(name, "")) == "write"

    records = record_names([obs for _, obs in pairs]) if descriptions else {}
    owners = record_owners([obs for _, obs in pairs]) if descriptions else {}
    owned = Counter(owner for _, owner in owners.values())
    owners = {k: o for k, o in owners.items() if owned[o[1]] == 1}  # by owner only a person's only record
    shown = [_shown(obs) for _, obs in pairs]  # each observation's records, parsed once
    searched = _searched(trajectory, pairs, writes)
    carried = {key: trajectory.task.metadata[key] for key in _CARRIED if trajectory.task.metadata.get(key)}
    probes = _probes(pairs, writes)
    tasks: dict[str, Task] = {}
    for index in _sequences(pairs, shown, max_ops, writes if descriptions else None):
        chosen = [pairs[j] for j in index]
        if not all(_useful(p) for p in chosen) or _repeats_a_call(chosen):
            continue
        variants: list[tuple[list[ToolCall], dict[str, str], list[list[Any]]]] = [([], {}, [])]
        if descriptions and describer is None:  # also as people ask: records by name, their lookups first
            named = _named(pairs, shown, chosen, records, owners, writes, searched)
            if named[1]:
                variants.append(named)
        for lookups, names, resolves in variants:
            reference = (*lookups, *(
                ToolCall(name=c.name, arguments=dict(c.arguments) if isinstance(c.arguments, dict) else c.arguments)
                for c, _ in chosen
            ))  # fmt: skip
            task_id, digest = _task_id(trajectory, carried, reference)
            if task_id in tasks:
                continue
            query = describer(chosen) if describer is not None else None
            others: list[str] = []
            drawn = seed + int(digest[:8], 16)  # the wording's draws, one per task
            if not query and descriptions:
                query = describe_with_descriptions(chosen, descriptions, records, seed=drawn, names=names)
                others = alternates(query, chosen, descriptions, records, seed=drawn, names=names)
            if not query:
                query = describe_calls(chosen, seed=drawn)
            tasks[task_id] = _task(trajectory, task_id, query, reference, {
                "confidence": round(1.0 - 0.1 * (len(reference) - 1), 2),
                INTENTS_KEY: intents(chosen, writes),
                "synthesizer": SYNTHESIZER_NAME if describer is None else f"{SYNTHESIZER_NAME}+describer",
                **carried,
                **({SNAPSHOT_KEY: probes} if probes and trajectory.metadata.get("task_setup") else {}),
                **({RESOLVES_KEY: resolves} if resolves else {}),
                **({PHRASINGS_KEY: others} if others else {}),
            })  # fmt: skip
    if descriptions and describer is None:  # single facts asked by a record's name ("What is Ben Osei's fines?")

        def find(value: str, name: str, key: str | None) -> ToolCall | None:
            return _lookup_for(pairs, shown, value, name, writes, key)

        facts = fact_questions(pairs, records, writes, find, owners=owners, seed=seed, descriptions=descriptions)
        for fact in [*facts, *table_facts(pairs, writes, seed=seed)]:
            task_id, _ = _task_id(trajectory, carried, fact.reference, fact.field)
            tasks.setdefault(task_id, _task(trajectory, task_id, fact.query, fact.reference, {
                "confidence": 1.0, "synthesizer": SYNTHESIZER_NAME, **carried, "answer": fact.answer,
                INTENTS_KEY: 1, FACT_KEY: fact.field,
                **({RESOLVES_KEY: fact.resolves} if fact.resolves else {}),
                **({PHRASINGS_KEY: list(fact.alternates)} if fact.alternates else {})}))  # fmt: skip
    out = list(tasks.values())
    if max_tasks is not None and len(out) > max_tasks:
        kind = (lambda t: any(writes(c.name) for c in t.reference_solution or ())) if descriptions else None
        out = _sample(out, max_tasks, seed, kind, read_share(descriptions))
    return out


def _task_id(trajectory: Trajectory, carried: dict[str, Any], reference: Sequence[ToolCall], *extra: str
             ) -> tuple[str, str]:  # fmt: skip
    """``synthetic-<hash>`` of the world and the reference (and ``extra``: a fact's field), and the whole hash."""
    key = json.dumps([trajectory.task.env, trajectory.task.env_params,
                      *([carried["setup"]] if "setup" in carried else []), [c.to_dict() for c in reference], *extra],
                     sort_keys=True, default=str)  # fmt: skip
    digest = hashlib.sha1(key.encode()).hexdigest()
    return f"synthetic-{digest[:16]}", digest


def _task(trajectory: Trajectory, task_id: str, query: str, reference: Sequence[ToolCall],
          metadata: dict[str, Any]) -> Task:  # fmt: skip
    return Task(id=task_id, query=query, env=trajectory.task.env,
                env_params=json.loads(json.dumps(trajectory.task.env_params, default=str)),
                reference_solution=tuple(reference), source="synthetic",
                metadata={"level": len(reference), **metadata, "exploration_id": trajectory.id})  # fmt: skip


_CARRIED = ("setup",)
"""Exploration-task metadata a synthesized task keeps: ``setup`` (calls that built the explored initial state)."""
SNAPSHOT_KEY = "snapshot_calls"
"""``task.metadata`` key of read calls with arguments whose answers are part of the state the task is checked on
(an MCP server's ``get_booking(B1)``: its bookings show in no argument-free tool)."""
_MAX_PROBES = 12


def _probes(pairs: Sequence[tuple[ToolCall, ToolObservation]], writes: Callable[[str], bool]) -> list[dict[str, Any]]:
    """The exploration's successful reads that take arguments, once each: what they answer is state too."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for call, _ in pairs:
        if writes(call.name) or not call.arguments or not isinstance(call.arguments, dict):
            continue
        out.setdefault((call.name, normalized_arguments(call.arguments)), call.to_dict())
    return [{"name": c["name"], "arguments": c["arguments"]} for c in list(out.values())[:_MAX_PROBES]]


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def phrasing_overlap(synthetic: Sequence[Task | str], seed_tasks: Sequence[Task | str]) -> float:
    """Mean over synthetic queries of the highest token-Jaccard similarity to any seed query.

    1.0 means every synthetic query repeats a seed query word for word (as a bag of words);
    0.0 means no shared words. Returns 0.0 when either side is empty.
    """
    seeds = [_tokens(t if isinstance(t, str) else t.query) for t in seed_tasks]
    if not synthetic or not seeds:
        return 0.0
    best = []
    for item in synthetic:
        tokens = _tokens(item if isinstance(item, str) else item.query)
        best.append(max((len(tokens & s) / len(tokens | s) if tokens | s else 0.0) for s in seeds))
    return sum(best) / len(best)

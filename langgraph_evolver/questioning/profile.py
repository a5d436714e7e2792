"""Environment profiles: entities, their attributes and the operations on them.

A profile is declared by the environment (``Environment.profile()``, the sandbox ships one) or
derived from its tool schemas by rules: a tool name ``<verb>_<noun>`` is an operation of kind
read/write on the entity ``<noun>`` (singular), an argument ``<x>_id`` names the entity ``x``,
and the other arguments of an entity's tools are its attributes. ``arefine_profile`` asks a chat
model to correct what the rules got wrong (a tool named ``archive`` writes; ``lookup_weather``
acts on a forecast, not a "weather"); it keeps the rules' answer where the model gives none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from langgraph_evolver._llm import (
    UNSET,
    CallTally,
    LLMSettings,
    LoopSemaphores,
    ask_with_settings,
    json_values,
    resolve_settings,
)

from ..environment import Environment
from .prompts import DEFAULT_REFINE_PROMPT

__all__ = [
    "READ_VERBS",
    "WRITE_VERBS",
    "arefine_profile",
    "derive_profile",
    "environment_profile",
    "plural",
    "singular",
    "snake",
    "tool_entity",
    "tool_kind",
    "tool_verb",
]

READ_VERBS = frozenset({"get", "list", "search", "find", "read", "fetch", "show", "count", "check", "lookup", "view"})
"""Verb prefixes of tools that only read state."""
WRITE_VERBS = frozenset(
    {
        "create", "add", "new", "insert", "update", "edit", "set", "move", "rename", "complete", "mark",
        "delete", "remove", "cancel", "clear", "send", "book", "pay", "request", "post", "reply", "save",
    }
)  # fmt: skip
"""Verb prefixes of tools that change state."""
MORE_WRITE_VERBS = frozenset(
    {
        "apply", "renew", "revoke", "reserve", "release", "restock", "place", "pin", "unpin", "assign", "approve",
        "reject", "close", "open", "archive", "register", "submit", "issue", "transfer", "refund", "order",
        "purchase", "buy", "sell", "reschedule", "confirm", "enable", "disable", "start", "stop", "upload", "import",
        "invite", "block", "unblock", "lock", "unlock", "share", "publish", "tag", "attach", "detach", "merge",
        "increment", "decrement", "enroll", "write", "give", "throw", "take", "grant", "extend", "drop", "upsert",
        "replace", "modify", "change", "toggle", "put", "patch", "store", "record", "log", "subscribe",
        "unsubscribe", "follow", "unfollow", "like", "accept", "decline", "deny", "sign", "escalate", "dispatch",
        "ship", "deliver", "charge", "withdraw", "deposit", "rent", "lend", "borrow", "return", "checkout",
        "schedule", "upgrade", "downgrade", "activate", "deactivate", "suspend", "resume", "void",
        "redeem", "claim", "cancel", "delete", "remove", "create", "add", "update", "set", "book", "pay", "send",
        "hold", "park", "pause", "unpause", "ban", "unban", "mute", "unmute", "hide", "unhide", "vote", "finish",
        "trigger", "execute", "deploy", "install", "uninstall", "allocate", "join", "leave", "unassign", "reassign",
        "link", "unlink", "connect", "disconnect", "append", "copy", "clone", "duplicate", "promote", "demote",
        "notify", "remind", "settle", "refill", "revert", "undo", "redo", "acknowledge", "reopen", "snooze",
        "dismiss", "bookmark", "checkin", "enqueue", "dequeue", "push", "rsvp", "hire", "end",
    }
)  # fmt: skip
"""Verbs that change state beyond ``WRITE_VERBS``: a tool named or described with one writes (``tool_kind``)."""


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def snake(name: str) -> str:
    """A camelCase or PascalCase name in snake_case, the words every naming rule here reads (session 72: a shelter
    server's ``applicantEmail`` matched no ``email`` seen, so no write could be filled); any other name as it is.

    >>> snake("animalId"), snake("submitApplication"), snake("getHTTPStatus"), snake("book_id"), snake("BP-2041")
    ('animal_id', 'submit_application', 'get_http_status', 'book_id', 'BP-2041')
    """
    return _CAMEL.sub("_", name).lower() if _CAMEL.search(name) else name


def tool_kind(name: str, description: str = "") -> str:
    """``"write"`` or ``"read"``: by the verb of the name (``revoke_permit``, ``book``), else by the first word of
    the description ("Extend an active permit ...", "Throw a note away"); a tool named and described by nouns
    ("zone_info": "Fee per month, ...") reads.

    Example:
        >>> tool_kind("renew_permit", "Extend an active permit"), tool_kind("zone_info", "Fee per month")
        ('write', 'read')
        >>> tool_kind("hold_at_depot", "Hold a parcel in transit at a depot"), tool_kind("track", "A shipment's status")
        ('write', 'read')
        >>> tool_kind("recordVaccination"), tool_entity("searchAnimals")
        ('write', 'animal')
        >>> tool_kind("rental_end", "Check a hired bike back in"), tool_kind("ticket_add_part", "Use parts from stock")
        ('write', 'write')
        >>> tool_kind("member_lookup", "A member's card"), tool_kind("blog_post", "A blog post by its id")
        ('read', 'read')
    """
    head = _name_verb(name, description)
    if head in READ_VERBS and head != "check":
        return "read"
    if head in WRITE_VERBS | MORE_WRITE_VERBS:
        return "write"
    words = re.findall(r"[a-z]+", description.lower())
    first = words[0] if words else ""
    verbs = WRITE_VERBS | MORE_WRITE_VERBS
    if first in verbs or (first.endswith("s") and first[:-1] in verbs):  # "Cancel a booking", "Cancels ..."
        return "write"
    return "read"


_IRREGULAR = {"people": "person", "children": "child", "men": "man", "women": "woman", "staff": "staff"}
"""Plurals no rule makes: a ``searchPeople`` tool's record is a person ("Priya Nair's person id", not "people id")."""


def singular(word: str) -> str:
    """A rough singular of an English noun (``contacts`` -> ``contact``, ``todos`` -> ``todo``, ``people`` ->
    ``person``)."""
    if word.lower() in _IRREGULAR:
        return _IRREGULAR[word.lower()]
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


_UNCOUNTED = frozenset({"people", "data", "staff", "news", "info", "equipment", "inventory", "feedback", "media"})


def plural(noun: str) -> str:
    """A rough plural of an English noun (``member`` -> ``members``, ``category`` -> ``categories``); ``singular``'s
    other half."""
    if noun in _UNCOUNTED:  # "people", not "peoples"
        return noun
    plurals = {one: many for many, one in _IRREGULAR.items()}
    if noun.lower() in plurals:  # "person" -> "people"
        return plurals[noun.lower()]
    if noun.endswith("y") and noun[-2:-1] not in tuple("aeiou"):
        return noun[:-1] + "ies"
    return noun + "es" if noun.endswith(("s", "x", "ch", "sh")) else noun + "s"


_DETERMINERS = frozenset({"a", "an", "the", "one", "all", "every", "each", "this", "that", "its", "their"})
"""First words of a description that name a thing, not an act: "A blog post by its id" says ``blog_post`` reads,
where the name alone ends in a verb."""


def _verb_index(name: str, description: str = "") -> int | None:
    """Where the verb of a tool's name is among its snake_case words: first (``add_part``), else, for a name
    that puts its noun first (``member_lookup``, ``ticket_add_part``, ``rental_end``; session 73's bike-shop
    server), its last verb, unless the description opens with a determiner (``blog_post``: "A blog post ...");
    ``None`` when no word is a verb."""
    words = snake(name).lower().split("_")
    verbs = READ_VERBS | WRITE_VERBS | MORE_WRITE_VERBS
    if words[0] in verbs:
        return 0
    later = [i for i, w in enumerate(words) if i and w in verbs]
    opening = re.findall(r"[a-z]+", description.lower())[:1]
    if not later or opening and opening[0] in _DETERMINERS:
        return None
    return later[-1]


def _name_verb(name: str, description: str = "") -> str:
    at = _verb_index(name, description)
    return "other" if at is None else snake(name).lower().split("_")[at]


def tool_verb(name: str, description: str = "") -> str:
    """The verb of a tool name (``send_message`` -> ``send``, ``ticket_update`` -> ``update``: ``_verb_index``)
    when it is a read or a plain write, or ``"other"``."""
    verb = _name_verb(name, description)
    return verb if verb in READ_VERBS | WRITE_VERBS else "other"


def tool_entity(name: str) -> str:
    """The entity a tool acts on: its name without the verb, singular (``list_todos`` -> ``todo``,
    ``member_lookup`` -> ``member``, ``ticket_add_part`` -> ``ticket``: the words before a later verb).

    >>> tool_entity("list_todos"), tool_entity("member_lookup"), tool_entity("ticket_add_part")
    ('todo', 'member', 'ticket')
    """
    parts = snake(name).lower().split("_")
    at = _verb_index(name)
    if at == 0 and parts[0] in READ_VERBS | WRITE_VERBS:
        parts = parts[1:]
    elif at is not None and at > 0:
        parts = parts[:at]
    return singular("_".join(parts)) if parts else name.lower()


def _schema_parts(schema: Mapping[str, Any]) -> tuple[str, str, dict[str, Any], list[str]]:
    fn = schema.get("function", schema)
    params = fn.get("parameters") or {}
    props, required = dict(params.get("properties") or {}), list(params.get("required") or [])
    return fn["name"], fn.get("description", ""), props, required


def derive_profile(tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Derive a profile from OpenAI function-tool schemas by rules (no model involved).

    Args:
        tools: the schemas ``Environment.reset`` returns in ``Observation.tools``.

    Returns:
        ``{"entities": {name: {"attributes", "operations"}}, "operations": {tool: {...}},
        "verbs": {verb: [tool, ...]}}``.

    Example:
        >>> p = derive_profile([{"type": "function", "function": {"name": "complete_todo",
        ...     "parameters": {"properties": {"todo_id": {"type": "integer"}}}}}])
        >>> p["operations"]["complete_todo"]["kind"], sorted(p["entities"])
        ('write', ['todo'])
    """
    entities: dict[str, dict[str, set[str]]] = {}
    operations: dict[str, dict[str, Any]] = {}
    verbs: dict[str, list[str]] = {}

    def entity(name: str) -> dict[str, set[str]]:
        return entities.setdefault(name, {"attributes": set(), "operations": set()})

    for schema in tools:
        name, description, props, required = _schema_parts(schema)
        verb, noun = tool_verb(name), tool_entity(name)
        kind = "read" if verb in READ_VERBS else "write" if verb in WRITE_VERBS else "unknown"
        operations[name] = {
            "verb": verb,
            "entity": noun,
            "kind": kind,
            "description": description,
            "arguments": sorted(props),
            "required": required,
            "writes": kind == "write",
        }
        verbs.setdefault(verb, []).append(name)
        entity(noun)["operations"].add(name)
        for arg in props:
            words = snake(arg)  # ``animalId`` too
            if words.endswith("_id"):
                entity(words[:-3])["attributes"].add("id")
                if words[:-3] != noun:
                    entity(words[:-3])["operations"].add(name)
            else:
                entity(noun)["attributes"].add(arg)
    return {
        "entities": {
            k: {"attributes": sorted(v["attributes"]), "operations": sorted(v["operations"])}
            for k, v in sorted(entities.items())
        },
        "operations": operations,
        "verbs": {k: sorted(v) for k, v in sorted(verbs.items())},
    }


def environment_profile(env: Environment, tools: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The environment's profile: declared when it has one, else derived from its tool schemas.

    Args:
        env: a ``langgraph_evolver.environment.Environment`` (anything with ``profile()`` works).
        tools: its tool schemas; needed when the environment declares no entities.

    Returns:
        The profile with ``"source"`` set to ``"declared"`` or ``"derived"``. Derived
        operations fill in the ones a declared profile leaves out.
    """
    declared = dict(env.profile() or {}) if hasattr(env, "profile") else {}
    derived = derive_profile(tools) if tools else {"entities": {}, "operations": {}, "verbs": {}}
    if declared.get("entities"):
        operations = {**derived["operations"]}
        for name, op in (declared.get("operations") or {}).items():
            operations[name] = {**operations.get(name, {}), **op}
        return {**derived, **declared, "operations": operations, "source": "declared"}
    return {**derived, "source": "derived"}


REFINE_PROMPT = DEFAULT_REFINE_PROMPT
"""The refinement prompt (``prompts.DEFAULT_REFINE_PROMPT``; this name is kept for old imports)."""


def _corrections(text: str, known: set[str]) -> dict[str, dict[str, str]] | None:
    data = next((v for v in json_values(text) if isinstance(v, dict)), None)
    if data is None:
        return None
    out: dict[str, dict[str, str]] = {}
    for name, fix in data.items():
        if name not in known or not isinstance(fix, dict):
            continue
        entity, kind = fix.get("entity"), fix.get("kind")
        clean = {}
        if isinstance(entity, str) and entity.strip():
            clean["entity"] = singular(entity.strip().lower().replace(" ", "_"))
        if kind in ("read", "write"):
            clean["kind"] = kind
        if clean:
            out[name] = clean
    return out


REFINE_SETTINGS = LLMSettings(max_concurrency=1, max_retries=2, backoff_s=0.5, max_backoff_s=5.0, timeout_s=120.0)
"""``arefine_profile``'s default ``settings``: one call at a time, two retries."""


async def arefine_profile(
    profile: Mapping[str, Any], model: Any, *, settings: LLMSettings | None = None, max_retries: int = UNSET
) -> dict[str, Any]:
    """``profile`` with the operations' entity and kind corrected by ``model`` (any LangChain chat model).

    Only known tools, singular entity names and the kinds ``read``/``write`` are taken; the entities'
    operation lists follow the corrected operations. ``profile["refined"]`` lists what changed; on a
    model failure the profile comes back unchanged with ``profile["refine_error"]``. Never raises.
    ``settings`` (default ``REFINE_SETTINGS``) shapes the retries; ``max_retries`` overrides it.
    """
    chosen = resolve_settings(settings, REFINE_SETTINGS, max_retries=max_retries)
    operations = dict(profile.get("operations") or {})
    listed = "\n".join(
        f"- {name}({', '.join(op.get('arguments') or [])}): {op.get('description') or ''} "
        f"[entity: {op.get('entity')}, {op.get('kind')}]"
        for name, op in operations.items()
    )
    fixes, problem = await ask_with_settings(
        model, DEFAULT_REFINE_PROMPT.format(operations=listed), chosen,
        parse=lambda text: _corrections(text, set(operations)),
        retry_message=lambda text: "Answer with only a JSON object, e.g. {\"archive_note\": {\"entity\": \"note\", "
                                   "\"kind\": \"write\"}}, or {}.",
        problem_of=lambda text: f"no JSON object in the answer ({text[:120]!r})",
        semaphores=LoopSemaphores(chosen.max_concurrency), tally=CallTally(),
    )  # fmt: skip
    if fixes is None:
        return {**profile, "refine_error": problem}
    changed = []
    for name, fix in fixes.items():
        op = dict(operations[name])
        if all(op.get(key) == value for key, value in fix.items()):
            continue
        op.update(fix)
        op["writes"] = op.get("kind") == "write"
        operations[name] = op
        changed.append(name)
    entities: dict[str, dict[str, Any]] = {k: {**v, "operations": [o for o in v.get("operations", [])
                                                                   if o not in changed]}
                                           for k, v in (profile.get("entities") or {}).items()}  # fmt: skip
    for name in changed:
        target = entities.setdefault(operations[name]["entity"], {"attributes": [], "operations": []})
        target["operations"] = sorted({*target["operations"], name})
    return {**profile, "operations": operations, "entities": dict(sorted(entities.items())), "refined": sorted(changed)}

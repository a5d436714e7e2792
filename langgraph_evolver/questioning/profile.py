"""Environment profiles: entities, their attributes and the operations on them.

A profile is declared by the environment (``Environment.profile()``, the sandbox ships one) or
derived from its tool schemas by rules: a tool name ``<verb>_<noun>`` is an operation of kind
read/write on the entity ``<noun>`` (singular), an argument ``<x>_id`` names the entity ``x``,
and the other arguments of an entity's tools are its attributes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "READ_VERBS",
    "WRITE_VERBS",
    "derive_profile",
    "environment_profile",
    "singular",
    "tool_entity",
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


def singular(word: str) -> str:
    """A rough singular of an English noun (``contacts`` -> ``contact``, ``todos`` -> ``todo``)."""
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def tool_verb(name: str) -> str:
    """The verb prefix of a tool name (``send_message`` -> ``send``), or ``"other"``."""
    head = name.split("_", 1)[0].lower()
    return head if head in READ_VERBS | WRITE_VERBS else "other"


def tool_entity(name: str) -> str:
    """The entity a tool acts on: its name without the verb, singular (``list_todos`` -> ``todo``)."""
    parts = name.lower().split("_")
    if parts and parts[0] in READ_VERBS | WRITE_VERBS:
        parts = parts[1:]
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
            if arg.endswith("_id"):
                entity(arg[:-3])["attributes"].add("id")
                if arg[:-3] != noun:
                    entity(arg[:-3])["operations"].add(name)
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


def environment_profile(env: Any, tools: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The environment's profile: declared when it has one, else derived from its tool schemas.

    Args:
        env: an ``env_tools.base.Environment`` (anything with ``profile()`` works).
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

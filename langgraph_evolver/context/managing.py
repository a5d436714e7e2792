"""Self-context-managing: a model decides what of the history to keep, remove or compress.

When the prompt passes ``trigger_tokens`` (counted by the endpoint's tokenizer: the last policy
call's prompt + completion ids, plus an estimate for what came after), a context-management step
lists the earlier messages with short ids (``m1``, ``m2``, …) and asks the manager for one JSON
object: ``{"m1": "keep", "m2": "remove", "m3": {"compress": "c42 is Pia"}}`` (ids left out are
kept). The edits go into the graph state, so the edited history is used from then on. A
malformed action edits nothing and is counted.

The manager is the policy itself (its calls are transitions, trained with the episode's
advantage; under ADCA a management step takes the advantage of the step after it), any other
chat model (recorded, not trained), or ``"rules"``: ``RulesContextManager``, a deterministic
manager that exercises the whole path offline (the tiny policy will not write such actions).

Never offered for editing: system messages, the task (the first user message), pinned messages
(an injected experience block) and the last ``protect_last`` turns. Removing an AI message that
called tools removes its tool results too; a tool result removed on its own becomes a one-line
stub, so every tool call keeps its answer.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from .._llm import run_sync
from .prompts import DEFAULT_MANAGE_PROMPT, REMOVED_STUB
from .templates import is_pinned, split_turns

__all__ = [
    "CONTEXT_STEP_KIND",
    "DEFAULT_MANAGE_PROMPT",
    "ContextEdit",
    "RulesContextManager",
    "SelfManagingTemplate",
    "amanage_context",
    "create_context_node",
    "manage_context",
    "parse_context_action",
    "prompt_tokens",
]

CONTEXT_STEP_KIND = "context"
"""``metadata["evolver_step_kind"]`` of a management call; the capture records such steps as ``kind="context"``."""


@dataclass(frozen=True, slots=True)
class SelfManagingTemplate:
    """The self-context-managing template (see the module docstring).

    Args:
        manager: ``"policy"`` (the agent's own model), ``"rules"``, or a chat model.
        trigger_tokens: Manage when the prompt passes this many tokens.
        protect_last: The last N turns are never offered for editing.
        prompt: The management prompt (``{tokens}``, ``{listing}``).
    """

    manager: Any = "policy"
    trigger_tokens: int = 768
    protect_last: int = 1
    prompt: str = DEFAULT_MANAGE_PROMPT
    name = "managing"

    def __call__(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        return list(messages)  # between management steps the history is used as it is (causal)

    def resolve_manager(self, policy: BaseChatModel | None) -> BaseChatModel:
        if self.manager == "policy":
            if policy is None:
                from ..errors import ConfigError

                raise ConfigError("context manager 'policy' needs the policy model; pass manager='rules' or a model.")
            return policy
        if self.manager == "rules":
            return RulesContextManager()
        if isinstance(self.manager, str):
            from langchain.chat_models import init_chat_model

            return init_chat_model(self.manager)
        return self.manager


@dataclass(slots=True)
class ContextEdit:
    """What one management step did (``valid=False``: the action was malformed and nothing changed)."""

    valid: bool
    tokens: int
    offered: int = 0
    removed: int = 0
    compressed: int = 0
    error: str | None = None
    updates: list[BaseMessage] = field(default_factory=list)
    """``add_messages`` updates: ``RemoveMessage``s and same-id replacements."""

    def stats(self) -> dict[str, Any]:
        return {"valid": self.valid, "tokens": self.tokens, "offered": self.offered, "removed": self.removed,
                "compressed": self.compressed, "error": self.error}  # fmt: skip


def prompt_tokens(messages: Sequence[BaseMessage]) -> int:
    """The prompt's length in the endpoint's tokens: the last call with token ids, plus ~4 chars/token after it."""
    base, after = 0, 0
    for m in reversed(messages):
        meta = m.response_metadata if isinstance(m, AIMessage) else {}
        if meta.get("prompt_token_ids") is not None and meta.get("token_ids") is not None:
            base = len(meta["prompt_token_ids"]) + len(meta["token_ids"])
            break
        after += len(_text(m)) // 4 + 4
    else:
        return after
    return base + after


def _text(m: BaseMessage) -> str:
    return m.content if isinstance(m.content, str) else m.text


def _candidates(messages: Sequence[BaseMessage], protect_last: int) -> list[tuple[str, BaseMessage]]:
    _, turns = split_turns(messages)
    offered = turns[: max(0, len(turns) - protect_last)]
    flat = [m for turn in offered for m in turn if m.id and not is_pinned(m) and not isinstance(m, SystemMessage)]
    return [(f"m{i + 1}", m) for i, m in enumerate(flat)]


def _describe(m: BaseMessage) -> str:
    if isinstance(m, AIMessage):
        calls = ", ".join(f"{c['name']}({json.dumps(c.get('args') or {}, ensure_ascii=False)})" for c in m.tool_calls)
        return f"assistant: {_text(m)[:300]}" + (f" [calls {calls}]" if calls else "")
    if isinstance(m, ToolMessage):
        return f"tool {m.name or ''}: {_text(m)[:300]}"
    return f"{m.type}: {_text(m)[:300]}"


def parse_context_action(text: str, ids: Sequence[str]) -> dict[str, Any]:
    """The manager's JSON action, checked against the offered ``ids``; raises ``ValueError`` if malformed."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("no JSON object in the answer")
    try:
        action = json.loads(text[start : end + 1])
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg})") from None
    if not isinstance(action, dict):
        raise ValueError("the action must be a JSON object of id -> choice")
    unknown = sorted(set(action) - set(ids))
    if unknown:
        raise ValueError(f"unknown message ids {unknown}; offered {list(ids)}")
    for key, choice in action.items():
        ok = choice in ("keep", "remove") or (
            isinstance(choice, dict) and set(choice) == {"compress"} and isinstance(choice["compress"], str)
        )
        if not ok:
            raise ValueError(f"{key}: {choice!r} is not 'keep', 'remove' or {{'compress': '<text>'}}")
    return action


def _edits(offered: list[tuple[str, BaseMessage]], action: dict[str, Any], everything: Sequence[BaseMessage]):
    by_call = {m.tool_call_id: m for m in everything if isinstance(m, ToolMessage)}
    updates: list[BaseMessage] = []
    removed = compressed = 0
    gone: set[str] = set()
    for key, m in offered:
        choice = action.get(key, "keep")
        if choice == "keep" or m.id in gone:
            continue
        if choice == "remove":
            if isinstance(m, ToolMessage):  # keep the call answered
                updates.append(m.model_copy(update={"content": REMOVED_STUB}))
            else:
                updates.append(RemoveMessage(id=str(m.id)))
                gone.add(str(m.id))
                if isinstance(m, AIMessage):  # its tool results go with it
                    for call in m.tool_calls:
                        result = by_call.get(call.get("id") or "")
                        if result is not None and result.id and result.id not in gone:
                            updates.append(RemoveMessage(id=result.id))
                            gone.add(result.id)
            removed += 1
        else:
            updates.append(m.model_copy(update={"content": choice["compress"]}))
            compressed += 1
    return updates, removed, compressed


async def amanage_context(
    messages: Sequence[BaseMessage],
    manager: BaseChatModel,
    template: SelfManagingTemplate,
    *,
    force: bool = False,
) -> ContextEdit | None:
    """One management step over ``messages`` (every message needs an ``id``: graph state has them).

    Returns ``None`` when the prompt is under the trigger (or nothing can be edited), else the edit,
    whose ``updates`` go into the graph state as a ``messages`` update.
    """
    tokens = prompt_tokens(messages)
    if tokens < template.trigger_tokens and not force:
        return None
    offered = _candidates(messages, template.protect_last)
    if not offered:
        return None
    listing = "\n".join(f"[{key}] {_describe(m)}" for key, m in offered)
    system = [m for m in messages if isinstance(m, SystemMessage) and not is_pinned(m)][:1]
    request = HumanMessage(
        template.prompt.format(tokens=tokens, listing=listing),
        additional_kwargs={"evolver_offered": [{"id": k, "type": m.type, "chars": len(_text(m))} for k, m in offered]},
    )
    tagged = manager.with_config(metadata={"evolver_step_kind": CONTEXT_STEP_KIND}, run_name="manage_context")
    try:
        answer = await tagged.ainvoke([*system, request])
        action = parse_context_action(_text(answer), [k for k, _ in offered])
    except ValueError as e:
        return ContextEdit(valid=False, tokens=tokens, offered=len(offered), error=str(e))
    updates, removed, compressed = _edits(offered, action, messages)
    return ContextEdit(valid=True, tokens=tokens, offered=len(offered), removed=removed, compressed=compressed,
                       updates=updates)  # fmt: skip


def manage_context(
    messages: Sequence[BaseMessage],
    manager: BaseChatModel,
    template: SelfManagingTemplate,
    *,
    force: bool = False,
) -> ContextEdit | None:
    """Synchronous ``amanage_context``."""
    return run_sync(amanage_context(messages, manager, template, force=force))


def create_context_node(
    manager: Any,
    *,
    trigger_tokens: int = 768,
    protect_last: int = 1,
    prompt: str = DEFAULT_MANAGE_PROMPT,
    input_key: str = "messages",
    stats_key: str | None = "context_stats",
    force: bool = False,
) -> Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]:
    """A LangGraph node that runs one context-management step over the messages at ``input_key``.

    Its update is ``{input_key: edit.updates}`` (``RemoveMessage``s and same-id replacements, for
    an ``add_messages`` channel) plus ``{stats_key: [edit.stats()]}``; under the trigger it is ``{}``.

    Args:
        manager: ``"rules"``, a chat-model string, or a chat model (the node binds it once; the
            policy itself manages only inside a rollout, through ``create_agent_graph``).
        trigger_tokens, protect_last, prompt: As in ``SelfManagingTemplate``.
        input_key: State key holding the messages (each with an ``id``, as graph state gives them).
        stats_key: State key for the edit's stats (``None``: not written).
        force: Manage on every run, whatever the prompt's length.
    """
    template = SelfManagingTemplate(manager=manager, trigger_tokens=trigger_tokens, protect_last=protect_last,
                                    prompt=prompt)  # fmt: skip
    model = template.resolve_manager(None)

    async def manage(state: Mapping[str, Any]) -> dict[str, Any]:
        if input_key not in state:
            from ..errors import ConfigError

            raise ConfigError(f"The context node reads messages from state[{input_key!r}], which is missing "
                              f"(state keys: {sorted(state)}); pass them or set input_key.")  # fmt: skip
        edit = await amanage_context(state[input_key], model, template, force=force)
        if edit is None:
            return {}
        update: dict[str, Any] = {input_key: edit.updates}
        if stats_key is not None:
            update[stats_key] = [edit.stats()]
        return update

    manage.__name__ = "manage_context"
    return manage


class RulesContextManager(BaseChatModel):
    """A deterministic manager: drop dead ends, compress long tool results, keep the rest.

    - an assistant turn whose tool results were all empty (``[]``, ``{}``, nothing) or errors is
      removed with its results: it taught nothing the next turns need;
    - a feedback turn about a malformed call (a user message starting with ``Error``) is removed;
    - a tool result longer than ``max_chars`` is compressed to its first ``max_chars`` characters.

    It answers the management prompt (reading the offered ids from the request's
    ``additional_kwargs["evolver_offered"]``) with a JSON action, so offline runs and tests go
    through the same parse-and-edit path as a model would.
    """

    max_chars: int = 120
    """Tool results longer than this are compressed to their first ``max_chars`` characters."""

    @property
    def _llm_type(self) -> str:
        return "rules-context-manager"

    def _action(self, messages: list[BaseMessage]) -> str:
        offered = (messages[-1].additional_kwargs or {}).get("evolver_offered") or []
        lines = {line.split("] ", 1)[0].lstrip("["): line.split("] ", 1)[-1]
                 for line in _text(messages[-1]).splitlines() if line.startswith("[m")}  # fmt: skip
        action: dict[str, Any] = {}
        turn: str | None = None
        results: list[str] = []

        def close_turn() -> None:
            if turn is not None and results and all(_dead_end(r) for r in results):
                action[turn] = "remove"

        for item in offered:
            key, kind, chars = item["id"], item["type"], item["chars"]
            body = lines.get(key, "").split(": ", 1)[-1]
            if kind == "ai":
                close_turn()
                turn, results = key, []
            elif kind == "tool":
                results.append(body)
                if chars > self.max_chars:
                    action[key] = {"compress": body[: self.max_chars] + "…"}
            elif kind == "human" and body.startswith("Error"):
                action[key] = "remove"
        close_turn()
        return json.dumps(action)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kw: Any) -> ChatResult:  # fmt: skip
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self._action(messages)))])


def _dead_end(result: str) -> bool:
    return result.strip() in ("", "[]", "{}", "null") or result.startswith("Error")

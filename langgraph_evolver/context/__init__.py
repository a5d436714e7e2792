"""Context management: templates chosen by name with options, and the self-managing step.

- ``causal`` (default): the whole history; consecutive calls merge into one training row.
- ``reasoning`` (``hint``): think in ``<think>…</think>`` first; earlier thoughts are dropped
  from later prompts; one row per call.
- ``sliding`` (``window``): system, task, one placeholder line, the last ``window`` turns; one
  row per call once the window slides.
- ``managing`` (``manager``, ``trigger_tokens``, ``protect_last``): the history as edited by a
  context-management step; rows merge between edits.

Where they apply: ``create_agent_graph(context_template=..., context_options=...)`` (our graph;
``managing`` is its visible ``manage_context`` node), ``EvolverMiddleware`` for ``create_agent``
agents (``managing`` through its ``before_model`` hook), and ``PolicyChatModel(context_template=...)``
for any graph whose factory takes the model (the stateless templates). Register your own with
``register_context_template(name, factory)``: ``factory(**options)`` returns a callable
``(messages) -> messages``.

The self-managing step on its own: ``manage_context(messages, manager, template)`` /
``amanage_context`` return a ``ContextEdit`` (its ``updates`` go into an ``add_messages`` channel),
``create_context_node(manager)`` wraps it as a LangGraph node, and ``RulesContextManager`` is the
offline manager. Prompts and the fixed prompt texts are in ``prompts.py``.

Example:
    >>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    >>> from langgraph.graph.message import add_messages
    >>> history = [HumanMessage("Find Ana's zone.", id="h1"),
    ...     AIMessage("", tool_calls=[{"name": "find", "args": {"q": "Ana"}, "id": "c1"}], id="a1"),
    ...     ToolMessage("[]", tool_call_id="c1", id="t1"),
    ...     AIMessage("", tool_calls=[{"name": "find", "args": {"q": "Ana Li"}, "id": "c2"}], id="a2"),
    ...     ToolMessage('{"zone": "Z4"}', tool_call_id="c2", id="t2")]
    >>> edit = manage_context(history, RulesContextManager(), get_context_template("managing"), force=True)
    >>> edit.valid, [m.id for m in add_messages(history, edit.updates)]
    (True, ['h1', 'a2', 't2'])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from ..errors import ConfigError
from .managing import (
    CONTEXT_STEP_KIND,
    DEFAULT_MANAGE_PROMPT,
    ContextEdit,
    RulesContextManager,
    SelfManagingTemplate,
    amanage_context,
    create_context_node,
    manage_context,
    parse_context_action,
    prompt_tokens,
)
from .prompts import DEFAULT_THINK_HINT, PLACEHOLDER, REMOVED_STUB
from .templates import (
    PINNED,
    CausalTemplate,
    ReasoningTemplate,
    SlidingWindowTemplate,
    causal_template,
    is_pinned,
    pin,
    split_turns,
    strip_thoughts,
)

__all__ = [
    "CONTEXT_STEP_KIND",
    "DEFAULT_MANAGE_PROMPT",
    "DEFAULT_THINK_HINT",
    "PINNED",
    "PLACEHOLDER",
    "REMOVED_STUB",
    "CausalTemplate",
    "ContextEdit",
    "ContextTemplate",
    "ReasoningTemplate",
    "RulesContextManager",
    "SelfManagingTemplate",
    "SlidingWindowTemplate",
    "amanage_context",
    "causal_template",
    "create_context_node",
    "get_context_template",
    "is_pinned",
    "list_context_templates",
    "manage_context",
    "parse_context_action",
    "pin",
    "prompt_tokens",
    "register_context_template",
    "split_turns",
    "strip_thoughts",
]

ContextTemplate = Callable[[Sequence[BaseMessage]], list[BaseMessage]]

_TEMPLATES: dict[str, Callable[..., ContextTemplate]] = {
    "causal": CausalTemplate,
    "reasoning": ReasoningTemplate,
    "sliding": SlidingWindowTemplate,
    "managing": SelfManagingTemplate,
}
_ALIASES = {"sliding_window": "sliding", "self_managing": "managing", "scmt": "managing", "basic": "causal"}


def register_context_template(name: str, factory: Callable[..., ContextTemplate] | ContextTemplate) -> None:
    """Register a template by name: a factory ``(**options) -> template``, or a template itself (no options)."""
    if not callable(factory):
        raise ConfigError(f"A context template is a callable (messages) -> messages; got {type(factory).__name__}.")
    _TEMPLATES[name] = factory if isinstance(factory, type) else (lambda _f=factory, **_: _f)


def list_context_templates() -> list[str]:
    return sorted(_TEMPLATES)


def get_context_template(template: str | ContextTemplate | None, **options: Any) -> ContextTemplate:
    """The template named ``template`` built with ``options`` (a callable passes through unchanged)."""
    if template is None:
        return causal_template
    if callable(template):
        if options:
            raise ConfigError("context_options only apply to a template given by name.")
        return template
    name = _ALIASES.get(template, template)
    if name not in _TEMPLATES:
        raise ConfigError(
            f"Unknown context template {template!r}. Available: {', '.join(list_context_templates())}; "
            "or pass a callable (messages) -> messages."
        )
    try:
        return _TEMPLATES[name](**options)
    except TypeError as e:
        raise ConfigError(f"Bad context_options for {name!r}: {e}.") from None

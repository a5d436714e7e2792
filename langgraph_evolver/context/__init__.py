"""Context-management templates, chosen by name with options.

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
    parse_context_action,
    prompt_tokens,
)
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
    "PINNED",
    "CausalTemplate",
    "ContextEdit",
    "ContextTemplate",
    "ReasoningTemplate",
    "RulesContextManager",
    "SelfManagingTemplate",
    "SlidingWindowTemplate",
    "amanage_context",
    "causal_template",
    "get_context_template",
    "is_pinned",
    "list_context_templates",
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

"""Context-management templates: how the agent's history becomes each prompt.

A template is a callable ``(messages) -> messages`` applied before every LLM call; the full
history stays in the graph state, only the prompt changes. Each LLM call is one transition
whatever the template; with the causal template consecutive prompts are prefix-extensions of
each other, which the trainer may exploit by merging them into one sample.

This module ships the basic causal template; reasoning-augmented, sliding-window and
self-context-managing templates register here by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from langchain_core.messages import BaseMessage

from .errors import ConfigError

__all__ = ["ContextTemplate", "causal_template", "get_context_template", "register_context_template"]

ContextTemplate = Callable[[Sequence[BaseMessage]], list[BaseMessage]]


def causal_template(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """Basic causal template: the whole history, unchanged."""
    return list(messages)


_TEMPLATES: dict[str, ContextTemplate] = {"causal": causal_template}


def register_context_template(name: str, template: ContextTemplate) -> None:
    _TEMPLATES[name] = template


def get_context_template(template: str | ContextTemplate) -> ContextTemplate:
    """Resolve a template by name (or pass a callable through)."""
    if callable(template):
        return template
    try:
        return _TEMPLATES[template]
    except KeyError:
        raise ConfigError(
            f"Unknown context template {template!r}. Available: {', '.join(sorted(_TEMPLATES))}; "
            "or pass a callable (messages) -> messages."
        ) from None

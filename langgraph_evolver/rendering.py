"""A trajectory's steps as text for an LLM prompt: what the judges, the explorer and the extractors show.

Shared by attribution (the step judge), questioning (the reference judge, the synthesizer) and experience
(the extractors' prompts), so it lives in the core rather than in one of them. ``attribution.parsing``
re-exports these names (their old path).

Example:
    >>> from langgraph_evolver.types import ToolCall
    >>> render_call(ToolCall(name="get_balance", arguments={"account": "A-1"}))
    'get_balance(account="A-1")'
    >>> trim("abcdef", 3)
    'abc… [3 more chars]'
"""

from __future__ import annotations

import json

from langgraph_evolver.types import Step, ToolCall

__all__ = ["DEFAULT_STEP_FORMAT", "render_action", "render_call", "render_observation", "render_steps", "trim"]

DEFAULT_STEP_FORMAT = "Step {number}: {action}\n  -> {observation}"
"""One step of ``render_steps`` (fields ``number``, ``action``, ``observation``)."""


def trim(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters, saying how much was cut."""
    text = text.strip()
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}… [{len(text) - max_chars} more chars]"


def render_call(call: ToolCall) -> str:
    """``name(key="value", n=5)``; arguments that are not an object are shown raw."""
    if isinstance(call.arguments, dict):
        args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in call.arguments.items())
        return f"{call.name}({args})"
    return f"{call.name}(<arguments that are not a JSON object: {call.arguments!r}>)"


def render_action(step: Step, max_chars: int) -> str:
    """What the agent did in ``step``: its tool calls as ``name(arg=value)``, or its text."""
    if step.action.tool_calls:
        return trim("; ".join(render_call(c) for c in step.action.tool_calls), max_chars)
    text = json.dumps(trim(step.action.content or "", max_chars), ensure_ascii=False)
    if step.error:
        return f"wrote output that is neither a valid tool call nor an answer: {text}"
    return f"final answer: {text}"


def render_observation(step: Step, max_chars: int) -> str:
    """What the environment answered to ``step``, trimmed; errors are marked ``[error]``."""
    parts = [f"[error] {o.content}" if o.is_error else o.content for o in step.observations]
    text = " | ".join(parts)
    if step.error:
        text = f"{text} [step error: {step.error}]" if text else f"[step error: {step.error}]"
    if not text:
        text = "(the episode ends)" if not step.action.tool_calls else "(no answer)"
    return trim(text, max_chars)


def render_steps(steps: tuple[Step, ...], *, max_observation_chars: int, step_format: str = DEFAULT_STEP_FORMAT) -> str:
    """All steps as the ``{steps}`` field of the attribution prompt, numbered from 1."""
    return "\n".join(
        step_format.format(
            number=i,
            action=render_action(step, max_observation_chars),
            observation=render_observation(step, max_observation_chars),
        )
        for i, step in enumerate(steps, 1)
    )

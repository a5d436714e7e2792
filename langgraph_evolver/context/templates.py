"""The stateless context templates: how the agent's history becomes each prompt.

A template is a callable ``(messages) -> messages`` applied before every LLM call; the full
history stays in the graph state, only the prompt changes. Each LLM call is one transition
whatever the template. Where consecutive prompts are prefix-extensions of each other (causal),
the trainer merges them into one row; where they are not (reasoning, sliding), it makes a row
per call: it checks the token ids, so no template needs code in the trainer.

No template drops or edits a *pinned* message: an injected experience block (self-navigating
strips it by its span before training, so the span must reach the endpoint intact) is marked
with ``additional_kwargs["evolver_pinned"] = True`` (``pin``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from .prompts import DEFAULT_THINK_HINT, PLACEHOLDER

__all__ = [
    "PINNED",
    "CausalTemplate",
    "ReasoningTemplate",
    "SlidingWindowTemplate",
    "causal_template",
    "is_pinned",
    "pin",
    "split_turns",
    "strip_thoughts",
]

PINNED = "evolver_pinned"
THINK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)


def pin(message: BaseMessage) -> BaseMessage:
    """Mark ``message`` so that no template drops, compresses or edits it."""
    message.additional_kwargs[PINNED] = True
    return message


def is_pinned(message: BaseMessage) -> bool:
    return bool(message.additional_kwargs.get(PINNED))


def strip_thoughts(text: str) -> str:
    """``text`` without its ``<think>…</think>`` blocks."""
    return THINK.sub("", text) if "<think>" in text else text


def split_turns(messages: Sequence[BaseMessage]) -> tuple[list[BaseMessage], list[list[BaseMessage]]]:
    """(the head: system messages and the task, up to the first AI message; the turns after it).

    A turn is one AI message and what followed it before the next AI message (tool results, a
    feedback message). Pinned messages anywhere stay in the head.
    """
    head: list[BaseMessage] = []
    turns: list[list[BaseMessage]] = []
    for m in messages:
        if isinstance(m, AIMessage):
            turns.append([m])
        elif is_pinned(m) or not turns:
            head.append(m)
        else:
            turns[-1].append(m)
    return head, turns


@dataclass(frozen=True, slots=True)
class CausalTemplate:
    """The whole history, unchanged (consecutive prompts extend each other: rows merge)."""

    name = "causal"

    def __call__(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        return list(messages)


causal_template = CausalTemplate()


@dataclass(frozen=True, slots=True)
class ReasoningTemplate:
    """Think before each action; earlier thoughts are dropped from later prompts.

    The system message gets ``hint`` (a system message is added when there is none). Earlier AI
    messages lose their ``<think>`` blocks and any ``reasoning_content`` the endpoint returned, so
    each call is its own training row, trained on its thought and its action.
    """

    hint: str = DEFAULT_THINK_HINT
    name = "reasoning"

    def __call__(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        out: list[BaseMessage] = []
        hinted = False
        for m in messages:
            if isinstance(m, SystemMessage) and not hinted and not is_pinned(m):
                text = m.content if isinstance(m.content, str) else m.text
                m = m.model_copy(update={"content": f"{text}\n{self.hint}" if text else self.hint})
                hinted = True
            elif isinstance(m, AIMessage):
                m = _without_thoughts(m)
            out.append(m)
        if not hinted:
            out.insert(0, SystemMessage(self.hint))
        return out


def _without_thoughts(m: AIMessage) -> AIMessage:
    text = m.content if isinstance(m.content, str) else m.text
    kwargs = m.additional_kwargs
    if "<think>" not in text and "reasoning_content" not in kwargs:
        return m
    kwargs = {k: v for k, v in kwargs.items() if k != "reasoning_content"}
    return m.model_copy(update={"content": strip_thoughts(text), "additional_kwargs": kwargs})


@dataclass(frozen=True, slots=True)
class SlidingWindowTemplate:
    """The system message, the task and the last ``window`` turns; one placeholder for the rest."""

    window: int = 2
    name = "sliding"

    def __post_init__(self) -> None:
        if self.window < 1:
            from ..errors import ConfigError

            raise ConfigError(f"sliding window must keep at least 1 turn, got window={self.window}")

    def __call__(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        head, turns = split_turns(messages)
        if len(turns) <= self.window:
            return list(messages)
        left_out = len(turns) - self.window
        placeholder = HumanMessage(PLACEHOLDER.format(n=left_out, s="" if left_out == 1 else "s"))
        return [*head, placeholder, *(m for turn in turns[-self.window :] for m in turn)]

"""Scripted chat models for tests and framework-overhead benchmarks (never a feature's "done").

``ReferencePolicy`` replays each task's reference solution: it finds the task by the user
message, counts the assistant turns so far, and answers with the next reference call, then the
expected answer. It answers instantly, so timing a rollout with it measures the framework.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from .types import Task

__all__ = ["ReferencePolicy", "ScriptedChatModel"]


class ReferencePolicy(BaseChatModel):
    """Answers every task with its reference solution, one call per turn, then its answer.

    The task is the running rollout's (``current_rollout()``), else the one whose query is the first user
    message. The answer is ``task.metadata["answer"]`` (``"Done."`` when it is empty), else, for a task
    with no ``answer`` key, the last tool result. ``trainers.evaluate
    --reference_policy`` plays it through a user's own graph to check the plumbing: on a correct setup every
    task scores 1.0 and every call is captured with its observation.
    """

    tasks_by_query: dict[str, Any]

    def __init__(self, tasks: Iterable[Task] = (), **kwargs: Any) -> None:
        by_query: dict[str, Task] = {}
        for task in tasks:
            by_query.setdefault(task.query, task)
        super().__init__(tasks_by_query=by_query, **kwargs)

    @property
    def _llm_type(self) -> str:
        return "reference-policy"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ReferencePolicy:
        return self

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        from .environment_tools import current_rollout

        rollout = current_rollout()
        if rollout is not None:
            task: Task = rollout.task
        else:
            query = next(m.text for m in messages if isinstance(m, HumanMessage))
            task = self.tasks_by_query[query]
        turn = sum(isinstance(m, AIMessage) for m in messages)
        ref = task.reference_solution or ()
        if turn < len(ref):
            call = ref[turn]
            args = call.arguments if isinstance(call.arguments, dict) else {}
            return AIMessage("", tool_calls=[{"name": call.name, "args": dict(args), "id": f"call_{turn}"}])
        if "answer" in task.metadata:  # the sandbox's tasks: None for a write task
            answer = task.metadata["answer"] or "Done."
        else:  # a task that says nothing of its answer: the last result read is the best guess
            results = [m for m in messages if isinstance(m, ToolMessage)]
            answer = results[-1].text if results else "Done."
        return AIMessage(str(answer))

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return self._generate(messages)


class ScriptedChatModel(BaseChatModel):
    """Returns the given messages in order, cycling; for parsing and graph-logic tests."""

    script: list[AIMessage]
    counter: Any = None

    def __init__(self, script: Sequence[AIMessage], **kwargs: Any) -> None:
        super().__init__(script=list(script), counter=itertools.count(), **kwargs)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        msg = self.script[next(self.counter) % len(self.script)]
        return ChatResult(generations=[ChatGeneration(message=msg.model_copy())])

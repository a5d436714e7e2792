"""The live rollout and the environment's tools: what a graph sees of the rollout it runs in.

``Rollout`` is the state of one rollout (task, environment instance, tools, policy, recorder,
context template, experience block), reachable from inside the run through ``current_rollout()``
(how ``EvolverMiddleware`` finds the policy and the tools). ``environment_tools`` turns the OpenAI
function schemas an environment offers into LangChain tools that execute in that rollout's
environment instance, so state is fresh per rollout.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool, ToolException

from ._current import CURRENT
from .capture import TrajectoryRecorder
from .context import ContextTemplate
from .environment import Environment
from .errors import ConfigError
from .types import Action, Observation, StepResult, Task, ToolCall

if TYPE_CHECKING:  # experience.navigate reads the rollout (current_block), so only for the annotation
    from .experience.navigate import ExperienceBlock

__all__ = ["EnvironmentTool", "Rollout", "current_rollout", "environment_tools"]


def current_rollout() -> Rollout | None:
    """The rollout running in this context (inside ``arun_episode``), else ``None``."""
    return CURRENT.get()


@dataclass(slots=True)
class Rollout:
    """The live state of one rollout, visible to the graph's code through ``current_rollout()``."""

    task: Task
    env: Environment
    observation: Observation
    tools: list[BaseTool]
    policy: BaseChatModel | None
    recorder: TrajectoryRecorder
    context_template: ContextTemplate | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    context_stats: list[dict[str, Any]] = field(default_factory=list)
    """Context-management steps made by ``EvolverMiddleware`` in this rollout."""
    experience: ExperienceBlock | None = None
    """The block this rollout is guided by (self-navigating: ``aguide``), injected into every policy prompt."""
    sample: int = 0
    """This rollout's index among its task's samples (``arun_rollouts(n=k)``: 0..k-1; a lone episode: 0)."""
    policy_requests: int = 0
    """Requests a ``PolicyChatModel`` has sent in this rollout so far: the turn of its paired seed
    (``PolicyChatModel.sample_seed``)."""

    def tool(self, name: str) -> BaseTool | None:
        return next((t for t in self.tools if t.name == name), None)


# -- the environment's tools ---------------------------------------------------------------------
class EnvironmentTool(BaseTool):
    """A LangChain tool that executes one call in the environment of the rollout it runs in.

    The environment is ``rollout``'s when set, else ``current_rollout()``'s at call time, so one set
    of tools serves every rollout (they are cached per tool list). Error observations (unknown
    arguments, a failing tool, ...) come back as a ``ToolMessage`` with ``status="error"`` and the
    environment's text, so the agent sees exactly what the environment says. Calls of one rollout
    run one at a time (they may depend on each other).
    """

    args_schema: dict[str, Any]  # type: ignore[assignment]
    rollout: Any = None
    handle_tool_error: bool = True

    def _target(self) -> Rollout:
        rollout = self.rollout or current_rollout()
        if rollout is None:
            raise ConfigError(f"Tool {self.name!r} acts on a rollout's environment, and none is running: call it "
                              "inside arun_episode / run_rollouts, or give it rollout=.")  # fmt: skip
        return rollout

    def _action(self, kwargs: dict[str, Any]) -> Action:
        return Action(tool_calls=(ToolCall(name=self.name, arguments=kwargs, id="call"),))

    @staticmethod
    def _content(result: StepResult) -> str:
        if not result.observations:
            return ""
        obs = result.observations[0]
        if obs.is_error:
            raise ToolException(obs.content)
        return obs.content

    def _run(self, run_manager: Any = None, **kwargs: Any) -> str:
        return self._content(self._target().env.step(self._action(kwargs)))

    async def _arun(self, run_manager: Any = None, **kwargs: Any) -> str:
        rollout = self._target()
        async with rollout.lock:
            result = await rollout.env.astep(self._action(kwargs))
        return self._content(result)


_SHARED_TOOLS: dict[str, list[BaseTool]] = {}


def environment_tools(rollout: Rollout | None, schemas: Sequence[dict[str, Any]]) -> list[BaseTool]:
    """One ``EnvironmentTool`` per OpenAI function schema the environment offered on reset.

    ``rollout=None`` gives tools that act on whichever rollout calls them (shared and cached per
    tool list: building pydantic tools per rollout would cost more than the rest of a step).
    ``convert_to_openai_tool`` of each gives back the environment's schema unchanged, so a model
    sees the same tool list whether it is bound to these tools or to the raw schemas.
    """
    key = json.dumps(schemas, sort_keys=True, default=str) if rollout is None else ""
    if key and key in _SHARED_TOOLS:
        return _SHARED_TOOLS[key]
    tools: list[BaseTool] = []
    for schema in schemas:
        fn = schema.get("function", schema)
        parameters = fn.get("parameters") or {"type": "object", "properties": {}}
        tools.append(EnvironmentTool(name=fn["name"], description=fn.get("description") or "", rollout=rollout,
                                     args_schema=parameters))  # fmt: skip
    if key:
        if len(_SHARED_TOOLS) >= 1024:  # bounded: environments that vary their tools per task
            _SHARED_TOOLS.pop(next(iter(_SHARED_TOOLS)))
        _SHARED_TOOLS[key] = tools
    return tools

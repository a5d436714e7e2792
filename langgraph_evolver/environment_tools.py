"""The environment's tools: what a graph sees of the rollout it runs in.

``environment_tools`` turns the OpenAI function schemas an environment offers into LangChain tools
that execute in the running rollout's environment instance, so state is fresh per rollout. ``Rollout``
and ``current_rollout()`` live in ``rollout.py`` and are re-exported here (their public path).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.tools import BaseTool, ToolException

from .errors import ConfigError
from .rollout import Rollout, current_rollout
from .types import Action, StepResult, ToolCall

__all__ = ["EnvironmentTool", "Rollout", "current_rollout", "environment_tools"]


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

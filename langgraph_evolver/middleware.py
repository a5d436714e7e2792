"""``EvolverMiddleware``: make a ``create_agent`` agent trainable with one added line.

    agent = create_agent(model, tools, middleware=[EvolverMiddleware()])

Outside a rollout it does nothing (production traffic is untouched). Inside one (the rollout
runner, ``trainers.grpo --agent``, ``trainers.evaluate --agent``) it:

- routes every model call to the policy being trained (``request.model`` → the rollout's
  policy chat model; ``create_agent`` binds the agent's tools to it as usual), and applies the
  rollout's context template to the messages (``managing``: a context-management step in
  ``before_model`` when the prompt passes its trigger, edits written to the agent's state);
- routes every tool call to the rollout's own environment instance when it has a tool of that
  name, so an agent whose tools close over module-level state still gets fresh, independent
  state per rollout; other tools run as the agent defines them. This is also what trains an agent
  whose tools come from an MCP server (``MultiServerMCPClient``) on that server as an environment
  (``--env mcp:...``): its calls go to the rollout's own MCP session, where the checker reads the
  writes, not to the sessions its own client would open. The routed tool gets the model's arguments
  only: ``ToolNode`` injects what the agent's own tool declares (``runtime``, state, store) into
  whichever tool runs, and the environment's tools take none of those (it would reject them as
  unknown arguments).

The calls themselves are recorded by the rollout's ``TrajectoryRecorder`` (LangChain callbacks),
not here, so the middleware adds nothing per call but two lookups.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import SystemMessage
from langchain_core.tools import BaseTool

from .rollout import current_rollout

__all__ = ["EvolverMiddleware"]


class EvolverMiddleware(AgentMiddleware):
    """Route a ``create_agent`` agent's model and tools to the current rollout (see the module docstring).

    Args:
        route_tools: Send tool calls to the rollout's environment when it has a tool of that name.
    """

    def __init__(self, *, route_tools: bool = True) -> None:
        super().__init__()
        self.route_tools = route_tools

    @staticmethod
    def _model_request(request: Any) -> Any:
        rollout = current_rollout()
        if rollout is None:
            return request
        overrides: dict[str, Any] = {}
        if rollout.policy is not None and request.model is not rollout.policy:
            overrides["model"] = rollout.policy
        if rollout.context_template is not None:
            overrides["messages"] = rollout.context_template(request.messages)
        if rollout.message_transforms:  # the hooks' (self-navigating: the block joins the agent's system prompt)
            overrides["system_message"] = _transformed_system(request.system_message, rollout)
        return request.override(**overrides) if overrides else request

    def _tool_request(self, request: Any) -> Any:
        rollout = current_rollout()
        if rollout is None or not self.route_tools:
            return request
        tool = rollout.tool(request.tool_call["name"])
        if tool is None:
            return request
        return request.override(tool=_ModelArgumentsOnly(target=tool, arguments=frozenset(request.tool_call["args"])))

    @staticmethod
    def _managing() -> tuple[Any, Any] | None:
        from .context import SelfManagingTemplate

        rollout = current_rollout()
        if rollout is None or not isinstance(rollout.context_template, SelfManagingTemplate):
            return None
        return rollout, rollout.context_template

    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """The ``managing`` template's context-management step (nothing otherwise)."""
        from .context import amanage_context

        found = self._managing()
        if found is None:
            return None
        rollout, template = found
        edit = await amanage_context(state["messages"], template.resolve_manager(rollout.policy), template)
        if edit is None:
            return None
        rollout.context_stats.append(edit.stats())
        return {"messages": edit.updates} if edit.updates else None

    def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Sync twin (``agent.invoke``): a no-op outside a managing rollout, so production agents are untouched."""
        if self._managing() is None:
            return None
        from ._llm import run_sync

        return run_sync(self.abefore_model(state, runtime))

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(self._model_request(request))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return await handler(self._model_request(request))

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return handler(self._tool_request(request))

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return await handler(self._tool_request(request))


class _ModelArgumentsOnly(BaseTool):
    """``target`` run with the arguments the model wrote, less those ``ToolNode`` injected for the agent's own tool.

    Everything else (callbacks, the ``ToolMessage``, error handling) is the target's: this only filters the call.
    """

    target: BaseTool
    arguments: frozenset[str]
    """The argument names of the model's call."""
    name: str = ""
    description: str = ""

    def model_post_init(self, context: Any) -> None:
        self.name, self.description = self.target.name, self.target.description

    def _filtered(self, value: Any) -> Any:
        if isinstance(value, dict) and value.get("type") == "tool_call" and isinstance(value.get("args"), dict):
            return {**value, "args": {k: v for k, v in value["args"].items() if k in self.arguments}}
        return value

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        return self.target.invoke(self._filtered(input), config, **kwargs)

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        return await self.target.ainvoke(self._filtered(input), config, **kwargs)

    def _run(self, *args: Any, **kwargs: Any) -> Any:  # never reached: ``invoke`` hands the call to the target
        raise NotImplementedError


def _transformed_system(system_message: SystemMessage | None, rollout: Any) -> SystemMessage | None:
    """An agent's system prompt through the rollout's prompt transforms (its first system message after them)."""
    out = rollout.transform([system_message] if system_message is not None else [])
    return next((m for m in out if isinstance(m, SystemMessage)), system_message)

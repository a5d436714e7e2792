"""How to run someone's agent: ``AgentSpec`` and ``as_agent``.

An agent is a factory ``build(model, tools) -> compiled graph`` (most agents have one, or it is
one line around their code), or an already compiled graph that routes its model with
``EvolverMiddleware`` (``create_agent``) or binds its own tools. ``to_input(task)`` or
``to_input(task, observation)`` builds the graph's input (default
``{"messages": [("user", task.query)]}``); ``reward(task, final_state, trajectory)`` replaces the
environment's score when given. ``as_agent`` accepts any of these, or a dotted path to one.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool

from .errors import ConfigError
from .loading import load_object
from .types import Observation, Task, Trajectory

__all__ = ["AgentSpec", "as_agent", "default_input", "default_next_input"]


# -- the agent -----------------------------------------------------------------------------------
def default_input(task: Task) -> dict[str, Any]:
    """``{"messages": [("user", task.query)]}``: the input of ``create_agent`` and most chat agents."""
    return {"messages": [("user", task.query)]}


def default_next_input(state: Any, messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The graph's final state's ``messages`` plus the environment's next user turn (multi-turn environments)."""
    history = state.get("messages") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise ConfigError(
            "A multi-turn environment sent the next user message, but the graph's final state has no 'messages' "
            "list to continue: give AgentSpec(next_input=(state, messages) -> input)."
        )
    return {"messages": [*history, *({"role": m.get("role", "user"), "content": m.get("content") or ""}
                                     for m in messages)]}  # fmt: skip


@functools.lru_cache(maxsize=256)
def _arity(fn: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 2
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSpec:
    """How to run someone's agent on a task.

    Args:
        build: ``build(model, tools) -> compiled graph``: called per rollout with the policy
            chat model and this rollout's environment tools.
        graph: Or an already compiled graph (``create_agent(..., middleware=[EvolverMiddleware()])``,
            or one built with the policy model and taking its tools from ``current_rollout()``).
        to_input: ``(task)`` or ``(task, observation) -> graph input``.
        reward: ``(task, final_state, trajectory) -> float`` (or an async function, e.g. the
            self-questioning ``ReferenceAwareJudge.areward``) instead of the environment's ``evaluate()``.
        name: Shown in traces and reports.
        applies_context: See the attribute.
        next_input: ``(final_state, messages) -> graph input`` for a multi-turn environment's next user turn.
    """

    build: Callable[[BaseChatModel, list[BaseTool]], Any] | None = None
    graph: Any = None
    to_input: Callable[..., dict[str, Any]] = default_input
    reward: Callable[[Task, Any, Trajectory], Any] | None = None
    name: str = "agent"
    next_input: Callable[[Any, Sequence[dict[str, Any]]], Any] = default_next_input
    applies_context: bool = False
    """The graph applies its context template itself (our agent); else the runner hands the factory a
    policy model that applies it (stateless templates) and ``EvolverMiddleware`` applies it for ``create_agent``."""

    def __post_init__(self) -> None:
        if (self.build is None) == (self.graph is None):
            raise ConfigError(
                "AgentSpec takes exactly one of build=(model, tools) -> graph, or graph=<compiled graph>."
            )

    def graph_for(self, policy: BaseChatModel | None, tools: list[BaseTool]) -> Any:
        if self.graph is not None:
            return self.graph
        assert self.build is not None
        graph = self.build(policy, tools) if policy is not None else self.build(None, tools)  # type: ignore[arg-type]
        if not hasattr(graph, "ainvoke"):
            raise ConfigError(f"The agent factory {_name(self.build)} returned {type(graph).__name__}, not a "
                              "compiled graph; return builder.compile() or create_agent(...).")  # fmt: skip
        return graph

    def input_for(self, task: Task, observation: Observation) -> Any:
        return self.to_input(task, observation) if _arity(self.to_input) >= 2 else self.to_input(task)


def _name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', type(obj).__name__)}"


def as_agent(
    agent: Any,
    *,
    to_input: Callable[..., dict[str, Any]] | str | None = None,
    reward: Callable[[Task, Any, Trajectory], float] | str | None = None,
) -> AgentSpec:
    """An ``AgentSpec`` from a spec, a compiled graph, a ``build(model, tools)`` factory or a dotted path."""
    if isinstance(agent, str):
        agent = load_object(agent, what="--agent")
    if isinstance(to_input, str):
        to_input = load_object(to_input, what="--agent_input")
    if isinstance(reward, str):
        reward = load_object(reward, what="--reward")
    extra: dict[str, Any] = {}
    if to_input is not None:
        extra["to_input"] = to_input
    if reward is not None:
        extra["reward"] = reward
    if isinstance(agent, AgentSpec):
        return AgentSpec(**{**{f: getattr(agent, f) for f in AgentSpec.__dataclass_fields__}, **extra})
    if hasattr(agent, "ainvoke") and hasattr(agent, "get_graph"):
        return AgentSpec(graph=agent, name=getattr(agent, "name", None) or "agent", **extra)
    if callable(agent):
        return AgentSpec(build=agent, name=getattr(agent, "__name__", "agent"), **extra)
    raise ConfigError(f"An agent is a compiled graph, a build(model, tools) factory or an AgentSpec; got "
                      f"{type(agent).__name__}.")  # fmt: skip

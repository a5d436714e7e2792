"""An LLM explorer: any chat model (or the policy) explores the tools in two phases, as a graph.

    START → explore_breadth ⇄ tools → explore_depth ⇄ tools → END

The breadth phase makes ``n_breadth`` calls at a high temperature, each prompt naming the tools
not tried yet; the depth phase makes ``n_depth`` calls at a lower temperature, each prompt
showing the most recent observations and asking for a call that acts on what they returned (the
published split: 3/17 on AppWorld, 3/27 on BFCL). Each prompt holds the exploration goal and
only the last ``recent`` exchanges, so a long exploration never outgrows the context. A reply
without a tool call gets a nudge and counts against the budget, so a model that will not call
tools cannot loop forever.

``aexplore_with_model`` runs the graph like a rollout (``episode.arun_episode``): the environment
is reset with the exploration task, the tools act on it, and the exploring model's calls are
recorded as steps (with token ids and logprobs when the model is a ``PolicyChatModel``), node
``explore_breadth`` / ``explore_depth`` telling the phase. The result feeds ``synthesize`` or
``LLMSynthesizer`` exactly like the schema-driven explorer's trajectories.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph

from langgraph_evolver._llm import model_id
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.types import Task, Trajectory

from ..environment import TaskEnvironmentFactory
from .explore import EXPLORE_QUERY
from .prompts import (
    DEFAULT_BREADTH_PROMPT,
    DEFAULT_DEPTH_PROMPT,
    DEFAULT_EXPLORER_SYSTEM_PROMPT,
    DEFAULT_NUDGE_PROMPT,
)

__all__ = ["EXPLORER_SYSTEM", "aexplore_with_model", "create_explorer_graph", "explorer_agent"]

EXPLORER_SYSTEM = DEFAULT_EXPLORER_SYSTEM_PROMPT
"""The explorer's system prompt (``prompts.DEFAULT_EXPLORER_SYSTEM_PROMPT``; this name is kept for old imports)."""


class ExplorerState(TypedDict, total=False):
    messages: list[AnyMessage]
    calls: int
    """Explorer turns so far (with or without a tool call)."""
    used: list[str]
    """Tool names called so far."""


def _recent_results(messages: Sequence[BaseMessage], limit: int) -> str:
    shown = [m for m in messages if isinstance(m, ToolMessage)][-limit:]
    return "\n".join(f"- {m.name}: {str(m.content)[:300]}" for m in shown) or "(none yet)"


def _window(messages: Sequence[BaseMessage], recent: int) -> list[BaseMessage]:
    """The last ``recent`` exchanges (an AI message and the tool messages answering it), whole."""
    starts = [i for i, m in enumerate(messages) if isinstance(m, AIMessage)]
    cut = starts[-recent] if len(starts) >= recent else (starts[0] if starts else len(messages))
    return list(messages[cut:])


async def _call_tools(tools: dict[str, BaseTool], ai: AIMessage) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for call in ai.tool_calls:
        tool = tools.get(call["name"])
        if tool is None:
            content = f"Error: unknown tool {call['name']!r}; available: {', '.join(sorted(tools))}"
            out.append(ToolMessage(content, tool_call_id=call["id"] or "", name=call["name"], status="error"))
            continue
        try:
            result = await tool.ainvoke(call)
        except Exception as e:  # a tool that raises becomes an error observation, like in a rollout
            result = ToolMessage(f"Error: {type(e).__name__}: {e}", tool_call_id=call["id"] or "", name=call["name"],
                                 status="error")  # fmt: skip
        out.append(result if isinstance(result, ToolMessage) else
                   ToolMessage(str(result), tool_call_id=call["id"] or "", name=call["name"]))  # fmt: skip
    for bad in ai.invalid_tool_calls:
        why = bad.get("error") or "invalid JSON"
        out.append(HumanMessage(f"Your tool call could not be parsed ({why}). {DEFAULT_NUDGE_PROMPT}"))
    return out


def create_explorer_graph(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    *,
    n_breadth: int = 3,
    n_depth: int = 17,
    breadth_temperature: float | None = 1.0,
    depth_temperature: float | None = 0.7,
    recent: int = 3,
    goal: str = EXPLORE_QUERY,
    name: str = "explore",
):
    """Compile the two-phase explorer for ``model`` over ``tools``.

    Args:
        model: any LangChain chat model with tool calling (``PolicyChatModel`` records token ids).
        tools: the tools to explore (in a rollout: the environment's tools).
        n_breadth: breadth-phase turns (high temperature, untried tools named in the prompt).
        n_depth: depth-phase turns (recent observations in the prompt).
        breadth_temperature: sampling temperature of the breadth phase (``None``: the model's own).
        depth_temperature: sampling temperature of the depth phase.
        recent: exchanges kept in each prompt (and results shown in the depth prompt).
        goal: the exploration goal, the first human message.
    """
    if n_breadth < 0 or n_depth < 0 or n_breadth + n_depth < 1:
        raise ConfigError(f"need n_breadth, n_depth >= 0 with at least one turn; got {n_breadth}, {n_depth}.")
    if recent < 1:
        raise ConfigError(f"recent must be >= 1, got {recent}.")
    by_name = {t.name: t for t in tools}

    def bound(temperature: float | None) -> Any:
        try:
            runnable: Any = model.bind_tools(list(tools)) if tools else model
        except NotImplementedError:  # scripted test models
            runnable = model
        return runnable.bind(temperature=temperature) if temperature is not None else runnable

    breadth_model, depth_model = bound(breadth_temperature), bound(depth_temperature)

    async def turn(state: ExplorerState, phase: Literal["breadth", "depth"]) -> dict[str, Any]:
        history = state.get("messages") or []
        used = state.get("used") or []
        if phase == "breadth":
            unused = [n for n in by_name if n not in used] or list(by_name)
            instruction = DEFAULT_BREADTH_PROMPT.format(unused=", ".join(unused))
        else:
            instruction = DEFAULT_DEPTH_PROMPT.format(recent=_recent_results(history, recent))
        prompt = [SystemMessage(DEFAULT_EXPLORER_SYSTEM_PROMPT), HumanMessage(f"{goal}\n\n{instruction}"),
                  *_window(history, recent)]  # fmt: skip
        if history and not isinstance(history[-1], ToolMessage | HumanMessage):
            prompt.append(HumanMessage(DEFAULT_NUDGE_PROMPT))
        ai = await (breadth_model if phase == "breadth" else depth_model).ainvoke(prompt)
        called = [c["name"] for c in getattr(ai, "tool_calls", None) or []]
        return {"messages": [*history, ai], "calls": state.get("calls", 0) + 1, "used": [*used, *called]}

    async def explore_breadth(state: ExplorerState) -> dict[str, Any]:
        return await turn(state, "breadth")

    async def explore_depth(state: ExplorerState) -> dict[str, Any]:
        return await turn(state, "depth")

    async def run_tools(state: ExplorerState) -> dict[str, Any]:
        messages = state.get("messages") or []
        ai = messages[-1]
        if not isinstance(ai, AIMessage) or not (ai.tool_calls or ai.invalid_tool_calls):
            return {}
        return {"messages": [*messages, *await _call_tools(by_name, ai)]}

    def next_turn(state: ExplorerState) -> str:
        calls = state.get("calls", 0)
        if calls >= n_breadth + n_depth:
            return END
        return "explore_breadth" if calls < n_breadth else "explore_depth"

    def after_turn(state: ExplorerState) -> str:
        messages = state.get("messages") or []
        ai = messages[-1] if messages else None
        if isinstance(ai, AIMessage) and (ai.tool_calls or ai.invalid_tool_calls):
            return "tools"
        return next_turn(state)

    builder = StateGraph(ExplorerState)
    builder.add_node("explore_breadth", explore_breadth)
    builder.add_node("explore_depth", explore_depth)
    builder.add_node("tools", run_tools)
    builder.add_conditional_edges(START, next_turn, ["explore_breadth", "explore_depth", END])
    for node in ("explore_breadth", "explore_depth"):
        builder.add_conditional_edges(node, after_turn, ["tools", "explore_breadth", "explore_depth", END])
    builder.add_conditional_edges("tools", next_turn, ["explore_breadth", "explore_depth", END])
    return builder.compile(name=name)


def explorer_agent(*, n_breadth: int = 3, n_depth: int = 17, **options: Any) -> Any:
    """The explorer as a drop-in ``AgentSpec`` (built per rollout with the model and the env's tools)."""
    from langgraph_evolver.agent_spec import AgentSpec

    def build(model: BaseChatModel, tools: list[BaseTool]) -> Any:
        return create_explorer_graph(model, tools, n_breadth=n_breadth, n_depth=n_depth, **options)

    def to_input(task: Task) -> dict[str, Any]:
        return {"messages": [], "calls": 0, "used": []}

    def no_reward(task: Task, state: Any, trajectory: Trajectory) -> float:
        return 0.0

    return AgentSpec(build=build, to_input=to_input, reward=no_reward, name="explorer")


async def aexplore_with_model(
    env_factory: TaskEnvironmentFactory,
    task: Task,
    model: BaseChatModel,
    *,
    n_breadth: int = 3,
    n_depth: int = 17,
    seed: int = 0,
    callbacks: Any = None,
    **options: Any,
) -> Trajectory:
    """Explore ``task``'s world with ``model``; returns the recorded trajectory (never raises).

    Args:
        env_factory: ``env_factory(task) -> Environment``, a fresh instance (reset here).
        task: usually ``exploration_task(seed_task)``.
        model: the exploring chat model; with a ``PolicyChatModel`` its calls carry token ids.
        n_breadth, n_depth: the two phases' turns.
        seed: recorded in the metadata (sampling is the model's).
        callbacks: extra LangChain callbacks (tracing).
        **options: ``create_explorer_graph`` options (temperatures, ``recent``, ``goal``).
    """
    from langgraph_evolver.episode import arun_episode

    agent = explorer_agent(n_breadth=n_breadth, n_depth=n_depth, **options)
    traj = await arun_episode(agent, task, policy=model, env_factory=env_factory, callbacks=callbacks,
                              max_turns=n_breadth + n_depth, recursion_limit=4 * (n_breadth + n_depth) + 10,
                              trajectory_id=f"exploration-{task.id}-{seed}")  # fmt: skip
    metadata = {**traj.metadata, "explorer": f"llm:{model_id(model)}", "seed": seed, "n_breadth": n_breadth,
                "n_depth": n_depth}  # fmt: skip
    return dataclasses.replace(traj, reward=None, metadata=metadata)

"""An agent run on one task, end to end, as a served graph (``langgraph dev``): ``START → run → END``.

Input: ``{"task_id": "sandbox-test-00003"}`` (looked up in the environment named by ``"env"``,
default: every registered environment) or a whole task ``{"task": {"id", "query", "env"}}``.
Output: the trajectory as a dict (steps with token ids, node names and logprobs, the reward,
errors), plus ``reward``, ``finish_reason`` and ``errors`` at the top level. Bad input raises a
``ConfigError`` that says what to send instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from .agent_spec import AgentSpec
from .episode import arun_episode
from .errors import ConfigError
from .types import Task

__all__ = ["EpisodeState", "create_episode_graph"]


class EpisodeState(TypedDict, total=False):
    task: dict[str, Any]
    """A whole task (``Task.to_dict()``); or give ``task_id`` (and optionally ``env``)."""
    task_id: str
    env: str
    trajectory: dict[str, Any]
    reward: float | None
    finish_reason: str
    errors: list[str]


def _task_of(state: EpisodeState, find_task: Callable[[str, str | None], Task]) -> Task:
    if state.get("task"):
        data = state["task"]
        if not isinstance(data, dict) or not data.get("id") or not data.get("query"):
            have = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ConfigError(f"'task' needs at least 'id' and 'query' (and 'env', default 'sandbox'); got {have}.")
        try:
            return Task.from_dict(data)
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"'task' is not a valid task ({type(e).__name__}: {e}).") from e
    if state.get("task_id"):
        return find_task(str(state["task_id"]), state.get("env"))
    raise ConfigError('The agent graph takes {"task_id": "...", "env": "..."} or {"task": {"id", "query", "env"}}.')


def create_episode_graph(
    agent: AgentSpec,
    policy: Any,
    *,
    find_task: Callable[[str, str | None], Task],
    max_turns: int = 10,
    name: str = "agent",
):
    """A one-node graph running ``agent`` on the input task with ``policy``.

    ``find_task(task_id, env)`` looks a ``task_id`` input up (``env``: the environment it names, or
    ``None``); it raises ``ConfigError`` saying what to send when there is no such task.
    """

    async def run(state: EpisodeState, config: RunnableConfig) -> dict[str, Any]:
        task = _task_of(state, find_task)
        traj = await arun_episode(agent, task, policy=policy, max_turns=max_turns, callbacks=config.get("callbacks"))
        data = traj.to_dict()
        return {"task": task.to_dict(), "trajectory": data, "reward": traj.reward,
                "finish_reason": traj.finish_reason, "errors": list(traj.errors)}  # fmt: skip

    builder = StateGraph(EpisodeState)
    builder.add_node("run", run)
    builder.add_edge(START, "run")
    builder.add_edge("run", END)
    return builder.compile(name=name)

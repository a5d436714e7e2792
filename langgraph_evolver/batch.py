"""Run many agent rollouts concurrently; each one is an episode of any LangGraph agent.

``agent`` is whatever ``as_agent`` accepts: a compiled graph (ours from ``graphs/agent.py``, a
``create_agent`` graph with ``EvolverMiddleware``), a ``build(model, tools)`` factory, an
``AgentSpec`` or a dotted path. Every rollout gets a fresh environment instance and its own
``TrajectoryRecorder`` (``episode.arun_episode``), so rollouts never share state and a crashed
rollout leaks nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from .agent_spec import as_agent
from .environment import TaskEnvironmentFactory
from .episode import arun_episode
from .types import Task, Trajectory

__all__ = ["arun_rollout_items", "arun_rollouts", "run_rollouts"]


async def arun_rollout_items(
    agent: Any,
    items: Sequence[tuple[Task, str, int]],
    *,
    policy: Any = None,
    concurrency: int = 64,
    env_factory: TaskEnvironmentFactory | None = None,
    callbacks: list | None = None,
    recursion_limit: int = 100,
    progress: bool | str = False,
    to_input: Any = None,
    reward: Any = None,
    guided: Sequence[bool] | None = None,
    **episode: Any,
) -> list[Trajectory]:
    """Run one rollout per ``(task, group_id, rollout_index)`` item, at most ``concurrency`` at once.

    Args:
        agent: The agent (see the module docstring).
        policy: The chat model handed to a ``build(model, tools)`` factory and routed to by
            ``EvolverMiddleware``; ``None`` for a graph that holds its own model.
        to_input, reward: Override the agent's input builder and reward (``AgentSpec``).
        guided: Per item, whether the rollout is guided by retrieved experience (with
            ``navigator=``, self-navigating).
        episode: Passed to ``arun_episode`` (``max_turns``, ``context_template``,
            ``require_policy``, ``train_tool_llm_calls``).

    Returns the trajectories in item order. ``progress`` shows a bar (a string names it).
    """
    spec = as_agent(agent, to_input=to_input, reward=reward)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(items), desc=progress if isinstance(progress, str) else "rollouts", unit="run",
                   leave=False)  # fmt: skip
    results: list[Trajectory | None] = [None] * len(items)
    pending = iter(enumerate(items))

    async def worker() -> None:
        # ``concurrency`` workers pulling from one iterator, rather than one task per item behind a
        # semaphore: Python 3.11's Semaphore.locked() walks every waiter, quadratic in the items.
        for i, (task, group_id, index) in pending:
            results[i] = await arun_episode(spec, task, policy=policy, env_factory=env_factory, group_id=group_id,
                                            rollout_index=index, callbacks=callbacks,
                                            recursion_limit=recursion_limit,
                                            guided=bool(guided[i]) if guided is not None else False,
                                            **episode)  # fmt: skip
            if bar is not None:
                bar.update(1)

    try:
        await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(items))))))
    finally:
        if bar is not None:
            bar.close()
    return [t for t in results if t is not None]


async def arun_rollouts(
    agent: Any,
    tasks: Sequence[Task],
    *,
    n: int = 1,
    group_prefix: str = "",
    **kwargs: Any,
) -> list[Trajectory]:
    """Run ``n`` rollouts of every task with ``agent`` (keywords as ``arun_rollout_items``).

    Returns trajectories in task order, then rollout order. Rollouts of one task share the
    group id ``f"{group_prefix}{task.id}"`` and are its samples 0..n-1 (``rollout_index``, and
    ``Rollout.sample`` during the run: what ``PolicyChatModel(sample_seed=...)`` seeds each sample by).
    """
    items = [(t, f"{group_prefix}{t.id}", i) for t in tasks for i in range(n)]
    return await arun_rollout_items(agent, items, **kwargs)


def run_rollouts(agent: Any, tasks: Sequence[Task], **kwargs: Any) -> list[Trajectory]:
    """Synchronous twin of ``arun_rollouts`` (runs its own event loop)."""
    return asyncio.run(arun_rollouts(agent, tasks, **kwargs))

"""Run many agent rollouts concurrently and turn their final states into ``Trajectory`` objects.

The agent graph (``graphs/agent.py``) keeps its environment instance out of the graph state
(state must stay JSON-serializable for ``langgraph dev`` and checkpointers): the instance lives
in a process-local table keyed by a handle stored in the state. ``arun_rollouts`` hands each
rollout a fresh handle and releases it whatever happens, so a crashed rollout leaks nothing.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from .tracing import trace_metadata
from .types import Step, Task, Trajectory

__all__ = [
    "arun_rollouts",
    "live_environment",
    "register_live_environment",
    "release_live_environment",
    "run_rollouts",
    "trajectory_from_state",
]

_LIVE: dict[str, Any] = {}


def register_live_environment(handle: str, env: Any) -> None:
    _LIVE[handle] = env


def live_environment(handle: str) -> Any | None:
    return _LIVE.get(handle)


async def release_live_environment(handle: str) -> None:
    """Close and forget the environment behind ``handle`` (idempotent, never raises)."""
    env = _LIVE.pop(handle, None)
    if env is None:
        return
    try:
        await env.aclose()
    except Exception:  # closing must not mask the rollout's own outcome
        pass


def trajectory_from_state(
    state: dict[str, Any],
    task: Task,
    *,
    trajectory_id: str,
    group_id: str = "",
    rollout_index: int = 0,
    **metadata: Any,
) -> Trajectory:
    """Build the ``Trajectory`` of one finished run of the agent graph."""
    return Trajectory(
        id=trajectory_id,
        task=task,
        steps=tuple(Step.from_dict(s) for s in state.get("steps") or []),
        reward=state.get("reward"),
        finish_reason=state.get("finish_reason") or "error",
        group_id=group_id,
        rollout_index=rollout_index,
        errors=tuple(state.get("errors") or ()),
        metadata={"turns": state.get("turn", 0), **metadata},
    )


async def _one_rollout(
    graph: Any,
    task: Task,
    index: int,
    *,
    group_id: str,
    env_factory: Callable[[Task], Any] | None,
    callbacks: list | None,
    recursion_limit: int,
) -> Trajectory:
    handle = uuid.uuid4().hex
    trajectory_id = f"{group_id}/{index}/{handle[:8]}"
    config: dict[str, Any] = {
        "configurable": {"env_factory": env_factory},
        "callbacks": callbacks or [],
        "metadata": trace_metadata(task.id, group_id, index, trajectory_id=trajectory_id),
        "run_name": f"rollout {task.id} #{index}",
        "recursion_limit": recursion_limit,
    }
    started = time.perf_counter()
    try:
        state = await graph.ainvoke({"task": task.to_dict(), "env_handle": handle}, config)
    except Exception as e:  # the rollout never raises: record and move on
        state = {"errors": [f"rollout crashed: {type(e).__name__}: {e}"], "finish_reason": "error"}
    finally:
        await release_live_environment(handle)
    latency = round(time.perf_counter() - started, 4)
    return trajectory_from_state(
        state, task, trajectory_id=trajectory_id, group_id=group_id, rollout_index=index, latency_s=latency
    )


async def arun_rollout_items(
    graph: Any,
    items: Sequence[tuple[Task, str, int]],
    *,
    concurrency: int = 64,
    env_factory: Callable[[Task], Any] | None = None,
    callbacks: list | None = None,
    recursion_limit: int = 100,
    progress: bool | str = False,
) -> list[Trajectory]:
    """Run one rollout per ``(task, group_id, rollout_index)`` item, at most ``concurrency`` at once.

    Returns the trajectories in item order. ``progress`` shows a bar (a string names it).
    """
    semaphore = asyncio.Semaphore(concurrency)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(items), desc=progress if isinstance(progress, str) else "rollouts", unit="run",
                   leave=False)  # fmt: skip

    async def run(task: Task, group_id: str, index: int) -> Trajectory:
        async with semaphore:
            traj = await _one_rollout(graph, task, index, group_id=group_id, env_factory=env_factory,
                                      callbacks=callbacks, recursion_limit=recursion_limit)  # fmt: skip
        if bar is not None:
            bar.update(1)
        return traj

    try:
        return list(await asyncio.gather(*(run(t, g, i) for t, g, i in items)))
    finally:
        if bar is not None:
            bar.close()


async def arun_rollouts(
    graph: Any,
    tasks: Sequence[Task],
    *,
    n: int = 1,
    group_prefix: str = "",
    **kwargs: Any,
) -> list[Trajectory]:
    """Run ``n`` rollouts of every task through ``graph`` (keywords as ``arun_rollout_items``).

    Returns trajectories in task order, then rollout order. Rollouts of one task share the
    group id ``f"{group_prefix}{task.id}"``.
    """
    items = [(t, f"{group_prefix}{t.id}", i) for t in tasks for i in range(n)]
    return await arun_rollout_items(graph, items, **kwargs)


def run_rollouts(graph: Any, tasks: Sequence[Task], **kwargs: Any) -> list[Trajectory]:
    """Synchronous twin of ``arun_rollouts`` (runs its own event loop)."""
    return asyncio.run(arun_rollouts(graph, tasks, **kwargs))

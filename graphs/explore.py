"""Self-questioning as a served graph: explore one world, write tasks, keep the verified ones.

    START → explore → synthesize → filter → END

Input: ``{"env": "sandbox"}`` plus optionally ``"seed_task_id"`` (explore that task's world),
``"seed"``, ``"n_breadth"``, ``"n_depth"``. Output: the exploration ``trajectory``, the
``candidates`` written from it, the ``tasks`` kept by the filters (invalid reference,
near-duplicate of a seed/held-out task, infeasible reference) and the ``filters`` report.

The module-level ``graph`` (served by ``langgraph dev`` as ``explore``) explores with
``EVOLVER_EXPLORER``: ``schema`` (default, offline: valid random calls from the tool schemas) or
``policy`` (the LLM explorer graph driving the policy endpoint of ``EVOLVER_POLICY_BASE_URL``,
its calls recorded with token ids), and writes tasks with ``EVOLVER_SYNTHESIZER``: ``offline``
(default) or a chat-model string such as ``openai:gpt-4.1-mini``.
"""

from __future__ import annotations

import asyncio
import functools
import os
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from langgraph_evolver.environment import load_environment
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.loading import import_modules
from langgraph_evolver.questioning import (
    DuplicateIndex,
    LLMSynthesizer,
    aexplore,
    aexplore_with_model,
    exploration_task,
    filter_tasks,
    synthesize,
)
from langgraph_evolver.types import Task, Trajectory

__all__ = ["create_explore_graph", "graph"]


class ExploreState(TypedDict, total=False):
    env: str
    seed_task_id: str
    seed: int
    n_breadth: int
    n_depth: int
    trajectory: dict[str, Any]
    candidates: list[dict[str, Any]]
    tasks: list[dict[str, Any]]
    filters: dict[str, Any]


@functools.lru_cache(maxsize=16)
def _task_lists(env_name: str) -> tuple[tuple[Task, ...], tuple[Task, ...]]:
    """An environment's training and held-out tasks, loaded once per process (explore and filter both need them)."""
    instance = load_environment(env_name)
    try:
        return tuple(instance.list_tasks("train")), tuple(instance.list_tasks("test"))
    finally:
        instance.close()


def _world(env_name: str, seed_task_id: str | None) -> tuple[Task | None, list[Task], list[Task]]:
    seeds, held = (list(tasks) for tasks in _task_lists(env_name))
    if not seed_task_id:
        return (seeds[0] if seeds else None), seeds, held
    for task in [*seeds, *held]:
        if task.id == seed_task_id:
            return task, seeds, held
    raise ConfigError(f"No task {seed_task_id!r} in environment {env_name!r}; leave seed_task_id out to explore "
                      "its first training task's world.")  # fmt: skip


def create_explore_graph(
    explorer: Any = None,
    synthesizer: Any = None,
    *,
    embeddings: Any = None,
    threshold: float = 0.9,
    name: str = "explore",
):
    """Compile the questioning graph.

    Args:
        explorer: ``None`` (schema-driven, offline) or a chat model (the LLM explorer graph).
        synthesizer: ``None`` (offline synthesizer), an ``LLMSynthesizer`` or a chat model.
        embeddings: LangChain ``Embeddings`` for the duplicate filter (default offline MiniLM).
        threshold: cosine at which a candidate is a near-duplicate.
    """
    writer = synthesizer if synthesizer is None or isinstance(synthesizer, LLMSynthesizer) else (
        LLMSynthesizer(synthesizer)
    )  # fmt: skip

    async def explore(state: ExploreState) -> dict[str, Any]:
        env_name = state.get("env") or "sandbox"
        world, _, _ = await asyncio.to_thread(_world, env_name, state.get("seed_task_id"))
        seed = int(state.get("seed", 0))
        n_breadth, n_depth = int(state.get("n_breadth", 3)), int(state.get("n_depth", 17))
        task = exploration_task(world, env=env_name, seed=seed)
        if explorer is None:
            env = await asyncio.to_thread(load_environment, env_name)
            try:
                traj = await aexplore(env, task, n_breadth=n_breadth, n_depth=n_depth, seed=seed)
            finally:
                env.close()
        else:
            traj = await aexplore_with_model(lambda t: load_environment(t.env), task, explorer, n_breadth=n_breadth,
                                             n_depth=n_depth, seed=seed)  # fmt: skip
        return {"trajectory": traj.to_dict()}

    async def write_tasks(state: ExploreState) -> dict[str, Any]:
        traj = Trajectory.from_dict(state["trajectory"])
        if writer is not None:
            tasks = await writer.asynthesize(traj)
        else:
            tasks = synthesize(traj, seed=int(state.get("seed", 0)), max_tasks=20)
        return {"candidates": [t.to_dict() for t in tasks]}

    def verify(state: ExploreState) -> dict[str, Any]:  # blocking (embeddings, replays): run in a thread
        env_name = state.get("env") or "sandbox"
        _, seeds, held = _world(env_name, None)
        index = DuplicateIndex(embeddings, threshold=threshold)
        index.add([t.query for t in seeds], "seed")
        index.add([t.query for t in held], "held-out")
        candidates = [Task.from_dict(t) for t in state.get("candidates") or []]
        kept, report = filter_tasks(candidates, env_factory=lambda t: load_environment(t.env), index=index)
        return {"tasks": [t.to_dict() for t in kept], "filters": report.to_dict()}

    async def keep_verified(state: ExploreState) -> dict[str, Any]:
        return await asyncio.to_thread(verify, state)

    builder = StateGraph(ExploreState)
    builder.add_node("explore", explore)
    builder.add_node("synthesize", write_tasks)
    builder.add_node("filter", keep_verified)
    builder.add_edge(START, "explore")
    builder.add_edge("explore", "synthesize")
    builder.add_edge("synthesize", "filter")
    builder.add_edge("filter", END)
    return builder.compile(name=name)


def _served_graph():  # what `langgraph dev` serves as `explore`
    import_modules(os.environ.get("EVOLVER_ENV_MODULES", ""))
    explorer: Any = None
    if os.environ.get("EVOLVER_EXPLORER", "schema") == "policy":
        from langgraph_evolver.chat_model import PolicyChatModel

        explorer = PolicyChatModel(
            base_url=os.environ.get("EVOLVER_POLICY_BASE_URL", "http://127.0.0.1:8000/v1"),
            model=os.environ.get("EVOLVER_POLICY_MODEL", "tiny-policy"),
            max_tokens=int(os.environ.get("EVOLVER_POLICY_MAX_TOKENS", "128")),
        )
    synthesizer: Any = None
    spec = os.environ.get("EVOLVER_SYNTHESIZER", "offline")
    if spec != "offline":
        from langchain.chat_models import init_chat_model

        synthesizer = init_chat_model(spec)
    return create_explore_graph(explorer, synthesizer)


graph = _served_graph()

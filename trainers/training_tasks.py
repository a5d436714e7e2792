"""The tasks a GRPO run trains and evaluates on, and the rollouts of its held-out evaluations.

Library half of ``trainers.grpo`` (the command): the evolve loop (``trainers.evolve``) and the benchmarks read
tasks, build the training dataset and run evaluation rollouts exactly as a training run does, from here.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import zlib
from pathlib import Path
from typing import Any

from langgraph_evolver.errors import ConfigError
from langgraph_evolver.types import Task

__all__ = ["evaluate_held_out", "evaluation_rollouts", "load_tasks", "mix_synthetic", "mixing_epochs",
           "rollout_environment_factory", "task_dataset"]  # fmt: skip


def task_dataset(tasks: list[Task], level_weights: dict[int, float] | None = None) -> Any:
    """A ``datasets.Dataset`` with one row per task (repeated by level weight)."""
    from datasets import Dataset

    rows = []
    for task in tasks:
        level = task.metadata.get("level")
        weight = (level_weights or {}).get(level, 1.0) if level_weights else 1.0
        # fractional weights keep a deterministic share of the level's tasks (same on every rank)
        copies = int(weight) + (1 if zlib.crc32(task.id.encode()) % 1000 < (weight % 1) * 1000 else 0)
        rows += [{"prompt": task.query, "task": json.dumps(task.to_dict())}] * copies
    if not rows:
        raise ConfigError("No training tasks left after level_weights; give at least one level a weight > 0.")
    return Dataset.from_list(rows)


def mix_synthetic(seed_tasks: list[Task], synthetic: list[Task], ratio: float, seed: int = 0,
                  epochs: int = 1) -> list[Task]:  # fmt: skip
    """Seed and synthetic tasks with ``ratio`` of them synthetic (1.0: synthetic only), for ``epochs`` epochs.

    Each epoch holds every seed task once and its own deterministic sample of synthetic tasks
    (re-sampled per epoch: a large store is covered over the epochs instead of one fixed subset);
    the epochs are concatenated. Synthetic tasks keep their own ids, so GRPO never groups them
    with their seeds.
    """
    import random

    if not synthetic or ratio <= 0.0:
        return list(seed_tasks) * epochs
    if ratio >= 1.0 or not seed_tasks:
        return list(synthetic) * epochs
    want = round(len(seed_tasks) * ratio / (1.0 - ratio))
    out: list[Task] = []
    for epoch in range(epochs):
        rng = random.Random(seed if epoch == 0 else f"{seed}/{epoch}")
        # every synthetic task once per full pass, the rest a sample without replacement (never a task
        # drawn twice while another is left out)
        full, rest = divmod(want, len(synthetic))
        picked = [t for _ in range(full) for t in rng.sample(synthetic, len(synthetic))] + rng.sample(synthetic, rest)
        out += [*seed_tasks, *picked]
    return out


def mixing_epochs(cfg: Any, tasks_per_epoch: int, world_size: int = 1) -> int:
    """How many epochs of tasks a run goes through (``max_steps`` or ``num_train_epochs``), at least 1."""
    if cfg.max_steps and cfg.max_steps > 0:
        rows = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * world_size
        prompts_per_step = max(1, rows // max(1, cfg.num_generations))
        return max(1, min(1000, math.ceil(cfg.max_steps * prompts_per_step / max(1, tasks_per_epoch))))
    return max(1, math.ceil(cfg.num_train_epochs))


def load_tasks(cfg: Any, *requests: tuple[str, int | None]) -> list[list[Task]]:
    """For each ``(split, limit)``: the first ``limit`` tasks of that split, from one environment instance."""
    from langgraph_evolver.environment import check_task_environments, load_environment

    env = load_environment(cfg.env_id, **(cfg.env_args or {}))
    try:
        tasks = [env.list_tasks(split)[:limit] for split, limit in requests]
    finally:
        env.close()
    for part, (split, _) in zip(tasks, requests, strict=True):  # env_id runs every rollout: another env is refused
        check_task_environments(part, cfg.env_id, split)
    return tasks


def rollout_environment_factory(cfg: Any) -> Any:
    """Each rollout's environment: the HTTP service at ``env_url``, else the one ``env_id`` (+ ``env_args``)
    names, whatever the tasks' ``env`` label says (``langgraph_evolver.environment.environment_factory``)."""
    if cfg.env_url:
        from env_tools.client import remote_environment_factory

        return remote_environment_factory(cfg.env_url)
    from langgraph_evolver.environment import environment_factory

    return environment_factory(cfg.env_id, **(cfg.env_args or {}))


def evaluation_rollouts(tasks: list[Task], *, base_url: str, model: str, k: int, cfg: Any,
                        seed: int | None = None) -> Any:  # fmt: skip
    """The coroutine of ``k`` rollouts of every task against ``model``, run as training runs them: the config's
    agent, environment, temperature and turn / token limits (``seed``: paired, see ``trainers.evaluate``)."""
    from .evaluate import evaluate_endpoint

    return evaluate_endpoint(tasks, base_url=base_url, model=model, k=k, temperature=cfg.temperature,
                             max_tokens=cfg.max_completion_length, max_turns=cfg.max_turns,
                             concurrency=cfg.rollout_concurrency, env_factory=rollout_environment_factory(cfg),
                             progress=True, agent=cfg.agent_for_rollouts(), seed=seed)  # fmt: skip


def evaluate_held_out(tasks: list[Task], *, base_url: str, model: str, k: int, cfg: Any, out: Path,
              loop: asyncio.AbstractEventLoop, seed: int | None = None) -> dict[str, Any]:  # fmt: skip
    from langgraph_evolver.errors import PolicyEndpointError

    from .evaluate import summarize, task_means, too_many_failures, write_evaluation

    started = time.perf_counter()
    rollouts = evaluation_rollouts(tasks, base_url=base_url, model=model, k=k, cfg=cfg, seed=seed)
    trajectories = loop.run_until_complete(rollouts)
    summary = {"model": model, "tasks": len(tasks), "k": k, "seed": seed, **summarize(trajectories, k),
               "wall_s": round(time.perf_counter() - started, 1),
               "task_avg": {tid: round(v, 4) for tid, v in task_means(trajectories).items()}}  # fmt: skip
    write_evaluation(out, trajectories, summary)
    if (reason := too_many_failures(summary, cfg.max_failed_rollout_share, f"the evaluation of {model}")) is not None:
        raise PolicyEndpointError(f"{reason} (trajectories in {out})")
    return summary

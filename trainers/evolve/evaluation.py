"""Phase (c) of a cycle: one held-out evaluation of a served model, with the loop's paired seeds (and the test
figure of a production version, on seeds of its own).

The agent, environment, turn and token limits are the training config's
(``trainers.training_tasks.evaluation_rollouts``, what its own evaluations run), so a drop-in agent is evaluated
as it is trained. An evaluation already on disk for the same model, split, tasks, k and seed (a loop killed
after it) is read back instead of run again.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

__all__ = ["evaluate_model", "grpo_config"]


def grpo_config(train: dict[str, Any], output_dir: Path) -> Any:
    """An ``EvolverGRPOConfig`` of the training keys (what rollouts of the agent need: agent, env, limits)."""
    from trainers.config import EvolverGRPOConfig

    names = {f.name for f in fields(EvolverGRPOConfig)}
    keys = {k: v for k, v in train.items() if k in names}
    keys.pop("init_adapter", None)  # the evaluation serves adapters; it trains none
    keys.update(output_dir=str(output_dir), report_to=[])
    return EvolverGRPOConfig(**keys)


def evaluate_model(loop: Any, tasks: list[Any], model: str, out: Path, *, tag: str, split: str,
                   seed: int) -> dict[str, Any]:  # fmt: skip
    """k rollouts of every task of ``split`` against ``model`` on the loop's endpoint, sampled with ``seed`` (the
    gate's pair of evaluations shares one; the test figure has its own); ``{"figures", "trajectories"}``."""
    from langgraph_evolver.types import Trajectory, read_jsonl
    from trainers.evaluate import summarize, write_evaluation
    from trainers.training_tasks import evaluation_rollouts

    cfg = loop.cfg
    ident = {"model_tag": tag, "split": split, "tasks": len(tasks), "k": cfg.heldout_k, "seed": seed}
    summary_path = out / "summary.json"
    if summary_path.exists() and (out / "trajectories.jsonl").exists():
        import json

        figures = json.loads(summary_path.read_text())
        if all(figures.get(k) == v for k, v in ident.items()):
            return {"figures": figures, "trajectories": list(read_jsonl(out / "trajectories.jsonl", Trajectory))}
    started = time.perf_counter()
    trajectories = asyncio.run(
        evaluation_rollouts(
            tasks,
            base_url=loop.endpoint.base_url,
            model=model,
            k=cfg.heldout_k,
            cfg=loop.rollout_cfg,
            seed=seed,
        )
    )
    summary = summarize(trajectories, cfg.heldout_k)
    figures = {**ident, "model": model, f"avg@{cfg.heldout_k}": summary["all"][f"avg@{cfg.heldout_k}"],
               **summary, "wall_s": round(time.perf_counter() - started, 1)}  # fmt: skip
    write_evaluation(out, trajectories, figures)
    return {"figures": figures, "trajectories": trajectories}

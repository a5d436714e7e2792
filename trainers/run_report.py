"""What a finished GRPO run reports: ``summary.json``'s figures, the before -> after table and the attribution page."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

__all__ = ["attribution_report", "final_figures", "gain_table"]


def attribution_report(out: Path, figures: dict[str, Any], *, last_steps: int = 10) -> Path:
    """``attribution_report.html``: the saved trajectories of the last steps, steps coloured GOOD/BAD."""
    from langgraph_evolver.attribution.report import write_attribution_report
    from langgraph_evolver.types import Trajectory, read_jsonl

    files = sorted((out / "trajectories").glob("step_*.jsonl"))[-last_steps:]
    trajectories = [Trajectory.from_dict(d) for f in files for d in read_jsonl(f)]
    return write_attribution_report(trajectories, out / "attribution_report.html", metrics=figures,
                                    title=f"Step attribution: {out.name} (last {len(files)} steps)")  # fmt: skip


def gain_table(figures: dict[str, Any], tasks: int, k: int, *, split: str = "test") -> str:
    """Before -> after on the evaluated tasks, for people: overall (with the task-paired SE), per level, success."""
    gain, se = figures["eval_delta_avg"], figures["eval_delta_se"]
    name = "held-out" if split == "test" else f"{split} split"
    lines = [f"{name} ({tasks} tasks x {k}): avg@{k} {figures['eval_before_avg']:.3f} -> "
             f"{figures['eval_after_avg']:.3f} ({gain:+.3f} ± {se:.3f})"]  # fmt: skip
    for key in sorted(key for key in figures if key.startswith("eval_level")):  # [before, after] per level
        b, a = figures[key]
        lines.append(f"  {key.removeprefix('eval_').removesuffix('_avg')}: avg@{k} {b:.3f} -> {a:.3f} ({a - b:+.3f})")
    for key in ("success", "well_formed"):
        b, a = figures[f"eval_before_{key}"], figures[f"eval_after_{key}"]
        lines.append(f"  {key.replace('_', '-')}: {b:.3f} -> {a:.3f} ({a - b:+.3f})")
    if "gain" in (paired := figures.get("eval_paired") or {}):
        lines.append(f"  paired per (task, sample), seed {paired['seed']}: gain {paired['gain']:+.3f}, "
                     f"{round(100 * paired['confidence'])}% lower bound {paired['lower_bound']:+.3f}")  # fmt: skip
    return "\n".join(lines)


def final_figures(out: Path, evals: dict[str, dict[str, Any]], k: int, trainer: Any, started: float) -> dict[str, Any]:
    from .callbacks import step_metrics
    from .evaluate import paired_gain

    figures: dict[str, Any] = {}
    for when in ("before", "after"):
        e = evals.get(when, {}).get("all")
        if e:
            figures[f"eval_{when}_avg"] = e[f"avg@{k}"]
            figures[f"eval_{when}_best"] = e[f"best@{k}"]
            figures[f"eval_{when}_success"] = e["success"]
            figures[f"eval_{when}_well_formed"] = e["well_formed_calls"]
    if "before" in evals and "after" in evals:
        figures["eval_delta_avg"] = round(figures["eval_after_avg"] - figures["eval_before_avg"], 4)
        figures["eval_delta_se"] = paired_gain(evals["before"]["task_avg"], evals["after"]["task_avg"])[1]
        figures["eval_delta_success"] = round(figures["eval_after_success"] - figures["eval_before_success"], 4)
        from .paired import paired_figures  # the gate's paired gain and 90% lower bound, per (task, sample)

        figures["eval_paired"] = paired_figures(out / "eval_before", out / "eval_after")
        for level in sorted(key for key in evals["after"] if key.startswith("level")):
            if level in evals["before"]:
                figures[f"eval_{level}_avg"] = [evals["before"][level][f"avg@{k}"], evals["after"][level][f"avg@{k}"]]
    rows = step_metrics(out / "metrics.jsonl")
    figures.update(
        steps=trainer.state.global_step,
        eval_samples=evals.get("after", evals.get("before", {})).get("all", {}).get("samples", 0),
        train_reward_first=rows[0]["reward"] if rows else None,
        train_reward_last=rows[-1]["reward"] if rows else None,
        zero_variance_share_mean=round(sum(r.get("zero_variance_share", 0) for r in rows) / len(rows), 4)
        if rows
        else None,
        step_s_mean=round(sum(r.get("step_s", 0) for r in rows) / len(rows), 2) if rows else None,
        final_model=trainer.policy.current,
        seed=trainer.args.seed,
        wall_s=round(time.perf_counter() - started, 1),
    )
    (out / "summary.json").write_text(json.dumps(figures, indent=2))
    return figures

"""GRPO steps of ``examples/smollm2_cpu.yaml`` with the old settings and the new defaults, one run after the other.

Part of ``benchmarks.real_model_speed`` (issue 40, item 4). ``old`` is the setting before issue 40: the local
policy server in fp32 and the trainer's forward/backward in fp32 (``--policy_server_dtype float32 --train_dtype
float32 --importance_correction none``); ``new`` is the example config as committed (its dtypes ``auto``: bf16 on
a CPU with amx_bf16/avx512_bf16). Each runs ``trainers.grpo`` for ``steps`` steps in a subprocess, without the
before/after evaluations or checkpoints, and the figures come from its ``metrics.jsonl``: ``step_s`` (the whole
step), ``rollout/time_s`` (the rollouts) and the rest, ``training`` (the forward/backward passes, the optimizer,
publishing the adapter, bookkeeping), and ``policy/logp_gap_mean`` (trainer vs endpoint logprobs per sampled
token on the step's rollouts).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIG = "examples/smollm2_cpu.yaml"
VARIANTS = {
    "old": ["--policy_server_dtype", "float32", "--train_dtype", "float32", "--importance_correction", "none"],
    "new": [],
}


def run_steps(name: str, out: Path, steps: int, timeout_s: float = 1800) -> dict[str, Any]:
    """``steps`` GRPO steps of ``CONFIG`` under variant ``name``; its per-step seconds and logprob gap."""
    run_dir = out / f"grpo_{name}"
    cmd = [sys.executable, "-m", "trainers.grpo", "--config", CONFIG, "--max_steps", str(steps),
           "--output_dir", str(run_dir), "--eval_before", "false", "--eval_after", "false",
           "--save_strategy", "no", "--report_to", "none", *VARIANTS[name]]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    log = out / f"grpo_{name}.log"
    with log.open("w") as f:
        done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout_s)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the {name} GRPO run failed (exit {done.returncode}); the end of {log}:\n{tail}")
    return {**step_figures(run_dir / "metrics.jsonl"), "settings": " ".join(VARIANTS[name]) or "the config's defaults"}


def step_figures(metrics: Path) -> dict[str, Any]:
    """A run's per-step seconds (whole, rollouts, the rest) and mean logprob gap, from its ``metrics.jsonl``."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "rollout/time_s" in r]  # the step rows (TRL's final summary has no rollouts)
    if not rows:
        raise RuntimeError(f"{metrics} has no step rows (no rollout/time_s): the run logged no step.")
    step_s = [r["step_s"] for r in rows]
    rollout_s = [r["rollout/time_s"] for r in rows]
    gaps = [r["policy/logp_gap_mean"] for r in rows if r.get("policy/logp_gap_mean") is not None]
    return {
        "step_s": [round(s, 1) for s in step_s],
        "rollout_s": [round(s, 1) for s in rollout_s],
        "training_s": [round(s - r, 1) for s, r in zip(step_s, rollout_s, strict=True)],
        "step_s_mean": round(statistics.fmean(step_s), 1),
        "logp_gap_mean": float(f"{statistics.fmean(gaps):.3g}") if gaps else None,  # fp32 gaps are ~1e-6
    }


def grpo_steps(out: Path, steps: int = 2) -> dict[str, Any]:
    """Both variants, old first; ``grpo_step_speedup`` is old over new mean step seconds."""
    figures = {name: run_steps(name, out, steps) for name in ("old", "new")}
    old, new = figures["old"], figures["new"]
    return {
        "grpo_steps": steps,
        "grpo_old": old,
        "grpo_new": new,
        "grpo_step_speedup": round(old["step_s_mean"] / new["step_s_mean"], 2),
        "logp_gap_mean": new["logp_gap_mean"],
        "logp_gap_mean_old": old["logp_gap_mean"],
    }

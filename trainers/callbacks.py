"""Training callbacks and plots: ``metrics.jsonl``, a progress bar with reward and step time,
stopping at a step's end on request (SIGTERM / Ctrl-C), and ``reward_curve.png``.

A run resumed from ``checkpoint-N`` redoes the steps after N that a killed run had begun or logged:
``drop_steps_after`` rewrites ``metrics.jsonl`` without them (atomically) and removes their saved
trajectories, so every step is logged and counted once.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from langgraph_evolver.types import read_jsonl

__all__ = ["MetricsCallback", "StopOnRequest", "drop_steps_after", "plot_reward_curve", "step_metrics"]


class MetricsCallback(TrainerCallback):
    """Appends every log to ``metrics.jsonl`` and shows a bar: reward, zero-variance share, step time."""

    def __init__(self, path: str | Path, *, show_progress: bool = True) -> None:
        self.path = Path(path)
        self.show_progress = show_progress
        self.bar: Any = None
        self._step_started = time.perf_counter()
        self.last_step_s = 0.0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero and self.show_progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=state.max_steps, initial=state.global_step, desc="GRPO", unit="step", dynamic_ncols=True
            )
        self._step_started = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        self.last_step_s, self._step_started = now - self._step_started, now
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        record = {"step": state.global_step, "step_s": round(self.last_step_s, 3), **logs}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()  # one whole line per step on disk before the checkpoint of that step is written
        if self.bar is not None and "reward" in logs:
            self.bar.set_postfix(reward=f"{logs['reward']:.3f}", zero_var=f"{logs.get('zero_variance_share', 0):.2f}",
                                 step_s=f"{self.last_step_s:.1f}")  # fmt: skip

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class StopOnRequest(TrainerCallback):
    """End training after the current optimizer step, with a checkpoint of it, once ``requested()`` is true.

    ``trainers.grpo`` sets the request from its SIGTERM / SIGINT handler. Every rank stops at the same step: with
    several processes the ranks' requests are gathered at each step's end (a signal may reach one rank only).
    ``active`` is true from the first step to the end of training: the handler lets a step end only then.
    """

    def __init__(self, requested: Any) -> None:
        self.requested = requested
        self.active = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.active = True

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        stop = bool(self.requested())
        if args.world_size > 1:
            from accelerate.utils import gather_object

            stop = any(gather_object([stop]))
        if stop:
            control.should_save = True  # the step just finished is kept whatever save_steps says
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.active = False


def drop_steps_after(output_dir: str | Path, step: int) -> tuple[int, int]:
    """Forget the steps after ``step`` in ``output_dir``: a resumed run redoes them from ``checkpoint-{step}``.

    Rewrites ``metrics.jsonl`` without its rows of later steps (and a line a kill cut short), through a
    temporary file and ``os.replace``, so a crash here leaves the old file or the new one, never half of one;
    removes ``trajectories/step_NNNNN.jsonl`` of the steps begun after it (a file is named by the optimizer
    steps done when its rollouts ran: ``step_{step:05d}`` is the first redone). Returns (rows, files) dropped.
    """
    out = Path(output_dir)
    metrics, dropped_rows = out / "metrics.jsonl", 0
    if metrics.exists():
        kept: list[str] = []
        for line in metrics.read_text().splitlines():
            try:
                row_step = json.loads(line)["step"]
            except (ValueError, KeyError, TypeError):
                row_step = None  # a line cut short by a kill
            if row_step is not None and row_step <= step:
                kept.append(line)
            else:
                dropped_rows += 1
        if dropped_rows:
            tmp = metrics.with_name(metrics.name + ".tmp")
            tmp.write_text("".join(line + "\n" for line in kept))
            os.replace(tmp, metrics)
    dropped_files = 0
    for path in sorted((out / "trajectories").glob("step_*.jsonl")):
        index = path.stem.removeprefix("step_")
        if index.isdigit() and int(index) >= step:
            path.unlink()
            dropped_files += 1
    return dropped_rows, dropped_files


def step_metrics(metrics_path: str | Path) -> list[dict[str, Any]]:
    """The per-step rows of a run's ``metrics.jsonl``, in order (those with a reward; TRL's other logs are skipped)."""
    return [r for r in read_jsonl(metrics_path) if "reward" in r] if Path(metrics_path).exists() else []


def plot_reward_curve(metrics_path: str | Path, out_path: str | Path, *, eval_before: float | None = None,
                      eval_after: float | None = None, k: int = 4) -> Path | None:  # fmt: skip
    """Training reward (and its moving average), zero-variance share and well-formed calls per step."""
    rows = step_metrics(metrics_path)
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    reward = [r["reward"] for r in rows]
    window = max(1, len(reward) // 8)
    smooth = [sum(reward[max(0, i - window + 1) : i + 1]) / len(reward[max(0, i - window + 1) : i + 1])
              for i in range(len(reward))]  # fmt: skip
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True, height_ratios=[2, 1])
    ax1.plot(steps, reward, "o-", alpha=0.35, color="tab:blue", label="train reward (batch mean)")
    ax1.plot(steps, smooth, "-", lw=2.2, color="tab:blue", label=f"moving average ({window})")
    for value, label, color in ((eval_before, "before", "tab:gray"), (eval_after, "after", "tab:green")):
        if value is not None:
            ax1.axhline(value, ls="--", color=color, label=f"held-out avg@{k} {label}: {value:.3f}")
    ax1.set_ylabel("reward")
    ax1.grid(alpha=0.3)
    ax1.legend(loc="lower right", fontsize=8)
    ax2.plot(
        steps, [r.get("zero_variance_share", 0) for r in rows], "s-", color="tab:red", label="zero-variance groups"
    )
    ax2.plot(steps, [r.get("rollout/well_formed_calls", 0) for r in rows], "^-", color="tab:purple",
             label="well-formed calls")  # fmt: skip
    ax2.set_ylim(0, 1.05)
    ax2.set_xlabel("optimizer step")
    ax2.grid(alpha=0.3)
    ax2.legend(loc="lower right", fontsize=8)
    fig.suptitle("GRPO on LangGraph rollouts")
    fig.tight_layout()
    out = Path(out_path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out

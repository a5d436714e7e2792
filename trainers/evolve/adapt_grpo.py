"""The GRPO phase of ``trainers.evolve adapt``: ``trainers.grpo`` from the supervised adapter on the rl part.

A child process, as the evolve loop trains (``train.py``): its config is written beside it, it checkpoints
every step, and a rerun after a kill resumes from the newest complete checkpoint. The time left before the gate
(``Run.budget_s``) ends it with SIGTERM, which ``trainers.grpo`` answers by finishing the step, saving its
checkpoint and stopping. The SIGTERM comes as a step begins that is the last to fit (``last_step``: the step
after it would end past the deadline), so the phase ends by its budget rather than a step or two after it. The
deadline moves as the policy's episodes lengthen (``episode_growth``): the gate plays the GRPO adapter, whose
time ``Run.gate_s`` predicts at the supervised adapter's episode seconds. The
adapter is then ``final/`` when it ran all its steps, else that newest checkpoint. With less than
``MIN_GRPO_S`` left the phase does not start (``adapter`` None: the gate weighs the supervised adapter alone),
or keeps the checkpoint an earlier run left.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from langgraph_evolver.errors import EvolverError

__all__ = ["GRPO_SERVER_THREADS", "MIN_GRPO_S", "episode_growth", "grpo_phase", "last_step", "newest_adapter"]

MIN_GRPO_S = 180.0
"""Less GRPO time than this (a child's start and two steps on 2 cores) and the phase does not start."""
GRPO_SERVER_THREADS = 2
"""Torch threads of GRPO's own CPU policy server. The evaluations keep 1 (``endpoint.SERVER_THREADS``: fewer
seeded episodes diverge there); GRPO's rollouts need no repeat, and the trainer waits while they run:
SmolLM2 rollouts ran 1.26x as fast on 2 threads as on 1 (``python -m benchmarks.serving --variants
new,new_2_threads --threads 1 --model <merged smollm2-warm-doc> --tasks 4 --k 4 --rounds 2``, session 66; the
same 16 rollouts 14.0 s -> 11.9 s), and shipping run 3's first GRPO steps spent 96-131 s of 167-176 in them."""


def newest_adapter(train_dir: Path) -> tuple[Path, int | None] | None:
    """``final/`` (all steps run), else the newest complete ``checkpoint-N``, with its step; None if neither."""
    from trainers.run_control import checkpoint_step

    if (train_dir / "final" / "adapter_config.json").exists():
        return train_dir / "final", None  # every step ran (its checkpoints may be pruned)
    found = [(s, p) for p in train_dir.glob("checkpoint-*")
             if (s := checkpoint_step(p)) is not None and (p / "adapter_config.json").exists()]  # fmt: skip
    if not found:
        return None
    step, path = max(found)
    return path, step


def last_step(started: float, ends: list[float], deadline: float) -> bool:
    """Whether the step running now, begun at the last of ``ends`` (``started`` before the first), is the last that
    fits before ``deadline``: the step after it would end past it, at the slowest step time seen (the first counts
    the child's start, so it is the estimate only until a second step ends).

    Example:
        >>> last_step(0.0, [100.0, 160.0, 220.0], deadline=330.0), last_step(0.0, [100.0, 160.0], deadline=330.0)
        (True, False)
        >>> last_step(0.0, [], deadline=330.0)  # no step ended yet: nothing to go by
        False
    """
    if not ends:
        return False
    times = [b - a for a, b in zip([started, *ends], ends, strict=False)]
    step = max(times[1:]) if len(times) > 1 else times[0]
    return ends[-1] + 2 * step > deadline


def episode_growth(turns: list[float], first: int = 3, last: int = 5) -> float:
    """How much longer the policy's episodes run now than when GRPO began: the mean turns of its ``last`` logged
    steps over those of its ``first`` (``rollout/turns_mean``), 1.0 until ``first + 1`` steps are logged,
    within [0.5, 3.0]. The first steps play the supervised adapter, whose episode seconds ``Run.gate_s`` prices
    the gate at; library run 14's episodes went from 3.1 turns to 4.7 as GRPO learned the multi-call tasks, and
    its gate took 386 s of 245 predicted (``adapt_s`` 3,650 of 3,600).

    Example:
        >>> episode_growth([3.0, 2.9, 3.4, 2.6, 3.6, 4.2]), episode_growth([3.0, 3.0, 3.0])
        (1.077, 1.0)
    """
    turns = [t for t in turns if t > 0]
    if len(turns) <= first:
        return 1.0
    ratio = (sum(turns[-last:]) / len(turns[-last:])) / (sum(turns[:first]) / first)
    return round(min(3.0, max(0.5, ratio)), 3)


def _turns_logged(train_dir: Path) -> list[float]:
    """Each logged step's ``rollout/turns_mean`` (``metrics.jsonl``; a line without it is skipped)."""
    import json

    try:
        lines = (train_dir / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return []
    turns = []
    for line in lines:
        try:
            value = json.loads(line).get("rollout/turns_mean")
        except (ValueError, AttributeError):
            continue
        if isinstance(value, int | float):
            turns.append(float(value))
    return turns


def _steps_logged(train_dir: Path) -> int:
    """Steps the child has finished (one ``metrics.jsonl`` line each): the parent's progress bar."""
    try:
        return sum(1 for line in (train_dir / "metrics.jsonl").read_text().splitlines() if line.strip())
    except OSError:
        return 0


def _store(rl_tasks: Path, out: Path) -> Path:
    """The rl part as a ``TaskStore`` (what ``trainers.grpo``'s ``task_store`` reads), each task once in each of
    its wordings (``phrasings.PHRASINGS_KEY``; id ``<id>~w<i>``), so GRPO's draws ask in all of them: an adapter
    trained on one wording a task learned that wording (library run 13: validation's one-call requests 0.91,
    the hand-written ones 0.38)."""
    import dataclasses

    from langgraph_evolver.questioning import TaskStore
    from langgraph_evolver.questioning.phrasings import phrased, wordings
    from langgraph_evolver.types import Task, read_jsonl

    if not out.exists():
        tasks = list(read_jsonl(rl_tasks, Task))
        worded = [dataclasses.replace(phrased(t, i), id=f"{t.id}~w{i}") for t in tasks
                  for i in range(1, len(wordings(t)))]  # fmt: skip
        with TaskStore(out) as store:
            store.add_many_counted([*tasks, *worded])
    return out


def grpo_phase(run: Any, d: Path, lora: dict[str, Any]) -> dict[str, Any]:
    """Train; returns ``{"adapter", "grpo_steps", ...}``. Resumes from ``d/train``'s checkpoints."""
    import yaml
    from tqdm import tqdm

    from trainers.evolve.train import _die_with_parent

    a = run.args
    train_dir = d / "train"
    budget = run.budget_s("grpo")
    if budget < MIN_GRPO_S:
        found = newest_adapter(train_dir)
        why = (f"{max(budget, 0.0) / 60:.1f} min left of --minutes {a.minutes:g} once the gate's predicted time is "
               f"set aside (under {MIN_GRPO_S / 60:.0f}): raise --minutes for GRPO")  # fmt: skip
        print(f"adapt: grpo: skipped, {why}", file=sys.stderr)
        return {**(_trained(found, a.grpo_steps) if found else {"adapter": None, "grpo_steps": 0}), "skipped": why}
    init = run.dir("supervise") / "adapter"
    rl = run.dir("split") / "rl.jsonl"
    store = _store(rl, d / "rl.sqlite")
    tasks = sum(1 for line in rl.read_text().splitlines() if line.strip())
    batch = min(a.batch_size, max(tasks, 1) * a.num_generations)  # one step's tasks at most the rl part's
    if batch < a.batch_size:
        print(f"adapt: grpo: {batch} rollouts a step, not --batch_size {a.batch_size}: the rl part has {tasks} "
              f"task(s) for groups of {a.num_generations}", file=sys.stderr)  # fmt: skip
    config = {**run.train_keys(), **lora, "output_dir": str(train_dir), "max_steps": a.grpo_steps,
              "use_peft": True, "sync_mode": "lora", "init_adapter": str(init), "task_store": str(store),
              "synthetic_ratio": 1.0, "num_generations": a.num_generations,
              "per_device_train_batch_size": batch, "gradient_accumulation_steps": 1,
              "max_tokens_per_microbatch": 2048,  # a 49k-token vocabulary's logits are the memory peak
              "learning_rate": a.grpo_lr, "lr_scheduler_type": "constant", "beta": 0.0, "loss_type": "dapo",
              "eval_before": False, "eval_after": False, "save_strategy": "steps", "save_steps": 1,
              "save_total_limit": 2, "logging_steps": 1, "seed": a.seed, "train_dtype": a.train_dtype,
              "policy_server_threads": min(GRPO_SERVER_THREADS, os.cpu_count() or 1)}  # fmt: skip
    config = {k: v for k, v in config.items() if v is not None}
    path = d / "train_config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    cmd = [sys.executable, "-m", "trainers.grpo", "--config", str(path)]
    resumed = newest_adapter(train_dir) is not None
    if resumed:
        cmd += ["--resume_from_checkpoint", "true"]
    log = d / "train.log"
    print(f"adapt: grpo: up to {a.grpo_steps} steps in {budget / 60:.1f} min{' (resuming)' if resumed else ''} "
          f"(log {log})", file=sys.stderr)  # fmt: skip
    with log.open("a") as handle, tqdm(total=a.grpo_steps, desc="adapt: grpo", unit="step",
                                        disable=a.no_progress) as bar:  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        started = time.monotonic()
        deadline, ends, gate = started + budget, [], run.gate_s()
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
            if (done := _steps_logged(train_dir)) > bar.n:  # a bar redrawn only on a step (a log line per second)
                bar.update(done - bar.n)
                ends.append(time.monotonic())
                deadline = started + budget - gate * (episode_growth(_turns_logged(train_dir)) - 1.0)
                if last_step(started, ends, deadline):
                    break
        if proc.poll() is None:  # out of time, or the step now running is the last to fit: finish it, save, stop
            proc.terminate()
            try:
                proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    found = newest_adapter(train_dir)
    if found is None:
        tail = log.read_text(errors="replace")[-1500:]
        raise EvolverError(f"GRPO ended (code {proc.returncode}) before its first checkpoint: give it more "
                           f"--minutes or a smaller --batch_size (log {log}); its last lines:\n{tail}")  # fmt: skip
    return {**_trained(found, a.grpo_steps), "exit_code": proc.returncode, "resumed": resumed, "log": str(log)}


def _trained(found: tuple[Path, int | None], max_steps: int) -> dict[str, Any]:
    """``newest_adapter``'s answer as the phase reports it: the adapter and its steps (``final/``: all of them)."""
    adapter, step = found
    return {"adapter": str(adapter), "grpo_steps": max_steps if step is None else step}

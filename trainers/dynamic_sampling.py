"""Signal in every step: groups without reward variance are replaced from the GRPO pool before the step.

A group whose rollouts all score the same (all solved, all failed) has zero advantage and trains nothing;
on the first real-model recipe that was 56-66% of the groups (issue 42). With ``dynamic_sampling: true``
(DAPO's dynamic sampling), after a step's rollouts every such group is dropped and a fresh task from the
training pool is rolled out ``num_generations`` times in its place, up to ``max_refill_rounds`` rounds; a
replacement that has variance takes the dropped group's rows, so the step keeps its shape. The draw is an
online difficulty filter: a task whose last group (in the last ``RECHECK_AFTER`` steps) had no variance is
not drawn again until then, and a task already in the step is not drawn twice.

Logged per step: ``informative_share`` (groups with variance after the refill), ``informative_share_drawn``
(before it), ``refill/rounds`` and ``refill/rollouts``; ``informative_share.png`` beside the run at the end.
The filter's memory is saved in each checkpoint (``dynamic_sampling.json``) and read back when a run resumes;
the draws are seeded by (seed, step, round), so a resumed run draws what the uninterrupted one would have.
"""

from __future__ import annotations

import json
import logging
import random
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from langgraph_evolver.types import Task, Trajectory

__all__ = ["STATE_FILE", "DynamicSampler", "DynamicSamplingCallback", "attach", "plot_informative_share"]

logger = logging.getLogger(__name__)

STATE_FILE = "dynamic_sampling.json"
RECHECK_AFTER = 10
"""Steps a task with a zero-variance group is left out of the refill draws (the policy may have moved since)."""
TOL = 1e-9  # as langgraph_evolver.advantages.group_advantages: rewards this close are one value


def informative(rewards: list[float | None]) -> bool:
    """Whether a group's rewards give GRPO a signal: two or more scored, not all equal."""
    scored = [r for r in rewards if r is not None]
    return len(scored) > 1 and max(scored) - min(scored) > TOL


class DynamicSampler:
    """Replaces a step's zero-variance groups with rollouts of fresh pool tasks (see the module docstring).

    Args:
        tasks: The training pool (the dataset's rows: a task repeated by ``level_weights`` is drawn more often).
        max_refill_rounds: Rounds of replacement rollouts per step (0: only measure).
        seed: The run's seed; round r of step s draws with ``Random(f"{seed}:{s}:{r}")``.
        score: A trajectory's reward as the advantages see it (None: left out of its group).
    """

    def __init__(self, tasks: list[Task], *, max_refill_rounds: int, seed: int,
                 score: Callable[[Trajectory], float | None]) -> None:  # fmt: skip
        self.tasks = list(tasks)  # a task repeated by level_weights is drawn as often as the dataset has it
        self.max_refill_rounds = max_refill_rounds
        self.seed = seed
        self.score = score
        self.dead: dict[str, int] = {}
        """Task id -> the last step its group had no variance (the online difficulty filter's memory)."""
        self.restored_from: str | None = None
        self.started = False

    def _groups(self, trajectories: list[Trajectory]) -> dict[str, list[int]]:
        groups: dict[str, list[int]] = {}
        for i, t in enumerate(trajectories):
            groups.setdefault(t.group_id, []).append(i)
        return groups

    def _candidates(self, step: int, exclude: set[str]) -> list[Task]:
        return [t for t in self.tasks if t.id not in exclude and step - self.dead.get(t.id, -RECHECK_AFTER - 1)
                > RECHECK_AFTER]  # fmt: skip

    def refill(self, trajectories: list[Trajectory], run: Callable[[list[tuple[Task, str, int]]], list[Trajectory]],
               step: int) -> tuple[list[Trajectory], dict[str, float]]:  # fmt: skip
        """The step's trajectories with dead groups replaced where a replacement had variance, and the figures."""
        out = list(trajectories)
        groups = self._groups(out)
        alive = {g: informative([self.score(out[i]) for i in idx]) for g, idx in groups.items()}
        for g, idx in groups.items():
            if not alive[g]:
                self.dead[out[idx[0]].task.id] = step
        drawn = sum(alive.values()) / len(alive) if alive else 1.0
        rounds = rollouts = 0
        in_step = {t.task.id for t in out}
        for r in range(1, self.max_refill_rounds + 1):
            dead = [g for g in groups if not alive[g]]
            candidates = self._candidates(step, in_step)
            if not dead or not candidates:
                break
            drawn_tasks = random.Random(f"{self.seed}:{step}:{r}").sample(candidates, len(candidates))
            picks = list({t.id: t for t in drawn_tasks}.values())[: len(dead)]  # distinct tasks, in draw order
            items = [(task, f"step{step}/{task.id}#refill{r}", i)
                     for task, g in zip(picks, dead, strict=False) for i in range(len(groups[g]))]  # fmt: skip
            new = self._groups(fresh := run(items))
            rounds, rollouts = r, rollouts + len(items)
            for task, g in zip(picks, dead, strict=False):
                in_step.add(task.id)
                idx = new.get(f"step{step}/{task.id}#refill{r}", [])
                if informative([self.score(fresh[i]) for i in idx]) and len(idx) == len(groups[g]):
                    for slot, i in zip(groups[g], idx, strict=True):
                        out[slot] = fresh[i]
                    alive[g] = True
                else:
                    self.dead[task.id] = step
        after = sum(alive.values()) / len(alive) if alive else 1.0
        return out, {"informative_share": after, "informative_share_drawn": drawn, "refill/rounds": float(rounds),
                     "refill/rollouts": float(rollouts)}  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {"dead": self.dead, "seed": self.seed}

    def load(self, checkpoint: str | Path) -> bool:
        path = Path(checkpoint) / STATE_FILE
        if not path.is_file():
            return False
        self.dead = {k: int(v) for k, v in json.loads(path.read_text())["dead"].items()}
        self.restored_from = str(checkpoint)
        return True


def plot_informative_share(metrics_path: str | Path, png: str | Path) -> Path | None:
    """``informative_share`` (and before the refill) per step from ``metrics.jsonl``; None without such rows."""
    rows = [json.loads(x) for x in Path(metrics_path).read_text().splitlines() if '"informative_share"' in x]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = [r["step"] for r in rows]
    ax.plot(steps, [r["informative_share_drawn"] for r in rows], marker=".", label="as drawn")
    ax.plot(steps, [r["informative_share"] for r in rows], marker="o", label="after the refill")
    mean = statistics.fmean(r["informative_share"] for r in rows)
    ax.set(xlabel="GRPO step", ylabel="share of groups with reward variance", ylim=(-0.02, 1.02),
           title=f"Informative groups per step (mean {mean:.2f})")  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return Path(png)


class DynamicSamplingCallback(TrainerCallback):
    """Saves the sampler's memory into each checkpoint and draws the plot when training ends."""

    def __init__(self, sampler: DynamicSampler) -> None:
        self.sampler = sampler

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        where = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and where.is_dir():
            (where / STATE_FILE).write_text(json.dumps(self.sampler.state_dict()))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        metrics = Path(args.output_dir) / "metrics.jsonl"
        if state.is_world_process_zero and metrics.is_file():
            plot_informative_share(metrics, Path(args.output_dir) / "informative_share.png")


def attach(trainer: Any, train_dataset: Any) -> DynamicSampler | None:
    """The trainer's sampler (None when ``dynamic_sampling`` is off), its callback added."""
    args = trainer.args
    if not getattr(args, "dynamic_sampling", False):
        return None
    tasks = [Task.from_dict(json.loads(row)) for row in train_dataset["task"]]
    sampler = DynamicSampler(tasks, max_refill_rounds=args.max_refill_rounds, seed=args.seed,
                             score=lambda t: trainer._score(t).reward)  # fmt: skip
    trainer.add_callback(DynamicSamplingCallback(sampler))
    return sampler


def refill_step(trainer: Any, trajectories: list[Trajectory], inputs_per_rank: int, offset: int,
                step: int) -> list[Trajectory]:  # fmt: skip
    """The trainer's hook: refill, log the figures; a group split across ranks cannot be judged on one, so
    such a layout only measures (``max_refill_rounds`` acts as 0)."""
    sampler: DynamicSampler = trainer.dynamic_sampler
    if not sampler.started:  # a run resumed at ``step``: the memory of the checkpoint it resumed from
        sampler.started = True
        if step > 0 and sampler.load(Path(trainer.args.output_dir) / f"checkpoint-{step}"):
            logger.info("dynamic sampling: the memory of %d tasks restored from checkpoint-%d", len(sampler.dead), step)
    g = trainer.num_generations
    whole = inputs_per_rank % g == 0 and offset % g == 0
    rounds, sampler.max_refill_rounds = sampler.max_refill_rounds, sampler.max_refill_rounds if whole else 0
    try:
        out, figures = sampler.refill(trajectories, trainer._run_rollouts, step)
    finally:
        sampler.max_refill_rounds = rounds
    for key, value in figures.items():
        trainer._metrics["train"][key].append(value)
    return out

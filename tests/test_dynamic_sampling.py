"""Dynamic sampling (issue 42, "signal in every step"): zero-variance groups are replaced from the GRPO pool,
the informative share is logged and plotted, and its memory survives a resume; plus the paired evaluation."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from env_tools.sandbox.pools import pool_tasks
from langgraph_evolver.types import Task, Trajectory
from tests.conftest import LORA
from trainers.dynamic_sampling import STATE_FILE, DynamicSampler, informative, plot_informative_share

QUICKSTART = str(Path(__file__).resolve().parent.parent / "examples" / "quickstart.yaml")


def _rollouts(items: list[tuple[Task, str, int]], solves: dict[str, list[float]]) -> list[Trajectory]:
    """A scripted environment: task id -> the reward of each sample index (how the group scores)."""
    return [Trajectory(id=f"{g}/{i}", task=t, group_id=g, rollout_index=i, reward=solves[t.id][i]) for t, g, i in items]


def test_dead_groups_are_replaced_by_pool_tasks_with_variance_and_the_filter_remembers():
    pool = pool_tasks("rl", 12)
    # tasks 0-5 are solved every time (no signal), 6-11 half the time (signal)
    solves = {t.id: [1.0] * 4 if n < 6 else [1.0, 0.0, 1.0, 0.0] for n, t in enumerate(pool)}
    sampler = DynamicSampler(pool[:6] + pool[6:], max_refill_rounds=3, seed=0, score=lambda t: t.reward)
    items = [(t, f"step0/{t.id}#{j}", i) for j, t in enumerate(pool[:2]) for i in range(4)]
    first = _rollouts(items, solves)
    out, figures = sampler.refill(first, lambda its: _rollouts(its, solves), step=0)
    assert figures["informative_share_drawn"] == 0.0 and figures["informative_share"] == 1.0
    assert figures["refill/rollouts"] >= 8 and len(out) == len(first)
    assert {t.task.id for t in out} <= {t.id for t in pool[6:]}  # both groups now hold tasks with a signal
    assert [t.rollout_index for t in out] == [0, 1, 2, 3] * 2
    assert {pool[0].id, pool[1].id} <= set(sampler.dead)  # the dead tasks are not drawn again for a while
    # the same seed and step draw the same replacements (a resumed run draws what the first one would have)
    again = DynamicSampler(pool, max_refill_rounds=3, seed=0, score=lambda t: t.reward)
    assert [t.task.id for t in again.refill(first, lambda its: _rollouts(its, solves), step=0)[0]] == [
        t.task.id for t in out
    ]
    # without refill rounds (the feature off) the dead groups stay and nothing is rolled out
    off = DynamicSampler(pool, max_refill_rounds=0, seed=0, score=lambda t: t.reward)
    kept, figures = off.refill(first, lambda its: pytest.fail("no refill without rounds"), step=0)
    assert kept == first and figures["informative_share"] == 0.0
    assert informative([1.0, None, 0.0]) and not informative([1.0, None]) and not informative([0.5, 0.5])


def test_the_filter_memory_round_trips_through_a_checkpoint(tmp_path):
    sampler = DynamicSampler(pool_tasks("rl", 4), max_refill_rounds=1, seed=3, score=lambda t: t.reward)
    sampler.dead = {"sandbox-train-100000": 7}
    (tmp_path / STATE_FILE).write_text(json.dumps(sampler.state_dict()))
    restored = DynamicSampler(pool_tasks("rl", 4), max_refill_rounds=1, seed=3, score=lambda t: t.reward)
    assert restored.load(tmp_path) and restored.dead == sampler.dead


@pytest.mark.timeout(900)
def test_a_tiny_grpo_run_refills_dead_groups_logs_the_share_and_resumes(tmp_path, capsys, caplog):
    from trainers.grpo import cli

    out = tmp_path / "run"
    flags = ["--config", QUICKSTART, "--output_dir", str(out), *LORA, "--per_device_train_batch_size", "8",
             "--gradient_accumulation_steps", "1", "--num_generations", "4", "--max_turns", "4",
             "--level_weights", "1:1,2:1,3:1", "--task_split", "rl:60", "--eval_split", "test:3", "--eval_k", "2",
             "--save_steps", "1", "--dynamic_sampling", "true", "--max_refill_rounds", "3", "--report_to", "none",
             "--rollout_concurrency", "16"]  # fmt: skip
    figures = cli([*flags, "--max_steps", "2"])
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:  # a step with a dead group as drawn has it rolled out again from the pool
        assert r["informative_share"] >= r["informative_share_drawn"]
        assert (r["refill/rollouts"] > 0) == (r["informative_share_drawn"] < 1), r
    assert any(r["informative_share_drawn"] < 1 for r in rows), "the tiny policy should leave some group dead"
    assert (out / "informative_share.png").stat().st_size > 5_000
    assert json.loads((out / "checkpoint-2" / STATE_FILE).read_text())["seed"] == 0
    # the paired yardstick: common seeds per (task, sample), the gate's bound, in the run's own figures
    paired = figures["eval_paired"]
    assert paired["seed"] == 0 and paired["tasks"] == 3 and paired["pairs"] == 6
    assert paired["lower_bound"] <= paired["gain"] <= paired["upper_bound"]
    assert "paired per (task, sample), seed 0" in capsys.readouterr().err

    with caplog.at_level(logging.INFO, logger="trainers.dynamic_sampling"):
        figures = cli([*flags, "--max_steps", "3", "--resume_from_checkpoint", "true", "--eval_before", "false"])
    assert "restored from checkpoint-2" in caplog.text
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
    assert figures["steps"] == 3 and [r["step"] for r in rows] == [1, 2, 3]
    assert "informative_share" in rows[-1]


def test_plot_needs_rows(tmp_path):
    (tmp_path / "m.jsonl").write_text(json.dumps({"step": 1, "reward": 0.5}) + "\n")
    assert plot_informative_share(tmp_path / "m.jsonl", tmp_path / "x.png") is None

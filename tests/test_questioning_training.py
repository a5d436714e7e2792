"""Synthesized tasks in training: the state-equality reward of a LangChain-tools environment, mixing
seed and synthetic tasks, and one GRPO step on a TaskStore of sandbox tasks (own ids, own groups)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from env_tools.sandbox import seed_tasks
from langgraph_evolver.questioning import TaskStore, synthesize_tasks
from langgraph_evolver.types import Action
from tests.test_experience_pool import HashEmbeddings
from tests.test_questioning import todo, todo_factory
from trainers.grpo import mix_synthetic

ROOT = Path(__file__).resolve().parent.parent


def test_synthetic_tools_tasks_are_scored_by_state_equality_with_their_reference():
    tasks, _ = synthesize_tasks("todo", 6, env_factory=todo_factory, seed_tasks=todo.TASKS, held_out=[],
                                embeddings=HashEmbeddings(), progress=False)  # fmt: skip
    writes = [t for t in tasks if any(c.name != "list_todos" for c in t.reference_solution)]
    assert writes
    for task in writes:
        env = todo_factory(task)
        env.reset(task)
        for call in task.reference_solution:
            env.step(Action(tool_calls=(call,)))
        assert env.evaluate() == 1.0  # the reference itself
        idle = todo_factory(task)
        idle.reset(task)
        assert idle.evaluate() == 0.0  # doing nothing
        partial = todo_factory(task)
        partial.reset(task)
        partial.step(Action(tool_calls=(task.reference_solution[0],)))
        assert partial.evaluate() < 1.0 or len(task.reference_solution) == 1


def test_mixing_keeps_the_ratio_and_the_ids():
    seeds, synthetic = seed_tasks("train")[:20], seed_tasks("test")[:30]
    assert mix_synthetic(seeds, synthetic, 1.0) == synthetic
    assert mix_synthetic(seeds, synthetic, 0.0) == seeds
    half = mix_synthetic(seeds, synthetic, 0.5, seed=1)
    assert len(half) == 40 and half[:20] == seeds and {t.id for t in half[20:]} <= {t.id for t in synthetic}
    assert mix_synthetic(seeds, synthetic, 0.5, seed=1) == half  # deterministic
    more = mix_synthetic(seeds, synthetic[:3], 0.75)  # fewer synthetic than wanted (60 of 3): each 20 times
    assert len(more) == 80 and Counter(t.id for t in more[20:]) == {t.id: 20 for t in synthetic[:3]}
    some = mix_synthetic(seeds, synthetic[:8], 0.5)  # 20 of 8: every task twice or three times, none left out
    assert sorted(Counter(t.id for t in some[20:]).values()) == [2] * 4 + [3] * 4


def test_the_synthetic_share_is_resampled_per_epoch():
    from types import SimpleNamespace

    from trainers.grpo import mixing_epochs

    seeds, synthetic = seed_tasks("train")[:10], seed_tasks("test")[:60]
    mixed = mix_synthetic(seeds, synthetic, 0.5, seed=3, epochs=3)
    epochs = [mixed[i * 20 : (i + 1) * 20] for i in range(3)]
    assert len(mixed) == 60 and all(e[:10] == seeds for e in epochs)  # every seed task once per epoch
    samples = [frozenset(t.id for t in e[10:]) for e in epochs]
    assert len(set(samples)) == 3  # a fresh synthetic sample each epoch
    assert epochs[0] == mix_synthetic(seeds, synthetic, 0.5, seed=3)  # epoch 0 is the one-epoch mix
    assert mix_synthetic(seeds, synthetic, 0.5, seed=3, epochs=3) == mixed  # deterministic
    # the number of epochs a run needs: from max_steps and the batch, or from num_train_epochs
    cfg = SimpleNamespace(max_steps=30, per_device_train_batch_size=8, gradient_accumulation_steps=1,
                          num_generations=4, num_train_epochs=3.0)  # fmt: skip
    assert mixing_epochs(cfg, 20) == 3  # 30 steps x 2 tasks = 60 tasks = 3 epochs of 20
    assert mixing_epochs(SimpleNamespace(**{**vars(cfg), "max_steps": -1}), 20) == 3


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_one_grpo_step_on_synthetic_tasks_only(tmp_path):
    from trainers.grpo import cli

    tasks, _ = synthesize_tasks("sandbox", 8, seed=1, embeddings=HashEmbeddings(), progress=False)
    store_path = tmp_path / "tasks.sqlite"
    with TaskStore(store_path) as store:
        store.add_many(tasks)
    out = tmp_path / "run"
    figures = cli(["--config", str(ROOT / "examples" / "quickstart.yaml"), "--output_dir", str(out),
                   "--max_steps", "1", "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
                   "--num_generations", "4", "--max_turns", "5", "--level_weights", "", "--eval_before", "false",
                   "--eval_after", "false", "--save_strategy", "no", "--report_to", "none",
                   "--task_store", str(store_path), "--synthetic_ratio", "1.0"])  # fmt: skip
    assert figures["steps"] == 1
    trajectories = [json.loads(x) for x in (out / "trajectories" / "step_00000.jsonl").read_text().splitlines()]
    ids = {t["task"]["id"] for t in trajectories}
    assert ids and all(i.startswith("synthetic-") for i in ids) and ids <= {t.id for t in tasks}
    groups: dict[str, set] = {}
    for t in trajectories:  # a group never mixes tasks (the reference implementation merged them by seed id)
        groups.setdefault(t["group_id"], set()).add(t["task"]["id"])
    assert all(len(v) == 1 for v in groups.values())
    assert all(t["reward"] is not None for t in trajectories)

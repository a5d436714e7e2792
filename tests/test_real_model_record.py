"""`python -m benchmarks.real_model record`: one run's paired figures and the recipe's overlap in real_model.json."""

from __future__ import annotations

import json

from env_tools.sandbox.pools import pool_tasks, split_tasks
from langgraph_evolver.types import Trajectory, write_jsonl
from trainers.pools import record_supervised


def _evaluation(path, rewards, seed=0):
    tasks = split_tasks("test:3")
    path.mkdir(parents=True)
    write_jsonl(path / "trajectories.jsonl", [Trajectory(id=f"{t.id}/{i}", task=t, reward=r, rollout_index=i,
                                                         group_id=t.id) for t, rs in zip(tasks, rewards, strict=True)
                                              for i, r in enumerate(rs)])  # fmt: skip
    (path / "summary.json").write_text(json.dumps({"seed": seed}))


def test_record_writes_the_issue_fields_keeps_the_old_figures_and_replaces_a_rerun(tmp_path):
    from benchmarks.real_model import main

    out = tmp_path / "real_model.json"
    out.write_text(json.dumps({"model": "SmolLM2", "grpo": [{"gain": 0.029}]}))
    warm, run = tmp_path / "warm", tmp_path / "run"
    warm.mkdir()
    record_supervised(warm, [*pool_tasks("sft", 50), pool_tasks("rl", 3)[1]], split="sft:50")
    _evaluation(tmp_path / "before", [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    _evaluation(tmp_path / "after", [[1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"steps": 100}))
    (run / "command.txt").write_text("python -m trainers.grpo --config x.yaml\n")
    argv = ["record", "--arm", "grpo", "--seed", "0", "--run", str(run), "--before", str(tmp_path / "before"),
            "--after", str(tmp_path / "after"), "--base", str(warm), "--adapter", "checkpoints/smollm2-grpo-s0",
            "--rl", "sandbox:rl:10", "--out", str(out)]  # fmt: skip
    main(argv)
    main(argv)  # a rerun replaces its entry
    result = json.loads(out.read_text())
    assert result["superseded"]["grpo"] == [{"gain": 0.029}] and "note" in result["superseded"]
    (entry,) = result["runs"]
    need = {"arm", "seed", "steps", "heldout_tasks", "k", "before", "after", "gain", "lower_bound", "command", "base",
            "adapter"}  # fmt: skip
    assert need <= set(entry)
    assert entry["steps"] == 100 and entry["heldout_tasks"] == 3 and entry["k"] == 2 and entry["gain"] == 0.5
    assert entry["command"] == "python -m trainers.grpo --config x.yaml"
    assert result["overlap"]["rl_tasks_supervised"] == 1 and result["overlap"]["heldout_repeating_sft"] == 0

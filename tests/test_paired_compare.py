"""`python -m trainers.paired`: two seeded evaluations paired per (task, sample), judged by the evolve gate's code."""

from __future__ import annotations

import json

from env_tools.sandbox.pools import split_tasks
from langgraph_evolver.types import Trajectory, write_jsonl
from trainers.evolve.gate import decide_paired
from trainers.paired import compare_dirs, main


def _evaluation(path, rewards: dict[str, list[float]], seed: int | None):
    tasks = {t.id: t for t in split_tasks("test:4")}
    trajectories = [Trajectory(id=f"{tid}/{i}", task=tasks[tid], reward=r, rollout_index=i, group_id=tid)
                    for tid, rs in rewards.items() for i, r in enumerate(rs)]  # fmt: skip
    path.mkdir()
    write_jsonl(path / "trajectories.jsonl", trajectories)
    (path / "summary.json").write_text(json.dumps({"seed": seed}))


def test_compare_pairs_per_sample_through_the_gate_and_refuses_other_tasks_or_seeds(tmp_path, capsys):
    ids = [t.id for t in split_tasks("test:4")]
    before = {ids[0]: [0.0, 0.0], ids[1]: [1.0, 0.0], ids[2]: [0.0, 0.0], ids[3]: [1.0, 1.0]}
    after = {ids[0]: [1.0, 0.0], ids[1]: [1.0, 1.0], ids[2]: [1.0, 1.0], ids[3]: [1.0, 1.0]}
    _evaluation(tmp_path / "b", before, 7)
    _evaluation(tmp_path / "a", after, 7)
    figures = compare_dirs(tmp_path / "b", tmp_path / "a")
    gate = decide_paired({(t, i): r for t, rs in after.items() for i, r in enumerate(rs)},
                         {(t, i): r for t, rs in before.items() for i, r in enumerate(rs)}, confidence=0.9)  # fmt: skip
    assert figures["gain"] == round(gate.paired_gain, 4) == 0.5 and figures["lower_bound"] == round(gate.lower_bound, 4)
    assert figures["before"] == 0.375 and figures["after"] == 0.875 and figures["k"] == 2 and figures["pairs"] == 8
    assert main(["--before", str(tmp_path / "b"), "--after", str(tmp_path / "a")]) == 0
    assert json.loads(capsys.readouterr().out)["seed"] == 7

    _evaluation(tmp_path / "other_seed", after, 8)
    assert main(["--before", str(tmp_path / "b"), "--after", str(tmp_path / "other_seed")]) == 2
    assert "not made with one common seed (before 7, after 8)" in capsys.readouterr().err
    _evaluation(tmp_path / "fewer", {ids[0]: [1.0, 0.0]}, 7)
    assert main(["--before", str(tmp_path / "b"), "--after", str(tmp_path / "fewer")]) == 2
    assert "did not evaluate the same (task, sample) pairs: 6 only before" in capsys.readouterr().err

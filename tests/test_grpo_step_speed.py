"""The GRPO-step part of benchmarks.real_model_speed reads step, rollout and training seconds from metrics.jsonl."""

from __future__ import annotations

import json

import pytest

from benchmarks.grpo_step_speed import VARIANTS, step_figures


def test_step_seconds_split_into_rollouts_and_training(tmp_path):
    rows = [
        {"step": 1, "step_s": 80.0, "rollout/time_s": 50.0, "policy/logp_gap_mean": 0.01, "reward": 0.5},
        {"step": 2, "step_s": 60.0, "rollout/time_s": 45.5, "policy/logp_gap_mean": 0.03, "reward": 0.4},
        {"step": 2, "step_s": 0.1, "train_runtime": 140.0},  # TRL's summary at the end: not a step
    ]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    figures = step_figures(metrics)
    assert figures["step_s"] == [80.0, 60.0]
    assert figures["rollout_s"] == [50.0, 45.5]
    assert figures["training_s"] == [30.0, 14.5]
    assert figures["step_s_mean"] == 70.0
    assert figures["logp_gap_mean"] == pytest.approx(0.02)


def test_a_run_without_steps_is_a_clear_error(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"train_runtime": 1.0}) + "\n")
    with pytest.raises(RuntimeError, match="no step rows"):
        step_figures(metrics)


def test_the_old_setting_is_fp32_on_both_sides_without_tis():
    old = VARIANTS["old"]
    assert old[old.index("--policy_server_dtype") + 1] == "float32"
    assert old[old.index("--train_dtype") + 1] == "float32"
    assert old[old.index("--importance_correction") + 1] == "none"


def test_an_fp32_gap_of_1e_6_is_kept_not_rounded_to_zero(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"step": 1, "step_s": 9.0, "rollout/time_s": 5.0, "policy/logp_gap_mean": 8.3e-7}))
    assert step_figures(metrics)["logp_gap_mean"] == pytest.approx(8.3e-7)

"""`python -m trainers.grpo` end to end on the tiny policy: a real server, real rollouts, real TRL
steps, LoRA published after each step, evaluation before/after, outputs, and resuming."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langgraph_evolver.scoring import well_formed_counts
from langgraph_evolver.types import Trajectory, read_jsonl
from tests.conftest import LORA

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")
# level-3 tasks only: the tiny policy solves some of them, so groups have reward variance
SMALL = [*LORA, "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "2", "--num_generations", "4",
         "--max_turns", "5", "--level_weights", "1:0,2:0,3:1", "--eval_limit", "3", "--eval_k", "2",
         "--save_steps", "2", "--report_to", "tensorboard"]  # fmt: skip


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in line]


@pytest.mark.timeout(900)
def test_train_evaluate_and_resume(tmp_path, capsys):
    from trainers.grpo import cli

    out = tmp_path / "run"
    figures = cli(["--config", QUICKSTART, "--output_dir", str(out), "--max_steps", "2", *SMALL])
    captured = capsys.readouterr()
    printed, printed_err = json.loads(captured.out.strip().splitlines()[-1]), captured.err
    assert printed == figures
    for key in ("eval_before_avg", "eval_after_avg", "eval_before_best", "eval_after_best", "steps", "wall_s"):
        assert key in figures, key
    assert figures["steps"] == 2 and figures["eval_samples"] == 6
    # the gain, task-paired: its SE from the per-task before/after means kept in each evaluation's summary
    saved = {w: json.loads((out / f"eval_{w}" / "summary.json").read_text())["task_avg"] for w in ("before", "after")}
    assert len(saved["before"]) == 3 and saved["before"].keys() == saved["after"].keys()
    assert figures["eval_delta_se"] >= 0 and "eval_delta_success" in figures
    assert f"avg@2 {figures['eval_before_avg']:.3f} -> {figures['eval_after_avg']:.3f}" in printed_err
    assert figures["final_model"] == "tiny-policy-lora-step2"

    rows = _metrics(out)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert 0.0 <= r["reward"] <= 1.0 and 0.0 <= r["zero_variance_share"] <= 1.0
        assert r["rollout/failed"] == 0
    # the endpoint served exactly the trainer's weights: at step 2 it samples from the adapter
    # published after step 1, and the trainer recomputes the same logprobs
    assert rows[1]["policy/sync_s"] > 0
    gaps = [r["policy/logp_gap_mean"] for r in rows if "policy/logp_gap_mean" in r]
    assert gaps and max(gaps) < 1e-3, gaps
    assert (out / "reward_curve.png").stat().st_size > 10_000
    assert (out / "final" / "adapter_config.json").exists()
    assert (out / "checkpoint-2" / "trainer_state.json").exists()
    assert any((out / "runs").rglob("events.out.tfevents.*")), "TensorBoard logs"
    assert sorted(p.name for p in (out / "trajectories").iterdir()) == ["step_00000.jsonl", "step_00001.jsonl"]
    # the second step samples from the adapter published after the first: its calls are as well-formed as the
    # base policy's (a server that could not serve adapters answered 500 here and the calls fell to 0)
    second = [Trajectory.from_dict(d) for d in read_jsonl(out / "trajectories" / "step_00001.jsonl")]
    assert {t.steps[0].model for t in second if t.steps} == {"tiny-policy-lora-step1"}
    ok, attempts = well_formed_counts(second)
    assert attempts and ok / attempts > 0.5, (ok, attempts, second[0].errors)
    for when in ("eval_before", "eval_after"):
        assert json.loads((out / when / "summary.json").read_text())["all"]["samples"] == 6
    # the model card: ours, not TRL's placeholder (base model None, a sample question unrelated to the run)
    for card in (out / "README.md", out / "final" / "README.md"):
        text = card.read_text()
        assert "base_model: " in text and "tiny-policy" in text and "[None]" not in text, card
        assert "a LoRA adapter" in text and "`sandbox`" in text and "--max_steps 2" in text
        assert f"| {figures['eval_before_avg']:.3f} |" in text and f"| {figures['eval_after_avg']:.3f} |" in text

    # resume: continues at step 3 from checkpoint-2, publishes the restored adapter first
    figures = cli(["--config", QUICKSTART, "--output_dir", str(out), "--max_steps", "3", *SMALL,
                   "--resume_from_checkpoint", "true", "--eval_before", "false"])  # fmt: skip
    assert figures["steps"] == 3 and "eval_before_avg" not in figures
    rows = _metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1]["policy/logp_gap_mean"] < 1e-3  # served weights = the restored ones
    assert rows[-1]["policy/staleness_mean"] == 0


@pytest.mark.timeout(600)
def test_train_with_attribution_against_a_keyed_policy_server(tmp_path, monkeypatch, capsys):
    """ADCA with the reference judge: labels in the saved trajectories, metrics, the HTML report. With
    $EVOLVER_POLICY_API_KEY set, the server the trainer starts requires it, and every client of the run (endpoint
    check, rollouts, LoRA publishing, evaluation) sends it. One run for both: each is one trained step."""
    from langgraph_evolver.types import Trajectory, read_jsonl
    from trainers.grpo import cli

    monkeypatch.setenv("EVOLVER_POLICY_API_KEY", "sk-test-key-1")
    out = tmp_path / "adca"
    figures = cli(["--config", QUICKSTART, "--output_dir", str(out), "--max_steps", "1", *SMALL,
                   "--eval_before", "false", "--eval_limit", "1", "--eval_k", "1", "--save_strategy", "no",
                   "--attribution", '{"alpha": 0.2, "judge": "reference"}',
                   "--max_tokens_per_microbatch", "400"])  # fmt: skip
    assert figures["steps"] == 1 and figures["final_model"] == "tiny-policy-lora-step1"
    assert "eval_after_avg" in figures  # the evaluation ran against the keyed server too
    row = _metrics(out)[0]
    assert row["rollout/failed"] == 0
    # a token budget: the 2 micro-batches run as sub-batches (as many on every rank), gradients accumulated; 400
    # tokens is one or two rows of this policy, so a step with any trained rows splits (1,500 did not always)
    assert row["samples/forward_passes"] > 2 and row["grad_norm"] > 0
    assert row["adca/alpha"] == pytest.approx(0.2)
    assert row["attribution/fallbacks"] == 0 and row["attribution/latency_s"] >= 0
    assert "attribution/good_share_failed" in row or "attribution/good_share_success" in row
    saved = [Trajectory.from_dict(d) for d in read_jsonl(out / "trajectories" / "step_00000.jsonl")]
    assert saved and all(t.labels is not None and len(t.labels) == len(t.steps) for t in saved)
    html = (out / "attribution_report.html").read_text()
    assert figures["attribution_report"].endswith("attribution_report.html") and "GOOD" in html
    log = (out / "policy_server.log").read_text()
    assert "access: API key required" in log, log[-2000:]  # the server enforced the key the clients sent
    assert "tiny-policy-lora-step1" in log, log[-2000:]


@pytest.mark.timeout(600)
def test_full_fine_tuning_publishes_weights_from_disk(tmp_path, capsys):
    """sync_mode=full on CPU: all weights trained, saved after each step and reloaded by the local policy server
    (/update_weights_from_disk); the endpoint then serves exactly the trainer's weights."""
    from trainers.grpo import cli

    out = tmp_path / "full"
    figures = cli(["--config", QUICKSTART, "--output_dir", str(out), "--max_steps", "2", *SMALL,
                   "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1", "--max_turns", "3",
                   "--use_peft", "false", "--sync_mode", "full", "--learning_rate", "1e-4",
                   "--eval_before", "false", "--eval_after", "false", "--save_strategy", "no"])  # fmt: skip
    assert figures["steps"] == 2 and figures["final_model"] == "tiny-policy"
    rows = _metrics(out)
    assert [r["step"] for r in rows] == [1, 2] and rows[1]["policy/sync_s"] > 0
    # step 2 samples from the weights published after step 1 (same name, new version): the trainer agrees
    assert rows[1]["policy/logp_gap_mean"] < 1e-3, rows[1]
    assert rows[1]["policy/staleness_mean"] == 0  # every call answered by the version of its step
    assert [p.name for p in (out / "served_weights").iterdir()] == ["tiny-policy-step2"]  # keep=1
    assert (out / "final" / "model.safetensors").exists() and not (out / "final" / "adapter_config.json").exists()

"""`accelerate launch` with DeepSpeed ZeRO-2, 2 processes on CPU (gloo): the distributed path of
`trainers.grpo` end to end on the tiny policy (one policy server for both ranks, rollouts split
across ranks, advantages gathered, DeepSpeed optimizer steps, LoRA published and saved)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from langgraph_evolver._serving import free_port
from tests.conftest import LORA

ROOT = Path(__file__).resolve().parent.parent
ACCELERATE_CONFIG = ROOT / "trainers" / "accelerate_configs" / "zero2_cpu_2proc.yaml"
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
NO_DEEPSPEED = importlib.util.find_spec("deepspeed") is None
# left over from in-process training in other tests, they would mislead the launcher or the ranks
_LAUNCH_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _launch(out: Path, *flags: str) -> tuple[str, str]:
    """2-step LoRA GRPO of the quickstart on 2 CPU processes under `accelerate launch`; (stdout, stderr) on success."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ACCELERATE_CONFIG),
           "--main_process_port", str(free_port()),
           "-m", "trainers.grpo", "--config", str(QUICKSTART), *LORA, "--max_steps", "2", "--eval_before", "false",
           "--eval_after", "false", "--output_dir", str(out), "--save_strategy", "no", "--report_to", "none",
           *flags]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_") and k not in _LAUNCH_ENV}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=540)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and both ranks
        stdout, stderr = proc.communicate()
        pytest.fail(f"the 2-process launch did not finish in 540 s:\n{stderr[-4000:]}")
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{stderr[-6000:]}"
    return stdout, stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(NO_DEEPSPEED, reason="deepspeed is not installed (pip install deepspeed); ZeRO-2 needs it")
def test_deepspeed_zero2_two_cpu_processes(tmp_path):
    out = tmp_path / "run"
    stdout, stderr = _launch(out, "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
                             "--num_generations", "4", "--max_turns", "3", "--task_limit", "2")  # fmt: skip

    # both ranks trained under DeepSpeed ZeRO-2 in one world of 2 (trainers.grpo logs it on rank 0)
    assert "training on 2 process(es), DEEPSPEED ZeRO stage 2" in stderr, stderr[-4000:]
    # one policy server, started by the main process only (every rank thinking it is rank 0 of 1
    # would start one each)
    assert stderr.count("starting the policy server") == 1, stderr[-4000:]

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2], rows
    for r in steps:
        assert math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]), r
        assert r["rollout/failed"] == 0, r

    final = json.loads(stdout.strip().splitlines()[-1])
    assert final["steps"] == 2 and final["final_model"] == "tiny-policy-lora-step2", final
    assert json.loads((out / "summary.json").read_text()) == final
    assert (out / "final" / "adapter_config.json").exists()


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(NO_DEEPSPEED, reason="deepspeed is not installed (pip install deepspeed); ZeRO-2 needs it")
def test_token_budget_sub_batches_under_zero2(tmp_path):
    """max_tokens_per_microbatch on 2 ranks: a micro-batch runs as several passes with the gradients accumulated
    (DeepSpeed steps once); every rank runs the same passes with the same row counts (TRL's loss gathers per-row
    metrics: unequal rows were a gloo collective mismatch), and the endpoint then serves the trained weights."""
    out = tmp_path / "run"
    _, stderr = _launch(out, "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
                        "--num_generations", "4", "--max_turns", "5", "--level_weights", "1:0,2:0,3:1",
                        "--max_tokens_per_microbatch", "1200")  # fmt: skip
    steps = [r for r in (json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2], steps
    assert max(r["samples/forward_passes"] for r in steps) > 1, steps  # one micro-batch per step, split
    for r in steps:
        assert math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]), r
    assert steps[1]["policy/logp_gap_mean"] < 1e-3, steps[1]  # the accumulated update is what was published

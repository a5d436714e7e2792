"""`accelerate launch` with DeepSpeed on 2 CPU processes (gloo): the distributed path of `trainers.grpo` end to
end on the tiny policy (one policy server for both ranks, rollouts split across ranks, advantages gathered,
DeepSpeed optimizer steps, LoRA published and saved).

ZeRO-2: one group per rank, and the token budget. ZeRO-3 with LoRA (two launches shared by the tests below
through module fixtures): a group split across the ranks, gradient accumulation inside a generation, the adapter
saved and published from sharded parameters, the logprob gap of each rank, and a resume from the last checkpoint.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from langgraph_evolver._serving import free_port
from langgraph_evolver.types import Trajectory, read_jsonl
from tests._fake_langsmith import fake_langsmith
from tests.conftest import LORA, TINY_POLICY

ROOT = Path(__file__).resolve().parent.parent
ACCELERATE_CONFIG = ROOT / "trainers" / "accelerate_configs" / "zero2_cpu_2proc.yaml"
ZERO3_CONFIG = ROOT / "trainers" / "accelerate_configs" / "zero3_cpu_2proc.yaml"
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
NO_DEEPSPEED = importlib.util.find_spec("deepspeed") is None
# left over from in-process training in other tests, they would mislead the launcher or the ranks
_LAUNCH_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _launch(out: Path, *flags: str, accelerate_config: Path = ACCELERATE_CONFIG,
            env: dict[str, str | None] | None = None) -> tuple[str, str]:  # fmt: skip
    """2-step LoRA GRPO of the quickstart on 2 CPU processes under `accelerate launch`; (stdout, stderr) on success.
    ``flags`` come last, so they override the ones here; ``env`` sets (``None``: removes) environment variables."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(accelerate_config),
           "--main_process_port", str(free_port()),
           "-m", "trainers.grpo", "--config", str(QUICKSTART), *LORA, "--max_steps", "2", "--eval_before", "false",
           "--eval_after", "false", "--output_dir", str(out), "--save_strategy", "no", "--report_to", "none",
           *flags]  # fmt: skip
    launch_env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_") and k not in _LAUNCH_ENV}
    for key, value in (env or {}).items():
        if value is None:
            launch_env.pop(key, None)
        else:
            launch_env[key] = value
    launch_env.setdefault("HF_HUB_OFFLINE", "1")
    launch_env.setdefault("TOKENIZERS_PARALLELISM", "false")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=launch_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
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


# -- ZeRO-3 with LoRA ------------------------------------------------------------------------------------------------
# One generation is 1 task x 12 rollouts: 6 rollouts per rank (per_device_train_batch_size x steps_per_generation),
# so the task's group is split 6 + 6 across the ranks. Its rows are cut into 6 micro-batches, 3 per optimizer step
# (gradient accumulation): 2 optimizer steps per generation, rollouts at steps 0 and 2 of 3. A checkpoint every step;
# two published versions stay (the one after step 2, which sampled step 3's rollouts, and the last).
LORA_R = 32  # examples/quickstart.yaml's lora_r
LEARNING_RATE = 5e-4  # tests.conftest.LORA's
TRAIN_PROJECT = "langgraph-evolver-train"  # trainers.grpo's LangSmith project for training rollouts
ZERO3_FLAGS = ("--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "3",
               "--steps_per_generation", "6", "--num_generations", "12", "--max_steps", "3",
               "--level_weights", "1:0,2:0,3:1", "--max_turns", "4",
               "--lr_scheduler_type", "linear", "--warmup_steps", "0",
               "--save_strategy", "steps", "--save_steps", "1", "--keep_adapter_versions", "2")  # fmt: skip
GENERATION_STEPS = (0, 2)  # the optimizer steps done when each generation's rollouts ran
# Mean |trainer - endpoint| logprob gap: ~5e-7 when both hold the same weights (fp32, CPU). The tiny policy is so
# sure of its tokens that the gap of stale weights is small too: for step 3's rollouts, scored with the base model
# 4e-3 and with the weights one step later 9e-4, so 1e-3 would miss an adapter one step behind.
GAP_TOLERANCE = 1e-4


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """One finished 2-process run."""

    out: Path
    """Its output_dir."""
    stdout: str
    stderr: str
    rollouts: list[dict[str, Any]]
    """The metadata of each training rollout's root run in (fake) LangSmith: every rank's, advantage included."""


@pytest.fixture(scope="module")
def zero3_run(tmp_path_factory: pytest.TempPathFactory) -> Launch:
    """3 optimizer steps under ZeRO-3 with LoRA, rollouts traced to a fake LangSmith (each rank annotates its own)."""
    if NO_DEEPSPEED:
        pytest.skip("deepspeed is not installed (pip install deepspeed); ZeRO-3 needs it")
    out = tmp_path_factory.mktemp("zero3") / "run"
    with fake_langsmith() as fake:
        env: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
        env |= {"LANGSMITH_TRACING": "true", "LANGSMITH_API_KEY": "lsv2_pt_not_a_real_key",
                "LANGSMITH_ENDPOINT": fake.url}  # fmt: skip
        stdout, stderr = _launch(out, *ZERO3_FLAGS, accelerate_config=ZERO3_CONFIG, env=env)
        # the ranks have exited, their LangSmith clients flushed
        roots = [(r["extra"] or {}).get("metadata") or {} for r in fake.runs_of(TRAIN_PROJECT)
                 if r["parent_run_id"] is None]  # fmt: skip
    return Launch(out=out, stdout=stdout, stderr=stderr, rollouts=[m for m in roots if "advantage" in m])


@pytest.fixture(scope="module")
def resumed_run(zero3_run: Launch, tmp_path_factory: pytest.TempPathFactory) -> Launch:
    """``zero3_run`` as if stopped during step 3 (checkpoint-3 never written), resumed with the same flags."""
    out = tmp_path_factory.mktemp("resumed") / "run"
    out.mkdir()
    for name in ("checkpoint-1", "checkpoint-2", "trajectories"):
        shutil.copytree(zero3_run.out / name, out / name)
    shutil.copy(zero3_run.out / "metrics.jsonl", out / "metrics.jsonl")
    stdout, stderr = _launch(out, *ZERO3_FLAGS, "--resume_from_checkpoint", "true", accelerate_config=ZERO3_CONFIG)
    return Launch(out=out, stdout=stdout, stderr=stderr, rollouts=[])


def _step_rows(out: Path) -> list[dict[str, Any]]:
    """The optimizer steps' rows of ``metrics.jsonl`` (TRL's end-of-training row has no ``loss``)."""
    return [r for r in read_jsonl(out / "metrics.jsonl") if "loss" in r]


def _adapter(directory: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(directory / "adapter_model.safetensors"))


def _same_tensors(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _optimizer_steps(checkpoint: Path) -> list[list[int]]:
    """Per rank (DeepSpeed saves one optimizer shard each), the step counts of the optimizer's parameter states."""
    import torch

    counts = []
    for shard in sorted(checkpoint.glob("global_step*/*optim_states.pt")):
        zero = torch.load(shard, map_location="cpu", weights_only=False)["optimizer_state_dict"]
        state = zero["optimizer_state_dict"]["state"]  # the torch optimizer's own, inside ZeRO's
        counts.append(sorted({int(s["step"]) for s in state.values()}))
    return counts


def _lora_parameters(r: int) -> int:
    """Parameters of a rank-``r`` LoRA on the tiny policy's 7 projections (q, k, v, o, gate, up, down) per layer."""
    cfg = json.loads((TINY_POLICY / "config.json").read_text())
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    kv = cfg["num_key_value_heads"] * h // cfg["num_attention_heads"]
    return r * cfg["num_hidden_layers"] * (2 * (h + h) + 2 * (h + kv) + 2 * (h + i) + (i + h))


def _model_versions(out: Path, step: int) -> set[str]:
    """The versions the endpoint reported for the LLM calls of the rollouts that ran after ``step`` steps (rank 0's)."""
    return {tr.model_version for t in read_jsonl(out / "trajectories" / f"step_{step:05d}.jsonl", Trajectory)
            for tr in t.transitions}  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_zero3_group_split_across_ranks_gets_whole_group_advantages(zero3_run):
    """Each generation's one task has 6 rollouts on each rank; every rank annotates its own rollouts with the
    advantage it trains them with. Computed over the whole group of 12 (sample std), the advantages sum to 0 and
    their squares to 11; computed over each rank's 6 alone they would square-sum to at most 5 + 5."""
    steps = _step_rows(zero3_run.out)
    assert all(r["rollout/failed"] == 0 for r in steps if "rollout/failed" in r), steps
    varied = 0
    for step in GENERATION_STEPS:
        group = [m for m in zero3_run.rollouts if m["training_step"] == step]
        assert len(group) == 12 and len({m["group_id"] for m in group}) == 1, group
        on_rank0 = {t["id"] for t in read_jsonl(zero3_run.out / "trajectories" / f"step_{step:05d}.jsonl")}
        assert len(on_rank0) == 6, on_rank0  # rank 0 saves its own rollouts only
        indexes = {rank0: sorted(m["rollout_index"] for m in group if (m["trajectory_id"] in on_rank0) == rank0)
                   for rank0 in (True, False)}  # fmt: skip
        assert indexes == {True: [0, 1, 2, 3, 4, 5], False: [6, 7, 8, 9, 10, 11]}, indexes  # the other 6: rank 1's
        advantages = [m["advantage"] for m in group]
        assert abs(sum(advantages)) < 1e-6, advantages
        if any(advantages):  # a group with one reward throughout has advantage 0 everywhere, however computed
            varied += 1
            # 11 (std + 1e-4)^-2 std^2: > 10.9 for the smallest spread of shaped rewards (one 0.1 penalty)
            assert 10.5 < sum(a * a for a in advantages) <= 11 + 1e-6, advantages
    assert varied, "both groups had one reward throughout: nothing showed where their advantages were computed"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_zero3_gradient_accumulation_inside_a_generation(zero3_run):
    """steps_per_generation 6 > gradient_accumulation_steps 3: one generation feeds 2 optimizer steps, each
    accumulating 3 micro-batches; the optimizer, the scheduler and the logs count optimizer steps, not passes."""
    out = zero3_run.out
    steps = _step_rows(out)
    assert [r["step"] for r in steps] == [1, 2, 3], steps
    for r in steps:
        assert math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]), r
    # rollouts ran at the start of each generation only: their figures are logged at its first step
    assert [r["step"] for r in steps if "reward" in r] == [1, 3], steps
    assert sorted(p.name for p in (out / "trajectories").glob("*.jsonl")) == ["step_00000.jsonl", "step_00002.jsonl"]
    for n in (1, 2, 3):  # the optimizer's own step count on every rank, at every checkpoint
        assert _optimizer_steps(out / f"checkpoint-{n}") == [[n], [n]], n
    assert json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())["global_step"] == 3
    # the linear schedule moved once per optimizer step (the rate logged is the one the step used)
    assert [r["learning_rate"] for r in steps] == pytest.approx([LEARNING_RATE * k / 3 for k in (3, 2, 1)]), steps


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_zero3_lora_adapter_saved_and_published_from_shards(zero3_run):
    """ZeRO-3 shards every parameter; the adapter published to the endpoint (rank 0 saves it with only the trainable
    parameters gathered) and the one the trainer saves hold the LoRA tensors only, whole, and the same values; the
    endpoint loaded each published version and answered step 3's rollouts with step 2's adapter."""
    out, stderr = zero3_run.out, zero3_run.stderr
    assert "training on 2 process(es), DEEPSPEED ZeRO stage 3" in stderr, stderr[-4000:]
    assert stderr.count("starting the policy server") == 1, stderr[-4000:]
    final = json.loads(zero3_run.stdout.strip().splitlines()[-1])
    assert final["steps"] == 3 and final["final_model"] == "tiny-policy-lora-step3", final

    saved = _adapter(out / "final")
    assert all(".lora_A." in k or ".lora_B." in k for k in saved), sorted(saved)
    assert all(t.numel() and LORA_R in t.shape for t in saved.values()), {k: t.shape for k, t in saved.items()}
    expected = _lora_parameters(LORA_R)
    assert sum(t.numel() for t in saved.values()) == expected
    assert (out / "final" / "adapter_model.safetensors").stat().st_size < expected * 4 + 64 * 1024  # nothing else
    assert not [p.name for p in (out / "final").iterdir() if p.name.startswith(("model", "pytorch_model"))]
    assert any(t.abs().sum() > 0 for k, t in saved.items() if ".lora_B." in k)  # trained: B starts at zero

    published = {step: _adapter(out / "served_adapters" / f"tiny-policy-lora-step{step}") for step in (2, 3)}
    assert _same_tensors(published[3], saved)
    for step in (2, 3):
        assert _same_tensors(published[step], _adapter(out / f"checkpoint-{step}")), step
    assert not _same_tensors(published[2], published[3])

    log = (out / "policy_server.log").read_text()
    for step in (2, 3):
        assert f"loaded LoRA adapter tiny-policy-lora-step{step}" in log, log[-3000:]
    assert _model_versions(out, 2) == {"tiny-policy-lora-step2"}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_zero3_logprob_gap_on_every_rank(zero3_run):
    """On the first optimizer step of each generation (before its update) each rank's trainer logprobs match the
    endpoint's behaviour logprobs for the rows that rank trains: at step 3 the endpoint serves the adapter published
    from the shards. Checked per rank: a pooled mean would dilute one rank training on other weights."""
    steps = _step_rows(zero3_run.out)
    checked = [r["step"] for r in steps if "policy/logp_gap_mean" in r]
    assert checked and set(checked) <= {1, 3}, steps  # never after an update inside the generation
    for rank in (0, 1):
        gaps = {r["step"]: r[f"policy/logp_gap_mean_rank{rank}"] for r in steps
                if f"policy/logp_gap_mean_rank{rank}" in r}  # fmt: skip
        assert gaps and max(gaps.values()) < GAP_TOLERANCE, (rank, gaps)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_zero3_resume_from_last_checkpoint(zero3_run, resumed_run):
    """Resumed from checkpoint-2 (the newest complete one), the run continues with the parameters, optimizer state,
    schedule and step counter step 2 ended with, and redoes step 3 alone.

    Step 3's parameters cannot equal the uninterrupted run's: its rollouts are sampled again, and the policy server
    samples requests without a seed from one generator shared by concurrent requests, so the same weights give other
    rollouts. What is deterministic is compared instead: the weights the resumed run publishes before its first
    rollout equal the checkpoint's, its optimizer counts 3 steps, and its learning rate is the uninterrupted run's.
    (checkpoint-2 starts a generation; resumed inside one, a run samples that generation's rollouts again with newer
    weights, since TRL keeps the buffered rollouts out of checkpoints.)
    """
    a, b = zero3_run.out, resumed_run.out
    assert "dropped" in resumed_run.stderr, resumed_run.stderr[-3000:]  # step 3's row and step 2's rollouts
    a_steps, b_steps = _step_rows(a), _step_rows(b)
    assert [r["step"] for r in b_steps] == [1, 2, 3], b_steps  # step 3 once
    assert b_steps[:2] == a_steps[:2]
    a_rollouts = {t["id"] for t in read_jsonl(a / "trajectories" / "step_00002.jsonl")}
    b_rollouts = {t["id"] for t in read_jsonl(b / "trajectories" / "step_00002.jsonl")}
    assert b_rollouts and not a_rollouts & b_rollouts  # sampled again

    assert _same_tensors(_adapter(b / "served_adapters" / "tiny-policy-lora-step2"), _adapter(a / "checkpoint-2"))
    assert _model_versions(b, 2) == {"tiny-policy-lora-step2"}
    assert _optimizer_steps(b / "checkpoint-3") == [[3], [3]]  # a fresh optimizer would count 1
    assert b_steps[2]["learning_rate"] == pytest.approx(a_steps[2]["learning_rate"])  # a fresh schedule: 5e-4
    # the endpoint serves the resumed weights
    gaps = [g for g in (b_steps[2].get(f"policy/logp_gap_mean_rank{rank}") for rank in (0, 1)) if g is not None]
    assert gaps and max(gaps) < GAP_TOLERANCE, b_steps[2]
    final = json.loads(resumed_run.stdout.strip().splitlines()[-1])
    assert final["steps"] == 3 and final["final_model"] == "tiny-policy-lora-step3", final
    assert not _same_tensors(_adapter(b / "final"), _adapter(a / "checkpoint-2"))  # step 3 trained

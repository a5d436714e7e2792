"""Issue 24.4: a run killed (SIGKILL) or stopped (SIGTERM) in the middle of a step loses nothing on resume.

The slow tests run ``python -m trainers.grpo`` as a child process on the tiny policy (1 task x 4 rollouts per
step, a checkpoint after every step) and pause it at a chosen point of a step through a driver that wraps one
trainer method, so the signal lands there every time."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from langgraph_evolver.errors import ConfigError
from langgraph_evolver.types import Trajectory, read_jsonl
from trainers.callbacks import drop_steps_after
from trainers.grpo import resume_checkpoint, resume_command

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--config", str(ROOT / "examples" / "quickstart.yaml"), "--max_steps", "3", "--use_peft", "true",
        "--sync_mode", "lora", "--learning_rate", "5e-4", "--per_device_train_batch_size", "4",
        "--gradient_accumulation_steps", "1", "--num_generations", "4", "--max_turns", "3",
        "--level_weights", "1:0,2:0,3:1", "--save_steps", "1", "--eval_before", "false", "--eval_after", "false",
        "--report_to", "none"]  # fmt: skip

# `python -c DRIVER ARGS` = `python -m trainers.grpo ARGS`, pausing in step $PAUSE_AT_STEP (1-based): after its
# rollouts were saved ($PAUSE_IN=rollouts) or while its checkpoint is written, its metrics row already logged
# ($PAUSE_IN=save); $PAUSE_MARKER appears when the pause begins.
DRIVER = """
import os, time
from pathlib import Path
from trainers.grpo_trainer import EvolverGRPOTrainer as T

at, where = int(os.environ["PAUSE_AT_STEP"]), os.environ["PAUSE_IN"]
name = "_save_trajectories" if where == "rollouts" else "_save_optimizer_and_scheduler"
original = getattr(T, name)

def paused(self, *args):
    before = where == "save"
    if before and self.state.global_step == at:
        Path(os.environ["PAUSE_MARKER"]).touch()
        time.sleep(float(os.environ["PAUSE_S"]))
    original(self, *args)
    if not before and args[1] + 1 == at:
        Path(os.environ["PAUSE_MARKER"]).touch()
        time.sleep(float(os.environ["PAUSE_S"]))

setattr(T, name, paused)
from trainers.grpo import cli
cli()
"""


def _start_paused(out: Path, *, at: int, where: str, pause_s: float) -> tuple[subprocess.Popen, list[int], Path]:
    """Start a run, wait until it pauses; return it, the pids of its children (the policy server) and its log."""
    marker, log = out.parent / f"{out.name}.paused", out.parent / f"{out.name}.log"
    env = {**os.environ, "PAUSE_AT_STEP": str(at), "PAUSE_IN": where, "PAUSE_S": str(pause_s),
           "PAUSE_MARKER": str(marker)}  # fmt: skip
    with log.open("w") as f:
        proc = subprocess.Popen([sys.executable, "-c", DRIVER, *TINY, "--output_dir", str(out)], cwd=ROOT, env=env,
                                stdout=f, stderr=subprocess.STDOUT)  # fmt: skip
    deadline = time.monotonic() + 240
    while not marker.exists():
        assert proc.poll() is None, f"the run ended before pausing:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "the run did not reach the pause"
        time.sleep(0.2)
    children = [c.pid for c in psutil.Process(proc.pid).children()]
    assert children, "the run's policy server"
    return proc, children, log


def _gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return True
        time.sleep(0.2)
    return False


def _resume(command: list[str], log: Path) -> None:
    with log.open("w") as f:
        rc = subprocess.run(command, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=240).returncode
    assert rc == 0, log.read_text()[-3000:]


def _reward_steps(out: Path) -> list[int]:
    return [r["step"] for r in read_jsonl(out / "metrics.jsonl") if "reward" in r]


def _models(path: Path) -> set[str]:
    return {s.model for d in read_jsonl(path) for s in Trajectory.from_dict(d).steps}


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_sigkill_mid_step_then_resume_loses_nothing(tmp_path):
    out = tmp_path / "run"
    # killed while writing checkpoint-3: step 3 is logged and its rollouts saved, its checkpoint is half written
    proc, server, _ = _start_paused(out, at=3, where="save", pause_s=600)
    proc.kill()
    proc.wait()
    assert _gone_within(server, 10), "the killed run's policy server outlived it"
    assert _reward_steps(out) == [1, 2, 3] and (out / "checkpoint-3").is_dir()
    assert not (out / "checkpoint-3" / "trainer_state.json").exists()
    lost = (out / "trajectories" / "step_00002.jsonl").stat().st_mtime

    _resume([sys.executable, "-m", "trainers.grpo", *TINY, "--output_dir", str(out), "--resume_from_checkpoint",
             "true"], tmp_path / "resume.log")  # fmt: skip
    assert _reward_steps(out) == [1, 2, 3]  # step 3 once: the killed run's row gave way to the redone step's
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "reward" in r]
    assert (out / "checkpoint-3" / "trainer_state.json").exists()
    saved = sorted(p.name for p in (out / "trajectories").iterdir())
    assert saved == ["step_00000.jsonl", "step_00001.jsonl", "step_00002.jsonl"]
    redone = out / "trajectories" / "step_00002.jsonl"
    assert redone.stat().st_mtime > lost
    # the resumed run's first rollouts sampled the checkpoint's adapter, published under its step's name, and
    # the trainer's restored weights give the logprobs the endpoint reported
    assert _models(redone) == {"tiny-policy-lora-step2"}
    assert rows[-1]["policy/staleness_mean"] == 0 and rows[-1]["policy/logp_gap_mean"] < 1e-3


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_sigterm_finishes_the_step_stops_the_server_and_says_how_to_resume(tmp_path):
    out = tmp_path / "run"
    proc, server, log = _start_paused(out, at=2, where="rollouts", pause_s=3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    assert _gone_within(server, 1), "the policy server outlived the stopped run"
    last = log.read_text().strip().splitlines()
    assert last[-2] == f"stopped by SIGTERM after step 2, saved in {out / 'checkpoint-2'}"
    assert last[-1] == "resume with: " + resume_command([*TINY, "--output_dir", str(out)])
    assert _reward_steps(out) == [1, 2] and (out / "checkpoint-2" / "trainer_state.json").exists()

    command = shlex.split(last[-1].removeprefix("resume with: "))
    _resume([sys.executable, *command[1:]], tmp_path / "resume.log")
    assert _reward_steps(out) == [1, 2, 3]
    assert _models(out / "trajectories" / "step_00002.jsonl") == {"tiny-policy-lora-step2"}


def test_drop_steps_after_keeps_the_checkpoint_steps_only(tmp_path):
    rows = [{"step": 1, "reward": 0.5}, {"step": 2, "reward": 0.25}, {"step": 2, "train_runtime": 9.0},
            {"step": 3, "reward": 1.0}]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 4, "rew')
    (tmp_path / "trajectories").mkdir()
    for i in range(4):
        (tmp_path / "trajectories" / f"step_{i:05d}.jsonl").write_text("{}\n")

    assert drop_steps_after(tmp_path, 2) == (2, 2)
    assert list(read_jsonl(tmp_path / "metrics.jsonl")) == rows[:3]
    assert sorted(p.name for p in (tmp_path / "trajectories").iterdir()) == ["step_00000.jsonl", "step_00001.jsonl"]
    assert drop_steps_after(tmp_path, 2) == (0, 0)
    assert not (tmp_path / "metrics.jsonl.tmp").exists()


def test_resume_takes_the_newest_complete_checkpoint(tmp_path):
    for step in (1, 2, 10):
        (tmp_path / f"checkpoint-{step}").mkdir()
    for step in (1, 2):
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))

    assert resume_checkpoint(tmp_path, "true") == tmp_path / "checkpoint-2"  # by step, not by name
    assert (tmp_path / "checkpoint-10").exists()
    assert resume_checkpoint(tmp_path, "latest", remove_incomplete=True) == tmp_path / "checkpoint-2"
    assert not (tmp_path / "checkpoint-10").exists()
    assert resume_checkpoint(tmp_path, "false") is None and resume_checkpoint(tmp_path, None) is None
    with pytest.raises(ConfigError, match="not a complete checkpoint"):
        resume_checkpoint(tmp_path, str(tmp_path / "checkpoint-3"))
    with pytest.raises(ConfigError, match="no complete checkpoint"):
        resume_checkpoint(tmp_path / "checkpoint-1", True)


def test_resume_command_replaces_the_flag():
    assert resume_command(["--config", "x.yaml", "--resume_from_checkpoint", "runs/a/checkpoint-4", "--seed", "1"]) == (
        "python -m trainers.grpo --config x.yaml --seed 1 --resume_from_checkpoint true"
    )
    assert resume_command(["--resume_from_checkpoint=false", "--output_dir", "runs/my run"]) == (
        "python -m trainers.grpo --output_dir 'runs/my run' --resume_from_checkpoint true"
    )


def test_the_stop_message_ends_with_the_resume_command(tmp_path):
    from trainers.grpo import Interrupted, stopped_message

    argv = ["--config", "x.yaml", "--output_dir", str(tmp_path)]
    assert stopped_message(Interrupted(signal.SIGINT), tmp_path, argv) == (
        f"stopped by SIGINT before a checkpoint was saved; start again with: python -m trainers.grpo {shlex.join(argv)}"
    )
    (tmp_path / "checkpoint-4").mkdir()
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    head, last = stopped_message(Interrupted(signal.SIGTERM), tmp_path, argv).splitlines()
    assert head == f"stopped by SIGTERM; what came after {tmp_path / 'checkpoint-4'} (step 4) was dropped"
    assert last == f"resume with: python -m trainers.grpo {shlex.join(argv)} --resume_from_checkpoint true"

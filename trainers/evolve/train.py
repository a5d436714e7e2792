"""Phase (b) of a cycle: GRPO steps from the production adapter, as a ``trainers.grpo`` child process.

The child gets the training config with what the cycle fixes written over it (``cycle_dir/train_config.yaml``:
LoRA from ``init_adapter`` = the production adapter, ``max_steps`` = ``steps_per_cycle``, the loop's task
store, no evaluations of its own) and its own CPU policy server for the training rollouts, so production
traffic never meets an adapter in training. Checkpoints every half cycle: a loop killed while training
resumes the child with ``--resume_from_checkpoint true``. The child dies with the loop (``PR_SET_PDEATHSIG``),
so a killed loop never leaves a trainer writing into its directory.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from langgraph_evolver.errors import ConfigError, EvolverError

from .config import EvolveConfig

__all__ = ["read_train_config", "train_candidate", "zero_adapter"]

_PR_SET_PDEATHSIG = 1


def read_train_config(cfg: EvolveConfig) -> dict[str, Any]:
    """``train_config``'s keys with ``train`` over them (what every cycle trains with, before its own keys)."""
    from trainers.config_files import read_yaml_mapping

    data = read_yaml_mapping(cfg.train_config, label=f"train_config {cfg.train_config}")
    data.update(cfg.train)
    if not data.get("model_name_or_path"):
        raise ConfigError(f"train_config {cfg.train_config} names no model_name_or_path.")
    return data


def zero_adapter(train: dict[str, Any], model_path: Path, out: Path) -> Path:
    """A LoRA adapter with ``train``'s shape whose B matrices are zero: the base model's answers, exactly.

    The stable name needs an adapter to point at before the first promotion; this one changes nothing.
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    if (out / "adapter_config.json").exists():
        return out
    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    config = LoraConfig(r=int(train.get("lora_r", 16)), lora_alpha=int(train.get("lora_alpha", 32)),
                        lora_dropout=0.0, target_modules=list(train.get("lora_target_modules") or ["q_proj", "v_proj"]),
                        task_type="CAUSAL_LM")  # fmt: skip
    peft_model = get_peft_model(model, config)
    tmp = out.with_name(out.name + ".tmp")
    peft_model.save_pretrained(str(tmp))
    tmp.rename(out)
    return out


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def _complete_checkpoint(train_dir: Path) -> bool:
    """Whether ``trainers.grpo --resume_from_checkpoint true`` finds a checkpoint to resume in ``train_dir``."""
    from trainers.run_control import checkpoint_step

    return any(checkpoint_step(p) is not None for p in train_dir.glob("checkpoint-*"))


def train_candidate(cfg: EvolveConfig, train: dict[str, Any], cycle_dir: Path, init_adapter: Path,
                    task_store: Path | None) -> dict[str, Any]:  # fmt: skip
    """Run the cycle's training; returns ``{"adapter", "steps", "train_s", "log", ...}`` (adapter: ``final/``)."""
    import yaml

    train_dir = cycle_dir / "train"
    final = train_dir / "final"
    if (final / "adapter_config.json").exists():  # trained before the loop was stopped
        return {"adapter": str(final), "steps": cfg.steps_per_cycle, "resumed": "finished"}
    fixed = {"output_dir": str(train_dir), "max_steps": cfg.steps_per_cycle, "use_peft": True, "sync_mode": "lora",
             "init_adapter": str(init_adapter), "eval_before": False, "eval_after": False, "save_strategy": "steps",
             "save_steps": max(1, cfg.steps_per_cycle // 2), "save_total_limit": 2}  # fmt: skip
    if task_store is not None:
        fixed.update({"task_store": str(task_store), "synthetic_ratio": cfg.synthetic_ratio})
    config_path = cycle_dir / "train_config.yaml"
    cycle_dir.mkdir(parents=True, exist_ok=True)
    config_path.write_text(yaml.safe_dump({**train, **fixed}, sort_keys=False))
    cmd = [sys.executable, "-m", "trainers.grpo", "--config", str(config_path)]
    resumed = _complete_checkpoint(train_dir)
    if resumed:
        cmd += ["--resume_from_checkpoint", "true"]
    log = cycle_dir / "train.log"
    print(f"  training {cfg.steps_per_cycle} GRPO steps from {init_adapter.name}"
          f"{' (resuming from its last checkpoint)' if resumed else ''} … (log: {log})", file=sys.stderr)  # fmt: skip
    started = time.perf_counter()
    with log.open("a") as handle:
        proc = subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
                              check=False)  # fmt: skip
    if proc.returncode != 0 or not (final / "adapter_config.json").exists():
        tail = log.read_text(errors="replace")[-1500:]
        raise EvolverError(f"training exited with code {proc.returncode} (log {log}); its last lines:\n{tail}")
    return {"adapter": str(final), "steps": cfg.steps_per_cycle, "train_s": round(time.perf_counter() - started, 1),
            "resumed": "from_checkpoint" if resumed else None, "log": str(log)}  # fmt: skip

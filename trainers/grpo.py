"""Train the served policy with GRPO on LangGraph agent rollouts.

What it does, top to bottom:
1. reads the config (``--config x.yaml``, command-line flags override it) and checks it: model,
   environment, tasks and endpoint problems stop here with one line and exit code 2, before
   anything is written;
2. starts the local CPU policy server on the model (unless ``policy_base_url`` points at one,
   e.g. vLLM) and evaluates the untrained policy on held-out tasks (avg@k / best@k);
3. trains a LoRA adapter (a fresh one, or ``init_adapter``'s, served from the first rollout on) with
   ``EvolverGRPOTrainer``: each step runs ``num_generations`` rollouts of the agent graph per task, scores
   them with the environment, and after each optimizer step publishes the adapter to the endpoint under a
   new versioned name;
4. evaluates the trained adapter on the same held-out tasks and prints one JSON line.

Outputs in ``output_dir``: ``metrics.jsonl``, TensorBoard logs (``runs/``), ``reward_curve.png``,
``checkpoint-N/`` (resume with ``--resume_from_checkpoint output_dir/checkpoint-N`` or ``true``
for the latest complete one), ``final/`` (the adapter), ``trajectories/step_N.jsonl``, ``eval_before/``,
``eval_after/``, ``summary.json``.

Stopping: SIGTERM or Ctrl-C lets the current step finish, saves its checkpoint, stops the policy
server and exits with 128 + the signal's number, printing the command that resumes; a second one
drops the step at once. A resumed run (even of a run killed with SIGKILL, whose policy server
stops itself) forgets the logged rows and saved trajectories of the steps after its checkpoint
and publishes the checkpoint's weights before its first rollout.

    python -m trainers.grpo --config examples/quickstart.yaml              # = make demo
    python -m trainers.grpo --config examples/quickstart.yaml --max_steps 4 --eval_limit 10
    python -m trainers.grpo --config examples/quickstart.yaml --resume_from_checkpoint true
    accelerate launch --config_file trainers/accelerate_configs/zero2_cpu_2proc.yaml \\
        -m trainers.grpo --config examples/quickstart.yaml
    # 8 GPUs, vLLM on its own GPUs (see the README):
    accelerate launch --config_file trainers/accelerate_configs/zero3_8gpu.yaml -m trainers.grpo \\
        --config examples/vllm_qwen.yaml --policy_base_url http://VLLM_HOST:8000/v1

How it departs from textbook GRPO: rollouts are multi-turn (one loss row per LLM call, or per
merged run of calls); the old logprobs are the endpoint's behaviour logprobs; failed rollouts
and zero-variance groups give no rows (counted instead); a malformed tool call costs
``malformed_call_penalty`` of reward.

Why this module stays over 500 lines: ``main`` is the numbered steps above in order, and its
checks, evaluations and end-of-run report sit beside it so the script reads top to bottom.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import math
import os
import shutil
import signal
import sys
import threading
import time
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph_evolver.errors import ConfigError, EvolverError
from langgraph_evolver.types import Task

__all__ = ["Interrupted", "ScriptArguments", "main", "make_parser", "resume_checkpoint", "task_dataset"]

logger = logging.getLogger("trainers.grpo")


@dataclass
class ScriptArguments:
    """Run-level arguments (the training itself is configured by ``EvolverGRPOConfig``)."""

    eval_split: str = field(default="test", metadata={"help": "Held-out split evaluated before and after training."})
    eval_k: int = field(default=4, metadata={"help": "Samples per held-out task (avg@k, best@k)."})
    eval_limit: int | None = field(default=None, metadata={"help": "Evaluate only the first N held-out tasks."})
    eval_before: bool = field(default=True, metadata={"help": "Evaluate the starting policy before training."})
    eval_after: bool = field(default=True, metadata={"help": "Evaluate the trained policy after training."})
    eval_seed: int | None = field(default=0, metadata={"help": "Common sampling seed of both evaluations, paired "
                                  "per (task, sample) (trainers.paired); null: unseeded."})  # fmt: skip


def make_parser() -> Any:
    from trl import ModelConfig, TrlParser

    from .config import EvolverGRPOConfig

    parser = TrlParser((ScriptArguments, EvolverGRPOConfig, ModelConfig))
    parser.set_defaults(lora_dropout=0.0)  # TRL's 0.05 makes the trainer's logprobs noisy against the endpoint's
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        # DeepSpeed without a GPU (e.g. trainers/accelerate_configs/zero2_cpu_2proc.yaml): accelerate leaves the
        # process-group backend unset there and then counts 1 process on every rank; name DeepSpeed's own
        # (gloo, or ccl with oneCCL). The config file or --ddp_backend still override it.
        from deepspeed.accelerator import get_accelerator

        if get_accelerator().device_name() == "cpu":
            parser.set_defaults(ddp_backend=get_accelerator().communication_backend_name())
    return parser


def task_dataset(tasks: list[Task], level_weights: dict[int, float] | None = None) -> Any:
    """A ``datasets.Dataset`` with one row per task (repeated by level weight)."""
    from datasets import Dataset

    rows = []
    for task in tasks:
        level = task.metadata.get("level")
        weight = (level_weights or {}).get(level, 1.0) if level_weights else 1.0
        # fractional weights keep a deterministic share of the level's tasks (same on every rank)
        copies = int(weight) + (1 if zlib.crc32(task.id.encode()) % 1000 < (weight % 1) * 1000 else 0)
        rows += [{"prompt": task.query, "task": json.dumps(task.to_dict())}] * copies
    if not rows:
        raise ConfigError("No training tasks left after level_weights; give at least one level a weight > 0.")
    return Dataset.from_list(rows)


def mix_synthetic(seed_tasks: list[Task], synthetic: list[Task], ratio: float, seed: int = 0,
                  epochs: int = 1) -> list[Task]:  # fmt: skip
    """Seed and synthetic tasks with ``ratio`` of them synthetic (1.0: synthetic only), for ``epochs`` epochs.

    Each epoch holds every seed task once and its own deterministic sample of synthetic tasks
    (re-sampled per epoch: a large store is covered over the epochs instead of one fixed subset);
    the epochs are concatenated. Synthetic tasks keep their own ids, so GRPO never groups them
    with their seeds.
    """
    import random

    if not synthetic or ratio <= 0.0:
        return list(seed_tasks) * epochs
    if ratio >= 1.0 or not seed_tasks:
        return list(synthetic) * epochs
    want = round(len(seed_tasks) * ratio / (1.0 - ratio))
    out: list[Task] = []
    for epoch in range(epochs):
        rng = random.Random(seed if epoch == 0 else f"{seed}/{epoch}")
        # every synthetic task once per full pass, the rest a sample without replacement (never a task
        # drawn twice while another is left out)
        full, rest = divmod(want, len(synthetic))
        picked = [t for _ in range(full) for t in rng.sample(synthetic, len(synthetic))] + rng.sample(synthetic, rest)
        out += [*seed_tasks, *picked]
    return out


def mixing_epochs(cfg: Any, tasks_per_epoch: int, world_size: int = 1) -> int:
    """How many epochs of tasks a run goes through (``max_steps`` or ``num_train_epochs``), at least 1."""
    if cfg.max_steps and cfg.max_steps > 0:
        rows = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * world_size
        prompts_per_step = max(1, rows // max(1, cfg.num_generations))
        return max(1, min(1000, math.ceil(cfg.max_steps * prompts_per_step / max(1, tasks_per_epoch))))
    return max(1, math.ceil(cfg.num_train_epochs))


def _check_model(model_args: Any) -> Path:
    path = model_args.model_name_or_path
    if not path:
        raise ConfigError("No model: set model_name_or_path (e.g. checkpoints/tiny-policy).")
    from .models import ModelUnavailable, resolve_model

    try:
        local = resolve_model(path)
    except ModelUnavailable as e:
        raise ConfigError(f"model_name_or_path={path}: {e}") from e
    if local.exists():
        if not (local / "config.json").exists():
            raise ConfigError(f"model_name_or_path={path} has no config.json: pass a save_pretrained directory.")
        return local
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise ConfigError(f"model_name_or_path={path} is not a local directory and HF_HUB_OFFLINE=1: download it "
                          "first or pass a local path.")  # fmt: skip
    return local


def _check_template(model_path: Path, cfg: Any) -> None:
    """Refuse (or with allow_template_without_tools, warn about) a chat template that drops the tools."""
    if not (model_path / "tokenizer_config.json").exists():
        return  # a hub id: its tokenizer is checked when the trainer loads it
    from transformers import AutoTokenizer

    from .tool_templates import TemplateDropsTools, check_renders_tools

    try:
        check_renders_tools(AutoTokenizer.from_pretrained(str(model_path)), where=f"model_name_or_path={model_path}")
    except TemplateDropsTools as e:
        if not cfg.allow_template_without_tools:
            raise ConfigError(
                str(e).replace("--allow-template-without-tools", "allow_template_without_tools: true")
            ) from e
        print(f"WARNING: {e}", file=sys.stderr)


def _check_init_adapter(cfg: Any, model_args: Any) -> dict[str, Any] | None:
    """``init_adapter``'s ``adapter_config.json`` (None without one); a ConfigError when it cannot be trained on."""
    if not cfg.init_adapter:
        return None
    where = f"init_adapter={cfg.init_adapter}"
    if not model_args.use_peft or cfg.sync_mode != "lora":
        raise ConfigError(f"{where} continues training a LoRA adapter: set use_peft: true and sync_mode: lora (got "
                          f"use_peft: {str(bool(model_args.use_peft)).lower()}, sync_mode: {cfg.sync_mode}), or drop "
                          "init_adapter to train from the base model.")  # fmt: skip
    path = Path(cfg.init_adapter)
    if not (path / "adapter_config.json").is_file():
        what = "has no adapter_config.json" if path.is_dir() else "is not a directory"
        raise ConfigError(f"{where} {what}: pass a PEFT LoRA adapter directory (what PeftModel.save_pretrained "
                          "writes, e.g. an earlier run's output_dir/final).")  # fmt: skip
    if not (path / "adapter_model.safetensors").is_file():
        found = "only adapter_model.bin" if (path / "adapter_model.bin").is_file() else "no adapter_model.safetensors"
        raise ConfigError(f"{where} holds {found}: endpoints load safetensors adapters only; re-save it with "
                          "PeftModel.from_pretrained(base, DIR).save_pretrained(DIR, "
                          "safe_serialization=True).")  # fmt: skip
    try:
        config = json.loads((path / "adapter_config.json").read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{where}: cannot read adapter_config.json ({e}).") from None
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        kind = config.get("peft_type") if isinstance(config, dict) else None
        raise ConfigError(f"{where} is a {kind or 'non-PEFT'} adapter: only a LoRA adapter can be trained and "
                          "published (sync_mode: lora).")  # fmt: skip
    ours = {
        "r": model_args.lora_r,
        "alpha": model_args.lora_alpha,
        "target modules": _modules(model_args.lora_target_modules),
    }
    theirs = {
        "r": config.get("r"),
        "alpha": config.get("lora_alpha"),
        "target modules": _modules(config.get("target_modules")),
    }
    if ours != theirs:
        logger.info("%s: training the adapter's own LoRA shape (%s), not lora_r / lora_alpha / lora_target_modules "
                    "(%s)", where, _shape(theirs), _shape(ours))  # fmt: skip
    return config


def _modules(value: Any) -> list[str] | None:
    """Target modules comparable across spellings: a list in any order, or one name (or regex) as a string."""
    return None if value is None else sorted([value] if isinstance(value, str) else set(value))


def _shape(shape: dict[str, Any]) -> str:
    return ", ".join(f"{k} {', '.join(v) if isinstance(v, list) else v}" for k, v in shape.items())


def _init_adapter_model(model_path: Path, cfg: Any) -> Any:
    """The base model, loaded as ``GRPOTrainer`` loads a model path (``model_init_kwargs``, float32 unless they say
    otherwise), wrapped by ``init_adapter`` with its weights trainable. An adapter of another base model is a
    ConfigError: a shape mismatch, or saved LoRA tensors and the model's LoRA parameters that do not pair up (PEFT
    only warns about those)."""
    from peft import PeftModel
    from safetensors import safe_open
    from trl.trainer.utils import create_model_from_path

    kwargs = dict(cfg.model_init_kwargs or {})
    if cfg.distributed_state.distributed_type in ("MULTI_GPU", "DEEPSPEED"):  # as TRL: device_map "auto" fails there
        kwargs["device_map"] = None
    kwargs.setdefault("trust_remote_code", cfg.trust_remote_code)
    base = create_model_from_path(str(model_path), **kwargs)
    plugin = getattr(cfg, "deepspeed_plugin", None)
    zero3 = plugin is not None and plugin.zero_stage == 3
    where = f"init_adapter={cfg.init_adapter} does not fit model_name_or_path={model_path}"
    try:  # ZeRO-3 needs the adapter in the base model's dtype, as in TRL's own get_peft_model call there
        with warnings.catch_warnings():  # missing LoRA keys: the pairing check below says it, as an error
            warnings.filterwarnings("ignore", message=".*Found missing adapter keys", category=UserWarning)
            model = PeftModel.from_pretrained(base, cfg.init_adapter, is_trainable=True,
                                              autocast_adapter_dtype=not zero3)  # fmt: skip
    except (RuntimeError, ValueError) as e:
        lines = str(e).splitlines() or [type(e).__name__]
        first = next((line for line in lines if "mismatch" in line), lines[0]).strip().rstrip(".")
        raise ConfigError(f"{where} ({first}): it was trained on another base model; pass that one as "
                          "model_name_or_path, or drop init_adapter.") from None  # fmt: skip
    with safe_open(str(Path(cfg.init_adapter) / "adapter_model.safetensors"), "pt") as f:
        saved = {key for key in f.keys() if "lora_" in key}
    params = {
        name.replace(".default", "") for name, _ in model.named_parameters() if "lora_" in name and ".default" in name
    }
    if saved != params:
        odd = sorted(saved - params)[:2] or sorted(params - saved)[:2]
        raise ConfigError(f"{where}: its LoRA tensors and the model's LoRA parameters do not pair up "
                          f"({len(saved - params)} tensors without a parameter, {len(params - saved)} parameters "
                          f"without a tensor, e.g. {', '.join(odd)}); it was trained on another base model: pass that "
                          "one as model_name_or_path, or drop init_adapter.")  # fmt: skip
    if (dropout := zero_lora_dropout(model)) > 0.0:
        logger.info("init_adapter=%s: its lora_dropout %s set to 0 (dropout in the trainer's forward passes only "
                    "would make its logprobs noisy against the endpoint's)", cfg.init_adapter, dropout)  # fmt: skip
    return model


def zero_lora_dropout(model: Any) -> float:
    """Set every LoRA dropout of ``model`` (and its adapter configs, so what it saves says so) to 0; the largest
    dropout probability it had. An endpoint never drops, so a trainer that does disagrees with it."""
    import torch

    before = 0.0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Dropout) and ".lora_dropout." in f".{name}.":
            before, module.p = max(before, float(module.p)), 0.0
    for config in (getattr(model, "peft_config", None) or {}).values():
        before = max(before, float(getattr(config, "lora_dropout", 0.0) or 0.0))
        config.lora_dropout = 0.0
    return before


def _load_tasks(cfg: Any, *requests: tuple[str, int | None]) -> list[list[Task]]:
    """For each ``(split, limit)``: the first ``limit`` tasks of that split, from one environment instance."""
    from langgraph_evolver.environment import check_task_environments, load_environment

    env = load_environment(cfg.env_id, **(cfg.env_args or {}))
    try:
        tasks = [env.list_tasks(split)[:limit] for split, limit in requests]
    finally:
        env.close()
    for part, (split, _) in zip(tasks, requests, strict=True):  # env_id runs every rollout: another env is refused
        check_task_environments(part, cfg.env_id, split)
    return tasks


def _env_factory(cfg: Any) -> Any:
    """Each rollout's environment: the HTTP service at ``env_url``, else the one ``env_id`` (+ ``env_args``)
    names, whatever the tasks' ``env`` label says (``env_tools.base.environment_factory``)."""
    if cfg.env_url:
        from env_tools.client import remote_environment_factory

        return remote_environment_factory(cfg.env_url)
    from langgraph_evolver.environment import environment_factory

    return environment_factory(cfg.env_id, **(cfg.env_args or {}))


def evaluation_rollouts(tasks: list[Task], *, base_url: str, model: str, k: int, cfg: Any,
                        seed: int | None = None) -> Any:  # fmt: skip
    """The coroutine of ``k`` rollouts of every task against ``model``, run as training runs them: the config's
    agent, environment, temperature and turn / token limits (``seed``: paired, see ``trainers.evaluate``)."""
    from .evaluate import evaluate_endpoint

    return evaluate_endpoint(tasks, base_url=base_url, model=model, k=k, temperature=cfg.temperature,
                             max_tokens=cfg.max_completion_length, max_turns=cfg.max_turns,
                             concurrency=cfg.rollout_concurrency, env_factory=_env_factory(cfg), progress=True,
                             agent=cfg.agent_for_rollouts(), seed=seed)  # fmt: skip


def _evaluate(tasks: list[Task], *, base_url: str, model: str, k: int, cfg: Any, out: Path,
              loop: asyncio.AbstractEventLoop, seed: int | None = None) -> dict[str, Any]:  # fmt: skip
    from langgraph_evolver.errors import PolicyEndpointError

    from .evaluate import summarize, task_means, too_many_failures, write_evaluation

    started = time.perf_counter()
    rollouts = evaluation_rollouts(tasks, base_url=base_url, model=model, k=k, cfg=cfg, seed=seed)
    trajectories = loop.run_until_complete(rollouts)
    summary = {"model": model, "tasks": len(tasks), "k": k, "seed": seed, **summarize(trajectories, k),
               "wall_s": round(time.perf_counter() - started, 1),
               "task_avg": {tid: round(v, 4) for tid, v in task_means(trajectories).items()}}  # fmt: skip
    write_evaluation(out, trajectories, summary)
    if (reason := too_many_failures(summary, cfg.max_failed_rollout_share, f"the evaluation of {model}")) is not None:
        raise PolicyEndpointError(f"{reason} (trajectories in {out})")
    return summary


def _checkpoint_step(path: Path) -> int | None:
    """The step of a complete checkpoint (its ``trainer_state.json``, written last, reads), else None."""
    try:
        return int(json.loads((path / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def resume_checkpoint(output_dir: str | Path, value: Any, *, remove_incomplete: bool = False) -> Path | None:
    """The checkpoint ``resume_from_checkpoint`` names, or None to start from scratch.

    ``true`` (``last``, ``latest``) is the newest *complete* ``checkpoint-N`` of ``output_dir`` (``auto``: that, or None
    without one, so one command starts a run and resumes it after a kill): a run killed
    while saving leaves one without ``trainer_state.json``, which TRL would pick and then fail on (those are
    removed when ``remove_incomplete``: their step is redone). A path must be a complete checkpoint.
    """
    if value is None or value is False or (isinstance(value, str) and value.lower() in ("false", "none", "")):
        return None
    auto = isinstance(value, str) and value.lower() == "auto"  # the newest complete one if any, else a fresh start
    if auto or value is True or (isinstance(value, str) and value.lower() in ("true", "last", "latest")):
        found = sorted(((int(p.name.split("-")[1]), p) for p in Path(output_dir).glob("checkpoint-*")
                        if p.is_dir() and p.name.split("-")[1].isdigit()), reverse=True)  # fmt: skip
        for _, path in found:
            if _checkpoint_step(path) is not None:
                return path
            if remove_incomplete:
                logger.warning("removing %s: a run stopped while saving it (no trainer_state.json)", path)
                shutil.rmtree(path, ignore_errors=True)
        if auto:
            return None
        raise ConfigError(f"resume_from_checkpoint={value} but {output_dir} holds no complete checkpoint-N: start "
                          "without it, or pass the output_dir of the run to resume.")  # fmt: skip
    path = Path(value)
    if _checkpoint_step(path) is None:
        raise ConfigError(f"resume_from_checkpoint={value} is not a complete checkpoint (no readable "
                          "trainer_state.json): pass a checkpoint-N directory, or true for the newest complete "
                          "one.")  # fmt: skip
    return path


def resume_command(argv: list[str] | None = None) -> str:
    """The command line of this run with ``--resume_from_checkpoint true`` (in place of any it had)."""
    from .model_card import launch_command

    args, out = list(sys.argv[1:] if argv is None else argv), []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a == "--resume_from_checkpoint":
            skip = True
        elif not a.startswith("--resume_from_checkpoint="):
            out.append(a)
    return launch_command([*out, "--resume_from_checkpoint", "true"])


class Interrupted(BaseException):  # noqa: N818 - like KeyboardInterrupt, which it stands in for
    """A stop asked by a signal: after the step that finished (``finished``), or at once (the step dropped)."""

    def __init__(self, signum: int, *, finished: bool = False) -> None:
        super().__init__(signum)
        self.signum = signum
        self.finished = finished


class StopHandler:
    """SIGTERM / SIGINT: the first one during training lets the current step end (``StopOnRequest``); a second
    one, or one outside training, raises ``Interrupted`` at once. Installed by ``cli``; ``main`` wires it."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.callback: Any = None

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopHandler]:
        """This handler for SIGTERM and SIGINT inside the block (main thread only), the previous ones after it."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.signal(sig, self) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def __call__(self, signum: int, frame: Any) -> None:
        if self.signum is None and self.callback is not None and self.callback.active:
            self.signum = signum
            print(f"\n{signal.Signals(signum).name}: finishing this step and saving its checkpoint, then stopping "
                  "(send it again to stop now and drop the step)", file=sys.stderr, flush=True)  # fmt: skip
            return
        raise Interrupted(signum)


def main(script_args: ScriptArguments, cfg: Any, model_args: Any, *, command: str | None = None,
         stop: StopHandler | None = None) -> dict[str, Any]:  # fmt: skip
    """Train (see the module docstring); returns the final figures. ``command`` goes into the model card;
    ``stop`` (installed by ``cli``) turns SIGTERM / Ctrl-C into a stop at the end of a step."""
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list
    from transformers import AutoTokenizer
    from transformers.trainer_callback import ProgressCallback
    from trl import get_peft_config

    from langgraph_evolver.tracing import langsmith_callbacks, langsmith_enabled

    from .callbacks import MetricsCallback, StopOnRequest, drop_steps_after, plot_reward_curve
    from .config import lora_dropout_warning, parse_level_weights
    from .grpo_trainer import EvolverGRPOTrainer
    from .model_card import launch_command, write_model_card
    from .serving import PolicyServerProcess, check_endpoint
    from .sync import DiskSync, FullSync, LoraSync, load_adapter, unload_adapter

    started = time.perf_counter()
    state = PartialState()
    out = Path(cfg.output_dir)
    model_path = _check_model(model_args)
    _check_template(model_path, cfg)
    init_adapter = _check_init_adapter(cfg, model_args)
    if (warning := lora_dropout_warning(cfg, model_args)) is not None:
        logger.warning(warning)
    if cfg.sync_mode == "lora" and not model_args.use_peft:
        raise ConfigError("sync_mode=lora trains a LoRA adapter and publishes it: set use_peft: true (with lora_r, "
                          "lora_alpha, lora_target_modules), or sync_mode=full (all weights, any device).")  # fmt: skip
    if cfg.sync_mode == "full" and model_args.use_peft:
        raise ConfigError("sync_mode=full trains and publishes all weights: set use_peft: false, or use "
                          "sync_mode=lora to train and publish a LoRA adapter.")  # fmt: skip
    if cfg.sync_mode == "full" and cfg.full_sync_transport == "nccl":
        FullSync.check_available()
    if cfg.attribution_settings.enabled:  # an unusable judge spec fails here, before anything is written
        from langgraph_evolver.attribution import make_judge

        make_judge(cfg.attribution_settings.judge, **cfg.attribution_settings.judge_options)
    train_tasks, eval_tasks = _load_tasks(cfg, (cfg.task_split, cfg.task_limit or None),
                                          (script_args.eval_split, script_args.eval_limit))  # fmt: skip
    if cfg.task_store:  # self-questioning: synthesized tasks mixed in
        from langgraph_evolver.questioning import stored_tasks

        synthetic = stored_tasks(
            cfg.task_store,
            label=f"task_store={cfg.task_store}",
            make_hint="`python -m langgraph_evolver.questioning --env <env> --n 200 --out <path>`",
        )
        per_epoch = len(mix_synthetic(train_tasks, synthetic, cfg.synthetic_ratio, cfg.seed))
        epochs = mixing_epochs(cfg, per_epoch, state.num_processes) if cfg.synthetic_ratio < 1.0 else 1
        train_tasks = mix_synthetic(train_tasks, synthetic, cfg.synthetic_ratio, cfg.seed, epochs=epochs)
        if epochs > 1 and not (cfg.max_steps and cfg.max_steps > 0):
            cfg.num_train_epochs = cfg.num_train_epochs / epochs  # the epochs are already in the dataset
    if not train_tasks:
        raise ConfigError(f"Environment {cfg.env_id!r} has no tasks in split {cfg.task_split!r}.")
    from .pools import check_run_tasks  # a pool overlapping the held-out tasks or the warm start: refused

    check_run_tasks(cfg, script_args, model_args, train_tasks, eval_tasks)
    if not cfg.env_url and state.is_main_process:  # a server that cannot start: one error before any rollout
        from .evaluate import preflight

        preflight(_env_factory(cfg), train_tasks[0])
    if (script_args.eval_before or script_args.eval_after) and not eval_tasks:
        raise ConfigError(f"No held-out tasks in split {script_args.eval_split!r}; set eval_split or eval_before/"
                          "eval_after: false.")  # fmt: skip
    dataset = task_dataset(train_tasks, parse_level_weights(cfg.level_weights))
    checkpoint = resume_checkpoint(out, cfg.resume_from_checkpoint, remove_incomplete=state.is_main_process)
    per_step = cfg.generation_batch_size // cfg.num_generations
    if len(dataset) < per_step:  # TRL's sampler drops an incomplete batch: the run would take 0 steps
        raise ConfigError(f"{len(dataset)} training rows (tasks after level_weights) but one generation takes "
                          f"{per_step} tasks x num_generations={cfg.num_generations} (generation_batch_size="
                          f"{cfg.generation_batch_size}): add tasks, or lower per_device_train_batch_size / "
                          "steps_per_generation so one step needs at most that many tasks.")  # fmt: skip
    init_model = None
    if init_adapter is not None:  # loaded now: an adapter of another base model stops the run before the server starts
        init_model = _init_adapter_model(model_path, cfg)
        model_args = copy.copy(model_args)  # the model card states the shape trained: the adapter's
        model_args.lora_r, model_args.lora_alpha = init_adapter.get("r"), init_adapter.get("lora_alpha")
        model_args.lora_target_modules = _modules(init_adapter.get("target_modules"))

    if state.is_main_process:  # the steps after the checkpoint are redone: their rows and trajectories go
        start_step = _checkpoint_step(checkpoint) if checkpoint else 0
        rows, files = drop_steps_after(out, start_step or 0)
        if rows or files:
            logger.info("starting at step %d: dropped %d rows of metrics.jsonl and %d trajectory files of later "
                        "steps (a run stopped after its last checkpoint)", start_step, rows, files)  # fmt: skip
    state.wait_for_everyone()
    server = None
    base_url, base_model = cfg.policy_base_url, cfg.policy_model
    if base_url:
        served = check_endpoint(base_url, base_model)
        base_model = base_model or served[0]
    elif state.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        server = PolicyServerProcess(model_path, log_path=out / "policy_server.log",
                                     allowed_weight_dirs=[out, *([cfg.init_adapter] if cfg.init_adapter else [])],
                                     threads=cfg.policy_server_threads, dtype=cfg.policy_server_dtype,
                                     max_batch_size=cfg.policy_server_max_batch_size,
                                     extra_args=["--allow-template-without-tools"]
                                     * cfg.allow_template_without_tools)  # fmt: skip
        print(f"starting the policy server on {model_path} …", file=sys.stderr)
        try:
            server.start()
        except BaseException:  # Ctrl-C while it loads: stop it here, not at our exit
            server.stop()
            raise
        base_url, base_model = server.base_url, server.model_name
    shared = [base_url, base_model]
    broadcast_object_list(shared)
    base_url, base_model = shared
    figures: dict[str, Any] = {}
    # One event loop for the evaluations and every training rollout: a user's graph may hold async clients of
    # its own (a router model), bound to the loop they were first used on; asyncio.run per evaluation closed it.
    loop = asyncio.new_event_loop()
    try:
        out.mkdir(parents=True, exist_ok=True)
        evals: dict[str, dict[str, Any]] = {}
        k = script_args.eval_k
        if script_args.eval_before and state.is_main_process:
            print(f"evaluating the starting policy on {len(eval_tasks)} held-out tasks x {k} …", file=sys.stderr)
            start = base_model
            if cfg.init_adapter:  # the starting policy is the adapter: served under a name of its own meanwhile
                start = load_adapter(base_url, cfg.init_adapter, f"{base_model}-init-adapter")
            try:
                evals["before"] = _evaluate(eval_tasks, base_url=base_url, model=start, k=k, cfg=cfg,
                                            out=out / "eval_before", loop=loop, seed=script_args.eval_seed)  # fmt: skip
            finally:
                if start != base_model:
                    unload_adapter(base_url, start)
        state.wait_for_everyone()

        tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        stop = stop or StopHandler()
        stop.callback = StopOnRequest(lambda: stop.signum is not None)
        callbacks = [MetricsCallback(out / "metrics.jsonl"), stop.callback]
        # a PeftModel (init_adapter) is trained as it is, and published before the first rollout
        trainer = EvolverGRPOTrainer(str(model_path) if init_model is None else init_model, cfg, dataset,
                                     processing_class=tokenizer, policy_base_url=base_url,
                                     peft_config=get_peft_config(model_args) if init_model is None else None,
                                     env_factory=_env_factory(cfg),
                                     rollout_callbacks=langsmith_callbacks(project="langgraph-evolver-train"),
                                     callbacks=callbacks, event_loop=loop)  # fmt: skip
        trainer.remove_callback(ProgressCallback)
        card = {"cfg": cfg, "model_args": model_args, "base_model": str(model_args.model_name_or_path),
                "command": command or launch_command(), "evals": evals, "k": k, "eval_split": script_args.eval_split,
                "train_tasks": len(train_tasks)}  # fmt: skip
        trainer.card_info = card
        if state.is_main_process:
            ds_plugin = trainer.accelerator.state.deepspeed_plugin
            logger.info("training on %d process(es), %s%s", trainer.accelerator.num_processes,
                        trainer.accelerator.distributed_type.value,
                        f" ZeRO stage {ds_plugin.zero_stage}" if trainer.is_deepspeed_enabled else "")  # fmt: skip
        if cfg.sync_mode == "lora":
            trainer.policy = LoraSync(base_url, base_model, out / "served_adapters", keep=cfg.keep_adapter_versions)
        elif cfg.full_sync_transport == "disk":
            trainer.policy = DiskSync(base_url, base_model, out / "served_weights", keep=cfg.keep_adapter_versions)
        else:
            trainer.policy = FullSync(trainer.vllm_generation, base_model)
        # the checkpoint's weights reach the endpoint before the first rollout (_sync_policy at its step)
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        if stop.signum is not None:  # stopped at a step's end on request: that step's checkpoint is saved
            raise Interrupted(stop.signum, finished=True)
        if trainer.state.global_step == 0:
            raise EvolverError("Training took no optimizer step, so there is nothing to save or evaluate: check "
                               "max_steps / num_train_epochs and that the dataset yields a batch.")  # fmt: skip
        trainer._sync_policy()  # the last optimizer step's weights, for the evaluation after
        final_model = trainer.policy.current
        trainer.save_model(str(out / "final"))

        if script_args.eval_after and state.is_main_process:
            print(f"evaluating the trained policy ({final_model}) …", file=sys.stderr)
            evals["after"] = _evaluate(eval_tasks, base_url=base_url, model=final_model, k=k, cfg=cfg,
                                       out=out / "eval_after", loop=loop, seed=script_args.eval_seed)  # fmt: skip
        state.wait_for_everyone()
        if state.is_main_process:
            for where in (out / "README.md", out / "final" / "README.md"):  # ours, over TRL's and PEFT's placeholders
                write_model_card(where, step=trainer.state.global_step, final=True, **card)
            figures = _report(out, evals, k, trainer, started)
            plot_reward_curve(out / "metrics.jsonl", out / "reward_curve.png",
                              eval_before=evals.get("before", {}).get("all", {}).get(f"avg@{k}"),
                              eval_after=evals.get("after", {}).get("all", {}).get(f"avg@{k}"), k=k)  # fmt: skip
            if cfg.attribution_settings.enabled:
                report = _attribution_report(out, figures)
                figures["attribution_report"] = str(report)
            if langsmith_enabled() and evals:  # held-out tasks as a LangSmith dataset, one experiment per evaluation
                from langgraph_evolver.tracing import write_evaluation_folders

                figures["langsmith_experiments"] = write_evaluation_folders(
                    {name: out / f"eval_{name}" for name in evals}, timeout_s=60,
                    dataset_name=f"{cfg.env_id}-{script_args.eval_split}")  # fmt: skip
            if "eval_delta_avg" in figures:
                print(_gain_table(figures, evals["after"]["tasks"], k, split=script_args.eval_split), file=sys.stderr)
            print(json.dumps(figures))
        if isinstance(trainer.policy, LoraSync) and state.is_main_process and not server:
            trainer.policy.close()
    finally:
        if server is not None:
            server.stop()
        loop.close()
    return figures


def _attribution_report(out: Path, figures: dict[str, Any], *, last_steps: int = 10) -> Path:
    """``attribution_report.html``: the saved trajectories of the last steps, steps coloured GOOD/BAD."""
    from langgraph_evolver.attribution.report import write_attribution_report
    from langgraph_evolver.types import Trajectory, read_jsonl

    files = sorted((out / "trajectories").glob("step_*.jsonl"))[-last_steps:]
    trajectories = [Trajectory.from_dict(d) for f in files for d in read_jsonl(f)]
    return write_attribution_report(trajectories, out / "attribution_report.html", metrics=figures,
                                    title=f"Step attribution: {out.name} (last {len(files)} steps)")  # fmt: skip


def _gain_table(figures: dict[str, Any], tasks: int, k: int, *, split: str = "test") -> str:
    """Before -> after on the evaluated tasks, for people: overall (with the task-paired SE), per level, success."""
    gain, se = figures["eval_delta_avg"], figures["eval_delta_se"]
    name = "held-out" if split == "test" else f"{split} split"
    lines = [f"{name} ({tasks} tasks x {k}): avg@{k} {figures['eval_before_avg']:.3f} -> "
             f"{figures['eval_after_avg']:.3f} ({gain:+.3f} ± {se:.3f})"]  # fmt: skip
    for key in sorted(key for key in figures if key.startswith("eval_level")):  # [before, after] per level
        b, a = figures[key]
        lines.append(f"  {key.removeprefix('eval_').removesuffix('_avg')}: avg@{k} {b:.3f} -> {a:.3f} ({a - b:+.3f})")
    for key in ("success", "well_formed"):
        b, a = figures[f"eval_before_{key}"], figures[f"eval_after_{key}"]
        lines.append(f"  {key.replace('_', '-')}: {b:.3f} -> {a:.3f} ({a - b:+.3f})")
    if "gain" in (paired := figures.get("eval_paired") or {}):
        lines.append(f"  paired per (task, sample), seed {paired['seed']}: gain {paired['gain']:+.3f}, "
                     f"{round(100 * paired['confidence'])}% lower bound {paired['lower_bound']:+.3f}")  # fmt: skip
    return "\n".join(lines)


def _report(out: Path, evals: dict[str, dict[str, Any]], k: int, trainer: Any, started: float) -> dict[str, Any]:
    from .callbacks import step_metrics
    from .evaluate import paired_gain

    figures: dict[str, Any] = {}
    for when in ("before", "after"):
        e = evals.get(when, {}).get("all")
        if e:
            figures[f"eval_{when}_avg"] = e[f"avg@{k}"]
            figures[f"eval_{when}_best"] = e[f"best@{k}"]
            figures[f"eval_{when}_success"] = e["success"]
            figures[f"eval_{when}_well_formed"] = e["well_formed_calls"]
    if "before" in evals and "after" in evals:
        figures["eval_delta_avg"] = round(figures["eval_after_avg"] - figures["eval_before_avg"], 4)
        figures["eval_delta_se"] = paired_gain(evals["before"]["task_avg"], evals["after"]["task_avg"])[1]
        figures["eval_delta_success"] = round(figures["eval_after_success"] - figures["eval_before_success"], 4)
        from .paired import paired_figures  # the gate's paired gain and 90% lower bound, per (task, sample)

        figures["eval_paired"] = paired_figures(out / "eval_before", out / "eval_after")
        for level in sorted(key for key in evals["after"] if key.startswith("level")):
            if level in evals["before"]:
                figures[f"eval_{level}_avg"] = [evals["before"][level][f"avg@{k}"], evals["after"][level][f"avg@{k}"]]
    rows = step_metrics(out / "metrics.jsonl")
    figures.update(
        steps=trainer.state.global_step,
        eval_samples=evals.get("after", evals.get("before", {})).get("all", {}).get("samples", 0),
        train_reward_first=rows[0]["reward"] if rows else None,
        train_reward_last=rows[-1]["reward"] if rows else None,
        zero_variance_share_mean=round(sum(r.get("zero_variance_share", 0) for r in rows) / len(rows), 4)
        if rows
        else None,
        step_s_mean=round(sum(r.get("step_s", 0) for r in rows) / len(rows), 2) if rows else None,
        final_model=trainer.policy.current,
        seed=trainer.args.seed,
        wall_s=round(time.perf_counter() - started, 1),
    )
    (out / "summary.json").write_text(json.dumps(figures, indent=2))
    return figures


def stopped_message(e: Interrupted, output_dir: str | Path, argv: list[str] | None = None) -> str:
    """What a stopped run prints: which step ended or was dropped, and the command that resumes (last line)."""
    name = signal.Signals(e.signum).name
    try:
        last = resume_checkpoint(output_dir, True)
    except ConfigError:
        last = None
    if last is None:
        from .model_card import launch_command

        return f"stopped by {name} before a checkpoint was saved; start again with: {launch_command(argv)}"
    step = _checkpoint_step(last)
    if e.finished:
        head = f"stopped by {name} after step {step}, saved in {last}"
    else:
        head = f"stopped by {name}; what came after {last} (step {step}) was dropped"
    return f"{head}\nresume with: {resume_command(argv)}"


def check_config_keys(argv: list[str]) -> None:
    """Name a ``--config`` YAML file's unknown keys with the nearest valid ones, before TRL's parser sees them
    (TRL says "add them to the dataclass, or set fail_with_unknown_args=False")."""
    import dataclasses
    import difflib

    from trl import ModelConfig

    from .config import EvolverGRPOConfig
    from .config_files import read_yaml_mapping

    path = next((a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else None)
                 for i, a in enumerate(argv) if a == "--config" or a.startswith("--config=")), None)  # fmt: skip
    if not path:
        return
    data = read_yaml_mapping(path, label=f"--config {path}")
    if "env" in data and not isinstance(data["env"], dict):
        raise ConfigError(f"{path}: `env:` is TRL's key for environment variables (a mapping); the environment "
                          f"to train on is `env_id:` (env_id: {data['env']}).")  # fmt: skip
    valid = {f.name for cls in (ScriptArguments, EvolverGRPOConfig, ModelConfig) for f in dataclasses.fields(cls)}
    unknown = [key for key in data if key not in valid and key != "env"]
    if unknown:
        hints = []
        for key in unknown:
            near = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
            hints.append(f"`{key}`" + (f" (did you mean `{near[0]}`?)" if near else ""))
        raise ConfigError(f"{path}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; "
                          "`python -m trainers.grpo --help` lists every field.")  # fmt: skip


def cli(argv: list[str] | None = None) -> dict[str, Any]:
    with StopHandler().installed() as stop:
        return _cli(argv, stop)


def _cli(argv: list[str] | None, stop: StopHandler) -> dict[str, Any]:
    output_dir = None
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("trainers").setLevel(logging.INFO)
    try:
        check_config_keys(list(sys.argv[1:] if argv is None else argv))
        try:
            script_args, cfg, model_args = make_parser().parse_args_and_config(argv)
        except ValueError as e:  # TRL's own config checks
            raise ConfigError(str(e)) from None
        from .model_card import launch_command

        output_dir = cfg.output_dir
        return main(script_args, cfg, model_args, command=launch_command(argv), stop=stop)
    except EvolverError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except Interrupted as e:
        from accelerate import PartialState

        if output_dir is not None and PartialState().is_main_process:
            print(stopped_message(e, output_dir, argv), file=sys.stderr)
        raise SystemExit(128 + e.signum) from None


if __name__ == "__main__":
    cli()

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

This module is the command: its arguments and ``main``, whose named steps follow the numbered list above. What
other modules use lives in libraries beside it: ``trainers.training_tasks`` (tasks, dataset, evaluation
rollouts), ``trainers.run_checks`` (model and ``init_adapter`` checks), ``trainers.run_control`` (checkpoints,
stopping, resuming) and ``trainers.run_report`` (the figures and tables a finished run writes).
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph_evolver.errors import ConfigError, EvolverError
from langgraph_evolver.types import Task

from .model_card import launch_command
from .run_checks import check_init_adapter, check_model, check_template, init_adapter_model, lora_modules
from .run_control import Interrupted, StopHandler, checkpoint_step, resume_checkpoint, resume_command, stopped_message
from .run_report import attribution_report, final_figures, gain_table
from .training_tasks import (
    evaluate_held_out,
    load_tasks,
    mix_synthetic,
    mixing_epochs,
    rollout_environment_factory,
    task_dataset,
)

# the names tests and callers read from the command module itself (the libraries above hold them)
__all__ = ["Interrupted", "ScriptArguments", "StopHandler", "cli", "main", "make_parser", "mix_synthetic",
           "mixing_epochs", "resume_checkpoint", "resume_command", "stopped_message", "task_dataset"]  # fmt: skip

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


def main(script_args: ScriptArguments, cfg: Any, model_args: Any, *, command: str | None = None,
         stop: StopHandler | None = None) -> dict[str, Any]:  # fmt: skip
    """Train (see the module docstring); returns the final figures. ``command`` goes into the model card;
    ``stop`` (installed by ``cli``) turns SIGTERM / Ctrl-C into a stop at the end of a step."""
    from accelerate import PartialState

    from .sync import LoraSync

    started = time.perf_counter()
    state = PartialState()
    out = Path(cfg.output_dir)
    model_path, init_adapter = _check_run(cfg, model_args)
    train_tasks, eval_tasks = _run_tasks(script_args, cfg, model_args, state)
    dataset = _training_dataset(cfg, train_tasks)
    checkpoint = resume_checkpoint(out, cfg.resume_from_checkpoint, remove_incomplete=state.is_main_process)
    init_model = None
    if init_adapter is not None:  # loaded now: an adapter of another base model stops the run before the server starts
        init_model = init_adapter_model(model_path, cfg)
        model_args = copy.copy(model_args)  # the model card states the shape trained: the adapter's
        model_args.lora_r, model_args.lora_alpha = init_adapter.get("r"), init_adapter.get("lora_alpha")
        model_args.lora_target_modules = lora_modules(init_adapter.get("target_modules"))
    _forget_later_steps(out, checkpoint, state)
    server, base_url, base_model = _start_policy(cfg, model_path, out, state)
    figures: dict[str, Any] = {}
    # One event loop for the evaluations and every training rollout: a user's graph may hold async clients of
    # its own (a router model), bound to the loop they were first used on; asyncio.run per evaluation closed it.
    loop = asyncio.new_event_loop()
    try:
        out.mkdir(parents=True, exist_ok=True)
        held_out = _HeldOut(eval_tasks, script_args.eval_k, base_url, cfg, out, loop, script_args.eval_seed)
        evals: dict[str, dict[str, Any]] = {}
        if script_args.eval_before and state.is_main_process:
            evals["before"] = _evaluate_start(held_out, base_model)
        state.wait_for_everyone()
        stop = stop or StopHandler()
        card = {"cfg": cfg, "model_args": model_args, "base_model": str(model_args.model_name_or_path),
                "command": command or launch_command(), "evals": evals, "k": held_out.k,
                "eval_split": script_args.eval_split, "train_tasks": len(train_tasks)}  # fmt: skip
        trainer = _make_trainer(cfg, model_args, model_path, init_model, dataset, base_url, base_model, out,
                                stop, loop, card)  # fmt: skip
        final_model = _train(trainer, cfg, checkpoint, stop, out)
        if script_args.eval_after and state.is_main_process:
            print(f"evaluating the trained policy ({final_model}) …", file=sys.stderr)
            evals["after"] = held_out.evaluate(final_model, "eval_after")
        state.wait_for_everyone()
        if state.is_main_process:
            figures = _finish(out, evals, trainer, card, started, script_args.eval_split)
        if isinstance(trainer.policy, LoraSync) and state.is_main_process and not server:
            trainer.policy.close()
    finally:
        if server is not None:
            server.stop()
        loop.close()
        _leave_process_group()
    return figures


def _leave_process_group() -> None:
    """Destroy the process group a distributed launch made, before the interpreter exits and tears it down in no
    set order: a fresh-clone test run in session 74 had a ZeRO-3 rank abort after its last step ("terminate called
    without an active exception"), the launcher then stopping the other rank, and the run exiting 1."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _check_run(cfg: Any, model_args: Any) -> tuple[Path, dict[str, Any] | None]:
    """Step 1's checks of the model, adapter, sync mode and judge: the local model path and ``init_adapter``'s
    config (None without one). Nothing is written before they pass."""
    from .config import lora_dropout_warning
    from .sync import FullSync

    model_path = check_model(model_args)
    check_template(model_path, cfg)
    init_adapter = check_init_adapter(cfg, model_args)
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
    return model_path, init_adapter


def _run_tasks(script_args: ScriptArguments, cfg: Any, model_args: Any, state: Any) -> tuple[list[Task], list[Task]]:
    """The training tasks (with ``task_store``'s synthesized ones mixed in) and the held-out ones; the environment
    started once on the first task (a server that cannot start: one error before any rollout)."""
    train_tasks, eval_tasks = load_tasks(cfg, (cfg.task_split, cfg.task_limit or None),
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
    if not cfg.env_url and state.is_main_process:
        from .evaluate import preflight

        preflight(rollout_environment_factory(cfg), train_tasks[0])
    if (script_args.eval_before or script_args.eval_after) and not eval_tasks:
        raise ConfigError(f"No held-out tasks in split {script_args.eval_split!r}; set eval_split or eval_before/"
                          "eval_after: false.")  # fmt: skip
    return train_tasks, eval_tasks


def _training_dataset(cfg: Any, train_tasks: list[Task]) -> Any:
    """The training rows (tasks repeated by ``level_weights``); a ConfigError when one generation needs more."""
    from .config import parse_level_weights

    dataset = task_dataset(train_tasks, parse_level_weights(cfg.level_weights))
    per_step = cfg.generation_batch_size // cfg.num_generations
    if len(dataset) < per_step:  # TRL's sampler drops an incomplete batch: the run would take 0 steps
        raise ConfigError(f"{len(dataset)} training rows (tasks after level_weights) but one generation takes "
                          f"{per_step} tasks x num_generations={cfg.num_generations} (generation_batch_size="
                          f"{cfg.generation_batch_size}): add tasks, or lower per_device_train_batch_size / "
                          "steps_per_generation so one step needs at most that many tasks.")  # fmt: skip
    return dataset


def _forget_later_steps(out: Path, checkpoint: Path | None, state: Any) -> None:
    """The steps after the checkpoint are redone: their rows of ``metrics.jsonl`` and trajectory files go."""
    from .callbacks import drop_steps_after

    if state.is_main_process:
        start_step = checkpoint_step(checkpoint) if checkpoint else 0
        rows, files = drop_steps_after(out, start_step or 0)
        if rows or files:
            logger.info("starting at step %d: dropped %d rows of metrics.jsonl and %d trajectory files of later "
                        "steps (a run stopped after its last checkpoint)", start_step, rows, files)  # fmt: skip
    state.wait_for_everyone()


def _start_policy(cfg: Any, model_path: Path, out: Path, state: Any) -> tuple[Any, str, str]:
    """Step 2: the policy endpoint (``policy_base_url``'s, else a local server started on the main process, which
    the caller stops), its URL and base model name on every rank."""
    from accelerate.utils import broadcast_object_list

    from .serving import PolicyServerProcess, check_endpoint

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
                                     extra_args=["--allow-template-without-tools"] * cfg.allow_template_without_tools
                                     + ["--strict-tools"] * cfg.policy_server_strict_tools)  # fmt: skip
        print(f"starting the policy server on {model_path} …", file=sys.stderr)
        try:
            server.start()
        except BaseException:  # Ctrl-C while it loads: stop it here, not at our exit
            server.stop()
            raise
        base_url, base_model = server.base_url, server.model_name
    shared = [base_url, base_model]
    broadcast_object_list(shared)
    return server, shared[0], shared[1]


@dataclass
class _HeldOut:
    """The held-out evaluation of one run: its tasks, ``k`` samples each, against the run's endpoint."""

    tasks: list[Task]
    k: int
    base_url: str
    cfg: Any
    out: Path
    loop: asyncio.AbstractEventLoop
    seed: int | None = None  # common to both evaluations: paired per (task, sample)

    def evaluate(self, model: str, folder: str) -> dict[str, Any]:
        return evaluate_held_out(self.tasks, base_url=self.base_url, model=model, k=self.k, cfg=self.cfg,
                                 out=self.out / folder, loop=self.loop, seed=self.seed)  # fmt: skip


def _evaluate_start(held_out: _HeldOut, base_model: str) -> dict[str, Any]:
    """Step 2's evaluation of the starting policy: the base model, or ``init_adapter`` served under a name of its
    own meanwhile."""
    from .sync import load_adapter, unload_adapter

    cfg = held_out.cfg
    print(f"evaluating the starting policy on {len(held_out.tasks)} held-out tasks x {held_out.k} …", file=sys.stderr)
    start = base_model
    if cfg.init_adapter:
        start = load_adapter(held_out.base_url, cfg.init_adapter, f"{base_model}-init-adapter")
    try:
        return held_out.evaluate(start, "eval_before")
    finally:
        if start != base_model:
            unload_adapter(held_out.base_url, start)


def _make_trainer(cfg: Any, model_args: Any, model_path: Path, init_model: Any, dataset: Any, base_url: str,
                  base_model: str, out: Path, stop: StopHandler, loop: asyncio.AbstractEventLoop,
                  card: dict[str, Any]) -> Any:  # fmt: skip
    """Step 3's trainer, wired to the endpoint (its weight sync), the stop handler and the metrics log."""
    from transformers import AutoTokenizer
    from transformers.trainer_callback import ProgressCallback
    from trl import get_peft_config

    from langgraph_evolver.tracing import langsmith_callbacks

    from .callbacks import MetricsCallback, StopOnRequest
    from .grpo_trainer import EvolverGRPOTrainer
    from .sync import DiskSync, FullSync, LoraSync

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    stop.callback = StopOnRequest(lambda: stop.signum is not None)
    callbacks = [MetricsCallback(out / "metrics.jsonl"), stop.callback]
    # a PeftModel (init_adapter) is trained as it is, and published before the first rollout
    trainer = EvolverGRPOTrainer(str(model_path) if init_model is None else init_model, cfg, dataset,
                                 processing_class=tokenizer, policy_base_url=base_url,
                                 peft_config=get_peft_config(model_args) if init_model is None else None,
                                 env_factory=rollout_environment_factory(cfg),
                                 rollout_callbacks=langsmith_callbacks(project="langgraph-evolver-train"),
                                 callbacks=callbacks, event_loop=loop)  # fmt: skip
    trainer.remove_callback(ProgressCallback)
    trainer.card_info = card
    if trainer.accelerator.is_main_process:
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
    return trainer


def _train(trainer: Any, cfg: Any, checkpoint: Path | None, stop: StopHandler, out: Path) -> str:
    """Step 3: train (from ``checkpoint``'s weights, published before the first rollout), publish the last step's
    weights and save ``final/``; the served name of the trained policy."""
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    if stop.signum is not None:  # stopped at a step's end on request: that step's checkpoint is saved
        raise Interrupted(stop.signum, finished=True)
    if trainer.state.global_step == 0:
        raise EvolverError("Training took no optimizer step, so there is nothing to save or evaluate: check "
                           "max_steps / num_train_epochs and that the dataset yields a batch.")  # fmt: skip
    trainer._sync_policy()  # the last optimizer step's weights, for the evaluation after
    final_model = trainer.policy.current
    trainer.save_model(str(out / "final"))
    return final_model


def _finish(out: Path, evals: dict[str, dict[str, Any]], trainer: Any, card: dict[str, Any], started: float,
            split: str) -> dict[str, Any]:  # fmt: skip
    """Step 4's outputs on the main process: model cards, ``summary.json``, the reward curve, the attribution page,
    LangSmith experiments, the gain table, and the JSON line of figures."""
    from langgraph_evolver.tracing import langsmith_enabled

    from .callbacks import plot_reward_curve
    from .model_card import write_model_card

    cfg, k = card["cfg"], card["k"]
    for where in (out / "README.md", out / "final" / "README.md"):  # ours, over TRL's and PEFT's placeholders
        write_model_card(where, step=trainer.state.global_step, final=True, **card)
    figures = final_figures(out, evals, k, trainer, started)
    plot_reward_curve(out / "metrics.jsonl", out / "reward_curve.png",
                      eval_before=evals.get("before", {}).get("all", {}).get(f"avg@{k}"),
                      eval_after=evals.get("after", {}).get("all", {}).get(f"avg@{k}"), k=k)  # fmt: skip
    if cfg.attribution_settings.enabled:
        report = attribution_report(out, figures)
        figures["attribution_report"] = str(report)
    if langsmith_enabled() and evals:  # held-out tasks as a LangSmith dataset, one experiment per evaluation
        from langgraph_evolver.tracing import write_evaluation_folders

        figures["langsmith_experiments"] = write_evaluation_folders(
            {name: out / f"eval_{name}" for name in evals}, timeout_s=60,
            dataset_name=f"{cfg.env_id}-{split}")  # fmt: skip
    if "eval_delta_avg" in figures:
        print(gain_table(figures, evals["after"]["tasks"], k, split=split), file=sys.stderr)
    print(json.dumps(figures))
    return figures


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

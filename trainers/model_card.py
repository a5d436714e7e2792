"""The run's model card (``README.md`` in ``output_dir`` and ``final/``): what was trained, on what, how
well it did before and after, and the command that made it.

TRL writes a generic card (base model ``None`` for a local path, a sample question unrelated to the
run); this one is written from the run's own config and evaluation instead.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

__all__ = ["launch_command", "render_model_card", "write_model_card"]


def launch_command(argv: list[str] | None = None) -> str:
    """The command line that started this run (``python -m trainers.grpo ...``), shell-quoted."""
    args = sys.argv[1:] if argv is None else argv
    return shlex.join(["python", "-m", "trainers.grpo", *args])


def _row(name: str, e: dict[str, Any] | None, k: int) -> str:
    if not e:
        return f"| {name} | – | – | – | – |"
    return (f"| {name} | {e[f'avg@{k}']:.3f} | {e[f'best@{k}']:.3f} | {e['success']:.3f} | "
            f"{e['well_formed_calls']:.3f} |")  # fmt: skip


def render_model_card(*, cfg: Any, model_args: Any, base_model: str, step: int, command: str,
                      evals: dict[str, dict[str, Any]] | None = None, k: int = 4, eval_split: str = "test",
                      train_tasks: int | None = None, final: bool = True) -> str:  # fmt: skip
    """The card's Markdown (a YAML header, then the sections)."""
    lora = bool(getattr(model_args, "use_peft", False))
    name = Path(cfg.output_dir).name
    tags = ["langgraph-evolver", "grpo", "trl", "agent", "tool-use", *(["lora"] if lora else [])]
    if lora:
        weights = (f"a LoRA adapter (r={model_args.lora_r}, alpha={model_args.lora_alpha}, target modules "
                   f"{', '.join(model_args.lora_target_modules or []) or 'PEFT default'}) on top of the base model; "
                   f"load it with `PeftModel.from_pretrained(base, \"{cfg.output_dir}/final\")`, or serve it with "
                   "vLLM's `--enable-lora --lora-modules`")  # fmt: skip
        if getattr(cfg, "init_adapter", None):
            weights += f", trained on from the adapter `{cfg.init_adapter}` (not from a fresh one)"
    else:
        weights = "the full fine-tuned weights (`AutoModelForCausalLM.from_pretrained` on `final/`)"
    mechanisms = [m for m, on in (("self-attributing (ADCA step credit)", cfg.attribution_settings.enabled),
                                  ("self-navigating (experience-guided rollouts)", cfg.navigation_settings.enabled),
                                  ("self-questioning (synthetic tasks)", bool(cfg.task_store))) if on]  # fmt: skip
    rollouts = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps
    env_args = f" with `{cfg.env_args}`" if cfg.env_args else ""
    lines = [
        "---",
        f"base_model: {base_model}",
        f"library_name: {'peft' if lora else 'transformers'}",
        "tags:",
        *[f"- {t}" for t in tags],
        "---",
        "",
        f"# {name}",
        "",
        f"`{base_model}` trained with GRPO on LangGraph agent rollouts by langgraph-evolver "
        "(`python -m trainers.grpo`): every rollout is a run of the "
        "agent against a fresh environment, every LLM call a training transition with the endpoint's exact "
        "token ids and logprobs.",
        "",
        "## Model",
        "",
        f"- **Base model:** `{base_model}`",
        f"- **Weights:** {weights}.",
        f"- **Status:** {'finished' if final else 'in training'} after {step} optimizer steps.",
        "",
        "## Environment and tasks",
        "",
        f"- **Environment:** `{cfg.env_id}`{env_args}, split `{cfg.task_split}`"
        + (f", {train_tasks} training tasks" if train_tasks is not None else "")
        + (f", level weights `{cfg.level_weights}`" if cfg.level_weights else "")
        + (f", synthetic share {cfg.synthetic_ratio} from `{cfg.task_store}`" if cfg.task_store else "")
        + ".",
        f"- **Agent:** `{cfg.agent or 'graphs/agent.py (ours)'}`, context template `{cfg.context_template}`, "
        f"at most {cfg.max_turns} LLM calls per rollout, {cfg.max_completion_length} tokens per call.",
        f"- **Reward:** the environment's score minus {cfg.malformed_call_penalty} per malformed tool call.",
        "",
        "## Training",
        "",
        f"- {cfg.num_generations} rollouts per task, {rollouts} rollouts per optimizer step and process; "
        f"loss `{cfg.loss_type}`, clip [{cfg.epsilon}, {cfg.epsilon_high}], beta {cfg.beta}, learning rate "
        f"{cfg.learning_rate}, temperature {cfg.temperature}.",
        f"- Weights reached the policy endpoint after every step by `{cfg.sync_mode}` sync"
        + (f" ({cfg.full_sync_transport})" if cfg.sync_mode == "full" else "")
        + f"; importance correction `{cfg.importance_correction}`.",
        f"- Mechanisms: {', '.join(mechanisms) if mechanisms else 'none (plain GRPO)'}.",
        "",
        f"## Evaluation (held-out split `{eval_split}`, {k} samples per task)",
        "",
    ]
    evals = evals or {}
    start = getattr(cfg, "init_adapter", None) or base_model  # what eval_before evaluated
    if evals:
        samples = (evals.get("after") or evals.get("before") or {}).get("all", {}).get("samples")
        lines += [
            f"| policy | avg@{k} | best@{k} | success | well-formed calls |",
            "| --- | --- | --- | --- | --- |",
            _row(f"before (`{start}`)", evals.get("before", {}).get("all"), k),
            _row("after (this model)", evals.get("after", {}).get("all"), k),
            "",
            f"{samples} samples per row; `eval_before/` and `eval_after/` hold the trajectories and per-level figures.",
        ]
    else:
        lines.append("Not evaluated yet (the evaluation runs before and after training).")
    lines += [
        "",
        "## Reproduce",
        "",
        "```bash",
        command,
        "```",
        "",
        "Per-step metrics are in `metrics.jsonl` (and TensorBoard under `runs/`), the reward curve in "
        "`reward_curve.png`.",
        "",
    ]
    return "\n".join(lines)


def write_model_card(path: str | Path, **kwargs: Any) -> Path:
    """Render the card (``render_model_card``'s keywords) into ``path``."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_model_card(**kwargs))
    return out

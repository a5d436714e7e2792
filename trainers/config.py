"""``EvolverGRPOConfig``: TRL's ``GRPOConfig`` plus what LangGraph rollouts need.

Every field has help text (``python -m trainers.grpo --help``); a YAML file passed with
``--config`` sets any of them and the command line overrides the file. ``__post_init__`` rejects
combinations that cannot work and says how to fix them.

Batch arithmetic, as in TRL: one optimizer step consumes ``generation_batch_size`` rollouts
(``per_device_train_batch_size x processes x steps_per_generation``), i.e.
``generation_batch_size / num_generations`` tasks with ``num_generations`` rollouts each. Each
rollout yields one or more training rows (one per LLM call, or fewer when calls are merged);
the rows of one generation batch are cut into ``steps_per_generation`` micro-batches of similar
length. So ``per_device_train_batch_size`` counts *rollouts*, not rows: memory per micro-batch
grows with turns per rollout; raise ``gradient_accumulation_steps`` (= more, smaller
micro-batches) if a micro-batch does not fit.

Why this module stays over 500 lines: it is one config dataclass whose fields' help texts are
``--help`` and whose ``__post_init__`` checks need every field; split, neither would read whole.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trl import GRPOConfig

from langgraph_evolver.errors import ConfigError

__all__ = [
    "AttributionSettings",
    "EvolverGRPOConfig",
    "NavigationSettings",
    "lora_dropout_warning",
    "parse_level_weights",
]

# TRL 1.16 still sets transformers' deprecated `gradient_checkpointing` alias; the warning is not
# actionable by our users.
warnings.filterwarnings("ignore", message=r".*`(is_)?gradient_checkpointing` is deprecated", category=FutureWarning)


def parse_level_weights(spec: str | dict | None) -> dict[int, float]:
    """``"1:1,2:2,3:3"`` or ``{1: 1, 2: 2, 3: 3}`` → ``{level: weight}`` (empty = uniform)."""
    if spec is None or spec == "" or spec == {}:
        return {}
    if isinstance(spec, dict):
        items = list(spec.items())
    else:
        try:
            items = [tuple(part.split(":")) for part in str(spec).split(",") if part.strip()]
        except ValueError:
            items = []
    try:
        weights = {int(k): float(v) for k, v in items}
    except (TypeError, ValueError):
        weights = {}
    if not weights or any(w < 0 for w in weights.values()) or not any(weights.values()):
        raise ConfigError(f"level_weights={spec!r} is not valid: write e.g. '1:1,2:2,3:3' (level:weight, weights >= 0, "
                          "at least one > 0).")  # fmt: skip
    return weights


def lora_dropout_warning(cfg: Any, model_args: Any) -> str | None:
    """Why ``lora_dropout > 0`` is a bad idea here, or None when no dropout reaches the trainer's logprobs.

    Dropout is on in the trainer's forward passes (train mode) and off at the endpoint, so the trainer's
    logprob of a sampled token differs from the server's by noise (a gap up to 0.11 measured), in the loss's
    ratios and in ``policy/logp_gap_mean``. None with ``disable_dropout`` (TRL zeroes every dropout, LoRA's
    too), without LoRA, or with ``init_adapter`` (its dropout is zeroed when it loads: ``_init_adapter_model``).
    """
    p = float(getattr(model_args, "lora_dropout", 0.0) or 0.0)
    if p <= 0.0 or not getattr(model_args, "use_peft", False) or cfg.disable_dropout or cfg.init_adapter:
        return None
    return (
        f"lora_dropout={p} drops LoRA activations in the trainer's forward passes but not at the endpoint, so "
        "the trainer's logprobs are noisy against the server's (gaps up to 0.11 per token measured) and so are "
        "the loss's ratios: set lora_dropout: 0.0 (trainers.grpo's default), or disable_dropout: true."
    )


def _toggle_mapping(value: dict | str | bool | None, name: str, example: str) -> dict | None:
    """A mechanism's config value → its keys (``{}``: on with defaults) or ``None`` (off)."""
    if value is None or value == "" or value is False:
        return None
    if value is True or (isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "on")):
        return {}
    if isinstance(value, str) and value.strip().lower() in ("false", "0", "no", "off", "none", "null"):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{name}={value!r} is neither true/false nor JSON ({e}); write e.g. "
                              f"'{example}'.") from None  # fmt: skip
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a mapping or true/false, got {type(value).__name__}.")
    return value


@dataclass(frozen=True)
class NavigationSettings:
    """The parsed ``navigation`` field of ``EvolverGRPOConfig`` (self-navigating)."""

    enabled: bool = False
    eta: float = 0.5
    """Share of each group's rollouts guided by retrieved experience (round(eta * G))."""
    top_k: int = 5
    min_score: float | None = None
    mode: str = "strip"
    boost_epsilon_high: float | None = 0.6
    extractor: str = "rules"
    extractor_options: dict = field(default_factory=dict)
    update_every: int = 1
    pool_dir: str | None = None
    merge_threshold: float = 0.9

    @classmethod
    def parse(cls, value: dict | str | bool | None) -> NavigationSettings:
        value = _toggle_mapping(value, "navigation", '{"enabled": true, "eta": 0.5, "mode": "strip"}')
        if value is None:
            return cls()
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(value) - known)
        if unknown:
            raise ConfigError(f"navigation has unknown keys {unknown}; valid keys: {sorted(known)}.")
        s = cls(**{"enabled": True, **value})
        problems = []
        if not 0.0 <= s.eta <= 1.0:
            problems.append(f"navigation.eta={s.eta} must be in [0, 1] (0.5 published: half of each group guided).")
        if s.top_k < 1:
            problems.append(f"navigation.top_k={s.top_k} must be >= 1.")
        if s.mode not in ("strip", "keep"):
            problems.append(f"navigation.mode={s.mode!r} must be 'strip' (train without the advice) or 'keep'.")
        if s.boost_epsilon_high is not None and s.boost_epsilon_high < 0:
            problems.append("navigation.boost_epsilon_high must be >= 0 (0.6 published), or null for no boosting.")
        if s.update_every < 1:
            problems.append("navigation.update_every must be >= 1 (steps between pool updates).")
        if problems:
            raise ConfigError(" ".join(problems))
        return s


@dataclass(frozen=True)
class AttributionSettings:
    """The parsed ``attribution`` field of ``EvolverGRPOConfig``."""

    enabled: bool = False
    alpha: float = 0.1
    judge: str = "reference"
    alpha_decay: float | None = None
    cutoff: int | None = None
    judge_options: dict = field(default_factory=dict)
    process_standardization: str = "trajectory"

    @classmethod
    def parse(cls, value: dict | str | bool | None) -> AttributionSettings:
        value = _toggle_mapping(value, "attribution", '{"enabled": true, "alpha": 0.1, "judge": "reference"}')
        if value is None:
            return cls()
        known = {"enabled", "alpha", "judge", "alpha_decay", "cutoff", "judge_options", "process_standardization"}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ConfigError(f"attribution has unknown keys {unknown}; valid keys: {sorted(known)}.")
        settings = cls(**{"enabled": True, **value})
        if not 0.0 <= settings.alpha <= 1.0:
            raise ConfigError(f"attribution.alpha={settings.alpha} must be in [0, 1] (0.1-0.2 published; 0.3 "
                              "overfits the judge).")  # fmt: skip
        if settings.alpha_decay is not None and not 0.0 < settings.alpha_decay <= 1.0:
            raise ConfigError(f"attribution.alpha_decay={settings.alpha_decay} must be in (0, 1].")
        if settings.process_standardization not in ("trajectory", "pooled"):
            raise ConfigError(f"attribution.process_standardization={settings.process_standardization!r} must be "
                              "'trajectory' (AgentEvolver's: mean/std of each rollout's average label) or 'pooled' "
                              "(all steps of the group).")  # fmt: skip
        if not isinstance(settings.judge_options, dict):
            raise ConfigError("attribution.judge_options must be a mapping of LLMJudge keyword arguments.")
        return settings


@dataclass
class EvolverGRPOConfig(GRPOConfig):
    r"""GRPO on LangGraph agent rollouts. TRL's fields keep their meaning; the ones below are ours.

    Defaults that differ from TRL: ``loss_type="dapo"``, ``epsilon_high=0.28`` (DAPO's clip-higher),
    ``beta=0.001``, ``temperature=1.0`` (pure sampling: the behaviour logprobs must be those of
    the sampled distribution), ``max_completion_length=128`` tokens per LLM call,
    ``logging_steps=1``, ``bf16`` only when a GPU is present, and TensorBoard logging.
    """

    # -- environment and tasks ---------------------------------------------------------------
    env_id: str = field(
        default="sandbox",
        metadata={
            "help": "Environment registry id or dotted path (named env_id: TrlParser reserves the YAML key `env` "
            "for environment variables)."
        },
    )
    env_args: dict | str | None = field(
        default=None, metadata={"help": "Keyword arguments for the environment, a dict or a JSON string."}
    )
    env_url: str | None = field(
        default=None,
        metadata={"help": "Run environments through the HTTP environment service at this URL instead of in-process."},
    )
    task_split: str = field(default="train", metadata={"help": "Split of the environment's tasks to train on."})
    task_limit: int | None = field(default=None, metadata={"help": "Train on only the first N tasks of the split."})
    level_weights: str | None = field(
        default=None,
        metadata={
            "help": "Sample tasks by difficulty level, e.g. '1:1,2:2,3:3' (repeats tasks of a level in the "
            "dataset; 0 drops a level). Default: every task once."
        },  # fmt: skip
    )
    # -- the agent (drop-in) ------------------------------------------------------------------
    agent: str | None = field(
        default=None,
        metadata={
            "help": "Your agent, 'my_pkg.agent:build_agent': a build(model, tools) -> compiled graph factory, a "
            "compiled create_agent graph with EvolverMiddleware, or an AgentSpec. Default: our reference agent "
            "(graphs/agent.py)."
        },
    )
    agent_input: str | None = field(
        default=None,
        metadata={"help": "'my_pkg:to_input': (task) or (task, observation) -> the graph's input. Default: "
                  '{"messages": [("user", task.query)]} (our agent: the environment\'s opening messages).'},
    )  # fmt: skip
    reward_fn: str | None = field(
        default=None,
        metadata={"help": "'my_pkg:score': (task, final_state, trajectory) -> float in [0, 1], instead of the "
                  "environment's evaluate()."},
    )  # fmt: skip
    # -- rollouts ------------------------------------------------------------------------------
    rollout_concurrency: int = field(default=64, metadata={"help": "Agent graphs running at once during rollouts."})
    max_turns: int = field(default=10, metadata={"help": "LLM calls per rollout before it is stopped."})
    repeat_guard: bool = field(default=False, metadata={"help": "Our agent notes a repeated call's unchanged result."})
    context_template: str = field(
        default="causal",
        metadata={"help": "How the agent's history becomes each prompt: causal, reasoning, sliding, managing (or a "
                  "registered name)."},
    )  # fmt: skip
    context_options: dict | str | None = field(
        default=None,
        metadata={"help": "The template's options, a dict or JSON: sliding {window: 2}; managing {manager: "
                  "policy|rules|<model>, trigger_tokens: 768, protect_last: 1}; reasoning {hint: ...}."},
    )  # fmt: skip
    malformed_call_penalty: float = field(
        default=0.1,
        metadata={
            "help": "Subtracted from a rollout's reward for each malformed tool call (unparseable, unknown "
            "tool, bad arguments). Without it GRPO on a tiny model lets well-formed calls collapse."
        },  # fmt: skip
    )
    policy_failure_reward: float = field(
        default=0.0,
        metadata={
            "help": "The reward (before the malformed-call penalty) of a rollout that failed because of the policy "
            "itself: its prompt outgrew the context window (the endpoint's 400) or the episode ran away (graph "
            "recursion limit). Such rollouts are scored and trained on; failures outside the policy (endpoint or "
            "environment down) are left out of their group and counted."
        },  # fmt: skip
    )
    allow_template_without_tools: bool = field(
        default=False,
        metadata={
            "help": "Train a model whose chat template drops the tools it is given (a warning instead of the error). "
            "Such a model never sees its tools, so it can only guess calls: install a tool template instead "
            "(`python -m trainers.models template <dir> --name compact`)."
        },  # fmt: skip
    )
    max_failed_rollout_share: float = field(
        default=0.5,
        metadata={
            "help": "Stop the run (non-zero exit, the endpoint's error in the last lines) when more than this share "
            "of one step's rollouts failed outside the policy (the endpoint answered 500, the environment died): "
            "training on what is left would learn from a broken setup. The checkpoints saved so far stay; nothing "
            "of the failed step is trained, saved, published or evaluated. 1.0 never stops."
        },  # fmt: skip
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata={
            "help": "Replace each step's groups without reward variance with fresh tasks of the training pool "
            "before the step (DAPO's dynamic sampling; trainers/dynamic_sampling.py)."
        },  # fmt: skip
    )
    max_refill_rounds: int = field(default=2, metadata={"help": "Refill rounds per step with dynamic_sampling."})
    merge_prefix_transitions: bool = field(
        default=True,
        metadata={
            "help": "Merge consecutive LLM calls of a rollout whose prompts extend each other (causal template) "
            "into one training row, so the shared prefix is computed once."
        },  # fmt: skip
    )
    max_sample_length: int | None = field(
        default=None, metadata={"help": "Longest merged training row in tokens (default: the model's window)."}
    )
    save_trajectories: int = field(
        default=16, metadata={"help": "Trajectories per step written to trajectories/step_N.jsonl (0 = none)."}
    )
    # -- the policy endpoint -------------------------------------------------------------------
    policy_base_url: str | None = field(
        default=None,
        metadata={
            "help": "OpenAI-compatible endpoint serving the policy (…/v1), e.g. vLLM. Default: the trainer "
            "starts the local CPU policy server on the model and stops it at the end."
        },  # fmt: skip
    )
    policy_model: str | None = field(
        default=None, metadata={"help": "The base model's name at the endpoint (default: the first it lists)."}
    )
    policy_server_threads: int | None = field(
        default=None, metadata={"help": "Torch threads of the local policy server (default: its own)."}
    )
    policy_server_dtype: str = field(
        default="auto",
        metadata={
            "help": "What the local policy server computes in (its --dtype): auto (default: bf16 on a CPU with "
            "amx_bf16/avx512_bf16 for a 20M+ parameter model, as train_dtype auto; measured faster), float32 or "
            "bfloat16. When it differs from the trainer's dtype, importance_correction left unset turns TIS on.",
            "choices": ["auto", "float32", "bfloat16"],
        },  # fmt: skip
    )
    train_dtype: str = field(
        default="auto",
        metadata={
            "help": "What the trainer's forward/backward computes in on CPU: float32, bfloat16 (autocast; weights, "
            "LoRA and optimizer state stay fp32) or auto (bf16 on a CPU with amx_bf16/avx512_bf16 for a 20M+ "
            "parameter model, as the policy server: measured faster there, docs/real-model.md). On GPU the bf16 "
            "flag governs.",
            "choices": ["auto", "float32", "bfloat16"],
        },  # fmt: skip
    )
    policy_server_max_batch_size: int = field(
        default=64, metadata={"help": "Sequences the local policy server decodes together."}
    )
    policy_server_strict_tools: bool = field(
        default=False, metadata={"help": "Strict tool calls on the local server (`--strict-tools`, docs)."}
    )
    sync_mode: str = field(
        default="lora",
        metadata={
            "help": "How new weights reach the endpoint after each step: 'lora' (save the adapter, load it under "
            "a new versioned name via the runtime LoRA API) or 'full' (full fine-tuning, use_peft: false; the "
            "transport is full_sync_transport).",
            "choices": ["lora", "full"],
        },  # fmt: skip
    )
    max_tokens_per_microbatch: int | None = field(
        default=None,
        metadata={
            "help": "Token budget of one forward/backward pass (rows x padded length). Rows are packed into "
            "sub-batches under it (length-sorted buckets, shuffled across micro-batches), each micro-batch runs "
            "its sub-batches one after another with the gradients accumulated, and every rank runs the same "
            "number. None: steps_per_generation micro-batches of equal row counts, whatever their length."
        },  # fmt: skip
    )
    importance_correction: str | None = field(
        default=None,
        metadata={
            "help": "Trainer/inference mismatch correction (default: 'tis' when the local policy server computes in "
            "another precision than the trainer, policy_server_dtype vs train_dtype; 'none' otherwise). "
            "'none': the endpoint's behaviour logprobs are the old "
            "logprobs (mismatch and staleness are one number). 'tis' (veRL/TRL): the old logprobs come from a "
            "no-grad trainer forward at generation time, the clip acts on pi/pi_old, and the loss is weighted "
            "per token by min(pi_old/pi_behaviour, tis_cap); transitions stripped by self-navigating keep the "
            "behaviour logprobs as old and weight 1. Use 'tis' with vLLM in bf16.",
            "choices": ["none", "tis"],
        },  # fmt: skip
    )
    tis_cap: float = field(
        default=2.0, metadata={"help": "The truncation C of the importance weight min(pi_old/pi_behaviour, C)."}
    )
    logp_gap_warning: float = field(
        default=0.1,
        metadata={"help": "Warn when policy/logp_gap_mean (|trainer - endpoint| logprob per sampled token on fresh "
                  "rollouts) exceeds this: the endpoint serves other weights or samples differently."},
    )  # fmt: skip
    full_sync_transport: str = field(
        default="disk",
        metadata={
            "help": "How sync_mode=full reaches the endpoint: 'disk' (save_pretrained into output_dir/"
            "served_weights, the endpoint reloads it through /update_weights_from_disk: our policy server, "
            "SGLang; CPU or GPU, the directory must be readable by the endpoint) or 'nccl' (TRL's vLLM client "
            "streams the weights into `trl vllm-serve`; GPU, use_vllm: true, vllm_mode: server).",
            "choices": ["disk", "nccl"],
        },  # fmt: skip
    )
    keep_adapter_versions: int = field(
        default=1, metadata={"help": "Adapter versions kept loaded at the endpoint (older ones are unloaded)."}
    )
    init_adapter: str | None = field(
        default=None,
        metadata={"help": "A PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors, e.g. an "
                  "earlier run's output_dir/final) to start training from, instead of a fresh adapter; its r, alpha "
                  "and target modules are used (lora_r, lora_alpha, lora_target_modules are ignored). Needs use_peft: "
                  "true and sync_mode: lora. The endpoint serves it from the first rollout on, eval_before evaluates "
                  "it, and with beta > 0 the KL term is taken against it."},
    )  # fmt: skip
    # -- mechanisms (later issues) -------------------------------------------------------------
    attribution: dict | str | None = field(
        default=None,
        metadata={
            "help": "Self-attributing (ADCA): step-level credit from a judge. A mapping (YAML) or JSON string with "
            "enabled (bool), alpha (0.1), judge ('reference' or a chat model such as 'openai:gpt-4.1-mini'), "
            "alpha_decay (per step), cutoff (step after which plain GRPO resumes), judge_options (LLMJudge "
            "keywords, e.g. max_concurrency, model_kwargs), process_standardization ('trajectory': mean/std of "
            "each rollout's average label, AgentEvolver's, default; 'pooled': all steps of the group); "
            "'true'/'false' toggles it with the defaults."
        },
    )
    navigation: dict | str | None = field(
        default=None,
        metadata={"help": "Self-navigating: true, or a mapping {enabled, eta: 0.5, top_k: 5, min_score, mode: "
                  "strip|keep, boost_epsilon_high: 0.6, extractor: rules|<chat model>, extractor_options, "
                  "update_every: 1, pool_dir (default output_dir/experience_pool), merge_threshold: 0.9}."},
    )  # fmt: skip
    task_store: str | None = field(
        default=None,
        metadata={"help": "Self-questioning: a TaskStore (SQLite) of synthesized tasks to train on, made by "
                  "`python -m langgraph_evolver.questioning --env ... --out tasks.sqlite`."},
    )  # fmt: skip
    synthetic_ratio: float = field(
        default=0.5,
        metadata={"help": "With task_store: the share of synthetic tasks in the training set (1.0 = synthetic only)."},
    )

    # -- TRL defaults we change ----------------------------------------------------------------
    loss_type: str = field(default="dapo", metadata={"help": "TRL loss aggregation (dapo, grpo, bnpo, dr_grpo, ...)."})
    epsilon_high: float | None = field(default=0.28, metadata={"help": "Upper clip bound (DAPO clip-higher)."})
    beta: float = field(default=0.001, metadata={"help": "KL coefficient against the reference (0 = no reference)."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the rollouts."})
    max_completion_length: int | None = field(default=128, metadata={"help": "Max tokens per LLM call."})
    logging_steps: float = field(default=1, metadata={"help": "Log every N optimizer steps."})
    bf16: bool | None = field(default=None, metadata={"help": "bf16 mixed precision (default: only on GPU)."})
    report_to: None | str | list[str] = field(
        default="tensorboard", metadata={"help": "Loggers (tensorboard, wandb, none, ...)."}
    )
    remove_unused_columns: bool | None = field(default=False, metadata={"help": "Keep the task column."})

    def agent_for_rollouts(self) -> Any:
        """The ``AgentSpec`` rollouts run: ``agent`` (with ``agent_input``/``reward_fn``) or our reference agent.

        Resolved from the dotted paths on each call (cached per process), never stored on the config:
        the config is pickled into every checkpoint and a compiled graph does not pickle.
        """
        if not (self.agent or self.agent_input or self.reward_fn):
            return _reference_agent(self)
        key = (self.agent, self.agent_input, self.reward_fn, self.context_template,
               json.dumps(self.context_options, sort_keys=True), self.max_turns, self.repeat_guard)  # fmt: skip
        if key not in _AGENTS:
            from langgraph_evolver.agent_spec import as_agent

            _AGENTS[key] = as_agent(self.agent or _reference_agent(self), to_input=self.agent_input,
                                    reward=self.reward_fn)  # fmt: skip
        return _AGENTS[key]

    def context_for_user_agents(self) -> Any:
        """The context template a user's agent gets (through the policy model / the middleware); ours builds its own."""
        if not self.agent or self.context_template == "causal" and not self.context_options:
            return None
        from langgraph_evolver.context import get_context_template

        return get_context_template(self.context_template, **(self.context_options or {}))

    def _loss_averages_micro_batches(self) -> bool:
        """Whether ``loss_type`` averages per micro-batch (bnpo), which a token budget's split would change."""
        from .loss_types import LOSS_TYPES

        spec = LOSS_TYPES.get(self.loss_type)
        return spec is not None and spec.micro_batch_mean

    def _loss_problems(self) -> list[str]:
        """Loss types whose aggregation the trainer cannot keep exact with merged and padding rows."""
        from .loss_types import LOSS_TYPES

        problems = []
        spec = LOSS_TYPES.get(self.loss_type)
        if spec is None:
            problems.append(f"loss_type={self.loss_type!r} is not one the trainer keeps exact with multi-turn rows; "
                            f"use one of {', '.join(LOSS_TYPES)}.")  # fmt: skip
        if spec is not None and spec.sequence_normalized and self.beta != 0.0:
            problems.append(
                f"loss_type={self.loss_type} normalizes per sequence; the trainer keeps that exact with merged and "
                "padding rows by reweighting the policy term, which the KL term cannot follow: set beta: 0, or "
                "use loss_type: dapo (token-level, exact as is)."
            )
        merged = self.merge_prefix_transitions
        if spec is not None and spec.row_weighted and merged:
            problems.append(f"loss_type={self.loss_type} weighs each row by a sequence-level ratio, which a merged "
                            "row (several LLM calls) would share: set merge_prefix_transitions: false, or loss_type: "
                            "dapo.")  # fmt: skip
        if self.off_policy_mask_threshold is not None and merged:
            problems.append("off_policy_mask_threshold drops whole rows on a per-row statistic, which a merged row "
                            "(several LLM calls) would share: set merge_prefix_transitions: false.")  # fmt: skip
        if self.importance_sampling_level == "sequence" and merged:
            problems.append("importance_sampling_level=sequence (GSPO) takes one ratio per row, which a merged row "
                            "(several LLM calls) would share: set merge_prefix_transitions: false.")  # fmt: skip
        return problems

    def __post_init__(self) -> None:
        import torch

        if self.bf16 is None:
            self.bf16 = bool(torch.cuda.is_available())
        if not torch.cuda.is_available():
            self.dataloader_pin_memory = False  # nothing to pin to; avoids a warning per epoch
        if isinstance(self.context_options, str):
            try:
                self.context_options = json.loads(self.context_options) if self.context_options.strip() else None
            except json.JSONDecodeError as e:
                raise ConfigError(f"context_options is not valid JSON ({e}); write e.g. '{{\"window\": 2}}'.") from None
        if isinstance(self.env_args, str):
            try:
                self.env_args = json.loads(self.env_args) if self.env_args.strip() else None
            except json.JSONDecodeError as e:
                raise ConfigError(f"env_args is not valid JSON ({e}); write e.g. '{{\"seed\": 1}}'.") from None
        parse_level_weights(self.level_weights)  # validate early
        super().__post_init__()
        problems = []
        if self.sync_mode not in ("lora", "full"):
            problems.append(f"sync_mode must be 'lora' or 'full', got {self.sync_mode!r}.")
        if self.temperature <= 0:
            problems.append("temperature must be > 0: GRPO needs sampled rollouts (use 1.0).")
        if self.top_k not in (None, 0, -1) or self.top_p != 1.0 or self.min_p:
            problems.append(
                "top_k/top_p/min_p truncate the sampling distribution, so the endpoint's logprobs no "
                "longer match what the trainer computes; keep top_k=0, top_p=1.0, min_p unset."
            )
        if self.max_turns < 1:
            problems.append("max_turns must be >= 1.")
        if self.rollout_concurrency < 1:
            problems.append("rollout_concurrency must be >= 1.")
        if self.malformed_call_penalty < 0:
            problems.append("malformed_call_penalty must be >= 0 (it is subtracted).")
        if self.max_refill_rounds < 0:
            problems.append("max_refill_rounds must be >= 0 (0 only measures the informative share).")
        if not 0.0 <= self.max_failed_rollout_share <= 1.0:
            problems.append("max_failed_rollout_share must be in [0, 1] (1.0 never stops a run for failed rollouts).")
        problems += self._loss_problems()
        if self.max_tokens_per_microbatch is not None:
            if self.max_tokens_per_microbatch < 1:
                problems.append("max_tokens_per_microbatch must be >= 1 (or null for no budget).")
            if self._loss_averages_micro_batches():
                problems.append(f"loss_type={self.loss_type} averages over each forward pass's tokens, so splitting "
                                "a micro-batch by max_tokens_per_microbatch would change it: use loss_type: "
                                "dapo.")  # fmt: skip
        if self.policy_server_dtype not in ("auto", "float32", "bfloat16"):
            problems.append(f"policy_server_dtype must be auto, float32 or bfloat16, got {self.policy_server_dtype!r}.")
        if self.train_dtype not in ("auto", "float32", "bfloat16"):
            problems.append(f"train_dtype must be auto, float32 or bfloat16, got {self.train_dtype!r}.")
        if self.importance_correction not in (None, "none", "tis"):
            problems.append(f"importance_correction must be 'none' or 'tis', got {self.importance_correction!r}.")
        if self.tis_cap < 1.0:
            problems.append(f"tis_cap={self.tis_cap} must be >= 1 (2.0 in veRL; the weight is min(ratio, cap)).")
        if self.full_sync_transport not in ("disk", "nccl"):
            problems.append(f"full_sync_transport must be 'disk' or 'nccl', got {self.full_sync_transport!r}.")
        if self.sync_mode == "full" and self.full_sync_transport == "nccl" and not self.use_vllm:
            problems.append(
                "full_sync_transport=nccl uses TRL's vLLM weight transfer: set use_vllm=true, vllm_mode=server and "
                "vllm_server_base_url to the `trl vllm-serve` server that also answers the rollouts (or use "
                "full_sync_transport=disk with an endpoint that has /update_weights_from_disk)."
            )
        if self.use_vllm:
            # TRL's correction reweights by vLLM logprobs of TRL's own generation; our rollouts come from the
            # agent's endpoint calls, and their mismatch is corrected by ``behaviour_correction`` instead.
            self.vllm_importance_sampling_correction = False
        if self.use_vllm and self.vllm_mode != "server":
            problems.append("Rollouts go through an OpenAI-compatible endpoint, so only vllm_mode=server is supported.")
        try:
            self.navigation_settings = NavigationSettings.parse(self.navigation)
        except ConfigError as e:
            problems.append(str(e))
        if not 0.0 <= self.synthetic_ratio <= 1.0:
            problems.append(f"synthetic_ratio={self.synthetic_ratio} must be in [0, 1] (1.0: synthetic tasks only).")
        if self.task_store and not Path(self.task_store).is_file():
            problems.append(f"task_store={self.task_store} does not exist; make one with `python -m "
                            "langgraph_evolver.questioning --env <env> --n 200 --out <path>`.")  # fmt: skip
        try:
            self.agent_for_rollouts()  # imports the user's agent now, so a bad path fails before any work
        except ConfigError as e:
            problems.append(str(e))
        try:
            self.attribution_settings = AttributionSettings.parse(self.attribution)
        except ConfigError as e:
            problems.append(str(e))
        if problems:
            raise ConfigError("Invalid training config:\n  - " + "\n  - ".join(problems))


_AGENTS: dict[tuple, Any] = {}


def _reference_agent(cfg: Any) -> Any:
    from graphs.agent import reference_agent

    return reference_agent(context_template=cfg.context_template, context_options=cfg.context_options,
                           max_turns=cfg.max_turns, repeat_guard=getattr(cfg, "repeat_guard", False))  # fmt: skip

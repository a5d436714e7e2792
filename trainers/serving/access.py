"""Who may call the policy server, and which weights it may load at runtime.

- ``BearerKeyMiddleware``: with an API key set (``--api-key`` / ``$EVOLVER_POLICY_API_KEY``),
  every route but ``/health`` needs ``Authorization: Bearer <key>``; anything else is a 401 that
  says what to send, answered before the request body is parsed.
- ``WeightAccess``: whether ``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter`` and
  ``/update_weights_from_disk`` are served at all (``--allow-runtime-updates``; a 403 naming the
  flag otherwise), and the directories a requested path must lie in once symlinks are followed
  (``--allowed-weight-dirs``; the model's own directory always counts), and so must every file a load
  opens (``check_files``: a symlinked ``adapter_model.safetensors``, or a shard index naming
  ``../../outside/...``, is a 403 that says where it resolves). vLLM gates the first with
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` and has neither the key-less default nor the directories.
- ``check_bind``: a non-loopback address without a key is refused unless ``--insecure``; ``check_api_key``:
  a key with spaces or a newline around it (it could never match what clients send) is refused.

Only safetensors are ever read (``trainers.serving.weights``): a pickled ``.bin`` can run code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph_evolver._serving import BearerAuthMiddleware, is_loopback
from langgraph_evolver._serving import check_bind as _check_bind

from .errors import ForbiddenError, GenerationError

__all__ = [
    "API_KEY_ENV",
    "OPEN_PATHS",
    "BearerKeyMiddleware",
    "WeightAccess",
    "check_api_key",
    "check_bind",
    "is_loopback",
    "split_dirs",
]

API_KEY_ENV = "EVOLVER_POLICY_API_KEY"
"""The environment variable the server reads its key from, and the clients (``PolicyChatModel``) send."""

OPEN_PATHS = frozenset({"/health"})
"""Routes served without a key: load balancers and ``PolicyServerProcess`` poll them."""

RUNTIME_UPDATE_FLAG = "--allow-runtime-updates"
WEIGHT_DIRS_FLAG = "--allowed-weight-dirs"


# -- the API key -----------------------------------------------------------------------------------
class BearerKeyMiddleware(BearerAuthMiddleware):
    """401 unless ``Authorization: Bearer <key>`` matches (``OPEN_PATHS`` excepted), in OpenAI's error shape."""

    def __init__(self, app: Any, *, api_key: str) -> None:
        if not api_key:
            raise ValueError("BearerKeyMiddleware needs a non-empty api_key.")
        super().__init__(app, token=api_key, open_paths=tuple(OPEN_PATHS), refusal=_refusal)


def _refusal(problem: str) -> dict[str, Any]:
    what = (
        "This policy server requires an API key" if problem == "missing" else "The API key sent is wrong or malformed"
    )
    message = (
        f"{what}: send 'Authorization: Bearer <key>' with the key the server was started with (--api-key or "
        f"${API_KEY_ENV}). PolicyChatModel, check_endpoint and the trainer send ${API_KEY_ENV}: set it in the "
        "client's environment too."
    )
    return {"error": {"message": message, "type": "AuthenticationError", "param": None, "code": 401}}


def check_bind(host: str, *, api_key: str | None, insecure: bool) -> None:
    """Refuse (``SystemExit``) to listen on a non-loopback ``host`` without an API key, unless ``insecure``."""
    _check_bind(host, secret=api_key, insecure=insecure, refusal=(
        f"error: refusing to serve on {host} without an API key: anyone who can reach this address could use the "
        f"policy (and, with {RUNTIME_UPDATE_FLAG}, load weights into it). Set ${API_KEY_ENV} (or --api-key) and "
        "send it from the clients, bind --host 127.0.0.1, or pass --insecure on a network you trust."))  # fmt: skip


def check_api_key(api_key: str | None) -> None:
    """``ValueError`` for a key with whitespace around it: clients send it stripped, so it would never match."""
    if api_key and api_key != api_key.strip():
        raise ValueError(
            f"the API key (--api-key or ${API_KEY_ENV}) has spaces or a newline around it ({len(api_key)} characters, "
            f"{len(api_key.strip())} without them); no client could send it. Remove them."
        )


# -- runtime weight loading -------------------------------------------------------------------------
def split_dirs(values: Iterable[str] | None) -> list[str]:
    """``--allowed-weight-dirs`` values, each repeatable and comma-separated, as one list (blanks dropped)."""
    return [part.strip() for value in values or () for part in value.split(",") if part.strip()]


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightAccess:
    """Whether the runtime weight routes are served, and from which directories they may read.

    Example:
        >>> access = WeightAccess(allow=True, dirs=(Path("/srv/runs"),))
        >>> access.check("/srv/runs/a/../step-1", route="/v1/load_lora_adapter")
        PosixPath('/srv/runs/step-1')
        >>> access.check("/srv/runs/../secrets", route="/v1/load_lora_adapter")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        trainers.serving.errors.ForbiddenError: /v1/load_lora_adapter: '/srv/runs/../secrets' resolves to ...
    """

    allow: bool
    """Serve ``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter`` and ``/update_weights_from_disk`` at all."""
    dirs: tuple[Path, ...] | None
    """Resolved directories a requested path must lie in; None: anywhere (a server embedded in trusted code)."""

    @classmethod
    def create(cls, *, allow: bool, dirs: Sequence[str | Path] | None, model_dir: str | Path) -> WeightAccess:
        """Resolve ``dirs`` (symlinks followed) and add the model's own directory; ``dirs=None`` confines nothing.

        Raises ``ValueError`` naming a directory that does not exist.
        """
        if dirs is None:
            return cls(allow=allow, dirs=None)
        resolved: list[Path] = []
        for d in [*dirs, model_dir]:
            path = Path(d).expanduser().resolve()
            if not path.is_dir():
                raise ValueError(f"{WEIGHT_DIRS_FLAG} {d}: no such directory; create it first or fix the path.")
            if path not in resolved:
                resolved.append(path)
        return cls(allow=allow, dirs=tuple(resolved))

    def check_allowed(self, route: str) -> None:
        """403 unless runtime updates are on."""
        if not self.allow:
            raise ForbiddenError(
                f"{route} is off on this server: runtime weight loading is disabled by default. Start the server "
                f"with {RUNTIME_UPDATE_FLAG} and {WEIGHT_DIRS_FLAG} DIR (the directories it may read weights from; "
                "PolicyServerProcess(..., allowed_weight_dirs=[...]) passes both)."
            )

    def check(self, path: str, *, route: str) -> Path:
        """The resolved ``path`` (symlinks followed); 403 when runtime updates are off or it lies outside ``dirs``,
        400 for a path no file can have (a NUL byte)."""
        self.check_allowed(route)
        if "\x00" in path:
            raise GenerationError(f"{route}: the path {path!r} holds a NUL byte, which no file path can; send the "
                                  "directory's path as text.")  # fmt: skip
        resolved = Path(path).expanduser().resolve()
        self._confine(resolved, f"{path!r}", route)
        return resolved

    def check_files(self, directory: Path, *, route: str) -> None:
        """403 unless every file a load from ``directory`` may open resolves inside ``dirs``: each file directly in
        it (``adapter_model.safetensors`` may be a symlink) and each shard its ``*.index.json`` names."""
        if self.dirs is None or not directory.is_dir():
            return
        for entry in sorted(directory.iterdir()):
            self._confine(entry.resolve(), f"{entry.name!r} in {directory}", route)
            if entry.name.endswith(".index.json") and entry.is_file():
                for shard in sorted(set(_index_shards(entry))):
                    self._confine((directory / shard).resolve(), f"the shard {shard!r} named by {entry.name}", route)

    def _confine(self, resolved: Path, what: str, route: str) -> None:
        if self.dirs is None or any(resolved.is_relative_to(d) for d in self.dirs):
            return
        allowed = ", ".join(str(d) for d in self.dirs)
        raise ForbiddenError(
            f"{route}: {what} resolves to {resolved}, outside the directories this server may load weights from "
            f"({allowed}); save it under one of them, or restart the server with {WEIGHT_DIRS_FLAG} naming its "
            "directory."
        )


def _index_shards(index: Path) -> list[str]:
    """The shard file names a ``model.safetensors.index.json`` maps weights to (none when it does not parse)."""
    try:
        weight_map = json.loads(index.read_text()).get("weight_map") or {}
    except (OSError, ValueError, AttributeError):
        return []  # the load itself reports a broken index
    return [str(name) for name in weight_map.values()] if isinstance(weight_map, dict) else []

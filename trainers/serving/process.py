"""Start, stop and check policy endpoints: the local CPU server as a child process, or any URL.

``PolicyServerProcess`` runs ``python -m trainers.policy_server`` on a free loopback port and
waits until it answers ``/health``; if the process dies first, the error carries the tail of its
log. The child stops itself when the process that started it dies, even by SIGKILL (``--parent-pid``),
and runs in a session of its own, so a Ctrl-C meant for the launcher leaves it serving until the launcher
stops it. Its launchers hot-load adapters or weights into it, so it passes the runtime-loading flags
(``runtime_update_flags``: the one place they are spelled) with the directories the launcher
names, and the API key, if any, through the child's environment (a command line is visible to
every user of the machine). ``check_endpoint`` verifies that an external endpoint (vLLM, a hosted API) is reachable and
serves the model asked for, and says what to do when it does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from langgraph_evolver._serving import free_port
from langgraph_evolver.errors import ConfigError, PolicyEndpointError

from .access import API_KEY_ENV, RUNTIME_UPDATE_FLAG, WEIGHT_DIRS_FLAG

__all__ = ["PolicyServerProcess", "check_endpoint", "free_port", "policy_api_key", "runtime_update_flags"]


def policy_api_key(api_key: str | None = None) -> str:
    """The key to send to a policy endpoint: ``api_key``, unless it is None or the placeholder ``"EMPTY"``,
    else ``$EVOLVER_POLICY_API_KEY``, else ``"EMPTY"`` (what OpenAI clients need to send something)."""
    if api_key and api_key != "EMPTY":
        return api_key
    return os.environ.get(API_KEY_ENV) or "EMPTY"


def runtime_update_flags(allowed_weight_dirs: Sequence[str | Path]) -> list[str]:
    """The ``trainers.policy_server`` flags that let a client load adapters and weights from these directories.

    Example:
        >>> runtime_update_flags(["runs/x", "/data/adapters"])
        ['--allow-runtime-updates', '--allowed-weight-dirs', 'runs/x,/data/adapters']
    """
    dirs = [str(d) for d in allowed_weight_dirs]
    if bad := [d for d in dirs if "," in d]:
        raise ConfigError(f"allowed weight directory {bad[0]!r} has a comma, which the server's flag splits on.")
    return [RUNTIME_UPDATE_FLAG] + ([WEIGHT_DIRS_FLAG, ",".join(dirs)] if dirs else [])


def check_endpoint(
    base_url: str, model: str | None = None, *, timeout: float = 10.0, api_key: str | None = None
) -> list[str]:
    """Return the model ids served at ``base_url`` (``.../v1``); raise a clear error if unusable.

    Sends ``api_key`` (default ``$EVOLVER_POLICY_API_KEY``, see ``policy_api_key``).
    """
    url = base_url.rstrip("/") + "/models"
    try:
        r = httpx.get(url, timeout=timeout, headers={"Authorization": f"Bearer {policy_api_key(api_key)}"})
        if r.status_code == 401:
            raise PolicyEndpointError(
                f"Policy endpoint {base_url} refused the API key (HTTP 401): set ${API_KEY_ENV} to the key it was "
                "started with (its --api-key)."
            )
        r.raise_for_status()
        ids = [m["id"] for m in r.json().get("data", [])]
    except (httpx.HTTPError, ValueError, KeyError) as e:
        raise PolicyEndpointError(
            f"Policy endpoint {base_url} is unreachable or not OpenAI-compatible ({type(e).__name__}: {e}). "
            "Start one (python -m trainers.policy_server --model PATH --port 8000, or vllm serve ...) "
            "or fix the URL (it must end in /v1)."
        ) from e
    if model is not None and model not in ids:
        raise PolicyEndpointError(f"Endpoint {base_url} does not serve model {model!r}; it serves {ids}.")
    return ids


class PolicyServerProcess:
    """The local CPU policy server as a child process (context manager).

    Clients may load adapters and weights into it from ``allowed_weight_dirs`` (symlinks followed, safetensors
    only; the model's own directory always counts, ``()`` allows only that one); not given, that is the directory
    of ``log_path`` when one is given (launchers write the log into the run's output directory, where the trainer
    saves what it publishes), else runtime loading is off. ``api_key`` (default ``$EVOLVER_POLICY_API_KEY``)
    reaches the child through its environment, never its command line; clients send it via ``policy_api_key``.
    ``dtype`` is its ``--dtype`` (None: the server's default, ``auto``).

    Example:
        >>> with PolicyServerProcess("checkpoints/tiny-policy") as server:   # doctest: +SKIP
        ...     print(server.base_url, server.model_name)
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        served_model_name: str | None = None,
        threads: int | None = None,
        max_batch_size: int = 64,
        prefix_caching: bool = True,
        log_path: str | Path | None = None,
        startup_timeout: float = 180.0,
        extra_args: list[str] | None = None,
        allowed_weight_dirs: Sequence[str | Path] | None = None,
        api_key: str | None = None,
        dtype: str | None = None,
    ) -> None:
        self.model_path = Path(model_path)
        if not (self.model_path / "config.json").exists():
            raise ConfigError(
                f"No model at {self.model_path} (no config.json). Pass a save_pretrained directory; the tiny "
                "policy is committed at checkpoints/tiny-policy (regenerate: python -m trainers.tiny)."
            )
        self.host = host
        self.port = port or free_port(host)
        self.model_name = served_model_name or self.model_path.name
        self.threads = threads
        self.max_batch_size = max_batch_size
        self.prefix_caching = prefix_caching
        self.dtype = dtype
        self.log_path = (
            Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="policy_server_", suffix=".log")[1])
        )
        self.startup_timeout = startup_timeout
        self.extra_args = list(extra_args or [])
        """More ``trainers.policy_server`` flags, e.g. ``["--allow-template-without-tools"]``."""
        if allowed_weight_dirs is None and log_path is not None:
            allowed_weight_dirs = [self.log_path.parent]
        self.allowed_weight_dirs = None if allowed_weight_dirs is None else [Path(d) for d in allowed_weight_dirs]
        """Where clients may load adapters / weights from at runtime (see the class docstring); None: off."""
        self.api_key = api_key or os.environ.get(API_KEY_ENV) or None
        """The key the server requires (``$EVOLVER_POLICY_API_KEY`` unless given), or None for none."""
        self._proc: subprocess.Popen | None = None
        self._log: Any = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def _log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def start(self) -> PolicyServerProcess:
        cmd = [sys.executable, "-m", "trainers.policy_server", "--model", str(self.model_path),
               "--host", self.host, "--port", str(self.port), "--served-model-name", self.model_name,
               "--max-batch-size", str(self.max_batch_size)]  # fmt: skip
        if self.threads:
            cmd += ["--threads", str(self.threads)]
        if not self.prefix_caching:
            cmd.append("--no-enable-prefix-caching")
        if self.dtype:
            cmd += ["--dtype", self.dtype]
        if self.allowed_weight_dirs is not None:  # each must exist: the server refuses to start otherwise
            cmd += runtime_update_flags(self.allowed_weight_dirs)
        cmd += self.extra_args
        cmd += ["--parent-pid", str(os.getpid())]  # the server stops itself when this process dies, even by SIGKILL
        env = {k: v for k, v in os.environ.items() if k != API_KEY_ENV}
        if self.api_key:
            env[API_KEY_ENV] = self.api_key
        self._log = self.log_path.open("w")
        # A session of its own: Ctrl-C in the terminal reaches only the launcher, which may finish its step
        # against a server still serving, then stops it here (stop()); --parent-pid covers a launcher that dies.
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                      start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self.stop()
                raise PolicyEndpointError(
                    f"The policy server exited with code {self._proc.returncode} while starting. "
                    f"Log ({self.log_path}):\n{self._log_tail()}"
                )
            try:
                if httpx.get(f"http://{self.host}:{self.port}/health", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise PolicyEndpointError(f"The policy server did not become healthy in {self.startup_timeout:.0f} s. "
                                  f"Log ({self.log_path}):\n{self._log_tail()}")  # fmt: skip

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> PolicyServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

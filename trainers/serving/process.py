"""Start, stop and check policy endpoints: the local CPU server as a child process, or any URL.

``PolicyServerProcess`` runs ``python -m trainers.policy_server`` on a free loopback port and
waits until it answers ``/health``; if the process dies first, the error carries the tail of its
log. ``check_endpoint`` verifies that an external endpoint (vLLM, a hosted API) is reachable and
serves the model asked for, and says what to do when it does not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from langgraph_evolver._serving import free_port
from langgraph_evolver.errors import ConfigError, PolicyEndpointError

__all__ = ["PolicyServerProcess", "check_endpoint", "free_port"]


def check_endpoint(
    base_url: str, model: str | None = None, *, timeout: float = 10.0, api_key: str = "EMPTY"
) -> list[str]:
    """Return the model ids served at ``base_url`` (``.../v1``); raise a clear error if unusable."""
    url = base_url.rstrip("/") + "/models"
    try:
        r = httpx.get(url, timeout=timeout, headers={"Authorization": f"Bearer {api_key}"})
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
        self.log_path = (
            Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="policy_server_", suffix=".log")[1])
        )
        self.startup_timeout = startup_timeout
        self.extra_args = list(extra_args or [])
        """More ``trainers.policy_server`` flags, e.g. ``["--allow-template-without-tools"]``."""
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
        cmd += self.extra_args
        self._log = self.log_path.open("w")
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env={**os.environ})
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

"""``RemoteEnvironment``: an environment served by ``env_tools.server``, behind the same interface.

A rollout cannot tell it from a local environment: ``reset`` creates a server-side instance
(releasing the previous one) and gets its first observation in the same answer, ``step`` /
``evaluate`` act on it, ``close`` releases it. A step that ends the episode brings the score back
with it (``?evaluate_if_done=true``), so the ``evaluate`` that follows costs no request; a service
that predates this answers without it and ``evaluate`` asks.

The sync methods share one httpx connection pool per base URL. The async twins, the path of
concurrent rollouts, speak HTTP/1.1 themselves over asyncio: keep-alive connections per base URL
*and event loop*, at a fraction of httpx's client CPU per request (``env_tools._transport`` says how
and why). They connect directly: unlike httpx, they do not route through the proxy named by
``HTTP_PROXY`` / ``HTTPS_PROXY``.

Failures raise ``RemoteEnvironmentFailure`` (an ``EnvironmentFailure``) carrying the server's
message, the HTTP status and the error type. Calls are retried with a short backoff when the
connection could not be made (the request never left, so any call is safe to repeat), on 429
(the instance limit: the refused call changed nothing) after the server's ``Retry-After``
(at most 5 s), and, for idempotent calls only (list, profile, evaluate, release), on dropped
connections and 503.

Example:
    >>> env = RemoteEnvironment("http://127.0.0.1:8080", token=None)
    >>> task = env.list_tasks("train")[0]
    >>> obs = env.reset(task)
    >>> result = env.step(Action(tool_calls=task.reference_solution))
    >>> score = env.evaluate()
    >>> env.close()
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import httpx

from env_tools._transport import (
    _Answer,
    _async_client,
    _dumps,
    _sync_client,
    aclose_shared_clients,
    close_shared_clients,
)
from langgraph_evolver.environment import Environment
from langgraph_evolver.errors import ConfigError, EnvironmentFailure
from langgraph_evolver.types import Action, Observation, StepResult, Task

__all__ = [
    "RemoteEnvironment",
    "RemoteEnvironmentFailure",
    "aclose_shared_clients",
    "close_shared_clients",
    "remote_environment_factory",
]

logger = logging.getLogger("env_tools.client")

START_HINT = (
    "Is the service running? Start it with `python -m env_tools.server --env sandbox --port 8080` "
    "and pass its URL (http://host:port) to RemoteEnvironment."
)
_BACKOFF_S = 0.1
_RETRY_AFTER_CAP_S = 5.0


class RemoteEnvironmentFailure(EnvironmentFailure):
    """The environment service refused a call or could not be reached.

    Attributes:
        status_code: the HTTP status, or ``None`` when no answer came back.
        error_type: the service's error type (``instance_not_found``, ``too_many_instances``, ...).
    """

    def __init__(self, message: str, *, status_code: int | None = None, error_type: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.error_type = error_type


# -- the environment -------------------------------------------------------------------------------
class RemoteEnvironment(Environment):
    """One instance of the environment served at ``base_url`` (see ``env_tools.server``).

    The service decides which environment runs; ``task.env`` is not consulted.

    Args:
        base_url: the service's address, e.g. ``http://127.0.0.1:8080``.
        token: bearer token when the service was started with ``--token``.
        timeout: seconds to wait for each answer.
        retries: extra attempts for retryable failures (see the module docstring).
    """

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 30.0, retries: int = 2) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must start with http:// or https://, got {base_url!r}.")
        if retries < 0:
            raise ConfigError(f"retries must be 0 or more, got {retries}.")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        if token and not (token.isascii() and token.isprintable()):
            raise ConfigError("token must be printable ASCII without line breaks: it is sent in an HTTP header.")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._header_lines = "".join(f"{name}: {value}\r\n" for name, value in self._headers.items())
        self._instance_id: str | None = None
        self._score: float | None = None  # what the step that ended the episode said evaluate() would answer

    @property
    def instance_id(self) -> str | None:
        """The server-side instance this object drives, or ``None`` before ``reset`` / after ``close``."""
        return self._instance_id

    def __repr__(self) -> str:
        return f"RemoteEnvironment({self.base_url!r}, instance_id={self._instance_id!r})"

    # -- plumbing shared by the sync and async paths
    def _retryable(self, error: httpx.TransportError, idempotent: bool) -> bool:
        if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout):
            return True  # nothing reached the server
        return idempotent and not isinstance(error, httpx.TimeoutException)

    @staticmethod
    def _delay(attempt: int) -> float:
        return _BACKOFF_S * (2**attempt) * (1 + random.random() / 2)

    def _retry_delay(self, response: httpx.Response | _Answer, idempotent: bool, attempt: int) -> float | None:
        """Seconds to wait before repeating a call that got ``response``, or ``None`` to not repeat it."""
        if response.status_code == 429:  # the instance limit: nothing changed, any call may be repeated
            try:
                return min(_RETRY_AFTER_CAP_S, max(0.0, float(response.headers.get("retry-after", ""))))  # NaN -> 0
            except ValueError:  # absent, or an HTTP date
                return self._delay(attempt)
        if response.status_code == 503 and idempotent:
            return self._delay(attempt)
        return None

    def _unreachable(self, error: httpx.TransportError, method: str, path: str, attempts: int) -> EnvironmentFailure:
        if isinstance(error, httpx.TimeoutException) and not isinstance(error, httpx.ConnectTimeout):
            message = (
                f"The environment service at {self.base_url} did not answer {method} {path} within "
                f"{self.timeout:g} s. It may be overloaded (see its log): run fewer rollouts at once or raise "
                "RemoteEnvironment(timeout=...)."
            )
        else:
            message = (
                f"Cannot reach the environment service at {self.base_url} for {method} {path} "
                f"({type(error).__name__}: {error}; {attempts} attempt(s)). {START_HINT}"
            )
        return RemoteEnvironmentFailure(message)

    def _decode(self, response: httpx.Response | _Answer, method: str, path: str) -> Any:
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code < 400 and data is not None:
            return data
        error = data.get("error") if isinstance(data, dict) else None
        if not isinstance(error, dict) or "message" not in error:
            raise RemoteEnvironmentFailure(
                f"{self.base_url} answered {method} {path} with HTTP {response.status_code} and a body that is not "
                f"the environment service's JSON ({response.text[:200]!r}). Is this the address of "
                f"`python -m env_tools.server`? {START_HINT}",
                status_code=response.status_code,
            )
        message = f"Environment service {self.base_url} refused {method} {path} (HTTP {response.status_code}): "
        message += str(error["message"])
        if response.status_code == 401 and not self._headers:
            message += " This RemoteEnvironment has no token: pass RemoteEnvironment(url, token=...)."
        raise RemoteEnvironmentFailure(message, status_code=response.status_code, error_type=error.get("type"))

    def _request(self, method: str, path: str, *, idempotent: bool, payload: Any = None) -> Any:
        """``method path`` (``path`` may end in a query) with the JSON ``payload``, retried as the module says."""
        pool = _sync_client(self.base_url)
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            shard, client = pool.acquire()
            try:
                response = client.request(method, path, headers=self._headers, timeout=self.timeout, json=payload)
            except httpx.TransportError as e:
                if last or not self._retryable(e, idempotent):
                    raise self._unreachable(e, method, path, attempt + 1) from e
                time.sleep(self._delay(attempt))
                continue
            finally:
                pool.release(shard)
            delay = None if last else self._retry_delay(response, idempotent, attempt)
            if delay is not None:
                time.sleep(delay)
                continue
            return self._decode(response, method, path)
        raise AssertionError("unreachable")

    async def _arequest(self, method: str, path: str, *, idempotent: bool, payload: Any = None) -> Any:
        pool = _async_client(self.base_url)
        request = pool.encode(method, path, self._header_lines, None if payload is None else _dumps(payload))
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = await pool.send(request, self.timeout)
            except httpx.TransportError as e:
                if last or not self._retryable(e, idempotent):
                    raise self._unreachable(e, method, path, attempt + 1) from e
                await asyncio.sleep(self._delay(attempt))
                pool = _async_client(self.base_url)  # a fresh one if aclose_shared_clients() ran meanwhile
                continue
            delay = None if last else self._retry_delay(response, idempotent, attempt)
            if delay is not None:
                await asyncio.sleep(delay)
                continue
            return self._decode(response, method, path)
        raise AssertionError("unreachable")

    def _path(self, suffix: str = "") -> str:
        if self._instance_id is None:
            raise RemoteEnvironmentFailure(
                "This RemoteEnvironment has no live instance: call reset(task) before step/evaluate "
                "(close() releases the instance)."
            )
        return f"/instances/{urllib.parse.quote(self._instance_id, safe='')}{suffix}"

    def _forget(self) -> str | None:
        instance_id, self._instance_id, self._score = self._instance_id, None, None
        return instance_id

    def _created(self, data: dict[str, Any]) -> Observation:
        self._instance_id = data["instance_id"]
        return Observation.from_dict(data["observation"])

    def _stepped(self, data: dict[str, Any]) -> StepResult:
        score = data.get("score") if data.get("done") else None
        self._score = float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None
        return StepResult.from_dict(data)

    # A step asks for the score when it ends the episode: the service evaluates then, in the same answer.
    _STEP = "/step?evaluate_if_done=true"

    @staticmethod
    def _log_release_failure(instance_id: str, error: EnvironmentFailure) -> None:
        if getattr(error, "status_code", None) != 404:  # 404: already expired or released, nothing to do
            logger.warning("could not release remote instance %s (it expires when idle): %s", instance_id, error)

    # -- the Environment interface, sync
    def reset(self, task: Task) -> Observation:
        self.close()
        return self._created(self._request("POST", "/instances", idempotent=False, payload={"task": task.to_dict()}))

    def step(self, action: Action) -> StepResult:
        self._score = None
        payload = {"action": action.to_dict()}
        return self._stepped(self._request("POST", self._path(self._STEP), idempotent=False, payload=payload))

    def evaluate(self) -> float:
        path = self._path("/evaluate")
        if self._score is not None:
            return self._score
        return float(self._request("POST", path, idempotent=True)["score"])

    def close(self) -> None:
        """Release the server-side instance. Idempotent; never raises (a failure is logged)."""
        instance_id = self._forget()
        if instance_id is None:
            return
        try:
            self._request("DELETE", f"/instances/{instance_id}", idempotent=True)
        except EnvironmentFailure as e:
            self._log_release_failure(instance_id, e)

    def list_tasks(self, split: str = "train") -> list[Task]:
        data = self._request("GET", "/tasks?" + urllib.parse.urlencode({"split": split}), idempotent=True)
        return [Task.from_dict(t) for t in data["tasks"]]

    def profile(self) -> dict[str, Any]:
        return self._request("GET", "/profile", idempotent=True)

    def health(self) -> dict[str, Any]:
        """The service's ``/health`` answer (status, env, live instances, limit)."""
        return self._request("GET", "/health", idempotent=True)

    # -- async twins
    async def areset(self, task: Task) -> Observation:
        await self.aclose()
        payload = {"task": task.to_dict()}
        return self._created(await self._arequest("POST", "/instances", idempotent=False, payload=payload))

    async def astep(self, action: Action) -> StepResult:
        self._score = None
        payload = {"action": action.to_dict()}
        return self._stepped(await self._arequest("POST", self._path(self._STEP), idempotent=False, payload=payload))

    async def aevaluate(self) -> float:
        path = self._path("/evaluate")
        if self._score is not None:
            return self._score
        return float((await self._arequest("POST", path, idempotent=True))["score"])

    async def aclose(self) -> None:
        instance_id = self._forget()
        if instance_id is None:
            return
        try:
            await self._arequest("DELETE", f"/instances/{instance_id}", idempotent=True)
        except EnvironmentFailure as e:
            self._log_release_failure(instance_id, e)

    async def alist_tasks(self, split: str = "train") -> list[Task]:
        data = await self._arequest("GET", "/tasks?" + urllib.parse.urlencode({"split": split}), idempotent=True)
        return [Task.from_dict(t) for t in data["tasks"]]

    async def aprofile(self) -> dict[str, Any]:
        return await self._arequest("GET", "/profile", idempotent=True)

    async def ahealth(self) -> dict[str, Any]:
        return await self._arequest("GET", "/health", idempotent=True)

    async def __aenter__(self) -> RemoteEnvironment:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def remote_environment_factory(
    base_url: str, token: str | None = None, *, timeout: float = 30.0, retries: int = 2
) -> Callable[..., RemoteEnvironment]:
    """A ``task -> Environment`` factory: a fresh ``RemoteEnvironment`` per rollout, one shared pool.

    Example:
        >>> make_env = remote_environment_factory("http://127.0.0.1:8080")
        >>> env = make_env(task)
    """
    RemoteEnvironment(base_url, token=token, timeout=timeout, retries=retries)  # validate the arguments now

    def make(task: Task | None = None) -> RemoteEnvironment:
        return RemoteEnvironment(base_url, token=token, timeout=timeout, retries=retries)

    return make

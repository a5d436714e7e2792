"""``RemoteEnvironment``: an environment served by ``env_tools.server``, behind the same interface.

A rollout cannot tell it from a local environment: ``reset`` creates a server-side instance
(releasing the previous one), ``step`` / ``evaluate`` act on it, ``close`` releases it. The sync
methods share one connection pool per base URL; the async twins are native and share one pool per
base URL *and event loop* (an AsyncClient's connections belong to the loop that opened them), so 64
concurrent rollouts reuse one set of connections. A pool is a few small httpx clients rather than
one big one (see ``_Pool``): httpx's per-request bookkeeping walks every connection of its pool.

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
import functools
import logging
import os
import random
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

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
# Idle connections expire before uvicorn's 5 s keep-alive closes them, so a request is never sent
# on a socket the server is closing at that moment. Each shard keeps every connection it opens
# alive: httpcore 1.0 closes an idle connection whenever the pool holds more connections in all
# than max_keepalive_connections, so a smaller cap reopens a connection per request under load.
_SHARD_CONNECTIONS = 8
_MAX_SHARDS = 32  # 256 connections per base URL (and event loop) at most
_SHARD_LIMITS = httpx.Limits(
    max_connections=_SHARD_CONNECTIONS, max_keepalive_connections=_SHARD_CONNECTIONS, keepalive_expiry=4.0
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


# -- shared connection pools ---------------------------------------------------------------------
class _Pool:
    """The connections to one base URL, spread over small httpx clients ("shards").

    httpx (httpcore 1.0) walks every connection of its pool, polling each idle socket, when a
    request starts and when one ends, so one pool of 128 connections spends more time on that
    walk than on the request (measured: client CPU per create 1.7 ms alone, 5.4 ms with 128
    concurrent ones). Shards of ``_SHARD_CONNECTIONS`` keep the walk short; a request goes to the
    least busy shard and a new shard opens only when every shard is full.
    """

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._lock = threading.Lock()  # the sync pool is shared by threads
        self.clients: list[Any] = []
        self._busy: list[int] = []
        self.is_closed = False

    def acquire(self) -> tuple[int, Any]:
        """The shard (index, client) to send the next request on; ``release(index)`` once answered."""
        with self._lock:
            busy = self._busy
            index = min(range(len(busy)), key=busy.__getitem__, default=-1)
            if index < 0 or (busy[index] >= _SHARD_CONNECTIONS and len(busy) < _MAX_SHARDS):
                self.clients.append(self._make())
                busy.append(0)
                index = len(busy) - 1
            busy[index] += 1
            return index, self.clients[index]

    def release(self, index: int) -> None:
        with self._lock:
            if index < len(self._busy):  # else the pool was closed meanwhile
                self._busy[index] -= 1

    def take_clients(self) -> list[Any]:
        with self._lock:
            self.is_closed = True
            clients, self.clients, self._busy = self.clients, [], []
            return clients


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every shard: httpx would load the CA bundle again for each client (~15 ms)."""
    return httpx.create_ssl_context()


_clients_lock = threading.Lock()
_sync_clients: dict[tuple[int, str], _Pool] = {}
_async_clients: dict[asyncio.AbstractEventLoop, dict[str, _Pool]] = {}


def _sync_client(base_url: str) -> _Pool:
    key = (os.getpid(), base_url)  # a forked worker must not share its parent's sockets
    with _clients_lock:
        pool = _sync_clients.get(key)
        if pool is None or pool.is_closed:
            shard = functools.partial(httpx.Client, base_url=base_url, limits=_SHARD_LIMITS, verify=_tls())
            pool = _sync_clients[key] = _Pool(shard)
        return pool


def _async_client(base_url: str) -> _Pool:
    loop = asyncio.get_running_loop()
    with _clients_lock:
        # Pooled connections point back at their loop, so weak keys would never drop: forget the pools
        # of closed loops (one per finished asyncio.run) explicitly; their sockets close when collected.
        for old in [old for old in _async_clients if old.is_closed()]:
            del _async_clients[old]
        per_loop = _async_clients.setdefault(loop, {})
        pool = per_loop.get(base_url)
        if pool is None or pool.is_closed:
            shard = functools.partial(httpx.AsyncClient, base_url=base_url, limits=_SHARD_LIMITS, verify=_tls())
            pool = per_loop[base_url] = _Pool(shard)
        return pool


def close_shared_clients() -> None:
    """Close the shared sync connection pools (they reopen on the next call)."""
    with _clients_lock:
        pools = list(_sync_clients.values())
        _sync_clients.clear()
    for pool in pools:
        for client in pool.take_clients():
            client.close()


async def aclose_shared_clients() -> None:
    """Close the running event loop's shared async connection pools; call before the loop ends."""
    loop = asyncio.get_running_loop()
    with _clients_lock:
        pools = list(_async_clients.pop(loop, {}).values())
    for pool in pools:
        for client in pool.take_clients():
            await client.aclose()


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
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._instance_id: str | None = None

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

    def _retry_delay(self, response: httpx.Response, idempotent: bool, attempt: int) -> float | None:
        """Seconds to wait before repeating a call that got ``response``, or ``None`` to not repeat it."""
        if response.status_code == 429:  # the instance limit: nothing changed, any call may be repeated
            try:
                return min(_RETRY_AFTER_CAP_S, max(0.0, float(response.headers["Retry-After"])))  # NaN -> 0
            except (KeyError, ValueError):  # absent, or an HTTP date
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

    def _decode(self, response: httpx.Response, method: str, path: str) -> Any:
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

    def _request(self, method: str, path: str, *, idempotent: bool, **kwargs: Any) -> Any:
        pool = _sync_client(self.base_url)
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            shard, client = pool.acquire()
            try:
                response = client.request(method, path, headers=self._headers, timeout=self.timeout, **kwargs)
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

    async def _arequest(self, method: str, path: str, *, idempotent: bool, **kwargs: Any) -> Any:
        pool = _async_client(self.base_url)
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            shard, client = pool.acquire()
            try:
                response = await client.request(method, path, headers=self._headers, timeout=self.timeout, **kwargs)
            except httpx.TransportError as e:
                if last or not self._retryable(e, idempotent):
                    raise self._unreachable(e, method, path, attempt + 1) from e
                await asyncio.sleep(self._delay(attempt))
                continue
            finally:
                pool.release(shard)
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
        return f"/instances/{self._instance_id}{suffix}"

    def _forget(self) -> str | None:
        instance_id, self._instance_id = self._instance_id, None
        return instance_id

    @staticmethod
    def _log_release_failure(instance_id: str, error: EnvironmentFailure) -> None:
        if getattr(error, "status_code", None) != 404:  # 404: already expired or released, nothing to do
            logger.warning("could not release remote instance %s (it expires when idle): %s", instance_id, error)

    # -- the Environment interface, sync
    def reset(self, task: Task) -> Observation:
        self.close()
        data = self._request("POST", "/instances", idempotent=False, json={"task": task.to_dict()})
        self._instance_id = data["instance_id"]
        return Observation.from_dict(data["observation"])

    def step(self, action: Action) -> StepResult:
        data = self._request("POST", self._path("/step"), idempotent=False, json={"action": action.to_dict()})
        return StepResult.from_dict(data)

    def evaluate(self) -> float:
        return float(self._request("POST", self._path("/evaluate"), idempotent=True)["score"])

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
        data = self._request("GET", "/tasks", idempotent=True, params={"split": split})
        return [Task.from_dict(t) for t in data["tasks"]]

    def profile(self) -> dict[str, Any]:
        return self._request("GET", "/profile", idempotent=True)

    def health(self) -> dict[str, Any]:
        """The service's ``/health`` answer (status, env, live instances, limit)."""
        return self._request("GET", "/health", idempotent=True)

    # -- async twins
    async def areset(self, task: Task) -> Observation:
        await self.aclose()
        data = await self._arequest("POST", "/instances", idempotent=False, json={"task": task.to_dict()})
        self._instance_id = data["instance_id"]
        return Observation.from_dict(data["observation"])

    async def astep(self, action: Action) -> StepResult:
        data = await self._arequest("POST", self._path("/step"), idempotent=False, json={"action": action.to_dict()})
        return StepResult.from_dict(data)

    async def aevaluate(self) -> float:
        return float((await self._arequest("POST", self._path("/evaluate"), idempotent=True))["score"])

    async def aclose(self) -> None:
        instance_id = self._forget()
        if instance_id is None:
            return
        try:
            await self._arequest("DELETE", f"/instances/{instance_id}", idempotent=True)
        except EnvironmentFailure as e:
            self._log_release_failure(instance_id, e)

    async def alist_tasks(self, split: str = "train") -> list[Task]:
        data = await self._arequest("GET", "/tasks", idempotent=True, params={"split": split})
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

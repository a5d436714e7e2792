"""``RemoteEnvironment``: an environment served by ``env_tools.server``, behind the same interface.

A rollout cannot tell it from a local environment: ``reset`` creates a server-side instance
(releasing the previous one) and gets its first observation in the same answer, ``step`` /
``evaluate`` act on it, ``close`` releases it. A step that ends the episode brings the score back
with it (``?evaluate_if_done=true``), so the ``evaluate`` that follows costs no request; a service
that predates this answers without it and ``evaluate`` asks.

The sync methods share one httpx connection pool per base URL. The async twins, the path of
concurrent rollouts, speak HTTP/1.1 themselves over asyncio (``_AsyncPool``): keep-alive connections
per base URL *and event loop* (a connection belongs to the loop that opened them), each request one
write of bytes built in one go and its answer parsed as it arrives. That costs a fraction of httpx's
per-request machinery (request and header models, the pool's walk over its connections, anyio),
which made the client, not the service, the bottleneck of 64 concurrent rollouts (measured: ~1 ms of
client CPU per request with httpx, ~0.05 ms now). It connects directly: unlike httpx, it does not
route through the proxy named by ``HTTP_PROXY`` / ``HTTPS_PROXY``.

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
import json
import logging
import os
import random
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import httpx

try:  # langsmith's dependency, so normally present; the standard library does the same job a little slower
    import orjson
except ImportError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]

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
# The async transport: connections per base URL and event loop at most (more concurrent requests wait for
# one), how long an idle one is reused (below uvicorn's 5 s keep-alive, as above), the largest header block.
_MAX_CONNECTIONS = _SHARD_CONNECTIONS * _MAX_SHARDS
_KEEPALIVE_S = 4.0
_MAX_HEAD_BYTES = 1 << 16


def _dumps(data: Any) -> bytes:
    if orjson is not None:
        try:
            return orjson.dumps(data)
        except TypeError:  # e.g. non-string keys, or a lone surrogate: the standard library's JSON escapes it
            pass
    return json.dumps(data, allow_nan=False, separators=(",", ":")).encode()  # ASCII: the service names a bad character


def _loads(data: bytes) -> Any:
    return orjson.loads(data) if orjson is not None else json.loads(data)


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
_async_clients: dict[asyncio.AbstractEventLoop, dict[str, _AsyncPool]] = {}


def _sync_client(base_url: str) -> _Pool:
    key = (os.getpid(), base_url)  # a forked worker must not share its parent's sockets
    with _clients_lock:
        pool = _sync_clients.get(key)
        if pool is None or pool.is_closed:
            shard = functools.partial(httpx.Client, base_url=base_url, limits=_SHARD_LIMITS, verify=_tls())
            pool = _sync_clients[key] = _Pool(shard)
        return pool


def _async_client(base_url: str) -> _AsyncPool:
    loop = asyncio.get_running_loop()
    with _clients_lock:
        # Pooled connections point back at their loop, so weak keys would never drop: forget the pools
        # of closed loops (one per finished asyncio.run) explicitly; their sockets close when collected.
        for old in [old for old in _async_clients if old.is_closed()]:
            del _async_clients[old]
        per_loop = _async_clients.setdefault(loop, {})
        pool = per_loop.get(base_url)
        if pool is None or pool.is_closed:
            pool = per_loop[base_url] = _AsyncPool(base_url)
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
        pool.close()
    await asyncio.sleep(0)  # let the transports close their sockets


# -- the async transport ---------------------------------------------------------------------------
class _Answer:
    """An HTTP answer: the parts of ``httpx.Response`` that ``RemoteEnvironment`` reads."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code, self.headers, self.content = status_code, headers, content  # header names lower-case

    def json(self) -> Any:
        return _loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: one request at a time, its answer parsed as the bytes arrive.

    Answers with ``Content-Length``, chunked answers and answers that end when the server closes are read;
    an answer the server marks ``Connection: close`` (or one that leaves stray bytes) retires the connection.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reusable = True
        self.idle_since = 0.0
        self._waiter: asyncio.Future[_Answer] | None = None
        self._buffer = bytearray()
        self._head: tuple[int, dict[str, str]] | None = None
        self._length: int | None = None  # body bytes expected; -1: chunked; None: until the server closes
        self._chunks: list[bytes] = []

    # -- asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        if self._head is not None and self._length is None:  # the answer ends with the connection
            self._finish(bytes(self._buffer))
        else:
            reason = f" ({type(exc).__name__}: {exc})" if exc else ""
            self._fail(httpx.RemoteProtocolError(f"Server disconnected without sending a complete answer{reason}."))

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():  # bytes nobody asked for: the stream is out of step
            self.close()
            return
        self._buffer += data
        try:
            self._parse()
        except ValueError as e:  # a malformed status line, header or chunk size
            self._fail(httpx.RemoteProtocolError(f"Malformed HTTP answer: {e}"))
            self.close()

    # -- one request
    async def request(self, data: bytes, timeout: float) -> _Answer:
        """Send ``data`` (a whole request) and wait at most ``timeout`` seconds for the answer."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        self._buffer.clear()
        self._head, self._length, self._chunks = None, None, []
        self.transport.write(data)
        timer = loop.call_later(timeout, self._time_out, timeout)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _time_out(self, timeout: float) -> None:
        self._fail(httpx.ReadTimeout(f"No answer within {timeout:g} s."))

    def usable(self, now: float) -> bool:
        return self.reusable and now - self.idle_since < _KEEPALIVE_S and not self.transport.is_closing()  # type: ignore[union-attr]

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    # -- parsing
    def _finish(self, body: bytes) -> None:
        if self._waiter is not None and not self._waiter.done():
            assert self._head is not None
            self._waiter.set_result(_Answer(self._head[0], self._head[1], body))

    def _fail(self, error: Exception) -> None:
        self.reusable = False  # an answer may still be on its way: never send another request here
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)

    def _parse(self) -> None:
        buffer = self._buffer
        while self._head is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > _MAX_HEAD_BYTES:
                    raise ValueError(f"the header block is over {_MAX_HEAD_BYTES} bytes")
                return
            lines = buffer[:end].decode("latin-1").split("\r\n")
            del buffer[: end + 4]
            version, _, rest = lines[0].partition(" ")
            status = int(rest[:3])
            if 100 <= status < 200:
                continue  # an interim answer (100 Continue): the real one follows
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, colon, value = line.partition(":")
                if not colon:
                    raise ValueError(f"header line {line[:80]!r} has no colon")
                headers[name.strip().lower()] = value.strip()
            self._head = (status, headers)
            if version != "HTTP/1.1" or headers.get("connection", "").lower() == "close":
                self.reusable = False
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._length = -1
            elif "content-length" in headers:
                self._length = int(headers["content-length"])
                if self._length < 0:
                    raise ValueError(f"negative Content-Length {self._length}")
            elif status in (204, 304):
                self._length = 0
            else:
                self.reusable = False  # the body ends when the server closes
        if self._length is None:
            return
        if self._length >= 0:
            if len(buffer) >= self._length:
                if len(buffer) > self._length:
                    self.reusable = False
                self._finish(bytes(buffer[: self._length]))
            return
        while True:  # chunked: <hex size>\r\n<data>\r\n ... 0\r\n<trailers>\r\n
            line_end = buffer.find(b"\r\n")
            if line_end < 0:
                return
            size = int(buffer[:line_end].split(b";", 1)[0], 16)
            if size == 0:  # the last chunk; the (rarely sent) trailers end with an empty line
                if buffer.find(b"\r\n\r\n", line_end) < 0:
                    return
                self._finish(b"".join(self._chunks))
                return
            if len(buffer) < line_end + 2 + size + 2:
                return
            self._chunks.append(bytes(buffer[line_end + 2 : line_end + 2 + size]))
            del buffer[: line_end + 2 + size + 2]


class _AsyncPool:
    """Keep-alive connections of one event loop to one base URL, at most ``_MAX_CONNECTIONS`` at once.

    An idle connection is reused last-in first-out (the one most likely still open), or dropped once
    idle ``_KEEPALIVE_S``; a request that fails, times out or is cancelled retires its connection, so
    a late answer can never be read as the next request's.
    """

    def __init__(self, base_url: str) -> None:
        parts = urllib.parse.urlsplit(base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = urllib.parse.quote(parts.path.rstrip("/"), safe="/%")
        self._authority = parts.netloc.rpartition("@")[2]
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(_MAX_CONNECTIONS)
        self.is_closed = False

    def encode(self, method: str, target: str, headers: str, body: bytes | None) -> bytes:
        """The request's bytes; ``headers`` are whole header lines, each ending in CRLF."""
        head = f"{method} {self._prefix}{target} HTTP/1.1\r\nHost: {self._authority}\r\nAccept: application/json\r\n"
        if body is None:
            length = "" if method == "GET" else "Content-Length: 0\r\n"
            return f"{head}{headers}{length}\r\n".encode()
        return f"{head}{headers}Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body

    async def send(self, data: bytes, timeout: float) -> _Answer:
        """Send one request (``encode``'s bytes) and return its answer; ``httpx.TransportError`` on failure."""
        if self._slots.locked():  # every connection busy: wait for one, at most the timeout
            try:
                await asyncio.wait_for(self._slots.acquire(), timeout)
            except TimeoutError as e:
                raise httpx.PoolTimeout(f"All {_MAX_CONNECTIONS} connections stayed busy for {timeout:g} s.") from e
        else:
            await self._slots.acquire()
        try:
            connection = await self._connection(timeout)
            try:
                answer = await connection.request(data, timeout)
            except BaseException:
                connection.close()
                raise
            if connection.reusable and not self.is_closed:
                connection.idle_since = time.monotonic()
                self._idle.append(connection)
            else:
                connection.close()
            return answer
        finally:
            self._slots.release()

    async def _connection(self, timeout: float) -> _Connection:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.usable(now):
                return connection
            connection.close()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_connection(
                    _Connection, self._host, self._port, ssl=_tls() if self._https else None
                )
        except TimeoutError as e:
            raise httpx.ConnectTimeout(f"No connection within {timeout:g} s.") from e
        except OSError as e:  # refused, unreachable, unknown host, TLS handshake
            raise httpx.ConnectError(str(e) or type(e).__name__) from e
        return connection

    def close(self) -> None:
        """Close the idle connections; those in use close when their answer is in."""
        self.is_closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


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

"""The HTTP transport of ``RemoteEnvironment``: connection pools shared per base URL (and event loop).

The async calls, the path of concurrent rollouts, speak HTTP/1.1 themselves over asyncio
(``_AsyncPool``): keep-alive connections per base URL *and event loop* (a connection belongs to the
loop that opened it), each request one write of bytes built in one go and its answer parsed as it
arrives (``_Connection``). Why not httpx there: its per-request machinery (request and header models,
the pool's walk over its connections, anyio) cost ~1 ms of client CPU per request, which made the
client, not the service, the bottleneck of 64 concurrent rollouts; this costs ~0.05 ms
(docs/benchmarks.md, "HTTP rollouts"). It connects directly: unlike httpx, it does not route through
the proxy named by ``HTTP_PROXY`` / ``HTTPS_PROXY``.

The sync calls keep httpx, one pool per base URL (and process) spread over small clients
(``_Pool``). Both raise ``httpx.TransportError`` subclasses when a request fails, so the client
handles one family of errors; retries, status codes and error messages are the client's business
(``env_tools.client``), not this module's.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
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

# Idle connections expire before uvicorn's 5 s keep-alive closes them, so a request is never sent
# on a socket the server is closing at that moment. Each shard keeps every connection it opens
# alive: httpcore 1.0 closes an idle connection whenever the pool holds more connections in all
# than max_keepalive_connections, so a smaller cap reopens a connection per request under load.
_SHARD_CONNECTIONS = 8
_MAX_SHARDS = 32  # 256 connections per base URL (and event loop) at most
_SHARD_LIMITS = httpx.Limits(
    max_connections=_SHARD_CONNECTIONS, max_keepalive_connections=_SHARD_CONNECTIONS, keepalive_expiry=4.0
)
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

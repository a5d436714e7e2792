"""Serving helpers shared by the two HTTP services (the environment service, the policy server) and their tests.

Loopback serving (uvicorn imported lazily), and the pieces both services guard themselves with:
``BearerAuthMiddleware`` (a 401 in the service's own error shape, answered before the request body is
parsed, the body drained so the client reads the answer rather than a reset), ``BodyLimitMiddleware``
(a 413 before a body over the limit is held), ``guarded_http`` (uvicorn's HTTP/1.1 protocol with a cap
on the request line and headers, and a deadline to send them), ``check_bind`` (no open address without
a secret), ``send_json_error`` / ``drain_request`` and ``is_loopback``.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = [
    "DEFAULT_HEADER_TIMEOUT_S",
    "DEFAULT_MAX_HEADER_BYTES",
    "BearerAuthMiddleware",
    "BodyLimitMiddleware",
    "add_header_limit_arguments",
    "check_bind",
    "drain_request",
    "free_port",
    "guarded_http",
    "is_loopback",
    "send_json_error",
    "serve_in_background",
    "uvicorn_guards",
]

logger = logging.getLogger("langgraph_evolver.serving")

DEFAULT_MAX_HEADER_BYTES = 64 * 1024
"""The request line and headers of one request, at most (``--max-header-bytes``); nginx allows 32 KiB."""
DEFAULT_HEADER_TIMEOUT_S = 10.0
"""Seconds a connection may take to send a request's line and headers (``--header-timeout``)."""


async def send_json_error(send: Any, status: int, body: Mapping[str, Any],
                          headers: Sequence[tuple[bytes, bytes]] = ()) -> None:  # fmt: skip
    """Answer a raw ASGI request with ``status`` and the JSON ``body``."""
    data = json.dumps(body).encode()
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": data})


async def drain_request(receive: Any, limit: int) -> None:
    """Read and drop up to ``limit`` bytes of a refused request, so the client reads our answer, not a reset."""
    seen = 0
    while seen <= limit:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
        seen += len(message.get("body", b""))


class BearerAuthMiddleware:
    """Raw-ASGI middleware: 401 unless ``Authorization: Bearer <token>`` matches (``open_paths`` excepted).

    Raw ASGI rather than a route dependency, so that no route (``/docs`` and ``/openapi.json`` included)
    escapes it and a refused request's body is never parsed. ``refusal(problem)`` gives the JSON body of
    the 401 in the service's own error shape; ``problem`` says whether the header was missing or wrong.
    """

    def __init__(self, app: Any, *, token: str, open_paths: Sequence[str] = (),
                 refusal: Callable[[str], Mapping[str, Any]]) -> None:  # fmt: skip
        if not token:
            raise ValueError("BearerAuthMiddleware needs a non-empty token.")
        self.app, self._token, self._open, self._refusal = app, token.encode(), frozenset(open_paths), refusal

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in self._open:
            return await self.app(scope, receive, send)
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, value = header.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), self._token):
            return await self.app(scope, receive, send)
        await drain_request(receive, 1 << 20)
        await send_json_error(send, 401, self._refusal("missing" if not header else "wrong"),
                              [(b"www-authenticate", b"Bearer")])  # fmt: skip


class BodyLimitMiddleware:
    """Raw-ASGI middleware: 413 for a request body over ``max_bytes``, declared or streamed, before it is held.

    A declared ``Content-Length`` over the limit is answered before any of the body is read; a chunked body is
    buffered only up to the limit. The rest is read and dropped (up to 16 times the limit, then the connection
    closes), so the client reads the 413 rather than a reset. ``refusal(size)`` gives the JSON body in the
    service's own error shape; ``size`` is what the message can say of the body's size.
    """

    def __init__(self, app: Any, *, max_bytes: int, refusal: Callable[[str], Mapping[str, Any]]) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}.")
        self.app, self.max_bytes, self._refusal = app, max_bytes, refusal

    async def _reject(self, receive: Any, send: Any, size: str) -> None:
        await drain_request(receive, 16 * self.max_bytes)
        await send_json_error(send, 413, self._refusal(size))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._reject(receive, send, declared.decode())
        chunks, total, more = [], 0, True
        while more:  # buffer the body (chunked bodies have no declared length)
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.max_bytes:
                return await self._reject(receive, send, f"more than {total}")
            chunks.append(chunk)
            more = message.get("more_body", False)
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


_REFUSED_LINGER_S = 1.0
"""How long a connection refused by ``guarded_http`` stays open for its client to read the answer."""


def _raw_answer(status: str, message: str) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, with ``{"error": {"message", "type"}}`` as its body."""
    body = json.dumps({"error": {"message": message, "type": "bad_request"}}).encode()
    head = (f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n")  # fmt: skip
    return head.encode() + body


def guarded_http(*, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
                 header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S) -> type[asyncio.Protocol]:  # fmt: skip
    """uvicorn's HTTP/1.1 protocol (httptools when installed, as uvicorn's ``auto``, else h11) with two guards.

    uvicorn has neither: httptools holds a request line and headers of any size (eight unfinished 32 MB headers
    held 320 MB), and a connection that sends its headers a byte at a time is held as long as it keeps sending
    (the keep-alive timeout restarts on every byte). Here a request whose line and headers pass
    ``max_header_bytes`` is answered 431 and its connection closed; a connection that has not sent a request's
    whole line and headers ``header_timeout_s`` after it opened (or after the previous answer) gets a 408 and is
    closed (without the 408 when it sent nothing: an idle connection). A request's body is not under either:
    ``BodyLimitMiddleware`` caps it.
    """
    if max_header_bytes < 1 or not header_timeout_s > 0:
        raise ValueError(f"max_header_bytes and header_timeout_s must be positive, got {max_header_bytes} and "
                         f"{header_timeout_s}.")  # fmt: skip
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:  # pragma: no cover - uvicorn without its [standard] extra
        from uvicorn.protocols.http.h11_impl import H11Protocol as base  # type: ignore[assignment]

    class GuardedHTTP(base):  # type: ignore[misc, valid-type]
        """Counts the bytes of a request until its headers are parsed (uvicorn then starts a new cycle)."""

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._guard_cycle, self._refused, self._header_bytes = self.cycle, False, 0
            self._await_headers()

        def _await_headers(self) -> None:
            timer: asyncio.TimerHandle | None = self.loop.call_later(header_timeout_s, self._headers_too_slow)
            self._header_timer = timer

        def _headers_done(self) -> bool:
            """Whether a request's headers were parsed since the last call (uvicorn made its cycle): stop the
            guards until the next request. A pipelined request's head, sent while an answer is on its way, is
            counted from the end of the previous body; its deadline starts with that answer."""
            if self.cycle is self._guard_cycle:
                return False
            self._guard_cycle, self._header_bytes = self.cycle, 0
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            return True

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return  # what a refused client still sends is dropped, not parsed or held
            between = self.cycle is None or not self.cycle.more_body  # no body is being read: this is a head
            super().data_received(data)
            if self._headers_done() or not between or self.transport.is_closing():
                return
            self._header_bytes += len(data)
            if self._header_bytes > max_header_bytes:
                self._refuse("431 Request Header Fields Too Large",
                             f"The request line and headers are over this server's limit of {max_header_bytes} "
                             "bytes (--max-header-bytes); send smaller headers.")  # fmt: skip

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self._headers_done() and not self.transport.is_closing():  # no pipelined request began
                self._await_headers()

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self._headers_done() or self.transport.is_closing():
                return
            if not self._header_bytes:  # an idle connection: closed quietly, as uvicorn's keep-alive timeout does
                self.transport.close()
            else:
                self._refuse("408 Request Timeout",
                             f"The request line and headers did not arrive within {header_timeout_s:g} s of the "
                             "connection being ready for them (--header-timeout).")  # fmt: skip

        def _refuse(self, status: str, message: str) -> None:
            logger.warning("%s from %s: %s", status, self.client, message)
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            self.transport.write(_raw_answer(status, message))
            # Closing with the client's bytes unread would reset the connection before it reads the answer: end
            # our side, drop what still comes for a second, then close.
            self._refused = True
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(_REFUSED_LINGER_S, self.transport.close)

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            super().connection_lost(exc)

    return GuardedHTTP


def uvicorn_guards(*, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
                   header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S) -> dict[str, Any]:  # fmt: skip
    """Keyword arguments for ``uvicorn.run`` / ``uvicorn.Config``: the ``guarded_http`` protocol."""
    return {"http": guarded_http(max_header_bytes=max_header_bytes, header_timeout_s=header_timeout_s),
            "h11_max_incomplete_event_size": max_header_bytes}  # fmt: skip


def add_header_limit_arguments(parser: Any) -> None:
    """``--max-header-bytes`` and ``--header-timeout`` on an argparse parser or group: one spelling and one help
    text for both services' command lines (what ``uvicorn_guards`` takes)."""
    parser.add_argument(
        "--max-header-bytes",
        type=int,
        default=DEFAULT_MAX_HEADER_BYTES,
        help=f"largest request line + headers; larger is a 431 (default: {DEFAULT_MAX_HEADER_BYTES})",
    )
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=DEFAULT_HEADER_TIMEOUT_S,
        help="seconds a connection has to send a request's line and headers; slower is a 408 "
        f"(default: {DEFAULT_HEADER_TIMEOUT_S:g})",
    )


def check_bind(host: str, *, secret: str | None, insecure: bool, refusal: str) -> None:
    """Refuse (``SystemExit(refusal)``) to listen on a non-loopback ``host`` without a secret, unless ``insecure``."""
    if secret or insecure or is_loopback(host):
        return
    raise SystemExit(refusal)


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextmanager
def serve_in_background(app: Any, *, host: str = "127.0.0.1", port: int = 0, timeout: float = 30.0,
                        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
                        header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S) -> Iterator[str]:  # fmt: skip
    """Serve an ASGI ``app`` with uvicorn on a thread (port 0 = a free one); yields the base URL.

    The header guards are the command lines' (``uvicorn_guards``).

    Example::

        with serve_in_background(create_app("checkpoints/tiny-policy")) as url:
            ChatOpenAI(base_url=url + "/v1", api_key="x", model="tiny-policy", disable_streaming=True)
    """
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    guards = uvicorn_guards(max_header_bytes=max_header_bytes, header_timeout_s=header_timeout_s)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **guards))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="http-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError(f"uvicorn did not start on {host}:{bound_port}")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()

"""Serving helpers shared by the two HTTP services (the environment service, the policy server) and their tests.

Loopback serving (uvicorn imported lazily), and the raw-ASGI pieces both services guard themselves
with: ``BearerAuthMiddleware`` (a 401 in the service's own error shape, answered before the request
body is parsed, the body drained so the client reads the answer rather than a reset),
``send_json_error`` / ``drain_request`` and ``is_loopback``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = [
    "BearerAuthMiddleware",
    "drain_request",
    "free_port",
    "is_loopback",
    "send_json_error",
    "serve_in_background",
]


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
def serve_in_background(app: Any, *, host: str = "127.0.0.1", port: int = 0, timeout: float = 30.0) -> Iterator[str]:
    """Serve an ASGI ``app`` with uvicorn on a thread (port 0 = a free one); yields the base URL.

    Example::

        with serve_in_background(create_app("checkpoints/tiny-policy")) as url:
            ChatOpenAI(base_url=url + "/v1", api_key="x", model="tiny-policy", disable_streaming=True)
    """
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
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

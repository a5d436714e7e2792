"""Raw-ASGI middleware of the environment service: bearer-token auth and the request body cap.

Both answer in the service's JSON error shape (``error_body``) before the app sees the request, and
drain what the client is still sending so it gets the answer rather than a connection reset.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Sequence
from typing import Any

from env_tools._instances import error_body

__all__ = ["BearerAuthMiddleware", "BodyLimitMiddleware"]


async def _send_error(send: Any, status: int, message: str, type: str, headers: Sequence[tuple[bytes, bytes]] = ()):
    body = json.dumps(error_body(message, type)).encode()
    start_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start_headers})
    await send({"type": "http.response.body", "body": body})


async def _drain(receive: Any, limit: int) -> None:
    """Read and drop up to ``limit`` request bytes, so the client gets our answer, not a reset."""
    seen = 0
    while seen <= limit:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
        seen += len(message.get("body", b""))


class BearerAuthMiddleware:
    """Answer 401 unless ``Authorization: Bearer <token>`` matches (except on ``open_paths``)."""

    def __init__(self, app: Any, *, token: str, open_paths: Sequence[str] = ()) -> None:
        self.app, self._token, self._open = app, token.encode(), set(open_paths)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in self._open:
            return await self.app(scope, receive, send)
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, value = header.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), self._token):
            return await self.app(scope, receive, send)
        how = (
            "send 'Authorization: Bearer <token>' with the token the service was started with "
            "(--token or EVOLVER_ENV_TOKEN); RemoteEnvironment(url, token=...) does this."
        )
        problem = "This service requires a bearer token" if not header else "The bearer token is wrong or malformed"
        await _drain(receive, 1 << 20)
        await _send_error(send, 401, f"{problem}: {how}", "unauthorized", [(b"www-authenticate", b"Bearer")])


class BodyLimitMiddleware:
    """Answer 413 to request bodies over ``max_bytes`` (declared or streamed)."""

    def __init__(self, app: Any, *, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def _reject(self, receive: Any, send: Any, size: str) -> None:
        await _drain(receive, 16 * self.max_bytes)
        message = (
            f"The request body is {size} bytes, over this service's limit of {self.max_bytes} bytes. Send a "
            "smaller request, or start the service with a larger --max-request-bytes."
        )
        await _send_error(send, 413, message, "payload_too_large")

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

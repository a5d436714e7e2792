"""Raw-ASGI middleware of the environment service: bearer-token auth and the request body cap.

Both answer in the service's JSON error shape (``error_body``) before the app sees the request, and
drain what the client is still sending so it gets the answer rather than a connection reset.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from env_tools._instances import error_body
from langgraph_evolver._serving import BearerAuthMiddleware as _BearerAuth
from langgraph_evolver._serving import drain_request, send_json_error

__all__ = ["BearerAuthMiddleware", "BodyLimitMiddleware"]


async def _send_error(send: Any, status: int, message: str, type: str, headers: Sequence[tuple[bytes, bytes]] = ()):
    await send_json_error(send, status, error_body(message, type), headers)


def _refusal(problem: str) -> dict[str, Any]:
    what = "This service requires a bearer token" if problem == "missing" else "The bearer token is wrong or malformed"
    how = (
        "send 'Authorization: Bearer <token>' with the token the service was started with "
        "(--token or EVOLVER_ENV_TOKEN); RemoteEnvironment(url, token=...) does this."
    )
    return error_body(f"{what}: {how}", "unauthorized")


class BearerAuthMiddleware(_BearerAuth):
    """401 unless ``Authorization: Bearer <token>`` matches (``open_paths`` excepted), in ``error_body`` shape."""

    def __init__(self, app: Any, *, token: str, open_paths: Sequence[str] = ()) -> None:
        super().__init__(app, token=token, open_paths=open_paths, refusal=_refusal)


class BodyLimitMiddleware:
    """Answer 413 to request bodies over ``max_bytes`` (declared or streamed)."""

    def __init__(self, app: Any, *, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def _reject(self, receive: Any, send: Any, size: str) -> None:
        await drain_request(receive, 16 * self.max_bytes)
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

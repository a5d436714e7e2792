"""Raw-ASGI middleware of the environment service: bearer-token auth, the request body cap, the fast path.

The first two answer in the service's JSON error shape (``error_body``) before the app sees the request,
and drain what the client is still sending so it gets the answer rather than a connection reset.
``InstanceFastPath`` answers well-formed requests to the instance endpoints without FastAPI's routing.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic import BaseModel

from env_tools._instances import ServiceError, error_body
from langgraph_evolver._serving import BearerAuthMiddleware as _BearerAuth
from langgraph_evolver._serving import BodyLimitMiddleware as _BodyLimit
from langgraph_evolver._serving import send_json_error

__all__ = ["BearerAuthMiddleware", "BodyLimitMiddleware", "FastRoute", "InstanceFastPath"]

FastRoute = tuple[type[BaseModel] | None, Callable[[Any], Awaitable[bytes]]]
"""A request's body model (``None``: the body is not read) and the call that answers it with JSON bytes."""


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


class BodyLimitMiddleware(_BodyLimit):
    """Answer 413 to request bodies over ``max_bytes`` (declared or streamed), in ``error_body`` shape."""

    def __init__(self, app: Any, *, max_bytes: int) -> None:
        def refusal(size: str) -> dict[str, Any]:
            message = (
                f"The request body is {size} bytes, over this service's limit of {max_bytes} bytes. Send a "
                "smaller request, or start the service with a larger --max-request-bytes."
            )
            return error_body(message, "payload_too_large")

        super().__init__(app, max_bytes=max_bytes, refusal=refusal)


class InstanceFastPath:
    """Answer the service's hottest requests (create, step, evaluate, release) without FastAPI's routing.

    Routing, dependency solving and the exception middleware cost a FastAPI app about 0.1 ms of CPU per
    request, as much as a sandbox step; 64 concurrent rollouts make the service, not the client, the
    bottleneck. ``route(method, path, query)`` names the requests this answers: their JSON body is
    validated with the route's own model and the answer comes from the same work the route calls, so
    the answer is the same either way. Anything else, and any body that is not JSON of the right shape,
    goes on to the app, whose routes answer it (with their usual error messages). Installed innermost,
    after the bearer-token check and the body cap. Requests answered here are not seen by FastAPI's
    own telemetry (OpenTelemetry spans) when that is configured.
    """

    def __init__(self, app: Any, *, route: Callable[[str, str, bytes], FastRoute | None]) -> None:
        self.app, self.route = app, route

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        found = None
        if scope["type"] == "http" and not scope.get("root_path"):
            found = self.route(scope["method"], scope["path"], scope.get("query_string", b""))
        if found is None:
            return await self.app(scope, receive, send)
        model, answer = found
        parsed = None
        if model is not None:
            body = await _read_body(receive)
            if body is None:
                return  # the client went away
            parsed = _parse(model, scope, body)
            if parsed is None:
                return await self.app(scope, _replay(body, receive), send)
        headers: list[tuple[bytes, bytes]] = []
        try:
            status, data = 200, await answer(parsed)
        except ServiceError as e:  # as the app's handler answers it
            status = e.status_code
            data = json.dumps(error_body(e.message, e.type), ensure_ascii=False, separators=(",", ":")).encode()
            headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (e.headers or {}).items()]
        start = [(b"content-length", str(len(data)).encode()), (b"content-type", b"application/json"), *headers]
        await send({"type": "http.response.start", "status": status, "headers": start})
        await send({"type": "http.response.body", "body": data})


async def _read_body(receive: Any) -> bytes | None:
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


def _parse(model: type[BaseModel], scope: Any, body: bytes) -> BaseModel | None:
    """The body as ``model``, where FastAPI would accept it; ``None`` where the route must answer."""
    content_type = next((v for k, v in scope.get("headers") or () if k == b"content-type"), b"")
    media = content_type.split(b";", 1)[0].strip().lower()
    if not (media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))):
        return None  # FastAPI reads such a body as bytes (or, without a content type, not as JSON)
    try:
        return model.model_validate(json.loads(body))
    except (ValueError, RecursionError):  # not JSON, or not this shape (pydantic's ValidationError)
        return None


def _replay(body: bytes, receive: Any) -> Callable[[], Awaitable[Any]]:
    replayed = False

    async def replay() -> Any:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay

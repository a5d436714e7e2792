"""The environment service's error answers: every failure as one JSON body (``error_body``) with a hint.

Apart from ``server.py`` (the app) so each stays under 600 lines.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from env_tools._instances import ServiceError, error_body

logger = logging.getLogger("env_tools.server")

_STEP_HINT = (
    'A step body looks like {"action": {"tool_calls": [{"name": "search_contacts", '
    '"arguments": {"query": "Ann"}, "id": "call_0"}], "content": null}}; '
    'a final answer is {"action": {"content": "..."}}.'
)
_CREATE_HINT = 'Send {"task": <Task.to_dict()>} or {"task_id": "...", "split": "train"}.'


# -- error handlers ------------------------------------------------------------------------
def _describe_validation(exc: RequestValidationError) -> tuple[int, str, str]:
    errors = exc.errors()
    bad_json = next((e for e in errors if e.get("type") == "json_invalid"), None)
    if bad_json is not None:
        reason = (bad_json.get("ctx") or {}).get("error", "JSON decode error")
        pos = bad_json.get("loc", ("body", "?"))[-1]
        message = f"The request body is not valid JSON ({reason} at character {pos}); send a JSON object."
        return 400, message, "invalid_json"
    parts = []
    for e in errors[:5]:
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        if not loc and e.get("type") == "missing":
            parts.append("the request body is missing (send a JSON object)")
        else:
            parts.append(f"{loc}: {msg}" if loc else msg)
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return 422, "Invalid request: " + "; ".join(parts) + more + ".", "invalid_request"


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse(error_body(exc.message, exc.type), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message, kind = _describe_validation(exc)
        path = request.url.path
        hint = _STEP_HINT if path.endswith("/step") else _CREATE_HINT if path.rstrip("/") == "/instances" else ""
        return JSONResponse(error_body(f"{message} {hint}".strip(), kind), status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail)
        if exc.status_code == 404:
            message = f"No endpoint {request.method} {request.url.path}; see GET /docs for the API."
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}; see GET /docs for the API."
        return JSONResponse(error_body(message, "http_error"), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:  # a bug in the service itself
        logger.exception("unexpected error in %s %s", request.method, request.url.path)
        message = f"Internal error in the environment service ({type(exc).__name__}: {exc}); see the service log."
        return JSONResponse(error_body(message, "internal_error"), status_code=500)


_ERROR_BODY_SCHEMA = {
    "title": "ErrorBody",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {"message": {"type": "string"}, "type": {"type": "string"}},
        }
    },
}
_ERRORS = {
    400: "The body is not JSON, a task sent whole names code (a checker), or the environment refused the call (a "
    "bad split, task or action).",
    401: "Missing or wrong bearer token: send 'Authorization: Bearer <token>' (the service's --token).",
    404: "Unknown task id, or an instance that expired, was released or never existed.",
    413: "The request body is over the service's --max-request-bytes.",
    422: "The body or query does not match the schema; the message names the field.",
    429: "The service holds --max-instances live instances; release one, or retry after Retry-After seconds.",
    500: "The environment raised (a bug in it); the service keeps serving.",
}
_ROUTE_ERRORS: dict[tuple[str, str], tuple[int, ...]] = {
    ("get", "/tasks"): (400, 500),
    ("get", "/profile"): (400, 500),
    ("post", "/instances"): (400, 404, 413, 422, 429, 500),
    ("post", "/instances/{instance_id}/step"): (400, 404, 413, 422, 500),
    ("post", "/instances/{instance_id}/evaluate"): (404, 500),
    ("delete", "/instances/{instance_id}"): (404,),
}


def _document_errors(app: FastAPI, *, token: bool) -> None:
    """Make ``/openapi.json`` list each route's error answers (``{"error": {"message", "type"}}``, 422 included)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):  # FastAPI's 422 body; ours is ErrorBody
            components.pop(unused, None)
        components["ErrorBody"] = _ERROR_BODY_SCHEMA
        for path, operations in schema.get("paths", {}).items():
            for method, operation in operations.items():
                responses = operation.setdefault("responses", {})
                codes = {*_ROUTE_ERRORS.get((method, path), ()), *((401,) if token and path != "/health" else ())}
                codes |= {422} if "422" in responses else set()
                for code in sorted(codes):
                    content = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
                    responses[str(code)] = {"description": _ERRORS[code], "content": content}
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]

"""The HTTP environment service: any registered environment behind a small JSON API.

Remote rollout workers create an instance per rollout, step it, evaluate it and release it;
``env_tools.client.RemoteEnvironment`` speaks this API behind the ``Environment`` interface.

Run it (needs the ``serve`` extra: fastapi + uvicorn)::

    python -m env_tools.server --env sandbox --port 8080
    python -m env_tools.server --env sandbox --host 0.0.0.0 --port 8080 --token s3cret \
        --max-instances 512 --idle-timeout 300 --env-arg seed=7

Endpoints (JSON; every error is ``{"error": {"message", "type"}}``):

- ``GET /health`` (never needs the token), ``GET /tasks?split=train``, ``GET /profile``
- ``POST /instances`` ``{"task": {...}}`` or ``{"task_id": "...", "split": "train"}``
- ``POST /instances/{id}/step`` ``{"action": {...}}``, ``POST /instances/{id}/evaluate``; with
  ``?evaluate_if_done=true`` a step that ends the episode also answers ``"score"`` (what ``evaluate``
  would answer then), which saves the client the request (absent when the evaluation failed: ask
  ``evaluate`` for the error)
- ``DELETE /instances/{id}``

A task sent whole (``{"task": {...}}``) never names code for the service to run: one whose metadata holds a
``checker`` (``module:function``, ``path/file.py:function`` or any other value) is refused with 400
(``task_names_code``) unless it is the service's own task of that id with that same checker (as
``RemoteEnvironment.reset`` sends the tasks of ``GET /tasks`` back). Only the checkers of the service's
own task files run.

Limits: at most ``max_instances`` live instances (429 with ``Retry-After`` beyond), instances idle longer than
``idle_timeout_s`` are closed by a background sweep (their id then answers 404 "expired"),
request bodies over ``max_request_bytes`` are refused (413); on the command line, a request line and headers
over ``--max-header-bytes`` (431) or not sent within ``--header-timeout`` seconds (408) close the connection,
and a non-loopback ``--host`` needs ``--token`` (or ``--insecure``). An exception inside the
environment becomes a JSON error (400 for ``EnvironmentFailure``, else 500); the service keeps
serving. Environment calls run in a thread pool; each instance has its own lock, so calls to
one instance are serialized while different instances run concurrently. The instance endpoints
hop to the pool once per request, for the environment call and the JSON encoding of its answer
(a sync FastAPI endpoint hops twice: its response model is validated in the threadpool too, and
the answer already has the documented shape). Well-formed requests to them are answered by a
raw-ASGI fast path (``InstanceFastPath``) with the same work, without FastAPI's routing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypeVar

from fastapi import FastAPI, Query
from fastapi.responses import Response

try:  # langsmith's dependency, so normally present
    import orjson
except ImportError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]

from env_tools._instances import InstanceTable, ServiceError, error_body
from env_tools._middleware import BearerAuthMiddleware, BodyLimitMiddleware, FastRoute, InstanceFastPath
from env_tools._server_errors import _document_errors, _install_error_handlers
from env_tools.server_models import (
    CreateInstanceRequest,
    CreateInstanceResponse,
    EvaluateResponse,
    HealthResponse,
    ReleaseResponse,
    StepRequest,
    StepResultModel,
    TasksResponse,
)
from langgraph_evolver._serving import add_header_limit_arguments, check_bind, uvicorn_guards
from langgraph_evolver.environment import Environment, load_environment
from langgraph_evolver.errors import ConfigError, EnvironmentFailure
from langgraph_evolver.types import Action, Task

__all__ = [
    "BearerAuthMiddleware",
    "BodyLimitMiddleware",
    "InstanceTable",
    "ServiceError",
    "create_app",
    "error_body",
    "main",
    "make_parser",
    "parse_env_args",
]

logger = logging.getLogger("env_tools.server")
T = TypeVar("T")

_STEP_QUERIES = {b"": False, b"evaluate_if_done=true": True, b"evaluate_if_done=false": False}
_WORKER_THREADS = 40  # as many as Starlette's threadpool allows
_CODE_KEYS = ("checker",)
"""Task metadata keys whose value names code for the environment to run (the MCP environment's ``checker``)."""
_SPLITS = ("train", "test", "validation", "val", "dev")
"""Splits searched for the service's own copy of a task sent whole, after the request's and those listed."""
_EVALUATE_IF_DONE = (
    "When this step ends the episode, evaluate the instance too and answer its score as 'score' (left out "
    "when the evaluation fails: POST /instances/{instance_id}/evaluate then says why)."
)


# -- environment calls -------------------------------------------------------------------------
def _guarded(what: str, fn: Callable[[], T]) -> T:
    """Run an environment call; its exceptions become ``ServiceError`` (400 or 500)."""
    try:
        return fn()
    except ServiceError:
        raise
    except (EnvironmentFailure, ConfigError) as e:
        raise ServiceError(400, f"The environment refused {what}: {e}", "environment_failure") from e
    except Exception as e:
        logger.exception("environment raised during %s", what)
        raise ServiceError(
            500,
            f"The environment raised {type(e).__name__} during {what}: {e}. This is a bug in the environment "
            "(tool errors should come back as error observations); the service log has the traceback. The "
            "service is still running; create a new instance to continue.",
            "environment_error",
        ) from e


def _valid_score(score: float) -> bool:
    return not math.isnan(score) and 0.0 <= score <= 1.0


def _score_or_none(env: Environment) -> float | None:
    """``env.evaluate()`` for a step's answer, or ``None`` when it fails: ``/evaluate`` then reports why."""
    try:
        score = float(env.evaluate())
    except Exception:
        return None
    return score if _valid_score(score) else None


def _encode(what: str, data: dict[str, Any]) -> bytes:
    """JSON as ``JSONResponse`` writes it; a value JSON cannot hold is the environment's bug (500).

    orjson writes it about 30 times faster; where it would differ (it writes NaN and infinities as
    null, and refuses integer keys and huge integers), the standard library decides.
    """
    if orjson is not None:
        try:
            body = orjson.dumps(data)
        except TypeError:
            pass
        else:
            if b"null" not in body:
                return body
    try:
        return json.dumps(data, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()
    except (TypeError, ValueError) as e:
        raise ServiceError(
            500, f"The environment's answer to {what} is not JSON-serializable: {e}.", "environment_error"
        ) from e


def _json_response(body: bytes) -> Response:
    return Response(body, media_type="application/json")


class _Catalog:
    """One shared environment instance that answers ``list_tasks`` and ``profile``."""

    def __init__(self, env: Environment) -> None:
        self._env = env
        self._lock = threading.Lock()
        self._by_split: dict[str, dict[str, Task]] = {}

    def tasks(self, split: str) -> dict[str, Task]:
        with self._lock:
            if split not in self._by_split:
                tasks = _guarded(f"list_tasks({split!r})", lambda: self._env.list_tasks(split))
                self._by_split[split] = {t.id: t for t in tasks}
            return self._by_split[split]

    def own_task(self, task_id: str, split: str) -> Task | None:
        """The service's own task ``task_id``: in ``split``, the environment's splits when it can name them
        (``Environment.list_splits()``), a split listed before, or a usual split name."""
        splits = _guarded("list_splits()", self._env.list_splits) if hasattr(self._env, "list_splits") else []
        for name in dict.fromkeys([split, *splits, *self._by_split, *_SPLITS]):
            try:
                found = self.tasks(name).get(task_id)
            except ServiceError:  # a split the environment does not have
                continue
            if found is not None:
                return found
        return None

    def profile(self) -> dict[str, Any]:
        with self._lock:
            return _guarded("profile()", self._env.profile)

    def close(self) -> None:
        with self._lock:
            self._env.close()


class _InstanceWork:
    """What the instance endpoints do, apart from HTTP: each method runs in ``run``'s thread pool.

    Environment calls may block, so they leave the event loop, together with the JSON encoding of their
    answer: one hop to a thread per request. A plain ``ThreadPoolExecutor`` rather than Starlette's
    threadpool: anyio's hop costs about 0.1 ms more CPU per request, a third of a step's.
    """

    def __init__(self, env_name: str, env_kwargs: dict[str, Any], catalog: _Catalog, table: InstanceTable) -> None:
        self._env_name, self._env_kwargs, self._catalog, self.table = env_name, env_kwargs, catalog, table
        self.executor = ThreadPoolExecutor(max_workers=_WORKER_THREADS, thread_name_prefix="env-service")

    async def run(self, what: str, call: Callable[[], dict[str, Any]]) -> bytes:
        """``call()`` in a worker thread, its answer as JSON bytes; raises ``ServiceError``."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: _encode(what, call()))

    def _refuse_named_code(self, task: Task, split: str) -> None:
        """400 when a task sent whole names code, unless it is the service's own task with that same code."""
        for key in _CODE_KEYS:
            if key not in task.metadata:
                continue
            value = task.metadata[key]
            own = self._catalog.own_task(task.id, split)
            if own is not None and key in own.metadata and own.metadata[key] == value:
                continue  # the service's own task sent back whole, as RemoteEnvironment.reset sends it
            shown = repr(value) if len(repr(value)) <= 200 else repr(value)[:200] + "..."
            raise ServiceError(
                400,
                f"Task {task.id!r} names code to run (metadata.{key} = {shown}), and tasks sent over HTTP may not "
                f"name code: only the checkers of the service's own task files run. Drop {key!r} from the task (it "
                "is then scored by its 'check' calls or 'answer'), or create the instance from one of the service's "
                'own tasks: {"task_id": "...", "split": "..."} (GET /tasks lists them).',
                "task_names_code",
            )

    def create(self, body: CreateInstanceRequest) -> dict[str, Any]:
        if body.task is not None:
            task = Task.from_dict(body.task.model_dump())
            self._refuse_named_code(task, body.split)
        else:
            known = self._catalog.tasks(body.split)
            found = known.get(body.task_id or "")
            if found is None:
                example = next(iter(known), None)
                raise ServiceError(
                    404,
                    f"Unknown task id {body.task_id!r} in split {body.split!r} ({len(known)} tasks"
                    + (f", e.g. {example!r}" if example else "")
                    + f"). List them with GET /tasks?split={body.split}, or send the whole task as "
                    '{"task": {...}}.',
                    "unknown_task",
                )
            task = found

        def build() -> tuple[Environment, dict[str, Any]]:
            env = load_environment(self._env_name, **self._env_kwargs)
            try:
                return env, env.reset(task).to_dict()
            except BaseException:
                env.close()
                raise

        with self.table.reservation():
            env, observation = _guarded(f"reset for task {task.id!r}", build)
            instance_id = self.table.add(env, task.id)
        return {"instance_id": instance_id, "observation": observation}

    def step(self, instance_id: str, body: StepRequest, evaluate_if_done: bool) -> dict[str, Any]:
        action = Action.from_dict(body.action.model_dump())
        with self.table.use(instance_id) as inst:
            result = _guarded(f"step on instance {instance_id!r}", lambda: inst.env.step(action).to_dict())
            if evaluate_if_done and result.get("done"):
                score = _score_or_none(inst.env)
                if score is not None:
                    result["score"] = score
        return {k: v for k, v in result.items() if v is not None}

    def evaluate(self, instance_id: str) -> dict[str, Any]:
        with self.table.use(instance_id) as inst:
            score = _guarded(f"evaluate on instance {instance_id!r}", lambda: float(inst.env.evaluate()))
        if not _valid_score(score):
            raise ServiceError(500, f"The environment returned score {score}, outside [0, 1].", "environment_error")
        return {"score": score}

    def release(self, instance_id: str) -> dict[str, Any]:
        self.table.release(instance_id)  # waits for a call in flight on the instance, then closes it
        return {"released": instance_id}

    def fast_route(self, method: str, path: str, query: bytes) -> FastRoute | None:
        """The instance endpoints for ``InstanceFastPath``: ``(body model or None, answer)``, else ``None``.

        Matches what the routes below match (a query is ignored as FastAPI ignores it, except the step's
        own flag: any other spelling of it goes to the route, which parses or refuses it).
        """
        parts = path.split("/")  # "/instances/<id>/step" -> ["", "instances", "<id>", "step"]
        if len(parts) < 2 or parts[0] or parts[1] != "instances":
            return None
        if len(parts) == 2:
            if method != "POST":
                return None
            return CreateInstanceRequest, lambda body: self.run("reset", lambda: self.create(body))
        instance_id = parts[2]
        if not instance_id or len(parts) > 4:
            return None
        if len(parts) == 3:
            if method != "DELETE":
                return None
            return None, lambda _: self.run("release", lambda: self.release(instance_id))
        if method != "POST":
            return None
        if parts[3] == "evaluate":
            return None, lambda _: self.run("evaluate", lambda: self.evaluate(instance_id))
        flag = _STEP_QUERIES.get(query) if parts[3] == "step" else None
        if flag is None:
            return None
        return StepRequest, lambda body: self.run("step", lambda: self.step(instance_id, body, flag))


# -- the app ---------------------------------------------------------------------------------
def create_app(
    env_name: str,
    env_kwargs: dict[str, Any] | None = None,
    *,
    token: str | None = None,
    max_instances: int = 1024,
    idle_timeout_s: float = 600.0,
    max_request_bytes: int = 1 << 20,
) -> FastAPI:
    """Build the service for environment ``env_name`` (registry name or dotted path).

    Args:
        env_name: what ``load_environment`` loads for every instance.
        env_kwargs: keyword arguments for each environment instance.
        token: when set, every endpoint except ``/health`` needs ``Authorization: Bearer <token>``.
        max_instances: live instances allowed at once; creating one more answers 429.
        idle_timeout_s: an instance untouched this long is closed and its id answers 404.
        max_request_bytes: request bodies larger than this answer 413.

    Example:
        >>> app = create_app("sandbox", max_instances=64)
        >>> # uvicorn.run(app, host="127.0.0.1", port=8080)
    """
    env_kwargs = dict(env_kwargs or {})
    if max_instances < 1:
        raise ConfigError(f"max_instances must be at least 1, got {max_instances}.")
    if not idle_timeout_s > 0:
        raise ConfigError(f"idle_timeout_s must be positive (use math.inf to never expire), got {idle_timeout_s}.")
    if max_request_bytes < 1:
        raise ConfigError(f"max_request_bytes must be positive, got {max_request_bytes}.")
    catalog = _Catalog(load_environment(env_name, **env_kwargs))  # fails fast on a bad name or kwargs
    table = InstanceTable(max_instances=max_instances, idle_timeout_s=idle_timeout_s)
    work = _InstanceWork(env_name, env_kwargs, catalog, table)
    sweep_every = max(0.05, min(idle_timeout_s / 2, 30.0))

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        async def sweeper() -> None:
            while True:
                await asyncio.sleep(sweep_every)
                try:
                    await asyncio.to_thread(table.sweep)
                except Exception:  # the sweep must never stop
                    logger.exception("idle sweep failed")

        task = asyncio.create_task(sweeper())
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await asyncio.to_thread(table.close_all)
            await asyncio.to_thread(catalog.close)
            await asyncio.to_thread(work.executor.shutdown)

    app = FastAPI(
        title=f"langgraph-evolver environment service ({env_name})",
        description="Create, step, evaluate and release environment instances over HTTP.",
        lifespan=lifespan,
    )
    app.state.instances = table
    _install_error_handlers(app)
    _document_errors(app, token=bool(token))
    app.add_middleware(InstanceFastPath, route=work.fast_route)  # innermost: after the auth and the size limit
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_request_bytes)
    if token:
        app.add_middleware(BearerAuthMiddleware, token=token, open_paths=("/health",))

    @app.get("/health", response_model=HealthResponse)
    async def health() -> dict[str, Any]:  # on the loop: it must answer while the threadpool is busy
        return {"status": "ok", "env": env_name, "instances": len(table), "max_instances": max_instances}

    @app.get("/tasks", response_model=TasksResponse)
    def tasks(split: str = "train") -> dict[str, Any]:
        return {"tasks": [t.to_dict() for t in catalog.tasks(split).values()]}

    @app.get("/profile")
    def profile() -> dict[str, Any]:
        return catalog.profile()

    # The instance endpoints return a ready Response: FastAPI then skips the response model (kept for
    # the OpenAPI docs). Well-formed requests to them never reach these routes: InstanceFastPath answers
    # them with the same work, and hands everything else (bad bodies, odd queries) on to be answered here.
    @app.post("/instances", response_model=CreateInstanceResponse)
    async def create_instance(body: CreateInstanceRequest) -> Response:
        return _json_response(await work.run("reset", lambda: work.create(body)))

    @app.post("/instances/{instance_id}/step", response_model=StepResultModel, response_model_exclude_none=True)
    async def step(
        instance_id: str,
        body: StepRequest,
        evaluate_if_done: Annotated[bool, Query(description=_EVALUATE_IF_DONE)] = False,
    ) -> Response:
        return _json_response(await work.run("step", lambda: work.step(instance_id, body, evaluate_if_done)))

    @app.post("/instances/{instance_id}/evaluate", response_model=EvaluateResponse)
    async def evaluate(instance_id: str) -> Response:
        return _json_response(await work.run("evaluate", lambda: work.evaluate(instance_id)))

    @app.delete("/instances/{instance_id}", response_model=ReleaseResponse)
    async def release(instance_id: str) -> Response:
        return _json_response(await work.run("release", lambda: work.release(instance_id)))

    return app


# -- command line ----------------------------------------------------------------------------
def parse_env_args(pairs: Sequence[str]) -> dict[str, Any]:
    """``["seed=3", "name=x"]`` -> ``{"seed": 3, "name": "x"}`` (values decoded as JSON when they parse)."""
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--env-arg expects key=value, got {pair!r} (e.g. --env-arg seed=3).")
        try:
            kwargs[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            kwargs[key.strip()] = raw
    return kwargs


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m env_tools.server",
        description="Serve an environment over HTTP for remote rollout workers.",
    )
    p.add_argument("--env", default="sandbox", help="environment registry name or dotted path (default: sandbox)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port to bind (default: 8080)")
    p.add_argument(
        "--token",
        default=os.environ.get("EVOLVER_ENV_TOKEN"),
        help="bearer token required on every endpoint but /health (default: $EVOLVER_ENV_TOKEN; none if unset)",
    )
    p.add_argument("--max-instances", type=int, default=1024, help="live instances allowed at once (default: 1024)")
    p.add_argument("--idle-timeout", type=float, default=600.0, help="seconds before an idle instance is released")
    p.add_argument("--max-request-bytes", type=int, default=1 << 20, help="largest request body (default: 1 MiB)")
    add_header_limit_arguments(p)
    p.add_argument(
        "--insecure",
        action="store_true",
        help="serve on a non-loopback --host without a token (refused otherwise)",
    )
    p.add_argument(
        "--env-arg", action="append", default=[], metavar="KEY=VALUE", help="environment keyword argument, repeatable"
    )
    p.add_argument("--log-level", default="info", help="uvicorn log level (default: info)")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    args = make_parser().parse_args(argv)
    import uvicorn

    if args.token is not None and args.token != args.token.strip():
        sys.exit("error: the token (--token or $EVOLVER_ENV_TOKEN) has spaces or a newline around it; clients send "
                 "it without them, so it would never match. Remove them.")  # fmt: skip
    check_bind(
        args.host,
        secret=args.token,
        insecure=args.insecure,
        refusal=(
            f"error: refusing to serve on {args.host} without a token: anyone who can reach this address could run "
            "rollouts in the environment. Set $EVOLVER_ENV_TOKEN (or --token) and give it to the clients "
            "(RemoteEnvironment(url, token=...)), bind --host 127.0.0.1, or pass --insecure on a network you trust."
        ),
    )
    try:
        guards = uvicorn_guards(max_header_bytes=args.max_header_bytes, header_timeout_s=args.header_timeout)
    except ValueError as e:
        sys.exit(f"error: --max-header-bytes / --header-timeout: {e}")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        app = create_app(
            args.env,
            parse_env_args(args.env_arg),
            token=args.token,
            max_instances=args.max_instances,
            idle_timeout_s=args.idle_timeout,
            max_request_bytes=args.max_request_bytes,
        )
    except ConfigError as e:
        sys.exit(f"error: {e}")
    if not args.token and args.host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning("Serving on %s without a token (--insecure): anyone who can reach it can use it.", args.host)
    logger.info("Serving environment %r on http://%s:%d", args.env, args.host, args.port)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, **guards)


if __name__ == "__main__":
    main()

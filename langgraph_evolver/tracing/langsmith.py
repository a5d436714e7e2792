"""The LangSmith sink: one client, a tracer with bounded payloads, and when to use them.

- :func:`langsmith_enabled` says whether LangSmith is configured (tracing switched on *and* an API
  key set); :func:`langsmith_callbacks` returns a :class:`RolloutTracer` then, else nothing.
- :func:`langsmith_client` is the one ``langsmith.Client`` the library uses. It differs from the
  default client only where training needs it: sends are not retried (a dead endpoint fails at once
  instead of backing off for seconds per batch), its background sender is a daemon thread, and at
  process exit it flushes while sends make progress and stops after ``exit_timeout_s`` (default 2 s)
  without any (the default client keeps the interpreter alive for ~30 s retrying a dead endpoint).
- :class:`RolloutTracer` is LangChain's LangSmith tracer with bounded payloads (node runs keep the
  first and last state entries, strings are capped, LLM runs store their logprobs once; see
  :class:`~langgraph_evolver.tracing.TraceLimits`) that remembers the root run of every rollout, for
  :func:`~langgraph_evolver.tracing.annotate_rollouts`.

Nothing here raises into the agent or training: failures are logged and counted.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tracers.langchain import LangChainTracer

from .payload import TraceLimits, bound_payload, compact_llm_outputs

__all__ = ["RolloutTracer", "langsmith_callbacks", "langsmith_client", "langsmith_enabled", "project_id"]

logger = logging.getLogger(__name__)

_TRACING_ENV_VARS = ("LANGSMITH_TRACING_V2", "LANGCHAIN_TRACING_V2", "LANGSMITH_TRACING", "LANGCHAIN_TRACING")
_API_KEY_ENV_VARS = ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY")

_CLIENT: Any = None
_CLIENT_LOCK = threading.Lock()
_EXIT_HARD_LIMIT_S = 60.0
"""However much progress sending makes, the exit flush ends after this long."""
_TRACERS: weakref.WeakSet[RolloutTracer] = weakref.WeakSet()
"""Every tracer, so that the exit hook sends the roots they hold before the last flush."""


# --------------------------------------------------------------------------- when to trace


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() == "true"


def langsmith_enabled() -> bool:
    """Whether LangSmith tracing is switched on (``LANGSMITH_TRACING``/``LANGCHAIN_TRACING_V2``) and has an API key."""
    tracing_on = any(_env_true(name) for name in _TRACING_ENV_VARS)
    has_key = any(os.environ.get(name, "").strip() for name in _API_KEY_ENV_VARS)
    return tracing_on and has_key


def langsmith_callbacks(
    *,
    project: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    limits: TraceLimits | None = None,
    client: Any = None,
) -> list[BaseCallbackHandler]:
    """A LangSmith tracer (``RolloutTracer``) when LangSmith is configured, else ``[]``.

    Configured means tracing is switched on (``LANGSMITH_TRACING=true`` or ``LANGCHAIN_TRACING_V2=true``)
    *and* an API key is set (``LANGSMITH_API_KEY`` or ``LANGCHAIN_API_KEY``). The tracer uses
    ``langsmith_client()``: runs are batched and sent from a daemon thread without retries, so an
    unreachable or slow endpoint costs log warnings, not agent latency, and at most a bounded flush
    (2 s) at process exit. Passing it explicitly also stops LangChain from adding a second,
    environment-configured tracer. Node runs are bounded and logprobs stored once (``limits``).

    Args:
        project: LangSmith project for these runs; LangSmith's own default (``LANGSMITH_PROJECT``) if unset.
        metadata: Tracer-level metadata added to runs that do not already carry the key.
        limits: What the tracer keeps of each run (:class:`TraceLimits`).
        client: A ``langsmith.Client`` (default: the shared ``langsmith_client()``).
    """
    if not langsmith_enabled():
        return []
    try:
        tracer_metadata = {str(k): v for k, v in metadata.items()} if metadata else None
        return [RolloutTracer(project_name=project, metadata=tracer_metadata, limits=limits, client=client)]
    except Exception:
        logger.warning(
            "LangSmith is configured but its tracer could not be created; tracing to LangSmith is off.", exc_info=True
        )
        return []


# --------------------------------------------------------------------------- the client


def _no_retries() -> Any:
    from urllib3.util.retry import Retry

    return Retry(total=0, connect=0, read=0, status=0, redirect=0, raise_on_status=False)


def langsmith_client(*, new: bool = False, exit_timeout_s: float | None = None, **options: Any) -> Any:
    """The shared ``langsmith.Client`` for tracing and feedback (created on first use).

    Args:
        new: Build a new client instead of returning the shared one (tests, other endpoints).
        exit_timeout_s: At process exit the client sends what is queued for as long as sends make
            progress, and gives up after this many seconds without any (default
            ``EVOLVER_LANGSMITH_EXIT_TIMEOUT`` or 2; at most 60 s in all).
        **options: More ``langsmith.Client`` arguments (``api_url``, ``api_key``, ``timeout_ms`` ...).
    """
    global _CLIENT
    with _CLIENT_LOCK:
        if _CLIENT is not None and not new and not options:
            return _CLIENT
        client = _build_client(exit_timeout_s, options)
        if not new and not options:
            _CLIENT = client
            _make_default(client)
        return client


_PROJECT_IDS: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()
_PROJECT_IDS_LOCK = threading.Lock()


def project_id(client: Any, name: str | None = None) -> str:
    """The id of LangSmith project ``name`` (default: the project LangSmith traces to, ``LANGSMITH_PROJECT``).

    Feedback on a run must name the run's project by id (``create_feedback(session_id=...)``: without it LangSmith
    warns, and a SmithDB-only deployment refuses). Looked up once per client and name; when the project is not
    found, what the client has queued is sent first (a tracer's first runs create its project) and it is read again.
    """
    from langsmith.utils import LangSmithNotFoundError, get_tracer_project

    name = name or get_tracer_project() or "default"
    with _PROJECT_IDS_LOCK:
        known = _PROJECT_IDS.setdefault(client, {})
        if name in known:
            return known[name]
    try:
        found = client.read_project(project_name=name)
    except LangSmithNotFoundError:
        client.flush()
        found = client.read_project(project_name=name)
    with _PROJECT_IDS_LOCK:
        known[name] = str(found.id)
    return known[name]


def _make_default(client: Any) -> None:
    """Make ``client`` LangSmith's process default (what LangChain's environment-configured tracer uses),
    unless one exists already: every run this process sends then gets the bounded exit."""
    try:
        from langsmith import run_trees

        if run_trees._CLIENT is None:
            run_trees.configure(client=client)
    except Exception:
        logger.debug("LangSmith: could not make the evolver client the default", exc_info=True)


def _build_client(exit_timeout_s: float | None, options: dict[str, Any]) -> Any:
    from langsmith import Client

    if exit_timeout_s is None:
        exit_timeout_s = float(os.environ.get("EVOLVER_LANGSMITH_EXIT_TIMEOUT", "2"))
    options.setdefault("retry_config", _no_retries())
    options.setdefault("timeout_ms", (2_000, 10_000))
    client = Client(auto_batch_tracing=False, **options)
    try:
        # The default sender is a non-daemon thread that drains the queue (3 attempts per batch, urllib3
        # backoff) before the interpreter may exit. Ours is a daemon thread and the exit hook bounds the
        # flush. These are the client's own queue and thread function, started as auto_batch_tracing does.
        from queue import PriorityQueue

        from langsmith._internal._background_thread import tracing_control_thread_func
        from langsmith._internal._constants import _TRACING_QUEUE_MAX_SIZE

        client._use_daemon_threads = True
        client.tracing_queue = PriorityQueue(maxsize=_TRACING_QUEUE_MAX_SIZE)
        threading.Thread(target=tracing_control_thread_func, args=(weakref.ref(client),), daemon=True,
                         name="langsmith-sender").start()  # fmt: skip
    except Exception:  # another langsmith version: its own batching, its own exit behaviour
        logger.warning("Could not start a bounded LangSmith sender; using the client's default.", exc_info=True)
        client = Client(**options)
    atexit.register(_flush_at_exit, weakref.ref(client), exit_timeout_s)
    return client


def _flush_at_exit(ref: weakref.ref[Any], timeout: float) -> None:
    """Send what is queued while sends make progress; give up after ``timeout`` seconds without any
    (a dead endpoint fails fast, so its queue empties at once; a slow one stops making progress)."""
    client = ref()
    queue = getattr(client, "tracing_queue", None)
    if client is None or queue is None:
        return
    try:
        for tracer in list(_TRACERS):
            if tracer.client is client:
                tracer.release()
        start = last_progress = time.monotonic()
        left = queue.unfinished_tasks
        while left and time.monotonic() - start < _EXIT_HARD_LIMIT_S:
            client.flush(timeout=min(0.25, timeout))
            now_left = queue.unfinished_tasks
            if now_left < left:
                left, last_progress = now_left, time.monotonic()
            elif time.monotonic() - last_progress >= timeout:
                logger.warning("LangSmith: %d runs not sent at exit (no progress for %.1f s).", now_left, timeout)
                return
    except Exception:
        pass


# --------------------------------------------------------------------------- the tracer


class RolloutTracer(LangChainTracer):
    """LangChain's LangSmith tracer, with bounded payloads and the root run of each rollout remembered.

    A rollout's root is the outermost run whose metadata carries its ``trajectory_id`` (what
    ``arun_episode`` puts in the config); :func:`annotate_rollouts` updates it later. Copies the
    tracer makes of itself share the registry.

    Args:
        project_name: LangSmith project.
        client: Default :func:`langsmith_client`.
        limits: What node runs and strings keep (:class:`TraceLimits`).
        metadata: Tracer-level metadata added to runs that lack the key.
    """

    def __init__(self, *args: Any, limits: TraceLimits | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("client", None)
        if kwargs["client"] is None:
            kwargs["client"] = langsmith_client()
        super().__init__(*args, **kwargs)
        self.limits = limits if limits is not None else TraceLimits()
        self.rollouts: dict[str, dict[str, Any]] = {}
        self._rollouts_lock = threading.Lock()
        _TRACERS.add(self)

    def copy_with_metadata_defaults(self, **kwargs: Any) -> LangChainTracer:
        copy = super().copy_with_metadata_defaults(**kwargs)
        if isinstance(copy, RolloutTracer):
            copy.limits, copy.rollouts, copy._rollouts_lock = self.limits, self.rollouts, self._rollouts_lock
        return copy

    def _remember(self, run: Any) -> None:
        metadata = {**(self.tracing_metadata or {}), **((run.extra or {}).get("metadata") or {})}
        trajectory_id = metadata.get("trajectory_id")
        if not trajectory_id:
            return
        parent = self.run_map.get(str(run.parent_run_id)) if run.parent_run_id else None
        if parent is not None and ((parent.extra or {}).get("metadata") or {}).get("trajectory_id") == trajectory_id:
            return
        with self._rollouts_lock:
            self.rollouts.setdefault(str(trajectory_id), {
                "run_id": str(run.id), "trace_id": str(run.trace_id), "dotted_order": run.dotted_order,
                "metadata": metadata, "project": run.session_name,
                # A training rollout (see with_training_step) keeps its root's end until annotate_rollouts adds
                # the reward: one patch, so no second update can race the first.
                "hold": "training_step" in metadata, "run": None})  # fmt: skip
            while len(self.rollouts) > 100_000:
                self.rollouts.pop(next(iter(self.rollouts)))

    def _held(self, run: Any) -> bool:
        if run.parent_run_id is not None and str(run.parent_run_id) in self.run_map:
            return False
        trajectory_id = ((run.extra or {}).get("metadata") or {}).get("trajectory_id")
        with self._rollouts_lock:
            root = self.rollouts.get(str(trajectory_id)) if trajectory_id else None
            if root is None or root["run_id"] != str(run.id) or not root["hold"]:
                return False
            root["run"] = run
            return True

    def release(self, trajectory_ids: Sequence[str] | None = None) -> int:
        """Send the held ends of rollout roots (all of them by default) without annotations."""
        with self._rollouts_lock:
            ids = list(self.rollouts) if trajectory_ids is None else list(trajectory_ids)
            held = [self.rollouts.pop(i) for i in ids if (self.rollouts.get(i) or {}).get("run") is not None]
        for root in held:
            self._send_end(root["run"])
        return len(held)

    def _send_end(self, run: Any) -> None:
        try:
            LangChainTracer._update_run_single(run)
        except Exception as e:
            logger.warning("LangSmith: could not send the end of run %s (%s: %s)", run.id, type(e).__name__, e)

    def _shrink(self, run: Any) -> None:
        node = run.run_type == "chain" and run.parent_run_id is not None
        llm = run.run_type == "llm"
        once = self.limits.compact_logprobs
        try:
            # On the raw values (no serialization here: the client serializes once, and this runs in the agent's
            # thread): long lists of node runs are sliced, long strings cut, the token ids and logprobs of earlier
            # policy messages dropped (each call's own LLM run keeps them), anything else left as it is.
            if run.inputs:
                run.inputs = bound_payload(run.inputs, self.limits, lists=node, sampling=not once)
            if run.outputs:
                outputs = compact_llm_outputs(run.outputs) if llm and once else run.outputs
                run.outputs = bound_payload(outputs, self.limits, lists=node, sampling=llm or not once)
        except Exception:  # a payload we cannot bound is sent as it is
            logger.debug("RolloutTracer: could not bound run %s", run.id, exc_info=True)

    def _persist_run_single(self, run: Any) -> None:
        self._remember(run)
        self._shrink(run)
        super()._persist_run_single(run)

    def _update_run_single(self, run: Any) -> None:  # type: ignore[override]
        self._shrink(run)
        if not self._held(run):
            super()._update_run_single(run)

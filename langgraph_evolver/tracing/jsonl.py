"""Record agent runs locally as JSONL in LangSmith's run schema, and read them back.

:class:`JsonlTracer` is a LangChain callback handler that writes one JSON object per finished run
(graph, node, chat model, tool, retriever ...) in LangSmith's run schema: ``id``, ``trace_id``,
``parent_run_id``, ``dotted_order``, ``name``, ``run_type``, ``start_time``, ``end_time``,
``inputs``, ``outputs``, ``error``, ``extra.metadata``, ``tags``, ``events``, ``session_name``.
It needs no network, is safe to share between threads and asyncio tasks, and never raises into
the agent: a tracer bug costs a trace line, not a rollout. What it keeps of each run is bounded
(:class:`~langgraph_evolver.tracing.payload.TraceLimits`).

:func:`read_runs` and :func:`read_feedback` read a trace file and its feedback back;
:func:`~langgraph_evolver.tracing.runtree.build_run_tree` nests the runs.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import traceback
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TypeVar
from uuid import UUID, uuid4

from langchain_core.callbacks import BaseCallbackHandler

from ..types import read_jsonl
from .payload import TraceLimits, _safe_repr, shrink_run, to_jsonable
from .runtree import dotted_segment

__all__ = ["JsonlTracer", "feedback_path_for", "read_feedback", "read_runs"]

logger = logging.getLogger(__name__)

_F = TypeVar("_F", bound=Callable[..., Any])

_FINISHED_ORDER_CAPACITY = 10_000
"""How many finished runs keep their (trace id, dotted order) for late-starting children."""


def _now() -> datetime:
    return datetime.now(UTC)


def _format_error(error: BaseException) -> str:
    try:
        return (_safe_repr(error) + "\n\n" + "".join(traceback.format_exception(error))).strip()
    except Exception:
        return _safe_repr(error)


def _run_name(serialized: Mapping[str, Any] | None, kwargs: Mapping[str, Any], default: str) -> str:
    name = kwargs.get("name")
    if name:
        return str(name)
    if serialized:
        if serialized.get("name"):
            return str(serialized["name"])
        ids = serialized.get("id")
        if isinstance(ids, list | tuple) and ids:
            return str(ids[-1])
    return default


def _never_raise(method: _F) -> _F:
    """Run a callback so that any failure is logged and counted, never propagated to the agent."""

    @functools.wraps(method)
    def wrapper(self: JsonlTracer, *args: Any, **kwargs: Any) -> None:
        try:
            method(self, *args, **kwargs)
        except Exception:
            self._report_failure(method.__name__)

    return wrapper  # type: ignore[return-value]


# --------------------------------------------------------------------------- the tracer


class JsonlTracer(BaseCallbackHandler):
    """Write every finished LangChain/LangGraph run as one JSON line in LangSmith's run schema.

    Lines are written when a run ends, so children precede their parents in the file; use
    :func:`build_run_tree` to get the nested view back. One tracer may be shared by any number of
    concurrent invocations (threads or asyncio tasks): state is keyed by run id and guarded by a
    lock, and each line is written in one piece.

    Args:
        path: The JSONL file. Parent folders are created.
        project: Stored as ``session_name`` on every run (LangSmith's project); ``"default"`` if unset.
        metadata: Defaults merged under every run's own metadata (the run's keys win).
        append: Append to an existing file instead of truncating it on first write.
        limits: How much of each run's inputs/outputs to keep (:class:`TraceLimits`: node runs keep the
            first and last entries of long lists, strings are capped); LLM runs store their logprobs once.
        feedback_path: Where :meth:`add_feedback` appends feedback (LangSmith's feedback schema, one JSON
            line each); default ``<path stem>.feedback.jsonl`` beside the traces.

    Example:
        >>> with JsonlTracer("traces.jsonl") as tracer:  # doctest: +SKIP
        ...     graph.invoke(inputs, config={"callbacks": [tracer], "metadata": trace_metadata("t1", "g1", 0)})
        >>> roots = build_run_tree(read_runs("traces.jsonl"))  # doctest: +SKIP
    """

    raise_error: bool = False
    # Inline: no thread-pool hop per event under asyncio, and events of one run arrive in order.
    run_inline: bool = True

    def __init__(
        self,
        path: str | Path,
        *,
        project: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        append: bool = False,
        limits: TraceLimits | None = None,
        feedback_path: str | Path | None = None,
    ) -> None:
        super().__init__()
        self.path = Path(path)
        self.limits = limits if limits is not None else TraceLimits()
        self.feedback_path = Path(feedback_path) if feedback_path is not None else feedback_path_for(self.path)
        self.rollout_roots: OrderedDict[str, str] = OrderedDict()
        """Trajectory id -> the id of the outermost run carrying it (its rollout's root)."""
        self.project = project or "default"
        self.metadata = dict(metadata or {})
        self._lock = threading.Lock()
        self._runs: dict[str, dict[str, Any]] = {}
        self._finished_order: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._file: IO[str] | None = None
        self._truncate = not append
        self._reported: set[str] = set()
        self.runs_written = 0
        """Lines written so far."""
        self.failures = 0
        """Callback or write failures swallowed so far (each logged; the first per callback with a traceback)."""

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> JsonlTracer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def flush(self) -> None:
        """Push buffered lines to the file."""
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        """Flush and close the file. Runs still in flight are kept; when they end, the file is reopened for append."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    @property
    def active_runs(self) -> int:
        """Runs that started and have not ended yet."""
        with self._lock:
            return len(self._runs)

    def add_feedback(self, run_id: str, key: str, score: float | None, **fields: Any) -> None:
        """Append one feedback record on ``run_id`` to :attr:`feedback_path` (the local twin of LangSmith's)."""
        record = {"id": str(uuid4()), "run_id": str(run_id), "key": key, "score": score,
                  "created_at": _now().isoformat(), **to_jsonable(fields)}  # fmt: skip
        line = json.dumps(record, ensure_ascii=False)
        with self._lock:
            self.feedback_path.parent.mkdir(parents=True, exist_ok=True)
            with self.feedback_path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")

    # ----------------------------------------------------------------- internals

    def _report_failure(self, where: str) -> None:
        with self._lock:
            self.failures += 1
            first = where not in self._reported
            self._reported.add(where)
        if first:
            logger.warning("JsonlTracer.%s failed; the run's trace may be incomplete.", where, exc_info=True)
        else:
            logger.debug("JsonlTracer.%s failed again.", where, exc_info=True)

    def _start(
        self,
        *,
        run_id: UUID,
        parent_run_id: UUID | None,
        name: str,
        run_type: str,
        inputs: dict[str, Any],
        tags: Sequence[str] | None,
        metadata: Mapping[str, Any] | None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        start_time = _now()
        rid = str(run_id)
        run_extra = {k: to_jsonable(v) for k, v in (extra or {}).items() if v is not None}
        run_extra["metadata"] = to_jsonable({**self.metadata, **(metadata or {})})
        run: dict[str, Any] = {
            "id": rid,
            "trace_id": rid,
            "parent_run_id": None,
            "dotted_order": "",
            "name": name,
            "run_type": run_type,
            "start_time": start_time.isoformat(),
            "end_time": None,
            "inputs": inputs,
            "outputs": None,
            "error": None,
            "extra": run_extra,
            "tags": list(tags or []),
            "events": [{"name": "start", "time": start_time.isoformat()}],
            "session_name": self.project,
        }
        segment = dotted_segment(start_time, rid)
        with self._lock:
            parent_key = str(parent_run_id) if parent_run_id is not None else None
            parent_order: tuple[str, str] | None = None
            if parent_key is not None:
                parent = self._runs.get(parent_key)
                if parent is not None:
                    parent_order = (parent["trace_id"], parent["dotted_order"])
                else:
                    parent_order = self._finished_order.get(parent_key)
            trajectory_id = (
                run_extra["metadata"].get("trajectory_id") if isinstance(run_extra["metadata"], dict) else None
            )
            if trajectory_id and str(trajectory_id) not in self.rollout_roots:
                self.rollout_roots[str(trajectory_id)] = rid
                while len(self.rollout_roots) > _FINISHED_ORDER_CAPACITY:
                    self.rollout_roots.popitem(last=False)
            if parent_order is not None:
                run["parent_run_id"] = parent_key
                run["trace_id"] = parent_order[0]
                run["dotted_order"] = parent_order[1] + "." + segment
            else:
                # No known parent (e.g. the tracer was attached below the root): the run is its own trace,
                # as LangChain's tracers do.
                run["dotted_order"] = segment
                if parent_key is not None:
                    run["extra"]["unknown_parent_run_id"] = parent_key
            self._runs[rid] = run

    def _end(
        self,
        run_id: UUID,
        *,
        outputs: dict[str, Any] | None = None,
        error: BaseException | None = None,
    ) -> None:
        end_time = _now().isoformat()
        rid = str(run_id)
        with self._lock:
            run = self._runs.pop(rid, None)
            if run is not None:
                self._finished_order[rid] = (run["trace_id"], run["dotted_order"])
                while len(self._finished_order) > _FINISHED_ORDER_CAPACITY:
                    self._finished_order.popitem(last=False)
        if run is None:
            logger.debug("JsonlTracer: end of unknown run %s ignored.", rid)
            return
        run["end_time"] = end_time
        if error is not None:
            run["error"] = _format_error(error)
            run["events"].append({"name": "error", "time": end_time})
        else:
            run["outputs"] = outputs
            run["events"].append({"name": "end", "time": end_time})
        self._write(shrink_run(run, self.limits))

    def _write(self, run: dict[str, Any]) -> None:
        try:
            line = json.dumps(run, ensure_ascii=False)
        except Exception:
            # to_jsonable already made the payload JSON-safe; this is the last line of defence.
            line = json.dumps(to_jsonable(run), ensure_ascii=False)
        with self._lock:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("w" if self._truncate else "a", encoding="utf-8", buffering=1 << 16)
                self._truncate = False
            self._file.write(line + "\n")
            self.runs_written += 1

    def _add_event(self, run_id: UUID, event: dict[str, Any]) -> None:
        with self._lock:
            run = self._runs.get(str(run_id))
            if run is not None:
                run["events"].append(event)

    # ----------------------------------------------------------------- chains

    @_never_raise
    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(
            run_id=run_id,
            parent_run_id=parent_run_id,
            name=_run_name(serialized, kwargs, "Chain"),
            run_type=str(kwargs.get("run_type") or "chain"),
            inputs=_wrap(inputs, "input"),
            tags=tags,
            metadata=metadata,
        )

    @_never_raise
    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, outputs=_wrap(outputs, "output"))

    @_never_raise
    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error=error)

    # ----------------------------------------------------------------- models

    @_never_raise
    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(
            run_id=run_id,
            parent_run_id=parent_run_id,
            name=_run_name(serialized, kwargs, "ChatModel"),
            run_type="llm",
            inputs={"messages": to_jsonable(messages)},
            tags=tags,
            metadata=metadata,
            extra={"invocation_params": kwargs.get("invocation_params"), "options": kwargs.get("options")},
        )

    @_never_raise
    def on_llm_start(
        self,
        serialized: dict[str, Any] | None,
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(
            run_id=run_id,
            parent_run_id=parent_run_id,
            name=_run_name(serialized, kwargs, "LLM"),
            run_type="llm",
            inputs={"prompts": to_jsonable(prompts)},
            tags=tags,
            metadata=metadata,
            extra={"invocation_params": kwargs.get("invocation_params"), "options": kwargs.get("options")},
        )

    @_never_raise
    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        generations = getattr(response, "generations", None)
        if generations is None:
            outputs = _wrap(response, "output")
        else:
            outputs = {
                "generations": to_jsonable(generations),
                "llm_output": to_jsonable(getattr(response, "llm_output", None)),
            }
        self._end(run_id, outputs=outputs)

    @_never_raise
    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error=error)

    # ----------------------------------------------------------------- tools

    @_never_raise
    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(
            run_id=run_id,
            parent_run_id=parent_run_id,
            name=_run_name(serialized, kwargs, "Tool"),
            run_type="tool",
            inputs=to_jsonable(inputs) if isinstance(inputs, Mapping) else {"input": to_jsonable(input_str)},
            tags=tags,
            metadata=metadata,
        )

    @_never_raise
    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, outputs={"output": to_jsonable(output)})

    @_never_raise
    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error=error)

    # ----------------------------------------------------------------- retrievers

    @_never_raise
    def on_retriever_start(
        self,
        serialized: dict[str, Any] | None,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(
            run_id=run_id,
            parent_run_id=parent_run_id,
            name=_run_name(serialized, kwargs, "Retriever"),
            run_type="retriever",
            inputs={"query": to_jsonable(query)},
            tags=tags,
            metadata=metadata,
        )

    @_never_raise
    def on_retriever_end(self, documents: Sequence[Any], *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, outputs={"documents": to_jsonable(documents)})

    @_never_raise
    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error=error)

    # ----------------------------------------------------------------- events on a running run

    @_never_raise
    def on_retry(self, retry_state: Any, *, run_id: UUID, **kwargs: Any) -> None:
        attempt = getattr(retry_state, "attempt_number", None)
        self._add_event(run_id, {"name": "retry", "time": _now().isoformat(), "kwargs": {"attempt": attempt}})

    @_never_raise
    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._add_event(run_id, {"name": str(name), "time": _now().isoformat(), "kwargs": {"data": to_jsonable(data)}})


def _wrap(value: Any, key: str) -> dict[str, Any]:
    """Runs store dict inputs/outputs as they are and anything else under one key, as LangSmith does."""
    converted = to_jsonable(value)
    return converted if isinstance(converted, dict) else {key: converted}


# --------------------------------------------------------------------------- reading traces back


def feedback_path_for(path: str | Path) -> Path:
    """Where a :class:`JsonlTracer` writing ``path`` keeps its feedback: ``runs.jsonl`` -> ``runs.feedback.jsonl``."""
    path = Path(path)
    return path.with_name(path.stem + ".feedback.jsonl")


def read_feedback(path: str | Path) -> list[dict[str, Any]]:
    """The feedback records beside a trace file (``[]`` when there are none)."""
    feedback = feedback_path_for(path)
    return list(read_jsonl(feedback)) if feedback.exists() else []


def read_runs(path: str | Path) -> list[dict[str, Any]]:
    """Read the runs a :class:`JsonlTracer` wrote, in file order (a run's children come before it)."""
    return list(read_jsonl(path))

"""Record agent runs as LangSmith-schema JSONL locally, and hand out LangSmith callbacks when configured.

Two ways to see what a rollout did:

- :class:`JsonlTracer` is a LangChain callback handler that writes one JSON object per finished run
  (graph, node, chat model, tool, retriever ...) in LangSmith's run schema: ``id``, ``trace_id``,
  ``parent_run_id``, ``dotted_order``, ``name``, ``run_type``, ``start_time``, ``end_time``,
  ``inputs``, ``outputs``, ``error``, ``extra.metadata``, ``tags``, ``events``, ``session_name``.
  It needs no network, is safe to share between threads and asyncio tasks, and never raises into
  the agent: a tracer bug costs a trace line, not a rollout.
- :func:`langsmith_callbacks` returns LangChain's own LangSmith tracer, but only when LangSmith is
  configured (tracing switched on *and* an API key set); the LangSmith client ships runs from a
  background thread, so an unreachable endpoint does not slow the agent down.

Attach both through the run's config, with :func:`trace_metadata` so every run of a rollout carries
its task id, group id and rollout index::

    tracer = JsonlTracer("runs/traces.jsonl", project="evolver")
    config = {
        "callbacks": [tracer, *langsmith_callbacks(project="evolver")],
        "metadata": trace_metadata(task.id, group_id, rollout_index),
        "run_name": f"rollout-{task.id}-{rollout_index}",
    }
    graph.invoke(inputs, config=config)
    tracer.close()
    trees = build_run_tree(read_runs("runs/traces.jsonl"))

Messages are stored as ``message.model_dump()`` dicts (``type``, ``content``, ``tool_calls`` ...);
anything that is not JSON-serializable falls back to its ``repr``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import logging
import os
import threading
import traceback
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime, time
from pathlib import Path, PurePath
from typing import IO, Any, TypeVar
from uuid import UUID, uuid4

from langchain_core.callbacks import BaseCallbackHandler

from langgraph_evolver.types import ToolCall, ToolObservation, read_jsonl

__all__ = [
    "JsonlTracer",
    "TraceLimits",
    "bound_payload",
    "build_run_tree",
    "compact_llm_outputs",
    "feedback_path_for",
    "read_feedback",
    "langsmith_callbacks",
    "langsmith_enabled",
    "read_runs",
    "to_jsonable",
    "trace_metadata",
    "trace_tool_calls",
]

logger = logging.getLogger(__name__)

_F = TypeVar("_F", bound=Callable[..., Any])

_MAX_DEPTH = 64
"""Nesting depth beyond which values are stored as ``repr`` (guards against cycles)."""

_FINISHED_ORDER_CAPACITY = 10_000
"""How many finished runs keep their (trace id, dotted order) for late-starting children."""

_TRACING_ENV_VARS = ("LANGSMITH_TRACING_V2", "LANGCHAIN_TRACING_V2", "LANGSMITH_TRACING", "LANGCHAIN_TRACING")
_API_KEY_ENV_VARS = ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY")


# --------------------------------------------------------------------------- serialization


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:  # a broken __repr__ must not break tracing
        return f"<unrepresentable {type(value).__qualname__}>"


def to_jsonable(value: Any, _depth: int = 0) -> Any:
    """Convert ``value`` into plain JSON types; never raises (unknown objects become their ``repr``)."""
    try:
        if value is None or isinstance(value, bool | int | str):
            return value
        if isinstance(value, float):
            # NaN/inf are not JSON; keep them readable instead of emitting invalid tokens.
            return value if value == value and value not in (float("inf"), float("-inf")) else repr(value)
        if _depth >= _MAX_DEPTH:
            return _safe_repr(value)
        if isinstance(value, Mapping):
            return {str(k): to_jsonable(v, _depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [to_jsonable(v, _depth + 1) for v in value]
        if isinstance(value, datetime | date | time):
            return value.isoformat()
        if isinstance(value, UUID | PurePath):
            return str(value)
        if isinstance(value, enum.Enum):
            return to_jsonable(value.value, _depth + 1)
        if isinstance(value, bytes | bytearray):
            return value.decode("utf-8", errors="replace")
        model_dump = getattr(value, "model_dump", None)
        if callable(model_dump) and not isinstance(value, type):
            # Pydantic models, including every BaseMessage, Document and LLMResult. serialize_as_any: a field
            # typed BaseMessage holding an AIMessage must keep its tool_calls.
            try:
                dumped = model_dump(warnings=False, serialize_as_any=True)
            except TypeError:  # not pydantic v2's signature
                dumped = model_dump()
            return to_jsonable(dumped, _depth + 1)
        to_dict = getattr(value, "to_dict", None)
        if callable(to_dict) and not isinstance(value, type):
            return to_jsonable(to_dict(), _depth + 1)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            return {"__type__": type(value).__name__, **to_jsonable(fields, _depth + 1)}
    except Exception:
        pass
    return _safe_repr(value)


def _now() -> datetime:
    return datetime.now(UTC)


def _dotted_segment(start_time: datetime, run_id: str) -> str:
    """One dotted-order segment in LangSmith's format: ``<YYYYMMDDTHHMMSSffffffZ><run id>``."""
    return start_time.strftime("%Y%m%dT%H%M%S%fZ") + run_id


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


# --------------------------------------------------------------------------- bounded payloads


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TraceLimits:
    """How much of a run's inputs and outputs a trace keeps.

    A LangGraph node's run stores the whole graph state, so a trace of a long-horizon episode grows
    with the square of its length; node runs (chain runs below the root) keep the first
    ``head_items`` and last ``tail_items`` entries of every list longer than their sum (a marker says
    how many were left out). Every string is cut to ``max_string_chars``. The root run (the
    episode's input and final state) and LLM runs (the exact prompt) keep every list entry.
    ``TraceLimits.unbounded()`` keeps everything, as stored before these limits existed.
    """

    head_items: int = 2
    """List entries kept from the start in node runs (the system prompt and the task)."""
    tail_items: int = 6
    """List entries kept from the end in node runs (the latest turns)."""
    max_string_chars: int = 20_000
    """Longest string stored in any run (0: no limit)."""
    compact_logprobs: bool = True
    """Store each LLM call's logprobs once (:func:`compact_llm_outputs`)."""

    @classmethod
    def unbounded(cls) -> TraceLimits:
        return cls(head_items=0, tail_items=0, max_string_chars=0, compact_logprobs=False)

    @property
    def bounded_lists(self) -> bool:
        return self.head_items > 0 or self.tail_items > 0


_OMITTED_KEY = "__omitted__"
"""The marker a bounded list carries in place of the entries left out: ``{"__omitted__": n}``."""


_SAMPLING_KEYS = ("logprobs", "prompt_token_ids", "token_ids")
"""What a policy call's message carries in ``response_metadata`` and its own LLM run already stores."""


def bound_payload(
    value: Any, limits: TraceLimits, *, lists: bool = True, sampling: bool = True, _depth: int = 0
) -> Any:
    """``value`` with long lists shortened (``lists=True``) and long strings cut; a new object.

    ``sampling=False`` also drops the token ids and logprobs that earlier policy messages carry in
    their ``response_metadata`` (a prompt's history, a node's state): each call's own LLM run keeps them
    once. Other objects are left as they are, except messages holding those fields (a shallow copy).
    """
    if isinstance(value, str):
        cap = limits.max_string_chars
        if cap and len(value) > cap:
            return value[:cap] + f"... [{len(value) - cap} more chars]"
        return value
    if _depth >= _MAX_DEPTH:
        return value
    if isinstance(value, Mapping):
        out = {k: bound_payload(v, limits, lists=lists, sampling=sampling, _depth=_depth + 1) for k, v in value.items()}
        meta = out.get("response_metadata")
        if not sampling and isinstance(meta, Mapping) and any(k in meta for k in _SAMPLING_KEYS):
            out["response_metadata"] = {k: v for k, v in meta.items() if k not in _SAMPLING_KEYS}
        return out
    if isinstance(value, list | tuple):
        items = list(value)
        head, tail = limits.head_items, limits.tail_items
        if lists and limits.bounded_lists and len(items) > head + tail + 1:
            items = [*items[:head], {_OMITTED_KEY: len(items) - head - tail}, *(items[-tail:] if tail else [])]
        return [bound_payload(v, limits, lists=lists, sampling=sampling, _depth=_depth + 1) for v in items]
    if not sampling:
        meta = getattr(value, "response_metadata", None)
        if isinstance(meta, Mapping) and any(k in meta for k in _SAMPLING_KEYS) and hasattr(value, "model_copy"):
            try:
                return value.model_copy(update={"response_metadata": {k: v for k, v in meta.items()
                                                                      if k not in _SAMPLING_KEYS}})  # fmt: skip
            except Exception:
                return value
    return value


def compact_llm_outputs(outputs: Any) -> Any:
    """An LLM run's outputs with each generation's logprobs stored once.

    ``ChatOpenAI`` puts the sampled logprobs both in ``generation_info`` and in the message's
    ``response_metadata`` (and each entry carries the token's UTF-8 ``bytes``): the copy in
    ``generation_info`` is dropped when the message has it, and ``bytes`` (the token text says the
    same) and empty ``top_logprobs`` go. Returns a new object; anything unexpected is left as is.
    """
    if not isinstance(outputs, Mapping) or not isinstance(outputs.get("generations"), list):
        return outputs
    out = dict(outputs)
    out["generations"] = [
        [_compact_generation(g) for g in batch] if isinstance(batch, list) else batch
        for batch in outputs["generations"]
    ]
    return out


def _compact_generation(generation: Any) -> Any:
    if not isinstance(generation, Mapping):
        return generation
    out = dict(generation)
    message = out.get("message")
    meta_holder: dict[str, Any] | None = None
    if isinstance(message, Mapping):
        message = dict(message)
        # LangSmith's serializer nests a message's fields under "kwargs"; to_jsonable keeps them at the top.
        if isinstance(message.get("kwargs"), Mapping):
            message["kwargs"] = meta_holder = dict(message["kwargs"])
        else:
            meta_holder = message
        out["message"] = message
    kept_in_message = False
    if meta_holder is not None and isinstance(meta_holder.get("response_metadata"), Mapping):
        meta = dict(meta_holder["response_metadata"])
        if isinstance(meta.get("logprobs"), Mapping):
            meta["logprobs"] = _compact_logprobs(meta["logprobs"])
            kept_in_message = True
        meta_holder["response_metadata"] = meta
    info = out.get("generation_info")
    if isinstance(info, Mapping) and "logprobs" in info:
        info = dict(info)
        if kept_in_message:
            del info["logprobs"]
        elif isinstance(info["logprobs"], Mapping):
            info["logprobs"] = _compact_logprobs(info["logprobs"])
        out["generation_info"] = info
    return out


def _compact_logprobs(logprobs: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(logprobs)
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = [
            {k: v for k, v in e.items() if k != "bytes" and not (k == "top_logprobs" and not v)}
            if isinstance(e, Mapping)
            else e
            for e in content
        ]
    return out


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
        segment = _dotted_segment(start_time, rid)
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


def shrink_run(run: dict[str, Any], limits: TraceLimits) -> dict[str, Any]:
    """A finished run (plain JSON) as stored: node runs bounded, strings capped, token ids and logprobs once."""
    node = run.get("run_type") == "chain" and run.get("parent_run_id") is not None
    llm = run.get("run_type") == "llm"
    out = dict(run)
    for key in ("inputs", "outputs"):
        value = out.get(key)
        own = key == "outputs" and llm  # the call's own sampling record: kept (logprobs once)
        if own and limits.compact_logprobs:
            value = compact_llm_outputs(value)
        out[key] = bound_payload(value, limits, lists=node, sampling=own or not limits.compact_logprobs)
    return out


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


def build_run_tree(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Nest runs under their parents as ``child_runs``; returns the roots.

    Roots and every ``child_runs`` list are sorted by ``dotted_order`` (start time, then id). A run
    whose parent is not among ``runs`` is a root. The input dicts are not modified.
    """
    nodes = {str(r["id"]): {**r, "child_runs": []} for r in runs}
    roots: list[dict[str, Any]] = []
    for node in nodes.values():
        parent = nodes.get(str(node.get("parent_run_id")))
        (parent["child_runs"] if parent is not None else roots).append(node)

    def key(node: Mapping[str, Any]) -> tuple[str, str]:
        return (str(node.get("dotted_order") or node.get("start_time") or ""), str(node["id"]))

    for node in nodes.values():
        node["child_runs"].sort(key=key)
    roots.sort(key=key)
    return roots


# --------------------------------------------------------------------------- LangSmith


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
        from .langsmith_tracing import RolloutTracer

        tracer_metadata = {str(k): v for k, v in metadata.items()} if metadata else None
        return [RolloutTracer(project_name=project, metadata=tracer_metadata, limits=limits, client=client)]
    except Exception:
        logger.warning(
            "LangSmith is configured but its tracer could not be created; tracing to LangSmith is off.", exc_info=True
        )
        return []


def trace_metadata(task_id: str, group_id: str, rollout_index: int, **extra: Any) -> dict[str, Any]:
    """The metadata a rollout puts in its RunnableConfig so traces show which task/group/rollout they are.

    Example:
        >>> trace_metadata("task-7", "step3-task-7", 2, model_version="lora-v3")
        {'task_id': 'task-7', 'group_id': 'step3-task-7', 'rollout_index': 2, 'model_version': 'lora-v3'}
    """
    return {"task_id": str(task_id), "group_id": str(group_id), "rollout_index": int(rollout_index), **extra}


# --------------------------------------------------------------------------- tool runs


@asynccontextmanager
async def trace_tool_calls(calls: Sequence[ToolCall]) -> AsyncIterator[Callable[[Sequence[ToolObservation]], None]]:
    """``tool`` runs for calls a node executes itself (e.g. one environment step for a whole turn).

    Inside a LangGraph node, opens one tool run per call under the node's run (in every callback of
    the node's config: LangSmith, ``JsonlTracer``, the trajectory recorder), so the trace looks like
    any LangGraph agent's. Call the yielded function with the observations (matched by call id, else
    by position); calls without one, or all of them when the block raises, end as errors. Tracing
    failures are logged, never raised.

    Example:
        >>> async with trace_tool_calls(calls) as record:  # doctest: +SKIP
        ...     result = await env.astep(Action(tool_calls=tuple(calls)))
        ...     record(result.observations)
    """
    managers: list[Any] = []
    try:
        from langchain_core.callbacks.manager import AsyncCallbackManager
        from langchain_core.runnables.config import ensure_config

        config = ensure_config()
        manager = AsyncCallbackManager.configure(
            inheritable_callbacks=config.get("callbacks"),
            inheritable_tags=config.get("tags"),
            inheritable_metadata=config.get("metadata"),
        )
        if manager.handlers:
            for call in calls:
                arguments = call.arguments if isinstance(call.arguments, dict) else {"arguments": call.arguments}
                managers.append(await manager.on_tool_start(
                    {"name": call.name, "description": ""}, json.dumps(arguments, ensure_ascii=False, default=str),
                    inputs=arguments, name=call.name, tool_call_id=call.id))  # fmt: skip
    except Exception:
        logger.debug("trace_tool_calls: could not open tool runs", exc_info=True)
        managers = []
    outputs: list[ToolObservation | None] = [None] * len(managers)

    def record(observations: Sequence[ToolObservation]) -> None:
        by_id = {o.call_id: o for o in observations}
        for i, call in enumerate(calls[: len(managers)]):
            outputs[i] = by_id.get(call.id) or (observations[i] if i < len(observations) else None)

    error: BaseException | None = None
    try:
        yield record
    except BaseException as e:
        error = e
        raise
    finally:
        if managers:
            await _end_tool_runs(managers, calls, outputs, error)


async def _end_tool_runs(managers: list[Any], calls: Sequence[ToolCall], outputs: list[ToolObservation | None],
                         error: BaseException | None) -> None:  # fmt: skip
    from langchain_core.messages import ToolMessage

    for run, call, obs in zip(managers, calls, outputs, strict=False):
        try:
            if obs is None:
                await run.on_tool_error(error or RuntimeError(f"no observation for tool call {call.id!r}"))
            else:
                status = "error" if obs.is_error else "success"
                await run.on_tool_end(ToolMessage(obs.content, tool_call_id=call.id, name=obs.name or call.name,
                                                  status=status))  # fmt: skip
        except Exception:
            logger.debug("trace_tool_calls: could not close a tool run", exc_info=True)

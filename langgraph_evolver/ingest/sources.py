"""Where recorded runs come from: a LangSmith project, a list of run ids, or a local JSONL trace store.

All three yield :class:`RecordedTrace` (the root with nested ``child_runs``, and the root's
feedback). :class:`TraceFilter` selects traces the same way everywhere: in LangSmith it becomes a
filter string the server evaluates (``TraceFilter.langsmith_filter()``); for JSONL it is applied
here.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..tracing import build_run_tree, read_feedback, read_runs, to_jsonable

__all__ = [
    "FeedbackCondition",
    "RecordedTrace",
    "TraceFilter",
    "query_runs",
    "read_jsonl_traces",
    "read_langsmith_traces",
]

_OPS = {"<=": "lte", ">=": "gte", "<": "lt", ">": "gt", "=": "eq", "!=": "neq"}
_CHECK = {"lt": float.__lt__, "lte": float.__le__, "gt": float.__gt__, "gte": float.__ge__, "eq": float.__eq__,
          "neq": float.__ne__}  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedbackCondition:
    """``key <op> score``, e.g. ``user_score<0.5`` (only thumbs-down runs) or ``correctness=1``."""

    key: str
    op: str
    score: float

    @classmethod
    def parse(cls, text: str) -> FeedbackCondition:
        m = re.fullmatch(r"\s*([\w.\-]+)\s*(<=|>=|!=|<|>|=)\s*(-?[\d.]+)\s*", text)
        if m is None:
            raise ConfigError(f"--feedback {text!r}: write KEY<op>SCORE with op one of < <= > >= = != "
                              "(e.g. user_score<0.5).")  # fmt: skip
        return cls(key=m.group(1), op=_OPS[m.group(2)], score=float(m.group(3)))

    def holds(self, feedback: Sequence[Mapping[str, Any]]) -> bool:
        return any(f.get("key") == self.key and isinstance(f.get("score"), int | float)
                   and _CHECK[self.op](float(f["score"]), self.score) for f in feedback)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceFilter:
    """Which recorded traces to read (every condition must hold)."""

    start: datetime | None = None
    """Traces that started at or after this time."""
    end: datetime | None = None
    """Traces that started before this time."""
    tags: tuple[str, ...] = ()
    """Tags the root run must carry (all of them)."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """Root-run metadata that must match (compared as text)."""
    feedback: tuple[FeedbackCondition, ...] = ()
    """Feedback conditions on the root run."""

    def langsmith_filter(self) -> str | None:
        """The filter string for ``client.runs.query(filter=...)`` (LangSmith's query language)."""
        parts = []
        if self.start is not None:
            parts.append(f'gte(start_time, "{self.start.isoformat()}")')
        if self.end is not None:
            parts.append(f'lt(start_time, "{self.end.isoformat()}")')
        parts += [f'has(tags, "{t}")' for t in self.tags]
        parts += [f'and(eq(metadata_key, "{k}"), eq(metadata_value, "{v}"))' for k, v in self.metadata.items()]
        parts += [f'and(eq(feedback_key, "{c.key}"), {c.op}(feedback_score, {c.score:g}))' for c in self.feedback]
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else f"and({', '.join(parts)})"

    def matches(self, root: Mapping[str, Any], feedback: Sequence[Mapping[str, Any]]) -> bool:
        start, lowest, end = _time(root.get("start_time")), _time(self.start), _time(self.end)
        if lowest is not None and (start is None or start < lowest):
            return False
        if end is not None and (start is None or start >= end):
            return False
        if any(t not in (root.get("tags") or []) for t in self.tags):
            return False
        meta = (root.get("extra") or {}).get("metadata") or {}
        if any(str(meta.get(k)) != str(v) for k, v in self.metadata.items()):
            return False
        return all(c.holds(feedback) for c in self.feedback)


def _time(value: Any) -> datetime | None:
    """``value`` (a datetime or ISO 8601 text) as a datetime with a zone, UTC when it has none (LangSmith's
    SDK hands out naive UTC times; our tracer writes aware ones): naive and aware times do not compare."""
    if not isinstance(value, datetime):
        try:
            value = datetime.fromisoformat(str(value))
        except (TypeError, ValueError):
            return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@dataclass(slots=True)
class RecordedTrace:
    """One recorded trace: its root run (nested ``child_runs``) and the feedback on the root."""

    root: dict[str, Any]
    feedback: list[dict[str, Any]] = field(default_factory=list)
    runs: int = 0
    """How many runs the trace holds."""

    @property
    def start_time(self) -> datetime | None:
        """When the root run started (with a zone: UTC when the record has none); None when it does not say."""
        return _time(self.root.get("start_time"))


def _local_feedback(root: Mapping[str, Any], by_run: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A root's records in the feedback file beside the traces; else a numeric ``reward`` in its metadata."""
    found = list(by_run.get(str(root["id"]), []))
    reward = ((root.get("extra") or {}).get("metadata") or {}).get("reward")
    if not found and isinstance(reward, int | float) and not isinstance(reward, bool):
        found.append({"key": "reward", "score": float(reward), "run_id": root["id"]})
    return found


def read_jsonl_traces(path: str | Path, trace_filter: TraceFilter | None = None,
                      limit: int | None = None) -> Iterator[RecordedTrace]:  # fmt: skip
    """Traces from a ``JsonlTracer`` file (or any JSONL of runs in LangSmith's schema), with the feedback
    recorded beside it (``runs.feedback.jsonl``, see ``JsonlTracer.add_feedback``)."""
    runs = read_runs(path)
    by_run: dict[str, list[dict[str, Any]]] = {}
    for record in read_feedback(path):
        by_run.setdefault(str(record.get("run_id")), []).append(record)
    counts: dict[str, int] = {}
    for run in runs:
        key = str(run.get("trace_id") or run["id"])
        counts[key] = counts.get(key, 0) + 1
    made = 0
    for root in build_run_tree(runs):
        if root.get("parent_run_id") is not None:
            continue  # an orphan: part of a trace whose root is not in the file
        feedback = _local_feedback(root, by_run)
        annotated = [
            f["extra"]["metadata"] for f in feedback if isinstance((f.get("extra") or {}).get("metadata"), dict)
        ]
        if annotated:  # what annotate_rollouts put on the root in LangSmith, recorded with the local reward
            root.setdefault("extra", {}).setdefault("metadata", {})
            root["extra"]["metadata"] = {**annotated[-1], **(root["extra"]["metadata"] or {})}
        if trace_filter is not None and not trace_filter.matches(root, feedback):
            continue
        yield RecordedTrace(root=root, feedback=feedback, runs=counts.get(str(root.get("trace_id") or root["id"]), 1))
        made += 1
        if limit is not None and made >= limit:
            return


# What each run query selects (``client.runs.query`` returns only the id unless told): the fields of
# LangSmith's run schema that the ingest reads, as the v2 API names them.
_SELECTS = ("ID", "NAME", "RUN_TYPE", "STATUS", "START_TIME", "END_TIME", "INPUTS", "OUTPUTS", "ERROR", "EXTRA",
            "EVENTS", "TAGS", "PARENT_RUN_IDS", "PROJECT_ID", "TRACE_ID", "DOTTED_ORDER",
            "REFERENCE_EXAMPLE_ID")  # fmt: skip
_ALL_TIME = datetime(2000, 1, 1, tzinfo=UTC)
"""The start-time bound when the filter has none: ``runs.query`` reads only the last day unless told (``list_runs``
read all history), and a project can hold runs older than itself (uploaded traces), so ask from 2000 on, as the
SDK's own ``get_test_results`` does."""
_PAGE = 100

_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _query_loop() -> asyncio.AbstractEventLoop:
    """One event loop, in a daemon thread, for every run query of this process: ``client.runs`` is the SDK's async
    client, whose pooled connections belong to the loop that opened them, so each query must run on the same one
    (``asyncio.run`` per call would leave them on closed loops); it also works when the caller is inside a loop."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, daemon=True, name="langsmith-run-queries").start()
            _LOOP = loop
        return _LOOP


def query_runs(client: Any, *, limit: int | None = None, **params: Any) -> list[dict[str, Any]]:
    """Runs from ``client.runs.query(**params)`` (LangSmith's supported run query, async), every page or the first
    ``limit`` runs, in LangSmith's run schema as ``list_runs`` gave it and our tracer writes it (``session_id``,
    ``parent_run_id``, lower-case ``run_type`` and ``status``).

    ``params`` are ``runs.query``'s (``project_ids`` required, ``filter``, ``is_root``, ``ids``, ``trace_id`` ...);
    ``selects`` defaults to the fields the ingest reads and ``min_start_time`` to all history (see ``_ALL_TIME``).
    """
    params = {"selects": list(_SELECTS), "min_start_time": _ALL_TIME, **params}
    if limit is not None:
        params.setdefault("page_size", max(1, min(limit, _PAGE)))

    async def pages() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        async for run in client.runs.query(**params):
            found.append(_run_record(run))
            if limit is not None and len(found) >= limit:
                break
        return found

    return asyncio.run_coroutine_threadsafe(pages(), _query_loop()).result()


def _run_record(run: Any) -> dict[str, Any]:
    """A v2 run (``langsmith.types.Run``) in LangSmith's run schema: ``project_id`` is the ``session_id``, the last
    of ``parent_run_ids`` (root first) the ``parent_run_id``."""
    data = to_jsonable(run.model_dump(exclude_none=True) if hasattr(run, "model_dump") else dict(run))
    parents = data.pop("parent_run_ids", None) or []
    data["parent_run_id"] = parents[-1] if parents else None
    data["session_id"] = data.pop("project_id", None)
    for key in ("run_type", "status"):
        if isinstance(data.get(key), str):
            data[key] = data[key].lower()
    data.setdefault("trace_id", data.get("id"))
    for key in ("inputs", "extra"):
        data.setdefault(key, {})
    return data


def _feedback_dict(feedback: Any) -> dict[str, Any]:
    data = to_jsonable(feedback.model_dump() if hasattr(feedback, "model_dump") else dict(feedback))
    for key in ("id", "run_id", "trace_id", "session_id"):
        if data.get(key) is not None:
            data[key] = str(data[key])
    return data


def read_langsmith_traces(
    client: Any,
    *,
    project: str | None = None,
    run_ids: Sequence[str] = (),
    trace_filter: TraceFilter | None = None,
    limit: int | None = None,
) -> Iterator[RecordedTrace]:
    """Traces from LangSmith: the root runs of ``project`` passing ``trace_filter``, or the traces of ``run_ids``
    (runs of ``project``: LangSmith's run queries look runs up within a project)."""
    if project is None:
        what = "the project of the runs (--project with --run-ids)" if run_ids else "a LangSmith project (--project)"
        raise ConfigError(f"Name {what} to read: LangSmith's run queries (client.runs.query) need it.")
    window: dict[str, Any] = {"project_ids": [str(client.read_project(project_name=project).id)]}
    if trace_filter is not None and trace_filter.start is not None:
        window["min_start_time"] = trace_filter.start
    if run_ids:
        trace_ids: list[str] = []
        for run in query_runs(client, ids=[str(i) for i in run_ids], selects=["ID", "TRACE_ID"], **window):
            if str(run["trace_id"]) not in trace_ids:
                trace_ids.append(str(run["trace_id"]))
    else:
        filter_text = trace_filter.langsmith_filter() if trace_filter is not None else None
        found = query_runs(client, is_root=True, limit=limit, selects=["ID", "TRACE_ID"],
                           **({"filter": filter_text} if filter_text else {}), **window)  # fmt: skip
        trace_ids = [str(r["trace_id"]) for r in found]
    for count, trace_id in enumerate(trace_ids):
        if limit is not None and count >= limit:
            return
        runs = query_runs(client, trace_id=trace_id, **window)
        roots = [r for r in build_run_tree(runs) if r.get("parent_run_id") is None]
        if not roots:
            continue
        root = roots[0]
        feedback = [_feedback_dict(f) for f in client.list_feedback(run_ids=[root["id"]])]
        if trace_filter is not None and run_ids and not trace_filter.matches(root, feedback):
            continue
        yield RecordedTrace(root=root, feedback=feedback, runs=len(runs))

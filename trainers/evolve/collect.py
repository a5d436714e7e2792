"""Phase (a) of a cycle: the tasks it adds to the loop's task store.

Production traces that started since the last cycle (a ``JsonlTracer`` file or directory, or a LangSmith
project) go through ``langgraph_evolver.ingest``: each distinct user request with a positive outcome becomes
a trainable task. Self-questioning adds ``questioning_n`` synthesized, verified tasks. Both land in
``output_dir/tasks.sqlite`` (duplicates are skipped), which the cycle's training mixes with the
environment's own tasks at ``synthetic_ratio``.

The watermark is the newest trace start time read, with the root run ids read at exactly that time (a
trace that starts at the same instant as the last one read is not lost nor read twice).
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from .config import EvolveConfig

__all__ = ["collect_tasks", "trace_files"]


def trace_files(path: str | Path) -> list[Path]:
    """The JSONL trace files at ``path``: the file itself, or the ``*.jsonl`` of a directory (feedback files
    beside them are read with their traces, not as traces)."""
    from langgraph_evolver.errors import ConfigError

    p = Path(path)
    if p.is_file():
        return [p]
    if p.is_dir():
        return sorted(f for f in p.rglob("*.jsonl") if not f.name.endswith(".feedback.jsonl"))
    raise ConfigError(f"traces_jsonl {path} does not exist: point it at a JsonlTracer file or a directory of them.")


def _read_traces(cfg: EvolveConfig, start: datetime | None) -> list[Any]:
    from langgraph_evolver.ingest.sources import TraceFilter, read_jsonl_traces, read_langsmith_traces

    selection = TraceFilter(start=start)
    if cfg.traces_project:
        from langgraph_evolver.tracing import langsmith_client

        return list(read_langsmith_traces(langsmith_client(), project=cfg.traces_project, trace_filter=selection))
    return [t for f in trace_files(cfg.traces_jsonl or "") for t in read_jsonl_traces(f, selection)]


def ingest_new_traces(cfg: EvolveConfig, env: str, store_path: Path, watermark: dict[str, Any] | None,
                      out: Path) -> tuple[dict[str, Any], dict[str, Any] | None]:  # fmt: skip
    """Ingest the traces newer than ``watermark`` into the store; returns (figures, the new watermark)."""
    from langgraph_evolver.ingest.pipeline import ingest_traces, write_ingest

    start = datetime.fromisoformat(watermark["start_time"]) if watermark else None
    seen = set(watermark["ids"]) if watermark else set()
    traces = [t for t in _read_traces(cfg, start) if str(t.root.get("id")) not in seen]
    figures: dict[str, Any] = {"traces_new": len(traces)}
    if not traces:
        return {**figures, "tasks_ingested": 0}, watermark
    result = ingest_traces(traces, env=env, extractor=None, judge=None)
    paths = write_ingest(result, out, task_store=store_path)
    summary = result.summary()
    added = json.loads(Path(paths["summary"]).read_text()).get("task_store_added", 0)
    figures.update({"traces_read": summary["traces_read"], "tasks_from_traces": summary["tasks"],
                    "tasks_trainable": summary["tasks_trainable"], "tasks_ingested": added,
                    "skipped": summary["skipped"]})  # fmt: skip
    times = [(s, str(t.root.get("id"))) for t in traces if (s := t.start_time) is not None]
    if not times:
        return figures, watermark
    newest = max(s for s, _ in times)
    ids = [i for s, i in times if s == newest] + (list(seen) if start == newest else [])
    return figures, {"start_time": newest.isoformat(), "ids": sorted(set(ids))}


def synthesize_into_store(env: str, n: int, store_path: Path, seed: int) -> dict[str, Any]:
    """``n`` self-questioning tasks for ``env`` into the store (what it holds is skipped while exploring)."""
    from langgraph_evolver.questioning import TaskStore, synthesize_tasks

    with TaskStore(store_path) as store:
        tasks, report = synthesize_tasks(env, n, seed=seed, store=store, progress=False)
        added, dropped = store.add_many_counted(tasks)
    return {"tasks_synthesized": added, "synthesis_explorations": report.explorations,
            "synthesis_dropped_at_store": dropped}  # fmt: skip


def collect_tasks(cfg: EvolveConfig, env: str, store_path: Path, watermark: dict[str, Any] | None,
                  cycle_dir: Path, cycle: int) -> tuple[dict[str, Any], dict[str, Any] | None]:  # fmt: skip
    """Phase (a): returns the figures of what it added and the new trace watermark."""
    started = time.perf_counter()
    figures: dict[str, Any] = {"tasks_ingested": 0, "tasks_synthesized": 0}
    if cfg.traces_jsonl or cfg.traces_project:
        ingested, watermark = ingest_new_traces(cfg, cfg.traces_env or env, store_path, watermark,
                                                cycle_dir / "ingest")  # fmt: skip
        figures.update(ingested)
    if cfg.questioning_n > 0:
        figures.update(synthesize_into_store(env, cfg.questioning_n, store_path, seed=cycle))
    if store_path.exists():
        from langgraph_evolver.questioning import TaskStore

        with TaskStore(store_path) as store:
            figures["task_store_size"] = len(store)
    else:
        figures["task_store_size"] = 0
    figures["collect_s"] = round(time.perf_counter() - started, 1)
    return figures, watermark

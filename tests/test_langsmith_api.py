"""The project stays on LangSmith's supported API: run queries through ``client.runs.query`` (not the
deprecated ``list_runs``, gone after Jan 31, 2027), feedback that names the run's project (``session_id``),
examples with ``reference_outputs``; and the local stand-in (``tests/_fake_langsmith.py``) serves exactly
what the installed ``langsmith`` client sends, so the two cannot drift apart unnoticed."""

from __future__ import annotations

import asyncio
import inspect
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import langsmith
import pytest
from langsmith.resources.runs.runs import AsyncRunsResource, RunsResource

from langgraph_evolver.errors import ConfigError
from langgraph_evolver.ingest.sources import FeedbackCondition, TraceFilter, query_runs, read_langsmith_traces
from tests._fake_langsmith import _V2_QUERY_FIELDS, FakeLangSmith, fake_langsmith
from tests.test_tracing_langsmith import client_for

# How the project calls the hand-written client (method -> the keyword arguments it passes).
CLIENT_CALLS = {
    "read_project": {"project_name"},
    "list_feedback": {"run_ids"},
    "create_feedback": {"key", "score", "value", "comment", "trace_id", "session_id", "start_time",
                        "stop_after_attempt"},
    "create_project": {"reference_dataset_id", "metadata"},
    "create_examples": {"dataset_id", "examples"},
    "create_run": {"name", "run_type", "inputs", "project_name"},  # the rest through its **kwargs
    "list_examples": {"dataset_id"},
}  # fmt: skip
_NOT_SENT = {"self", "accept", "extra_headers", "extra_query", "extra_body", "timeout"}


@pytest.fixture
def fake() -> Iterator[FakeLangSmith]:
    with fake_langsmith() as server:
        yield server


@contextmanager
def _strict() -> Iterator[None]:
    """Every DeprecationWarning and LangSmith warning an error (what the suite's filters do for our modules)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        warnings.simplefilter("error", langsmith.utils.LangSmithWarning)
        yield


def test_the_fake_accepts_exactly_what_runs_query_sends_and_the_client_has_what_we_call():
    query = inspect.signature(AsyncRunsResource.query)
    assert AsyncRunsResource.query is AsyncRunsResource.query_v2 and RunsResource.query is RunsResource.query_v2
    assert set(query.parameters) - _NOT_SENT == _V2_QUERY_FIELDS
    assert set(inspect.signature(RunsResource.query).parameters) == set(query.parameters)
    assert isinstance(inspect.getattr_static(langsmith.Client, "runs"), property)
    for name, kwargs in CLIENT_CALLS.items():
        params = inspect.signature(getattr(langsmith.Client, name)).parameters
        assert kwargs <= set(params), (name, kwargs - set(params))
        assert "deprecated" not in (getattr(langsmith.Client, name).__doc__ or "").lower().split("args:")[0], name


def _seed(fake: FakeLangSmith, project: str, n: int, *, days_ago: float) -> list[str]:
    """``n`` traces (a root and one LLM child each) that started ``days_ago`` days ago."""
    start = datetime.now(UTC) - timedelta(days=days_ago)
    runs, roots = [], []
    for i in range(n):
        root, child = str(uuid.uuid4()), str(uuid.uuid4())
        when = (start + timedelta(seconds=i)).isoformat()
        runs += [{"id": root, "trace_id": root, "name": "agent", "run_type": "chain", "start_time": when,
                  "end_time": when, "inputs": {"messages": [["user", f"q{i}"]]}, "outputs": {}, "parent_run_id": None,
                  "dotted_order": f"{i:05d}{root}"},
                 {"id": child, "trace_id": root, "name": "model", "run_type": "llm", "start_time": when,
                  "end_time": when, "inputs": {}, "outputs": {}, "parent_run_id": root,
                  "dotted_order": f"{i:05d}{root}.{child}"}]  # fmt: skip
        roots.append(root)
    fake.add_runs(runs, project=project)
    return roots


def test_traces_are_read_through_runs_query_every_page_and_all_history(fake):
    roots = _seed(fake, "prod", 101, days_ago=40)  # more than one page of 100, older than runs.query's default day
    fake.add_feedback(roots[3], "user_score", 0.0)
    client = client_for(fake)
    with _strict():
        traces = list(read_langsmith_traces(client, project="prod"))
    assert sorted(t.root["id"] for t in traces) == sorted(roots)
    assert all(t.runs == 2 and t.root["child_runs"][0]["run_type"] == "llm" for t in traces)
    assert all(t.root["session_id"] == fake.session("prod")["id"] for t in traces)
    (scored,) = [t for t in traces if t.feedback]
    assert scored.root["id"] == roots[3] and scored.feedback[0]["score"] == 0.0
    paths = [r["path"] for r in fake.requests]
    assert "/runs/query" not in paths  # the deprecated v1 query
    pages = [r for r in fake.requests if r["path"] == "/api/v2/runs/query" and (r.get("json") or {}).get("is_root")]
    assert len(pages) == 2 and pages[1]["json"]["cursor"]  # the second page asked for by the cursor

    thumbs_down = TraceFilter(feedback=(FeedbackCondition.parse("user_score<0.5"),))
    with _strict():
        assert len(list(read_langsmith_traces(client, project="prod", limit=5))) == 5
        assert [t.root["id"] for t in read_langsmith_traces(client, project="prod", trace_filter=thumbs_down)] == [
            roots[3]
        ]


def test_a_start_bound_and_run_ids_are_asked_of_the_server(fake):
    old = _seed(fake, "prod", 3, days_ago=10)
    new = _seed(fake, "prod", 2, days_ago=0.5)
    client = client_for(fake)
    with _strict():
        recent = list(
            read_langsmith_traces(
                client, project="prod", trace_filter=TraceFilter(start=datetime.now(UTC) - timedelta(days=2))
            )
        )
        picked = list(read_langsmith_traces(client, project="prod", run_ids=[old[1]]))
    assert sorted(t.root["id"] for t in recent) == sorted(new)
    assert [t.root["id"] for t in picked] == [old[1]]
    with pytest.raises(ConfigError, match="--project with --run-ids"):
        list(read_langsmith_traces(client, run_ids=[old[1]]))


def test_run_queries_work_from_inside_a_running_event_loop(fake):
    roots = _seed(fake, "prod", 2, days_ago=3)
    client = client_for(fake)
    project = str(client.read_project(project_name="prod").id)

    async def inside() -> list[dict[str, Any]]:  # e.g. a LangGraph node or a notebook cell
        return query_runs(client, project_ids=[project], is_root=True)

    assert sorted(r["id"] for r in asyncio.run(inside())) == sorted(roots)


def test_evaluation_experiments_use_no_deprecated_example_or_feedback_form(fake):
    """Examples with ``reference_outputs`` (``outputs`` is deprecated for ExampleCreate, warned inside langsmith,
    so the suite's module filters would not see it) and reward feedback on each experiment's project."""
    from env_tools.sandbox import seed_tasks
    from graphs.agent import create_agent_graph
    from langgraph_evolver.batch import run_rollouts
    from langgraph_evolver.testing import ReferencePolicy
    from langgraph_evolver.tracing import write_evaluation_experiments

    tasks = [t for t in seed_tasks("test") if t.metadata["level"] == 2][:2]
    trajectories = run_rollouts(create_agent_graph(ReferencePolicy(tasks)), tasks)
    with _strict():
        summary = write_evaluation_experiments(tasks, {"before": trajectories}, dataset_name="held-out",
                                               client=client_for(fake))  # fmt: skip
    assert summary["runs"] == 2
    assert all(e["outputs"]["reference_solution"] for e in fake.examples.values())
    (session,) = [s for s in fake.sessions.values() if s["name"] == summary["experiments"]["before"]]
    assert [str(f["session_id"]) for f in fake.feedback] == [session["id"]] * 2

"""Offline tests of the local JSONL tracer and the LangSmith callback switch."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypedDict
from uuid import uuid4

import pytest
from langchain_core.callbacks import adispatch_custom_event
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel, GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from langgraph_evolver.tracing import (
    JsonlTracer,
    build_run_tree,
    langsmith_callbacks,
    langsmith_enabled,
    read_runs,
    trace_metadata,
)

# --------------------------------------------------------------------------- a small agent-like graph


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    fail: bool


@tool
def lookup_weather(city: str) -> str:
    """Look up the weather in a city."""
    return f"{city}: sunny"


upper = RunnableLambda(lambda text: text.upper(), name="upper")


def build_graph(*, use_async: bool = False) -> Any:
    """agent (chat model) -> tools (RunnableLambda + @tool); ``fail`` makes the tools node raise."""
    model = FakeListChatModel(responses=["paris"])

    def agent(state: State) -> dict[str, Any]:
        time.sleep(0.001)  # let concurrent invocations interleave
        return {"messages": [model.invoke(state["messages"])]}

    def tools(state: State) -> dict[str, Any]:
        city = upper.invoke(state["messages"][-1].content)
        if state.get("fail"):
            raise RuntimeError("tool node exploded")
        return {"messages": [ToolMessage(lookup_weather.invoke({"city": city}), tool_call_id="call-1")]}

    async def aagent(state: State) -> dict[str, Any]:
        await asyncio.sleep(0.001)
        return {"messages": [await model.ainvoke(state["messages"])]}

    async def atools(state: State) -> dict[str, Any]:
        city = await upper.ainvoke(state["messages"][-1].content)
        await asyncio.sleep(0)
        if state.get("fail"):
            raise RuntimeError("tool node exploded")
        return {"messages": [ToolMessage(await lookup_weather.ainvoke({"city": city}), tool_call_id="call-1")]}

    builder = StateGraph(State)
    builder.add_node("agent", aagent if use_async else agent)
    builder.add_node("tools", atools if use_async else tools)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    return builder.compile()


EXPECTED_SHAPE = (
    "chain",
    [
        ("agent", "chain", [("FakeListChatModel", "llm", [])]),
        ("tools", "chain", [("upper", "chain", []), ("lookup_weather", "tool", [])]),
    ],
)
RUNS_PER_INVOCATION = 6


def rollout_config(tracer: JsonlTracer, index: int) -> dict[str, Any]:
    return {
        "callbacks": [tracer],
        "metadata": trace_metadata("task-1", "group-1", index, model_version="v0"),
        "run_name": f"rollout-{index}",
    }


def inputs(*, fail: bool = False) -> dict[str, Any]:
    return {"messages": [HumanMessage("weather?")], "fail": fail}


# --------------------------------------------------------------------------- helpers over recorded trees


def walk(run: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield run
    for child in run["child_runs"]:
        yield from walk(child)


def shape(run: Mapping[str, Any]) -> tuple[Any, ...]:
    return (run["name"], run["run_type"], [shape(c) for c in run["child_runs"]])


def parse_time(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    assert parsed.utcoffset() == timedelta(0), f"{value} is not UTC"
    return parsed


def assert_consistent_tree(root: Mapping[str, Any]) -> None:
    """Every run: LangSmith dotted order derived from its ancestors, the root's trace id, valid times."""

    def check(run: Mapping[str, Any], parent: Mapping[str, Any] | None) -> None:
        start, end = parse_time(run["start_time"]), parse_time(run["end_time"])
        assert end >= start
        segment = start.strftime("%Y%m%dT%H%M%S%fZ") + run["id"]
        if parent is None:
            assert run["parent_run_id"] is None
            assert run["dotted_order"] == segment
        else:
            assert run["parent_run_id"] == parent["id"]
            assert run["dotted_order"] == parent["dotted_order"] + "." + segment
            assert start >= parse_time(parent["start_time"])
            assert end <= parse_time(parent["end_time"])
        assert run["trace_id"] == root["id"]
        for child in run["child_runs"]:
            check(child, run)

    check(root, None)


def raw_lines(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]  # every line must parse on its own


def assert_concurrent_trees(path: Path, count: int) -> None:
    runs = raw_lines(path)
    assert len(runs) == count * RUNS_PER_INVOCATION
    assert len({r["id"] for r in runs}) == len(runs), "a run was written twice"
    roots = build_run_tree(runs)
    assert len(roots) == count
    assert sorted(r["extra"]["metadata"]["rollout_index"] for r in roots) == list(range(count))
    for root in roots:
        index = root["extra"]["metadata"]["rollout_index"]
        assert root["name"] == f"rollout-{index}"
        assert shape(root)[1:] == EXPECTED_SHAPE
        assert_consistent_tree(root)
        # No run of another concurrent rollout leaked into this tree.
        assert {r["extra"]["metadata"]["rollout_index"] for r in walk(root)} == {index}
        assert all(r["error"] is None for r in walk(root))


# --------------------------------------------------------------------------- tests


def test_graph_run_is_recorded_as_a_nested_langsmith_tree(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    with JsonlTracer(path, project="evolver-tests") as tracer:
        result = build_graph().invoke(inputs(), config=rollout_config(tracer, 3))
    assert result["messages"][-1].content == "PARIS: sunny"

    runs = raw_lines(path)
    assert read_runs(path) == runs
    assert len(runs) == RUNS_PER_INVOCATION
    (root,) = build_run_tree(runs)
    assert root["name"] == "rollout-3"
    assert shape(root)[1:] == EXPECTED_SHAPE
    assert_consistent_tree(root)

    by_name = {r["name"]: r for r in walk(root)}
    for run in walk(root):
        assert run["session_name"] == "evolver-tests"
        assert run["error"] is None
        meta = run["extra"]["metadata"]
        assert (meta["task_id"], meta["group_id"], meta["rollout_index"], meta["model_version"]) == (
            "task-1",
            "group-1",
            3,
            "v0",
        )
    # LangGraph's own metadata reaches the node runs and everything below them.
    assert by_name["agent"]["extra"]["metadata"]["langgraph_node"] == "agent"
    assert by_name["lookup_weather"]["extra"]["metadata"]["langgraph_node"] == "tools"
    assert "graph:step:2" in by_name["tools"]["tags"]

    llm = by_name["FakeListChatModel"]
    (prompt,) = llm["inputs"]["messages"]
    assert [(m["type"], m["content"]) for m in prompt] == [("human", "weather?")]
    (generation,) = llm["outputs"]["generations"][0]
    assert generation["message"]["type"] == "ai"
    assert generation["message"]["content"] == "paris"
    assert by_name["upper"]["inputs"] == {"input": "paris"}
    assert by_name["upper"]["outputs"] == {"output": "PARIS"}
    assert by_name["lookup_weather"]["inputs"] == {"city": "PARIS"}
    assert by_name["lookup_weather"]["outputs"] == {"output": "PARIS: sunny"}
    final_messages = root["outputs"]["messages"]
    assert [m["type"] for m in final_messages] == ["human", "ai", "tool"]
    assert [e["name"] for e in root["events"]] == ["start", "end"]


async def test_concurrent_async_invocations_give_separate_complete_trees(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    graph = build_graph(use_async=True)
    tracer = JsonlTracer(path)
    results = await asyncio.gather(*(graph.ainvoke(inputs(), config=rollout_config(tracer, i)) for i in range(32)))
    tracer.close()
    assert all(r["messages"][-1].content == "PARIS: sunny" for r in results)
    assert tracer.active_runs == 0
    assert tracer.failures == 0
    assert_concurrent_trees(path, 32)


def test_concurrent_threaded_invocations_give_separate_complete_trees(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    graph = build_graph()
    with JsonlTracer(path) as tracer, ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda i: graph.invoke(inputs(), config=rollout_config(tracer, i)), range(32)))
    assert all(r["messages"][-1].content == "PARIS: sunny" for r in results)
    assert tracer.failures == 0
    assert_concurrent_trees(path, 32)


@pytest.mark.parametrize("use_async", [False, True])
async def test_node_exception_is_recorded_and_tracer_stays_usable(tmp_path: Path, use_async: bool) -> None:
    path = tmp_path / "traces.jsonl"
    graph = build_graph(use_async=use_async)
    tracer = JsonlTracer(path)
    with pytest.raises(RuntimeError, match="tool node exploded"):
        if use_async:
            await graph.ainvoke(inputs(fail=True), config=rollout_config(tracer, 0))
        else:
            graph.invoke(inputs(fail=True), config=rollout_config(tracer, 0))
    ok = (
        await graph.ainvoke(inputs(), config=rollout_config(tracer, 1))
        if use_async
        else graph.invoke(inputs(), config=rollout_config(tracer, 1))
    )
    tracer.close()
    assert ok["messages"][-1].content == "PARIS: sunny"
    assert tracer.active_runs == 0

    failed, succeeded = build_run_tree(read_runs(path))
    assert failed["name"] == "rollout-0"
    assert_consistent_tree(failed)
    errors = {r["name"]: r["error"] for r in walk(failed)}
    assert "tool node exploded" in errors["rollout-0"]
    assert "RuntimeError" in errors["tools"] and "tool node exploded" in errors["tools"]
    assert errors["upper"] is None and errors["agent"] is None  # it ran fine before the raise
    assert "lookup_weather" not in errors  # never reached
    assert failed["outputs"] is None and [e["name"] for e in failed["events"]] == ["start", "error"]

    assert succeeded["name"] == "rollout-1"
    assert shape(succeeded)[1:] == EXPECTED_SHAPE
    assert_consistent_tree(succeeded)
    assert all(r["error"] is None for r in walk(succeeded))


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque thing>"


class _BrokenRepr:
    def __repr__(self) -> str:
        raise ValueError("no repr for you")


class _ExplodingMapping(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("cannot iterate")

    def __len__(self) -> int:
        return 1


def test_unserializable_values_fall_back_to_repr_and_tracer_never_raises(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    tracer = JsonlTracer(path)
    echo = RunnableLambda(lambda x: {"same": x["obj"], "nan": float("nan")}, name="echo")
    echo.invoke(
        {"obj": _Opaque(), "broken": _BrokenRepr(), "when": datetime(2025, 1, 2)}, config={"callbacks": [tracer]}
    )

    # Callbacks about runs the tracer never saw, and a callback whose arguments blow up inside it: no exception.
    tracer.on_chain_end({"x": 1}, run_id=uuid4())
    tracer.on_tool_error(RuntimeError("late"), run_id=uuid4())
    tracer.on_chain_start({}, {}, run_id=uuid4(), metadata=_ExplodingMapping())
    assert tracer.failures == 1
    tracer.close()

    (run,) = read_runs(path)
    assert run["name"] == "echo"
    assert run["inputs"]["obj"] == "<opaque thing>"
    assert "_BrokenRepr" in run["inputs"]["broken"]
    assert run["inputs"]["when"] == "2025-01-02T00:00:00"
    assert run["outputs"] == {"same": "<opaque thing>", "nan": "nan"}


def test_chat_model_tool_calls_survive_serialization(tmp_path: Path) -> None:
    call = {"name": "lookup_weather", "args": {"city": "Paris"}, "id": "call-7", "type": "tool_call"}
    model = GenericFakeChatModel(messages=iter([AIMessage(content="", tool_calls=[call])]))
    with JsonlTracer(tmp_path / "traces.jsonl") as tracer:
        reply = model.invoke("weather in Paris?", config={"callbacks": [tracer]})
    assert reply.tool_calls == [call]

    (run,) = read_runs(tmp_path / "traces.jsonl")
    assert run["run_type"] == "llm"
    (generation,) = run["outputs"]["generations"][0]
    assert generation["message"]["type"] == "ai"
    assert generation["message"]["tool_calls"] == [call]


class _StaticRetriever(BaseRetriever):
    def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
        return [Document(page_content=f"doc about {query}", metadata={"source": "kb"})]


async def test_retriever_runs_and_custom_events_are_recorded(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    retriever = _StaticRetriever()

    async def search(query: str) -> str:
        await adispatch_custom_event("experience_retrieved", {"count": 1})
        docs = await retriever.ainvoke(query)
        return docs[0].page_content

    with JsonlTracer(path) as tracer:
        answer = await RunnableLambda(search, name="search").ainvoke("paris", config={"callbacks": [tracer]})
    assert answer == "doc about paris"

    (root,) = build_run_tree(read_runs(path))
    assert_consistent_tree(root)
    (retrieval,) = root["child_runs"]
    assert (retrieval["run_type"], retrieval["inputs"]) == ("retriever", {"query": "paris"})
    assert retrieval["outputs"]["documents"][0]["page_content"] == "doc about paris"
    custom = [e for e in root["events"] if e["name"] == "experience_retrieved"]
    assert custom and custom[0]["kwargs"] == {"data": {"count": 1}}


def test_close_then_reuse_appends_and_append_mode_keeps_old_lines(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "traces.jsonl"
    double = RunnableLambda(lambda x: 2 * x, name="double")
    tracer = JsonlTracer(path)
    double.invoke(1, config={"callbacks": [tracer]})
    tracer.close()
    double.invoke(2, config={"callbacks": [tracer]})  # reopens for append after close
    tracer.flush()
    assert [r["outputs"]["output"] for r in read_runs(path)] == [2, 4]
    tracer.close()

    with JsonlTracer(path, append=True) as again:
        double.invoke(3, config={"callbacks": [again]})
    assert [r["outputs"]["output"] for r in read_runs(path)] == [2, 4, 6]
    with JsonlTracer(path) as fresh:
        double.invoke(4, config={"callbacks": [fresh]})
    assert [r["outputs"]["output"] for r in read_runs(path)] == [8]


def test_build_run_tree_sorts_by_dotted_order_and_keeps_orphans_as_roots() -> None:
    runs = [
        {"id": "c2", "parent_run_id": "r", "dotted_order": "20250101T000000000002Zr.20250101T000000000005Zc2"},
        {"id": "o", "parent_run_id": "missing", "dotted_order": "20250101T000000000009Zo"},
        {"id": "c1", "parent_run_id": "r", "dotted_order": "20250101T000000000002Zr.20250101T000000000003Zc1"},
        {"id": "r", "parent_run_id": None, "dotted_order": "20250101T000000000002Zr"},
    ]
    roots = build_run_tree(runs)
    assert [r["id"] for r in roots] == ["r", "o"]
    assert [c["id"] for c in roots[0]["child_runs"]] == ["c1", "c2"]
    assert "child_runs" not in runs[0]  # inputs untouched


def test_trace_metadata_carries_rollout_identity() -> None:
    assert trace_metadata("t-9", "g-2", 5, experience_ids=["e1"]) == {
        "task_id": "t-9",
        "group_id": "g-2",
        "rollout_index": 5,
        "experience_ids": ["e1"],
    }


_LANGSMITH_ENV = (
    "LANGSMITH_TRACING",
    "LANGSMITH_TRACING_V2",
    "LANGCHAIN_TRACING_V2",
    "LANGCHAIN_TRACING",
    "LANGSMITH_API_KEY",
    "LANGCHAIN_API_KEY",
)


@pytest.mark.parametrize(
    ("env", "enabled"),
    [
        ({}, False),
        ({"LANGSMITH_TRACING": "true"}, False),  # no API key
        ({"LANGSMITH_API_KEY": "lsv2_pt_x"}, False),  # tracing not switched on
        ({"LANGSMITH_TRACING": "false", "LANGSMITH_API_KEY": "lsv2_pt_x"}, False),
        ({"LANGSMITH_TRACING": "true", "LANGSMITH_API_KEY": "lsv2_pt_x"}, True),
        ({"LANGCHAIN_TRACING_V2": "true", "LANGCHAIN_API_KEY": "lsv2_pt_x"}, True),
    ],
)
def test_langsmith_callbacks_only_when_configured(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], enabled: bool
) -> None:
    for name in _LANGSMITH_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert langsmith_enabled() is enabled
    if not enabled:
        assert langsmith_callbacks(project="p") == []


_UNREACHABLE_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, sys.argv[1])
    from langchain_core.tracers.langchain import LangChainTracer
    from test_tracing import build_graph, inputs, RUNS_PER_INVOCATION
    from langgraph_evolver.tracing import JsonlTracer, build_run_tree, langsmith_callbacks, read_runs, trace_metadata

    graph = build_graph()
    graph.invoke(inputs())  # warm up imports and compilation outside the timings

    def run(callbacks, n=50):
        start = time.perf_counter()
        for i in range(n):
            config = {"callbacks": callbacks, "metadata": trace_metadata("t", "g", i), "run_name": f"rollout-{i}"}
            assert graph.invoke(inputs(), config=config)["messages"][-1].content == "PARIS: sunny"
        return time.perf_counter() - start

    with JsonlTracer(sys.argv[2] + ".base") as local:
        baseline = run([local])
    callbacks = langsmith_callbacks(project="evolver-tests", metadata={"suite": "tracing"})
    with JsonlTracer(sys.argv[2]) as local:
        traced = run([local, *callbacks])
    [tracer] = callbacks
    report = {
        "baseline": baseline,
        "traced": traced,
        "is_langchain_tracer": isinstance(tracer, LangChainTracer),
        "api_url": tracer.client.api_url,
        "latest_run_metadata": tracer.latest_run.extra.get("metadata", {}) if tracer.latest_run else None,
        "local_trees": len(build_run_tree(read_runs(sys.argv[2]))),
        "local_runs": len(read_runs(sys.argv[2])),
    }
    print("REPORT " + json.dumps(report), flush=True)
    # Skip interpreter shutdown: the LangSmith client would spend it retrying the unreachable endpoint.
    os._exit(0)
    """
)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_langsmith_neither_slows_nor_breaks_the_agent(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A fresh interpreter: LangSmith's client and env lookups are process-wide caches that must not leak into
    # other tests (LangChain would start tracing every run to the dead endpoint).
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    for name in _LANGSMITH_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    monkeypatch.setenv("LANGSMITH_API_KEY", "lsv2_pt_not_a_real_key")
    monkeypatch.setenv("LANGSMITH_ENDPOINT", endpoint)
    monkeypatch.delenv("LANGSMITH_USE_DAEMON", raising=False)
    tests_dir = str(Path(__file__).parent)
    proc = subprocess.run(
        [sys.executable, "-c", _UNREACHABLE_SCRIPT, tests_dir, str(tmp_path / "traces.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    report = json.loads(line.removeprefix("REPORT "))

    assert report["is_langchain_tracer"]
    assert report["api_url"] == endpoint
    # The LangSmith tracer really processed the rollouts (with their metadata) ...
    assert report["latest_run_metadata"]["task_id"] == "t"
    assert report["latest_run_metadata"]["suite"] == "tracing"
    # ... while the local trace is complete and the agent did not wait on the dead endpoint.
    assert report["local_trees"] == 50 and report["local_runs"] == 50 * RUNS_PER_INVOCATION
    # a ratio against the same runs untraced (measured in the same process), not a wall-clock figure: waiting on
    # the dead endpoint would cost seconds per run; the slack absorbs a loaded machine
    assert report["traced"] < 3 * report["baseline"] + 1.0, report


# --------------------------------------------------------------------------- the package's layout

# Each module of langgraph_evolver/tracing/ may import only those before it here: no circle, and the
# local tracer never needs LangSmith.
TRACING_LAYERS = ("payload", "runtree", "jsonl", "langsmith", "rollouts", "experiments", "tools")


def test_tracing_modules_import_one_way() -> None:
    import ast

    import langgraph_evolver.tracing as tracing

    package = Path(tracing.__file__).parent
    assert sorted(p.stem for p in package.glob("*.py") if p.stem != "__init__") == sorted(TRACING_LAYERS)
    for i, name in enumerate(TRACING_LAYERS):
        tree = ast.parse((package / f"{name}.py").read_text(encoding="utf-8"))
        siblings = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1}
        assert siblings <= set(TRACING_LAYERS[:i]), f"tracing/{name}.py imports {siblings - set(TRACING_LAYERS[:i])}"


def test_old_langsmith_tracing_module_still_imports_and_runs() -> None:
    from langgraph_evolver import langsmith_tracing, tracing

    for name in langsmith_tracing.__all__:
        assert getattr(langsmith_tracing, name) is getattr(tracing.experiments if name == "main" else tracing, name)
    proc = subprocess.run([sys.executable, "-m", "langgraph_evolver.langsmith_tracing", "--help"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--dataset" in proc.stdout and "NAME=DIR" in proc.stdout
    assert "RuntimeWarning" not in proc.stderr  # the package does not import the module it runs

"""Learning from traces (``python -m langgraph_evolver.ingest``): recorded runs of our agent and of a
``create_agent`` agent, from the local JSONL store and from LangSmith (the real client against the local
stand-in), become trajectories, trace tasks, experiences and labels; filters, ``--dry-run``,
``--write-feedback`` and redaction; exact token ids survive the round trip; ingested tasks train."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tracers.langchain import LangChainTracer

from env_tools.sandbox import seed_tasks
from examples.dropin.library import Library, make_tools
from graphs.agent import create_agent_graph
from langgraph_evolver.batch import run_rollouts
from langgraph_evolver.ingest import read_jsonl_traces
from langgraph_evolver.ingest.__main__ import main
from langgraph_evolver.questioning import TaskStore
from langgraph_evolver.testing import ReferencePolicy, ScriptedChatModel
from langgraph_evolver.tracing import (
    JsonlTracer,
    RolloutTracer,
    TraceLimits,
    annotate_rollouts,
    read_runs,
    with_training_step,
)
from langgraph_evolver.tracing import langsmith as langsmith_tracing
from langgraph_evolver.types import read_jsonl
from tests._fake_langsmith import FakeLangSmith, fake_langsmith
from tests.test_tracing_langsmith import client_for

ROOT = Path(__file__).resolve().parent.parent
GIVE_UP = [AIMessage("Sorry, I cannot do that.")]


def redact_names(text: str) -> str:
    """The redaction hook the tests pass with --redact."""
    return text.replace("Ivy", "<name>")


def run_cli(*argv: str, capsys: Any) -> dict[str, Any]:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def record_sandbox(callbacks: list, *, step: int = 0) -> tuple[list, list]:
    """Our agent on 3 sandbox tasks: the first two solved (twice each), the third given up on, the first
    also given up on once (two rollouts of one query, one positive)."""
    tasks = [t for t in seed_tasks("train") if t.metadata["level"] == 2][:3]
    good = run_rollouts(create_agent_graph(ReferencePolicy(tasks)), tasks[:2], n=2,
                        callbacks=with_training_step(callbacks, step, "v0"), group_prefix="good/")  # fmt: skip
    bad = run_rollouts(create_agent_graph(ScriptedChatModel(GIVE_UP)), [tasks[0], tasks[2]],
                       callbacks=with_training_step(callbacks, step, "v0"), group_prefix="bad/")  # fmt: skip
    trajectories = good + bad
    assert [t.reward for t in good] == [1.0] * 4 and all(t.reward < 0.5 for t in bad)
    annotate_rollouts(callbacks, trajectories, [[0.0]] * len(trajectories), step=step, background=False)
    return tasks, trajectories


@pytest.fixture
def sandbox_jsonl(tmp_path: Path) -> tuple[Path, list]:
    path = tmp_path / "traces" / "runs.jsonl"
    with JsonlTracer(path) as tracer:
        tasks, _ = record_sandbox([tracer])
    return path, tasks


def test_local_jsonl_traces_become_tasks_experiences_and_labels(sandbox_jsonl, tmp_path, capsys):
    path, tasks = sandbox_jsonl
    assert path.with_name("runs.feedback.jsonl").exists()  # the rewards, beside the traces
    out = tmp_path / "ingest"
    figures = run_cli("--jsonl", str(path), "--env", "sandbox", "--out", str(out), capsys=capsys)
    assert figures["traces_read"] == 6 and figures["skipped"] == {}
    assert figures["trajectories"] == 6 and figures["with_reward"] == 6
    assert figures["policy_gradient_trajectories"] == 0  # a scripted model: no token ids
    assert (figures["tasks"], figures["tasks_trainable"], figures["tasks_not_trained"]) == (3, 2, 1)
    assert figures["experiences"] > 0 and figures["labelled_steps"] > 0

    ingested = {t.query: t for t in read_jsonl(out / "tasks.jsonl", _task_cls())}
    assert set(ingested) == {t.query for t in tasks}  # the queries people sent, one task each
    for original in tasks:
        task = ingested[original.query]
        assert task.source == "trace" and task.env == "sandbox" and task.id.startswith("trace-")
        assert task.env_params == original.env_params  # recorded with the rollout's reward
        if original is tasks[2]:  # only given up on: kept, not trained
            assert task.reference_solution is None and task.metadata["trainable"] is False
            assert "positive feedback" in task.metadata["why_not_trained"]
        else:  # the positive run's calls are the reference
            assert task.metadata["trainable"] is True
            assert [(c.name, c.arguments) for c in task.reference_solution] == [
                (c.name, c.arguments) for c in original.reference_solution]  # fmt: skip
    with TaskStore(out / "tasks.sqlite") as store:
        assert sorted(t.query for t in store.list()) == sorted(t.query for t in tasks[:2])
    labels = [json.loads(x) for x in (out / "labels.jsonl").read_text().splitlines()]
    llm_runs = {r["id"] for r in read_runs(path) if r["run_type"] == "llm"}
    assert labels and all(x["llm_run_id"] in llm_runs for entry in labels for x in entry["labels"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["task_store_added"] == 2


def _task_cls() -> Any:
    from langgraph_evolver.types import Task

    return Task


def test_dry_run_writes_nothing_and_redaction_reaches_every_stored_text(sandbox_jsonl, tmp_path, capsys):
    path, tasks = sandbox_jsonl
    out = tmp_path / "dry"
    figures = run_cli("--jsonl", str(path), "--env", "sandbox", "--out", str(out), "--dry-run", capsys=capsys)
    assert not out.exists()
    assert figures["dry_run"] and figures["would_write"]["task_store"] == 2
    # Filters apply to local traces too: only the rollouts whose reward feedback is below 0.5.
    failed = run_cli("--jsonl", str(path), "--env", "sandbox", "--feedback", "reward<0.5", "--dry-run", capsys=capsys)
    assert failed["traces_read"] == 2 and failed["tasks_trainable"] == 0
    assert failed["filter"] == 'and(eq(feedback_key, "reward"), lt(feedback_score, 0.5))'

    out = tmp_path / "redacted"
    run_cli("--jsonl", str(path), "--env", "sandbox", "--out", str(out), "--redact", "tests.test_ingest:redact_names",
            capsys=capsys)  # fmt: skip
    text = "".join((out / f).read_text() for f in ("trajectories.jsonl", "tasks.jsonl", "experiences.jsonl"))
    mentions_ivy = [t for t in tasks if "Ivy" in t.query]
    assert mentions_ivy, "pick tasks that mention a name the hook redacts"
    assert "Ivy" not in text and "<name>" in text


def _record_create_agent(fake: FakeLangSmith, client: Any) -> list[str]:
    """A user's production create_agent app traced to LangSmith by LangChain's own tracer, then rated."""
    library = Library.sample()
    tracer = LangChainTracer(project_name="prod", client=client)
    roots = []
    find = {"name": "find_member", "args": {"name": "Ana"}, "id": "a1"}
    search = {"name": "search_books", "args": {"query": "Dune"}, "id": "a2"}
    conversations = [  # (query, the model's turns, the user's thumbs)
        ("Lend Dune to Ana.", [AIMessage("", tool_calls=[find]), AIMessage("", tool_calls=[search]),
                               AIMessage("Done.")], 1.0),
        ("lend dune to ana", GIVE_UP, 0.0),
        ("What has Ana borrowed?", GIVE_UP, 0.0),
    ]  # fmt: skip
    for query, script, thumbs in conversations:
        agent = create_agent(ScriptedChatModel(script), make_tools(library), system_prompt="Library assistant.")
        result = agent.invoke({"messages": [("user", query)]}, config={"callbacks": [tracer], "tags": ["prod"]})
        assert result["messages"][-1].content
        roots.append(str(tracer.latest_run.id))
        client.flush()
        client.create_feedback(roots[-1], key="user_score", score=thumbs, trace_id=roots[-1],
                               session_id=client.read_project(project_name="prod").id)  # fmt: skip
    client.flush()  # feedback with a trace id rides the tracing queue
    return roots


def test_langsmith_traces_of_a_create_agent_app_and_of_our_agent(tmp_path, capsys, monkeypatch):
    with fake_langsmith() as fake:
        client = client_for(fake)
        monkeypatch.setattr(langsmith_tracing, "_CLIENT", client)  # what the CLI's langsmith_client() returns
        roots = _record_create_agent(fake, client)
        assert {r["run_type"] for r in fake.runs_of("prod")} >= {"llm", "tool", "chain"}

        # Only thumbs-down runs, as a dry run: read, report, write nothing, send nothing.
        figures = run_cli("--project", "prod", "--env", "library", "--feedback", "user_score<0.5", "--dry-run",
                          "--write-feedback", "--out", str(tmp_path / "none"), capsys=capsys)  # fmt: skip
        assert figures["traces_read"] == 2 and figures["tasks"] == 2 and figures["tasks_trainable"] == 0, figures
        assert not (tmp_path / "none").exists() and [f for f in fake.feedback if f["key"] == "step_attribution"] == []

        out = tmp_path / "prod"
        figures = run_cli("--project", "prod", "--env", "library", "--out", str(out), "--write-feedback",
                          capsys=capsys)  # fmt: skip
        assert figures["traces_read"] == 3 and figures["runs_read"] == len(fake.runs_of("prod"))
        assert figures["tasks"] == 2  # "Lend Dune to Ana." and "lend dune to ana" are one query
        assert figures["tasks_trainable"] == 1
        (task,) = [t for t in read_jsonl(out / "tasks.jsonl", _task_cls()) if t.metadata["trainable"]]
        assert [c.name for c in task.reference_solution] == ["find_member", "search_books"]
        assert task.metadata["reference_run_id"] == roots[0] and task.env == "library"
        # The environment the user named scores the trace task by replaying its reference (state equality).
        from examples.dropin.env import library_environment
        from langgraph_evolver.types import Action

        env = library_environment()
        env.reset(task)
        assert env.evaluate() == 0.0  # nothing done
        for call in task.reference_solution:
            env.step(Action(tool_calls=(call,)))
        assert env.evaluate() == 1.0
        trajectories = {t["metadata"]["root_run_id"]: t for t in map(json.loads, (out / "trajectories.jsonl")
                                                                      .read_text().splitlines())}  # fmt: skip
        first = trajectories[roots[0]]
        assert [s["node"] for s in first["steps"]] == ["model"] * 3
        assert [o["content"] for o in first["steps"][0]["observations"]]  # tool results matched to the calls
        # Labels went back as feedback on the original LLM runs.
        assert figures["feedback"]["written"] == figures["labelled_steps"] > 0
        llm_runs = {r["id"] for r in fake.runs_of("prod") if r["run_type"] == "llm"}
        labelled = [f for f in fake.feedback if f["key"] == "step_attribution"]
        assert len(labelled) == figures["labelled_steps"] and {f["run_id"] for f in labelled} <= llm_runs

        # Run ids: each one's whole trace.
        figures = run_cli("--project", "prod", "--run-ids", roots[2], "--env", "library", "--dry-run", capsys=capsys)
        assert figures["traces_read"] == 1 and figures["tasks"] == 1

        # Our agent's training rollouts, annotated: step/task metadata and reward feedback drive the ingest.
        tracer = RolloutTracer(project_name="train", client=client)
        tasks, _ = record_sandbox([tracer], step=7)
        client.flush()
        figures = run_cli("--project", "train", "--env", "sandbox", "--metadata", "training_step=7", "--out",
                          str(tmp_path / "train"), capsys=capsys)  # fmt: skip
        assert (figures["traces_read"], figures["tasks"], figures["tasks_trainable"]) == (6, 3, 2)
        ingested = {t.query: t for t in read_jsonl(tmp_path / "train" / "tasks.jsonl", _task_cls())}
        assert all(ingested[t.query].env_params == t.env_params for t in tasks)


def test_token_ids_survive_the_trace_and_logprobs_are_stored_once(tiny_policy_url, tmp_path, capsys):
    from langgraph_evolver.chat_model import PolicyChatModel

    tasks = [t for t in seed_tasks("test") if t.metadata["level"] == 2][:3]
    policy = PolicyChatModel(base_url=tiny_policy_url, model="tiny-policy", max_tokens=96)
    with (
        JsonlTracer(tmp_path / "runs.jsonl") as now,
        JsonlTracer(tmp_path / "before.jsonl", limits=TraceLimits.unbounded()) as before,
    ):
        trajectories = run_rollouts(create_agent_graph(policy, max_turns=4), tasks, callbacks=[now, before])
        annotate_rollouts([now], trajectories)
    sizes = {}
    for name in ("before", "runs"):
        lines = (tmp_path / f"{name}.jsonl").read_text().splitlines()
        llm = [len(x.encode()) for x in lines if json.loads(x)["run_type"] == "llm"]
        sizes[name] = (sum(llm) / len(llm), max(llm))
    print(f"bytes per LLM run (mean, max): before {sizes['before']}, now {sizes['runs']}")
    assert sizes["runs"][0] < 0.6 * sizes["before"][0]
    runs = [json.loads(x) for x in (tmp_path / "runs.jsonl").read_text().splitlines()]
    for run in (r for r in runs if r["run_type"] == "llm"):
        (generation,) = run["outputs"]["generations"][0]
        assert "logprobs" not in (generation.get("generation_info") or {})
        assert generation["message"]["response_metadata"]["logprobs"]["content"]

    traces = {t.root["id"]: t for t in read_jsonl_traces(tmp_path / "runs.jsonl")}
    from langgraph_evolver.ingest import ingest_traces

    kept = ingest_traces(traces.values(), env="sandbox", policy_model="tiny-policy", extractor=None, judge=None)
    other = ingest_traces(traces.values(), env="sandbox", policy_model="tiny-policy-v2", extractor=None, judge=None)
    by_steps = {tuple(s.llm_run_id for s in t.steps): t for t in kept.trajectories}
    for original in trajectories:
        ingested = by_steps[tuple(s.llm_run_id for s in original.steps)]
        assert ingested.metadata["policy_gradient"] is True
        for got, want in zip(ingested.steps, original.steps, strict=True):  # exact ids and logprobs
            assert got.transition == want.transition, (got.transition, want.transition)
    assert all(t.metadata["policy_gradient"] is False and not t.transitions for t in other.trajectories)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_ingested_trace_tasks_train_for_two_steps(sandbox_jsonl, tmp_path, capsys):
    from trainers.grpo import cli

    path, tasks = sandbox_jsonl
    out = tmp_path / "ingest"
    figures = run_cli("--jsonl", str(path), "--env", "sandbox", "--out", str(out), capsys=capsys)
    assert figures["tasks_trainable"] == 2
    run = tmp_path / "run"
    result = cli(["--config", str(ROOT / "examples" / "quickstart.yaml"), "--output_dir", str(run),
                  "--max_steps", "2", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
                  "--num_generations", "2", "--max_turns", "5", "--level_weights", "", "--eval_before", "false",
                  "--eval_after", "false", "--save_strategy", "no", "--report_to", "none",
                  "--task_store", str(out / "tasks.sqlite"), "--synthetic_ratio", "1.0"])  # fmt: skip
    assert result["steps"] == 2
    for step in (0, 1):
        rows = [json.loads(x) for x in (run / "trajectories" / f"step_{step:05d}.jsonl").read_text().splitlines()]
        assert rows and all(r["task"]["source"] == "trace" and r["reward"] is not None for r in rows)
        assert {r["task"]["query"] for r in rows} <= {t.query for t in tasks[:2]}


def test_recorded_run_trees_served_by_langsmith_ingest_like_the_local_store(sandbox_jsonl, tmp_path, capsys,
                                                                            monkeypatch):  # fmt: skip
    from langgraph_evolver.tracing import read_feedback

    path, _ = sandbox_jsonl
    local = run_cli("--jsonl", str(path), "--env", "sandbox", "--dry-run", capsys=capsys)
    with fake_langsmith() as fake:
        fake.add_runs(read_runs(path), project="recorded")  # a recorded trace set, served for queries
        for record in read_feedback(path):
            fake.add_feedback(record["run_id"], record["key"], record["score"])
        monkeypatch.setattr(langsmith_tracing, "_CLIENT", client_for(fake))
        served = run_cli("--project", "recorded", "--env", "sandbox", "--dry-run", capsys=capsys)
    same = ("traces_read", "runs_read", "trajectories", "with_reward", "tasks", "tasks_trainable", "experiences",
            "labelled_steps", "labels_good")  # fmt: skip
    assert {k: served[k] for k in same} == {k: local[k] for k in same}


def test_trace_times_without_a_zone_are_utc_and_compare_with_zoned_ones():
    """LangSmith's SDK hands out naive UTC start times, our tracer and the CLI's --start zoned ones."""
    from datetime import UTC, datetime

    from langgraph_evolver.ingest.sources import RecordedTrace, TraceFilter

    naive = {"start_time": "2026-11-01T12:00:00"}
    zoned = {"start_time": "2026-11-01T12:00:00+00:00"}
    noon = datetime(2026, 11, 1, 12, tzinfo=UTC)
    assert RecordedTrace(root=naive).start_time == RecordedTrace(root=zoned).start_time == noon
    assert RecordedTrace(root={}).start_time is None
    for root in (naive, zoned):
        assert TraceFilter(start=noon).matches(root, []) and not TraceFilter(end=noon).matches(root, [])
        assert not TraceFilter(start=datetime(2026, 11, 1, 13)).matches(root, [])  # a naive bound: UTC too

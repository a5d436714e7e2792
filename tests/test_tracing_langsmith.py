"""Training as LangSmith shows it, tested with the real ``langsmith`` client against a local stand-in
(``tests/_fake_langsmith.py``): tool runs, rollout metadata and the filter strings the docs give,
reward and label feedback, evaluations as a dataset plus experiments, bounded trace size, and a dead
or slow LangSmith costing nothing during training or at exit."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from env_tools.sandbox import seed_tasks
from graphs.agent import create_agent_graph
from langgraph_evolver.batch import run_rollouts
from langgraph_evolver.ingest.sources import query_runs
from langgraph_evolver.testing import ReferencePolicy
from langgraph_evolver.tracing import (
    REWARD_FEEDBACK_KEY,
    JsonlTracer,
    RolloutTracer,
    TraceLimits,
    annotate_rollouts,
    build_run_tree,
    langsmith_client,
    read_runs,
    with_training_step,
    write_evaluation_experiments,
)
from tests._fake_langsmith import FakeLangSmith, fake_langsmith

ROOT = Path(__file__).resolve().parent.parent

# The filter strings docs/langsmith.md gives for a training project (LangSmith's filter language).
BY_STEP = 'and(eq(metadata_key, "training_step"), eq(metadata_value, "3"))'
BY_TASK = 'and(eq(metadata_key, "task_id"), eq(metadata_value, "{task}"))'
FAILED_ROLLOUTS = 'and(eq(feedback_key, "reward"), lt(feedback_score, 1))'


@pytest.fixture
def fake() -> Iterator[FakeLangSmith]:
    with fake_langsmith() as server:
        yield server


def client_for(fake: FakeLangSmith) -> Any:
    return langsmith_client(new=True, api_url=fake.url, api_key="lsv2_pt_test", exit_timeout_s=1)


def walk(run: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield run
    for child in run["child_runs"]:
        yield from walk(child)


def sandbox_tasks(n: int, level: int = 2) -> list:
    return [t for t in seed_tasks("test") if t.metadata["level"] == level][:n]


def test_rollouts_in_langsmith_have_tool_runs_training_metadata_and_reward_feedback(fake, tmp_path):
    tasks = sandbox_tasks(2)
    client = client_for(fake)
    tracer = RolloutTracer(project_name="train", client=client)
    graph = create_agent_graph(ReferencePolicy(tasks))
    with JsonlTracer(tmp_path / "runs.jsonl") as local:
        callbacks = with_training_step([local, tracer], 3, "policy-v3")  # what the trainer does per step
        trajectories = run_rollouts(graph, tasks, n=2, callbacks=callbacks, group_prefix="step3/")
    assert tracer.rollouts and all(r["run"] is not None for r in tracer.rollouts.values())  # held for annotation
    assert [t.reward for t in trajectories] == [1.0] * 4
    advantages = [[0.5], [-0.5], [0.25, 0.75], None]
    assert annotate_rollouts([local, tracer], trajectories, advantages, step=3, background=False) == 8  # 4 + 4 local
    client.flush()

    # Tool calls are `tool` runs under the `tools` node, locally and in LangSmith, with their observations.
    for roots in (build_run_tree(read_runs(tmp_path / "runs.jsonl")), build_run_tree(fake.runs_of("train"))):
        assert len(roots) == 4
        for root, trajectory in zip(sorted(roots, key=lambda r: r["extra"]["metadata"]["trajectory_id"]),
                                    sorted(trajectories, key=lambda t: t.id), strict=True):  # fmt: skip
            tool_runs = [r for r in walk(root) if r["run_type"] == "tool"]
            calls = [c for s in trajectory.steps for c in s.action.tool_calls]
            assert [r["name"] for r in tool_runs] == [c.name for c in calls] and calls
            parents = {r["id"]: r for r in walk(root)}
            assert {parents[r["parent_run_id"]]["name"] for r in tool_runs} == {"tools"}
            observations = [o.content for s in trajectory.steps for o in s.observations]
            assert [json.dumps(r["outputs"]) for r in tool_runs] and all(
                obs in json.dumps(r["outputs"]) or json.dumps(obs)[1:-1] in json.dumps(r["outputs"])
                for r, obs in zip(tool_runs, observations, strict=True)
            )
    # The trajectory recorder still sees each observation once.
    assert all(len(s.observations) == len(s.action.tool_calls) for t in trajectories for s in t.steps)

    roots = {r["extra"]["metadata"]["trajectory_id"]: r for r in fake.runs_of("train") if r["parent_run_id"] is None}
    for trajectory, advantage in zip(trajectories, advantages, strict=True):
        meta = roots[trajectory.id]["extra"]["metadata"]
        assert meta["task_id"] == trajectory.task.id and meta["group_id"] == f"step3/{trajectory.task.id}"
        assert meta["rollout_index"] == trajectory.rollout_index and meta["training_step"] == 3
        assert meta["reward"] == 1.0 and meta["finish_reason"] == "final_answer"
        assert meta["env"] == "sandbox" and meta["env_params"] == trajectory.task.env_params
        assert meta["model_version"] == "policy-v3"
        if advantage is None:
            assert "advantage" not in meta
        else:
            assert meta["advantage"] == pytest.approx(sum(advantage) / len(advantage))
    assert roots[trajectories[2].id]["extra"]["metadata"]["advantage_max"] == 0.75
    rewards = [f for f in fake.feedback if f["key"] == REWARD_FEEDBACK_KEY]
    assert sorted(f["run_id"] for f in rewards) == sorted(r["id"] for r in roots.values())
    assert {f["score"] for f in rewards} == {1.0}

    train = client.read_project(project_name="train").id
    assert {str(f["session_id"]) for f in rewards} == {str(train)}  # feedback names the runs' project

    # The documented filter strings find the rollouts of a step and of a task through the client.
    def roots_where(text: str) -> list[dict[str, Any]]:
        return query_runs(client, project_ids=[str(train)], is_root=True, filter=text)

    by_step = roots_where(BY_STEP)
    assert len(by_step) == 4
    task = tasks[0].id
    by_task = roots_where(BY_TASK.format(task=task))
    assert {r["extra"]["metadata"]["task_id"] for r in by_task} == {task} and len(by_task) == 2
    assert roots_where(FAILED_ROLLOUTS) == [] and roots_where(BY_STEP.replace('"3"', '"4"')) == []


def test_node_runs_are_bounded_and_the_root_keeps_the_whole_episode(fake, tmp_path):
    tasks = [t for t in seed_tasks("test") if t.metadata["level"] == 3][:1]
    client = client_for(fake)
    tracer = RolloutTracer(project_name="bounded", client=client, limits=TraceLimits(head_items=2, tail_items=2))
    graph = create_agent_graph(ReferencePolicy(tasks))
    with JsonlTracer(tmp_path / "runs.jsonl", limits=TraceLimits(head_items=2, tail_items=2)) as local:
        (trajectory,) = run_rollouts(graph, tasks, callbacks=[local, tracer])
    client.flush()
    assert len(trajectory.steps) >= 3
    for runs in (read_runs(tmp_path / "runs.jsonl"), fake.runs_of("bounded")):
        (root,) = build_run_tree(runs)
        final = root["outputs"]["messages"]
        assert len(final) == 2 + 2 * len(trajectory.steps) - 1  # system, user, then call/observation pairs
        nodes = [r for r in walk(root) if r["name"] in ("agent", "tools")]
        longest = max(len(r["inputs"]["messages"]) for r in nodes)
        assert longest == 5  # 2 first + marker + 2 last
        marked = [r for r in nodes if "__omitted__" in json.dumps(r["inputs"]["messages"])]
        assert marked and all(r["inputs"]["messages"][2]["__omitted__"] > 0 for r in marked)
        llm = [r for r in walk(root) if r["run_type"] == "llm"]
        assert max(len(r["inputs"]["messages"][0]) for r in llm) == len(final) - 1  # LLM prompts stay exact


def test_evaluations_become_a_dataset_and_one_experiment_per_checkpoint(fake):
    tasks = sandbox_tasks(3)
    graph = create_agent_graph(ReferencePolicy(tasks))
    before = run_rollouts(graph, tasks, n=2)
    after = run_rollouts(graph, tasks, n=2)
    client = client_for(fake)
    summary = write_evaluation_experiments(tasks, {"before": before, "after-30-steps": after},
                                           dataset_name="sandbox-held-out", client=client)  # fmt: skip
    assert summary["examples"] == 3 and summary["runs"] == 12
    (dataset,) = fake.datasets.values()
    assert dataset["name"] == "sandbox-held-out"
    examples = {e["inputs"]["task_id"]: e for e in fake.examples.values()}
    assert set(examples) == {t.id for t in tasks}
    assert examples[tasks[0].id]["outputs"]["reference_solution"][0]["name"] == tasks[0].reference_solution[0].name
    sessions = {s["name"]: s for s in fake.sessions.values()}
    for checkpoint in ("before", "after-30-steps"):
        project = summary["experiments"][checkpoint]
        assert sessions[project]["reference_dataset_id"] == dataset["id"]
        runs = fake.runs_of(project)
        assert len(runs) == 6
        assert {r["reference_example_id"] for r in runs} == {e["id"] for e in examples.values()}
        assert all(r["outputs"]["reward"] == 1.0 for r in runs)
    scored = {f["run_id"] for f in fake.feedback if f["key"] == REWARD_FEEDBACK_KEY}
    assert len(scored) == 12
    project_of = {r["id"]: r["session_id"] for r in fake.runs.values()}
    assert all(str(f["session_id"]) == project_of[f["run_id"]] for f in fake.feedback)  # each on its experiment
    # Written again (another evaluation): the dataset and its examples are reused.
    again = write_evaluation_experiments(tasks[:2], {"later": after[:4]}, dataset_name="sandbox-held-out",
                                         client=client)  # fmt: skip
    assert again["dataset_id"] == dataset["id"] and len(fake.examples) == 3 and again["runs"] == 4


def test_evaluation_folders_become_experiments_from_the_command_line(fake, tmp_path, monkeypatch, capsys):
    from langgraph_evolver import langsmith_tracing  # the module the documented command runs
    from langgraph_evolver.tracing import langsmith as langsmith_sink
    from langgraph_evolver.types import write_jsonl

    tasks = sandbox_tasks(2)
    graph = create_agent_graph(ReferencePolicy(tasks))
    for name in ("eval_before", "eval_after"):  # what trainers.grpo leaves in its output folder
        write_jsonl(tmp_path / name / "trajectories.jsonl", run_rollouts(graph, tasks, n=2))
    monkeypatch.setattr(langsmith_sink, "_CLIENT", client_for(fake))
    assert langsmith_tracing.main(["--dataset", "held-out", f"before={tmp_path / 'eval_before'}",
                                   f"after={tmp_path / 'eval_after'}"]) == 0  # fmt: skip
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["examples"] == 2 and summary["runs"] == 8 and set(summary["experiments"]) == {"before", "after"}


# --------------------------------------------------------------------------- LangSmith down or slow

_TRAINING_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    from env_tools.sandbox import seed_tasks
    from graphs.agent import create_agent_graph
    from langgraph_evolver.batch import run_rollouts
    from langgraph_evolver.testing import ReferencePolicy
    from langgraph_evolver.tracing import annotate_rollouts, langsmith_callbacks, with_training_step

    from langsmith import tracing_context

    # First, before anything traces: LangSmith's default client would otherwise be created (non-daemon sender).
    callbacks = langsmith_callbacks(project="train")
    assert callbacks, "LangSmith should be configured"
    tasks = [t for t in seed_tasks("train") if t.metadata["level"] == 2][:4]
    graph = create_agent_graph(ReferencePolicy(tasks))
    with tracing_context(enabled=False):
        run_rollouts(graph, tasks[:1])  # imports and first-call costs outside the timings

    def steps(callbacks, n=3):
        times = []
        for step in range(n):
            start = time.perf_counter()
            trajectories = run_rollouts(graph, tasks, n=4, callbacks=with_training_step(callbacks, step, "v"),
                                        group_prefix=f"step{step}/")
            assert all(t.reward == 1.0 for t in trajectories), [t.errors for t in trajectories]
            annotate_rollouts(callbacks, trajectories, [[0.0]] * len(trajectories), step=step)
            times.append(time.perf_counter() - start)
        return min(times)

    with tracing_context(enabled=False):
        baseline = steps([])
    traced = steps(callbacks)
    print("REPORT " + json.dumps({"baseline": baseline, "traced": traced, "end": time.time()}), flush=True)
    """
)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run_training(endpoint: str) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env.update(LANGSMITH_TRACING="true", LANGSMITH_API_KEY="lsv2_pt_not_a_real_key", LANGSMITH_ENDPOINT=endpoint,
               PYTHONPATH=str(ROOT))  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", _TRAINING_SCRIPT, str(ROOT)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)  # fmt: skip
    out, err = proc.communicate(timeout=180)
    ended = time.time()
    assert proc.returncode == 0, err[-3000:]
    (line,) = [ln for ln in out.splitlines() if ln.startswith("REPORT ")]
    report = json.loads(line.removeprefix("REPORT "))
    report["exit_s"] = ended - report.pop("end")
    return report


def test_langsmith_down_or_slow_costs_nothing_per_step_or_at_exit():
    # A fresh interpreter per case: LangSmith's client and env lookups are process-wide.
    with fake_langsmith() as up:
        healthy = _run_training(up.url)
        assert up.wait_for(lambda f: sum(r.get("parent_run_id") is None for r in f.runs.values()) >= 3 * 16)
    down = _run_training(f"http://127.0.0.1:{_closed_port()}")
    with fake_langsmith(delay_s=5.0) as server:  # every request takes 5 s (sends time out after 10)
        slow = _run_training(server.url)
        assert server.requests  # it did try
    print(f"step with LangSmith up {healthy}, down {down}, slow {slow}")
    for report in (down, slow):
        # A training step (16 rollouts + annotation) costs what it costs with a healthy LangSmith.
        assert report["traced"] < 1.5 * healthy["traced"] + 0.5, (report, healthy)
        # The process exits after the bounded flush (2 s without progress) and the interpreter's teardown (~1.5 s
        # here), not after 30-75 s of retries (LangChain's default client, benchmarks/langsmith_bench.py).
        assert report["exit_s"] < 6.0, report
    assert healthy["exit_s"] < 20.0, healthy  # a healthy LangSmith gets everything that is queued

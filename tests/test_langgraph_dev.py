"""Every graph in ``langgraph.json`` served by ``langgraph dev`` (offline, a free port) and run through
``langgraph_sdk`` with a real input against the tiny policy server; bad inputs answer with what to fix."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from env_tools.sandbox import seed_tasks

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dev_server(tiny_policy_url, tmp_path_factory):
    from trainers.serving import free_port

    port = free_port()
    log_path = tmp_path_factory.mktemp("dev") / "dev.log"
    env = {**os.environ, "EVOLVER_POLICY_BASE_URL": tiny_policy_url, "EVOLVER_POLICY_MODEL": "tiny-policy",
           "LIBRARY_BASE_URL": tiny_policy_url, "LIBRARY_MODEL": "tiny-policy", "EVOLVER_POLICY_MAX_TOKENS": "64",
           "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false"}  # fmt: skip
    cli = os.path.join(os.path.dirname(sys.executable), "langgraph")
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [cli, "dev", "--host", "127.0.0.1", "--port", str(port), "--no-browser", "--no-reload"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                try:
                    if httpx.get(base + "/ok", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.5)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def _run(base: str, graph: str, payload: dict) -> tuple[str, dict]:
    """(status, output) of one run of ``graph`` on ``payload`` through langgraph_sdk."""
    from langgraph_sdk import get_client

    async def go() -> tuple[str, dict]:
        client = get_client(url=base)
        thread = await client.threads.create()
        run = await client.runs.create(thread["thread_id"], graph, input=payload)
        await client.runs.join(thread["thread_id"], run["run_id"])
        status = (await client.runs.get(thread["thread_id"], run["run_id"]))["status"]
        state = await client.threads.get_state(thread["thread_id"])
        return status, state["values"] or {}

    return asyncio.run(go())


@pytest.mark.slow
def test_every_served_graph_runs_through_the_sdk(dev_server):
    from langgraph_sdk import get_client

    served = json.loads((ROOT / "langgraph.json").read_text())["graphs"]
    assistants = asyncio.run(get_client(url=dev_server).assistants.search())
    assert {a["graph_id"] for a in assistants} >= set(served)

    # agent: a task end to end, trajectory with token ids and node names
    task = seed_tasks("test")[0]
    status, out = _run(dev_server, "agent", {"task_id": task.id, "env": "sandbox"})
    assert status == "success", out
    assert out["task"]["id"] == task.id and isinstance(out["reward"], float)
    step = out["trajectory"]["steps"][0]
    assert step["node"] == "agent" and step["transition"]["completion_ids"]

    # attribute: that trajectory in, one label per step out
    status, labelled = _run(dev_server, "attribute", {"trajectory": out["trajectory"]})
    assert status == "success"
    assert len(labelled["attribution"]["labels"]) == len(out["trajectory"]["steps"])

    # extract_experience: rollouts of one task in, experiences out (the rules extractor, offline)
    status, extracted = _run(dev_server, "extract_experience", {"trajectories": [labelled["labeled"]] * 2})
    assert status == "success" and isinstance(extracted["experiences"], list)
    assert all(e["source_task_ids"] == [task.id] for e in extracted["experiences"])

    # explore: self-questioning on one sandbox world (schema explorer, offline synthesizer), verified tasks out
    status, explored = _run(dev_server, "explore", {"env": "sandbox", "n_depth": 9, "seed": 1})
    assert status == "success", explored
    nodes = {s["node"] for s in explored["trajectory"]["steps"]}
    assert nodes == {"explore_breadth", "explore_depth"} and len(explored["trajectory"]["steps"]) == 12
    assert explored["tasks"] and explored["filters"]["candidates"] == len(explored["candidates"])
    assert all(t["id"].startswith("synthetic-") and t["reference_solution"] for t in explored["tasks"])

    # library: the drop-in example, served as its author wrote it (messages in, messages out)
    status, chat = _run(dev_server, "library", {"messages": [{"role": "user", "content": "Please lend Dune to Ana."}]})
    assert status == "success"
    assert chat["messages"][0]["content"] == "Please lend Dune to Ana." and chat["messages"][-1]["type"] == "ai"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("graph", "payload", "fix"),
    [
        ("agent", {"task_id": "no-such-task"}, "No task 'no-such-task'"),
        ("agent", {"task": {"id": "x"}}, "'task' needs at least 'id' and 'query'"),
        ("agent", {"env": "sandbox"}, 'takes {"task_id"'),
        ("attribute", {"trajectory": {"steps": []}}, "A trajectory needs ['id', 'task']"),
        ("explore", {"env": "sandbox", "seed_task_id": "nope"}, "No task 'nope' in environment 'sandbox'"),
    ],
)
def test_bad_inputs_say_what_to_fix(dev_server, graph, payload, fix):
    from langgraph_sdk import get_client

    async def go() -> dict:
        client = get_client(url=dev_server)
        thread = await client.threads.create()
        run = await client.runs.create(thread["thread_id"], graph, input=payload)
        return await client.runs.join(thread["thread_id"], run["run_id"])

    out = asyncio.run(go())
    assert out["__error__"]["error"] == "ConfigError" and fix in out["__error__"]["message"], out

"""Any MCP server as an environment (env_tools/mcp.py), against the real FastMCP server tests/mcp_todo_server.py
over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from env_tools.mcp import McpEnvironment, McpState, parse_mcp_spec
from graphs.agent import create_agent_graph
from langgraph_evolver._serving import free_port
from langgraph_evolver.batch import run_rollouts
from langgraph_evolver.environment import environment_factory, load_environment
from langgraph_evolver.errors import ConfigError, EnvironmentFailure
from langgraph_evolver.testing import ReferencePolicy
from langgraph_evolver.types import Action, Task, ToolCall

SERVER = Path(__file__).with_name("mcp_todo_server.py")
STDIO = f"mcp:{sys.executable} {SERVER}"
TASK = Task(id="t", query="Manage my to-dos.", metadata={"answer": "ok"})


def call(env: McpEnvironment, name: str, **arguments: object):
    return env.step(Action(tool_calls=(ToolCall(name=name, arguments=arguments),))).observations[0]


async def acall(env: McpEnvironment, name: str, **arguments: object):
    return (await env.astep(Action(tool_calls=(ToolCall(name=name, arguments=arguments),)))).observations[0]


def test_spec_parsing_and_bad_options():
    connection, options = parse_mcp_spec("mcp:python srv.py --db 'a b'#tasks=t.jsonl&timeout=5")
    # a bare python is this interpreter, not the first python on PATH (issue 38)
    assert connection == {"transport": "stdio", "command": sys.executable, "args": ["srv.py", "--db", "a b"]}
    assert parse_mcp_spec("mcp:python3 srv.py")[0]["command"] == sys.executable
    assert parse_mcp_spec("mcp:python3.11 srv.py")[0]["command"] == "python3.11"  # a named one is left alone
    assert options == {"tasks": "t.jsonl", "timeout": "5"}
    assert parse_mcp_spec("mcp:http://127.0.0.1:9/mcp")[0] == {"transport": "streamable_http",
                                                                "url": "http://127.0.0.1:9/mcp"}  # fmt: skip
    with pytest.raises(ConfigError, match="timeuot.*valid: tasks"):
        load_environment("mcp:python srv.py#timeuot=5")
    with pytest.raises(ConfigError, match="names no server"):
        load_environment("mcp:")


def test_stdio_schemas_errors_timeout_and_crash():
    env = load_environment(STDIO + "#timeout=1")
    assert isinstance(env, McpEnvironment)
    obs = env.reset(TASK)
    tools = {t["function"]["name"]: t["function"] for t in obs.tools}
    assert "reset" not in tools  # the declared reset tool is the environment's, not the agent's
    add = tools["add_todo"]["parameters"]
    assert add["properties"]["priority"]["enum"] == ["low", "normal", "high"]  # enums, arrays, nested objects
    assert add["properties"]["tags"]["anyOf"][0] == {"items": {"type": "string"}, "type": "array"}
    assert add["$defs"]["Due"]["properties"]["date"]["type"] == "string"
    assert env.state.connection.tools["add_todo"].args_schema == add  # the server's inputSchema, unchanged

    first = call(env, "add_todo", title="milk", tags=["shop"], due={"date": "2026-05-01"})
    assert not first.is_error and json.loads(first.content)["id"] == 1
    missing = call(env, "complete_todo", id=7)  # an isError result
    assert missing.is_error and missing.content.startswith("Error:") and "no to-do with id 7" in missing.content
    bad = call(env, "add_todo", title="x", colour="red")
    assert bad.is_error and "unknown argument" in bad.content

    started = time.perf_counter()
    hung = call(env, "hang")
    assert hung.is_error and "did not answer within 1 s" in hung.content
    assert time.perf_counter() - started < 5
    assert "milk" in call(env, "list_todos").content  # the session survives a timed-out call

    crashed = call(env, "crash")
    assert crashed.is_error and "died during crash" in crashed.content
    after = call(env, "list_todos")
    assert after.is_error and "is gone" in after.content
    with pytest.raises(EnvironmentFailure, match="is gone"):
        env.state.call("list_todos")  # what a checker reading the end state gets
    env.close()


def test_a_server_that_does_not_start_is_an_environment_failure(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("raise SystemExit(2)\n")
    env = load_environment(f"mcp:{sys.executable} {broken}#startup_timeout=10")
    started = time.perf_counter()
    with pytest.raises(EnvironmentFailure, match="MCP server"):
        env.reset(TASK)
    assert time.perf_counter() - started < 10
    env.close()


async def test_eight_concurrent_stdio_instances_are_isolated():
    make = environment_factory(STDIO)
    envs = [make(TASK) for _ in range(8)]
    await asyncio.gather(*(env.areset(TASK) for env in envs))
    for i, env in enumerate(envs):
        await acall(env, "add_todo", title=f"item-{i}")
    listed = await asyncio.gather(*(acall(env, "list_todos", status="all") for env in envs))
    for i, obs in enumerate(listed):
        assert [item["title"] for item in json.loads(f"[{obs.content}]".replace("}\n{", "},{"))] == [f"item-{i}"]
    await asyncio.gather(*(env.aclose() for env in envs))


@pytest.fixture(scope="module")
def http_url():
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), "--http", str(port)])
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


async def test_streamable_http_sessions_are_isolated_and_reset_applies_initial_state(http_url):
    make = environment_factory(f"mcp:{http_url}")
    a, b = make(TASK), make(TASK)
    seeded = Task(id="s", query="q", env_params={"items": ["bread"]}, metadata={"answer": "ok"})
    await asyncio.gather(a.areset(TASK), b.areset(seeded))
    assert not (await acall(a, "add_todo", title="milk", priority="high")).is_error
    assert json.loads((await acall(a, "list_todos", min_priority="high")).content)["title"] == "milk"
    assert json.loads((await acall(b, "list_todos")).content)["title"] == "bread"  # b never sees a's milk
    await a.areset(seeded)  # a later episode of the same instance: the reset tool, same session
    assert json.loads((await acall(a, "list_todos", status="all")).content)["title"] == "bread"
    await asyncio.gather(a.aclose(), b.aclose())


def test_shared_isolation_refuses_initial_state(http_url):
    env = load_environment(f"mcp:{http_url}", isolation="shared")
    seeded = Task(id="s", query="q", env_params={"items": ["bread"]}, metadata={"answer": "ok"})
    with pytest.raises(EnvironmentFailure, match="stateless"):
        env.reset(seeded)
    env.close()


def checker_milk_done(task: Task, state: McpState, final_answer: str | None, calls: list[ToolCall]) -> float:
    return float('"done": true' in state.call("list_todos", status="done"))


def test_reference_agent_rollouts_on_jsonl_tasks_score_by_replay_and_checker(tmp_path):
    rows = [
        {"id": "buy", "instruction": "Add 'milk' with high priority and mark it done.",
         "initial_state": {"items": ["bread"]},
         "reference": [{"name": "add_todo", "arguments": {"title": "milk", "priority": "high"}},
                       {"name": "complete_todo", "arguments": {"id": 2}}],
         "check": [{"name": "list_todos", "arguments": {"status": "all"}}]},
        {"id": "fn", "query": "Add milk and complete it.", "checker": f"{__name__}:checker_milk_done",
         "reference": [{"name": "add_todo", "arguments": {"title": "milk"}},
                       {"name": "complete_todo", "arguments": {"id": 1}}]},
        {"id": "eggs", "instruction": "Add eggs.", "reference": [{"name": "add_todo", "arguments": {"title": "eggs"}}],
         "check": [{"name": "list_todos", "arguments": {}}]},
        {"id": "unscored", "instruction": "Add x.", "reference": [{"name": "add_todo", "arguments": {"title": "x"}}]},
    ]  # fmt: skip
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    name = f"{STDIO}#tasks={path}"
    tasks = load_environment(name).list_tasks("train")
    assert [t.id for t in tasks] == ["buy", "fn", "eggs", "unscored"] and all(t.env == name for t in tasks)
    graph = create_agent_graph(ReferencePolicy(tasks))
    trajectories = run_rollouts(graph, tasks, env_factory=environment_factory(name))
    by_id = {t.task.id: t for t in trajectories}
    assert all(not t.errors for t in trajectories), [t.errors for t in trajectories]
    assert by_id["buy"].reward == 1.0 and by_id["buy"].metadata["evaluation"] == {"checks": 1, "matched": 1}
    assert by_id["fn"].reward == 1.0
    assert by_id["eggs"].reward == 1.0  # the reference agent adds eggs, as the replay does
    assert by_id["unscored"].reward == 0.0
    assert "no checker" in by_id["unscored"].metadata["evaluation"]["warning"]

    env = load_environment(name)  # an agent that does something else than the reference fails the check
    env.reset(tasks[0])
    call(env, "add_todo", title="milk")
    env.step(Action(content="done"))
    assert env.evaluate() == 0.0 and env.last_evaluation == {"checks": 1, "matched": 0}
    env.close()


def test_a_task_s_reference_replay_is_remembered_across_its_episodes(tmp_path):
    """Scoring a synthesized task replays its reference on a fresh server (about a second of CPU); its episodes
    (k samples, every model evaluated, every GRPO group) now share one replay, and score as they did."""
    from env_tools.mcp import REPLAYS

    add = ToolCall(name="add_todo", arguments={"title": "milk", "priority": "high"})
    task = Task(id="syn", env=STDIO, query="Add milk, high priority.", reference_solution=(add,), source="synthetic",
                env_params={"items": ["bread"]})  # fmt: skip
    other = Task(id="syn2", env=STDIO, query=task.query, reference_solution=(add,), source="synthetic",  # a new state
                 env_params={"items": ["eggs"]})  # fmt: skip
    written = Task(id="w", env=STDIO, query="Add milk.", reference_solution=(add,),
                   metadata={"check": [{"name": "list_todos", "arguments": {"status": "all"}}]})  # fmt: skip

    def episode(t: Task, *calls: ToolCall) -> float:
        env = load_environment(STDIO)
        env.reset(t)
        for c in calls:
            env.step(Action(tool_calls=(c,)))
        env.step(Action(content="done"))
        try:
            return env.evaluate()
        finally:
            env.close()

    REPLAYS.clear()
    wrong = ToolCall(name="add_todo", arguments={"title": "milk"})
    first = [episode(task, add), episode(task, wrong), episode(task, add)]
    assert first == [1.0, 0.0, 1.0]
    assert (REPLAYS.misses, REPLAYS.hits) == (1, 2)  # one server started for the replay, not three
    assert episode(other, add) == 1.0 and REPLAYS.misses == 2
    assert [episode(written, add), episode(written, wrong)] == [1.0, 0.0]  # check calls read once, after replay
    assert REPLAYS.misses == 3 and REPLAYS.hits == 3
    REPLAYS.clear()
    assert [episode(task, add), episode(task, wrong)] == [1.0, 0.0] and REPLAYS.misses == 1  # as without the memo

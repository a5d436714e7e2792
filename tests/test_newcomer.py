"""Issue 28: a LangGraph user's first hour, with agents and environments written here (not the sandbox).

The environment a command names is the one that runs (its checker is the one applied), file paths name
agents as ``langgraph.json`` does, a graph compiled with a checkpointer runs, and a tool call that does not
parse is never handed to the checker as the final answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage

from langgraph_evolver import run_rollouts
from langgraph_evolver.testing import ScriptedChatModel
from langgraph_evolver.types import Task

ROOT = Path(__file__).resolve().parent.parent

ENV_PY = '''
from langchain_core.tools import tool

from env_tools.langchain_tools import ToolsEnvironment
from langgraph_evolver.types import Task, ToolCall


def permit_tools(task):
    state = {"permits": []}

    @tool
    def issue_permit(resident: str, zone: str) -> str:
        """Issue a parking permit for a resident in a zone."""
        state["permits"].append((resident, zone))
        return "issued"

    return state, [issue_permit]


def always(task, state, final_answer, calls):
    return 0.77


def make_env(**options):
    label = options.pop("label", "")
    tasks = [Task(id=f"permit-{i}", env=label, query=f"Give resident {i} a permit for zone Z{i}.") for i in range(3)]
    return ToolsEnvironment(permit_tools, tasks={"train": tasks, "test": tasks}, checker=always, **options)


def make_env_naming_the_sandbox(**options):
    return make_env(label="sandbox", **options)


def make_env_with_sandbox_tasks(**options):
    from env_tools.sandbox import seed_tasks

    tasks = seed_tasks("test")[:3]
    return ToolsEnvironment(permit_tools, tasks={"train": tasks, "test": tasks}, checker=always, **options)


def make_env_with_a_label(**options):
    return make_env(label="parking", **options)


def issued(task, state, final_answer, calls):
    return float(tuple(task.metadata["permit"]) in state["permits"])


def misread(task, state, final_answer, calls):  # a checker bug: compares the zone with the resident
    return float((task.metadata["permit"][1], task.metadata["permit"][0]) in state["permits"])


def make_checked_env(checker=issued, **options):
    call = lambda i: ToolCall(name="issue_permit", arguments={"resident": str(i), "zone": f"Z{i}"})  # noqa: E731
    tasks = [Task(id=f"permit-{i}", query=f"Give resident {i} a permit for zone Z{i}.", reference_solution=(call(i),),
                  metadata={"permit": [str(i), f"Z{i}"]}) for i in range(3)]
    return ToolsEnvironment(permit_tools, tasks={"train": tasks, "test": tasks}, checker=checker, **options)


def make_misread_env(**options):
    return make_checked_env(checker=misread, **options)
'''

AGENT_PY = """
from langchain.agents import create_agent


def build(model, tools):
    return create_agent(model, tools, system_prompt="You issue parking permits.")
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A new user's project: ``permits/env.py`` (tasks, tools, checker) and ``permits/agent.py``."""
    root = tmp_path_factory.mktemp("newcomer")
    (root / "permits").mkdir()
    (root / "permits" / "__init__.py").write_text("")
    (root / "permits" / "env.py").write_text(textwrap.dedent(ENV_PY))
    (root / "permits" / "agent.py").write_text(textwrap.dedent(AGENT_PY))
    return root


def evaluate(project: Path, url: str, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-m", "trainers.evaluate", "--base-url", url, "--k", "1", "--max-turns", "2",
                           "--max-tokens", "24", "--quiet", "--output-dir", str(project / "out"), *flags],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip


def test_the_environment_named_on_the_command_line_is_the_one_that_scores(project, tiny_policy_url):
    # tasks labelled with a name no environment is registered under: the named factory runs and its checker scores
    done = evaluate(project, tiny_policy_url, "--env", "permits.env:make_env_with_a_label", "--agent",
                    "./permits/agent.py:build")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["all"]["avg@1"] == pytest.approx(0.77) and figures["failed"] == 0, figures
    # tasks labelled "sandbox" (Task's default): a label too, the named factory still runs and scores them
    done = evaluate(project, tiny_policy_url, "--env", "permits.env:make_env_naming_the_sandbox", "--agent",
                    "./permits/agent.py:build")  # fmt: skip
    assert done.returncode == 0 and json.loads(done.stdout.strip().splitlines()[-1])["all"]["avg@1"] == 0.77
    # tasks that belong to another environment (sandbox tasks given to the user's factory): refused up front
    done = evaluate(project, tiny_policy_url, "--env", "permits.env:make_env_with_sandbox_tasks", "--agent",
                    "./permits/agent.py:build")  # fmt: skip
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert "is a task of environment 'sandbox' (SandboxEnvironment)" in last and "ToolsEnvironment" in last, last


def test_an_agent_file_that_does_not_exist_is_a_clear_error(project, tiny_policy_url):
    done = evaluate(project, tiny_policy_url, "--env", "permits.env:make_env", "--agent", "./permits/agnt.py:build")
    assert done.returncode == 2 and "no file './permits/agnt.py'" in done.stderr, done.stderr[-1500:]


def test_a_graph_compiled_with_a_checkpointer_gets_a_thread_per_rollout(project):
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    sys.path.insert(0, str(project))
    try:
        from permits.env import make_env
    finally:
        sys.path.remove(str(project))
    env = make_env()
    tasks = env.list_tasks("train")[:2]
    call = AIMessage("", tool_calls=[{"name": "issue_permit", "args": {"resident": "1", "zone": "Z1"}, "id": "c"}])
    policy = ScriptedChatModel([call, AIMessage("Done.")])

    def build(model, tools):  # the graph `langgraph dev` would also serve, compiled with its checkpointer
        return create_agent(model, tools, checkpointer=InMemorySaver())

    trajs = run_rollouts(build, tasks, n=2, policy=policy, env_factory=lambda task: make_env(), concurrency=1)
    assert [t.errors for t in trajs] == [()] * 4 and all(t.reward == pytest.approx(0.77) for t in trajs)
    assert len({t.id for t in trajs}) == 4  # each its own thread: no rollout sees another's messages
    assert all(len(t.steps) == 2 for t in trajs)


def test_an_unparseable_tool_call_is_not_handed_to_the_checker_as_an_answer():
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    from env_tools.langchain_tools import ToolsEnvironment

    seen: list = []

    @tool
    def lookup(item: str) -> str:
        """Look an item up."""
        return "7"

    def checker(task, state, final_answer, calls):
        seen.append(final_answer)
        return 0.7 if final_answer and any(c.isdigit() for c in final_answer) else 0.0

    task = Task(id="q-1", query="How many widgets?")
    make = lambda task: ToolsEnvironment(lambda t: (None, [lookup]), tasks={"train": [task]}, checker=checker)  # noqa: E731
    broken = AIMessage('<tool_call>{"name": "lookup", "arguments": {"item": "widget 42"}</tool_call>')  # a } short
    (traj,) = run_rollouts(lambda model, tools: create_agent(model, tools), [task],
                           policy=ScriptedChatModel([broken]), env_factory=make)  # fmt: skip
    assert seen == [None] and traj.reward == 0.0  # the raw text never reached the checker as an answer
    # the step carries its error, so a policy step pays the malformed-call penalty (trainers.grpo_trainer)
    assert traj.finish_reason == "malformed_call" and traj.steps[-1].error == "unparseable tool call"


def test_too_few_tasks_for_one_step_is_refused_before_anything_runs(project, capsys):
    from trainers.grpo import cli

    with pytest.raises(SystemExit) as stopped:  # the quickstart takes 8 tasks a step; this environment has 3
        cli(["--config", str(ROOT / "examples" / "quickstart.yaml"), "--env_id", f"{project}/permits/env.py:make_env",
             "--output_dir", str(project / "run-too-few")])  # fmt: skip
    assert stopped.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "3 training rows (tasks after level_weights) but one generation takes 8 tasks" in last, last
    assert not (project / "run-too-few" / "final").exists()


ROUTED_AGENT_PY = """
import os

from langchain.agents import create_agent
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph

# a second model that is not the policy, created once at import as users do (its async client is bound to the
# event loop of its first call)
router = ChatOpenAI(model="tiny-policy", base_url=os.environ["ROUTER_URL"], api_key="unused", max_tokens=4,
                    max_retries=0)


def build(model, tools):
    worker = create_agent(model, tools)

    async def route(state: MessagesState) -> dict:
        await router.ainvoke(state["messages"][-1:])
        return {}

    graph = StateGraph(MessagesState)
    graph.add_node("route", route)
    graph.add_node("work", worker)
    graph.add_edge(START, "route")
    graph.add_edge("route", "work")
    graph.add_edge("work", END)
    return graph.compile()
"""


@pytest.mark.timeout(600)
def test_another_model_in_the_graph_survives_the_evaluation_before_training(project, monkeypatch):
    """The evaluation before training and the training rollouts run on one event loop: a router client bound to
    the first loop it was used on kept failing with 'Event loop is closed' once asyncio.run had closed it."""
    from tests.conftest import LORA, TINY_POLICY
    from trainers.grpo import cli
    from trainers.policy_server import create_app, serve_in_background

    (project / "permits" / "routed.py").write_text(ROUTED_AGENT_PY)
    out = project / "run-routed"
    with serve_in_background(create_app(str(TINY_POLICY), served_model_name="tiny-policy", seed=0)) as url:
        monkeypatch.setenv("ROUTER_URL", f"{url}/v1")
        figures = cli(["--config", str(ROOT / "examples" / "quickstart.yaml"), *LORA,
                       "--env_id", f"{project}/permits/env.py:make_env",
                       "--agent", f"{project}/permits/routed.py:build",
                       "--policy_base_url", f"{url}/v1", "--policy_model", "tiny-policy", "--output_dir", str(out),
                       "--max_steps", "1", "--per_device_train_batch_size", "4", "--num_generations", "2",
                       "--gradient_accumulation_steps", "1", "--max_turns", "2", "--eval_split", "test",
                       "--eval_limit", "2", "--eval_k", "1", "--eval_after", "false",
                       "--save_strategy", "no"])  # fmt: skip
    assert figures["steps"] == 1
    before = [json.loads(line) for line in (out / "eval_before" / "trajectories.jsonl").read_text().splitlines()]
    trained = [json.loads(line) for line in (out / "trajectories" / "step_00000.jsonl").read_text().splitlines()]
    for t in before + trained:
        assert not any("Event loop is closed" in e for e in t["errors"]), t["errors"]
        assert any(not s["policy"] for s in t["steps"]), "the router's call is recorded, never trained"


def test_the_reference_policy_checks_the_plumbing_on_the_users_own_domain(project):
    """No endpoint: a scripted model plays each task's reference solution through the user's graph."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

    def run(factory: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "trainers.evaluate", "--reference_policy", "--env", factory,
                               "--agent", "./permits/agent.py:build", "--k", "1", "--quiet",
                               "--output_dir", str(project / "out-ref")],
                              cwd=project, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip

    done = run("permits.env:make_checked_env")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "plumbing: 3 of 3 tool calls captured with their observation; every task scored 1.0" in done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["all"]["avg@1"] == 1.0
    done = run("permits.env:make_misread_env")  # the checker bug shows as a reference that scores 0
    assert "NOT OK" in done.stderr and "the reference solution scored below 1.0 on" in done.stderr, done.stderr[-800:]


def test_every_tool_call_inside_a_subgraph_gets_its_observation():
    """A supervisor node awaits a compiled create_agent subgraph and returns only its last message: the tool
    results (and ToolNode's error for an unknown tool) live only in the subgraph's state, never in the final one."""
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph

    from langgraph_evolver import TrajectoryRecorder

    @tool
    def get_balance() -> str:
        """The account balance."""
        return "230"

    script = [AIMessage("", tool_calls=[{"name": "get_balance", "args": {}, "id": "a"}]),
              AIMessage("", tool_calls=[{"name": "get_blance", "args": {}, "id": "b"}]), AIMessage("230")]  # fmt: skip
    worker = create_agent(ScriptedChatModel(script), [get_balance])

    async def supervise(state: MessagesState) -> dict:
        out = await worker.ainvoke({"messages": state["messages"]})
        return {"messages": [out["messages"][-1]]}

    graph = StateGraph(MessagesState)
    graph.add_node("supervisor", supervise)
    graph.add_edge(START, "supervisor")
    graph.add_edge("supervisor", END)
    recorder = TrajectoryRecorder()
    import asyncio

    state = asyncio.run(graph.compile().ainvoke({"messages": [("user", "balance?")]}, {"callbacks": [recorder]}))
    traj = recorder.trajectory(Task(id="t", query="balance?"), final_state=state)
    first, second = traj.steps[0].observations, traj.steps[1].observations
    assert [(o.name, o.content, o.is_error) for o in first] == [("get_balance", "230", False)]
    assert len(second) == 1 and second[0].is_error and "get_blance is not a valid tool" in second[0].content


def test_packaged_checkpoints_resolve_from_any_directory(tmp_path, monkeypatch):
    from trainers.paths import PROJECT_ROOT, resolve_packaged

    monkeypatch.chdir(tmp_path)
    assert resolve_packaged("checkpoints/tiny-policy") == PROJECT_ROOT / "checkpoints" / "tiny-policy"
    (tmp_path / "checkpoints" / "tiny-policy").mkdir(parents=True)  # a user's own copy here wins
    assert resolve_packaged("checkpoints/tiny-policy") == Path("checkpoints/tiny-policy")
    assert resolve_packaged("nowhere/model") == Path("nowhere/model")  # missing: the caller says so

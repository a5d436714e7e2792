"""Issue 25: a judge as the outcome scorer of MCP tasks with no checker, and a drop-in ``create_agent``
agent whose tools come from ``MultiServerMCPClient`` (examples/mcp_agent.py) trained on the same MCP server.

The judge's parsing is tested in tests/test_questioning_llm.py; here a scripted judge answering a fixed
verdict checks the wiring (what the judge is shown, the reward) and the marking in the trajectory."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage

from env_tools.mcp import McpEnvironment
from graphs.agent import create_agent_graph
from langgraph_evolver import EvolverMiddleware
from langgraph_evolver.batch import run_rollouts
from langgraph_evolver.environment import environment_factory, load_environment
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.testing import ReferencePolicy, ScriptedChatModel
from langgraph_evolver.types import Action, Task

SERVER = Path(__file__).with_name("mcp_todo_server.py")
STDIO = f"mcp:{sys.executable} {SERVER}"
ADD_EGGS = {"name": "add_todo", "arguments": {"title": "eggs", "priority": "high"}}


class RecordingJudge(ScriptedChatModel):
    """A judge model answering a fixed verdict, keeping the prompts it was shown."""

    prompts: list = []

    def _generate(self, messages, stop=None, run_manager=None, **kw):  # type: ignore[no-untyped-def]
        self.prompts.append(messages[-1].text)
        return super()._generate(messages, stop, run_manager, **kw)


def write_tasks(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_a_task_without_checker_is_scored_by_the_judge_and_marked_judged(tmp_path):
    path = write_tasks(tmp_path, [
        {"id": "eggs", "instruction": "Add eggs with high priority.", "reference": [ADD_EGGS]},
        {"id": "checked", "instruction": "Add eggs.", "reference": [ADD_EGGS], "answer": "Done"},
    ])  # fmt: skip
    judge = RecordingJudge([AIMessage("ACHIEVED: yes\nSCORE: 90\nREASON: eggs were added")])
    make = environment_factory(STDIO, tasks=str(path), judge=judge)
    tasks = make(Task(id="x", query="q")).list_tasks("train")
    trajectories = run_rollouts(create_agent_graph(ReferencePolicy(tasks)), tasks, env_factory=make)
    by_id = {t.task.id: t for t in trajectories}
    assert all(not t.errors for t in trajectories), [t.errors for t in trajectories]

    judged = by_id["eggs"]
    assert judged.reward == 0.9
    assert judged.metadata["evaluation"] == {"scored_by": "judge", "judge": "scripted", "score": 90, "achieved": True,
                                             "reason": "eggs were added", "reward": 0.9}  # fmt: skip
    (prompt,) = judge.prompts  # one episode judged: the task with an answer is scored by it, not by the judge
    assert "Add eggs with high priority." in prompt
    assert prompt.count("add_todo") >= 2  # the reference and the call the episode made (with its result)
    assert '"title": "eggs"' in prompt and '"done": false' in prompt
    assert by_id["checked"].reward == 1.0 and "evaluation" not in by_id["checked"].metadata


def test_a_dead_judge_scores_nothing_and_says_what_to_fix(tmp_path):
    path = write_tasks(tmp_path, [{"id": "eggs", "instruction": "Add eggs.", "reference": [ADD_EGGS]}])
    dead = ScriptedChatModel([AIMessage("I cannot judge this.")])  # never a readable verdict
    make = environment_factory(STDIO, tasks=str(path), judge=dead)
    tasks = make(Task(id="x", query="q")).list_tasks("train")
    (traj,) = run_rollouts(create_agent_graph(ReferencePolicy(tasks)), tasks, env_factory=make)
    assert traj.reward is None
    assert any("judge scripted gave no score" in e and "judge=" in e for e in traj.errors), traj.errors
    evaluation = traj.metadata["evaluation"]
    assert evaluation["scored_by"] == "judge" and "no ACHIEVED/SCORE" in evaluation["error"]


def test_judge_objects_and_specs(tmp_path):
    path = write_tasks(tmp_path, [{"id": "eggs", "instruction": "Add eggs.", "reference": [ADD_EGGS]}])

    class Counting:
        name = "counting"

        async def areward(self, task, state, trajectory):  # type: ignore[no-untyped-def]
            return 0.5 if [s.action.tool_calls[0].name for s in trajectory.steps[:-1]] == ["add_todo"] else 0.0

    env = load_environment(STDIO, tasks=str(path), judge=Counting())
    assert isinstance(env, McpEnvironment)
    task = env.list_tasks("train")[0]
    env.reset(task)
    env.step(Action(tool_calls=(task.reference_solution[0],)))
    env.step(Action(content="Added."))
    assert env.evaluate() == 0.5
    assert env.last_evaluation == {"scored_by": "judge", "judge": "counting", "reward": 0.5}
    env.close()

    with pytest.raises(ConfigError, match="judge_base_url"):
        load_environment(f"{STDIO}#judge=policy:tiny")
    spec = load_environment(f"{STDIO}#judge=policy:tiny&judge_base_url=http://127.0.0.1:9/v1")
    assert spec.judge_id == "policy:tiny"
    with pytest.raises(ConfigError, match="judge must be"):
        load_environment(STDIO, judge=42)


# -- a drop-in agent that already uses MCP -------------------------------------------------------------------------


def test_the_mcp_example_agent_acts_on_the_rollouts_own_server(tmp_path):
    from examples.mcp_agent import agent, model, tools

    assert {t.name for t in tools} >= {"add_todo", "complete_todo", "list_todos"}  # the author's own MCP tools
    path = write_tasks(tmp_path, [
        {"id": "milk", "instruction": "Add milk with high priority and mark it done.",
         "initial_state": {"items": ["bread"]},
         "reference": [{"name": "add_todo", "arguments": {"title": "milk", "priority": "high"}},
                       {"name": "complete_todo", "arguments": {"id": 2}}],
         "check": [{"name": "list_todos", "arguments": {"status": "all"}}]},
    ])  # fmt: skip
    name = f"{STDIO}#tasks={path}"
    tasks = load_environment(name).list_tasks("train")
    trajectories = run_rollouts(agent, tasks * 2, policy=ReferencePolicy(tasks), env_factory=environment_factory(name))
    for traj in trajectories:
        assert not traj.errors, traj.errors
        calls = [(c.name, c.arguments) for s in traj.steps for c in s.action.tool_calls]
        assert calls == [("add_todo", {"title": "milk", "priority": "high"}), ("complete_todo", {"id": 2})]
        observations = [o.content for s in traj.steps for o in s.observations]
        assert json.loads(observations[0])["id"] == 2 and observations[1] == "done: milk"  # the seeded list
        assert traj.reward == 1.0  # the writes reached the instance the check reads
        assert traj.metadata["evaluation"] == {"checks": 1, "matched": 1}

    # without the routing, the same calls go to sessions of the agent's own client: the scored server sees nothing
    unrouted = create_agent(model, tools, middleware=[EvolverMiddleware(route_tools=False)])
    (alone,) = run_rollouts(unrouted, tasks, policy=ReferencePolicy(tasks), env_factory=environment_factory(name))
    assert alone.reward == 0.0 and alone.metadata["evaluation"] == {"checks": 1, "matched": 0}

"""The unseen-domain MCP servers (issue 43): each task file, written by hand, loads and holds >= 20 held-out
tasks of 1-4 calls; every task's reference solves it against the real server over stdio (scored 1.0 by its own
check calls or answer); and in-process, the check calls tell the reference's outcome from the opening state, and an
answer task's observations show its answer, so the checks measure the outcome."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from env_tools.mcp import load_mcp_tasks
from langgraph_evolver.environment import load_environment
from langgraph_evolver.types import Action, ToolCall

SERVERS = Path(__file__).resolve().parent.parent / "examples" / "mcp_servers"
NAMES = ["library", "shipping", "sheets", "helpdesk", "budget", "garage", "shelter", "bikeshop"]


def _spec(name: str) -> str:
    return f"mcp:{sys.executable} {SERVERS / f'{name}.py'}"


def _tasks(name: str) -> list:
    splits = load_mcp_tasks(SERVERS / f"{name}_tasks.jsonl", env=_spec(name))
    assert list(splits) == ["test"], "held-out tasks only: never trained on"
    return splits["test"]


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"transfer_server_{name}", SERVERS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", NAMES)
def test_each_task_file_holds_20_held_out_tasks_whose_checks_see_the_outcome(name):
    tasks, server = _tasks(name), _module(name)
    assert len(tasks) >= 20 and len({t.id for t in tasks}) == len(tasks)
    assert {len(t.reference_solution) for t in tasks} == {1, 2, 3, 4}  # mixed difficulty

    def play(calls) -> list[str]:
        server.reset()
        return [json.dumps(getattr(server, c.name)(**c.arguments), default=str) for c in calls]

    def read(checks) -> list:
        out = []
        for n, a in checks:
            try:
                out.append(getattr(server, n)(**a))
            except ValueError as e:  # a check call that fails (no such shipment yet) is a mismatch
                out.append(f"error: {e}")
        return out

    for task in tasks:
        assert ("check" in task.metadata) != ("answer" in task.metadata), task.id  # scored one way
        observations = play(task.reference_solution)  # raises if a reference call fails
        if "check" in task.metadata:
            checks = [(c["name"], c.get("arguments", {})) for c in task.metadata["check"]]
            done = read(checks)
            play([])  # an agent that does nothing must not pass
            assert read(checks) != done, f"{task.id}: its checks see no change"
        elif not task.metadata.get("derived"):  # a derived answer is computed from what the calls show
            assert any(str(task.metadata["answer"]) in o for o in observations), task.id


@pytest.mark.slow  # one server process per check-scored task (the reference's replay): 12-40 s a server
@pytest.mark.parametrize("name", NAMES)
def test_every_reference_scores_1_against_the_real_server(name):
    env = load_environment(_spec(name))
    try:
        for task in _tasks(name):
            env.reset(task)
            for i, call in enumerate(task.reference_solution):
                action = Action(tool_calls=(ToolCall(name=call.name, arguments=call.arguments, id=f"c{i}"),))
                observation = env.step(action).observations[0]
                assert not observation.is_error, (task.id, call, observation.content)
            env.step(Action(content=str(task.metadata.get("answer", "Done."))))
            assert env.evaluate() == 1.0, (task.id, env.last_evaluation)
        assert "reset" not in env.tools  # the reset tool is the harness's, hidden from the agent
    finally:
        env.close()

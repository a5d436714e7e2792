"""Self-questioning on an MCP server the project has never seen (issue 25): the schema explorer must reach
the server's tools even when some of them time out or kill the server (tests/mcp_todo_server.py has both)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from langgraph_evolver.environment import load_environment
from langgraph_evolver.questioning.explore import exploration_task, explore, unsafe_tools
from langgraph_evolver.types import Trajectory, read_jsonl

SERVER = Path(__file__).with_name("mcp_todo_server.py")
NAME = f"mcp:{sys.executable} {SERVER}#timeout=1"


def test_the_explorer_leaves_out_tools_that_hang_or_kill_the_server():
    avoid: set[str] = set()
    trajectories = []
    for seed in range(3):  # seed 0 calls crash at its second call, then hang (the server is gone by then)
        env = load_environment(NAME)
        try:
            trajectories.append(explore(env, exploration_task(None, env=NAME, seed=seed), seed=seed, avoid=avoid))
        finally:
            env.close()
        avoid |= unsafe_tools(trajectories[-1])
    assert avoid == {"crash", "hang"}
    called = [[c.name for s in t.steps for c in s.action.tool_calls] for t in trajectories]
    every = [name for names in called for name in names]
    # each failed without parameters: never called again, in that exploration or a later one
    assert every.count("crash") == 1 and every.count("hang") == 1
    assert {"add_todo", "complete_todo"} <= set(called[1])
    env = load_environment(NAME)  # with both avoided, an exploration reaches the write tools and never fails at them
    try:
        last = explore(env, exploration_task(None, env=NAME, seed=3), seed=3, avoid=avoid)
    finally:
        env.close()
    names = {c.name for s in last.steps for c in s.action.tool_calls}
    assert {"add_todo", "list_todos"} <= names and not names & avoid
    assert not any("died" in e or "did not answer" in e for e in last.errors)


def _cli(*args: str, cwd: Path) -> dict:
    import json
    import subprocess

    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_questioning_stores_verified_tasks_that_evaluate_and_grpo_run_on(tmp_path):
    """The issue's chain on a server the project has never seen: questioning stores verified, state-changing
    tasks (the server's state read through its argument-free list tools), the reference replays of those
    tasks score 1.0 through trainers.evaluate, and a 2-step GRPO run trains on them with rollouts that reach
    the server."""
    root = Path(__file__).resolve().parents[1]
    env = f"mcp:{sys.executable} {SERVER}"
    store = tmp_path / "tasks.sqlite"
    summary = _cli("-m", "langgraph_evolver.questioning", "--env", env, "--n", "3", "--out", str(store),
                   "--no-progress", cwd=root)  # fmt: skip
    assert summary["stored"] == 3 and summary["state_changing"] > 0, summary
    figures = _cli("-m", "trainers.evaluate", "--env", env, "--task_store", str(store), "--k", "1",
                   "--reference_policy", "--output_dir", str(tmp_path / "eval"), cwd=root)  # fmt: skip
    assert figures["tasks"] == 3 and figures["all"]["avg@1"] == 1.0, figures
    run = tmp_path / "grpo"
    result = _cli("-m", "trainers.grpo", "--config", "examples/quickstart.yaml", "--env_id", env, "--task_store",
                  str(store), "--max_steps", "2", "--eval_before", "false", "--eval_after", "false", "--output_dir",
                  str(run), "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1",
                  "--num_generations", "4", "--max_turns", "3", "--use_peft", "true", "--sync_mode", "lora",
                  "--save_strategy", "no", cwd=root)  # fmt: skip
    assert result["steps"] == 2, result
    trajectories = [Trajectory.from_dict(d) for d in read_jsonl(run / "trajectories" / "step_00000.jsonl")]
    assert len(trajectories) == 8 and not any(t.errors for t in trajectories)
    assert {t.task.env for t in trajectories} == {env}

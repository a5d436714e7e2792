"""Self-questioning on an MCP server the project has never seen (issue 25): the schema explorer must reach
the server's tools even when some of them time out or kill the server (tests/mcp_todo_server.py has both)."""

from __future__ import annotations

import sys
from pathlib import Path

from langgraph_evolver.environment import load_environment
from langgraph_evolver.questioning.explore import exploration_task, explore, unsafe_tools

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

"""What an MCP server costs as an environment: a stdio server with one process per instance.

    python -m benchmarks.mcp_env    # ~50 s on 2 cores

Against tests/mcp_todo_server.py (FastMCP, stdio). Ends with one JSON line:

- ``create_s_median``: one instance's ``areset`` (start the server process, initialize, list tools,
  call its ``reset`` tool), one at a time (median of 8).
- ``create_s_c16``: wall time to reset 16 instances at once.
- ``rollouts_per_s_c16`` / ``rollouts_per_s_c16_replay_check``: rollouts per second of the reference agent
  (``graphs/agent.py`` with ``ReferencePolicy``, instant) through ``run_rollouts`` at 16 concurrent rollouts,
  two tool calls each; scored by the final answer, or by ``check`` calls against a replay of the reference
  (a second server process per rollout).
- ``rollouts_per_s_c16_k4_memo`` / ``..._k4_no_memo``: the same scored by ``check`` calls, 8 tasks x 4 episodes
  each as an evaluation plays them, with the replays remembered per task (``env_tools.mcp.REPLAYS``, the
  default since session 66) and with the memo off, side by side; ``k4_memo_speedup`` is their ratio.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from env_tools.mcp import REPLAYS, load_mcp_tasks
from graphs.agent import create_agent_graph
from langgraph_evolver.batch import arun_rollouts
from langgraph_evolver.environment import environment_factory
from langgraph_evolver.testing import ReferencePolicy
from langgraph_evolver.types import Task

SERVER = Path(__file__).resolve().parent.parent / "tests" / "mcp_todo_server.py"
SPEC = f"mcp:{sys.executable} {SERVER}"


def _tasks(path: Path, n: int, *, check: bool) -> list[Task]:
    rows = []
    for i in range(n):
        row = {"id": f"t{i}", "instruction": f"Add item {i} and mark it done.",
               "reference": [{"name": "add_todo", "arguments": {"title": f"item {i}"}},
                             {"name": "complete_todo", "arguments": {"id": 1}}]}  # fmt: skip
        if check:
            row["check"] = [{"name": "list_todos", "arguments": {"status": "all"}}]
        else:
            row["answer"] = "Done."
        rows.append(json.dumps(row))
    path.write_text("\n".join(rows) + "\n")
    return load_mcp_tasks(path, env=SPEC)["train"]


async def _creation() -> tuple[float, float]:
    make = environment_factory(SPEC)
    task = Task(id="b", query="q", metadata={"answer": "x"})
    times = []
    for _ in range(8):
        env = make(task)
        started = time.perf_counter()
        await env.areset(task)
        times.append(time.perf_counter() - started)
        await env.aclose()
    envs = [make(task) for _ in range(16)]
    started = time.perf_counter()
    await asyncio.gather(*(env.areset(task) for env in envs))
    c16 = time.perf_counter() - started
    await asyncio.gather(*(env.aclose() for env in envs))
    return statistics.median(times), c16


async def _rollouts(tasks: list[Task]) -> float:
    graph = create_agent_graph(ReferencePolicy(tasks))
    started = time.perf_counter()
    trajectories = await arun_rollouts(graph, tasks, concurrency=16, env_factory=environment_factory(SPEC))
    elapsed = time.perf_counter() - started
    bad = [(t.task.id, t.reward, t.errors) for t in trajectories if t.errors or t.reward != 1.0]
    if bad:
        raise SystemExit(f"rollouts did not score 1.0: {bad[:3]}")
    return len(trajectories) / elapsed


def run_benchmark(tmp: Path, rollouts: int = 32) -> dict[str, float]:
    """Measure the figures above; ``tmp`` holds the task files."""
    create_median, create_c16 = asyncio.run(_creation())
    by_answer = asyncio.run(_rollouts(_tasks(tmp / "answer.jsonl", rollouts, check=False)))
    REPLAYS.max_entries = 0  # every rollout its own replay: the figure measured before session 66
    by_check = asyncio.run(_rollouts(_tasks(tmp / "check.jsonl", rollouts, check=True)))
    k4 = [t for t in _tasks(tmp / "k4.jsonl", rollouts // 4, check=True) for _ in range(4)]
    no_memo = asyncio.run(_rollouts(k4))
    REPLAYS.max_entries = 4096
    REPLAYS.clear()
    memo = asyncio.run(_rollouts(k4))
    return {"create_s_median": round(create_median, 3), "create_s_c16": round(create_c16, 3),
            "rollouts_per_s_c16": round(by_answer, 2), "rollouts_per_s_c16_replay_check": round(by_check, 2),
            "rollouts_per_s_c16_k4_no_memo": round(no_memo, 2), "rollouts_per_s_c16_k4_memo": round(memo, 2),
            "k4_memo_speedup": round(memo / no_memo, 2), "rollouts": rollouts}  # fmt: skip


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run_benchmark(Path(tmp))))

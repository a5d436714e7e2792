"""Rollout-path speed: environment, framework overhead, HTTP service, policy-server batching.

    python benchmarks/rollouts.py            # ~45 s on 2 cores
    python benchmarks/rollouts.py --quick    # ~25 s

Ends with one JSON line:

- ``env_steps_per_s``: in-process sandbox tool calls per second on one core (reference calls
  of the seed tasks, resets excluded; ``env_resets_per_s`` reports those).
- ``overhead_ms_per_step_c64``: wall time per agent step (LLM call + tool execution + state
  update) of 64 concurrent rollouts through ``graphs/agent.py`` with an instant scripted policy
  (``ReferencePolicy``) and in-process environments: the framework's own cost per step.
- ``rollouts_per_s_c64_http``: the same rollouts with every environment behind the HTTP service
  (``python -m env_tools.server`` in its own process).
- ``policy_server_batch_speedup``: completion tokens/s of the CPU policy server with 32
  concurrent requests over 32 sequential ones, on the tiny policy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from env_tools.sandbox import SandboxEnvironment, generate_tasks  # noqa: E402
from langgraph_evolver.types import Action  # noqa: E402


def bench_env(seconds: float) -> dict[str, float]:
    tasks = generate_tasks("train", 300)
    env = SandboxEnvironment()
    steps = resets = 0
    step_time = reset_time = 0.0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for task in tasks:
            t0 = time.perf_counter()
            env.reset(task)
            t1 = time.perf_counter()
            for call in task.reference_solution:
                env.step(Action(tool_calls=(call,)))
            t2 = time.perf_counter()
            reset_time += t1 - t0
            step_time += t2 - t1
            resets += 1
            steps += len(task.reference_solution)
    return {"env_steps_per_s": round(steps / step_time), "env_resets_per_s": round(resets / reset_time)}


def unique_tasks(n: int):
    seen, out = set(), []
    for t in generate_tasks("train", n * 3):
        if t.query not in seen:
            seen.add(t.query)
            out.append(t)
    return out[:n]


async def _rollouts(tasks, env_factory=None) -> tuple[float, int, float]:
    from graphs.agent import create_agent_graph
    from langgraph_evolver.rollout import arun_rollouts
    from langgraph_evolver.testing import ReferencePolicy

    graph = create_agent_graph(ReferencePolicy(tasks))
    t0 = time.perf_counter()
    trajs = await arun_rollouts(graph, tasks, n=1, concurrency=64, env_factory=env_factory)
    wall = time.perf_counter() - t0
    steps = sum(len(t.steps) for t in trajs)
    mean_reward = sum(t.reward or 0.0 for t in trajs) / len(trajs)
    return wall, steps, mean_reward


def bench_overhead(n: int) -> dict[str, float]:
    tasks = unique_tasks(n)
    asyncio.run(_rollouts(tasks[:64]))  # warm up imports and caches
    wall, steps, reward = asyncio.run(_rollouts(tasks))
    assert reward == 1.0, f"the scripted policy must solve every task, got mean reward {reward}"
    return {
        "overhead_ms_per_step_c64": round(1000 * wall / steps, 3),
        "rollouts_per_s_c64": round(len(tasks) / wall, 1),
    }


def bench_http(n: int) -> dict[str, float]:
    import httpx

    from env_tools.client import remote_environment_factory
    from trainers.serving import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "env_tools.server", "--env", "sandbox", "--port", str(port),
                             "--log-level", "warning"], cwd=ROOT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        tasks = unique_tasks(n)
        factory = remote_environment_factory(url)
        asyncio.run(_rollouts(tasks[:64], factory))
        wall, steps, reward = asyncio.run(_rollouts(tasks, factory))
        assert reward == 1.0, f"over HTTP the scripted policy must still solve every task, got {reward}"
        return {
            "rollouts_per_s_c64_http": round(len(tasks) / wall, 1),
            "ms_per_step_c64_http": round(1000 * wall / steps, 3),
        }
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def bench_policy_server(model_path: str, quick: bool) -> dict[str, float]:
    from benchmarks.policy_server_speed import measure_batch_speedup

    figures = measure_batch_speedup(model_path, n=32, max_tokens=32 if quick else 48)
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--model", default=str(ROOT / "checkpoints" / "tiny-policy"))
    args = p.parse_args()
    n = 128 if args.quick else 512
    figures: dict[str, float] = {}
    figures.update(bench_env(2.0 if args.quick else 5.0))
    print(f"env: {figures}", file=sys.stderr)
    figures.update(bench_overhead(n))
    print(f"overhead: {figures}", file=sys.stderr)
    figures.update(bench_http(n))
    print(f"http: {figures}", file=sys.stderr)
    figures.update(bench_policy_server(args.model, args.quick))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

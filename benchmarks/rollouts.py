"""Rollout-path speed: environment, framework overhead, HTTP service, policy-server batching.

    python benchmarks/rollouts.py            # ~45 s on 2 cores
    python benchmarks/rollouts.py --quick    # ~25 s

Ends with one JSON line:

- ``env_steps_per_s``: in-process sandbox tool calls per second on one core (reference calls
  of the seed tasks, resets excluded; ``env_resets_per_s`` reports those).
- ``overhead_ms_per_step_c64``: wall time per agent step (LLM call + tool execution + state
  update) of 64 concurrent rollouts through ``graphs/agent.py`` with an instant scripted policy
  (``ReferencePolicy``) and in-process environments: the framework's own cost per step.
- ``dropin_overhead_ms_per_call``: what the drop-in capture (``TrajectoryRecorder``) costs per LLM
  call: a ``create_agent`` graph with ``EvolverMiddleware`` and an instant scripted model, 64
  concurrent rollouts, with the recorder vs without it (median of alternating repetitions).
- ``overhead_vs_langgraph_floor`` / ``dropin_overhead_vs_langgraph_floor``: time per agent step
  (one LLM call and its tools) of our agent graph / of the captured ``create_agent`` graph,
  divided by LangGraph's own floor measured in the same run: a bare ``StateGraph`` of no-op async
  nodes taking the same node steps (two per agent step) at the same concurrency.
- ``rollouts_per_s_c64_http``: the same rollouts with every environment behind the HTTP service
  (``python -m env_tools.server`` in its own process).
- ``http_vs_inprocess_rollouts``: rollouts/s over HTTP / rollouts/s in-process, the two alternated
  in the same run (median of the repetitions; target >= 0.5). Where the time goes (medians, CPU ms per
  rollout): ``http_client_cpu_ms_per_rollout`` (this process: the agent graph and the client),
  ``http_service_cpu_ms_per_rollout`` (the service's process: HTTP, the sandbox), and
  ``inprocess_cpu_ms_per_rollout`` (the same rollouts in-process). On 2 cores shared with other work the
  client and the service run one after the other as often as side by side, so the HTTP wall time is
  close to the sum of the two.
- ``env_service_concurrent_vs_sequential``: instances created per second by 128 concurrent clients
  (1,024 creates, held until all are made) / by one client creating them in sequence, against the
  same service from this process, alternated (median; target >= 1.0: concurrency must not slow
  the service down). ``env_creates_per_s_seq`` / ``env_creates_per_s_c128`` are the medians.
- ``policy_server_batch_speedup``: completion tokens/s of the CPU policy server with 32
  concurrent requests over 32 sequential ones, on the tiny policy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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
    from langgraph_evolver.batch import arun_rollouts
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


def _dropin_agent():
    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI

    from env_tools.sandbox.apps import TOOLS, tool_schema
    from langgraph_evolver import EvolverMiddleware, environment_tools

    hosted = ChatOpenAI(model="unused", api_key="sk-unused", base_url="http://127.0.0.1:9/v1")  # routed away
    stand_ins = environment_tools(None, [tool_schema(name) for name in TOOLS])  # routed to each rollout's env
    return create_agent(hosted, stand_ins, middleware=[EvolverMiddleware()])


async def _dropin_rollouts(agent, tasks, capture: bool) -> tuple[float, int, float]:
    from langgraph_evolver.batch import arun_rollouts
    from langgraph_evolver.testing import ReferencePolicy

    policy = ReferencePolicy(tasks, metadata={"evolver_policy": True})
    t0 = time.perf_counter()
    trajs = await arun_rollouts(agent, tasks, n=1, policy=policy, concurrency=64, capture=capture)
    wall = time.perf_counter() - t0
    calls = sum(len(t.task.reference_solution) + 1 for t in trajs)
    return wall, calls, sum(t.reward or 0.0 for t in trajs) / len(trajs)


async def _floor(tasks) -> tuple[float, int]:
    """LangGraph's own cost: no-op async nodes, two node steps per agent step, 64 graphs at once."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class Counter(TypedDict):
        i: int
        n: int

    async def llm(state: Counter) -> dict:
        return {"i": state["i"] + 1}

    async def tools(state: Counter) -> dict:
        return {}

    g = StateGraph(Counter)
    g.add_node("llm", llm)
    g.add_node("tools", tools)
    g.add_edge(START, "llm")

    async def route(state):  # async like the nodes: a sync router would hop to a thread
        return "tools" if state["i"] < state["n"] else END

    g.add_conditional_edges("llm", route, ["tools", END])
    g.add_edge("tools", "llm")
    graph = g.compile()
    semaphore = asyncio.Semaphore(64)
    sizes = [len(t.reference_solution) + 1 for t in tasks]

    async def one(n: int) -> None:
        async with semaphore:
            await graph.ainvoke({"i": 0, "n": n}, {"recursion_limit": 4 * n + 10})

    t0 = time.perf_counter()
    await asyncio.gather(*(one(n) for n in sizes))
    return time.perf_counter() - t0, sum(sizes)


def bench_dropin(n: int, repeats: int) -> dict[str, float]:
    import statistics

    tasks = unique_tasks(n)
    agent = _dropin_agent()
    asyncio.run(_dropin_rollouts(agent, tasks[:64], True))  # warm up
    asyncio.run(_floor(tasks[:64]))
    with_capture, without, floor, ours = [], [], [], []
    for _ in range(repeats):  # alternate, so drift on a shared machine hits every variant alike
        wall, calls, reward = asyncio.run(_dropin_rollouts(agent, tasks, True))
        assert reward == 1.0, f"the scripted policy must solve every task through create_agent, got {reward}"
        with_capture.append(1000 * wall / calls)
        wall, calls, _ = asyncio.run(_dropin_rollouts(agent, tasks, False))
        without.append(1000 * wall / calls)
        wall, steps = asyncio.run(_floor(tasks))
        floor.append(1000 * wall / steps)
        wall, steps, _ = asyncio.run(_rollouts(tasks))
        ours.append(1000 * wall / steps)
    med = statistics.median
    return {
        "dropin_overhead_ms_per_call": round(med(w - o for w, o in zip(with_capture, without, strict=True)), 3),
        "dropin_ms_per_step_c64": round(med(with_capture), 3),
        "dropin_uncaptured_ms_per_step_c64": round(med(without), 3),
        "langgraph_floor_ms_per_step_c64": round(med(floor), 3),
        "overhead_vs_langgraph_floor": round(med(o / f for o, f in zip(ours, floor, strict=True)), 2),
        "dropin_overhead_vs_langgraph_floor": round(med(w / f for w, f in zip(with_capture, floor, strict=True)), 2),
    }


async def _create_rate(url: str, tasks, total: int, clients: int) -> float:
    """Instances created per second by ``clients`` concurrent clients, ``total`` in all, on warm connections.

    Each call runs in its own event loop, so it has its own connection pool: the sequential client is not
    handed the connections the concurrent ones opened.
    """
    from env_tools.client import RemoteEnvironment, aclose_shared_clients

    async def creates(total: int, clients: int) -> float:
        envs = [RemoteEnvironment(url) for _ in range(total)]
        share = total // clients

        async def client(k: int) -> None:  # one client: its creates one after the other
            for i in range(k * share, (k + 1) * share):
                await envs[i].areset(tasks[i % len(tasks)])

        t0 = time.perf_counter()
        await asyncio.gather(*(client(k) for k in range(clients)))
        wall = time.perf_counter() - t0
        for k in range(clients):  # released as each client would, not all 1,024 at once
            await asyncio.gather(*(env.aclose() for env in envs[k * share : (k + 1) * share]))
        return total / wall

    try:
        await creates(clients, clients)  # open the clients' connections
        return await creates(total, clients)
    finally:
        await aclose_shared_clients()


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` (Linux; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime in clock ticks


def bench_http(n: int, repeats: int) -> dict[str, float]:
    import statistics

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
        http, local, seq, conc = [], [], [], []
        client_cpu, service_cpu, local_cpu = [], [], []
        for _ in range(repeats):  # alternate, so drift on a shared machine hits every variant alike
            cpu, service = time.process_time(), _cpu_s(proc.pid)
            wall, steps, reward = asyncio.run(_rollouts(tasks, factory))
            client_cpu.append(time.process_time() - cpu)
            service_cpu.append(_cpu_s(proc.pid) - service)
            assert reward == 1.0, f"over HTTP the scripted policy must still solve every task, got {reward}"
            http.append((wall, steps))
            cpu = time.process_time()
            local.append(asyncio.run(_rollouts(tasks))[0])
            local_cpu.append(time.process_time() - cpu)
            seq.append(asyncio.run(_create_rate(url, tasks, total=256, clients=1)))
            conc.append(asyncio.run(_create_rate(url, tasks, total=1024, clients=128)))
        med = statistics.median
        wall, steps = sorted(http)[len(http) // 2]
        return {
            "rollouts_per_s_c64_http": round(len(tasks) / wall, 1),
            "ms_per_step_c64_http": round(1000 * wall / steps, 3),
            "http_vs_inprocess_rollouts": round(med(lw / hw for lw, (hw, _) in zip(local, http, strict=True)), 2),
            "http_client_cpu_ms_per_rollout": round(1000 * med(client_cpu) / len(tasks), 2),
            "http_service_cpu_ms_per_rollout": round(1000 * med(service_cpu) / len(tasks), 2),
            "inprocess_cpu_ms_per_rollout": round(1000 * med(local_cpu) / len(tasks), 2),
            "env_creates_per_s_seq": round(med(seq)),
            "env_creates_per_s_c128": round(med(conc)),
            "env_service_concurrent_vs_sequential": round(med(c / q for c, q in zip(conc, seq, strict=True)), 2),
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
    figures.update(bench_dropin(n, 3 if args.quick else 5))
    print(f"dropin: {figures}", file=sys.stderr)
    figures.update(bench_http(n, 3 if args.quick else 5))
    print(f"http: {figures}", file=sys.stderr)
    figures.update(bench_policy_server(args.model, args.quick))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

"""The environment service under concurrent load: what made 128 clients slower than one.

No timings: each test checks the mechanism that a regression would bring back (issue 24).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from env_tools.client import RemoteEnvironment, aclose_shared_clients
from env_tools.sandbox import generate_tasks
from env_tools.server import create_app
from langgraph_evolver._serving import serve_in_background
from langgraph_evolver.environment import Environment, register_environment
from langgraph_evolver.types import Action, Observation, StepResult, Task


class RendezvousEnvironment(Environment):
    """``reset`` returns only once ``PARTIES`` resets are inside it at the same time."""

    PARTIES = 8
    barrier = threading.Barrier(PARTIES, timeout=20)

    def reset(self, task: Task) -> Observation:
        self.barrier.wait()  # raises BrokenBarrierError (a 500) if the resets were serialized
        return Observation(messages=[{"role": "user", "content": task.query}], tools=[])

    def step(self, action: Action) -> StepResult:
        return StepResult(done=True)

    def evaluate(self) -> float:
        return 1.0


def test_concurrent_creates_run_their_resets_at_the_same_time():
    """No lock of the service is held across an environment's reset."""
    register_environment("test-rendezvous", RendezvousEnvironment)
    n = RendezvousEnvironment.PARTIES

    async def creates(url: str) -> list[str]:
        envs = [RemoteEnvironment(url, retries=0) for _ in range(n)]
        try:
            await asyncio.gather(*(env.areset(Task(id=f"r{i}", query="meet")) for i, env in enumerate(envs)))
            ids = [env.instance_id or "" for env in envs]
            await asyncio.gather(*(env.aclose() for env in envs))
            return ids
        finally:
            await aclose_shared_clients()

    with serve_in_background(create_app("test-rendezvous", max_instances=n)) as url:
        assert len(set(asyncio.run(creates(url)))) == n


def test_concurrent_clients_reuse_their_connections():
    """128 concurrent clients open at most one connection each, however many calls they make.

    httpcore 1.0 closes an idle connection whenever its pool holds more connections than its
    keep-alive cap, so a pool capped below the concurrency reopened a connection for about every
    other request (578 connections for 1,024 creates by 128 clients).
    """
    app = create_app("sandbox")
    peers: set[tuple[str, int]] = set()

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            peers.add(tuple(scope["client"]))
        await app(scope, receive, send)

    clients, calls = 128, 4

    async def run(url: str) -> None:
        seed = generate_tasks("train", 1)[0]

        async def client() -> None:
            env = RemoteEnvironment(url)
            for _ in range(calls):  # each reset releases the previous instance: two requests
                await env.areset(seed)
            await env.aevaluate()
            await env.aclose()

        try:
            await asyncio.gather(*(client() for _ in range(clients)))
        finally:
            await aclose_shared_clients()

    with serve_in_background(recording) as url:
        asyncio.run(run(url))
        assert len(app.state.instances) == 0
    assert 0 < len(peers) <= clients, f"{len(peers)} connections for {clients} clients"

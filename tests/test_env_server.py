"""Offline tests of the HTTP environment service and ``RemoteEnvironment``.

Every test talks to a real uvicorn server on 127.0.0.1 (a free port, in a background thread).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

import env_tools._transport
import env_tools.client
from env_tools.client import (
    RemoteEnvironment,
    RemoteEnvironmentFailure,
    aclose_shared_clients,
    remote_environment_factory,
)
from env_tools.server import create_app, main, make_parser, parse_env_args
from langgraph_evolver._serving import DEFAULT_MAX_HEADER_BYTES, free_port, serve_in_background
from langgraph_evolver.environment import Environment, load_environment, register_environment
from langgraph_evolver.errors import ConfigError, EnvironmentFailure
from langgraph_evolver.types import Action, Observation, StepResult, Task, ToolCall

TOKEN = "test-token"
ROOT = Path(__file__).resolve().parents[1]
MCP_SERVER = Path(__file__).with_name("mcp_todo_server.py")


@pytest.fixture(scope="session")
def service() -> Iterator[str]:
    with serve_in_background(create_app("sandbox", token=TOKEN)) as url:
        yield url


@pytest.fixture(scope="session")
def http(service: str) -> Iterator[httpx.Client]:
    # A fresh connection per request: a pooled one the server closes as idle (its keep-alive and header
    # timeouts) can be reset under a request sent at that instant (CI: "Connection reset by peer" on /health).
    no_keepalive = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(base_url=service, headers={"Authorization": f"Bearer {TOKEN}"}, limits=no_keepalive) as client:
        yield client


@pytest.fixture(scope="session")
def tasks() -> dict[str, list[Task]]:
    env = load_environment("sandbox")
    return {split: env.list_tasks(split) for split in ("train", "test")}


@pytest.fixture
def remote(service: str) -> Iterator[RemoteEnvironment]:
    env = RemoteEnvironment(service, token=TOKEN)
    yield env
    env.close()


def assert_error(response: httpx.Response, status: int, *needles: str) -> str:
    """The response has ``status``, the uniform error body, and each needle in its message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and isinstance(body["error"]["type"], str), body
    message = body["error"]["message"]
    for needle in needles:
        assert needle.lower() in message.lower(), message
    return message


def run_oracle(env: Environment, task: Task, *, drop_last: bool = False) -> float:
    calls = list(task.reference_solution or ())
    if drop_last:
        calls = calls[:-1]
    env.reset(task)
    for call in calls:
        result = env.step(Action(tool_calls=(call,)))
        assert not any(o.is_error for o in result.observations), (task.id, result)
    assert env.step(Action(content=task.metadata.get("answer") or "Done.")).done
    return env.evaluate()


def call(tool: str, /, **arguments: Any) -> ToolCall:
    return ToolCall(name=tool, arguments=arguments, id=f"call_{tool}")


def live_instances(http: httpx.Client) -> int:
    return http.get("/health").json()["instances"]


# -- the oracle and interface parity -------------------------------------------------------------
@pytest.mark.parametrize("split", ["train", "test"])
def test_oracle_over_http_scores_every_seed_task(service, http, tasks, split):
    before = live_instances(http)
    env = RemoteEnvironment(service, token=TOKEN)
    remote_tasks = env.list_tasks(split)
    assert [t.to_dict() for t in remote_tasks] == [t.to_dict() for t in tasks[split]]
    for task in remote_tasks:
        assert run_oracle(env, task) == 1.0, task.id
        assert run_oracle(env, task, drop_last=True) < 1.0, task.id
    assert live_instances(http) == before + 1  # each reset released the previous instance
    env.close()
    env.close()  # idempotent
    assert live_instances(http) == before


def test_remote_matches_local_reset_and_profile(remote, tasks):
    local = load_environment("sandbox")
    task = tasks["test"][7]
    assert remote.reset(task) == local.reset(task)
    assert remote.profile() == local.profile()
    bad = Action(tool_calls=(call("pay", contact_id="c999", amount=5),))
    assert remote.step(bad) == local.step(bad)


async def test_async_twins_match_sync(remote, service, tasks):
    task = tasks["train"][3]
    env = RemoteEnvironment(service, token=TOKEN)
    try:
        assert await env.areset(task) == remote.reset(task)
        assert [t.id for t in await env.alist_tasks("test")] == [t.id for t in tasks["test"]]
        assert await env.aprofile() == remote.profile()
        for c in task.reference_solution or ():
            assert (await env.astep(Action(tool_calls=(c,)))) == remote.step(Action(tool_calls=(c,)))
        final = Action(content=task.metadata.get("answer") or "Done.")
        assert (await env.astep(final)).done and remote.step(final).done
        assert await env.aevaluate() == remote.evaluate() == 1.0
    finally:
        await env.aclose()
        await aclose_shared_clients()
    assert env.instance_id is None


def test_reset_releases_the_previous_instance(remote, http, tasks):
    before = live_instances(http)
    remote.reset(tasks["train"][0])
    first = remote.instance_id
    remote.reset(tasks["train"][1])
    assert remote.instance_id != first
    assert live_instances(http) == before + 1
    assert_error(http.post(f"/instances/{first}/evaluate"), 404, "already released")
    remote.close()
    assert live_instances(http) == before


def test_create_by_task_id(http, tasks):
    task = tasks["test"][4]
    r = http.post("/instances", json={"task_id": task.id, "split": "test"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert Observation.from_dict(body["observation"]) == load_environment("sandbox").reset(task)
    assert body["observation"]["tools"] and body["observation"]["tools"][0]["type"] == "function"
    assert http.delete(f"/instances/{body['instance_id']}").json() == {"released": body["instance_id"]}


# -- bad input ----------------------------------------------------------------------------------------
def test_health_needs_no_token(service):
    body = httpx.get(f"{service}/health").json()
    assert body["status"] == "ok" and body["env"] == "sandbox" and body["max_instances"] == 1024


@pytest.mark.parametrize("path", ["/tasks", "/profile", "/instances/abc/evaluate", "/docs"])
def test_missing_or_wrong_token_is_401(service, path):
    method = "POST" if path.endswith("evaluate") else "GET"
    assert_error(httpx.request(method, f"{service}{path}"), 401, "bearer token", "--token")
    wrong = {"Authorization": "Bearer nope"}
    assert_error(httpx.request(method, f"{service}{path}", headers=wrong), 401, "wrong")
    assert_error(httpx.request(method, f"{service}{path}", headers={"Authorization": TOKEN}), 401, "wrong")


def test_client_reports_token_problems(service):
    with pytest.raises(RemoteEnvironmentFailure, match="token=") as e:
        RemoteEnvironment(service).list_tasks()
    assert e.value.status_code == 401 and e.value.error_type == "unauthorized"
    with pytest.raises(RemoteEnvironmentFailure, match="wrong") as e:
        RemoteEnvironment(service, token="nope").profile()
    assert e.value.status_code == 401


def test_unknown_instance_is_404(http):
    for r in (
        http.post("/instances/nope/step", json={"action": {"content": "hi"}}),
        http.post("/instances/nope/evaluate"),
        http.delete("/instances/nope"),
    ):
        assert_error(r, 404, "unknown instance 'nope'", "POST /instances")


def test_malformed_json_is_400(http, tasks):
    headers = {"content-type": "application/json"}
    assert_error(http.post("/instances", content=b'{"task_id": ', headers=headers), 400, "not valid JSON")
    instance = http.post("/instances", json={"task_id": tasks["train"][0].id}).json()["instance_id"]
    r = http.post(f"/instances/{instance}/step", content=b"{'action': {}}", headers=headers)
    assert_error(r, 400, "not valid JSON", '"tool_calls"')
    http.delete(f"/instances/{instance}")


def test_bad_create_bodies_are_4xx(http, tasks):
    assert_error(http.post("/instances", json={"task_id": "nope"}), 404, "unknown task id 'nope'", "GET /tasks")
    assert_error(http.post("/instances", json={"task_id": tasks["test"][0].id}), 404, "split 'train'")
    both = {"task_id": tasks["train"][0].id, "task": tasks["train"][0].to_dict()}
    assert_error(http.post("/instances", json=both), 422, "exactly one of")
    assert_error(http.post("/instances", json={"task": {"id": "x"}}), 422, "task.query")
    assert_error(http.post("/instances"), 422, "body is missing")
    bad_params = {**tasks["train"][0].to_dict(), "env_params": {"seed": 1, "colour": "red"}}
    assert_error(http.post("/instances", json={"task": bad_params}), 400, "colour")
    assert_error(http.get("/tasks", params={"split": "nosuchsplit"}), 400, "nosuchsplit", "train")


def test_bad_action_shape_is_422(http, tasks):
    instance = http.post("/instances", json={"task_id": tasks["train"][0].id}).json()["instance_id"]
    step = f"/instances/{instance}/step"
    assert_error(http.post(step, json={"action": {"toolcalls": []}}), 422, "action.toolcalls", "tool_calls")
    assert_error(http.post(step, json={"action": {"tool_calls": [{"arguments": {}}]}}), 422, "tool_calls.0.name")
    assert_error(http.post(step, json={"action": {"tool_calls": "search"}}), 422, "action.tool_calls")
    assert_error(http.post(step, json={"tool_calls": []}), 422, "action")
    # a good action still works on the same instance afterwards
    ok = http.post(step, json={"action": {"tool_calls": [{"name": "get_balance", "arguments": {}}]}})
    assert ok.status_code == 200 and not ok.json()["observations"][0]["is_error"]
    http.delete(f"/instances/{instance}")


def test_unknown_tool_and_bad_arguments_are_error_observations(remote, tasks):
    remote.reset(tasks["train"][0])
    result = remote.step(
        Action(
            tool_calls=(
                call("teleport", where="moon"),
                call("search_contacts", q="Ann"),
                ToolCall(name="get_contact", arguments='{"contact_id": ', id="raw"),
            )
        )
    )
    assert isinstance(result, StepResult) and not result.done
    assert [o.is_error for o in result.observations] == [True, True, True]
    assert "unknown tool 'teleport'" in result.observations[0].content
    assert "unknown argument" in result.observations[1].content
    assert result.observations[2].call_id == "raw" and "not a JSON object" in result.observations[2].content


def test_oversized_body_is_413(remote, http, tasks):
    remote.reset(tasks["train"][0])
    with pytest.raises(RemoteEnvironmentFailure, match="--max-request-bytes") as e:
        remote.step(Action(content="x" * (2 << 20)))
    assert e.value.status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap applies as the body streams in
        yield b'{"action": {"content": "'
        for _ in range(20):
            yield b"y" * (64 << 10)
        yield b'"}}'

    r = http.post(f"{remote.base_url}/instances/{remote.instance_id}/step", content=chunks())
    assert_error(r, 413, "1048576 bytes")
    assert remote.step(Action(content="small")).done  # the instance is unharmed


def test_unknown_route_and_step_before_reset(http, service):
    assert_error(http.get("/nowhere"), 404, "no endpoint GET /nowhere")
    with pytest.raises(RemoteEnvironmentFailure, match=r"reset\(task\)"):
        RemoteEnvironment(service, token=TOKEN).step(Action(content="hi"))


# -- limits ----------------------------------------------------------------------------------------------
def test_instance_limit_then_release(tasks):
    task = tasks["train"][0]
    with serve_in_background(create_app("sandbox", max_instances=3)) as url:
        envs = [RemoteEnvironment(url) for _ in range(3)]
        for env in envs:
            env.reset(task)
        r = httpx.post(f"{url}/instances", json={"task_id": task.id})
        assert_error(r, 429, "3 live instances", "--max-instances 3", "DELETE /instances")
        with pytest.raises(RemoteEnvironmentFailure, match="max-instances") as e:
            RemoteEnvironment(url, retries=0).reset(task)
        assert e.value.status_code == 429
        envs[0].close()
        extra = RemoteEnvironment(url)
        extra.reset(task)
        assert run_oracle(extra, task) == 1.0
        assert httpx.get(f"{url}/health").json()["instances"] == 3
        for env in (*envs, extra):
            env.close()
        assert httpx.get(f"{url}/health").json()["instances"] == 0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_create_refused_by_the_instance_limit_is_retried(tasks, monkeypatch, mode):
    monkeypatch.setattr(env_tools.client, "_RETRY_AFTER_CAP_S", 0.1)  # the service asks for 1 s
    task = tasks["train"][0]
    with serve_in_background(create_app("sandbox", max_instances=1)) as url:
        first, second = RemoteEnvironment(url), RemoteEnvironment(url, retries=40)
        first.reset(task)

        async def areset() -> None:
            try:
                await second.areset(task)
            finally:
                await aclose_shared_clients()

        release = threading.Timer(0.3, first.close)  # the only slot frees up while `second` waits
        release.start()
        try:
            if mode == "sync":  # 429 until then, retried after Retry-After
                second.reset(task)
            else:
                asyncio.run(areset())
        finally:
            release.join()
        assert second.instance_id is not None and first.instance_id is None
        second.close()
        assert httpx.get(f"{url}/health").json()["instances"] == 0


def test_idle_instances_expire(tasks):
    task = tasks["train"][1]
    timeout = 1.5
    with serve_in_background(create_app("sandbox", idle_timeout_s=timeout)) as url:
        busy, idle = RemoteEnvironment(url), RemoteEnvironment(url)
        busy.reset(task)
        idle.reset(task)
        started = time.monotonic()
        deadline = started + 30  # generous: a loaded machine delays the sweep, never the expiry's correctness
        while httpx.get(f"{url}/health").json()["instances"] != 1:  # until the background sweep releases one
            assert time.monotonic() < deadline, "the idle instance was not released within 30 s"
            # activity keeps an instance alive past the timeout (a step here every ~0.05 s, far below 1.5 s)
            assert not busy.step(Action(tool_calls=(call("get_balance"),))).observations[0].is_error
            time.sleep(0.05)
        assert time.monotonic() - started >= timeout  # nothing expired early
        r = httpx.post(f"{url}/instances/{idle.instance_id}/step", json={"action": {"content": "hi"}})
        assert_error(r, 404, "expired", "idle", "create a new instance")
        with pytest.raises(RemoteEnvironmentFailure, match="expired") as e:
            idle.evaluate()
        assert e.value.status_code == 404 and e.value.error_type == "instance_not_found"
        idle.close()  # releasing an expired instance is quiet
        assert 0.0 <= busy.evaluate() <= 1.0
        busy.close()


class CountingEnvironment(Environment):
    """Counts how many instances were created and how many closed."""

    counts = {"created": 0, "closed": 0}

    def __init__(self) -> None:
        self.counts["created"] += 1

    def reset(self, task: Task) -> Observation:
        return Observation(messages=[{"role": "user", "content": task.query}], tools=[])

    def step(self, action: Action) -> StepResult:
        return StepResult(done=True)

    def evaluate(self) -> float:
        return 0.0

    def close(self) -> None:
        self.counts["closed"] += 1


def test_shutdown_closes_every_environment_the_service_built():
    register_environment("test-counting", CountingEnvironment)
    CountingEnvironment.counts.update(created=0, closed=0)
    with serve_in_background(create_app("test-counting")) as url:
        env = RemoteEnvironment(url)
        env.reset(Task(id="t", query="q"))  # left open: the shutdown releases it
        assert httpx.get(f"{url}/tasks").json() == {"tasks": []}  # answered by the catalog instance
    assert CountingEnvironment.counts == {"created": 2, "closed": 2}


# -- a broken environment never takes the service down -------------------------------------------
class ExplodingEnvironment(Environment):
    """Resets fine unless told otherwise; every step and evaluate raises."""

    def reset(self, task: Task) -> Observation:
        if task.query == "explode":
            raise RuntimeError("reset exploded")
        if task.query == "refuse":
            raise EnvironmentFailure("this task is not for me")
        return Observation(messages=[{"role": "user", "content": task.query}], tools=[])

    def step(self, action: Action) -> StepResult:
        raise RuntimeError("step exploded")

    def evaluate(self) -> float:
        raise ZeroDivisionError("evaluate exploded")


def test_exceptions_inside_the_environment_become_errors(caplog):
    register_environment("test-exploding", ExplodingEnvironment)
    with serve_in_background(create_app("test-exploding", max_instances=2)) as url:
        env = RemoteEnvironment(url)
        env.reset(Task(id="t", query="hello"))
        with pytest.raises(RemoteEnvironmentFailure, match="RuntimeError.*step exploded") as e:
            env.step(Action(content="hi"))
        assert e.value.status_code == 500 and e.value.error_type == "environment_error"
        r = httpx.post(f"{url}/instances/{env.instance_id}/evaluate")
        assert_error(r, 500, "ZeroDivisionError", "evaluate exploded", "still running")
        for _ in range(3):  # a reset that raises must not leak an instance slot
            r = httpx.post(f"{url}/instances", json={"task": {"id": "x", "query": "explode"}})
            assert_error(r, 500, "reset exploded")
        r = httpx.post(f"{url}/instances", json={"task": {"id": "y", "query": "refuse"}})
        assert_error(r, 400, "not for me")
        health = httpx.get(f"{url}/health").json()
        assert health["status"] == "ok" and health["instances"] == 1
        assert httpx.get(f"{url}/tasks").json() == {"tasks": []}
        env.reset(Task(id="t2", query="again"))  # still serving
        env.close()
        assert httpx.get(f"{url}/health").json()["instances"] == 0


# -- concurrency ----------------------------------------------------------------------------------------
async def test_64_concurrent_async_rollouts_keep_their_worlds_apart(service, http, tasks):
    n = 64
    task = next(t for t in tasks["train"] if "contacts" in t.metadata["apps"])
    make_env = remote_environment_factory(service, token=TOKEN)
    before = live_instances(http)
    all_added = asyncio.Barrier(n)

    async def rollout(i: int) -> tuple[str, list[str], str]:
        async with make_env(task) as env:
            await env.areset(task)
            name = f"Zelda Unique{i:03d}"
            added = await env.astep(Action(tool_calls=(call("add_contact", name=name, phone=f"555-{i:04d}"),)))
            assert not added.observations[0].is_error
            await all_added.wait()  # every world has its contact before anyone searches
            found = await env.astep(Action(tool_calls=(call("search_contacts", query="Zelda Unique"),)))
            names = [c["name"] for c in json.loads(found.observations[0].content)]
            assert 0.0 <= await env.aevaluate() <= 1.0
            return name, names, env.instance_id or ""

    try:
        results = await asyncio.wait_for(asyncio.gather(*(rollout(i) for i in range(n))), timeout=60)
    finally:
        await aclose_shared_clients()
    assert len({instance for _, _, instance in results}) == n
    for name, names, _ in results:
        assert names == [name]
    assert live_instances(http) == before


def test_successive_event_loops_do_not_leak_connection_pools(service, tasks):
    """A trainer calls asyncio.run once per step; each finished loop's pool must be let go."""
    task = tasks["train"][0]
    make_env = remote_environment_factory(service, token=TOKEN)

    async def rollouts(n: int = 8) -> None:  # concurrent, so each loop opens n connections
        async def rollout() -> None:
            async with make_env(task) as env:
                await env.areset(task)
                await env.astep(Action(tool_calls=(call("get_balance"),)))

        await asyncio.gather(*(rollout() for _ in range(n)))

    def open_fds() -> int:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)  # sockets of dropped pools close when collected
            gc.collect()
        return len(os.listdir("/proc/self/fd"))

    asyncio.run(rollouts())
    baseline = open_fds()
    for _ in range(5):
        asyncio.run(rollouts())
    assert len(env_tools._transport._async_clients) <= 2
    deadline = time.monotonic() + 5  # the server closes its ends of dropped connections as it notices
    while open_fds() > baseline + 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert open_fds() <= baseline + 8  # without the fix: +8 client sockets per finished loop


class SlowEnvironment(Environment):
    """Each step takes 50 ms and records how many steps run at once, per instance and overall."""

    lock = threading.Lock()
    running: dict[int, int] = {}
    peak: dict[str, int] = {"instance": 0, "overall": 0}

    def reset(self, task: Task) -> Observation:
        return Observation(messages=[{"role": "user", "content": task.query}], tools=[])

    def step(self, action: Action) -> StepResult:
        me = id(self)
        with self.lock:
            self.running[me] = self.running.get(me, 0) + 1
            self.peak["instance"] = max(self.peak["instance"], self.running[me])
            self.peak["overall"] = max(self.peak["overall"], sum(self.running.values()))
        time.sleep(0.05)
        with self.lock:
            self.running[me] -= 1
        return StepResult()

    def evaluate(self) -> float:
        return 0.0


def test_calls_to_one_instance_are_serialized_but_instances_run_in_parallel():
    register_environment("test-slow", SlowEnvironment)
    with serve_in_background(create_app("test-slow")) as url:
        envs = [RemoteEnvironment(url), RemoteEnvironment(url)]
        for i, env in enumerate(envs):
            env.reset(Task(id=f"slow-{i}", query="wait"))
        errors: list[BaseException] = []

        def hammer(env: RemoteEnvironment) -> None:
            try:
                for _ in range(3):
                    env.step(Action(content="hi"))
            except BaseException as e:  # surfaced below
                errors.append(e)

        threads = [threading.Thread(target=hammer, args=(env,)) for env in envs for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert SlowEnvironment.peak == {"instance": 1, "overall": 2}
        for env in envs:
            env.close()


# -- client failures and retries ---------------------------------------------------------------------
async def test_connection_refused_names_the_url():
    url = f"http://127.0.0.1:{free_port()}"
    env = RemoteEnvironment(url, retries=1)
    with pytest.raises(EnvironmentFailure, match=r"Cannot reach .*127\.0\.0\.1.*python -m env_tools\.server"):
        env.list_tasks()
    with pytest.raises(EnvironmentFailure, match=url.replace(".", r"\.")):
        await env.areset(Task(id="t", query="q"))
    await aclose_shared_clients()


def test_retries_503_only_for_idempotent_calls():
    hits = {"health": 0, "step": 0}
    app = FastAPI()

    @app.get("/health")
    def health() -> JSONResponse:
        hits["health"] += 1
        if hits["health"] < 3:
            return JSONResponse({"error": {"message": "warming up", "type": "busy"}}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.post("/instances/{instance_id}/step")
    def step(instance_id: str) -> JSONResponse:
        hits["step"] += 1
        return JSONResponse({"error": {"message": "busy", "type": "busy"}}, status_code=503)

    with serve_in_background(app) as url:
        assert RemoteEnvironment(url, retries=2).health() == {"status": "ok"}
        assert hits["health"] == 3
        env = RemoteEnvironment(url, retries=2)
        env._instance_id = "abc"  # pretend a reset happened
        with pytest.raises(RemoteEnvironmentFailure, match="busy") as e:
            env.step(Action(content="hi"))
        assert e.value.status_code == 503 and hits["step"] == 1


def test_client_rejects_bad_arguments():
    with pytest.raises(ConfigError, match="http://"):
        RemoteEnvironment("127.0.0.1:8080")
    with pytest.raises(ConfigError, match="http://"):
        remote_environment_factory("localhost")


# -- configuration and the command line -------------------------------------------------------------
def test_create_app_rejects_bad_configuration():
    with pytest.raises(ConfigError, match="sandbox"):
        create_app("no-such-env")
    with pytest.raises(ConfigError, match="max_instances"):
        create_app("sandbox", max_instances=0)
    with pytest.raises(ConfigError, match="idle_timeout_s"):
        create_app("sandbox", idle_timeout_s=0)


def test_cli_arguments(monkeypatch):
    assert parse_env_args(["seed=3", "name=ann", "flag=true", "ratio=0.5"]) == {
        "seed": 3,
        "name": "ann",
        "flag": True,
        "ratio": 0.5,
    }
    with pytest.raises(ConfigError, match="key=value"):
        parse_env_args(["seed"])
    monkeypatch.setenv("EVOLVER_ENV_TOKEN", "from-env")
    args = make_parser().parse_args(["--env-arg", "seed=2", "--max-instances", "5"])
    assert args.token == "from-env" and args.env_arg == ["seed=2"] and args.max_instances == 5
    assert args.host == "127.0.0.1" and args.idle_timeout == 600.0 and args.max_request_bytes == 1 << 20


def test_documented_command_serves(tasks):
    port = free_port()
    cmd = [sys.executable, "-m", "env_tools.server", "--env", "sandbox", "--port", str(port)]
    cmd += ["--max-instances", "2", "--env-arg", "seed=3", "--log-level", "warning"]
    env = {**os.environ, "EVOLVER_ENV_TOKEN": "cli-token"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                health = httpx.get(f"{url}/health").json()
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
                assert time.monotonic() < deadline, "the server did not start within 30 s"
                time.sleep(0.1)
        assert health["max_instances"] == 2
        assert httpx.get(f"{url}/tasks").status_code == 401
        remote = RemoteEnvironment(url, token="cli-token")
        assert run_oracle(remote, tasks["test"][0]) == 1.0
        remote.close()
    finally:
        proc.terminate()
        proc.communicate(timeout=10)  # also closes the pipe
    bad = subprocess.run(
        [sys.executable, "-m", "env_tools.server", "--env", "no-such-env"], cwd=ROOT, capture_output=True, timeout=60
    )
    assert bad.returncode != 0 and b"Unknown environment" in bad.stderr


# -- tasks sent over HTTP never name code (issue 38) --------------------------------------------------
EVIL = """import pathlib
pathlib.Path(__file__).with_name("ran").write_text("imported")


def check(task, state, final_answer, calls):
    pathlib.Path(__file__).with_name("ran").write_text("called")
    return 1.0
"""


def own_checker(task: Task, state: Any, final_answer: str | None, calls: list[ToolCall]) -> float:
    """The checker the service's own tasks file names."""
    return 1.0 if final_answer == "done" else 0.0


@pytest.fixture
def mcp_with_checker(tmp_path: Path) -> tuple[str, Path]:
    """An MCP environment whose tasks file names this module's checker, and a file that marks when it runs."""
    (tmp_path / "evil.py").write_text(EVIL)
    tasks = tmp_path / "tasks.jsonl"
    rows = [
        {"id": "own", "query": "Say done.", "checker": f"{__name__}:own_checker"},
        {"id": "kept-apart", "split": "heldout", "query": "Say done.", "checker": f"{__name__}:own_checker"},
    ]
    tasks.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return f"mcp:{sys.executable} {MCP_SERVER}#tasks={tasks}", tmp_path


def test_a_task_sent_over_http_that_names_a_checker_is_refused_and_never_runs(mcp_with_checker, monkeypatch):
    spec, tmp = mcp_with_checker
    monkeypatch.syspath_prepend(str(tmp))  # so that "evil:check" would import, were it ever imported
    evil = tmp / "evil.py"
    named = [f"{evil}:check", "evil:check", "evil.check", f"{evil}", {"module": "evil", "function": "check"}]
    with serve_in_background(create_app(spec)) as url, httpx.Client(base_url=url, timeout=60) as http:
        for checker in named:
            for task_id in ("own", "mine"):  # the service's own task id with another checker, or a new task
                task = {"id": task_id, "query": "Say done.", "metadata": {"checker": checker}}
                response = http.post("/instances", json={"task": task})
                assert_error(response, 400, "may not name code", "only the checkers of the service's own task")
                assert response.json()["error"]["type"] == "task_names_code"
        assert http.get("/health").json()["instances"] == 0
        # the service's own task, sent back whole as RemoteEnvironment.reset sends it: its own checker runs
        remote = RemoteEnvironment(url)
        [own] = remote.list_tasks("train")
        assert own.metadata["checker"] == f"{__name__}:own_checker"
        remote.reset(own)
        assert remote.step(Action(content="done")).done and remote.evaluate() == 1.0
        [apart] = load_environment(spec).list_tasks("heldout")  # a split the service was never asked to list
        remote.reset(apart)
        assert remote.step(Action(content="done")).done and remote.evaluate() == 1.0
        remote.close()
    assert not (tmp / "ran").exists(), "the client-named checker ran"


def test_an_mcp_environment_imports_only_the_checkers_its_own_tasks_name(mcp_with_checker):
    spec, tmp = mcp_with_checker
    env = load_environment(spec)
    try:  # a task from elsewhere (a synthesized task, a caller of the Python API) that names a file
        env.reset(Task(id="own", query="Say done.", env=spec, metadata={"checker": f"{tmp / 'evil.py'}:check"}))
        env.step(Action(content="done"))
        with pytest.raises(EnvironmentFailure, match="only the checkers of the environment's tasks file run"):
            env.evaluate()
    finally:
        env.close()
    assert not (tmp / "ran").exists()


def test_a_public_address_needs_a_token_or_insecure(monkeypatch):
    import uvicorn

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: calls.append(kwargs))
    monkeypatch.delenv("EVOLVER_ENV_TOKEN", raising=False)
    with pytest.raises(SystemExit, match="refusing to serve on 0.0.0.0 without a token.*--insecure"):
        main(["--host", "0.0.0.0"])
    with pytest.raises(SystemExit, match="spaces or a newline"):
        main(["--host", "0.0.0.0", "--token", "s3cret\n"])
    assert calls == []
    main(["--host", "0.0.0.0", "--insecure"])
    main(["--host", "0.0.0.0", "--token", "s3cret"])
    main(["--host", "::1", "--max-header-bytes", "4096", "--header-timeout", "3"])
    assert [c["host"] for c in calls] == ["0.0.0.0", "0.0.0.0", "::1"]
    assert [c["h11_max_incomplete_event_size"] for c in calls] == [DEFAULT_MAX_HEADER_BYTES] * 2 + [4096]
    assert all(c["http"].__name__ == "GuardedHTTP" for c in calls)

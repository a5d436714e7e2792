"""Both HTTP services fuzzed from their own OpenAPI with schemathesis (issue 24): no request gets a 5xx.

Each service runs for real, under uvicorn on a free loopback port. (schemathesis' in-process ASGI transport opens
a new Starlette ``TestClient`` per request and so runs the app's lifespan around every one: the env service would
close its environments, and the policy server stop its generation worker, after the first request.)

For every operation in ``/openapi.json``, Hypothesis draws ``EXAMPLES`` requests that match the schema and up to
``EXAMPLES`` that break it, derandomized and without an example database, so every run sends the same requests.
Each answer must be below 500 and have a status the operation documents; all failures are collected and reported
together, each with its curl command. Half of the schema-conforming requests to an env instance's routes get a
fresh live instance, so that steps reach the environment. After the run, ``/health`` and a normal request must
still succeed.

``HOSTILE_*`` hold what the generator never draws: text with a lone surrogate (JSON can escape one, UTF-8 cannot
carry it) and integers past 64 bits. Each was a 500 before (issue 24).

The limits (issue 38), on both services: a 30 MB body (declared or chunked) is a 413 within 10 s; a request line +
headers over the limit is a 431; a connection that trickles its headers is a 408 and closed after the header
timeout, however many do so at once. Each service answers normally afterwards.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import hypothesis
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import status_code_conformance

from env_tools.server import create_app as create_env_app
from langgraph_evolver._serving import serve_in_background
from tests.conftest import TINY_POLICY
from trainers.serving.app import create_app as create_policy_app

EXAMPLES = 12
"""Requests per operation and generation mode: together the two services take about 30 s on 2 cores."""

CHECKS = [not_a_server_error, status_code_conformance]
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as the request that failed
    suppress_health_check=list(HealthCheck),
)
CONFIG = schemathesis.Config.from_dict({"seed": 0, "generation": {"deterministic": True}})
MESSAGES = [{"role": "user", "content": "What is Pia's phone number?"}]
HEADER_TIMEOUT_S = 1.5
"""Both services' header timeout here (10 s on the command line), so that the trickling test is short."""


def fuzz(url: str, session: requests.Session, *, prepare: Any = None) -> tuple[list[str], dict[str, int]]:
    """Run every operation of the service at ``url`` in both generation modes.

    ``prepare(case, mode)`` may edit a case before it is sent.
    Returns the failures (one line each, with the request as curl) and how many requests each operation got.
    """
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", config=CONFIG)
    failures: list[str] = []
    sent: dict[str, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode)
            failures += _fuzz_operation(strategy, f"{operation.label} ({mode.value})", session, prepare, mode, sent)
    return failures, sent


def _fuzz_operation(
    strategy: Any, name: str, session: requests.Session, prepare: Any, mode: GenerationMode, sent: dict[str, int]
) -> list[str]:
    label = name.rsplit(" (", 1)[0]
    failures: list[str] = []

    @SETTINGS
    @given(case=strategy)
    def run(case: schemathesis.Case) -> None:
        if prepare is not None:
            prepare(case, mode)
        sent[label] = sent.get(label, 0) + 1
        try:
            case.call_and_validate(session=session, checks=CHECKS, timeout=60)
        except FailureGroup as group:
            failures.extend(f"{name}: {failure.title}: {case.as_curl_command()}" for failure in group.exceptions)

    try:
        run()
    except hypothesis.errors.Unsatisfiable:  # nothing to break (schemathesis 4.15 draws none for the instance routes)
        pass
    return failures


def one_connection_per_request() -> requests.Session:
    """A session that closes each connection after its answer. The services here close an idle kept-alive
    connection after ``HEADER_TIMEOUT_S``; a request sent on it just as that timer fires is reset before the
    server reads it (the keep-alive race every HTTP server has), which once failed this test in CI after a slow
    pause between two operations. A connection per request takes that race out, and the fuzzing with it."""
    session = requests.Session()
    session.headers["Connection"] = "close"
    return session


def assert_no_failures(failures: list[str]) -> None:
    assert not failures, f"{len(failures)} failing requests:\n" + "\n".join(dict.fromkeys(failures))


# -- the environment service -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def env_service() -> Iterator[str]:
    with serve_in_background(create_env_app("sandbox"), header_timeout_s=HEADER_TIMEOUT_S) as url:
        yield url


def test_env_service_answers_generated_requests_without_server_errors(env_service: str) -> None:
    started = time.monotonic()
    session = one_connection_per_request()
    task_id = session.get(f"{env_service}/tasks").json()["tasks"][0]["id"]
    count = iter(range(1 << 30))

    def live_instance() -> str:
        response = session.post(f"{env_service}/instances", json={"task_id": task_id})
        assert response.status_code == 200, response.text
        return response.json()["instance_id"]

    def prepare(case: schemathesis.Case, mode: GenerationMode) -> None:
        if mode is GenerationMode.POSITIVE and "instance_id" in case.path_parameters and next(count) % 2 == 0:
            case.path_parameters["instance_id"] = live_instance()

    instance_routes = [
        "POST /instances/{instance_id}/step",
        "POST /instances/{instance_id}/evaluate",
        "DELETE /instances/{instance_id}",
    ]
    failures, sent = fuzz(env_service, session, prepare=prepare)

    assert_no_failures(failures)
    assert set(sent) >= {"GET /health", "GET /tasks", "POST /instances", *instance_routes}, sent
    assert sent["POST /instances/{instance_id}/step"] >= EXAMPLES, sent
    assert session.get(f"{env_service}/health").json()["status"] == "ok"
    instance_id = live_instance()
    step = session.post(f"{env_service}/instances/{instance_id}/step", json={"action": {"content": "555-250"}})
    assert step.status_code == 200 and step.json()["done"] is True, step.text
    print(f"env service: {sum(sent.values())} requests, {len(sent)} operations, {time.monotonic() - started:.1f} s")


HOSTILE_ENV = {
    "lone surrogate in the task": (
        "/instances",
        {"task": {"id": "t", "query": "Find \ud800 please", "env_params": {"seed": 0}}},
    ),
    "lone surrogate in a step": ("/instances/{id}/step", {"action": {"content": "\udfff"}}),
    "integer past 64 bits": ("/instances", {"task": {"id": "t", "query": "q", "env_params": {"seed": 1 << 70}}}),
}


@pytest.mark.parametrize("name", list(HOSTILE_ENV))
def test_env_service_refuses_hostile_values_with_4xx(env_service: str, name: str) -> None:
    path, body = HOSTILE_ENV[name]
    if "{id}" in path:
        created = requests.post(f"{env_service}/instances", json={"task": {"id": "t", "query": "q"}}, timeout=30)
        path = path.replace("{id}", created.json()["instance_id"])
    # json.dumps escapes the surrogate as \ud800, which is valid JSON
    response = requests.post(f"{env_service}{path}", data=json.dumps(body), timeout=30)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.json()["error"]["message"]


# -- the policy server ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def policy_server() -> Iterator[str]:
    # runtime updates off, as on the command line: the weight routes answer 403 without reading anything
    app = create_policy_app(TINY_POLICY, max_new_tokens_cap=4, max_batch_size=4, allow_runtime_updates=False)
    with serve_in_background(app, header_timeout_s=HEADER_TIMEOUT_S) as url:
        yield url


def test_policy_server_answers_generated_requests_without_server_errors(policy_server: str) -> None:
    started = time.monotonic()
    session = one_connection_per_request()

    failures, sent = fuzz(policy_server, session)

    assert_no_failures(failures)
    assert sent.get("POST /v1/chat/completions", 0) >= 2 * EXAMPLES, sent
    assert session.get(f"{policy_server}/health").status_code == 200
    answer = session.post(f"{policy_server}/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 2})
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["role"] == "assistant", answer.text
    print(f"policy server: {sum(sent.values())} requests, {len(sent)} operations, {time.monotonic() - started:.1f} s")


HOSTILE_POLICY = {
    "lone surrogate in a message": {"messages": [{"role": "user", "content": "hi \ud800"}]},
    "lone surrogate in a tool": {
        "messages": MESSAGES,
        "tools": [{"type": "function", "function": {"name": "f\udc00", "description": "x"}}],
    },
    "lone surrogate in the model name": {"messages": MESSAGES, "model": "tiny\ud800"},
    "lone surrogate in a named tool_choice": {
        "messages": MESSAGES,
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": {"type": "function", "function": {"name": "g\ud800"}},
    },
    "n past 64 bits": {"messages": MESSAGES, "n": 1 << 64},
    "n far over the batch size": {"messages": MESSAGES, "n": 10**9},
    "seed past 64 bits": {"messages": MESSAGES, "seed": 1 << 70, "max_tokens": 1},
    "max_tokens past 64 bits": {"messages": MESSAGES, "max_tokens": 1 << 70},
    "stop token id past 64 bits": {"messages": MESSAGES, "stop_token_ids": [1 << 70], "max_tokens": 1},
}


@pytest.mark.parametrize("name", list(HOSTILE_POLICY))
def test_policy_server_refuses_hostile_values_with_4xx(policy_server: str, name: str) -> None:
    response = requests.post(
        f"{policy_server}/v1/chat/completions",
        data=json.dumps(HOSTILE_POLICY[name]),
        headers={"Content-Type": "application/json"},
        timeout=60,
    )
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert response.json()["error"]["message"]


# -- the limits of both services (issue 38) -----------------------------------------------------------------------
SERVICES = {"env service": ("env_service", "/instances"), "policy server": ("policy_server", "/v1/chat/completions")}


def _still_serves(name: str, url: str) -> None:
    if name == "env service":
        assert requests.get(f"{url}/health", timeout=10).json()["status"] == "ok"
        created = requests.post(f"{url}/instances", json={"task": {"id": "t", "query": "q"}}, timeout=30)
        assert created.status_code == 200, created.text
    else:
        assert requests.get(f"{url}/health", timeout=10).status_code == 200
        answer = requests.post(f"{url}/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 1}, timeout=60)
        assert answer.status_code == 200, answer.text


def _raw(url: str, data: bytes, *, wait_s: float = 10.0) -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes it (at most ``wait_s``)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=wait_s) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


@pytest.mark.parametrize("name", list(SERVICES))
def test_a_30_mb_body_is_refused_with_413_within_10_s_and_the_service_keeps_serving(name: str, request) -> None:
    fixture, path = SERVICES[name]
    url = request.getfixturevalue(fixture)
    body = b'{"messages": [{"role": "user", "content": "' + b"a" * (30 << 20) + b'"}]}'

    def chunked() -> Iterator[bytes]:  # no Content-Length: the cap applies as the body streams in
        for start in range(0, len(body), 1 << 20):
            yield body[start : start + (1 << 20)]

    for data in (body, chunked()):
        started = time.monotonic()
        response = requests.post(f"{url}{path}", data=data, headers={"Content-Type": "application/json"}, timeout=30)
        took = time.monotonic() - started
        assert response.status_code == 413, response.text[:300]
        assert "--max-request-bytes" in response.json()["error"]["message"]
        assert took < 10, f"the 413 took {took:.1f} s"
        _still_serves(name, url)
        print(f"{name}: 30 MB body ({'declared' if isinstance(data, bytes) else 'chunked'}): 413 in {took:.2f} s")


@pytest.mark.parametrize("name", list(SERVICES))
def test_headers_over_the_limit_are_refused_with_431(name: str, request) -> None:
    url = request.getfixturevalue(SERVICES[name][0])
    answer = _raw(url, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20))  # never finished
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert b"--max-header-bytes" in answer
    _still_serves(name, url)


@pytest.mark.parametrize("name", list(SERVICES))
def test_connections_that_trickle_their_headers_are_closed_after_the_header_timeout(name: str, request) -> None:
    url = request.getfixturevalue(SERVICES[name][0])
    host, port = url.removeprefix("http://").rsplit(":", 1)

    def trickle(i: int) -> tuple[float, bytes]:
        """One header byte every 0.1 s (each byte would restart uvicorn's keep-alive timeout) until closed; every
        other connection first has a request answered (the deadline starts again after each answer)."""
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            if i % 2:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                head = b""
                while b"\r\n\r\n" not in head:
                    head += sock.recv(65536)
                assert head.startswith(b"HTTP/1.1 200"), head
                head, _, body = head.partition(b"\r\n\r\n")
                length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length:")))  # fmt: skip
                while len(body) < length:  # the whole answer, or its late body reads as the next one's
                    body += sock.recv(65536)
            started = time.monotonic()
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            sock.settimeout(0.1)
            while time.monotonic() - started < 10:
                try:
                    sock.sendall(b"a")
                    if answer := sock.recv(65536):
                        return time.monotonic() - started, answer
                except TimeoutError:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    break
            return time.monotonic() - started, b""

    with ThreadPoolExecutor(max_workers=20) as pool:
        held = list(pool.map(trickle, range(20)))
    for took, answer in held:
        assert HEADER_TIMEOUT_S - 0.5 < took < HEADER_TIMEOUT_S + 3, took
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    _still_serves(name, url)
    print(f"{name}: 20 trickling connections answered 408 after {min(t for t, _ in held):.2f}-"
          f"{max(t for t, _ in held):.2f} s (header timeout {HEADER_TIMEOUT_S} s)")  # fmt: skip


@pytest.mark.parametrize("name", list(SERVICES))
def test_an_idle_connection_is_closed_quietly_after_the_header_timeout(name: str, request) -> None:
    url = request.getfixturevalue(SERVICES[name][0])
    started = time.monotonic()
    assert _raw(url, b"") == b""  # no 408 to a connection that sent nothing: a client may reuse it meanwhile
    assert HEADER_TIMEOUT_S - 0.2 < time.monotonic() - started < HEADER_TIMEOUT_S + 3

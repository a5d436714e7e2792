"""Promoting a LoRA adapter under a stable name on the policy server (``/v1/load_lora_adapter`` with
``load_inplace``): the name never stops answering, each request is served wholly by the old or wholly
by the new adapter, a directory that fails to load leaves the old adapter serving, and swapping back
to the previous directory is a rollback.

The committed tiny policy serves two adapters, A and B, whose greedy answers differ; their versioned
names (``cand-a``, ``cand-b``) give the reference answers, as an evaluation of a candidate would.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from tests.conftest import TINY_POLICY
from tests.test_policy_server import _error, _make_adapter
from trainers.policy_server import create_app, serve_in_background

pytest.importorskip("peft")

torch.set_num_threads(1)

STABLE = "agent"
PROMPTS = [
    [{"role": "user", "content": "Find Ana's phone."}],
    [{"role": "system", "content": "You are an assistant."}, {"role": "user", "content": "Book a table for two."}],
    [{"role": "user", "content": "What is the weather in Oslo?"}],
]


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("swap")
    return {"A": _make_adapter(TINY_POLICY, root / "A", seed=1), "B": _make_adapter(TINY_POLICY, root / "B", seed=2)}


@pytest.fixture(scope="module")
def served(adapters: dict[str, Path]) -> Iterator[tuple[str, Any]]:
    app = create_app(str(TINY_POLICY), served_model_name="tiny-policy", seed=0)
    with serve_in_background(app) as url:
        with httpx.Client(base_url=url, timeout=60) as http:
            for name, key in (("cand-a", "A"), ("cand-b", "B"), (STABLE, "A")):
                r = http.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(adapters[key])})
                assert r.status_code == 200, r.text
        yield url, app


@pytest.fixture(scope="module")
def reference(served: tuple[str, Any]) -> dict[str, list[list[int]]]:
    """Greedy token ids of each prompt under A and under B (from their versioned names)."""
    with httpx.Client(base_url=served[0], timeout=60) as http:
        answers = {key: [_greedy(http, name, i) for i in range(len(PROMPTS))] for key, name in
                   (("A", "cand-a"), ("B", "cand-b"))}  # fmt: skip
    assert all(a != b for a, b in zip(answers["A"], answers["B"], strict=True)), "A and B must answer differently"
    return answers


def _body(model: str, prompt: int) -> dict[str, Any]:
    return {"model": model, "messages": PROMPTS[prompt], "temperature": 0, "max_tokens": 6, "ignore_eos": True,
            "return_token_ids": True}  # fmt: skip


def _greedy(http: httpx.Client, model: str, prompt: int) -> list[int]:
    r = http.post("/v1/chat/completions", json=_body(model, prompt))
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["token_ids"]


def _swap(http: httpx.Client, path: Path) -> httpx.Response:
    return http.post("/v1/load_lora_adapter", json={"lora_name": STABLE, "lora_path": str(path), "load_inplace": True})


def _root(http: httpx.Client, name: str) -> str | None:
    cards = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
    return cards[name]["root"] if name in cards else None


def test_swapping_under_load_answers_every_request_with_one_whole_adapter(
    served: tuple[str, Any], adapters: dict[str, Path], reference: dict[str, list[list[int]]]
) -> None:
    url, app = served
    stop = threading.Event()
    answers: list[tuple[int, int, Any]] = []  # (prompt, status, token ids or error text)

    def client(seed: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            i = seed
            while not stop.is_set():
                prompt = i % len(PROMPTS)
                r = http.post("/v1/chat/completions", json=_body(STABLE, prompt))
                ok = r.status_code == 200
                answers.append((prompt, r.status_code, r.json()["choices"][0]["token_ids"] if ok else r.text))
                i += 1

    engine = app.state.engine
    parameters = sum(1 for _ in engine.model.parameters())
    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    swaps: list[httpx.Response] = []
    try:
        with httpx.Client(base_url=url, timeout=60) as http:
            for n in range(12):
                seen = len(answers)
                deadline = time.monotonic() + 20
                while len(answers) < seen + 4 and time.monotonic() < deadline:  # traffic on each adapter
                    time.sleep(0.01)
                swaps.append(_swap(http, adapters["B" if n % 2 == 0 else "A"]))
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    for r in swaps:
        assert r.status_code == 200 and r.text == f"Success: LoRA adapter '{STABLE}' added successfully.", r.text
    failed = [(status, text) for _, status, text in answers if status != 200]
    assert not failed, f"{len(failed)} of {len(answers)} requests failed during the swaps, e.g. {failed[0]}"
    by = {"A": 0, "B": 0}
    for prompt, _, ids in answers:
        owner = next((key for key in by if ids == reference[key][prompt]), None)
        assert owner is not None, f"prompt {prompt} answered {ids}: neither A's nor B's greedy answer"
        by[owner] += 1
    assert by["A"] > 0 and by["B"] > 0, by
    assert len(answers) >= 12 * 4
    # the last swap went to A: the name answers and lists A, and no replaced adapter's weights stay behind
    with httpx.Client(base_url=url, timeout=60) as http:
        assert [_greedy(http, STABLE, i) for i in range(len(PROMPTS))] == reference["A"]
        assert _root(http, STABLE) == str(adapters["A"].resolve())
    assert sum(1 for _ in engine.model.parameters()) == parameters


def _broken_copies(adapter: Path, root: Path) -> dict[str, Path]:
    corrupt, wrong_rank = root / "corrupt-config", root / "wrong-rank"
    for out in (corrupt, wrong_rank):
        shutil.copytree(adapter, out)
    (corrupt / "adapter_config.json").write_text('{"peft_type": "LORA", "r": ')
    config = json.loads((adapter / "adapter_config.json").read_text())
    (wrong_rank / "adapter_config.json").write_text(json.dumps({**config, "r": config["r"] // 2}))
    return {"corrupt": corrupt, "wrong_rank": wrong_rank}


def test_a_swap_that_fails_to_load_keeps_the_old_adapter_serving(
    served: tuple[str, Any], adapters: dict[str, Path], reference: dict[str, list[list[int]]], tmp_path: Path
) -> None:
    from langgraph_evolver.errors import PolicyEndpointError
    from trainers.sync import swap_adapter

    url, app = served
    broken = _broken_copies(adapters["B"], tmp_path)
    engine = app.state.engine
    with httpx.Client(base_url=url, timeout=60) as http:
        assert _swap(http, adapters["A"]).status_code == 200
        parameters = {n for n, _ in engine.model.named_parameters()}
        assert "Could not read the LoRA adapter" in _error(_swap(http, broken["corrupt"]), 400)
        assert "does not fit the served model" in _error(_swap(http, broken["wrong_rank"]), 400)
        with pytest.raises(PolicyEndpointError, match="does not fit the served model"):
            swap_adapter(url, STABLE, broken["wrong_rank"])
        assert "No adapter found" in _error(_swap(http, tmp_path / "missing"), 404)
        assert [_greedy(http, STABLE, i) for i in range(len(PROMPTS))] == reference["A"]
        assert _root(http, STABLE) == str(adapters["A"].resolve())
        assert {n for n, _ in engine.model.named_parameters()} == parameters, "a failed load left weights behind"


def test_swap_adapter_promotes_and_rolls_back(
    served: tuple[str, Any], adapters: dict[str, Path], reference: dict[str, list[list[int]]]
) -> None:
    from trainers.sync import swap_adapter

    url = served[0]
    with httpx.Client(base_url=url, timeout=60) as http:
        assert _swap(http, adapters["A"]).status_code == 200
        swap_adapter(f"{url}/v1", STABLE, adapters["B"])  # promote B
        assert [_greedy(http, STABLE, i) for i in range(len(PROMPTS))] == reference["B"]
        assert _root(http, STABLE) == str(adapters["B"].resolve())
        swap_adapter(url, STABLE, adapters["A"])  # roll back: the same call with the previous directory
        assert [_greedy(http, STABLE, i) for i in range(len(PROMPTS))] == reference["A"]
        assert _root(http, STABLE) == str(adapters["A"].resolve())
        swap_adapter(url, STABLE, adapters["A"])  # the directory it already serves: nothing changes
        assert [_greedy(http, STABLE, i) for i in range(len(PROMPTS))] == reference["A"]

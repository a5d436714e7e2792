"""Prefix caching and runtime weight changes of the policy server (``trainers.serving``).

The cache must not change what is sampled: a prompt served from cached KV gives the same ids and
(up to float rounding, the same size as batching itself causes) the same logprobs as a cold
prefill, and a changed adapter or base weights never answer from the old weights' KV.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from tests.test_policy_server import MESSAGES, SIZE, TOOLS, _make_adapter, assert_close, returned_logprobs
from trainers.policy_server import create_app, serve_in_background
from trainers.serving.cache import PrefixCache
from trainers.serving.engine import PolicyEngine
from trainers.serving.sampling import SamplingParams
from trainers.tiny import build_model, build_tiny_tokenizer

torch.set_num_threads(1)

ROUNDING = 1e-5
"""Logprob difference allowed between a cached and a cold prefill (float32 summation order)."""


def _save_model(out: Path, noise: float) -> Path:
    """The test's tiny model, its weights shifted by Gaussian ``noise`` (another training step)."""
    tokenizer = build_tiny_tokenizer(200)
    model = build_model(tokenizer, SIZE)
    torch.manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(noise * torch.randn_like(param))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cache")
    base = _save_model(root / "tiny-base", 0.0)
    return {
        "base": base,
        "other": _save_model(root / "other-weights", 0.05),  # same architecture, other weights
        "a1": _make_adapter(base, root / "a1", 1),
        "a2": _make_adapter(base, root / "a2", 2),
    }


def _conversation(engine: PolicyEngine, turns: int) -> list[list[int]]:
    """Prompts of an agent conversation: each is the previous prompt + a completion + a tool answer."""
    tok = engine.tokenizer
    text = tok.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    prompts = [tok(text, add_special_tokens=False).input_ids]
    for turn in range(turns - 1):
        answer = f"<|im_end|>\n<|im_start|>tool\nresult {turn}<|im_end|>\n<|im_start|>assistant\n"
        prompts.append(prompts[-1] + tok(f"call {turn}" + answer, add_special_tokens=False).input_ids)
    return prompts


def _run(engine: PolicyEngine, prompts: list[list[int]], params: SamplingParams, model: str | None = None):
    return [engine.generate([p], [params], model=model)[0] for p in prompts]


@pytest.mark.parametrize(
    "params", [SamplingParams(temperature=0, max_tokens=24), SamplingParams(seed=5, max_tokens=24)]
)
def test_cached_prefixes_sample_what_a_cold_prefill_samples(dirs: dict[str, Path], params: SamplingParams) -> None:
    cold = PolicyEngine(dirs["base"])
    warm = PolicyEngine(dirs["base"], prefix_cache=PrefixCache(block_size=8))
    prompts = _conversation(cold, 5)
    want, got = _run(cold, prompts, params), _run(warm, prompts, params)
    for a, b in zip(want, got, strict=True):
        assert a.token_ids == b.token_ids
        assert_close(b.logprobs, a.logprobs, ROUNDING)
    assert [c.cached_tokens for c in want] == [0] * 5
    assert got[0].cached_tokens == 0
    for completion, previous in zip(got[1:], prompts[:-1], strict=True):  # the previous prompt, whole blocks
        assert completion.cached_tokens >= len(previous) - 8
    assert cold.prefill_stats.saved_tokens == 0
    saved = warm.prefill_stats.saved_tokens
    assert saved == sum(c.cached_tokens for c in got) and saved > 0.6 * sum(map(len, prompts))
    assert warm.prefix_cache.stats.hit_tokens == saved


def test_rows_with_different_cached_prefixes_share_one_prefill(dirs: dict[str, Path]) -> None:
    cold = PolicyEngine(dirs["base"])
    warm = PolicyEngine(dirs["base"], prefix_cache=PrefixCache(block_size=8))
    prompts = _conversation(cold, 4)
    greedy = SamplingParams(temperature=0, max_tokens=16)
    warm.generate([prompts[1]], [greedy])  # cached: prompts[0] and [1] share blocks, [2] and [3] extend them
    batch = [prompts[3], prompts[0], prompts[2], prompts[0]]  # identical prompts are run once
    got = warm.generate(batch, [greedy] * 4)
    assert warm.prefill_stats.computed_tokens < len(prompts[1]) + sum(len(p) for p in prompts[2:]) - 16
    for prompt, completion in zip(batch, got, strict=True):
        [want] = cold.generate([prompt], [greedy])
        assert completion.token_ids == want.token_ids
        assert_close(completion.logprobs, want.logprobs, ROUNDING)


def test_eviction_keeps_the_cache_bounded_and_exact(dirs: dict[str, Path]) -> None:
    cache = PrefixCache(block_size=8, max_tokens=64)
    warm, cold = PolicyEngine(dirs["base"], prefix_cache=cache), PolicyEngine(dirs["base"])
    greedy = SamplingParams(temperature=0, max_tokens=8)
    prompts = _conversation(cold, 6)
    for prompt in prompts + prompts[::-1]:
        [got], [want] = warm.generate([prompt], [greedy]), cold.generate([prompt], [greedy])
        assert got.token_ids == want.token_ids
        assert cache.cached_tokens <= 64
    assert cache.stats.evicted_blocks > 0


# -- over HTTP: adapters, weight reloads and their invalidation ------------------------------------
@pytest.fixture(scope="module")
def served(dirs: dict[str, Path]) -> Iterator[tuple[httpx.Client, Any]]:
    app = create_app(dirs["base"], max_new_tokens_cap=32, prefix_cache_block_size=8)
    with serve_in_background(app) as url, httpx.Client(base_url=url, timeout=120) as http:
        yield http, app


def _greedy(http: httpx.Client, model: str = "tiny-base", messages: list | None = None) -> dict[str, Any]:
    body = {"model": model, "messages": messages or MESSAGES, "tools": TOOLS, "temperature": 0, "max_tokens": 12,
            "ignore_eos": True, "logprobs": True, "return_token_ids": True}  # fmt: skip
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _reference(model_dir: Path, adapter: Path | None, prompt_ids: list[int]) -> tuple[list[int], list[float]]:
    """Greedy ids and logprobs of a fresh engine on these weights (no cache)."""
    engine = PolicyEngine(model_dir, served_model_name="tiny-base")
    model = None
    if adapter is not None:
        engine.load_adapter("ref", str(adapter))
        model = "ref"
    [c] = engine.generate([prompt_ids], [SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)], model=model)
    return list(c.token_ids), list(c.logprobs)


def _metrics(http: httpx.Client) -> dict[str, float]:
    lines = http.get("/metrics").text.splitlines()
    return {k.removeprefix("policy_server_"): float(v) for k, v in (x.split() for x in lines if not x.startswith("#"))}


def _check(data: dict[str, Any], want: tuple[list[int], list[float]]) -> None:
    choice = data["choices"][0]
    assert choice["token_ids"] == want[0]
    assert_close(returned_logprobs(choice), want[1], ROUNDING)


def test_a_replaced_adapter_never_answers_from_the_old_adapters_cache(served, dirs: dict[str, Path]) -> None:
    http, _ = served

    def load(path: Path) -> httpx.Response:
        return http.post("/v1/load_lora_adapter", json={"lora_name": "policy", "lora_path": str(path)})

    assert load(dirs["a1"]).status_code == 200
    first = _greedy(http, "policy")
    assert first["system_fingerprint"] == "policy"
    prompt = first["prompt_token_ids"]
    _check(first, _reference(dirs["base"], dirs["a1"], prompt))
    again = _greedy(http, "policy")
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0  # served from the cache, same answer
    _check(again, _reference(dirs["base"], dirs["a1"], prompt))

    r = load(dirs["a1"])  # same name, same path: idempotent, the cache stays
    assert r.status_code == 200 and "already loaded" in r.text
    assert _greedy(http, "policy")["usage"]["prompt_tokens_details"]["cached_tokens"] > 0

    invalidated = _metrics(http)["prefix_cache_invalidated_blocks_total"]
    r = load(dirs["a2"])  # same name, another path: replaced, its cached prefixes dropped
    assert r.status_code == 200 and "added successfully" in r.text
    assert _metrics(http)["prefix_cache_invalidated_blocks_total"] > invalidated
    replaced = _greedy(http, "policy")
    assert replaced["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    _check(replaced, _reference(dirs["base"], dirs["a2"], prompt))
    old, new = returned_logprobs(first["choices"][0]), returned_logprobs(replaced["choices"][0])
    assert new != pytest.approx(old, abs=1e-3), "the adapters answer alike: stale KV would go unnoticed"
    assert http.post("/v1/unload_lora_adapter", json={"lora_name": "policy"}).status_code == 200


def test_update_weights_from_disk_serves_the_new_weights_and_drops_the_cache(served, dirs: dict[str, Path]) -> None:
    http, app = served
    before = _greedy(http)
    assert before["system_fingerprint"] == "base"
    prompt = before["prompt_token_ids"]
    assert _greedy(http)["usage"]["prompt_tokens_details"]["cached_tokens"] > 0

    bad = http.post("/update_weights_from_disk", json={"model_path": str(dirs["base"] / "missing"), "version": "v9"})
    assert bad.status_code == 400 and "config.json" in bad.json()["error"]["message"]
    kept = _greedy(http)  # the old weights keep serving, under the old version
    assert kept["system_fingerprint"] == "base" and kept["choices"][0]["token_ids"] == before["choices"][0]["token_ids"]

    r = http.post("/update_weights_from_disk", json={"model_path": str(dirs["other"]), "version": "step-1"})
    assert r.status_code == 200 and r.json()["success"] is True and r.json()["version"] == "step-1"
    assert app.state.engine.prefix_cache.cached_tokens == 0
    after = _greedy(http)
    assert after["system_fingerprint"] == "step-1"
    assert after["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    want = _reference(dirs["other"], None, prompt)
    _check(after, want)
    assert want[1] != pytest.approx(returned_logprobs(before["choices"][0]), abs=1e-3), "the weights did not change"
    # an adapter on the new base: LoRA deltas apply to the reloaded weights
    assert (
        http.post("/v1/load_lora_adapter", json={"lora_name": "lora", "lora_path": str(dirs["a1"])}).status_code == 200
    )
    _check(_greedy(http, "lora"), _reference(dirs["other"], dirs["a1"], prompt))
    assert http.post("/v1/unload_lora_adapter", json={"lora_name": "lora"}).status_code == 200

    back = http.post("/update_weights_from_disk", json={"model_path": str(dirs["base"]), "version": "step-2"})
    assert back.status_code == 200 and back.json()["version"] == "step-2"
    restored = _greedy(http)
    assert restored["system_fingerprint"] == "step-2"
    _check(restored, (before["choices"][0]["token_ids"], returned_logprobs(before["choices"][0])))


def test_metrics_report_the_prefill_tokens_saved(served) -> None:
    http, _ = served
    start = _metrics(http)
    conversation = list(MESSAGES)
    for turn in range(3):
        data = _greedy(http, messages=conversation)
        conversation = conversation + [
            {"role": "assistant", "content": data["choices"][0]["message"]["content"] or "ok"},
            {"role": "user", "content": f"and then {turn}?"},
        ]
    end = _metrics(http)
    assert end["prefix_cache_enabled"] == 1
    saved = end["prefill_saved_tokens_total"] - start["prefill_saved_tokens_total"]
    assert saved > 0 and saved == end["prefix_cache_hits_total"] - start["prefix_cache_hits_total"]
    assert end["prefill_tokens_total"] - end["prefill_computed_tokens_total"] == end["prefill_saved_tokens_total"]
    assert 0 < end["prefix_cache_hit_rate"] <= 1


def _joined_run(engine: PolicyEngine, prompts: list[list[int]]) -> list:
    """Half the prompts decode a few steps, then the rest join the batch; rows end one by one (select, trim)."""

    def greedy(i: int) -> SamplingParams:
        return SamplingParams(temperature=0, max_tokens=6 + 5 * i, ignore_eos=True)

    first = [engine.new_row(p, greedy(i)) for i, p in enumerate(prompts[::2])]
    later = [engine.new_row(p, greedy(i + 2)) for i, p in enumerate(prompts[1::2])]
    model = engine.served_model_name
    with torch.inference_mode():
        batch, _ = engine.prefill(first, model)
        for _ in range(3):
            batch, _ = engine.decode(batch)
        assert batch is not None
        new, _ = engine.prefill(later, model)
        batch = engine.join(batch, new)
        while batch is not None:
            batch, _ = engine.decode(batch)
    return first + later


def test_kv_growing_in_place_matches_concatenation(dirs: dict[str, Path]) -> None:
    concat = PolicyEngine(dirs["base"], kv_spare_columns=0)
    grown = PolicyEngine(dirs["base"], kv_spare_columns=2)  # reallocates every other step
    prompts = _conversation(concat, 4)
    for want, got in zip(_joined_run(concat, prompts), _joined_run(grown, prompts), strict=True):
        assert got.token_ids == want.token_ids
        assert_close(got.logprobs, want.logprobs, ROUNDING)


def test_the_lean_decode_step_matches_transformers_forward(dirs: dict[str, Path]) -> None:
    lean = PolicyEngine(dirs["base"], prefix_cache=PrefixCache(block_size=8))
    plain = PolicyEngine(dirs["base"], prefix_cache=PrefixCache(block_size=8), lean_decode=False)
    assert lean.lean_decoder is not None and plain.lean_decoder is None
    for engine in (lean, plain):  # and with a LoRA adapter on q/v
        engine.load_adapter("a1", str(dirs["a1"]))
    prompts = _conversation(lean, 4)
    for model in (None, "a1"):
        for params in (SamplingParams(temperature=0, max_tokens=16), SamplingParams(seed=3, max_tokens=16)):
            for want, got in zip(_run(plain, prompts, params, model), _run(lean, prompts, params, model), strict=True):
                assert got.token_ids == want.token_ids
                assert_close(got.logprobs, want.logprobs, ROUNDING)
    for want, got in zip(_joined_run(plain, prompts), _joined_run(lean, prompts), strict=True):
        assert got.token_ids == want.token_ids

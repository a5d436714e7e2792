"""Offline tests of the local policy server (``trainers.policy_server``).

A tiny random Qwen2 model with the tiny chat tokenizer is saved once per module; the real
server runs with uvicorn on a free 127.0.0.1 port in a background thread. Returned logprobs are
checked against an independent forward pass of the same weights (and of PEFT's own LoRA model).
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from tests.conftest import TINY_POLICY
from trainers.chat_format import normalize_messages
from trainers.policy_server import build_choice, create_app, serve_in_background
from trainers.serving.engine import PolicyEngine
from trainers.serving.errors import GenerationError
from trainers.serving.sampling import Completion, SamplingParams
from trainers.serving.scheduler import BatchScheduler
from trainers.tiny import ModelSize, build_model, build_tiny_tokenizer

torch.set_num_threads(1)

SIZE = ModelSize(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, intermediate_size=128
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_contacts",
            "description": "Find contacts.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_contact",
            "parameters": {"type": "object", "properties": {"contact_id": {"type": "string"}}},
        },
    },
]
MESSAGES = [
    {"role": "system", "content": "Use the tools to act for the user."},
    {"role": "user", "content": "What is Pia's phone number?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_0",
                "type": "function",
                "function": {"name": "search_contacts", "arguments": '{"query": "Pia"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_0", "content": '[{"id": "c7", "name": "Pia"}]'},
]


# -- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("policy") / "tiny-base"
    tokenizer = build_tiny_tokenizer(200)
    build_model(tokenizer, SIZE).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _make_adapter(model_dir: Path, out: Path, seed: int) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir)
    torch.manual_seed(seed)
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def adapter_dirs(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {name: _make_adapter(model_dir, root / name, seed) for name, seed in (("v1", 1), ("v2", 2))}


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[tuple[str, Any]]:
    app = create_app(model_dir, max_batch_size=32, max_new_tokens_cap=64)
    with serve_in_background(app) as url:
        yield url, app


@pytest.fixture(scope="module")
def url(server: tuple[str, Any]) -> str:
    return server[0]


@pytest.fixture(scope="module")
def http(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def ref_model(model_dir: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir).eval()


# -- helpers -------------------------------------------------------------------------------------
def chat(http: httpx.Client, **body: Any) -> dict[str, Any]:
    body.setdefault("model", "tiny-base")
    body.setdefault("messages", MESSAGES)
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def expected_prompt_ids(tokenizer, messages: list[dict], tools: list[dict] | None) -> list[int]:
    text = tokenizer.apply_chat_template(
        normalize_messages(messages), tools=tools, add_generation_prompt=True, tokenize=False
    )
    return tokenizer(text, add_special_tokens=False).input_ids


def reference_logprobs(
    model, prompt_ids: Sequence[int], completion_ids: Sequence[int], *, temperature: float, top_p: float = 1.0
) -> list[float]:
    """Logprobs of ``completion_ids`` under the distribution a sampler with these settings draws from."""
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].double()
    logp = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    if top_p < 1:
        sorted_logp, order = logp.sort(dim=-1, descending=True)
        mass_before = sorted_logp.exp().cumsum(-1) - sorted_logp.exp()
        keep_sorted = mass_before < top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        logp = torch.log_softmax(logp.masked_fill(~keep, float("-inf")), dim=-1)
    return logp.gather(1, torch.tensor(completion_ids)[:, None])[:, 0].tolist()


def returned_logprobs(choice: dict[str, Any]) -> list[float]:
    return [entry["logprob"] for entry in choice["logprobs"]["content"]]


def assert_close(got: Sequence[float], want: Sequence[float], tol: float) -> None:
    assert len(got) == len(want)
    worst = max((abs(a - b) for a, b in zip(got, want, strict=True)), default=0.0)
    assert worst <= tol, f"logprobs differ by {worst:.2e} > {tol}"


# -- the response contract ---------------------------------------------------------------------
def test_ids_text_logprobs_and_usage_are_consistent(http: httpx.Client, tokenizer) -> None:
    data = chat(
        http,
        tools=TOOLS,
        tool_choice="none",
        n=2,
        seed=11,
        max_tokens=40,
        logprobs=True,
        top_logprobs=3,
        return_token_ids=True,
    )
    assert data["object"] == "chat.completion" and data["id"].startswith("chatcmpl-")
    assert data["model"] == "tiny-base"
    prompt_ids = data["prompt_token_ids"]
    assert prompt_ids == expected_prompt_ids(tokenizer, MESSAGES, TOOLS)
    assert tokenizer.decode(prompt_ids).endswith("<|im_start|>assistant\n")
    assert [c["index"] for c in data["choices"]] == [0, 1]
    total = 0
    for choice in data["choices"]:
        ids = choice["token_ids"]
        message = choice["message"]
        assert message["role"] == "assistant" and message["tool_calls"] == []
        assert 1 <= len(ids) <= 40
        if choice["finish_reason"] == "stop":
            assert ids[-1] == tokenizer.eos_token_id
            assert tokenizer.decode(ids[:-1], skip_special_tokens=True) == message["content"]
        else:
            assert choice["finish_reason"] == "length" and len(ids) == 40
            assert tokenizer.decode(ids, skip_special_tokens=True) == message["content"]
        entries = choice["logprobs"]["content"]
        assert len(entries) == len(ids)
        for tid, entry in zip(ids, entries, strict=True):
            assert math.isfinite(entry["logprob"]) and entry["logprob"] <= 0
            assert entry["token"] == tokenizer.decode([tid], clean_up_tokenization_spaces=False)
            assert entry["bytes"] == list(entry["token"].encode())
            top = [t["logprob"] for t in entry["top_logprobs"]]
            assert len(top) == 3 and top == sorted(top, reverse=True)
            assert entry["logprob"] <= top[0] + 1e-6
        total += len(ids)
    cached = data["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert 0 <= cached < len(prompt_ids) and cached % 16 == 0  # whole blocks of earlier requests' prompts
    assert data["usage"] == {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": total,
        "total_tokens": len(prompt_ids) + total,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    assert data["system_fingerprint"] == "base"
    assert data["choices"][0]["token_ids"] != data["choices"][1]["token_ids"]


def test_ids_are_null_unless_requested(http: httpx.Client) -> None:
    data = chat(http, max_tokens=3, logprobs=None, n=None, stream=None, top_logprobs=None)  # nulls = defaults
    assert data["prompt_token_ids"] is None
    assert data["choices"][0]["token_ids"] is None and data["choices"][0]["logprobs"] is None
    assert data["usage"]["completion_tokens"] <= 3


def test_greedy_is_deterministic_and_reports_raw_logprobs(http: httpx.Client, ref_model) -> None:
    first = chat(http, temperature=0, max_tokens=16, logprobs=True, return_token_ids=True)
    second = chat(http, temperature=0, max_tokens=16, logprobs=True, return_token_ids=True)
    a, b = first["choices"][0], second["choices"][0]
    assert a["token_ids"] == b["token_ids"] and returned_logprobs(a) == returned_logprobs(b)
    want = reference_logprobs(ref_model, first["prompt_token_ids"], a["token_ids"], temperature=1.0)
    assert_close(returned_logprobs(a), want, 1e-4)
    # greedy: every token is the argmax of the raw logits
    ids = torch.tensor([first["prompt_token_ids"] + a["token_ids"]])
    with torch.no_grad():
        logits = ref_model(ids).logits[0, len(first["prompt_token_ids"]) - 1 : -1]
    assert logits.argmax(-1).tolist() == a["token_ids"]


@pytest.mark.parametrize(("temperature", "top_p"), [(0.7, 1.0), (1.3, 0.6)])
def test_logprobs_are_the_sampling_distribution(http: httpx.Client, ref_model, temperature: float, top_p: float):
    data = chat(
        http, temperature=temperature, top_p=top_p, n=3, seed=5, max_tokens=24, logprobs=True, return_token_ids=True
    )
    for choice in data["choices"]:
        want = reference_logprobs(
            ref_model, data["prompt_token_ids"], choice["token_ids"], temperature=temperature, top_p=top_p
        )
        assert all(math.isfinite(w) for w in want), "a sampled token lies outside the top-p nucleus"
        assert_close(returned_logprobs(choice), want, 1e-4)


def test_seed_makes_sampling_reproducible(http: httpx.Client) -> None:
    a = chat(http, seed=123, max_tokens=20, return_token_ids=True)["choices"][0]["token_ids"]
    b = chat(http, seed=123, max_tokens=20, return_token_ids=True)["choices"][0]["token_ids"]
    c = chat(http, seed=124, max_tokens=20, return_token_ids=True)["choices"][0]["token_ids"]
    assert a == b and a != c


def test_max_tokens_and_ignore_eos(http: httpx.Client) -> None:
    data = chat(http, max_completion_tokens=7, ignore_eos=True, return_token_ids=True)
    assert data["choices"][0]["finish_reason"] == "length"
    assert len(data["choices"][0]["token_ids"]) == 7 == data["usage"]["completion_tokens"]
    capped = chat(http, max_tokens=10_000, ignore_eos=True, temperature=0)  # server cap is 64
    assert capped["usage"]["completion_tokens"] == 64


# -- errors --------------------------------------------------------------------------------------
def _error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == status
    return error["message"]


def test_errors_use_the_vllm_shape_and_the_server_survives(http: httpx.Client) -> None:
    def post(body: dict[str, Any]) -> httpx.Response:
        return http.post("/v1/chat/completions", json=body)

    assert "nope" in _error(post({"model": "nope", "messages": MESSAGES}), 404)
    assert "logprobs" in _error(post({"messages": MESSAGES, "top_logprobs": 2}), 400)
    assert "temperature" in _error(post({"messages": MESSAGES, "temperature": -1}), 400)
    assert "messages" in _error(post({"model": "tiny-base"}), 400)
    assert "role" in _error(post({"messages": [{"role": "robot", "content": "hi"}]}), 400)
    assert "tool_choice" in _error(post({"messages": MESSAGES, "tools": TOOLS, "tool_choice": "sometimes"}), 400)
    assert "stream" in _error(post({"messages": MESSAGES, "stream": True}), 400)
    headers = {"content-type": "application/json"}
    assert _error(http.post("/v1/chat/completions", content=b"{not json", headers=headers), 400)
    long_prompt = [{"role": "user", "content": "Pia 0 1 2 3 4 5 6 7 8 9 " * 150}]
    message = _error(post({"messages": long_prompt}), 400)
    assert f"maximum context length is {SIZE.max_position_embeddings}" in message and "input tokens" in message
    assert http.get("/health").status_code == 200
    assert chat(http, max_tokens=2)["choices"]


def test_a_prompt_that_cannot_fit_is_refused_before_it_is_tokenized(server, http: httpx.Client, monkeypatch) -> None:
    """3 MB of text (under the 4 MiB body limit) cannot be 2,048 tokens: a 400 without tokenizing it (issue 38)."""
    _, app = server
    tokenized: list[int] = []
    cls = type(app.state.engine.tokenizer)
    call = cls.__call__

    def counting(self: Any, text: Any = None, *args: Any, **kwargs: Any) -> Any:
        tokenized.append(len(text) if isinstance(text, str) else 0)
        return call(self, text, *args, **kwargs)

    monkeypatch.setattr(cls, "__call__", counting)
    huge = [{"role": "user", "content": "Pia " * 750_000}]
    started = time.monotonic()
    message = _error(http.post("/v1/chat/completions", json={"messages": huge}, timeout=60), 400)
    took = time.monotonic() - started
    assert took < 5
    print(f"a 3 MB prompt: 400 in {took:.2f} s, untokenized")
    assert f"maximum context length is {SIZE.max_position_embeddings}" in message
    assert "at least" in message and "without tokenizing" in message
    assert max(tokenized, default=0) < 1000, "the prompt was tokenized"
    assert chat(http, max_tokens=2)["choices"]  # prompts that may fit are tokenized as before


@pytest.mark.parametrize(
    "text",
    [
        "a" * 5000,
        "Pia 0 1 2 3 " * 400,
        "\u1100\u1161\u11a8" * 600,  # Hangul jamo: NFC makes 9 bytes 3
        "\U0001d400" * 800,  # mathematical bold A: 4 bytes, one character
        "<|im_start|>user\n" * 200,
        "\u00e9e\u0301\u4e2d\u6587 " * 500,
    ],
    ids=["one-letter", "words", "jamo", "astral", "special-tokens", "mixed"],
)
def test_the_untokenized_bound_never_exceeds_the_token_count(model_dir: Path, text: str) -> None:
    """The bound the server refuses by is a lower bound on the true token count, for both test tokenizers."""
    from transformers import AutoTokenizer

    from trainers.serving.app import longest_token_bytes

    for tokenizer in (AutoTokenizer.from_pretrained(model_dir), AutoTokenizer.from_pretrained(TINY_POLICY)):
        normalizer = tokenizer.backend_tokenizer.normalizer
        normalized = normalizer.normalize_str(text) if normalizer is not None else text
        least = len(normalized.encode()) // longest_token_bytes(tokenizer)
        assert least <= len(tokenizer(text, add_special_tokens=False).input_ids), type(tokenizer).__name__


def test_models_and_health(http: httpx.Client, model_dir: Path) -> None:
    assert http.get("/health").status_code == 200
    data = http.get("/v1/models").json()
    assert data["object"] == "list"
    base = data["data"][0]
    assert base["id"] == "tiny-base" and base["object"] == "model" and base["parent"] is None
    assert base["root"] == str(model_dir.resolve()) and base["max_model_len"] == SIZE.max_position_embeddings
    assert {"created", "owned_by"} <= set(base)


# -- tool calls ----------------------------------------------------------------------------------
def _completion(tokenizer, text: str, *, eos: bool = True) -> Completion:
    ids = tokenizer(text, add_special_tokens=False).input_ids + ([tokenizer.eos_token_id] if eos else [])
    return Completion(token_ids=tuple(ids), logprobs=(-1.0,) * len(ids), top_logprobs=None, finish_reason="stop")


def test_build_choice_parses_hermes_tool_calls(tokenizer) -> None:
    text = 'Let me look.<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
    choice = build_choice(0, _completion(tokenizer, text), tokenizer, parse_tools=True, return_token_ids=True)
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me look."
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("chatcmpl-tool-")
    assert call["function"]["name"] == "f" and json.loads(call["function"]["arguments"]) == {"x": 1}
    assert choice["token_ids"][-1] == tokenizer.eos_token_id

    only_call = build_choice(0, _completion(tokenizer, text[len("Let me look.") :]), tokenizer, parse_tools=True)
    assert only_call["message"]["content"] is None and len(only_call["message"]["tool_calls"]) == 1


def test_build_choice_keeps_broken_tool_calls_as_content(tokenizer) -> None:
    broken = '<tool_call>{"name": "f", "arguments": {"x": 1}</tool_call>'
    choice = build_choice(0, _completion(tokenizer, broken), tokenizer, parse_tools=True)
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["content"] == broken and choice["message"]["tool_calls"] == []
    good = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    unparsed = build_choice(0, _completion(tokenizer, good), tokenizer, parse_tools=False)
    assert unparsed["message"]["content"] == good and unparsed["finish_reason"] == "stop"


class _Scripted:
    """Replaces the engine's sampler: every row emits ``text`` then EOS (logprob 0)."""

    def __init__(self, engine: PolicyEngine, text: str) -> None:
        self.engine = engine
        self.ids = engine.tokenizer(text, add_special_tokens=False).input_ids + [engine.tokenizer.eos_token_id]
        self.fail_next = False

    def __call__(self, logits: torch.Tensor, rows: list) -> tuple[torch.Tensor, torch.Tensor, None]:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("injected failure")
        tokens = torch.tensor([self.ids[min(len(r.token_ids), len(self.ids) - 1)] for r in rows])
        return tokens, torch.zeros(len(rows)), None


@pytest.fixture(scope="module")
def scripted(model_dir: Path) -> Iterator[tuple[str, _Scripted]]:
    app = create_app(model_dir, served_model_name="scripted")
    text = 'On it.<tool_call>{"name": "get_contact", "arguments": {"contact_id": "c7"}}</tool_call>'
    script = _Scripted(app.state.engine, text)
    app.state.engine._sample = script
    with serve_in_background(app) as base_url:
        yield base_url, script


def test_tool_calls_travel_through_http_openai_and_langchain(scripted: tuple[str, _Scripted]) -> None:
    from langchain_openai import ChatOpenAI
    from openai import OpenAI

    base_url, _ = scripted
    client = OpenAI(base_url=base_url + "/v1", api_key="x")
    response = client.chat.completions.create(
        model="scripted", messages=MESSAGES, tools=TOOLS, logprobs=True, extra_body={"return_token_ids": True}
    )
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "On it."
    assert choice.message.tool_calls[0].function.name == "get_contact"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"contact_id": "c7"}
    assert len(choice.logprobs.content) == len(choice.token_ids)

    llm = ChatOpenAI(
        base_url=base_url + "/v1",
        api_key="x",
        model="scripted",
        disable_streaming=True,
        use_responses_api=False,
        extra_body={"return_token_ids": True},
        logprobs=True,
    )
    message = llm.bind_tools(TOOLS).invoke(MESSAGES)
    assert message.tool_calls == [
        {"name": "get_contact", "args": {"contact_id": "c7"}, "id": message.tool_calls[0]["id"], "type": "tool_call"}
    ]
    assert message.response_metadata["finish_reason"] == "tool_calls"
    assert message.response_metadata["logprobs"]["content"]

    # without tools in the request the text is not parsed (vLLM does the same)
    plain = client.chat.completions.create(model="scripted", messages=MESSAGES)
    assert plain.choices[0].message.tool_calls in (None, []) and "<tool_call>" in plain.choices[0].message.content


def test_stop_strings_and_internal_errors(scripted: tuple[str, _Scripted]) -> None:
    base_url, script = scripted
    with httpx.Client(base_url=base_url, timeout=60) as client:
        body = {"model": "scripted", "messages": MESSAGES, "stop": ["<tool_call>"], "return_token_ids": True}
        data = client.post("/v1/chat/completions", json=body).json()
        choice = data["choices"][0]
        assert choice["finish_reason"] == "stop" and choice["stop_reason"] == "<tool_call>"
        assert choice["message"]["content"] == "On it."
        script.fail_next = True
        assert "injected failure" in _error(client.post("/v1/chat/completions", json=body), 500)
        assert client.get("/health").status_code == 200
        assert client.post("/v1/chat/completions", json=body).status_code == 200


# -- clients ---------------------------------------------------------------------------------------
def test_openai_and_langchain_clients(url: str) -> None:
    import openai
    from langchain_openai import ChatOpenAI
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="x")
    assert "tiny-base" in [m.id for m in client.models.list()]
    response = client.chat.completions.create(
        model="tiny-base",
        messages=MESSAGES,
        max_tokens=8,
        logprobs=True,
        top_logprobs=2,
        extra_body={"return_token_ids": True},
    )
    choice = response.choices[0]
    assert len(choice.token_ids) == len(choice.logprobs.content) == response.usage.completion_tokens
    assert len(response.prompt_token_ids) == response.usage.prompt_tokens
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="missing", messages=MESSAGES)

    llm = ChatOpenAI(
        base_url=url + "/v1",
        api_key="x",
        model="tiny-base",
        disable_streaming=True,
        use_responses_api=False,
        extra_body={"return_token_ids": True},
        logprobs=True,
        max_tokens=8,
    )
    message = llm.invoke("What is Pia's phone number?")
    logprobs = message.response_metadata["logprobs"]["content"]
    assert 1 <= len(logprobs) <= 8 and all(entry["logprob"] <= 0 for entry in logprobs)


# -- batching ------------------------------------------------------------------------------------
async def test_concurrent_requests_are_batched_and_answered_correctly(server, http: httpx.Client, ref_model):
    url, app = server
    stats = app.state.scheduler.stats
    questions = [f"Find contact number {i} for {name}." for i, name in enumerate(["Pia", "Omar", "Lena", "Ravi"] * 8)]

    def body(i: int) -> dict[str, Any]:
        return {
            "model": "tiny-base",
            "messages": [{"role": "user", "content": questions[i]}],
            "seed": 1000 + i,
            "max_tokens": 8 + i % 5,
            "ignore_eos": i % 2 == 0,
            "logprobs": True,
            "return_token_ids": True,
        }

    prefills_before, requests_before = stats.prefills, stats.requests
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        responses = await asyncio.gather(*(client.post("/v1/chat/completions", json=body(i)) for i in range(32)))
    requests_run, prefills_run = stats.requests - requests_before, stats.prefills - prefills_before
    assert requests_run == 32 and prefills_run < 32, "the worker should admit several requests per forward"
    assert stats.max_running_rows > 1
    for i, response in enumerate(responses):
        assert response.status_code == 200, response.text
        data = response.json()
        choice = data["choices"][0]
        assert data["prompt_token_ids"] == expected_prompt_ids(app.state.engine.tokenizer, body(i)["messages"], None)
        if i % 2 == 0:
            assert len(choice["token_ids"]) == 8 + i % 5
        want = reference_logprobs(ref_model, data["prompt_token_ids"], choice["token_ids"], temperature=1.0)
        assert_close(returned_logprobs(choice), want, 1e-3)
    # the same seeded request alone gives the same sample as inside the batch
    alone = http.post("/v1/chat/completions", json=body(3)).json()
    assert alone["choices"][0]["token_ids"] == responses[3].json()["choices"][0]["token_ids"]


async def test_a_disconnected_client_stops_its_generation(server, http: httpx.Client) -> None:
    url, app = server
    scheduler, engine = app.state.scheduler, app.state.engine
    before = scheduler.call(lambda: (scheduler.stats.decode_steps, scheduler.stats.completion_tokens)).result(60)
    body = {"model": "tiny-base", "messages": MESSAGES, "max_tokens": 10_000, "ignore_eos": True}  # capped at 64
    with _first_decode_held_until_cancelled(engine) as decoding:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            request = asyncio.create_task(client.post("/v1/chat/completions", json=body))
            assert await asyncio.to_thread(decoding.wait, 30)
            request.cancel()  # the client gives up (as on a timeout) and its connection closes
            with pytest.raises(asyncio.CancelledError):
                await request
        # the server must notice and cancel the request, which also ends the held decode step
        after = await asyncio.to_thread(
            lambda: scheduler.call(lambda: (scheduler.stats.decode_steps, scheduler.stats.completion_tokens)).result(60)
        )
    steps, tokens = after[0] - before[0], after[1] - before[1]
    assert steps < 5 and tokens == 0, f"the abandoned request kept decoding ({steps} steps, {tokens} tokens)"
    assert http.get("/health").status_code == 200
    data = chat(http, max_tokens=5, ignore_eos=True, return_token_ids=True)
    assert len(data["choices"][0]["token_ids"]) == 5 == data["usage"]["completion_tokens"]


def test_engine_generate_matches_single_rows(model_dir: Path) -> None:
    engine = PolicyEngine(model_dir)
    tok = engine.tokenizer
    texts = [f"<|im_start|>user\n{q}<|im_end|>\n" for q in ("a", "bb cc dd ee")]
    prompts = [tok(t, add_special_tokens=False).input_ids for t in texts]
    params = [SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, top_logprobs=2)] * 2
    batched = engine.generate(prompts, params)
    for prompt, together in zip(prompts, batched, strict=True):
        [single] = engine.generate([prompt], params[:1])
        assert single.token_ids == together.token_ids
        assert_close(single.logprobs, together.logprobs, 1e-4)
        assert together.top_logprobs is not None and len(together.top_logprobs[0]) == 2


def _prompt(engine: PolicyEngine) -> list[int]:
    return engine.tokenizer("<|im_start|>user\nhi<|im_end|>\n", add_special_tokens=False).input_ids


@contextmanager
def _first_decode_held_until_cancelled(engine: PolicyEngine) -> Iterator[threading.Event]:
    """Make the engine's first decode step wait (10 s at most) until a request in its batch is cancelled.

    Yields an event set once that step is waiting: from then on the request is surely decoding.
    """
    decoding, cancelled = threading.Event(), threading.Event()
    decode = engine.decode

    def held(batch):
        if not decoding.is_set():
            for row in batch.rows:
                row.request.future.add_done_callback(lambda _: cancelled.set())
            decoding.set()
            cancelled.wait(10)
        return decode(batch)

    engine.decode = held
    try:
        yield decoding
    finally:
        del engine.decode  # the class's method again


def test_cancelled_requests_stop_decoding(model_dir: Path) -> None:
    engine = PolicyEngine(model_dir)
    scheduler = BatchScheduler(engine, max_batch_size=4)
    try:
        prompt = _prompt(engine)
        with _first_decode_held_until_cancelled(engine) as decoding:
            with scheduler._cv:  # the worker sees both requests at once: one to drop, one to run
                queued = scheduler.submit(prompt, [SamplingParams(max_tokens=400, ignore_eos=True)])
                queued.cancel()  # cancelled before it was admitted
                running = scheduler.submit(prompt, [SamplingParams(max_tokens=400, ignore_eos=True)])
            assert decoding.wait(30)
            assert running.cancel()  # cancelled while decoding
        short = scheduler.submit(prompt, [SamplingParams(max_tokens=5, ignore_eos=True)])
        [completion] = short.result(timeout=60)
        assert len(completion.token_ids) == 5
        with pytest.raises(GenerationError, match="n=5"):
            scheduler.submit(prompt, [SamplingParams()] * 5)
        # control calls run once no batch is running: this waits until the worker is idle
        steps = scheduler.call(lambda: scheduler.stats.decode_steps).result(timeout=60)
        assert steps < 100, "the cancelled row kept decoding"
        assert scheduler.stats.requests == 2 and scheduler.alive
    finally:
        scheduler.close()


def test_a_queue_of_cancelled_requests_does_not_stop_the_worker(model_dir: Path) -> None:
    engine = PolicyEngine(model_dir)
    prompt = _prompt(engine)
    params = [SamplingParams(max_tokens=5, ignore_eos=True)]
    for earlier_batch in (False, True):  # the worker's first pass, and a pass after a batch finished
        scheduler = BatchScheduler(engine, max_batch_size=4)
        try:
            if earlier_batch:
                assert len(scheduler.submit(prompt, params).result(timeout=60)[0].token_ids) == 5
            with scheduler._cv:  # the worker wakes to a queue of cancelled requests only
                for _ in range(2):
                    assert scheduler.submit(prompt, params).cancel()
            deadline = time.monotonic() + 30
            while scheduler._pending and time.monotonic() < deadline:  # until the worker has taken them
                time.sleep(0.001)
            [completion] = scheduler.submit(prompt, params).result(timeout=60)
            assert len(completion.token_ids) == 5 and scheduler.alive
            assert scheduler.stats.completion_tokens == (10 if earlier_batch else 5)
        finally:
            scheduler.close()


def test_a_worker_bug_fails_every_request_and_later_submits(model_dir: Path) -> None:
    engine = PolicyEngine(model_dir)
    scheduler = BatchScheduler(engine, max_batch_size=2)
    prompt = _prompt(engine)

    def broken(finished: list) -> int:
        raise RuntimeError("bug in the loop")

    scheduler._finish = broken
    try:
        with scheduler._cv:  # the first request fills the batch, the second stays queued
            running = scheduler.submit(prompt, [SamplingParams(max_tokens=5)] * 2)
            queued = scheduler.submit(prompt, [SamplingParams(max_tokens=5)])
        for future in (running, queued):
            with pytest.raises(RuntimeError, match="bug in the loop"):
                future.result(timeout=30)
        assert not scheduler.alive
        with pytest.raises(GenerationError, match="worker stopped: RuntimeError: bug in the loop; restart the server"):
            scheduler.submit(prompt, [SamplingParams()])
    finally:
        scheduler.close()


def test_stop_strings_decode_only_the_tail(model_dir: Path) -> None:
    class CountingTokenizer:
        def __init__(self, tokenizer) -> None:
            self.tokenizer, self.decoded = tokenizer, []

        def __getattr__(self, name: str) -> Any:
            return getattr(self.tokenizer, name)

        def decode(self, ids, **kwargs) -> str:
            self.decoded.append(len(ids))
            return self.tokenizer.decode(ids, **kwargs)

    engine = PolicyEngine(model_dir)
    filler = "Pia 0 1 2 3 4 5 6 7 8 9 " * 8
    engine._sample = _Scripted(engine, filler + "over and out, then more")
    prompt = _prompt(engine)
    engine.tokenizer = counting = CountingTokenizer(engine.tokenizer)
    stop = ("never said", "over and out")  # "over and out" is 6 tokens
    [completion] = engine.generate([prompt], [SamplingParams(max_tokens=500, stop=stop)])
    assert completion.finish_reason == "stop" and completion.stop_reason == "over and out"
    assert counting.tokenizer.decode(completion.token_ids) == filler + "over and out"
    assert len(completion.token_ids) > 190
    assert max(counting.decoded) <= len("over and out") + 8, "the stop check decoded the whole completion"


# -- runtime LoRA --------------------------------------------------------------------------------
def _greedy(http: httpx.Client, model: str) -> dict[str, Any]:
    return chat(http, model=model, temperature=0, max_tokens=12, ignore_eos=True, logprobs=True, return_token_ids=True)


def _peft_reference(model_dir: Path, adapter: Path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), adapter).eval()


async def test_runtime_lora_adapters(http: httpx.Client, url: str, model_dir: Path, adapter_dirs: dict[str, Path]):
    before = _greedy(http, "tiny-base")

    def load(name: str, path: Path) -> httpx.Response:
        return http.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(path)})

    r = load("v1", adapter_dirs["v1"])
    assert r.status_code == 200 and r.text == "Success: LoRA adapter 'v1' added successfully."
    # loading while base requests are in flight: the load waits for the batch, the requests are unaffected
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        base_body = {"model": "tiny-base", "messages": MESSAGES, "temperature": 0, "max_tokens": 12,
                     "ignore_eos": True, "logprobs": True, "return_token_ids": True}  # fmt: skip
        in_flight = [client.post("/v1/chat/completions", json=base_body) for _ in range(4)]
        lora = {"lora_name": "v2", "lora_path": str(adapter_dirs["v2"])}
        *answers, loaded = await asyncio.gather(*in_flight, client.post("/v1/load_lora_adapter", json=lora))
    assert loaded.status_code == 200, loaded.text
    for answer in answers:
        assert answer.json()["choices"][0]["token_ids"] == before["choices"][0]["token_ids"]
    r = load("v1", adapter_dirs["v1"])  # the same name and path again: nothing to do
    assert r.status_code == 200 and "already loaded" in r.text
    assert "No adapter found" in _error(load("v3", model_dir / "missing"), 404)
    cards = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
    assert cards["v1"]["parent"] == "tiny-base" and cards["v1"]["root"] == str(adapter_dirs["v1"].resolve())
    assert set(cards) == {"tiny-base", "v1", "v2"}

    # base, v1 and v2 requests at once: grouped by model, each must match its own weights
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        names = ["tiny-base", "v1", "v2"] * 4
        common = {"messages": MESSAGES, "temperature": 0, "max_tokens": 12, "ignore_eos": True, "logprobs": True}
        bodies = [{"model": name, "return_token_ids": True, **common} for name in names]
        responses = await asyncio.gather(*(client.post("/v1/chat/completions", json=b) for b in bodies))
    by_model: dict[str, list[dict]] = {}
    for name, response in zip(names, responses, strict=True):
        assert response.status_code == 200, response.text
        assert response.json()["model"] == name
        assert response.json()["system_fingerprint"] == ("base" if name == "tiny-base" else name)
        by_model.setdefault(name, []).append(response.json()["choices"][0])
    for choices in by_model.values():
        assert all(c["token_ids"] == choices[0]["token_ids"] for c in choices)
    assert by_model["tiny-base"][0]["token_ids"] == before["choices"][0]["token_ids"]
    assert_close(returned_logprobs(by_model["tiny-base"][0]), returned_logprobs(before["choices"][0]), 1e-5)
    prompt_ids = before["prompt_token_ids"]
    for name in ("v1", "v2"):
        choice = by_model[name][0]
        lora_model = _peft_reference(model_dir, adapter_dirs[name])
        want = reference_logprobs(lora_model, prompt_ids, choice["token_ids"], temperature=1.0)
        assert_close(returned_logprobs(choice), want, 1e-4)
        with lora_model.disable_adapter():
            base_lp = reference_logprobs(lora_model, prompt_ids, choice["token_ids"], temperature=1.0)
        assert max(abs(a - b) for a, b in zip(want, base_lp, strict=True)) > 1e-2, "the adapter changes nothing"

    r = http.post("/v1/unload_lora_adapter", json={"lora_name": "v1"})
    assert r.status_code == 200 and r.text == "Success: LoRA adapter 'v1' removed successfully."
    assert "v1" in _error(http.post("/v1/unload_lora_adapter", json={"lora_name": "v1"}), 404)
    assert "v1" in _error(http.post("/v1/chat/completions", json={"model": "v1", "messages": MESSAGES}), 404)
    assert {m["id"] for m in http.get("/v1/models").json()["data"]} == {"tiny-base", "v2"}
    assert _greedy(http, "v2")["choices"][0]["token_ids"] == by_model["v2"][0]["token_ids"]
    assert http.post("/v1/unload_lora_adapter", json={"lora_name": "v2"}).status_code == 200
    after = _greedy(http, "tiny-base")
    assert after["choices"][0]["token_ids"] == before["choices"][0]["token_ids"]
    assert_close(returned_logprobs(after["choices"][0]), returned_logprobs(before["choices"][0]), 1e-5)


def test_an_adapter_of_another_base_is_refused_and_leaves_nothing_behind(
    http: httpx.Client, server: tuple[str, Any], adapter_dirs: dict[str, Path], tmp_path: Path
):
    # Trained on a model with a wider hidden size: its LoRA tensors cannot fit this base.
    other_dir = tmp_path / "other-base"
    tokenizer = build_tiny_tokenizer(200)
    wider = ModelSize(hidden_size=96, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                      intermediate_size=128)  # fmt: skip
    build_model(tokenizer, wider).save_pretrained(other_dir)
    other = _make_adapter(other_dir, tmp_path / "other-adapter", seed=3)
    engine = server[1].state.engine
    before = {n for n, _ in engine.model.named_parameters()}
    message = _error(http.post("/v1/load_lora_adapter", json={"lora_name": "odd", "lora_path": str(other)}), 400)
    assert "does not fit the served model" in message
    assert "odd" not in {m["id"] for m in http.get("/v1/models").json()["data"]}
    assert {n for n, _ in engine.model.named_parameters()} == before, "a refused adapter left parameters behind"
    assert http.get("/health").status_code == 200
    # the server still loads, serves and drops a good adapter afterwards
    good = {"lora_name": "ok", "lora_path": str(adapter_dirs["v1"])}
    assert http.post("/v1/load_lora_adapter", json=good).status_code == 200
    assert _greedy(http, "ok")["model"] == "ok"
    assert http.post("/v1/unload_lora_adapter", json={"lora_name": "ok"}).status_code == 200


def test_health_says_503_while_every_request_fails(http: httpx.Client, server: tuple[str, Any], monkeypatch):
    engine = server[1].state.engine
    real_prefill = engine.prefill

    def broken(rows, model):
        raise ValueError("The version of PEFT you are using is not compatible")

    monkeypatch.setattr(engine, "prefill", broken)
    assert http.get("/health").status_code == 200
    for _ in range(3):
        r = http.post("/v1/chat/completions", json={"model": "tiny-base", "messages": MESSAGES, "max_tokens": 4})
        assert "not compatible" in _error(r, 500)
    message = _error(http.get("/health"), 503)
    assert "3 times in a row" in message and "ValueError: The version of PEFT" in message
    monkeypatch.setattr(engine, "prefill", real_prefill)
    chat(http, max_tokens=4)  # one request served again: healthy again
    assert http.get("/health").status_code == 200

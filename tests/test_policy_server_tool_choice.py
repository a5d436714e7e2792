"""``tool_choice`` "required" and named functions on the CPU policy server (forced prefix).

Runs against the committed tiny policy (``tiny_policy_url``) on a sandbox task it was trained
on, so its forced calls usually parse; the assertions that must hold whatever it samples are
the token accounting (forced tokens in ``prompt_token_ids``, only sampled tokens in
``token_ids`` / ``logprobs``) and that a parsed call has the forced name.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import torch
from pydantic import BaseModel, Field

from env_tools.sandbox import SandboxEnvironment, make_task
from tests.conftest import TINY_POLICY
from trainers.chat_format import TINY_CHAT_TEMPLATE
from trainers.policy_server import build_choice
from trainers.serving.sampling import Completion
from trainers.serving.tool_choice import force_tool_call, resolve_tool_choice

_OBS = SandboxEnvironment().reset(make_task("train", 0, "contact_phone"))  # "What is Pia's phone number?"
MESSAGES: list[dict[str, Any]] = [dict(m) for m in _OBS.messages]
TOOLS: list[dict[str, Any]] = list(_OBS.tools)
TOOL_NAMES = [t["function"]["name"] for t in TOOLS]


def named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TINY_POLICY))


@pytest.fixture(scope="module")
def ref_model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(TINY_POLICY), dtype=torch.float32).eval()


def chat(url: str, **body: Any) -> dict[str, Any]:
    payload = {"messages": MESSAGES, "tools": TOOLS, "logprobs": True, "return_token_ids": True, "max_tokens": 48}
    r = httpx.post(f"{url}/chat/completions", json={**payload, **body}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def error_message(response: httpx.Response) -> str:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == 400
    return error["message"]


def plain_prompt_ids(tokenizer) -> list[int]:
    prompt = tokenizer.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(prompt, add_special_tokens=False).input_ids)


def rendered_call(tokenizer, name: str) -> str:
    """What the chat template writes after the generation prompt for a call of ``name``."""
    prompt = tokenizer.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    call = {"type": "function", "function": {"name": name, "arguments": {"query": "Pia"}}}
    full = tokenizer.apply_chat_template(
        [*MESSAGES, {"role": "assistant", "content": "", "tool_calls": [call]}], tools=TOOLS, tokenize=False
    )
    assert full.startswith(prompt)
    return full[len(prompt) :]


def forced_text(data: dict[str, Any], tokenizer) -> str:
    """The text appended to the templated prompt (the prompt ids must extend the plain ones)."""
    plain = plain_prompt_ids(tokenizer)
    ids = data["prompt_token_ids"]
    assert ids[: len(plain)] == plain and data["usage"]["prompt_tokens"] == len(ids)
    return tokenizer.decode(ids[len(plain) :], skip_special_tokens=False)


def check_sampled_tokens(choice: dict[str, Any], usage_tokens: list[int]) -> None:
    assert len(choice["token_ids"]) == len(choice["logprobs"]["content"]) > 0
    usage_tokens.append(len(choice["token_ids"]))


# -- forced prefix -------------------------------------------------------------------------------
def test_named_tool_choice_forces_the_name_and_returns_its_call(tiny_policy_url: str, tokenizer) -> None:
    for name in ("search_contacts", "get_contact"):
        data = chat(tiny_policy_url, tool_choice=named(name), n=3, temperature=0.7, seed=3)
        prefix = forced_text(data, tokenizer)
        # The forced text is the template's own call text up to the arguments, name included.
        assert prefix.startswith("<tool_call>") and f'"{name}"' in prefix
        assert rendered_call(tokenizer, name).startswith(prefix) and "Pia" not in prefix
        sampled: list[int] = []
        for choice in data["choices"]:
            check_sampled_tokens(choice, sampled)
            message = choice["message"]
            if message["tool_calls"]:
                assert [c["function"]["name"] for c in message["tool_calls"]][:1] == [name]
                json.loads(message["tool_calls"][0]["function"]["arguments"])  # a JSON string, as vLLM's
                assert choice["finish_reason"] == "tool_calls"
            else:  # unparseable: the whole text, forced part included, comes back as content
                assert message["content"].startswith(prefix)
        assert data["usage"]["completion_tokens"] == sum(sampled)
    # The tiny policy knows this task: its greedy forced call parses (arguments sampled, not forced).
    greedy = chat(tiny_policy_url, tool_choice=named("search_contacts"), temperature=0)["choices"][0]
    assert greedy["message"]["tool_calls"][0]["function"]["name"] == "search_contacts"
    assert json.loads(greedy["message"]["tool_calls"][0]["function"]["arguments"]) == {"query": "Pia"}


def test_required_forces_a_call_and_the_model_picks_the_name(tiny_policy_url: str, tokenizer) -> None:
    data = chat(tiny_policy_url, tool_choice="required", n=3, temperature=0.7, seed=5, parallel_tool_calls=False)
    prefix = forced_text(data, tokenizer)
    assert prefix.startswith("<tool_call>") and not any(name in prefix for name in TOOL_NAMES)
    assert all(rendered_call(tokenizer, name).startswith(prefix) for name in TOOL_NAMES)
    sampled: list[int] = []
    for choice in data["choices"]:
        check_sampled_tokens(choice, sampled)
        calls = choice["message"]["tool_calls"]
        if calls:  # the name is sampled: no grammar keeps it among the tools, as the hermes parser doesn't check
            for call in calls:
                json.loads(call["function"]["arguments"])  # a JSON string, as vLLM's
            assert choice["finish_reason"] == "tool_calls"
        else:
            assert choice["message"]["content"].startswith(prefix)
    greedy = chat(tiny_policy_url, tool_choice="required", temperature=0)["choices"][0]
    assert greedy["message"]["tool_calls"][0]["function"]["name"] == "search_contacts"


def test_forced_tokens_are_prompt_and_logprobs_cover_only_sampled_tokens(
    tiny_policy_url: str, tokenizer, ref_model
) -> None:
    """``prompt_token_ids + token_ids`` is exactly the sequence the model saw and sampled from."""
    data = chat(tiny_policy_url, tool_choice=named("search_contacts"), n=2, temperature=1.0, seed=11)
    prompt = data["prompt_token_ids"]
    for choice in data["choices"]:
        ids = choice["token_ids"]
        with torch.no_grad():
            logits = ref_model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
        want = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0].tolist()
        got = [e["logprob"] for e in choice["logprobs"]["content"]]
        assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-3


def test_a_call_cut_short_comes_back_as_text_with_the_forced_part(tiny_policy_url: str, tokenizer) -> None:
    data = chat(tiny_policy_url, tool_choice=named("search_contacts"), max_tokens=2, temperature=0)
    choice = data["choices"][0]
    prefix = forced_text(data, tokenizer)
    assert choice["finish_reason"] == "length" and choice["message"]["tool_calls"] == []
    assert choice["message"]["content"] == prefix + tokenizer.decode(choice["token_ids"])


def test_build_choice_puts_the_forced_text_before_the_completion(tokenizer) -> None:
    prefix = '<tool_call>{"name": "get_contact", "arguments":'

    def completion(text: str) -> Completion:
        ids = tokenizer(text, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        return Completion(token_ids=tuple(ids), logprobs=(-1.0,) * len(ids), top_logprobs=None, finish_reason="stop")

    ok = build_choice(0, completion(' {"contact_id": "c7"}}</tool_call>'), tokenizer, forced_text=prefix)
    assert ok["finish_reason"] == "tool_calls" and ok["message"]["content"] is None
    assert ok["message"]["tool_calls"][0]["function"] == {"name": "get_contact", "arguments": '{"contact_id": "c7"}'}
    broken = build_choice(0, completion(" {oops"), tokenizer, forced_text=prefix)
    assert broken["finish_reason"] == "stop" and broken["message"]["tool_calls"] == []
    assert broken["message"]["content"] == prefix + " {oops"


def test_the_prefix_follows_the_models_own_template(tokenizer) -> None:
    """A Qwen-style template (newlines around the JSON) gives a Qwen-style prefix: no second copy."""
    qwen_like = TINY_CHAT_TEMPLATE.replace('\'<tool_call>{"name"', '\'<tool_call>\\n{"name"').replace(
        "'}</tool_call>'", "'}\\n</tool_call>'"
    )
    assert qwen_like != TINY_CHAT_TEMPLATE
    qwen_tokenizer = type(tokenizer).from_pretrained(str(TINY_POLICY))
    qwen_tokenizer.chat_template = qwen_like
    prompt = qwen_tokenizer.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    prompt_ids = list(qwen_tokenizer(prompt, add_special_tokens=False).input_ids)
    choice = resolve_tool_choice(named("get_contact"), TOOL_NAMES)
    forced = force_tool_call(qwen_tokenizer, MESSAGES, TOOLS, prompt, prompt_ids, choice)
    assert forced.token_ids[: len(prompt_ids)] == prompt_ids
    # Up to the arguments; the space before them merges with "{" in training text, so it is left to the model.
    assert forced.text == '<tool_call>\n{"name": "get_contact", "arguments":'
    assert qwen_tokenizer.decode(forced.token_ids[len(prompt_ids) :]) == forced.text
    required = force_tool_call(
        qwen_tokenizer, MESSAGES, TOOLS, prompt, prompt_ids, resolve_tool_choice("required", TOOL_NAMES)
    )
    assert required.text == '<tool_call>\n{"name": "'


# -- validation ------------------------------------------------------------------------------------
def test_bad_tool_choices_are_400_and_the_server_survives(tiny_policy_url: str) -> None:
    def post(**body: Any) -> httpx.Response:
        return httpx.post(f"{tiny_policy_url}/chat/completions", json={"messages": MESSAGES, **body}, timeout=60)

    message = error_message(post(tools=TOOLS, tool_choice=named("book_flight")))
    assert "book_flight" in message and all(name in message for name in TOOL_NAMES)
    assert "tools" in error_message(post(tool_choice="required"))
    assert "tools" in error_message(post(tool_choice=named("search_contacts")))
    assert "tool_choice" in error_message(post(tools=TOOLS, tool_choice="sometimes"))
    assert "tool_choice" in error_message(post(tools=TOOLS, tool_choice={"type": "function", "function": {}}))
    # Accepted but not enforced (no grammar here): a plain completion.
    data = chat(tiny_policy_url, response_format={"type": "json_object"}, parallel_tool_calls=True, max_tokens=4)
    assert data["choices"][0]["token_ids"]


# -- LangChain clients -----------------------------------------------------------------------------
class search_contacts(BaseModel):  # lower case: the class name is the tool name, one the tiny policy knows
    """Find contacts by name."""

    query: str = Field(description="Name to search for")


def test_structured_output_with_function_calling_keeps_token_ids(tiny_policy_url: str, tokenizer) -> None:
    from langgraph_evolver.chat_model import PolicyChatModel

    model = PolicyChatModel(base_url=tiny_policy_url, model="tiny-policy", max_tokens=48, temperature=0)
    structured = model.with_structured_output(search_contacts, method="function_calling", include_raw=True)
    result = structured.invoke(MESSAGES)
    raw = result["raw"]
    meta = raw.response_metadata
    assert meta["prompt_token_ids"] and meta["token_ids"]
    assert len(meta["token_ids"]) == len(meta["logprobs"]["content"])
    # langchain sent the named tool_choice: the call start up to its arguments was forced into the prompt.
    prompt = tokenizer.decode(meta["prompt_token_ids"], skip_special_tokens=False)
    assert prompt.endswith('"search_contacts", "arguments":')
    assert raw.tool_calls or result["parsing_error"] is not None or raw.content
    if raw.tool_calls:
        assert raw.tool_calls[0]["name"] == "search_contacts"
    if result["parsing_error"] is None and raw.tool_calls:
        assert isinstance(result["parsed"], search_contacts)
    # The greedy tiny policy fills in the arguments it was trained on.
    assert result["parsed"] == search_contacts(query="Pia")


def test_bind_tools_any_and_named_choice(tiny_policy_url: str, tokenizer) -> None:
    from langgraph_evolver.chat_model import PolicyChatModel

    model = PolicyChatModel(base_url=tiny_policy_url, model="tiny-policy", max_tokens=48, temperature=1.0, seed=2)
    for tool_choice, expected in (("any", None), ("get_contact", "get_contact")):
        message = model.bind_tools(TOOLS, tool_choice=tool_choice).invoke(MESSAGES)
        meta = message.response_metadata
        prompt = tokenizer.decode(meta["prompt_token_ids"], skip_special_tokens=False)
        assert prompt.endswith('"' if expected is None else '"arguments":')  # the forced call start is prompt
        assert meta["token_ids"] and len(meta["token_ids"]) == len(meta["logprobs"]["content"])
        if message.tool_calls and expected is not None:
            assert message.tool_calls[0]["name"] == expected

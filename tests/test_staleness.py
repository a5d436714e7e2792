"""Each LLM call records the weights that actually answered it (the endpoint's ``system_fingerprint``), so
``policy/staleness_mean`` measures something: a publish between two calls of one rollout shows up."""

from __future__ import annotations

import pytest

from langgraph_evolver.types import Action, Step, Task, Trajectory
from tests.conftest import TINY_POLICY

MESSAGES = [{"role": "system", "content": "You are an assistant."}, {"role": "user", "content": "Find Ana's phone."}]


def _response(**extra):
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "tiny-policy",
        "prompt_token_ids": [1, 2],
        "choices": [{"index": 0, "finish_reason": "stop", "token_ids": [3],
                     "message": {"role": "assistant", "content": "x"},
                     "logprobs": {"content": [{"token": "x", "logprob": -0.5, "bytes": [120], "top_logprobs": []}]}}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
        **extra,
    }  # fmt: skip


def test_the_fingerprint_is_the_model_version_and_the_name_is_the_fallback():
    from langgraph_evolver.chat_model import PolicyChatModel, transition_from_message

    chat = PolicyChatModel(base_url="http://127.0.0.1:9/v1", model="tiny-policy")

    def version(response):
        result = chat._create_chat_result(response)
        gen = result.generations[0]
        meta = gen.message.response_metadata  # as LangChain fills it after the call
        gen.message.response_metadata = {**(result.llm_output or {}), **(gen.generation_info or {}), **meta}
        return transition_from_message(gen.message).model_version

    assert version(_response(system_fingerprint="tiny-policy-step7")) == "tiny-policy-step7"
    assert version(_response(system_fingerprint=None)) == "tiny-policy"  # vLLM sets none: the echoed name


@pytest.fixture(scope="module")
def own_server():
    """A server of our own: this test replaces its base weights, which the shared one must keep."""
    from trainers.policy_server import create_app, serve_in_background

    with serve_in_background(create_app(str(TINY_POLICY), served_model_name="tiny-policy", seed=0)) as url:
        yield url + "/v1"


def test_a_publish_between_two_calls_makes_the_first_call_stale(own_server, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from langgraph_evolver.chat_model import PolicyChatModel, transition_from_message
    from trainers.grpo_records import version_staleness
    from trainers.sync import DiskSync

    chat = PolicyChatModel(base_url=own_server, model="tiny-policy", max_tokens=4, seed=0)
    sync = DiskSync(own_server, "tiny-policy", tmp_path / "weights")
    version_steps = {"tiny-policy": 0, "base": 0}  # what the trainer registers before its first publish

    before = transition_from_message(chat.invoke(MESSAGES))
    model = AutoModelForCausalLM.from_pretrained(str(TINY_POLICY))
    with torch.no_grad():
        model.lm_head.weight.add_(0.01)
    version_steps[sync.publish(model, 1)] = 1
    after = transition_from_message(chat.invoke(MESSAGES))

    assert before is not None and after is not None
    assert (before.model_version, after.model_version) == ("base", "tiny-policy-step1")  # same requested name
    steps = tuple(Step(index=i, action=Action(content="x"), transition=tr) for i, tr in enumerate((before, after)))
    rollout = Trajectory(id="g/0/x", task=Task(id="t", env="sandbox", query="q"), steps=steps, reward=1.0)
    assert version_staleness(rollout, version_steps, 1) == (1, 2)  # trained at step 1: the first call is 1 stale

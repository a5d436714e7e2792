"""LoRA sync: a published adapter changes what the endpoint returns, under a new versioned name
that rollouts are routed to; old versions are unloaded."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import TINY_POLICY

pytest.importorskip("peft")

MESSAGES = [{"role": "system", "content": "You are an assistant."}, {"role": "user", "content": "Find Ana's phone."}]


def _top(url: str, model: str) -> dict[str, float]:
    r = httpx.post(
        f"{url}/chat/completions",
        json={"model": model, "messages": MESSAGES, "max_tokens": 1, "logprobs": True, "top_logprobs": 5, "seed": 0},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return {t["token"]: t["logprob"] for t in r.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]}


def _models(url: str) -> list[str]:
    return [m["id"] for m in httpx.get(f"{url}/models", timeout=10).json()["data"]]


@pytest.fixture()
def peft_model():
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(TINY_POLICY))
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    return model


def _perturb(model, scale: float) -> None:
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, scale)


def test_publish_changes_outputs_and_routes_to_the_new_name(tiny_policy_url, peft_model, tmp_path):
    from langgraph_evolver.chat_model import PolicyChatModel, transition_from_message
    from trainers.sync import LoraSync

    sync = LoraSync(tiny_policy_url, "tiny-policy", tmp_path / "adapters")
    base = _top(tiny_policy_url, "tiny-policy")
    try:
        _perturb(peft_model, 0.5)
        name1 = sync.publish(peft_model, 1)
        assert name1 == "tiny-policy-lora-step1" == sync.current
        assert name1 in _models(tiny_policy_url)
        v1 = _top(tiny_policy_url, name1)
        assert v1 != base, "the adapter must change the served distribution"
        assert _top(tiny_policy_url, "tiny-policy") == base  # the base stays servable

        # rollouts sent to the current name record it as the version that sampled them
        chat = PolicyChatModel(base_url=tiny_policy_url, model=sync.current, max_tokens=8)
        tr = transition_from_message(chat.invoke(MESSAGES))
        assert tr is not None and tr.model_version == name1

        _perturb(peft_model, 0.5)
        name2 = sync.publish(peft_model, 2)
        served = _models(tiny_policy_url)
        assert name2 in served and name1 not in served  # old version unloaded (keep=1)
        assert not (tmp_path / "adapters" / name1).exists()
        assert _top(tiny_policy_url, name2) != v1
        r = httpx.post(f"{tiny_policy_url}/chat/completions", json={"model": name1, "messages": MESSAGES}, timeout=30)
        assert r.status_code == 404
    finally:
        sync.close()
    served = _models(tiny_policy_url)
    assert "tiny-policy" in served and name1 not in served and name2 not in served


def test_publish_to_a_dead_endpoint_says_so(peft_model, tmp_path):
    from langgraph_evolver.errors import PolicyEndpointError
    from trainers.sync import LoraSync

    sync = LoraSync("http://127.0.0.1:9/v1", "tiny-policy", tmp_path / "adapters", timeout=2)
    with pytest.raises(PolicyEndpointError, match="unreachable for /v1/load_lora_adapter"):
        sync.publish(peft_model, 1)


def test_full_sync_on_cpu_is_a_clear_error():
    import torch

    from langgraph_evolver.errors import ConfigError
    from trainers.sync import FullSync

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="needs CUDA GPUs"):
        FullSync.check_available()

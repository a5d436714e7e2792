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
        # the base stays servable (to float noise: batched and cached prefills may add in another order)
        assert _top(tiny_policy_url, "tiny-policy") == pytest.approx(base, abs=1e-4)

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


def test_nccl_full_sync_on_cpu_is_a_clear_error():
    import torch

    from langgraph_evolver.errors import ConfigError
    from trainers.sync import FullSync

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="needs CUDA GPUs"):
        FullSync.check_available()


def test_publishing_the_same_step_twice_serves_that_adapter(tiny_policy_url, peft_model, tmp_path):
    """A retried publish of one step keeps the adapter it saved (it used to delete it and load an empty path)."""
    from trainers.sync import LoraSync

    sync = LoraSync(tiny_policy_url, "tiny-policy", tmp_path / "adapters")
    try:
        _perturb(peft_model, 0.5)
        name = sync.publish(peft_model, 1)
        first = _top(tiny_policy_url, name)
        assert sync.publish(peft_model, 1) == name == sync.current
        assert (tmp_path / "adapters" / name / "adapter_config.json").exists()
        assert name in _models(tiny_policy_url) and sync.loaded == [name]
        assert _top(tiny_policy_url, name) == pytest.approx(first, abs=1e-4)
    finally:
        sync.close()


def test_resume_against_a_live_endpoint_is_idempotent(tiny_policy_url, peft_model, tmp_path):
    """A second trainer process (a resumed run) publishes a step the endpoint already holds, then moves on and
    unloads what the first run left behind."""
    from trainers.sync import LoraSync

    first = LoraSync(tiny_policy_url, "tiny-policy", tmp_path / "adapters")
    _perturb(peft_model, 0.5)
    first.publish(peft_model, 2)
    first.publish(peft_model, 3)  # the crashed run got further than its last checkpoint
    _perturb(peft_model, 0.5)  # the resumed run restores other weights for step 2
    resumed = LoraSync(tiny_policy_url, "tiny-policy", tmp_path / "adapters")
    try:
        name = resumed.publish(peft_model, 2)
        served = _models(tiny_policy_url)
        assert name in served and "tiny-policy-lora-step3" not in served  # the stale version is adopted, unloaded
        resumed2 = _top(tiny_policy_url, name)
        local = LoraSync(tiny_policy_url, "tiny-policy", tmp_path / "check")
        assert local.publish(peft_model, 4) and _top(tiny_policy_url, "tiny-policy-lora-step4") == pytest.approx(
            resumed2, abs=1e-4
        )  # the endpoint serves the resumed run's weights under the re-published name
        local.close()
    finally:
        resumed.close()


class _FakeVllm:
    """vLLM's runtime LoRA API as read from its source: a name already loaded is a 400."""

    def __init__(self) -> None:
        self.adapters: dict[str, str] = {}

    def post(self, url, json=None, headers=None, timeout=None):
        import httpx

        request = httpx.Request("POST", url)
        name = json["lora_name"]
        if url.endswith("/v1/load_lora_adapter"):
            if name in self.adapters:
                return httpx.Response(400, request=request, json={"error": {
                    "message": f"The lora adapter '{name}' has already been loaded.", "code": 400}})  # fmt: skip
            self.adapters[name] = json["lora_path"]
            return httpx.Response(200, request=request, text=f"Success: LoRA adapter '{name}' added successfully.")
        if name not in self.adapters:
            return httpx.Response(404, request=request, json={"error": {"message": f"'{name}' not found"}})
        del self.adapters[name]
        return httpx.Response(200, request=request, text="ok")

    def get(self, url, headers=None, timeout=None):
        import httpx

        data = [{"id": "base"}] + [{"id": n, "parent": "base"} for n in self.adapters]
        return httpx.Response(200, request=httpx.Request("GET", url), json={"object": "list", "data": data})


def test_resume_against_a_long_running_vllm_reloads_instead_of_stopping(monkeypatch, tmp_path):
    import trainers.sync as sync_module
    from trainers.sync import LoraSync

    vllm = _FakeVllm()
    monkeypatch.setattr(sync_module.httpx, "post", vllm.post)
    monkeypatch.setattr(sync_module.httpx, "get", vllm.get)

    class Adapter:
        def save_pretrained(self, path):
            from pathlib import Path

            Path(path).mkdir(parents=True)
            (Path(path) / "adapter_config.json").write_text("{}")

    LoraSync("http://vllm:8000/v1", "base", tmp_path / "a").publish(Adapter(), 5)  # the run before the crash
    resumed = LoraSync("http://vllm:8000/v1", "base", tmp_path / "a")
    assert resumed.publish(Adapter(), 5) == "base-lora-step5"  # was: HTTP 400 "already been loaded", training stops
    assert resumed.publish(Adapter(), 5) == "base-lora-step5"
    assert list(vllm.adapters) == ["base-lora-step5"] and (tmp_path / "a" / "base-lora-step5").exists()
    assert resumed.publish(Adapter(), 6) == "base-lora-step6" and list(vllm.adapters) == ["base-lora-step6"]


@pytest.mark.timeout(600)
def test_a_run_whose_served_adapter_fails_stops_and_keeps_its_last_checkpoint(tmp_path, capsys):
    """The endpoint serves the base model but answers 500 for every adapter (as a transformers/peft pair that
    cannot load adapters did): step 1 trains on the base model's rollouts, step 2's all fail, so the run stops
    with a non-zero exit and the server's error, and nothing of step 2 is trained, saved or evaluated."""
    import json

    from tests.test_grpo_train import QUICKSTART, SMALL
    from trainers.grpo import cli
    from trainers.policy_server import create_app, serve_in_background

    app = create_app(str(TINY_POLICY), served_model_name="tiny-policy", seed=0)
    engine = app.state.engine
    real_activate = engine._activate

    def activate(name: str) -> None:
        if name != engine.served_model_name:
            raise ValueError("The version of PEFT you are using is not compatible, please use a version >= 0.22.0")
        real_activate(name)

    engine._activate = activate
    out = tmp_path / "run"
    with serve_in_background(app) as url:
        with pytest.raises(SystemExit) as stopped:
            cli(["--config", QUICKSTART, "--output_dir", str(out), "--max_steps", "3", *SMALL, "--save_steps", "1",
                 "--policy_base_url", f"{url}/v1", "--policy_model", "tiny-policy",
                 "--eval_before", "false"])  # fmt: skip
        health = httpx.get(f"{url}/health", timeout=10)
    assert stopped.value.code != 0
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error: 16 of 16 rollouts for training step 2 failed outside the policy" in last, last
    assert "version of PEFT" in last and "checkpoint-1" in last and "--resume_from_checkpoint" in last, last
    assert health.status_code == 503 and "version of PEFT" in health.text  # the server does not claim to be healthy
    assert (out / "checkpoint-1").is_dir() and not (out / "checkpoint-2").exists()
    assert not (out / "final").exists() and not (out / "eval_after").exists() and not (out / "summary.json").exists()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in line]
    assert [r["step"] for r in rows] == [1]  # only the step on the base model's rollouts was trained

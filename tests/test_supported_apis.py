"""The project's calls into transformers stay on its supported API: the KV cache passed as ``cache`` (the
``past_key_values`` name goes in 5.40) and activation checkpointing under its new name (the
``gradient_checkpointing`` aliases go in v6). transformers attributes those FutureWarnings to torch's module
dispatch, not to our code, so the suite's module-scoped filters cannot catch them: these tests do."""

from __future__ import annotations

import warnings

import pytest
import torch

from tests.conftest import TINY_POLICY


@pytest.fixture(autouse=True)
def _future_warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        yield


def test_the_engine_passes_its_kv_cache_by_the_supported_name():
    from trainers.serving.engine import PolicyEngine
    from trainers.serving.sampling import SamplingParams

    torch.set_num_threads(1)
    for lean in (False, True):  # the model's own forward for decoding too, and the lean decoder
        engine = PolicyEngine(TINY_POLICY, seed=0, lean_decode=lean)
        prompt = engine.tokenizer("Lend Dune to Ana.")["input_ids"]
        (done,) = engine.generate([prompt], [SamplingParams(temperature=0.0, max_tokens=4)])
        assert 1 <= len(done.token_ids) <= 4


def test_warm_start_checkpoints_activations_by_the_supported_name():
    from transformers import AutoModelForCausalLM

    from trainers.warm_start import enable_checkpointing

    model = AutoModelForCausalLM.from_pretrained(TINY_POLICY)
    enable_checkpointing(model, lora=False)
    assert model.is_activation_checkpointing

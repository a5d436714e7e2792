"""Training in bf16 on CPU: autocast forwards with fp32 weights, a bounded logprob gap, and TIS when the precisions
of the trainer and the local policy server differ."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from tests.conftest import TINY_POLICY

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    from transformers import AutoTokenizer

    from langgraph_evolver.environment import load_environment
    from trainers.config import EvolverGRPOConfig
    from trainers.grpo import task_dataset
    from trainers.grpo_trainer import EvolverGRPOTrainer

    cfg = EvolverGRPOConfig(output_dir=str(tmp_path_factory.mktemp("bf16")), per_device_train_batch_size=2,
                            gradient_accumulation_steps=1, num_generations=2, beta=0.0, report_to="none",
                            activation_checkpointing=False, save_strategy="no", train_dtype="bfloat16",
                            policy_server_dtype="float32")  # fmt: skip
    tasks = load_environment("sandbox").list_tasks("train")[:2]
    t = EvolverGRPOTrainer(str(TINY_POLICY), cfg, task_dataset(tasks),
                           processing_class=AutoTokenizer.from_pretrained(str(TINY_POLICY)))  # fmt: skip
    t.model.train()
    t.current_gradient_accumulation_steps = 1
    return t


def _rows(trainer):
    """Two rows of 40 prompt and 24 completion tokens, the second with its last 8 completion tokens padded."""
    g = torch.Generator().manual_seed(0)
    vocab = trainer.accelerator.unwrap_model(trainer.model).config.vocab_size
    ids = torch.randint(3, vocab, (2, 64), generator=g)
    attention = torch.ones_like(ids)
    attention[1, -8:] = 0
    return ids, attention


def _logps(trainer, dtype):
    ids, attention = _rows(trainer)
    saved, trainer._train_dtype = trainer._train_dtype, dtype
    try:
        with torch.no_grad():
            return trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention, 24)[0], attention
    finally:
        trainer._train_dtype = saved


def test_bf16_autocast_keeps_the_gap_to_fp32_logprobs_small(trainer):
    """The bf16 trainer's logprobs differ from an fp32 endpoint's (so autocast is on), by a bounded gap."""
    bf16, attention = _logps(trainer, torch.bfloat16)
    fp32, _ = _logps(trainer, torch.float32)
    assert bf16.dtype == torch.float32  # log-softmax runs in fp32 under CPU autocast
    mask = attention[:, -24:].bool()
    gap = (bf16 - fp32).abs()[mask]
    assert gap.max().item() > 0.0  # computed in another precision, not the fp32 path again
    assert gap.mean().item() < 0.05, f"bf16 vs fp32 logprob gap {gap.mean().item():.4f} per token"
    assert gap.max().item() < 0.25


def test_bf16_training_keeps_weights_grads_and_optimizer_state_in_fp32(trainer):
    ids, attention = _rows(trainer)
    trainer.model.zero_grad()
    logps = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention, 24)[0]
    (-logps.mean()).backward()
    trainable = [p for p in trainer.model.parameters() if p.requires_grad]
    assert trainable and all(p.dtype == torch.float32 for p in trainable)
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in trainable)
    assert all(torch.isfinite(p.grad).all() for p in trainable)
    optimizer = torch.optim.AdamW(trainable, lr=1e-3)
    optimizer.step()
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim()]
    assert state and all(v.dtype == torch.float32 for v in state)
    trainer.model.zero_grad()


def test_tis_is_on_when_the_trainer_and_the_local_server_differ_in_precision(trainer):
    assert trainer.args.importance_correction == "tis"


def _args(**kw):
    base = dict(importance_correction=None, policy_base_url=None, policy_server_dtype="float32", train_dtype="float32")
    return SimpleNamespace(**{**base, **kw})


def test_importance_correction_follows_the_two_precisions_unless_set(caplog):
    from trainers.train_precision import resolve_importance_correction as resolve

    big = 100_000_000
    with caplog.at_level(logging.INFO, logger="trainers.train_precision"):
        assert resolve(_args(policy_server_dtype="bfloat16"), big) == "tis"
    assert "importance_correction: tis" in caplog.text  # the switch is logged, with how to turn it off
    assert resolve(_args(), big) == "none"  # fp32 both sides
    assert resolve(_args(policy_server_dtype="bfloat16", train_dtype="bfloat16"), big) == "none"
    assert resolve(_args(policy_server_dtype="bfloat16", importance_correction="none"), big) == "none"  # user wins
    assert resolve(_args(train_dtype="bfloat16", importance_correction="tis"), big) == "tis"
    assert resolve(_args(policy_server_dtype="bfloat16", policy_base_url="http://x/v1"), big) == "none"  # external
    tiny = 1_000_000  # auto on both sides: fp32 for a tiny model, the same on both sides
    assert resolve(_args(policy_server_dtype="auto", train_dtype="auto"), tiny) == "none"


def test_auto_follows_the_servers_cpu_rule():
    from trainers.train_precision import resolve_train_dtype

    big, tiny = 135_000_000, 1_000_000
    assert resolve_train_dtype("auto", num_parameters=big, cpu_flags=("avx512_bf16",)) == torch.bfloat16
    assert resolve_train_dtype("auto", num_parameters=big, cpu_flags=()) == torch.float32  # emulated bf16: slower
    assert resolve_train_dtype("auto", num_parameters=tiny, cpu_flags=("amx_bf16",)) == torch.float32
    assert resolve_train_dtype("float32", num_parameters=big, cpu_flags=("amx_bf16",)) == torch.float32
    with pytest.raises(ValueError, match="train_dtype must be one of auto, float32, bfloat16"):
        resolve_train_dtype("fp16")


def test_bad_train_dtype_is_a_clear_error(tmp_path):
    from trainers.config import EvolverGRPOConfig

    with pytest.raises(Exception, match="train_dtype must be auto, float32 or bfloat16"):
        EvolverGRPOConfig(output_dir=str(tmp_path), report_to="none", train_dtype="fp16")


def test_adapts_supervised_steps_run_their_forward_in_bf16_and_keep_fp32_weights(tmp_path, monkeypatch):
    """``trainers.evolve adapt``'s supervise phase (``train_lora``) follows ``train_dtype``: the forward's matmuls in
    bf16 (1.7-1.9x fp32 a step on 2 cores, ``benchmarks/train_step_precision.py``), the LoRA weights saved in fp32;
    its loss near fp32's."""
    from safetensors.torch import load_file

    from trainers.evolve.adapt_data import train_lora

    seen: list[torch.dtype] = []
    real_linear = torch.nn.functional.linear

    def linear(x, w, b=None):
        out = real_linear(x, w, b)
        seen.append(out.dtype)
        return out

    monkeypatch.setattr(torch.nn.functional, "linear", linear)
    examples = [([5, 6, 7, 8, 9, 10], [-100, -100, 7, 8, 9, 10])] * 4
    lora = {"lora_r": 4, "lora_alpha": 8, "lora_target_modules": ["q_proj", "v_proj"]}
    figures = {}
    for dtype in ("float32", "bfloat16"):
        seen.clear()
        out = tmp_path / dtype
        figures[dtype] = train_lora(TINY_POLICY, examples, out, seconds=60, lora=lora, max_steps=8, lr=1e-2,
                                    progress=False, dtype=dtype)  # fmt: skip
        assert figures[dtype]["dtype"] == dtype and figures[dtype]["steps"] == 8
        assert set(seen) == {getattr(torch, dtype)}
        weights = load_file(str(out / "adapter_model.safetensors"))
        assert weights and all(w.dtype == torch.float32 for w in weights.values())
    assert abs(figures["bfloat16"]["loss"] - figures["float32"]["loss"]) < 0.5 * figures["float32"]["loss"] + 0.05

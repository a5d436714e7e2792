"""The loss with behaviour logprobs: clipping acts at the configured (per-token) bound."""

from __future__ import annotations

import math

import pytest

from tests.conftest import TINY_POLICY

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    from transformers import AutoTokenizer

    from env_tools.base import load_environment
    from trainers.config import EvolverGRPOConfig
    from trainers.grpo import task_dataset
    from trainers.grpo_trainer import EvolverGRPOTrainer

    cfg = EvolverGRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("loss")),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        num_generations=2,
        beta=0.0,
        report_to="none",
        gradient_checkpointing=False,
        epsilon=0.2,
        epsilon_high=0.28,
        save_strategy="no",
    )
    tasks = load_environment("sandbox").list_tasks("train")[:2]
    t = EvolverGRPOTrainer(str(TINY_POLICY), cfg, task_dataset(tasks),
                           processing_class=AutoTokenizer.from_pretrained(str(TINY_POLICY)))  # fmt: skip
    t.model.train()
    t.current_gradient_accumulation_steps = 1
    return t


def _batch(trainer, ratio: float, eps_high: float, advantage: float = 1.0, with_old: bool = True):
    """One row whose behaviour logprobs make the current/behaviour ratio exactly ``ratio``."""
    from trainers.samples import Sample, collate

    s = Sample(prompt_ids=[5, 6, 7, 8, 9, 10])
    ids = [11, 12, 13, 14]
    s._append(ids, trained=True, logps=[0.0] * 4, advantage=advantage, epsilon_high=eps_high)
    batch = collate([s], trainer._tokenizer.pad_token_id)
    with torch.no_grad():
        inp = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        current = trainer._get_per_token_logps_and_entropies(trainer.model, inp, att, 4)[0]
    batch["old_per_token_logps"] = current - math.log(ratio)
    if not with_old:
        del batch["old_per_token_logps"]
    batch["num_items_in_batch"] = torch.tensor(4.0)
    return batch


def _grad_norm(trainer, batch) -> tuple[float, dict]:
    trainer.model.zero_grad()
    trainer._metrics["train"].clear()
    loss = trainer._compute_loss(trainer.model, batch)
    loss.backward()
    norm = sum(p.grad.abs().sum().item() for p in trainer.model.parameters() if p.grad is not None)
    return norm, dict(trainer._metrics["train"])


def test_ratio_above_the_bound_is_clipped(trainer):
    norm, metrics = _grad_norm(trainer, _batch(trainer, ratio=1.5, eps_high=0.28))
    assert metrics["clip_ratio/high_mean"][-1] == pytest.approx(1.0)
    assert norm == 0.0  # every token clipped: min(1.5 A, 1.28 A) is constant in the parameters


def test_per_token_upper_bound_admits_the_same_ratio(trainer):
    norm, metrics = _grad_norm(trainer, _batch(trainer, ratio=1.5, eps_high=0.6))
    assert metrics["clip_ratio/high_mean"][-1] == pytest.approx(0.0)
    assert norm > 0.0
    assert trainer.epsilon_high == 0.28 and trainer.epsilon_low == 0.2  # restored after the call


def test_low_side_clips_negative_advantages(trainer):
    norm, metrics = _grad_norm(trainer, _batch(trainer, ratio=0.5, eps_high=0.28, advantage=-1.0))
    assert metrics["clip_ratio/low_mean"][-1] == pytest.approx(1.0) and norm == 0.0
    norm, _ = _grad_norm(trainer, _batch(trainer, ratio=0.9, eps_high=0.28, advantage=-1.0))
    assert norm > 0.0  # inside the trust region: learns


def test_trl_default_old_logprobs_make_the_ratio_one(trainer):
    """Without the behaviour logprobs TRL uses detached current ones: the same off-policy sample
    that must be clipped is not, which is why the trainer always passes them."""
    norm, metrics = _grad_norm(trainer, _batch(trainer, ratio=1.5, eps_high=0.28, with_old=False))
    assert metrics["clip_ratio/high_mean"][-1] == pytest.approx(0.0) and norm > 0.0


def test_logp_gap_is_logged_against_behaviour_logprobs(trainer):
    trainer._step = 0
    _, metrics = _grad_norm(trainer, _batch(trainer, ratio=1.5, eps_high=0.28))
    assert metrics["policy/logp_gap_mean"][-1] == pytest.approx(math.log(1.5), rel=1e-4)


def test_probe_row_checks_the_gap_without_a_gradient(trainer):
    """A step with no signal trains on nothing yet still logs the trainer-vs-endpoint gap."""
    batch = _batch(trainer, ratio=1.5, eps_high=0.28)
    batch["tool_mask"].zero_()  # what `probe_sample` gives: sampled, attended, not trained
    batch["advantages"].zero_()
    batch["num_items_in_batch"] = torch.tensor(0.0)
    trainer._step = 0
    norm, metrics = _grad_norm(trainer, batch)
    assert norm == 0.0
    assert metrics["policy/logp_gap_mean"][-1] == pytest.approx(math.log(1.5), rel=1e-4)

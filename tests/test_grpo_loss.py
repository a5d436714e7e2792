"""The loss with behaviour logprobs: clipping acts at the configured (per-token) bound."""

from __future__ import annotations

import math

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

    cfg = EvolverGRPOConfig(
        output_dir=str(tmp_path_factory.mktemp("loss")),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        num_generations=2,
        beta=0.0,
        report_to="none",
        activation_checkpointing=False,
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


def test_batches_carry_what_trls_vllm_path_reads(trainer):
    """With use_vllm (NCCL full sync) TRL's loss multiplies by inputs["importance_sampling_ratio"]; our batches
    carry it (a KeyError on the first loss step before)."""
    batch = _batch(trainer, ratio=1.0, eps_high=0.28)
    saved = trainer.use_vllm, trainer.vllm_importance_sampling_correction
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
    try:
        norm, _ = _grad_norm(trainer, batch)
    finally:
        trainer.use_vllm, trainer.vllm_importance_sampling_correction = saved
    assert norm > 0.0


def _grads(trainer, samples, num_items: float) -> torch.Tensor:
    from trainers.samples import collate

    batch = collate(samples, trainer._tokenizer.pad_token_id)
    batch["num_items_in_batch"] = torch.tensor(num_items)
    trainer.model.zero_grad()
    trainer._compute_loss(trainer.model, batch).backward()
    return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]).clone()


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "sapo", "luspo"])
def test_sequence_normalized_losses_are_exact_on_a_merged_row_with_padding(trainer, loss_type):
    """TRL's grpo / dr_grpo on one row per call without padding is the objective; our merged row (+ padding
    rows, as rank equalization adds) must give the same gradient."""
    from langgraph_evolver.types import Action, Step, Task, Trajectory, Transition
    from trainers.samples import padding_sample, sequence_weight, trajectory_samples

    first = Transition(prompt_ids=(5, 6, 7, 8, 9, 10), completion_ids=(11, 12, 13), logprobs=(-0.5,) * 3)
    second = Transition(prompt_ids=(5, 6, 7, 8, 9, 10, 11, 12, 13, 20, 21), completion_ids=(14, 15, 16, 17, 18),
                        logprobs=(-0.7,) * 5)  # fmt: skip
    steps = tuple(Step(index=i, action=Action(content="x"), transition=t) for i, t in enumerate((first, second)))
    rollout = Trajectory(id="g/0/x", task=Task(id="t", env="sandbox", query="q"), steps=steps, reward=1.0)
    saved = trainer.loss_type, trainer._sequence_weight
    try:
        trainer.loss_type, trainer._sequence_weight = loss_type, None  # TRL's own aggregation, one row per call
        rows = trajectory_samples(rollout, 1.0, merge=False)
        truth = (_grads(trainer, rows[:1], 1.0) + _grads(trainer, rows[1:], 1.0)) / 2  # mean over the 2 sequences

        merged = trajectory_samples(rollout, 1.0, merge=True)
        assert len(merged) == 1 and merged[0].transitions == 2
        padding = [padding_sample(trainer._tokenizer.pad_token_id)] * 2  # e.g. another rank had 3 rows
        naive = _grads(trainer, [*merged, *padding], 1.0)
        gap = ((naive - truth).norm() / truth.norm()).item()
        assert gap > 0.05, "TRL's own aggregation weighs a merged row and its padding differently (the defect)"

        trainer._sequence_weight = sequence_weight(loss_type, trainer.max_completion_length)
        merged = trajectory_samples(rollout, 1.0, merge=True, sequence_weight=trainer._sequence_weight)
        ours = _grads(trainer, [*merged, *padding], 2.0)  # normalized by the 2 calls
        assert ((ours - truth).norm() / truth.norm()).item() < 1e-4
    finally:
        trainer.loss_type, trainer._sequence_weight = saved
        trainer.model.zero_grad()


def _plain_batch(trainer, keep_behaviour: bool = False):
    """One row whose behaviour logprobs are 0.5 below the trainer's (pi_old / pi_behaviour = e^0.5 = 1.65)."""
    from trainers.samples import Sample, collate

    s = Sample(prompt_ids=[5, 6, 7, 8, 9, 10])
    s._append([11, 12, 13, 14], trained=True, logps=[0.0] * 4, advantage=1.0, epsilon_high=0.28,
              keep_behaviour=keep_behaviour)  # fmt: skip
    batch = collate([s], trainer._tokenizer.pad_token_id)
    with torch.no_grad():
        inp = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        current = trainer._get_per_token_logps_and_entropies(trainer.model, inp, att, 4)[0]
    batch["old_per_token_logps"] = current - 0.5
    batch["num_items_in_batch"] = torch.tensor(4.0)
    return batch, current


@pytest.mark.parametrize("cap", [2.0, 1.2])
def test_tis_takes_pi_old_from_the_trainer_and_weights_by_the_truncated_ratio(trainer, cap, caplog):
    saved = trainer.args.importance_correction, trainer.args.tis_cap, trainer.args.logp_gap_warning
    trainer.args.importance_correction, trainer.args.tis_cap, trainer.args.logp_gap_warning = "tis", cap, 0.1
    try:
        batch, current = _plain_batch(trainer)
        trainer._behaviour_correction(batch)
        weight = min(math.exp(0.5), cap)
        assert torch.allclose(batch["old_per_token_logps"], current)  # the clip now acts on pi / pi_old
        assert torch.allclose(batch["behaviour_per_token_logps"], current - 0.5)
        assert batch["importance_sampling_ratio"][0] == pytest.approx([weight] * 4, rel=1e-5)
        trainer._step, trainer._gap_warned = 0, None
        with caplog.at_level("WARNING", logger="trainers.grpo_trainer"):
            tis, metrics = _grad_norm(trainer, batch)
        # the gap is still measured against the endpoint's logprobs, and it is over the threshold: a loud warning
        assert metrics["policy/logp_gap_mean"][-1] == pytest.approx(0.5, rel=1e-4)
        assert "exceeds logp_gap_warning" in caplog.text
        # the same row with no mismatch (behaviour = trainer) and weight 1: the gradient scales by the weight
        trainer.args.importance_correction = "none"
        plain, _ = _plain_batch(trainer)
        plain["old_per_token_logps"] = current
        base, _ = _grad_norm(trainer, plain)
        assert tis == pytest.approx(weight * base, rel=1e-4)
    finally:
        trainer.args.importance_correction, trainer.args.tis_cap, trainer.args.logp_gap_warning = saved


def test_tis_leaves_stripped_transitions_on_behaviour_as_old(trainer):
    saved = trainer.args.importance_correction
    trainer.args.importance_correction = "tis"
    try:
        batch, current = _plain_batch(trainer, keep_behaviour=True)
        trainer._behaviour_correction(batch)
        assert torch.allclose(batch["old_per_token_logps"], current - 0.5)  # behaviour stays the old policy
        assert batch["importance_sampling_ratio"][0].tolist() == [1.0] * 4
    finally:
        trainer.args.importance_correction = saved


def _two_call_rollout():
    from langgraph_evolver.types import Action, Step, Task, Trajectory, Transition

    first = Transition(prompt_ids=(5, 6, 7, 8, 9, 10), completion_ids=(11, 12, 13), logprobs=(-0.5,) * 3)
    second = Transition(prompt_ids=(5, 6, 7, 8, 9, 10, 11, 12, 13, 20, 21), completion_ids=(14, 15, 16, 17, 18),
                        logprobs=(-0.7,) * 5)  # fmt: skip
    steps = tuple(Step(index=i, action=Action(content="x"), transition=t) for i, t in enumerate((first, second)))
    return Trajectory(id="g/0/x", task=Task(id="t", env="sandbox", query="q"), steps=steps, reward=1.0)


def _trl_grads(trainer, samples, num_items: float) -> torch.Tensor:
    """TRL's own GRPOTrainer._compute_loss on these rows (none of our overrides)."""
    from trl import GRPOTrainer

    from trainers.samples import collate

    batch = collate(samples, trainer._tokenizer.pad_token_id)
    batch["num_items_in_batch"] = torch.tensor(num_items)
    trainer.model.zero_grad()
    GRPOTrainer._compute_loss(trainer, trainer.model, batch).backward()
    return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]).clone()


@pytest.mark.parametrize("loss_type", ["dapo", "bnpo", "cispo", "vespo"])
def test_token_summed_losses_are_trls_own_on_merged_rows_with_padding(trainer, loss_type):
    """Every other loss type the config accepts: ours on a merged row + padding rows = TRL's on one row per call
    (vespo takes a sequence-level weight, so merging is refused for it and it is compared unmerged)."""
    from trainers.samples import padding_sample, sequence_weight, trajectory_samples

    rollout = _two_call_rollout()
    saved = trainer.loss_type, trainer._sequence_weight
    try:
        trainer.loss_type = loss_type
        trainer._sequence_weight = sequence_weight(loss_type, trainer.max_completion_length)
        assert trainer._sequence_weight is None  # token-summed: no reweighting
        truth = _trl_grads(trainer, trajectory_samples(rollout, 1.0, merge=False), 8.0)
        rows = trajectory_samples(rollout, 1.0, merge=loss_type != "vespo")
        assert len(rows) == (2 if loss_type == "vespo" else 1)
        padding = [padding_sample(trainer._tokenizer.pad_token_id)] * 2
        ours = _grads(trainer, [*rows, *padding], 8.0)
        assert truth.norm() > 0 and ((ours - truth).norm() / truth.norm()).item() < 1e-4
    finally:
        trainer.loss_type, trainer._sequence_weight = saved
        trainer.model.zero_grad()


def test_vespo_with_tis_applies_the_weight_once(trainer):
    """TRL's vespo folds inputs["importance_sampling_ratio"] into its sequence weight itself; the trainer must not
    scale the advantages by it as well (that gave w^2)."""
    saved = trainer.loss_type, trainer._sequence_weight, trainer.args.importance_correction
    try:
        trainer.loss_type, trainer._sequence_weight, trainer.args.importance_correction = "vespo", None, "tis"
        batch, _ = _plain_batch(trainer)
        trainer._behaviour_correction(batch)
        assert batch["importance_sampling_ratio"][0, 0] == pytest.approx(math.exp(0.5), rel=1e-5)
        from trl import GRPOTrainer

        trainer.model.zero_grad()
        GRPOTrainer._compute_loss(trainer, trainer.model, dict(batch)).backward()
        truth = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]).clone()
        trainer.model.zero_grad()
        trainer._compute_loss(trainer.model, dict(batch)).backward()
        ours = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]).clone()
        assert ((ours - truth).norm() / truth.norm()).item() < 1e-4, (ours.norm() / truth.norm()).item()
    finally:
        trainer.loss_type, trainer._sequence_weight, trainer.args.importance_correction = saved
        trainer.model.zero_grad()


def test_logp_gap_leaves_out_tokens_sampled_under_a_stripped_prompt(trainer):
    """Self-navigating trains guided calls on the stripped prompt; their behaviour logprobs were sampled under the
    guided one, so comparing them would inflate the gap (and its 'endpoint serves other weights' warning)."""
    batch, _ = _plain_batch(trainer, keep_behaviour=True)
    trainer._step = 0
    _, metrics = _grad_norm(trainer, batch)
    assert "policy/logp_gap_mean" not in metrics
    batch, _ = _plain_batch(trainer)  # the same row unguided: measured
    _, metrics = _grad_norm(trainer, batch)
    assert metrics["policy/logp_gap_mean"][-1] == pytest.approx(0.5, rel=1e-4)


def test_off_policy_mask_reads_the_endpoints_logprobs_under_tis(trainer):
    """TRL's off-policy sequence mask reads ``sampling_per_token_logps`` (else old_per_token_logps, which TIS sets
    to the trainer's own): a negative-advantage row sampled far from the trainer's policy must be dropped."""
    saved = trainer.args.importance_correction, trainer.off_policy_mask_threshold
    try:
        trainer.args.importance_correction, trainer.off_policy_mask_threshold = "tis", 0.5
        batch, current = _plain_batch(trainer)
        batch["old_per_token_logps"] = current + 2.0  # the endpoint gave these tokens far more mass
        batch["advantages"] = -batch["advantages"]
        batch = trainer._finish_batch(batch, torch.tensor(4.0))
        assert torch.allclose(batch["sampling_per_token_logps"], current + 2.0)
        norm, _ = _grad_norm(trainer, batch)
        assert norm == 0.0  # mean KL 2.0 > 0.5 with A < 0: masked
        trainer.off_policy_mask_threshold = 5.0
        norm, _ = _grad_norm(trainer, trainer._finish_batch(batch, torch.tensor(4.0)))
        assert norm > 0.0
    finally:
        trainer.args.importance_correction, trainer.off_policy_mask_threshold = saved


def test_bnpo_a_micro_batch_of_padding_only_does_not_shrink_the_step(trainer):
    """9 real rows over 4 micro-batches left one all-padding micro-batch, which still counted in bnpo's divisor
    (x3/4). Scaled by ``live_window_scales`` the gradient is the one of the live micro-batches alone."""
    from trainers.samples import collate, live_window_scales, padding_sample, trajectory_samples

    assert live_window_scales([True, True, True, False], 4) == [4 / 3, 4 / 3, 4 / 3, 1.0]
    assert live_window_scales([True, False, True, True], 2) == [2.0, 1.0, 1.0, 1.0]
    assert live_window_scales([False, False], 2) == [1.0, 1.0]
    rows = trajectory_samples(_two_call_rollout(), 1.0, merge=False)
    pad = padding_sample(trainer._tokenizer.pad_token_id)

    def accumulated(micro: list, accumulation: int, scales: list[float] | None) -> torch.Tensor:
        trainer.model.zero_grad()
        trainer.current_gradient_accumulation_steps = accumulation
        for i, rows_ in enumerate(micro):
            batch = collate(rows_, trainer._tokenizer.pad_token_id)
            batch["num_items_in_batch"] = torch.tensor(8.0)
            if scales is not None:
                batch["loss_scale"] = torch.tensor(scales[i])
            trainer._compute_loss(trainer.model, batch).backward()
        return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]).clone()

    saved = trainer.loss_type
    try:
        trainer.loss_type = "bnpo"
        truth = accumulated([[rows[0]], [rows[1]]], 2, None)
        unscaled = accumulated([[rows[0]], [rows[1]], [pad]], 3, None)
        assert ((unscaled - truth * 2 / 3).norm() / truth.norm()).item() < 1e-4  # the defect: x2/3
        ours = accumulated([[rows[0]], [rows[1]], [pad]], 3, live_window_scales([True, True, False], 3))
        assert ((ours - truth).norm() / truth.norm()).item() < 1e-4
    finally:
        trainer.loss_type, trainer.current_gradient_accumulation_steps = saved, 1
        trainer.model.zero_grad()

"""The loss side of ``EvolverGRPOTrainer``: what TRL's GRPO loss does differently with agent rows.

A mixin placed before ``GRPOTrainer`` (its ``super()`` is TRL's), kept apart from where the rows come from
(``trainers/grpo_trainer.py``). Each collated micro-batch gets the loss normalizer, the endpoint's logprobs
(``old_per_token_logps``, or the trainer's own under ``importance_correction: tis`` with the truncated weight),
and the reference logprobs; the loss then uses a per-token upper clip bound, per-call normalization for the
sequence-normalized loss types (``trainers.loss_types``), and checks on the first pass over fresh
rollouts that the trainer's logprobs match the endpoint's (``policy/logp_gap_*``).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from .loss_types import loss_spec

__all__ = ["AgentLossMixin"]

logger = logging.getLogger("trainers.grpo_trainer")  # the trainer's logger: its warnings keep their origin


class AgentLossMixin:
    """``EvolverGRPOTrainer``'s overrides of TRL's loss path; reads the trainer's config and state (``self.args``,
    ``self._sequence_weight``, ``self._last_logps``, ``self._gap_warned``, TRL's ``epsilon_*``/``loss_type``)."""

    args: Any
    accelerator: Any
    state: Any
    model: Any
    ref_model: Any
    beta: float
    epsilon_low: Any
    epsilon_high: Any
    loss_type: str
    max_completion_length: int
    num_iterations: int
    _step: int
    _metrics: Any
    _sequence_weight: Any
    _last_logps: torch.Tensor | None
    _gap_warned: int | None

    def _finish_batch(self, batch: dict[str, Any], num_items: torch.Tensor) -> dict[str, Any]:
        """What a collated micro-batch needs besides its rows: the loss normalizer, the endpoint's logprobs under
        the key TRL's off-policy mask reads, the TIS correction and the reference logprobs."""
        batch["num_items_in_batch"] = num_items
        # what the endpoint sampled with: TRL's off-policy mask reads it under this key and otherwise falls back to
        # old_per_token_logps, which TIS replaces with the trainer's own (it would then never see the mismatch)
        batch["sampling_per_token_logps"] = batch["old_per_token_logps"].clone()
        if self.args.importance_correction == "tis":
            self._behaviour_correction(batch)
        if self.beta != 0.0:
            batch["ref_per_token_logps"] = self._reference_logps(batch)
        return batch

    @torch.no_grad()
    def _behaviour_correction(self, batch: dict[str, torch.Tensor]) -> None:
        """``importance_correction: tis``: pi_old from a no-grad trainer forward now (generation time), and the
        truncated importance weight min(pi_old / pi_behaviour, tis_cap) per token.

        Tokens of stripped transitions (self-navigating) keep the behaviour logprobs as old and weight 1: their
        ratio is meant to measure the unguided policy against the guided behaviour (docs/self-navigating.md).
        """
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        keep = batch["completion_ids"].size(1)
        trainer_logps = self._get_per_token_logps_and_entropies(self.model, input_ids, attention, keep)[0]
        behaviour = batch["old_per_token_logps"]
        corrected = batch["sampled_mask"].bool() & ~batch["keep_behaviour_mask"].bool()
        batch["behaviour_per_token_logps"] = behaviour
        batch["old_per_token_logps"] = torch.where(corrected, trainer_logps, behaviour)
        weight = torch.exp(trainer_logps - behaviour).clamp(max=self.args.tis_cap)
        batch["importance_sampling_ratio"] = torch.where(corrected, weight, torch.ones_like(weight))
        trained = corrected & batch["tool_mask"].bool()
        if trained.any():
            m = self._metrics["train"]
            m["policy/tis_weight_mean"].append(weight[trained].mean().item())
            m["policy/tis_truncated_share"].append((weight[trained] >= self.args.tis_cap).float().mean().item())

    @torch.no_grad()
    def _reference_logps(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        from trl.trainer.utils import use_adapter

        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        keep = batch["completion_ids"].size(1)
        if self.ref_model is not None:
            return self._get_per_token_logps_and_entropies(self.ref_model, input_ids, attention, keep)[0]
        unwrapped = self.accelerator.unwrap_model(self.model)
        with use_adapter(unwrapped, adapter_name="ref" if "ref" in unwrapped.peft_config else None):
            return self._get_per_token_logps_and_entropies(self.model, input_ids, attention, keep)[0]

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if kwargs.get("compute_entropy"):
            self._last_logps = out[0].detach()
        return out

    def _calls_normalization(self, inputs: dict[str, Any]) -> torch.Tensor:
        """Per-row factors that turn TRL's per-row normalization of a sequence-normalized loss into a token sum
        over the number of LLM calls (``trainers.loss_types``).

        TRL keeps its own per-token loss for ``loss_type`` (the clipped ratio, SAPO's soft gate, ...); only the
        aggregation changes. Each per-token loss is positively homogeneous in the advantage, so scaling a row's
        advantages by ``c`` scales its loss by ``c``. TRL aggregates train micro-batches as (B rows, G = the
        accumulation steps, M_b = the row's trained tokens, L = max_completion_length):
        grpo/sapo ``mean_b(sum_t / M_b) / G``, dr_grpo ``sum / (B L) / G``, luspo ``mean_b(sum_t) / G``; the
        target is ``sum / (n G)`` with n = calls per micro-batch (``num_items_in_batch`` / (processes x
        steps_per_generation)), which is TRL's own dapo normalizer. So c = M_b B / n, B L / n and B / n.
        """
        mask = inputs["completion_mask"] * inputs["tool_mask"] if "tool_mask" in inputs else inputs["completion_mask"]
        rows = mask.size(0)
        calls = inputs["num_items_in_batch"].clamp(min=1.0) / (self.accelerator.num_processes
                                                              * self.args.steps_per_generation)  # fmt: skip
        row_factor = loss_spec(self.loss_type).row_factor
        if row_factor is None:
            raise ValueError(f"loss_type={self.loss_type} has no per-call normalization (a bug: see sequence_weight).")
        factor = row_factor(mask, rows, self.max_completion_length) / calls
        return factor.to(inputs["advantages"].dtype).unsqueeze(-1) if inputs["advantages"].dim() == 2 else factor

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        """TRL's loss with a per-token upper clip bound and a behaviour-vs-trainer logprob check."""
        eps_high = inputs.get("epsilon_high")
        saved = self.epsilon_low, self.epsilon_high
        if eps_high is not None:
            self.epsilon_low = torch.full_like(eps_high, float(saved[0]))
            self.epsilon_high = eps_high
        if self._sequence_weight is not None:  # per-call weights are in the advantages: sum tokens / calls
            inputs = {**inputs, "advantages": inputs["advantages"] * self._calls_normalization(inputs)}
        if "loss_scale" in inputs:  # bnpo: see samples.live_window_scales
            inputs = {**inputs, "advantages": inputs["advantages"] * inputs["loss_scale"]}
        if (self.args.importance_correction == "tis" and "importance_sampling_ratio" in inputs
                and not loss_spec(self.loss_type).row_weighted):  # fmt: skip
            # TIS: the weight multiplies each token's policy term; it is > 0, so scaling the advantage by it is
            # exactly that (min(r A w, clip(r) A w) = w min(r A, clip(r) A); every other per-token loss is linear
            # in A). vespo is left alone: TRL's vespo folds inputs["importance_sampling_ratio"] in itself.
            inputs = {**inputs, "advantages": inputs["advantages"] * inputs["importance_sampling_ratio"]}
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self.epsilon_low, self.epsilon_high = saved
        # On the first pass over fresh rollouts (before any update in this window) the trainer's
        # logprobs must match the endpoint's; a gap means the endpoint serves other weights or samples
        # from a different distribution (top-k, another temperature, stale adapter).
        fresh = (
            self._step % (self.args.steps_per_generation * self.num_iterations) < self.args.gradient_accumulation_steps
        )
        behaviour = inputs.get("behaviour_per_token_logps", inputs.get("old_per_token_logps"))
        if fresh and self._last_logps is not None and behaviour is not None:
            mask = (inputs["completion_mask"] * inputs["sampled_mask"]).bool()
            if "keep_behaviour_mask" in inputs:  # sampled under a guided prompt, trained on the stripped one
                mask &= ~inputs["keep_behaviour_mask"].bool()
            gap = (self._last_logps - behaviour).abs()[mask]
            stats = torch.stack([gap.sum(), torch.tensor(float(gap.numel()), device=gap.device),
                                 gap.max() if gap.numel() else torch.tensor(0.0, device=gap.device)])  # fmt: skip
            total = self.accelerator.gather(stats.unsqueeze(0))
            count = total[:, 1].sum().item()
            if count:
                mean = total[:, 0].sum().item() / count
                self._metrics["train"]["policy/logp_gap_mean"].append(mean)
                self._metrics["train"]["policy/logp_gap_max"].append(total[:, 2].max().item())
                self._warn_about_gap(mean)
            if self.accelerator.num_processes > 1:  # each rank's own mean too: the pooled one dilutes a rank that
                for rank, (gap_sum, n, _) in enumerate(total.tolist()):  # trains on other weights than are served
                    if n:
                        self._metrics["train"][f"policy/logp_gap_mean_rank{rank}"].append(gap_sum / n)
        return loss

    def _warn_about_gap(self, mean: float) -> None:
        step = self.state.global_step
        if mean <= self.args.logp_gap_warning or not self.accelerator.is_main_process or self._gap_warned == step:
            return
        self._gap_warned = step
        advice = ("importance_correction: tis corrects for it" if self.args.importance_correction == "none" else
                  "tis corrects the loss, but a gap this large usually means the wrong weights")  # fmt: skip
        logger.warning("!!! step %d: policy/logp_gap_mean = %.4f exceeds logp_gap_warning = %.3f: the endpoint's "
                       "behaviour logprobs differ from the trainer's. The endpoint may serve other weights (a stale "
                       "or missing adapter), sample differently (top-k/top-p, another temperature, raw vs processed "
                       "logprobs) or in lower precision (vLLM bf16); %s.", step, mean, self.args.logp_gap_warning,
                       advice)  # fmt: skip

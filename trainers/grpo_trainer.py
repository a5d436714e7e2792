"""``EvolverGRPOTrainer``: TRL's GRPOTrainer fed by LangGraph agent rollouts.

TRL generates one completion per prompt; an agent makes several LLM calls per task with tool
results in between. This subclass keeps TRL's loss, optimizer, DeepSpeed/accelerate plumbing,
checkpointing and logging, and replaces where the batch comes from:

1. Each dataset row is a task; TRL's sampler repeats it ``num_generations`` times. Every row
   becomes one run of the agent (the config's ``agent``: any LangGraph agent, default our
   ``graphs/agent.py``) against a fresh environment, at the policy endpoint, concurrently.
2. Rewards: the environment's outcome score minus ``malformed_call_penalty`` per malformed call.
   GRPO advantages over the rollouts of one task (gathered across ranks). A rollout that failed
   for reasons outside the policy (endpoint or environment down) is recorded and left out; one
   that failed because of the policy (its outputs outgrew the context window, a runaway episode)
   is scored ``policy_failure_reward`` (0) minus its penalties, so bad behaviour is punished.
3. Each LLM call is a transition (exact prompt/completion ids and the **behaviour logprobs**
   from the endpoint). Those logprobs are the ``old_per_token_logps`` of the loss: TRL's default
   (old = detached current) makes the ratio exactly 1, so clipping would never act.
4. Calls of a rollout whose prompts extend each other are merged into one row; rows are split
   into ``steps_per_generation`` micro-batches of near-equal tokens; every rank gets the same
   number of rows (fully masked padding rows), so collectives line up.
5. The upper clip bound is per token (per transition), so selective boosting can widen it.
6. Before generating, the new weights are published to the endpoint (``trainers/sync.py``);
   each transition records the version that sampled it, and staleness is logged.

Departure from TRL: groups whose rewards are all equal (and failed rollouts) contribute no rows,
as in DAPO's dynamic sampling; they are counted (``zero_variance_share``) instead.

Scoring is the library's (``langgraph_evolver.scoring``), the records the ranks gather and the step's
metrics are in ``trainers/grpo_records.py``, the loss side in ``trainers/grpo_loss.py``. This module stays
over 500 lines because the rest is one TRL subclass whose generation step, weight publishing and
self-navigating/self-attributing hooks share the trainer's state and must issue the same collectives on
every rank in the same order; splitting them further would scatter that order across files.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import gather_object, is_peft_model
from trl import GRPOTrainer

from langgraph_evolver.advantages import adca_advantages, adca_alpha, group_advantages
from langgraph_evolver.attribution import (
    aattribute_batch,
    apply_attribution,
    label_signs,
    make_judge,
    summarize_attributions,
    write_langsmith_feedback,
)
from langgraph_evolver.scoring import failed_rollouts, transition_advantages
from langgraph_evolver.tracing import RolloutTracer, annotate_rollouts, langsmith_enabled, with_training_step
from langgraph_evolver.types import Task, Trajectory, write_jsonl

from .config import EvolverGRPOConfig
from .dynamic_sampling import attach as attach_dynamic_sampler
from .dynamic_sampling import refill_step
from .grpo_loss import AgentLossMixin
from .grpo_records import RankSummary, RolloutScore, log_generation
from .loss_types import loss_spec
from .samples import (
    Sample,
    collate,
    length_grouped_chunks,
    live_window_scales,
    padded_tokens,
    padding_sample,
    probe_sample,
    sequence_weight,
    token_budget_slots,
    trajectory_samples,
)
from .train_precision import TrainPrecisionMixin

__all__ = [
    "EvolverGRPOTrainer",
    "trainable_parameters",
]

_JUDGE_TOTALS = ("fallbacks", "input_tokens", "output_tokens", "cost_usd")  # summed over ranks, logged per step

logger = logging.getLogger(__name__)


def trainable_parameters(model: Any) -> list[Any]:
    """The parameters an optimizer updates (a LoRA adapter's, not the frozen base model's)."""
    return [p for p in model.parameters() if p.requires_grad]


def environment_reward(prompts: list, completions: list, **kwargs: Any) -> list[float]:
    """TRL requires a reward source at construction; here rewards come from ``Environment.evaluate``
    inside each rollout, so TRL's reward path is never taken. Reaching this is a bug."""
    raise RuntimeError("environment_reward is only a marker: EvolverGRPOTrainer scores whole rollouts itself.")


class EvolverGRPOTrainer(TrainPrecisionMixin, AgentLossMixin, GRPOTrainer):
    """GRPO on agent rollouts (see the module docstring).

    Args:
        model: A model path or ``PreTrainedModel`` (the same weights the endpoint serves), or a ``PeftModel``
            with ``peft_config=None`` (an adapter to train on, published before the first rollout).
        args: The training config.
        train_dataset: Rows with a ``task`` column (``Task.to_dict()`` as JSON); see
            ``trainers.grpo.task_dataset``.
        policy: The publisher that keeps the endpoint current (``LoraSync`` / ``FullSync``),
            with ``current`` = the served name to sample from; may be set after construction.
        policy_base_url: The endpoint's ``…/v1`` URL.
        env_factory: ``Task -> Environment`` (default: the task's registry id, in-process).
        rollout_callbacks: LangChain callbacks for every rollout (tracing).
        event_loop: the loop every rollout runs on (default: a new one for this trainer).
    """

    _tag_names = ["trl", "grpo", "langgraph-evolver"]

    def __init__(
        self,
        model: Any,
        args: EvolverGRPOConfig,
        train_dataset: Any,
        *,
        processing_class: Any = None,
        peft_config: Any = None,
        policy: Any = None,
        policy_base_url: str = "",
        env_factory: Callable[[Task], Any] | None = None,
        rollout_callbacks: list | None = None,
        callbacks: list | None = None,
        event_loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        # a PeftModel passed in (trainers.grpo's init_adapter) is not the base model the endpoint starts with
        publish_at_start = peft_config is None and not isinstance(model, str) and is_peft_model(model)
        super().__init__(model=model, reward_funcs=[environment_reward], args=args, train_dataset=train_dataset,
                         processing_class=processing_class, peft_config=peft_config, callbacks=callbacks)  # fmt: skip
        self._publish_at_start = publish_at_start
        self._settle_precision()  # train_dtype, and TIS when the server computes in another precision
        self.policy = policy
        self.policy_base_url = policy_base_url
        self.env_factory = env_factory
        self.rollout_callbacks = rollout_callbacks or []
        self._synced_step: int | None = None
        self._version_steps: dict[str, int] = {}
        self._last_logps: torch.Tensor | None = None
        self._gap_warned: int | None = None
        self._sub_batch: dict[str, Any] | None = None
        self.card_info: dict[str, Any] | None = None
        """What the model card needs beyond the config (``trainers.grpo`` sets it: model args, command, evals)."""
        window = getattr(self.accelerator.unwrap_model(self.model).config, "max_position_embeddings", None)
        self.max_sample_length = args.max_sample_length or window
        # grpo/sapo/dr_grpo/luspo: exact with merged and padding rows through per-call weights (samples.py)
        self._sequence_weight = sequence_weight(args.loss_type, self.max_completion_length)
        self.last_trajectories: list[Trajectory] = []
        self.dynamic_sampler = attach_dynamic_sampler(self, train_dataset)
        # One event loop for the whole run: rollouts and the judge keep their HTTP clients across steps, and so do
        # the other models of a user's graph (an async client is bound to the loop it was first used on; the
        # evaluations of trainers.grpo run on this loop too, when it passes it as event_loop).
        self._loop = event_loop or asyncio.new_event_loop()
        settings = args.attribution_settings
        self.judge = make_judge(settings.judge, **settings.judge_options) if settings.enabled else None
        self.navigator = self.pool = self.extractor = None
        nav = args.navigation_settings
        if nav.enabled:  # self-navigating: the pool every rank retrieves from, built from training rollouts only
            from langgraph_evolver.experience import FaissExperiencePool, Navigator, default_embeddings, make_extractor

            pool_dir = nav.pool_dir or str(Path(args.output_dir) / "experience_pool")
            self.pool = FaissExperiencePool(default_embeddings(), merge_threshold=nav.merge_threshold, path=pool_dir)
            self.navigator = Navigator(self.pool, top_k=nav.top_k, min_score=nav.min_score)
            self.extractor = make_extractor(nav.extractor, **nav.extractor_options)

    # -- batches ---------------------------------------------------------------------------------
    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> torch.Tensor:
        """TRL's step, once per sub-batch of the micro-batch under ``max_tokens_per_microbatch``.

        The sub-batches' gradients accumulate; only the last one may end an accumulation window (DeepSpeed
        steps there), so the optimizer sees the micro-batch as one. The losses are token sums over the whole
        generation batch's normalizer, so the sum over sub-batches is the micro-batch's loss.
        """
        if not self.args.max_tokens_per_microbatch or not self.model.training:
            return super().training_step(model, inputs, num_items_in_batch)
        slot = self._prepare_inputs(inputs)  # generates the rollouts when they are due
        step, state = self._step, self.accelerator.gradient_state
        sync = state.sync_gradients
        total = torch.zeros((), device=self.accelerator.device)
        try:
            for i, sub in enumerate(slot):
                self._sub_batch, self._step = sub, step  # TRL counts one step per call; this is one micro-batch
                state._set_sync_gradients(sync and i == len(slot) - 1)
                total = total + super().training_step(model, inputs, num_items_in_batch).detach()
        finally:
            self._sub_batch = None
            state._set_sync_gradients(sync)
        return total

    def _prepare_inputs(self, generation_batch: Any) -> Any:
        if self._sub_batch is not None:  # inside training_step's loop over a micro-batch's sub-batches
            return self._sub_batch
        if not self.model.training:
            raise NotImplementedError("In-loop evaluation is not supported; trainers.grpo evaluates before and after "
                                      "training on held-out tasks (eval_strategy must stay 'no').")  # fmt: skip
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            self._buffered_inputs = self._generate_and_score_completions(generation_batch)
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def _sync_policy(self) -> None:
        """Publish the current weights if an optimizer step happened since the last publish.

        Rank 0 publishes (``FullSync``: every rank, collectively). Only what the publisher needs is
        gathered: the trainable parameters for a LoRA adapter (ZeRO-3 shards them; the frozen base,
        ~15 GB at 7B, is never gathered), the consolidated state dict for full weights on disk. A
        failure on any rank reaches every rank through one ``gather_object``, and every rank stops
        with the reason, instead of the others waiting in the next collective until it times out.
        """
        step = self.state.global_step
        if self.policy is None or self._synced_step == step:
            return
        if step == 0 and self._synced_step is None and not self._publish_at_start:  # a fresh adapter = the base
            self._synced_step = 0
            for version in (self.policy.current, getattr(self.policy, "version", None), "base"):
                if version:  # what the endpoint may report for the starting weights
                    self._version_steps[version] = 0
            return
        unwrapped = self.accelerator.unwrap_model(self.model)
        gathers = getattr(self.policy, "gathers", "trainable")
        version = error = None
        try:
            if gathers == "collective":  # NCCL: TRL gathers and streams on every rank
                version = self.policy.publish(unwrapped, step)
            elif gathers == "full":  # full weights to disk: consolidated on rank 0 only under ZeRO-3
                state_dict = self.accelerator.get_state_dict(self.model_wrapped)
                if self.accelerator.is_main_process:
                    version = self.policy.publish(unwrapped, step, state_dict=state_dict)
                del state_dict
            else:
                with self._dist.gather_params(trainable_parameters(unwrapped)):  # ZeRO-3: every rank takes part
                    if self.accelerator.is_main_process:
                        version = self.policy.publish(unwrapped, step)
        except Exception as e:  # raised below on every rank, once all of them know
            error = f"{type(e).__name__}: {e}"
            logger.error("publishing the weights of step %d failed on rank %d: %s", step,
                         self.accelerator.process_index, error)  # fmt: skip
        results = gather_object([(version, self.policy.current, error)])
        failures = [(rank, err) for rank, (_, _, err) in enumerate(results) if err]
        if failures:
            from langgraph_evolver.errors import PolicyEndpointError

            rank, err = failures[0]
            raise PolicyEndpointError(f"Publishing the weights of step {step} to the policy endpoint failed on rank "
                                      f"{rank}: {err}. Every rank stops here; fix the endpoint and resume with "
                                      "--resume_from_checkpoint true.")  # fmt: skip
        version, current, _ = results[0]  # the main process's version, on every rank, once it is served
        self.policy.current = current
        self._version_steps[version] = step
        self._synced_step = step
        self._metrics["train"]["policy/sync_s"].append(getattr(self.policy, "last_sync_s", 0.0))

    def _run_rollouts(self, items: list[tuple[Task, str, int]]) -> list[Trajectory]:
        from langgraph_evolver.batch import arun_rollout_items
        from langgraph_evolver.chat_model import PolicyChatModel

        model_name = self.policy.current if self.policy is not None else None
        chat = PolicyChatModel(base_url=self.policy_base_url, model=model_name, temperature=self.temperature,
                               max_tokens=self.max_completion_length, timeout=600, max_retries=1)  # fmt: skip

        guided = None
        if self.navigator is not None:  # hybrid rollouts: the first round(eta * G) of each group are guided
            n_guided = round(self.args.navigation_settings.eta * self.num_generations)
            guided = [index < n_guided for _, _, index in items]

        async def run() -> list[Trajectory]:
            try:
                return await arun_rollout_items(
                    self.args.agent_for_rollouts(),
                    items,
                    policy=chat,
                    navigator=self.navigator,
                    guided=guided,
                    context_template=self.args.context_for_user_agents(),
                    max_turns=self.args.max_turns,
                    require_policy=True,
                    concurrency=self.args.rollout_concurrency,
                    env_factory=self.env_factory,
                    callbacks=with_training_step(self.rollout_callbacks, self.state.global_step, model_name),
                    progress="rollouts" if self.accelerator.is_main_process else False,
                )
            finally:
                await chat.aclose()

        return self._loop.run_until_complete(run())

    def _stop_if_rollouts_failed(self, trajectories: list[Trajectory], step: int) -> None:
        """Raise on every rank when more than ``max_failed_rollout_share`` of the step's rollouts failed outside
        the policy: the endpoint errors (a broken adapter, a dead server) or the environment is down. Nothing of
        this step is trained; the checkpoints already saved stay, and the message says how to resume."""
        failed = failed_rollouts(trajectories)
        first = next((e for t in failed for e in t.errors), None)
        counts = gather_object([(len(failed), len(trajectories), first)])
        n_failed, n_all = sum(c[0] for c in counts), sum(c[1] for c in counts)
        if not n_all or n_failed / n_all <= self.args.max_failed_rollout_share:
            return
        from langgraph_evolver.errors import PolicyEndpointError

        first_error = next((c[2] for c in counts if c[2]), "none recorded")
        checkpoints = sorted(Path(self.args.output_dir).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
        kept = "No checkpoint was saved before this step."
        if checkpoints:
            kept = (f"The last checkpoint is {checkpoints[-1]}: resume from it with --resume_from_checkpoint true "
                    "once the endpoint serves again.")  # fmt: skip
        served = self.policy.current if self.policy is not None else "the served model"
        raise PolicyEndpointError(f"{n_failed} of {n_all} rollouts for training step {step + 1} failed outside the "
                                  f"policy (model "
                                  f"{served}; more than max_failed_rollout_share={self.args.max_failed_rollout_share})"
                                  f", so the run stops instead of training on them. {kept} First error: "
                                  f"{first_error}")  # fmt: skip

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:  # type: ignore[override]
        """One generation step: rollouts of this rank's tasks, advantages over every rank's, micro-batches of rows."""
        self._sync_policy()
        step = self.state.global_step
        offset = self.accelerator.process_index * len(inputs)  # where this rank's rollouts sit among every rank's
        started = time.perf_counter()
        trajectories = self._run_rollouts(self._rollout_items(inputs, step, offset))
        if self.dynamic_sampler is not None:  # zero-variance groups replaced from the pool (dynamic_sampling.py)
            trajectories = refill_step(self, trajectories, len(inputs), offset, step)
        rollout_s = time.perf_counter() - started
        self._stop_if_rollouts_failed(trajectories, step)
        self._stop_if_no_policy_call(trajectories, step)
        trajectories = self._attribute(trajectories)
        self.last_trajectories = trajectories

        scores = gather_object([self._score(t) for t in trajectories])  # every rank's rollouts, in rank order
        per_rollout, adv = self._advantages(scores, step)
        mine = per_rollout[offset : offset + len(trajectories)]
        # LangSmith (when traced): step, model version, reward, advantage and finish reason on each rollout's root
        annotate_rollouts(self.rollout_callbacks, trajectories, mine, step=step)
        samples = self._training_rows(self._navigate(trajectories, step), mine)
        ranks = gather_object([RankSummary.of(trajectories, samples, self._version_steps, step)])
        total = RankSummary.total(ranks)
        samples = self._pad_rows(samples, max(r.samples for r in ranks))
        if total.trained_tokens == 0 and self.accelerator.is_main_process:
            logger.warning("step %d: no usable rollouts (%d failed, %d of %d groups zero-variance); this step has no "
                           "gradient.", step, sum(s.reward is None for s in scores), adv.zero_variance_groups,
                           adv.groups)  # fmt: skip
        # what TRL's token-summed loss divides by: tokens, or calls for the sequence-normalized loss types
        normalizer = total.transitions if self._sequence_weight is not None else total.trained_tokens
        batches, padded = self._micro_batches(samples, torch.tensor(float(normalizer), device=self.accelerator.device),
                                              step)  # fmt: skip

        metrics = self._metrics["train"]
        log_generation(metrics, scores, adv, total, rollout_s)
        if self.accelerator.is_main_process and total.failed_reasons:
            logger.warning("step %d: %d rollouts failed (left out of their groups): %s", step,
                           metrics["rollout/failed"][-1], total.failed_reasons[:300])  # fmt: skip
        metrics["samples/padded_tokens"].append(padded)
        self._save_trajectories(trajectories, step)
        metrics["rollout/time_s"].append(rollout_s)
        return batches

    def _rollout_items(self, inputs: list[dict[str, Any]], step: int, offset: int) -> list[tuple[Task, str, int]]:
        """``(task, group id, index in its group)`` per row; TRL's sampler put a task's ``num_generations`` rows
        next to each other across ranks, so the global row index says which group a row belongs to."""
        g = self.num_generations
        tasks = [Task.from_dict(json.loads(row["task"])) for row in inputs]
        return [(t, f"step{step}/{t.id}#{(offset + i) // g}", (offset + i) % g) for i, t in enumerate(tasks)]

    def _stop_if_no_policy_call(self, trajectories: list[Trajectory], step: int) -> None:
        """Raise when rollouts ran but none called the policy (a graph that ignores the model it is given)."""
        untrainable = [t for t in trajectories if (t.metadata.get("capture") or {}).get("policy_calls") == 0]
        if trajectories and len(untrainable) == len(trajectories) and any(t.steps for t in untrainable):
            from langgraph_evolver.errors import ConfigError

            raise ConfigError(f"No rollout of step {step} made a call through the policy, so nothing can be "
                              f"trained. {untrainable[0].errors[0] if untrainable[0].errors else ''}")  # fmt: skip

    def _score(self, trajectory: Trajectory) -> RolloutScore:
        args = self.args
        return RolloutScore.of(trajectory, malformed_call_penalty=args.malformed_call_penalty,
                               policy_failure_reward=args.policy_failure_reward,
                               attributing=self.judge is not None)  # fmt: skip

    def _training_rows(self, trajectories: list[Trajectory], advantages: list[list[float] | None]) -> list[Sample]:
        """The rows of the rollouts with a signal; with none, one probe row (no gradient, the logprob gap is still
        checked) in a padding row's place."""
        samples: list[Sample] = []
        unsignalled: list[Trajectory] = []
        for traj, step_advantages in zip(trajectories, advantages, strict=True):
            values = transition_advantages(traj, step_advantages)
            if values is None:
                unsignalled.append(traj)
            else:
                samples.extend(self._samples(traj, values))
        if not samples:
            probe = probe_sample([row for traj in unsignalled for row in self._samples(traj, 0.0)])
            if probe is not None:
                samples.append(probe)
        return samples

    def _pad_rows(self, samples: list[Sample], busiest: int) -> list[Sample]:
        """Fully masked rows up to the busiest rank's row count, rounded up to whole micro-batches: every rank
        runs the same number of forward passes."""
        rows = math.ceil(max(busiest, 1) / self.args.steps_per_generation) * self.args.steps_per_generation
        return samples + [padding_sample(self._tokenizer.pad_token_id, self.epsilon_high)
                          for _ in range(rows - len(samples))]  # fmt: skip

    def _micro_batches(self, samples: list[Sample], num_items: torch.Tensor, step: int) -> tuple[list[Any], int]:
        """The ``steps_per_generation`` micro-batches (each a list of sub-batches under
        ``max_tokens_per_microbatch``), and the tokens they compute, padding included."""
        args, device = self.args, self.accelerator.device
        pad_id = self._tokenizer.pad_token_id
        computed = 0

        def build(chunk: list[Sample]) -> dict[str, Any]:
            nonlocal computed
            computed += padded_tokens(chunk)
            return self._finish_batch({k: v.to(device) for k, v in collate(chunk, pad_id).items()}, num_items)

        seed = args.seed * 1_000_003 + step
        if args.max_tokens_per_microbatch:
            slots = token_budget_slots(samples, args.steps_per_generation, args.max_tokens_per_microbatch, seed=seed)
            # Every rank runs as many passes as the busiest slot of any rank (ZeRO-3 gathers per pass), and pass i
            # of slot j has the same number of rows on every rank (TRL's loss gathers per-row metrics): the
            # shorter ones get fully masked padding rows.
            ranks = gather_object([[[len(sub) for sub in slot] for slot in slots]])
            passes = max(len(slot) for rank in ranks for slot in rank)

            def rows(j: int, i: int) -> int:
                return max(max(rank[j][i] if i < len(rank[j]) else 0 for rank in ranks), 1)

            plan = [[list(sub) for sub in slot] + [[] for _ in range(passes - len(slot))] for slot in slots]
            batches: list[Any] = [
                [build(sub + [padding_sample(pad_id, self.epsilon_high) for _ in range(rows(j, i) - len(sub))])
                 for i, sub in enumerate(slot)]
                for j, slot in enumerate(plan)
            ]  # fmt: skip
            self._metrics["train"]["samples/forward_passes"].append(passes * args.steps_per_generation)
            return batches, computed
        chunks = length_grouped_chunks(samples, args.steps_per_generation)
        if args.steps_per_generation > args.gradient_accumulation_steps:
            # several optimizer steps per generation: which length bucket each one sees is random, not sorted
            random.Random(seed).shuffle(chunks)
        batches = [build(chunk) for chunk in chunks]
        if loss_spec(self.loss_type).micro_batch_mean:  # a padding-only micro-batch must not count in bnpo's divisor
            live = [bool(b["tool_mask"].any()) for b in batches]
            for b, scale in zip(batches, live_window_scales(live, args.gradient_accumulation_steps), strict=True):
                b["loss_scale"] = torch.tensor(scale, device=device)
        return batches, computed

    def _samples(self, trajectory: Trajectory, advantages: float | list[float]) -> list[Sample]:
        """The training rows of one rollout (merging, length limits and selective boosting from the config)."""
        args = self.args
        epsilon_high: float | list[float] = self.epsilon_high
        if self.navigator is not None:
            from langgraph_evolver.experience import epsilon_highs

            epsilon_high = epsilon_highs(trajectory, advantages, epsilon_high=self.epsilon_high,
                                         boost=args.navigation_settings.boost_epsilon_high)  # fmt: skip
            if any(e != self.epsilon_high for e in epsilon_high):
                self._metrics["train"]["navigation/boosted_calls"].append(sum(e != self.epsilon_high
                                                                              for e in epsilon_high))  # fmt: skip
        return trajectory_samples(trajectory, advantages, epsilon_high=epsilon_high,
                                  merge=args.merge_prefix_transitions, max_length=self.max_sample_length,
                                  sequence_weight=self._sequence_weight)  # fmt: skip

    def _navigate(self, trajectories: list[Trajectory], step: int) -> list[Trajectory]:
        """Self-navigating: strip (or keep) the injected blocks, log, and update the pool from this step's rollouts."""
        if self.navigator is None:
            return trajectories
        from accelerate.utils import broadcast_object_list

        from langgraph_evolver.experience import Experience, extract_experiences, prepare_for_training
        from langgraph_evolver.experience.navigate import is_guided, retrieved_ids

        nav = self.args.navigation_settings
        prepared = prepare_for_training(trajectories, self._tokenizer, mode=nav.mode)
        m = self._metrics["train"]
        ranks = gather_object([[t.to_dict() for t in trajectories]] if step % nav.update_every == 0 else
                              [[{"reward": t.reward, "metadata": {"experience": t.metadata.get("experience")},
                                 "experience_ids": list(t.experience_ids)} for t in trajectories]])  # fmt: skip
        everything = [t for rank in ranks for t in rank]
        guided = [t for t in everything if is_guided(t)]
        retrieved = [t for t in guided if retrieved_ids(t)]
        m["navigation/guided_share"].append(len(guided) / len(everything) if everything else 0.0)
        m["navigation/retrieved_share"].append(len(retrieved) / len(guided) if guided else 0.0)
        for name, group in (("guided", guided), ("unguided", [t for t in everything if t not in guided])):
            rewards = [t["reward"] for t in group if t.get("reward") is not None]
            if rewards:
                m[f"navigation/{name}_reward"].append(statistics.fmean(rewards))
        m["navigation/strip_failed"].append(prepared.strip_failed)
        for t in retrieved:  # use counts: every rank applies the same updates, so pools stay identical
            self.pool.record_use(retrieved_ids(t), succeeded=(t.get("reward") or 0.0) >= 1.0)
        if step % nav.update_every == 0:
            fresh: list = [None]
            if self.accelerator.is_main_process:
                result = extract_experiences([Trajectory.from_dict(t) for t in everything], self.extractor, step=step)
                fresh = [[e.to_dict() for e in result.experiences]]
            fresh = broadcast_object_list(fresh)
            self.pool.add([Experience.from_dict(e) for e in fresh[0]])
            if self.accelerator.is_main_process:
                self.pool.save()
        m["navigation/pool_size"].append(len(self.pool))
        return prepared.trajectories

    def _attribute(self, trajectories: list[Trajectory]) -> list[Trajectory]:
        """Label every step GOOD/BAD with the judge (self-attributing); a judge failure is a fallback."""
        if self.judge is None:
            return trajectories
        started = time.perf_counter()
        verdicts = self._loop.run_until_complete(aattribute_batch(trajectories, self.judge))
        labelled = [apply_attribution(t, v) for t, v in zip(trajectories, verdicts, strict=True)]
        stats = summarize_attributions(verdicts)
        local = {key: stats[key] for key in _JUDGE_TOTALS} | dict.fromkeys(
            ("good_success", "steps_success", "good_failed", "steps_failed"), 0
        )
        for t in labelled:
            signs = label_signs(t) or []
            side = "success" if (t.reward or 0.0) >= 1.0 else "failed"
            local[f"good_{side}"] += sum(x > 0 for x in signs)
            local[f"steps_{side}"] += len(signs)
        ranks = gather_object([local])
        total = {key: sum(r[key] for r in ranks) for key in local}
        m = self._metrics["train"]
        for side in ("success", "failed"):
            if total[f"steps_{side}"]:
                m[f"attribution/good_share_{side}"].append(total[f"good_{side}"] / total[f"steps_{side}"])
        for key in _JUDGE_TOTALS:
            m[f"attribution/{key}"].append(total[key])
        m["attribution/latency_s"].append(time.perf_counter() - started)
        if langsmith_enabled():  # labels as feedback on each step's LLM run, off the training path
            project = next((c.project_name for c in self.rollout_callbacks if isinstance(c, RolloutTracer)), None)
            threading.Thread(target=write_langsmith_feedback, args=(labelled,), kwargs={"project": project},
                             daemon=True).start()  # fmt: skip
        return labelled

    def _advantages(self, scores: list[RolloutScore], step: int) -> tuple[list[list[float] | None], Any]:
        """Per rollout: GRPO's one advantage (as a 1-list), or ADCA's one per step."""
        rewards = [s.reward for s in scores]
        groups = [s.group_id for s in scores]
        settings = self.args.attribution_settings
        if self.judge is None:
            adv = group_advantages(rewards, groups, scale=self.args.scale_rewards)
            return [None if a is None else [a] for a in adv.advantages], adv
        alpha = adca_alpha(step, alpha=settings.alpha, decay=settings.alpha_decay, cutoff=settings.cutoff)
        res = adca_advantages(
            rewards,
            [s.labels for s in scores],  # type: ignore[misc]
            groups,
            alpha=alpha,
            process_standardization=settings.process_standardization,
        )
        self._metrics["train"]["adca/alpha"].append(alpha)
        self._metrics["train"]["adca/no_signal_share"].append(res.no_signal_groups / res.groups if res.groups else 0.0)
        return res.step_advantages, res

    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None,
                          tags: Any = None) -> None:  # fmt: skip
        """The run's own card (``trainers/model_card.py``) instead of TRL's generic one, at every checkpoint."""
        if not self.is_world_process_zero() or self.card_info is None:
            return
        from .model_card import write_model_card

        write_model_card(Path(self.args.output_dir) / "README.md", step=self.state.global_step, final=False,
                         **self.card_info)  # fmt: skip

    # -- logging ------------------------------------------------------------------------------------
    def _save_trajectories(self, trajectories: list[Trajectory], step: int) -> None:
        if not self.args.save_trajectories or not self.accelerator.is_main_process:
            return
        out = Path(self.args.output_dir) / "trajectories"
        out.mkdir(parents=True, exist_ok=True)
        write_jsonl(out / f"step_{step:05d}.jsonl", trajectories[: self.args.save_trajectories])

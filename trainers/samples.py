"""Trajectories → training samples → padded tensors.

A *sample* is one row the loss sees: a prompt, then a completion region whose tokens are either
sampled by the policy (trained: they carry a behaviour logprob, an advantage and an upper clip
bound) or context that arrived between two calls (tool observations, the next turn's template
tokens: masked out).

One LLM call is one sample. With the causal context template each call's prompt is usually the
previous prompt + the previous completion + the new observation, token for token, so consecutive
calls of one trajectory may be merged into one sample: the shared prefix is then computed once
instead of once per turn. Merging only happens where that prefix relation holds exactly (checked
on the ids, never assumed) and the merged row stays under ``max_length``. It does not always
hold: the endpoint re-renders each prompt from the chat text, so a completion sampled with an
unusual split of a word (``flight`` + ``e``) is re-tokenized differently in the next prompt
(``fligh`` + ``te``); a new row starts there (about 1 row in 18 ten-call trajectories of the
tiny policy). Each row trains on its prompt exactly as it was served.

Rows are padded the TRL way: prompts on the left (``prompt_mask``), completions on the right
(``completion_mask`` = attended, ``tool_mask`` = trained, ``sampled_mask`` = sampled by the policy,
whose logprobs the trainer compares with the endpoint's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langgraph_evolver.types import Trajectory, Transition

from .loss_types import LOSS_TYPES, loss_spec

__all__ = [
    "SEQUENCE_NORMALIZED_LOSSES",
    "TOKEN_SUMMED_LOSSES",
    "Sample",
    "collate",
    "length_grouped_chunks",
    "live_window_scales",
    "padded_tokens",
    "padding_sample",
    "probe_sample",
    "sequence_weight",
    "token_budget_slots",
    "trajectory_samples",
]

SEQUENCE_NORMALIZED_LOSSES = tuple(name for name, spec in LOSS_TYPES.items() if spec.sequence_normalized)
"""Loss types whose rows carry per-call weights (``sequence_weight``); see ``trainers.loss_types``, which decides."""

TOKEN_SUMMED_LOSSES = tuple(name for name, spec in LOSS_TYPES.items() if not spec.sequence_normalized)
"""Loss types whose merged rows are exact as they are; see ``trainers.loss_types``."""


def live_window_scales(live: Sequence[bool], window: int) -> list[float]:
    """``loss_type: bnpo``: per micro-batch, ``window / live micro-batches of its accumulation window`` (1.0 for an
    empty one). bnpo averages each micro-batch's tokens and divides by the accumulation steps, so a micro-batch
    of padding rows only (fewer rows than micro-batches) would still count in that divisor and shrink the step."""
    scales = []
    for start in range(0, len(live), window):
        part = live[start : start + window]
        n = sum(part)
        scales += [len(part) / n if n and alive else 1.0 for alive in part]
    return scales


def sequence_weight(loss_type: str, max_completion_length: int) -> Any:
    """``n_tokens -> weight`` of each token of one call under ``loss_type``, or ``None`` (token-summed losses):
    its ``trainers.loss_types`` entry's ``call_weight``."""
    weight = loss_spec(loss_type).call_weight
    return None if weight is None else lambda n: weight(n, max_completion_length)


@dataclass(slots=True, kw_only=True)
class Sample:
    """One training row (plain lists; see the module docstring)."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    train_mask: list[int] = field(default_factory=list)
    """1 where the token gets a gradient (sampled by the policy, with a signal), 0 otherwise."""
    sampled_mask: list[int] = field(default_factory=list)
    """1 where the token was sampled by the policy (its behaviour logprob can be checked)."""
    old_logps: list[float] = field(default_factory=list)
    """Behaviour logprobs as sampled (0.0 on context tokens, which are masked)."""
    advantages: list[float] = field(default_factory=list)
    epsilon_high: list[float] = field(default_factory=list)
    keep_behaviour: list[int] = field(default_factory=list)
    """1 on tokens of transitions whose old logprobs stay the behaviour ones even under
    ``importance_correction: tis`` (self-navigating stripped their prompt: docs/self-navigating.md)."""
    transitions: int = 0
    model_versions: list[str] = field(default_factory=list)
    trajectory_id: str = ""

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)

    @property
    def trained_tokens(self) -> int:
        return sum(self.train_mask)

    def _append(self, ids: Sequence[int], *, trained: bool, logps: Sequence[float] = (),
                advantage: float = 0.0, epsilon_high: float = 0.0, keep_behaviour: bool = False) -> None:  # fmt: skip
        n = len(ids)
        self.keep_behaviour.extend([int(keep_behaviour and trained)] * n)
        self.completion_ids.extend(ids)
        self.train_mask.extend([int(trained)] * n)
        self.sampled_mask.extend([int(trained)] * n)
        self.old_logps.extend(logps if trained else [0.0] * n)
        self.advantages.extend([advantage if trained else 0.0] * n)
        self.epsilon_high.extend([epsilon_high] * n)

    def _add_call(self, tr: Transition, advantage: float, epsilon_high: float) -> None:
        self._append(tr.completion_ids, trained=True, logps=tr.logprobs, advantage=advantage, epsilon_high=epsilon_high,
                     keep_behaviour=tr.experience_span is not None)  # fmt: skip
        self.transitions += 1
        self.model_versions.append(tr.model_version)


def _extends(sample: Sample, tr: Transition) -> bool:
    """True when ``tr``'s prompt starts with everything ``sample`` holds (exact ids)."""
    n_prompt, n = len(sample.prompt_ids), len(sample)
    if len(tr.prompt_ids) < n:
        return False
    return (list(tr.prompt_ids[:n_prompt]) == sample.prompt_ids
            and list(tr.prompt_ids[n_prompt:n]) == sample.completion_ids)  # fmt: skip


def trajectory_samples(
    trajectory: Trajectory,
    step_advantages: float | Sequence[float],
    *,
    epsilon_high: float | Sequence[float] = 0.28,
    merge: bool = True,
    max_length: int | None = None,
    sequence_weight: Any = None,
) -> list[Sample]:
    """The training rows of one trajectory.

    Args:
        trajectory: A finished rollout; steps without a transition (no token ids) are skipped.
        step_advantages: One advantage for the whole trajectory (GRPO), or one per transition
            (step-level credit, e.g. ADCA), broadcast to that call's completion tokens.
        epsilon_high: The upper clip bound, for all calls or one per transition (selective
            boosting widens it for some calls).
        merge: Merge consecutive calls whose prompts extend each other into one row.
        max_length: Never merge a row beyond this many tokens (the model's window).
        sequence_weight: ``n_tokens -> weight`` multiplied into each call's advantage (see
            ``SEQUENCE_NORMALIZED_LOSSES``).
    """
    transitions = trajectory.transitions
    n = len(transitions)
    advs = (
        [float(step_advantages)] * n
        if isinstance(step_advantages, int | float)
        else [float(a) for a in step_advantages]
    )
    eps = [float(epsilon_high)] * n if isinstance(epsilon_high, int | float) else [float(e) for e in epsilon_high]
    if len(advs) != n or len(eps) != n:
        raise ValueError(f"Trajectory {trajectory.id} has {n} transitions but {len(advs)} advantages and "
                         f"{len(eps)} clip bounds; give one value or one per transition.")  # fmt: skip
    samples: list[Sample] = []
    current: Sample | None = None
    for tr, adv, eh in zip(transitions, advs, eps, strict=True):
        if sequence_weight is not None:
            adv *= sequence_weight(len(tr.completion_ids))
        fits = max_length is None or len(tr.prompt_ids) + len(tr.completion_ids) <= max_length
        if merge and current is not None and fits and _extends(current, tr):
            current._append(tr.prompt_ids[len(current) :], trained=False, epsilon_high=eh)
            current._add_call(tr, adv, eh)
            continue
        current = Sample(prompt_ids=list(tr.prompt_ids), trajectory_id=trajectory.id)
        current._add_call(tr, adv, eh)
        samples.append(current)
    return samples


def padding_sample(pad_token_id: int, epsilon_high: float = 0.28) -> Sample:
    """A fully masked row (one pad prompt token, one masked completion token): no gradient.

    Used so that every rank runs the same number of micro-batches and collectives line up.
    """
    s = Sample(prompt_ids=[pad_token_id], trajectory_id="<padding>")
    s._append([pad_token_id], trained=False, epsilon_high=epsilon_high)
    return s


def probe_sample(samples: Sequence[Sample]) -> Sample | None:
    """The shortest of ``samples`` as a row with no gradient that still checks logprobs.

    A step whose rollouts carry no signal (every group zero-variance) trains on nothing, but the
    trainer should still verify that the endpoint served its weights; this row is used in place of
    a padding row (same cost), with its sampled tokens attended and compared, none trained.
    """
    real = [s for s in samples if any(s.sampled_mask)]
    if not real:
        return None
    s = min(real, key=len)
    return replace(s, train_mask=[0] * len(s.train_mask), advantages=[0.0] * len(s.advantages))


def length_grouped_chunks(samples: Sequence[Sample], num_chunks: int) -> list[list[Sample]]:
    """Split rows into ``num_chunks`` micro-batches of similar lengths.

    A micro-batch costs (rows x its longest row) tokens, since every row is padded to the longest.
    Sorting by length and cutting into contiguous runs keeps that close to the real token count;
    a random split (TRL's shuffle) pads most rows to the batch's longest merged trajectory. Each
    chunk gets ``len(samples) // num_chunks`` rows (the first ones one more), so no chunk is empty
    when there are at least ``num_chunks`` rows.
    """
    if num_chunks < 1:
        raise ValueError("num_chunks must be >= 1")
    ordered = sorted(samples, key=len, reverse=True)
    size, extra = divmod(len(ordered), num_chunks)
    chunks, start = [], 0
    for i in range(num_chunks):
        end = start + size + (1 if i < extra else 0)
        chunks.append(ordered[start:end])
        start = end
    return chunks


def token_budget_slots(samples: Sequence[Sample], num_slots: int, max_tokens: int, *,
                       seed: int = 0) -> list[list[list[Sample]]]:  # fmt: skip
    """Pack rows into sub-batches of at most ``max_tokens`` padded tokens, spread over ``num_slots`` micro-batches.

    Rows are sorted by length and cut into sub-batches (buckets) whose padded size stays under the budget,
    so padding stays low and no forward pass holds more than ``max_tokens`` tokens (a single row longer
    than the budget gets a sub-batch of its own). The buckets are then shuffled and dealt to the slots,
    each to the slot with the fewest tokens so far: which rows an optimizer step sees does not depend on
    their length (with ``steps_per_generation > gradient_accumulation_steps`` a length-sorted split gave
    the first optimizer step only the longest rollouts). A slot may be empty when there are fewer buckets
    than slots; the caller pads (every rank must run the same number of forward passes).
    """
    import random

    if num_slots < 1 or max_tokens < 1:
        raise ValueError("num_slots and max_tokens must be >= 1")
    buckets: list[list[Sample]] = []
    current: list[Sample] = []
    for s in sorted(samples, key=len, reverse=True):
        if current and padded_tokens([*current, s]) > max_tokens:
            buckets.append(current)
            current = []
        current.append(s)
    if current:
        buckets.append(current)
    random.Random(seed).shuffle(buckets)
    slots: list[list[list[Sample]]] = [[] for _ in range(num_slots)]
    load = [0] * num_slots
    for bucket in buckets:
        i = min(range(num_slots), key=lambda k: (load[k], len(slots[k])))
        slots[i].append(bucket)
        load[i] += padded_tokens(bucket)
    return slots


def padded_tokens(chunk: Sequence[Sample]) -> int:
    """Tokens a micro-batch actually computes: rows x (longest prompt + longest completion)."""
    if not chunk:
        return 0
    return len(chunk) * (max(len(s.prompt_ids) for s in chunk) + max(len(s.completion_ids) for s in chunk))


def collate(samples: Sequence[Sample], pad_token_id: int) -> dict[str, Any]:
    """Pad rows into the tensors TRL's loss reads (prompts left-padded, completions right-padded)."""
    import torch

    if not samples:
        raise ValueError("collate needs at least one sample")
    p_len = max(len(s.prompt_ids) for s in samples)
    c_len = max(len(s.completion_ids) for s in samples)
    b = len(samples)
    prompt_ids = torch.full((b, p_len), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((b, p_len), dtype=torch.long)
    completion_ids = torch.full((b, c_len), pad_token_id, dtype=torch.long)
    completion_mask = torch.zeros((b, c_len), dtype=torch.long)
    tool_mask = torch.zeros((b, c_len), dtype=torch.long)
    sampled_mask = torch.zeros((b, c_len), dtype=torch.long)
    old_logps = torch.zeros((b, c_len), dtype=torch.float32)
    advantages = torch.zeros((b, c_len), dtype=torch.float32)
    eps_high = torch.zeros((b, c_len), dtype=torch.float32)
    keep_behaviour = torch.zeros((b, c_len), dtype=torch.long)
    for i, s in enumerate(samples):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        prompt_ids[i, p_len - p :] = torch.tensor(s.prompt_ids)
        prompt_mask[i, p_len - p :] = 1
        completion_ids[i, :c] = torch.tensor(s.completion_ids)
        completion_mask[i, :c] = 1
        tool_mask[i, :c] = torch.tensor(s.train_mask)
        sampled_mask[i, :c] = torch.tensor(s.sampled_mask)
        old_logps[i, :c] = torch.tensor(s.old_logps)
        advantages[i, :c] = torch.tensor(s.advantages)
        eps_high[i, :c] = torch.tensor(s.epsilon_high)
        if s.keep_behaviour:
            keep_behaviour[i, :c] = torch.tensor(s.keep_behaviour)
        if c and not any(s.sampled_mask):  # a padding row attends to nothing it could learn from
            completion_mask[i, :c] = 0
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
        "sampled_mask": sampled_mask,
        "old_per_token_logps": old_logps,
        "advantages": advantages,
        "epsilon_high": eps_high,
        "keep_behaviour_mask": keep_behaviour,
        # the truncated importance weight (``importance_correction: tis``); 1 until the trainer sets it. TRL's
        # loss reads this key whenever use_vllm is on, so every batch carries it.
        "importance_sampling_ratio": torch.ones((b, c_len), dtype=torch.float32),
    }

"""GRPO advantages, training rows, merging and masks on hand-computed examples."""

from __future__ import annotations

import math

import pytest

from langgraph_evolver.advantages import group_advantages
from tests._trajectories import make_trajectory as _traj
from tests._trajectories import make_transition as _tr
from trainers.samples import (
    collate,
    length_grouped_chunks,
    padded_tokens,
    padding_sample,
    probe_sample,
    trajectory_samples,
)


# -- advantages ---------------------------------------------------------------------------------
def test_group_advantages_hand_computed():
    # group a: rewards 1, 0, 0.5 -> mean 0.5, sample std 0.5 -> (+1, -1, 0) (eps 1e-4)
    adv = group_advantages([1.0, 0.0, 0.5, 0.2, 0.2], ["a", "a", "a", "b", "b"])
    assert adv.advantages[:3] == pytest.approx([0.5 / 0.5001, -0.5 / 0.5001, 0.0])
    assert adv.advantages[3:] == [0.0, 0.0]
    assert (adv.groups, adv.zero_variance_groups, adv.zero_variance_share) == (2, 1, 0.5)


def test_failed_rollouts_are_left_out_of_the_baseline():
    adv = group_advantages([1.0, None, 0.0, None], ["a", "a", "a", "b"])
    assert adv.advantages[1] is None and adv.advantages[3] is None
    assert adv.advantages[0] == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-4))  # mean 0.5, std of (1, 0) = 0.7071
    assert adv.groups == 1 and adv.zero_variance_groups == 0  # group b has no valid reward at all


def test_scale_none_and_batch():
    none = group_advantages([1.0, 0.0, 0.4, 0.0], ["a", "a", "b", "b"], scale="none")
    assert none.advantages == pytest.approx([0.5, -0.5, 0.2, -0.2])
    batch = group_advantages([1.0, 0.0, 0.4, 0.0], ["a", "a", "b", "b"], scale="batch")
    std = math.sqrt(sum((r - 0.35) ** 2 for r in [1.0, 0.0, 0.4, 0.0]) / 3)
    assert batch.advantages[0] == pytest.approx(0.5 / (std + 1e-4))
    with pytest.raises(ValueError, match="must pair up"):
        group_advantages([1.0], ["a", "b"])


def test_single_member_group_is_zero_variance():
    adv = group_advantages([0.7], ["a"])
    assert adv.advantages == [0.0] and adv.zero_variance_groups == 1


# -- rows and merging ---------------------------------------------------------------------------
def test_prefix_extending_calls_merge_into_one_row_with_masks():
    t1 = _tr([1, 2, 3], [10, 11], logps=[-0.1, -0.2], version="v1")
    t2 = _tr([1, 2, 3, 10, 11, 50, 51], [12], logps=[-0.3], version="v2")  # + observation tokens 50, 51
    rows = trajectory_samples(_traj([t1, t2]), [2.0, -1.0], epsilon_high=[0.28, 0.6])
    assert len(rows) == 1
    r = rows[0]
    assert r.prompt_ids == [1, 2, 3]
    assert r.completion_ids == [10, 11, 50, 51, 12]
    assert r.train_mask == [1, 1, 0, 0, 1]
    assert r.old_logps == [-0.1, -0.2, 0.0, 0.0, -0.3]
    assert r.advantages == [2.0, 2.0, 0.0, 0.0, -1.0]
    assert r.epsilon_high == [0.28, 0.28, 0.6, 0.6, 0.6]
    assert (r.transitions, r.model_versions, r.trained_tokens, len(r)) == (2, ["v1", "v2"], 3, 8)


def test_no_merge_when_prompts_do_not_extend_or_when_disabled_or_too_long():
    t1, t2 = _tr([1, 2, 3], [10]), _tr([1, 2, 9, 10, 50], [12])  # history rewritten (e.g. sliding window)
    assert len(trajectory_samples(_traj([t1, t2]), 1.0)) == 2
    t2 = _tr([1, 2, 3, 10, 50], [12])
    assert len(trajectory_samples(_traj([t1, t2]), 1.0, merge=False)) == 2
    assert len(trajectory_samples(_traj([t1, t2]), 1.0, max_length=5)) == 2
    assert len(trajectory_samples(_traj([t1, t2]), 1.0, max_length=6)) == 1
    with pytest.raises(ValueError, match="one value or one per transition"):
        trajectory_samples(_traj([t1, t2]), [1.0])


def test_collate_pads_prompts_left_and_completions_right():
    a = trajectory_samples(_traj([_tr([1, 2, 3], [10, 11], logps=[-0.1, -0.2])]), 1.5)[0]
    b = trajectory_samples(_traj([_tr([4], [12, 13, 14], logps=[-1.0, -2.0, -3.0])]), -0.5)[0]
    batch = collate([a, b, padding_sample(0)], pad_token_id=0)
    assert batch["prompt_ids"].tolist() == [[1, 2, 3], [0, 0, 4], [0, 0, 0]]
    assert batch["prompt_mask"].tolist() == [[1, 1, 1], [0, 0, 1], [0, 0, 1]]
    assert batch["completion_ids"].tolist() == [[10, 11, 0], [12, 13, 14], [0, 0, 0]]
    assert batch["completion_mask"].tolist() == [[1, 1, 0], [1, 1, 1], [0, 0, 0]]  # padding row: nothing
    assert batch["tool_mask"].tolist() == [[1, 1, 0], [1, 1, 1], [0, 0, 0]]
    assert batch["advantages"].tolist() == [[1.5, 1.5, 0.0], [-0.5, -0.5, -0.5], [0.0, 0.0, 0.0]]
    assert batch["old_per_token_logps"][1].tolist() == pytest.approx([-1.0, -2.0, -3.0])


def test_probe_row_attends_and_checks_logprobs_but_trains_nothing():
    """A step with no signal still compares the trainer's logprobs with the endpoint's on one row."""
    long = trajectory_samples(_traj([_tr([1, 2, 3], [10, 11, 12])]), 0.0)
    short = trajectory_samples(_traj([_tr([4], [13], logps=[-0.7])]), 0.0)
    probe = probe_sample(long + short)
    assert probe is not None and probe.trained_tokens == 0 and probe.completion_ids == [13]
    batch = collate([probe, padding_sample(0)], pad_token_id=0)
    assert batch["completion_mask"].tolist() == [[1], [0]]  # attended like the served prompt
    assert batch["sampled_mask"].tolist() == [[1], [0]]  # its logprob is checked
    assert batch["tool_mask"].tolist() == [[0], [0]]  # no gradient, no loss or clip metrics
    assert batch["old_per_token_logps"][0].tolist() == pytest.approx([-0.7])
    assert short[0].trained_tokens == 1  # the source rows are not modified
    assert probe_sample([padding_sample(0)]) is None


def test_length_grouped_chunks_keep_padding_low():
    rows = [padding_sample(0) for _ in range(2)]
    for n in (50, 48, 30, 20):
        rows += trajectory_samples(_traj([_tr(list(range(n)), [1] * n)]), 1.0)
    chunks = length_grouped_chunks(rows, 3)
    assert [[len(r) for r in c] for c in chunks] == [[100, 96], [60, 40], [2, 2]]
    assert sum(padded_tokens(c) for c in chunks) == 200 + 120 + 4  # vs 6 x 100 padded to the longest
    assert all(length_grouped_chunks(rows, 6)) and len(length_grouped_chunks(rows, 6)) == 6
    with pytest.raises(ValueError):
        length_grouped_chunks(rows, 0)


def test_token_budget_packs_under_the_budget_and_mixes_lengths_across_micro_batches():
    from trainers.samples import token_budget_slots

    lengths = [200, 180, 160, 140, 120, 100, 80, 60, 40, 30, 20, 10, 6, 6, 4, 4]  # row lengths (prompt = completion)
    rows = [s for n in lengths for s in trajectory_samples(_traj([_tr(list(range(n // 2)), [1] * (n // 2))]), 1.0)]
    budget = 400
    slots = token_budget_slots(rows, 4, budget, seed=0)
    subs = [sub for slot in slots for sub in slot]
    assert sorted(len(r) for sub in subs for r in sub) == sorted(lengths)  # every row once
    assert all(padded_tokens(sub) <= budget for sub in subs)  # no forward pass over the budget
    assert all(slots), "every micro-batch gets work when there are enough buckets"
    # length-sorted contiguous micro-batches gave the first optimizer step (slot 0 with GA=1) only the longest
    # rows; buckets are dealt by token load after a shuffle, so the long rows spread over the micro-batches
    longest = {id(r) for r in sorted(rows, key=len, reverse=True)[:4]}
    per_slot = [sum(id(r) in longest for sub in slot for r in sub) for slot in slots]
    assert max(per_slot) < 4 and sum(per_slot) == 4
    loads = [sum(padded_tokens(sub) for sub in slot) for slot in slots]
    assert max(loads) <= 2 * min(loads)  # balanced by tokens, not by rows
    assert token_budget_slots(rows, 4, budget, seed=0) == slots  # deterministic for a seed
    (alone,) = [sub for slot in token_budget_slots(rows, 2, 100, seed=1) for sub in slot if len(sub[0]) == 200]
    assert len(alone) == 1  # a row longer than the budget runs alone
    with pytest.raises(ValueError):
        token_budget_slots(rows, 0, 100)

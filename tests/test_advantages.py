"""GRPO and ADCA advantages on hand-computed examples."""

from __future__ import annotations

import doctest
import math

import pytest

import langgraph_evolver.advantages as advantages_module
from langgraph_evolver.advantages import adca_advantages, adca_alpha, group_advantages

EPS = 1e-4


def test_docstring_examples():
    assert doctest.testmod(advantages_module).failed == 0


def test_adca_hand_computed():
    # outcomes (1, 0): mean .5, sample std .7071 -> +-0.5/(.7071+eps)
    # per-trajectory average labels (1, 0): mean .5, sample std .7071 -> GOOD +0.5/(.7071+eps),
    # BAD -1.5/(.7071+eps); x alpha .1
    adv = adca_advantages([1.0, 0.0], [[1, 1], [1, -1]], ["a", "a"], alpha=0.1)
    out = 0.5 / (math.sqrt(0.5) + EPS)
    good, bad = 0.1 * 0.5 / (math.sqrt(0.5) + EPS), 0.1 * -1.5 / (math.sqrt(0.5) + EPS)
    assert adv.step_advantages[0] == pytest.approx([good + good + out, good + out])
    assert adv.step_advantages[1] == pytest.approx([good + bad - out, bad - out])
    assert (adv.groups, adv.zero_variance_groups, adv.no_signal_groups, adv.fallbacks) == (1, 0, 0, 0)


def test_adca_pooled_hand_computed():
    # labels pooled (1, 1, 1, -1): mean .5, sample std 1 -> GOOD +0.5/(1+eps), BAD -1.5/(1+eps); x alpha .1
    adv = adca_advantages([1.0, 0.0], [[1, 1], [1, -1]], ["a", "a"], alpha=0.1, process_standardization="pooled")
    out = 0.5 / (math.sqrt(0.5) + EPS)
    good, bad = 0.1 * 0.5 / (1 + EPS), 0.1 * -1.5 / (1 + EPS)
    assert adv.step_advantages[0] == pytest.approx([good + good + out, good + out])
    assert adv.step_advantages[1] == pytest.approx([good + bad - out, bad - out])


def _process_terms(adv, alpha=1.0):
    """Recover each step's process reward r_t from the suffix sums (outcome removed from the last step)."""
    return [[a - (steps[t + 1] if t + 1 < len(steps) else 0.0) for t, a in enumerate(steps)] for steps in adv]


def test_long_trajectories_do_not_dominate_the_process_statistics():
    # The example: a success with 8 GOOD steps vs a failure [BAD, GOOD]. Compare the process channel only
    # (equal outcomes -> no outcome term).
    rewards, labels = [1.0, 1.0], [[1] * 8, [-1, 1]]
    paper = adca_advantages(rewards, labels, ["a", "a"], alpha=1.0)
    pooled = adca_advantages(rewards, labels, ["a", "a"], alpha=1.0, process_standardization="pooled")
    # per trajectory: averages (1, 0), mean .5, sample std .7071 -> GOOD +.71, BAD -2.12
    good, bad = 0.5 / (math.sqrt(0.5) + EPS), -1.5 / (math.sqrt(0.5) + EPS)
    steps = _process_terms(paper.step_advantages)
    assert steps[0] == pytest.approx([good] * 8) and steps[1] == pytest.approx([bad, good])
    assert round(good, 2) == 0.71 and round(bad, 2) == -2.12
    # pooled: nine +1 and one -1, mean .8, sample std sqrt(.4) -> GOOD +.32, BAD -2.85
    pgood, pbad = 0.2 / (math.sqrt(0.4) + EPS), -1.8 / (math.sqrt(0.4) + EPS)
    steps = _process_terms(pooled.step_advantages)
    assert steps[0] == pytest.approx([pgood] * 8) and steps[1] == pytest.approx([pbad, pgood])
    assert round(pgood, 2) == 0.32 and round(pbad, 2) == -2.85


def test_zero_variance_outcome_group_still_teaches_through_the_process_channel():
    adv = adca_advantages([1.0, 1.0], [[1, -1, 1], [1, 1]], ["a", "a"], alpha=0.2)
    assert adv.zero_variance_groups == 1 and adv.no_signal_groups == 0
    # average labels (1/3, 1): mean 2/3, sample std sqrt(2/9)
    mean, std = 2 / 3, math.sqrt(2 / 9)
    g, b = 0.2 * (1 - mean) / (std + EPS), 0.2 * (-1 - mean) / (std + EPS)
    assert adv.step_advantages[0] == pytest.approx([g + b + g, b + g, g])  # suffix sums, no outcome term
    assert adv.step_advantages[1] == pytest.approx([2 * g, g])
    assert group_advantages([1.0, 1.0], ["a", "a"]).advantages == [0.0, 0.0]  # GRPO: nothing


def test_all_steps_alike_and_flat_outcomes_give_no_signal():
    for mode in ("trajectory", "pooled"):
        adv = adca_advantages([0.5, 0.5], [[1, 1], [1]], ["a", "a"], process_standardization=mode)
        assert adv.step_advantages == [[0.0, 0.0], [0.0]] and adv.no_signal_groups == 1


def test_single_step_trajectories_reduce_to_process_plus_outcome():
    adv = adca_advantages([1.0, 0.0], [[1], [-1]], ["a", "a"], alpha=0.1)
    out = 0.5 / (math.sqrt(0.5) + EPS)
    p = 0.1 * 1 / (math.sqrt(2) + EPS)  # averages (1, -1): mean 0, sample std sqrt(2)
    assert adv.step_advantages[0] == pytest.approx([p + out])
    assert adv.step_advantages[1] == pytest.approx([-p - out])


def test_judge_fallback_is_outcome_only_and_counted():
    adv = adca_advantages([1.0, 0.0, 0.0], [[1, 1], None, [-1]], ["a", "a", "a"], alpha=0.1)
    mean, std = 1 / 3, math.sqrt(((2 / 3) ** 2 + 2 * (1 / 3) ** 2) / 2)
    assert adv.fallbacks == 1
    assert adv.step_advantages[1] == pytest.approx([(0.0 - mean) / (std + EPS)])  # one value for every step
    # the fallback does not enter the process statistics: averages (1, -1), mean 0, sample std sqrt(2)
    pm, ps = 0.0, math.sqrt(2)
    assert adv.step_advantages[2] == pytest.approx([0.1 * (-1 - pm) / (ps + EPS) + (0.0 - mean) / (std + EPS)])
    pooled = adca_advantages([1.0, 0.0, 0.0], [[1, 1], None, [-1]], ["a", "a", "a"], alpha=0.1,
                             process_standardization="pooled")  # fmt: skip
    pm, ps = 1 / 3, math.sqrt(((2 / 3) ** 2 * 2 + (4 / 3) ** 2) / 2)  # pooled = (1, 1, -1)
    assert pooled.step_advantages[2] == pytest.approx([0.1 * (-1 - pm) / (ps + EPS) + (0.0 - mean) / (std + EPS)])


def test_alpha_zero_is_grpo_broadcast_and_failed_rollouts_are_skipped():
    adv = adca_advantages([1.0, 0.0, None], [[1, -1], [-1], [1]], ["a", "a", "a"], alpha=0.0)
    grpo = group_advantages([1.0, 0.0, None], ["a", "a", "a"]).advantages
    assert adv.step_advantages[0] == pytest.approx([grpo[0]] * 2)
    assert adv.step_advantages[1] == pytest.approx([grpo[1]])
    assert adv.step_advantages[2] is None


def test_alpha_schedule_and_bad_input():
    assert adca_alpha(0) == 0.1 and adca_alpha(10, alpha=0.2, decay=0.9) == pytest.approx(0.2 * 0.9**10)
    assert adca_alpha(5, cutoff=5) == 0.0 and adca_alpha(4, cutoff=5) == 0.1
    with pytest.raises(ValueError, match=r"\+1 \(GOOD\) or -1 \(BAD\)"):
        adca_advantages([1.0], [[2]], ["a"])
    with pytest.raises(ValueError, match="one of each per rollout"):
        adca_advantages([1.0], [], ["a"])
    with pytest.raises(ValueError, match="'trajectory'"):
        adca_advantages([1.0], [[1]], ["a"], process_standardization="steps")  # type: ignore[arg-type]

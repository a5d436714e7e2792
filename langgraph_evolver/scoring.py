"""From a finished rollout to what training learns from it: its failure kind, reward and per-call advantages.

Pure functions over ``Trajectory`` (no torch): the trainer (``trainers/grpo_trainer.py``) and the
evaluation (``trainers/evaluate.py``) score rollouts through them, so both agree on what a failure
and a malformed call are.

- ``failure_kind``: a rollout that ended in an error failed because of the policy (its outputs
  outgrew the context window, a runaway episode: scored) or of the infrastructure (endpoint,
  environment, capture, a scoring crash even after the turn limit: left out, never scored as the
  policy's fault).
- ``shaped_reward``: the outcome reward minus ``malformed_call_penalty`` per malformed call of the
  policy; ``None`` for a rollout that must not get an advantage.
- ``transition_advantages``: a rollout's per-step advantages (GRPO's one value, ADCA's one per
  step) mapped onto its LLM calls.

Example:
    >>> from langgraph_evolver.types import Action, Step, Task, Trajectory, Transition
    >>> call = Transition(prompt_ids=(1,), completion_ids=(2,), logprobs=(-0.1,))
    >>> bad = Step(index=0, action=Action(content="<tool_call>{"), transition=call, error="unparseable tool call")
    >>> good = Step(index=1, action=Action(content="done"), transition=call)
    >>> t = Trajectory(id="r", task=Task(id="t", env="sandbox", query="q"), steps=(bad, good), reward=1.0)
    >>> failure_kind(t), malformed_calls(t), shaped_reward(t, 0.1)
    (None, 1, 0.9)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from .types import Trajectory

__all__ = [
    "POLICY_FAILURE_MARKERS",
    "failed_rollouts",
    "failure_kind",
    "malformed_calls",
    "outcome_reward",
    "shaped_reward",
    "transition_advantages",
    "well_formed_counts",
]

# Errors the policy caused (lower-case substrings of a trajectory's error lines). Context length:
# vLLM, SGLang, OpenAI and our server all say "maximum context length" (OpenAI's code is
# "context_length_exceeded"); a runaway episode: LangGraph's recursion limit or our turn limit
# raised where the rollout could not turn it into ``max_turns`` (inside a subgraph or a tool).
POLICY_FAILURE_MARKERS = (
    "maximum context length",
    "context_length_exceeded",
    "context length exceeded",
    "prompt is too long",
    "graphrecursionerror",
    "recursion limit",
    "turnlimitreached",
)


def failure_kind(trajectory: Trajectory) -> Literal["policy", "infrastructure"] | None:
    """Why a rollout ended in an error: ``"policy"`` (its own outputs caused it: score it),
    ``"infrastructure"`` (endpoint, environment, evaluation, capture: leave it out), or ``None``.

    A rollout counts as a policy failure only when every error line is one of
    ``POLICY_FAILURE_MARKERS``; any other error (or an unknown one) is infrastructure, so an
    outage is never scored as the policy's fault. A rollout that ended otherwise (its turn limit, a
    malformed call) but has an error and no reward is one whose scoring crashed: infrastructure too,
    so the evaluation and the trainer both leave it out (one rule, whatever ended the rollout).
    """
    if trajectory.finish_reason != "error":
        return "infrastructure" if trajectory.reward is None and trajectory.errors else None
    lines = [e.lower() for e in trajectory.errors]
    if lines and all(any(m in line for m in POLICY_FAILURE_MARKERS) for line in lines):
        return "policy"
    return "infrastructure"


def failed_rollouts(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    """The rollouts that failed outside the policy (endpoint, environment, capture): no score, counted apart."""
    return [t for t in trajectories if failure_kind(t) == "infrastructure"]


def malformed_calls(trajectory: Trajectory) -> int:
    """The policy's turns whose output could not be executed as a tool call (parse errors, bad tools/arguments).

    Only the policy's own calls count: another model of the graph that failed (a router's 429) is
    not the policy's doing, and its error is no reason to lower the policy's reward.
    """
    return sum(1 for s in trajectory.steps if s.error and s.policy)


def well_formed_counts(trajectories: Sequence[Trajectory]) -> tuple[int, int]:
    """(well-formed tool-call turns, tool-call attempts) of the policy's own calls over ``trajectories``."""
    attempts = ok = 0
    for traj in trajectories:
        for step in traj.steps:
            if not step.policy:  # another model of the graph (a router, a judge): not the policy's call
                continue
            if step.action.tool_calls or step.error:
                attempts += 1
                ok += bool(step.action.tool_calls) and step.error is None
    return ok, attempts


def shaped_reward(
    trajectory: Trajectory, malformed_call_penalty: float, *, policy_failure_reward: float = 0.0
) -> float | None:
    """Outcome reward minus the malformed-call penalty.

    A policy failure (``failure_kind``) scores ``policy_failure_reward`` minus the penalty; ``None``
    (no advantage, left out of its group) for an infrastructure failure or a rollout with no LLM call.
    """
    if not trajectory.transitions:
        return None
    kind = failure_kind(trajectory)
    if kind == "infrastructure" or (kind is None and trajectory.reward is None):
        return None
    base = policy_failure_reward if kind == "policy" else float(trajectory.reward)  # type: ignore[arg-type]
    return base - malformed_call_penalty * malformed_calls(trajectory)


def outcome_reward(trajectory: Trajectory) -> float | None:
    """The outcome reward the metrics report: 0 for a policy failure, none for an infrastructure one."""
    kind = failure_kind(trajectory)
    return trajectory.reward if kind is None else 0.0 if kind == "policy" else None


def transition_advantages(trajectory: Trajectory, step_advantages: list[float] | None) -> float | list[float] | None:
    """The advantages of a rollout's LLM calls: one value for all, one per call, or ``None`` (no signal).

    ``step_advantages`` is GRPO's one advantage (a 1-list) or ADCA's one per step; under ADCA a
    context-management step takes the advantage of the step after it.
    """
    if step_advantages is None or not any(step_advantages):
        return None
    if len(step_advantages) == 1:
        return step_advantages[0]
    if len(step_advantages) != len(trajectory.steps):
        raise ValueError(
            f"{len(step_advantages)} step advantages for the {len(trajectory.steps)} steps of {trajectory.id}."
        )
    values = list(step_advantages)
    following = values[-1]
    for i in range(len(values) - 1, -1, -1):
        if trajectory.steps[i].kind == "context":
            values[i] = following
        else:
            following = values[i]
    return [a for s, a in zip(trajectory.steps, values, strict=True) if s.transition is not None]

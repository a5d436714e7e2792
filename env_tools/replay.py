"""How an environment scores a synthesized (or trace) task by replaying its reference: the one rule.

Environments without a checker of their own for self-questioning's tasks (the LangChain-tools
environment; the MCP one when it lands) replay the task's reference solution in a fresh instance
and call ``replay_score`` with what they saw. A wrong episode must not be able to win:

- the agent's end state must equal the reference's, by value (else 0.0);
- a **write task** (the reference changes the state): the equal end state, times the share of the
  reference's tools the agent called (a task that also reads must be read too; the state shows the
  writes, so their arguments need no second check);
- a **read task** (it changes nothing, so every episode's state matches): half for a final answer
  that quotes a value the reference's reads returned (``langgraph_evolver.reference_scoring.expected_answer``), half
  for the reference's calls made with the same name and arguments (normalised). The reference
  call with an answer quoting its result scores 1.0; other arguments and another answer 0.0;
  doing nothing 0.0;
- a read task that carries no expected values (made by hand, or stored before they were recorded)
  is scored by its calls alone (name and arguments), with a warning logged once; never by tool
  names alone (which let any call of the right tool win, issue 30).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from env_tools._checks import answer_matches
from langgraph_evolver.reference_scoring import calls_match_share, expected_answer
from langgraph_evolver.types import Task, ToolCall

__all__ = ["replay_score"]

logger = logging.getLogger(__name__)
_warned: list[str] = []

ANSWER_WEIGHT = 0.5
"""The share of a read task's score that the final answer carries; the calls carry the rest."""


def replay_score(task: Task, *, state_matches: bool, changes_state: bool, calls: Sequence[ToolCall],
                 final_answer: str | None) -> float:  # fmt: skip
    """Score an episode of ``task`` against its replayed reference (see the module docstring).

    Args:
        task: the task, with its ``reference_solution`` (and, for a read task, its expected values).
        state_matches: the agent's end state equals the reference's end state, by value.
        changes_state: the reference changes the state of a fresh instance (a write task).
        calls: every call the agent made, in order.
        final_answer: the agent's closing text (None when it never answered).
    """
    if not state_matches:
        return 0.0
    if changes_state:
        called = {c.name for c in calls}
        reference = [c.name for c in task.reference_solution or ()]
        return sum(name in called for name in reference) / len(reference) if reference else 1.0
    share = calls_match_share(task.reference_solution or (), calls)
    expected = expected_answer(task)
    if expected is None:
        if not _warned:  # once per process: a store of old tasks would say it for every rollout
            _warned.append(task.id)
            logger.warning("task %s reads only and carries no expected answer (metadata 'answer' or "
                           "'expected_values'): it (and any other such task) is scored by its calls alone, name "
                           "and arguments; re-synthesize to check answers", task.id)  # fmt: skip
        return share
    answered = any(answer_matches(final_answer, value) for value in expected)
    return ANSWER_WEIGHT * answered + (1.0 - ANSWER_WEIGHT) * share

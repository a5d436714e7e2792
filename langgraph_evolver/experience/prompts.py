"""Prompts of LLM experience extraction, and how trajectories are shown in them.

Every prompt is a ``str.format`` template, overridable by keyword on ``LLMExtractor``.

``DEFAULT_EXTRACTION_PROMPT`` is one call per task, over that task's rollouts. Its fields:

- ``{task}``: the user's request;
- ``{successes}`` / ``{failures}``: the rendered successful and failed rollouts (``"(none)"``);
- ``{comparison}``: ``DEFAULT_COMPARISON_INSTRUCTIONS`` when both kinds exist, otherwise
  ``DEFAULT_SUCCESS_ONLY_INSTRUCTIONS`` or ``DEFAULT_FAILURE_ONLY_INSTRUCTIONS``;
- ``{max_experiences}``: the most experiences to write.

``DEFAULT_VALIDATION_PROMPT`` scores the candidates of one task, 0-10 each. Its fields: ``{task}``,
``{trajectories}`` (every rollout shown to the extractor), ``{candidates}`` (numbered from 1,
see ``render_candidates``) and ``{num_candidates}``.

``DEFAULT_EXTRACTION_RETRY_PROMPT`` follows an answer that was not a JSON list (``{problem}``);
``DEFAULT_VALIDATION_RETRY_PROMPT`` one that left candidates unscored (``{missing}``,
``{num_candidates}``).

Example:
    >>> from langgraph_evolver.types import Action, Step, Task, Trajectory
    >>> t = Trajectory(id="r", task=Task(id="a", query="Say hi"), reward=1.0,
    ...                steps=(Step(index=0, action=Action(content="hi")),))
    >>> print(render_trajectory(t, label="Success 1"))
    Success 1 (reward 1.00):
      1. final answer: "hi"
"""

from __future__ import annotations

from collections.abc import Sequence

from langgraph_evolver.rendering import render_action, render_observation, trim
from langgraph_evolver.types import Trajectory

__all__ = [
    "DEFAULT_COMPARISON_INSTRUCTIONS",
    "DEFAULT_EXTRACTION_PROMPT",
    "DEFAULT_EXTRACTION_RETRY_PROMPT",
    "DEFAULT_FAILURE_ONLY_INSTRUCTIONS",
    "DEFAULT_SUCCESS_ONLY_INSTRUCTIONS",
    "DEFAULT_VALIDATION_PROMPT",
    "DEFAULT_VALIDATION_RETRY_PROMPT",
    "EXTRACTION_PROMPT_FIELDS",
    "EXTRACTION_RETRY_PROMPT_FIELDS",
    "VALIDATION_PROMPT_FIELDS",
    "VALIDATION_RETRY_PROMPT_FIELDS",
    "render_candidates",
    "render_trajectories",
    "render_trajectory",
]

DEFAULT_EXTRACTION_PROMPT = """\
You are distilling lessons from an AI agent's attempts at one task, so that the agent does \
better on similar tasks later. The agent works by calling tools.

Task: {task}

Rollouts that succeeded:
{successes}

Rollouts that failed:
{failures}

{comparison}

Write 1 to {max_experiences} experiences. Each has:
- "when_to_use": the kind of situation it applies to, described generally (the kind of request, \
or the tool about to be called), so that it can be found again for a similar task;
- "content": concrete, actionable advice: which tools to call in which order, which arguments \
they need and where their values come from, which mistakes to avoid and how to recover from an error.
Write them general enough to transfer to similar tasks: no names, ids, amounts, dates or other \
values specific to this task (say "the contact's id", not "c41"). Do not restate the task.

Answer with only a JSON list, and nothing else:
[{{"when_to_use": "...", "content": "..."}}]"""

DEFAULT_COMPARISON_INSTRUCTIONS = """\
Compare the successful rollouts with the failed ones: what did the successes do that the failures \
did not (a tool, an order of calls, an argument, a check), and what did the failures do wrong?"""

DEFAULT_SUCCESS_ONLY_INSTRUCTIONS = """\
Every rollout shown succeeded: say what made them work (the tools, their order, where each \
argument's value came from), and what they had to recover from, if anything."""

DEFAULT_FAILURE_ONLY_INSTRUCTIONS = """\
Every rollout shown failed: say what went wrong and what to do instead, judging from the tool \
errors and results. Write only what the rollouts support; do not guess."""

DEFAULT_EXTRACTION_RETRY_PROMPT = """\
Your answer could not be read ({problem}). Reply again with only a JSON list, and nothing else:
[{{"when_to_use": "...", "content": "..."}}]"""

DEFAULT_VALIDATION_PROMPT = """\
You are checking lessons distilled from an AI agent's attempts at one task, before they are \
stored for reuse on similar tasks.

Task: {task}

The agent's rollouts:
{trajectories}

Candidate experiences:
{candidates}

Score each candidate from 0 to 10:
- 8-10: specific and actionable (names the tools, the order, the arguments or the check to make), \
consistent with what the rollouts show, and general enough to help on a similar task;
- 4-7: correct but vague, partly supported, or tied to this task's particular values;
- 0-3: wrong, contradicted by the rollouts, too vague to act on, or merely restating the task.

Answer with only a JSON list with one entry for each of the {num_candidates} candidates, and nothing else:
[{{"index": 1, "score": 7, "reason": "..."}}]"""

DEFAULT_VALIDATION_RETRY_PROMPT = """\
Your answer has no score for candidate(s) {missing}. Reply again with only a JSON list with one \
entry for each of the {num_candidates} candidates, and nothing else:
[{{"index": 1, "score": 7, "reason": "..."}}]"""

EXTRACTION_PROMPT_FIELDS = ("task", "successes", "failures", "comparison", "max_experiences")
EXTRACTION_RETRY_PROMPT_FIELDS = ("problem",)
VALIDATION_PROMPT_FIELDS = ("task", "trajectories", "candidates", "num_candidates")
VALIDATION_RETRY_PROMPT_FIELDS = ("missing", "num_candidates")


def render_trajectory(
    trajectory: Trajectory, *, label: str = "Rollout", max_observation_chars: int = 300, max_steps: int = 24
) -> str:
    """One rollout, compactly: a header with its reward, then one line per step.

    Args:
        trajectory: The rollout.
        label: Its header (``"Success 1"``).
        max_observation_chars: Each step's action and observation are trimmed to this length.
        max_steps: Longer rollouts keep their first and last steps, with a line saying how many
            were left out.
    """
    reward = "unknown" if trajectory.reward is None else f"{trajectory.reward:.2f}"
    lines = [f"{label} (reward {reward}):"]
    steps = list(trajectory.steps)
    keep = set(range(len(steps)))
    if max_steps > 0 and len(steps) > max_steps:
        head = max_steps // 2
        keep = set(range(head)) | set(range(len(steps) - (max_steps - head), len(steps)))
    for i, step in enumerate(steps):
        if i not in keep:
            if i - 1 in keep:
                lines.append(f"  ... ({len(steps) - len(keep)} steps left out)")
            continue
        action = render_action(step, max_observation_chars)
        if step.action.tool_calls or step.error:
            action = f"{action}\n     -> {render_observation(step, max_observation_chars)}"
        lines.append(f"  {i + 1}. {action}")
    if not steps:
        lines.append("  (no steps)")
    if trajectory.errors:
        lines.append(f"  errors: {trim('; '.join(trajectory.errors), max_observation_chars)}")
    return "\n".join(lines)


def render_trajectories(
    trajectories: Sequence[Trajectory], *, label: str = "Rollout", max_observation_chars: int = 300, max_steps: int = 24
) -> str:
    """Several rollouts, numbered ``"<label> 1"``, ``"<label> 2"``...; ``"(none)"`` when empty."""
    if not trajectories:
        return "(none)"
    return "\n\n".join(
        render_trajectory(t, label=f"{label} {i}", max_observation_chars=max_observation_chars, max_steps=max_steps)
        for i, t in enumerate(trajectories, 1)
    )


def render_candidates(candidates: Sequence[tuple[str, str]]) -> str:
    """Candidate ``(when_to_use, content)`` pairs, numbered from 1, for the validation prompt."""
    return "\n".join(
        f"{i}. when_to_use: {when}\n   content: {content}" for i, (when, content) in enumerate(candidates, 1)
    )

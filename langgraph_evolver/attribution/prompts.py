"""Prompts of the LLM attribution judge; each is a ``str.format`` template, overridable by keyword.

``DEFAULT_ATTRIBUTION_PROMPT`` is the one judge call per trajectory. Its fields:

- ``{task}``: the user's request;
- ``{steps}``: one block per step, ``Step i: <action> -> <observation>`` (see ``DEFAULT_STEP_FORMAT``);
- ``{num_steps}``: how many steps to label;
- ``{score}``: the outcome reward, ``"0.50"`` (or ``"unknown"``);
- ``{outcome}``: ``"succeeded"``, ``"failed"`` or ``"has an unknown outcome"``;
- ``{rules}``: ``DEFAULT_SUCCESS_RULES`` or, when the outcome failed, the stricter ``DEFAULT_FAILURE_RULES``.

``DEFAULT_RETRY_PROMPT`` follows an answer that left steps unlabelled (``{missing}``: the step
numbers, ``{num_steps}``).
"""

from __future__ import annotations

from langgraph_evolver.rendering import DEFAULT_STEP_FORMAT  # the core's, shared with questioning

__all__ = [
    "ATTRIBUTION_PROMPT_FIELDS",
    "DEFAULT_ATTRIBUTION_PROMPT",
    "DEFAULT_FAILURE_RULES",
    "DEFAULT_RETRY_PROMPT",
    "DEFAULT_STEP_FORMAT",
    "DEFAULT_SUCCESS_RULES",
    "RETRY_PROMPT_FIELDS",
    "STEP_FORMAT_FIELDS",
]

DEFAULT_ATTRIBUTION_PROMPT = """\
You are reviewing the steps an AI agent took, using tools, to do a task for a user. \
Decide for every step whether it helped.

Task: {task}

The agent's steps (what it did -> what the environment answered):
{steps}

Outcome: score {score} (from 0 to 1); the task {outcome}.

Label every step GOOD or BAD.
{rules}
Judge each step on its own merits: do not label all steps alike without a reason.

Answer with exactly one line per step, for all {num_steps} steps, in this format and nothing else:
Step <i>: GOOD|BAD - <short reason>"""

DEFAULT_SUCCESS_RULES = """\
- GOOD: the step moved the agent toward completing the task (a needed lookup, a correct action, \
the right final answer).
- BAD: the step caused an error, repeated an earlier step for no reason, or was irrelevant to the task."""

DEFAULT_FAILURE_RULES = """\
The task was NOT completed, so be strict:
- GOOD only if the step truly reduced the distance to a correct solution: a step a correct \
solution also needs, done right (right tool, right arguments, right decision).
- BAD: an error, a repetition, an irrelevant step, wrong arguments or a wrong decision, a wrong or \
premature final answer, and anything else that did not truly bring the agent closer to a correct solution."""


DEFAULT_RETRY_PROMPT = """\
Your answer has no label for step(s) {missing}. Reply again with exactly one line for each of \
the {num_steps} steps, in this format and nothing else:
Step <i>: GOOD|BAD - <short reason>"""

ATTRIBUTION_PROMPT_FIELDS = ("task", "steps", "num_steps", "score", "outcome", "rules")
STEP_FORMAT_FIELDS = ("number", "action", "observation")
RETRY_PROMPT_FIELDS = ("missing", "num_steps")

"""Self-attributing: a judge labels every step of a trajectory GOOD or BAD, for ADCA step credit.

- ``attribute_steps(trajectory, judge)`` / ``aattribute_steps`` / ``aattribute_batch`` return an
  ``Attribution`` per trajectory: one ``StepLabel`` per step, or ``labels=None`` when the judge
  failed and the trajectory falls back to outcome-only credit (counted).
- Judges (``make_judge``): ``"reference"`` (``ReferenceJudge``: deterministic, from the task's
  reference solution, no LLM), or any LangChain chat model (``LLMJudge``: one call per
  trajectory, lenient parsing, retries with backoff, bounded concurrency, cache, token and cost
  accounting). Prompts are in ``prompts.py``.
- ``write_langsmith_feedback`` attaches the labels to each step's LLM run in LangSmith.
- ``create_attribution_node`` wraps the mechanism as a LangGraph node; ``apply_attribution``
  writes a verdict into a trajectory; ``label_signs`` gives ``adca_advantages`` its ``+1``/``-1``.

- Every LLM role takes ``settings=LLMSettings(...)`` (retries, concurrency, timeout, token prices).

Example:
    >>> import asyncio
    >>> from langgraph_evolver.types import Action, Step, Task, ToolCall, Trajectory
    >>> task = Task(id="t", query="Balance?", reference_solution=(ToolCall(name="get_balance"),))
    >>> trajectory = Trajectory(id="r", task=task, reward=0.0, steps=(
    ...     Step(index=0, action=Action(tool_calls=(ToolCall(name="get_balance"),))),
    ...     Step(index=1, action=Action(content="You have $5."))))
    >>> verdict = attribute_steps(trajectory, "reference")
    >>> label_signs(apply_attribution(trajectory, verdict))
    [1, -1]
    >>> node = create_attribution_node("reference")     # or a model: create_attribution_node("openai:gpt-4.1-mini")
    >>> [x["label"] for x in asyncio.run(node({"trajectory": trajectory}))["attribution"]["labels"]]
    ['GOOD', 'BAD']
"""

from .attribute import (
    aattribute_batch,
    aattribute_steps,
    attribute_batch,
    attribute_steps,
    create_attribution_node,
    make_judge,
)
from .core import (
    Attribution,
    Judge,
    JudgeStats,
    StepLabel,
    apply_attribution,
    label_signs,
    summarize_attributions,
)
from .feedback import FEEDBACK_KEY, write_langsmith_feedback
from .judges import LLMJudge
from .prompts import (
    DEFAULT_ATTRIBUTION_PROMPT,
    DEFAULT_FAILURE_RULES,
    DEFAULT_RETRY_PROMPT,
    DEFAULT_STEP_FORMAT,
    DEFAULT_SUCCESS_RULES,
)
from .reference import ReferenceJudge

__all__ = [
    "DEFAULT_ATTRIBUTION_PROMPT",
    "DEFAULT_FAILURE_RULES",
    "DEFAULT_RETRY_PROMPT",
    "DEFAULT_STEP_FORMAT",
    "DEFAULT_SUCCESS_RULES",
    "FEEDBACK_KEY",
    "Attribution",
    "Judge",
    "JudgeStats",
    "LLMJudge",
    "ReferenceJudge",
    "StepLabel",
    "aattribute_batch",
    "aattribute_steps",
    "apply_attribution",
    "attribute_batch",
    "attribute_steps",
    "create_attribution_node",
    "label_signs",
    "make_judge",
    "summarize_attributions",
    "write_langsmith_feedback",
]

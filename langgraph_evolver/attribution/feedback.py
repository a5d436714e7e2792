"""Step labels as LangSmith feedback on each step's LLM run.

Every step of a trajectory recorded by ``graphs/agent.py`` carries ``llm_run_id``, the LangChain
run id of its LLM call (the same id the LangSmith tracer, or ``JsonlTracer``, records). After
attribution, ``write_langsmith_feedback`` attaches the judge's label to that run: key
``step_attribution``, score 1 (GOOD) or 0 (BAD), the label as value, the reason as comment.
Failures are counted and logged, never raised: tracing must not break training.

Example:
    >>> from langgraph_evolver.attribution.feedback import write_langsmith_feedback
    >>> written, failed = write_langsmith_feedback(labelled_trajectories)   # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..types import Trajectory

__all__ = ["FEEDBACK_KEY", "write_langsmith_feedback"]

logger = logging.getLogger(__name__)

FEEDBACK_KEY = "step_attribution"


def write_langsmith_feedback(
    trajectories: Sequence[Trajectory], *, client: Any = None, key: str = FEEDBACK_KEY, project: str | None = None
) -> tuple[int, int]:
    """Write one feedback per labelled step that has an LLM run id; returns (written, failed).

    Args:
        trajectories: Trajectories with ``labels`` (see ``apply_attribution``).
        client: A ``langsmith.Client`` (default: the library's ``langsmith_client()``: no retries, bounded exit).
        key: The feedback key.
        project: The LangSmith project the runs are in, when a trajectory does not say (an ingested trace's
            ``metadata["session_id"]``); default: the project LangSmith traces to. Feedback names it by id.
    """
    from ..tracing.langsmith import langsmith_client, project_id

    if client is None:
        client = langsmith_client()
    written = failed = 0
    for trajectory in trajectories:
        labels = {int(x["step"]): x for x in trajectory.labels or ()}
        for step in trajectory.steps:
            label = labels.get(step.index)
            if label is None or not step.llm_run_id:
                continue
            verdict = "GOOD" if str(label.get("label", "")).upper() == "GOOD" else "BAD"
            reason = str(label.get("reason") or "")
            try:
                session = trajectory.metadata.get("session_id") or project_id(client, project)
                client.create_feedback(step.llm_run_id, key=key, score=float(verdict == "GOOD"), value=verdict,
                                       comment=reason, session_id=session, stop_after_attempt=2)  # fmt: skip
                written += 1
            except Exception as e:  # feedback is best effort: count, log once, go on
                failed += 1
                if failed == 1:
                    logger.warning("LangSmith feedback failed (%s: %s); further failures are only counted.",
                                   type(e).__name__, e)  # fmt: skip
    return written, failed

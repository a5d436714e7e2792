"""Learning from traces: recorded runs of any LangGraph agent become training signal.

``python -m langgraph_evolver.ingest`` reads traces from a LangSmith project, a list of run ids or a
local ``JsonlTracer`` file, and turns them into:

- ``Trajectory`` objects (``read_*_traces`` → ``ingest_traces`` / ``aingest_traces``, or the
  LangGraph node ``create_ingest_node``): token ids where the trace has them
  and the model is the policy being trained, otherwise text only (``metadata["policy_gradient"]``
  is then ``False`` and no policy-gradient row is made of it);
- seed tasks (``source="trace"``): the distinct user queries, trainable where a run with positive
  feedback gives the reference solution;
- experiences (self-navigating extractors) and step labels (self-attributing judges), the labels
  written back as feedback on the original runs only when asked (``write_label_feedback``);
- a summary: traces and runs read, skipped and why, tasks and experiences made.

LangSmith's own fine-tuning imitates recorded trajectories; here the recorded queries become tasks
that the agent re-runs against the environment, so its tool calls are executed and scored. Ingest has
no prompts of its own: the extractor's and the judge's are in ``experience/`` and ``attribution/``.

Example (one recorded trace in LangSmith's run schema, with positive feedback):
    >>> call = {"role": "assistant", "content": "", "tool_calls": [{"name": "get_balance", "args": {}, "id": "c1"}]}
    >>> root = {"id": "r1", "inputs": {"messages": [{"role": "user", "content": "How much money do I have?"}]},
    ...         "child_runs": [
    ...     {"id": "l1", "run_type": "llm", "dotted_order": "1", "outputs": {"generations": [[{"message": call}]]}},
    ...     {"id": "t1", "run_type": "tool", "dotted_order": "2", "name": "get_balance",
    ...      "inputs": {"tool_call_id": "c1"}, "outputs": {"output": "230"}},
    ...     {"id": "l2", "run_type": "llm", "dotted_order": "3",
    ...      "outputs": {"generations": [[{"text": "You have $230."}]]}}]}
    >>> result = ingest_traces([RecordedTrace(root=root, feedback=[{"key": "reward", "score": 1.0}])], env="sandbox")
    >>> [c.name for c in result.tasks[0].reference_solution], result.summary()["tasks_trainable"]
    (['get_balance'], 1)
    >>> [e.content for e in result.experiences], result.summary()["labels_good"]
    (['Call `get_balance`, then answer from the `get_balance` result.'], 2)
"""

from __future__ import annotations

from .convert import message_dict, run_feedback_reward, trajectory_from_trace, user_query
from .pipeline import (
    IngestResult,
    aingest_traces,
    create_ingest_node,
    ingest_traces,
    trace_task_id,
    write_ingest,
    write_label_feedback,
)
from .sources import FeedbackCondition, RecordedTrace, TraceFilter, read_jsonl_traces, read_langsmith_traces

__all__ = [
    "FeedbackCondition",
    "IngestResult",
    "RecordedTrace",
    "TraceFilter",
    "aingest_traces",
    "create_ingest_node",
    "ingest_traces",
    "message_dict",
    "read_jsonl_traces",
    "read_langsmith_traces",
    "redact_pii",
    "run_feedback_reward",
    "trace_task_id",
    "trajectory_from_trace",
    "user_query",
    "write_ingest",
    "write_label_feedback",
]


def redact_pii(text: str) -> str:
    """A simple redaction hook (``--redact langgraph_evolver.ingest:redact_pii``): e-mail addresses, phone-like
    numbers and long digit runs become placeholders. Write your own ``text -> text`` for your data.

    Example:
        >>> redact_pii("mail ana@example.com or call 555-123-4567, card 4111111111111111")
        'mail <email> or call <phone>, card <number>'
    """
    import re

    text = re.sub(r"[\w.+-]+@[\w-]+\.[\w.-]+", "<email>", text)
    text = re.sub(r"\b\d{9,}\b", "<number>", text)
    return re.sub(r"\+?\d[\d\s().-]{7,}\d", "<phone>", text)

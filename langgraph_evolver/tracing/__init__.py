"""Tracing: what a rollout did, as LangSmith-schema runs, locally (JSONL) and in LangSmith.

Two ways to see what a rollout did:

- :class:`JsonlTracer` is a LangChain callback handler that writes one JSON object per finished run
  in LangSmith's run schema; it needs no network and never raises into the agent.
- :func:`langsmith_callbacks` returns a LangSmith tracer (:class:`RolloutTracer`), but only when
  LangSmith is configured (tracing switched on *and* an API key set); the client ships runs from a
  background thread, so an unreachable endpoint does not slow the agent down.

Attach both through the run's config, with :func:`trace_metadata` so every run of a rollout carries
its task id, group id and rollout index::

    tracer = JsonlTracer("runs/traces.jsonl", project="evolver")
    config = {
        "callbacks": [tracer, *langsmith_callbacks(project="evolver")],
        "metadata": trace_metadata(task.id, group_id, rollout_index),
        "run_name": f"rollout-{task.id}-{rollout_index}",
    }
    graph.invoke(inputs, config=config)
    tracer.close()
    trees = build_run_tree(read_runs("runs/traces.jsonl"))

Messages are stored as ``message.model_dump()`` dicts (``type``, ``content``, ``tool_calls`` ...);
anything that is not JSON-serializable falls back to its ``repr``.

Modules, each importing only those above it:

- ``payload``: plain JSON and bounded payloads (:func:`to_jsonable`, :class:`TraceLimits`).
- ``runtree``: a run's place in its trace and the nested view (:func:`build_run_tree`).
- ``jsonl``: the local tracer and its readers (:class:`JsonlTracer`, :func:`read_runs`, :func:`read_feedback`).
- ``langsmith``: the LangSmith client and tracer (:func:`langsmith_client`, :class:`RolloutTracer`).
- ``rollouts``: a rollout's metadata and its annotation after training (:func:`annotate_rollouts`).
- ``experiments``: evaluations as LangSmith experiments (:func:`write_evaluation_experiments`).
- ``tools``: tool runs for calls a node executes itself (:func:`trace_tool_calls`).
"""

from .experiments import write_evaluation_experiments, write_evaluation_folders
from .jsonl import JsonlTracer, feedback_path_for, read_feedback, read_runs
from .langsmith import RolloutTracer, langsmith_callbacks, langsmith_client, langsmith_enabled
from .payload import TraceLimits, bound_payload, compact_llm_outputs, shrink_run, to_jsonable
from .rollouts import REWARD_FEEDBACK_KEY, annotate_rollouts, rollout_metadata, trace_metadata, with_training_step
from .runtree import build_run_tree
from .tools import trace_tool_calls

__all__ = [
    "REWARD_FEEDBACK_KEY",
    "JsonlTracer",
    "RolloutTracer",
    "TraceLimits",
    "annotate_rollouts",
    "bound_payload",
    "build_run_tree",
    "compact_llm_outputs",
    "feedback_path_for",
    "langsmith_callbacks",
    "langsmith_client",
    "langsmith_enabled",
    "read_feedback",
    "read_runs",
    "rollout_metadata",
    "shrink_run",
    "to_jsonable",
    "trace_metadata",
    "trace_tool_calls",
    "with_training_step",
    "write_evaluation_experiments",
    "write_evaluation_folders",
]

"""Self-questioning: explore an environment, synthesize tasks, filter them, store them.

- ``synthesize_tasks(env, n)`` / ``asynthesize_tasks`` run the pipeline end to end and return the
  kept tasks and a ``PipelineReport``; ``create_synthesis_node`` wraps it as a LangGraph node;
  ``python -m langgraph_evolver.questioning`` runs it from the command line.
- Offline pieces (no model): ``explore`` / ``aexplore`` (schema-driven breadth/depth
  exploration; ``explore_errors``: what it learns from a failed call), ``synthesize`` (tasks from
  sub-sequences of successful calls), ``filter_tasks``
  (invalid, near-duplicate, infeasible), ``TaskStore``; ``results.read_result`` (tool results as MCP servers
  send them), ``wording`` (requests from tool descriptions), ``reach`` (tools never reached, initial states).
- With a model: the LLM explorer graph (``create_explorer_graph``), ``LLMSynthesizer``,
  ``ReferenceAwareJudge`` as the reward of tasks whose environment has no state check, and
  ``arefine_profile``; each takes ``settings=LLMSettings(...)``. Prompts are in ``prompts.py``.

Example:
    >>> from langgraph_evolver.environment import load_environment
    >>> env = load_environment("sandbox")
    >>> seed = env.list_tasks("train")[0]
    >>> trajectory = explore(env, exploration_task(seed), n_breadth=2, n_depth=6, seed=0)
    >>> tasks = synthesize(trajectory, max_ops=2, max_tasks=3, seed=0)
    >>> len(tasks) > 0, {t.source for t in tasks}, all(t.reference_solution for t in tasks)
    (True, {'synthetic'}, True)
"""

from .explore import aexplore, exploration_task, explore
from .explore_llm import aexplore_with_model, create_explorer_graph, explorer_agent
from .filters import DuplicateIndex, FilterReport, check_feasibility, drop_duplicates, drop_invalid, filter_tasks
from .judge import JudgeScore, ReferenceAwareJudge, parse_score
from .pipeline import PipelineReport, asynthesize_tasks, create_synthesis_node, synthesize_tasks
from .profile import arefine_profile, derive_profile, environment_profile
from .prompts import (
    DEFAULT_BREADTH_PROMPT,
    DEFAULT_DEPTH_PROMPT,
    DEFAULT_EXPLORE_GOAL,
    DEFAULT_EXPLORER_SYSTEM_PROMPT,
    DEFAULT_NUDGE_PROMPT,
    DEFAULT_REFERENCE_PROMPT,
    DEFAULT_REFERENCE_RETRY_PROMPT,
    DEFAULT_REFINE_PROMPT,
    DEFAULT_SYNTHESIS_PROMPT,
    DEFAULT_SYNTHESIS_RETRY_PROMPT,
)
from .store import TaskStore, stored_tasks
from .synthesize import describe_calls, phrasing_overlap, synthesize
from .synthesize_llm import LLMSynthesizer, parse_tasks

__all__ = [
    "DEFAULT_BREADTH_PROMPT",
    "DEFAULT_DEPTH_PROMPT",
    "DEFAULT_EXPLORER_SYSTEM_PROMPT",
    "DEFAULT_EXPLORE_GOAL",
    "DEFAULT_NUDGE_PROMPT",
    "DEFAULT_REFERENCE_PROMPT",
    "DEFAULT_REFERENCE_RETRY_PROMPT",
    "DEFAULT_REFINE_PROMPT",
    "DEFAULT_SYNTHESIS_PROMPT",
    "DEFAULT_SYNTHESIS_RETRY_PROMPT",
    "DuplicateIndex",
    "FilterReport",
    "JudgeScore",
    "LLMSynthesizer",
    "PipelineReport",
    "ReferenceAwareJudge",
    "TaskStore",
    "aexplore",
    "aexplore_with_model",
    "arefine_profile",
    "asynthesize_tasks",
    "check_feasibility",
    "create_explorer_graph",
    "create_synthesis_node",
    "derive_profile",
    "describe_calls",
    "drop_duplicates",
    "drop_invalid",
    "environment_profile",
    "exploration_task",
    "explore",
    "explorer_agent",
    "filter_tasks",
    "parse_score",
    "parse_tasks",
    "phrasing_overlap",
    "synthesize",
    "stored_tasks",
    "synthesize_tasks",
]

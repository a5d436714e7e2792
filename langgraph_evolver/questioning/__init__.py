"""Self-questioning: explore an environment, synthesize tasks, filter them, store them.

Offline pipeline (no model): ``explore`` (schema-driven breadth/depth exploration) ->
``synthesize`` (tasks from sub-sequences of successful calls) -> ``filter_tasks`` (invalid,
near-duplicate, infeasible) -> ``TaskStore``; ``synthesize_tasks`` runs it end to end and
``python -m langgraph_evolver.questioning`` from the command line. With a model: the LLM explorer
graph (``create_explorer_graph``), ``LLMSynthesizer``, and ``ReferenceAwareJudge`` as the reward
of tasks whose environment has no state check.
"""

from .explore import aexplore, exploration_task, explore
from .explore_llm import aexplore_with_model, create_explorer_graph, explorer_agent
from .filters import DuplicateIndex, FilterReport, check_feasibility, drop_duplicates, drop_invalid, filter_tasks
from .judge import JudgeScore, ReferenceAwareJudge, parse_score
from .pipeline import PipelineReport, synthesize_tasks
from .profile import arefine_profile, derive_profile, environment_profile
from .store import TaskStore
from .synthesize import describe_calls, phrasing_overlap, synthesize
from .synthesize_llm import LLMSynthesizer, parse_tasks

__all__ = [
    "DuplicateIndex",
    "FilterReport",
    "JudgeScore",
    "LLMSynthesizer",
    "PipelineReport",
    "ReferenceAwareJudge",
    "TaskStore",
    "aexplore",
    "arefine_profile",
    "aexplore_with_model",
    "create_explorer_graph",
    "check_feasibility",
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
    "synthesize_tasks",
]

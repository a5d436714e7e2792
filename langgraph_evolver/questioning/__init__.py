"""Self-questioning: explore an environment, synthesize tasks, filter them, store them.

Offline pipeline (no model): ``explore`` (schema-driven breadth/depth exploration) ->
``synthesize`` (tasks from sub-sequences of successful calls) -> ``filter_tasks`` (invalid,
near-duplicate, infeasible) -> ``TaskStore``; ``synthesize_tasks`` runs it end to end and
``python -m langgraph_evolver.questioning`` from the command line.
"""

from .explore import aexplore, exploration_task, explore
from .filters import DuplicateIndex, FilterReport, check_feasibility, drop_duplicates, drop_invalid, filter_tasks
from .pipeline import PipelineReport, synthesize_tasks
from .profile import derive_profile, environment_profile
from .store import TaskStore
from .synthesize import describe_calls, phrasing_overlap, synthesize

__all__ = [
    "DuplicateIndex",
    "FilterReport",
    "PipelineReport",
    "TaskStore",
    "aexplore",
    "check_feasibility",
    "derive_profile",
    "describe_calls",
    "drop_duplicates",
    "drop_invalid",
    "environment_profile",
    "exploration_task",
    "explore",
    "filter_tasks",
    "phrasing_overlap",
    "synthesize",
    "synthesize_tasks",
]

"""Moved to :mod:`langgraph_evolver.tracing`; this module re-exports its LangSmith names for old imports.

It stays for its command, ``python -m langgraph_evolver.langsmith_tracing --dataset NAME before=DIR
after=DIR`` (:func:`langgraph_evolver.tracing.experiments.main`). The code lives in
``tracing/langsmith.py`` (client, tracer), ``tracing/rollouts.py`` (annotations) and
``tracing/experiments.py`` (evaluations as experiments).
"""

from .tracing.experiments import main, write_evaluation_experiments, write_evaluation_folders
from .tracing.langsmith import RolloutTracer, langsmith_client
from .tracing.rollouts import REWARD_FEEDBACK_KEY, annotate_rollouts, rollout_metadata, with_training_step

__all__ = [
    "REWARD_FEEDBACK_KEY",
    "RolloutTracer",
    "annotate_rollouts",
    "langsmith_client",
    "main",
    "rollout_metadata",
    "with_training_step",
    "write_evaluation_experiments",
    "write_evaluation_folders",
]

if __name__ == "__main__":
    raise SystemExit(main())

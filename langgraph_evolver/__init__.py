"""langgraph-evolver: make tool-using LangGraph agents improve themselves.

The library holds the data types, the policy chat model, context templates, the rollout runner
and tracing; it imports no torch, trl or fastapi (those live behind the ``train``/``serve``
extras in ``trainers/`` and ``env_tools/server.py``).
"""

from .advantages import ADCAAdvantages, GroupAdvantages, adca_advantages, adca_alpha, group_advantages
from .agent_spec import AgentSpec, as_agent
from .attribution import (
    Attribution,
    Judge,
    JudgeStats,
    LLMJudge,
    ReferenceJudge,
    StepLabel,
    aattribute_batch,
    aattribute_steps,
    apply_attribution,
    attribute_batch,
    attribute_steps,
    create_attribution_node,
    label_signs,
    make_judge,
    summarize_attributions,
)
from .batch import arun_rollout_items, arun_rollouts, run_rollouts
from .capture import TrajectoryRecorder, TurnLimitReached
from .chat_model import PolicyChatModel, transition_from_message
from .context import ContextTemplate, causal_template, get_context_template, register_context_template
from .environment_tools import EnvironmentTool, current_rollout, environment_tools
from .episode import arun_episode
from .errors import ConfigError, EnvironmentFailure, EvolverError, PolicyEndpointError
from .middleware import EvolverMiddleware
from .tracing import (
    JsonlTracer,
    RolloutTracer,
    TraceLimits,
    annotate_rollouts,
    build_run_tree,
    langsmith_callbacks,
    langsmith_client,
    langsmith_enabled,
    read_feedback,
    read_runs,
    trace_metadata,
    trace_tool_calls,
    with_training_step,
    write_evaluation_experiments,
)
from .types import (
    Action,
    Observation,
    Step,
    StepResult,
    Task,
    ToolCall,
    ToolObservation,
    Trajectory,
    Transition,
    read_jsonl,
    write_jsonl,
)

__all__ = [
    "AgentSpec",
    "EnvironmentTool",
    "EvolverMiddleware",
    "TrajectoryRecorder",
    "TurnLimitReached",
    "arun_episode",
    "as_agent",
    "current_rollout",
    "environment_tools",
    "ADCAAdvantages",
    "Action",
    "Attribution",
    "ConfigError",
    "ContextTemplate",
    "EnvironmentFailure",
    "EvolverError",
    "GroupAdvantages",
    "JsonlTracer",
    "Judge",
    "JudgeStats",
    "LLMJudge",
    "Observation",
    "PolicyChatModel",
    "PolicyEndpointError",
    "ReferenceJudge",
    "RolloutTracer",
    "TraceLimits",
    "Step",
    "StepLabel",
    "StepResult",
    "Task",
    "ToolCall",
    "ToolObservation",
    "Trajectory",
    "Transition",
    "aattribute_batch",
    "aattribute_steps",
    "adca_advantages",
    "adca_alpha",
    "annotate_rollouts",
    "apply_attribution",
    "arun_rollout_items",
    "arun_rollouts",
    "attribute_batch",
    "attribute_steps",
    "build_run_tree",
    "causal_template",
    "create_attribution_node",
    "get_context_template",
    "group_advantages",
    "label_signs",
    "langsmith_callbacks",
    "langsmith_client",
    "langsmith_enabled",
    "make_judge",
    "read_jsonl",
    "read_feedback",
    "read_runs",
    "register_context_template",
    "run_rollouts",
    "summarize_attributions",
    "trace_metadata",
    "trace_tool_calls",
    "transition_from_message",
    "with_training_step",
    "write_evaluation_experiments",
    "write_jsonl",
]
__version__ = "0.1.0"

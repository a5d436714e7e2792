"""langgraph-evolver: make tool-using LangGraph agents improve themselves.

What a LangGraph user calls, by job (``ARCHITECTURE.md`` says where each lives):

- **Run and record your agent**: ``EvolverMiddleware`` (one line in ``create_agent``), ``AgentSpec`` /
  ``as_agent``, ``PolicyChatModel``, ``run_rollouts`` / ``arun_rollouts``, ``arun_episode``,
  ``TrajectoryRecorder``, ``current_rollout``, ``environment_tools``.
- **Environments**: ``Environment``, ``load_environment``, ``register_environment``, ``list_environments``.
- **Self-questioning**: ``synthesize_tasks`` / ``asynthesize_tasks`` / ``create_synthesis_node``, ``TaskStore``.
- **Self-navigating**: ``extract_experiences`` / ``aextract_experiences`` / ``create_extraction_node``,
  ``Navigator``, ``make_extractor``, ``is_guided``, ``retrieved_ids``.
- **Self-attributing**: ``attribute_steps`` / ``aattribute_steps`` / ``create_attribution_node``,
  ``attribute_batch`` / ``aattribute_batch``, ``make_judge``, ``LLMJudge``, ``ReferenceJudge``, ``apply_attribution``.
- **Context templates**: ``get_context_template``, ``register_context_template``, ``ContextTemplate``,
  ``manage_context`` / ``amanage_context`` / ``create_context_node``.
- **Recorded traces**: ``ingest_traces`` / ``aingest_traces`` / ``create_ingest_node``.
- **Rewards and advantages**: ``shaped_reward``, ``transition_advantages``, ``group_advantages``, ``adca_advantages``.
- **Tracing**: ``JsonlTracer``, ``RolloutTracer``, ``langsmith_callbacks``, ``annotate_rollouts``,
  ``write_evaluation_experiments``, ``read_runs``, ``build_run_tree``.
- **Settings and errors**: ``LLMSettings``; ``EvolverError`` and its subclasses.
- **The vocabulary**: ``Task``, ``Action``, ``Observation``, ``StepResult``, ``ToolCall``, ``ToolObservation``,
  ``Transition``, ``Step``, ``Trajectory``, ``read_jsonl``, ``write_jsonl``.

Everything else is importable from its module (``langgraph_evolver.tracing``, ``.experience``, ...) and may
change. The library imports no torch, trl or fastapi (those live in ``trainers/`` and ``env_tools/server.py``).
"""

from ._llm import LLMSettings
from .advantages import adca_advantages, group_advantages
from .agent_spec import AgentSpec, as_agent
from .attribution import (
    LLMJudge,
    ReferenceJudge,
    aattribute_batch,
    aattribute_steps,
    apply_attribution,
    attribute_batch,
    attribute_steps,
    create_attribution_node,
    make_judge,
)
from .batch import arun_rollouts, run_rollouts
from .capture import TrajectoryRecorder
from .chat_model import PolicyChatModel
from .context import (
    ContextTemplate,
    amanage_context,
    create_context_node,
    get_context_template,
    manage_context,
    register_context_template,
)
from .environment import Environment, list_environments, load_environment, register_environment
from .environment_tools import current_rollout, environment_tools
from .episode import arun_episode
from .errors import ConfigError, EnvironmentFailure, EvolverError, PolicyEndpointError
from .experience import (
    Navigator,
    aextract_experiences,
    create_extraction_node,
    extract_experiences,
    is_guided,
    make_extractor,
    retrieved_ids,
)
from .ingest import aingest_traces, create_ingest_node, ingest_traces
from .middleware import EvolverMiddleware
from .questioning import TaskStore, asynthesize_tasks, create_synthesis_node, synthesize_tasks
from .scoring import shaped_reward, transition_advantages
from .tracing import (
    JsonlTracer,
    RolloutTracer,
    annotate_rollouts,
    build_run_tree,
    langsmith_callbacks,
    read_runs,
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
    # run and record your agent
    "AgentSpec",
    "EvolverMiddleware",
    "PolicyChatModel",
    "TrajectoryRecorder",
    "arun_episode",
    "arun_rollouts",
    "as_agent",
    "current_rollout",
    "environment_tools",
    "run_rollouts",
    # environments
    "Environment",
    "list_environments",
    "load_environment",
    "register_environment",
    # self-questioning
    "TaskStore",
    "asynthesize_tasks",
    "create_synthesis_node",
    "synthesize_tasks",
    # self-navigating
    "Navigator",
    "aextract_experiences",
    "create_extraction_node",
    "extract_experiences",
    "is_guided",
    "make_extractor",
    "retrieved_ids",
    # self-attributing
    "LLMJudge",
    "ReferenceJudge",
    "aattribute_batch",
    "aattribute_steps",
    "apply_attribution",
    "attribute_batch",
    "attribute_steps",
    "create_attribution_node",
    "make_judge",
    # context templates
    "ContextTemplate",
    "amanage_context",
    "create_context_node",
    "get_context_template",
    "manage_context",
    "register_context_template",
    # recorded traces
    "aingest_traces",
    "create_ingest_node",
    "ingest_traces",
    # rewards and advantages
    "adca_advantages",
    "group_advantages",
    "shaped_reward",
    "transition_advantages",
    # tracing
    "JsonlTracer",
    "RolloutTracer",
    "annotate_rollouts",
    "build_run_tree",
    "langsmith_callbacks",
    "read_runs",
    "write_evaluation_experiments",
    # settings and errors
    "ConfigError",
    "EnvironmentFailure",
    "EvolverError",
    "LLMSettings",
    "PolicyEndpointError",
    # the vocabulary
    "Action",
    "Observation",
    "Step",
    "StepResult",
    "Task",
    "ToolCall",
    "ToolObservation",
    "Trajectory",
    "Transition",
    "read_jsonl",
    "write_jsonl",
]
__version__ = "0.1.0"

"""The built-in sandbox: a small deterministic multi-app world with state-checked tasks."""

from .apps import APPS, TOOLS, tool_schema
from .env import SYSTEM_PROMPT, SandboxEnvironment, score_state
from .profile import environment_profile
from .tasks import LEVELS, SPLIT_SIZES, TEMPLATES, generate_tasks, make_task, seed_tasks
from .world import World

__all__ = [
    "APPS",
    "LEVELS",
    "SPLIT_SIZES",
    "SYSTEM_PROMPT",
    "TEMPLATES",
    "TOOLS",
    "SandboxEnvironment",
    "World",
    "environment_profile",
    "generate_tasks",
    "make_task",
    "score_state",
    "seed_tasks",
    "tool_schema",
]

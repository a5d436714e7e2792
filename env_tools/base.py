"""Kept so ``from env_tools.base import Environment`` keeps working: the interface and the registry
live in the library, ``langgraph_evolver.environment``."""

from langgraph_evolver.environment import (
    Environment,
    EnvironmentFactory,
    check_task_environments,
    environment_factory,
    list_environments,
    load_environment,
    register_environment,
)

__all__ = [
    "Environment",
    "EnvironmentFactory",
    "check_task_environments",
    "environment_factory",
    "list_environments",
    "load_environment",
    "register_environment",
]

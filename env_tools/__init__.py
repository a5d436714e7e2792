"""Environments: the interface and registry, the built-in sandbox, adapters and the HTTP service."""

from .base import Environment, list_environments, load_environment, register_environment

__all__ = ["Environment", "list_environments", "load_environment", "register_environment"]

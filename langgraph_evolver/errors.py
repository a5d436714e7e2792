"""One error base and a few subclasses; every message says what happened, why, and how to fix it."""

from __future__ import annotations

__all__ = ["ConfigError", "EnvironmentFailure", "EvolverError", "PolicyEndpointError"]


class EvolverError(Exception):
    """Base class of every error this project raises on purpose."""


class ConfigError(EvolverError, ValueError):
    """A configuration value or combination is invalid."""


class EnvironmentFailure(EvolverError):
    """An environment (local or remote) could not be created, reset or reached."""


class PolicyEndpointError(EvolverError):
    """The OpenAI-compatible policy endpoint is unreachable or answered outside the contract."""

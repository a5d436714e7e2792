"""The errors of the serving engine; each carries the HTTP status the app answers with."""

from __future__ import annotations

from langgraph_evolver.errors import EvolverError

__all__ = ["ForbiddenError", "GenerationError", "UnknownModelError", "WorkerStoppedError"]


class GenerationError(EvolverError, ValueError):
    """A generation or adapter request the engine cannot serve (HTTP 400 unless overridden)."""

    status_code = 400


class ForbiddenError(GenerationError):
    """A runtime weight route that is off, or a path outside the allowed directories (HTTP 403)."""

    status_code = 403


class UnknownModelError(GenerationError):
    """The requested model/adapter name or adapter path does not exist (HTTP 404)."""

    status_code = 404


class WorkerStoppedError(GenerationError):
    """The worker thread died; no request can be served until the server restarts (HTTP 503)."""

    status_code = 503

"""The rollout running in this context: one context variable, below every module that reads it.

``episode.arun_episode`` sets it; ``environment_tools.current_rollout`` (the public name) and the policy
chat model (its paired seeds) read it. It lives apart so that reading it imports nothing: the chat model
sits below the capture, which ``environment_tools`` imports.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .environment_tools import Rollout

CURRENT: contextvars.ContextVar[Rollout | None] = contextvars.ContextVar("evolver_rollout", default=None)

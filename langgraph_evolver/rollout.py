"""The live rollout: its state, the context variable that carries it, and the hooks a mechanism plugs in.

``Rollout`` is the state of one rollout (task, environment instance, tools, policy, recorder, context
template), reachable from inside the run through ``current_rollout()`` (how ``EvolverMiddleware`` finds
the policy and the tools, and how the policy chat model pairs its seeds). ``episode.arun_episode`` sets it.

``EpisodeHooks`` are how a mechanism takes part in an episode without the episode naming it (in the
spirit of verifiers' rollout ``setup_state``): ``before_run`` once the environment is reset and before the
graph runs (it may keep state in ``rollout.extras``, add trajectory ``metadata`` and ``experience_ids``),
``message_transform`` a function applied to every policy prompt after the context template (so no template
can drop what it adds), and ``after_run`` on the finished trajectory. Self-navigating
(``experience.navigate.NavigationHooks``) is one: it retrieves a block before the run and injects it.

``arun_episode(navigator=..., guided=True)`` keeps its old shape through ``guide_hooks``: the hooks of a
navigator come from the factory its mechanism registered (``register_guide``; ``experience.navigate``
registers ``NavigationHooks`` when it loads, and ``import langgraph_evolver`` loads it), so this module
and the episode name no mechanism.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.tools import BaseTool

from .capture import TrajectoryRecorder
from .context import ContextTemplate
from .environment import Environment
from .errors import ConfigError
from .types import Observation, Task, Trajectory

__all__ = ["CURRENT", "EpisodeHooks", "MessageTransform", "Rollout", "current_rollout", "guide_hooks", "register_guide"]

MessageTransform = Callable[[Sequence[BaseMessage]], list[BaseMessage]]


class EpisodeHooks:
    """What a mechanism does at the seams of one episode; every method here does nothing.

    Subclass and override what you need; pass instances to ``arun_episode(hooks=[...])``. Hooks run in
    the order given, and their message transforms apply in that order too.
    """

    async def before_run(self, rollout: Rollout) -> str | None:
        """Before the graph runs (the environment is reset, the tools are built): an error to record, else ``None``.

        An error does not stop the rollout: it runs, and the error stays in the trajectory's ``errors``.
        """
        return None

    def message_transform(self, rollout: Rollout) -> MessageTransform | None:
        """What to apply to every policy prompt of this rollout (after the context template), else ``None``.

        Asked once, after ``before_run``. For a ``create_agent`` agent, ``EvolverMiddleware`` applies it
        to the agent's system prompt (as a one-message list: keep the first system message first).
        """
        return None

    def after_run(self, rollout: Rollout, trajectory: Trajectory) -> Trajectory:
        """The finished trajectory, possibly replaced (``dataclasses.replace``); the episode returns it."""
        return trajectory


@dataclass(slots=True)
class Rollout:
    """The live state of one rollout, visible to the graph's code through ``current_rollout()``."""

    task: Task
    env: Environment
    observation: Observation
    tools: list[BaseTool]
    policy: BaseChatModel | None
    recorder: TrajectoryRecorder
    context_template: ContextTemplate | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    context_stats: list[dict[str, Any]] = field(default_factory=list)
    """Context-management steps made by ``EvolverMiddleware`` in this rollout."""
    sample: int = 0
    """This rollout's index among its task's samples (``arun_rollouts(n=k)``: 0..k-1; a lone episode: 0)."""
    policy_requests: int = 0
    """Requests a ``PolicyChatModel`` has sent in this rollout so far: the turn of its paired seed
    (``PolicyChatModel.sample_seed``)."""
    hooks: Sequence[EpisodeHooks] = ()
    """The episode's hooks (``EpisodeHooks``)."""
    extras: dict[str, Any] = field(default_factory=dict)
    """What hooks keep for this rollout, each under its own key (self-navigating: ``"experience"``, its block)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """What hooks add to the trajectory's metadata (and ``experience_ids`` to its trace metadata)."""
    experience_ids: tuple[str, ...] = ()
    """The ids of the experiences injected into this rollout (the trajectory's ``experience_ids``)."""
    message_transforms: list[MessageTransform] = field(default_factory=list)
    """The hooks' prompt transforms, in order (``EpisodeHooks.message_transform``)."""

    def tool(self, name: str) -> BaseTool | None:
        return next((t for t in self.tools if t.name == name), None)

    def transform(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """``messages`` through every hook's transform, in order (a copy, unchanged without transforms)."""
        out = list(messages)
        for transform in self.message_transforms:
            out = transform(out)
        return out


CURRENT: contextvars.ContextVar[Rollout | None] = contextvars.ContextVar("evolver_rollout", default=None)


def current_rollout() -> Rollout | None:
    """The rollout running in this context (inside ``arun_episode``), else ``None``."""
    return CURRENT.get()


_GUIDE: list[Callable[[Any], EpisodeHooks]] = []


def register_guide(factory: Callable[[Any], EpisodeHooks]) -> None:
    """Make ``factory(navigator)`` the hooks of a guided rollout (``arun_episode(navigator=, guided=True)``)."""
    _GUIDE[:] = [factory]


def guide_hooks(navigator: Any) -> EpisodeHooks:
    """The hooks that guide one rollout with ``navigator`` (the registered factory's)."""
    if not _GUIDE:
        raise ConfigError("navigator= needs a guide registered for it: import langgraph_evolver.experience "
                          "(it registers self-navigating's NavigationHooks), or pass hooks= instead.")  # fmt: skip
    return _GUIDE[0](navigator)

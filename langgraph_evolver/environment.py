"""The ``Environment`` interface and the registry that loads environments by name.

The library owns the interface; ``env_tools`` holds implementations (the sandbox, BFCL, the
LangChain-tools adapter, the HTTP client) and the HTTP service. The built-in names are
registered as ``"module:attr"`` strings, so nothing here imports ``env_tools`` until an
environment of it is loaded.

An environment is one independent instance of a world: ``reset(task)`` builds the world for the
task (deterministically from the task and its seed), ``step(action)`` executes the agent's tool
calls, ``evaluate()`` scores the final state in [0, 1], ``close()`` frees it. A bad action
(unknown tool, bad JSON, wrong arguments, an exception inside a tool) yields an error
observation; it never raises out of ``step``.

A multi-turn environment (a conversation of several user messages, e.g. BFCL's multi-turn
categories) answers a final answer (``Action(content=...)`` without tool calls) with
``StepResult(done=False, messages=(next user message,), tools=...)``: the rollout runner hands the
message to the agent and goes on (``tools`` replaces the offered tools when it is not ``None``).
``done=True`` (or no ``messages``) ends the conversation.

The async twins default to calling the sync methods (right for fast in-process worlds); remote
environments (``env_tools.client.RemoteEnvironment``) implement them natively.
"""

from __future__ import annotations

import difflib
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from .errors import ConfigError
from .loading import load_object
from .types import Action, Observation, StepResult, Task

__all__ = [
    "Environment",
    "EnvironmentFactory",
    "TaskEnvironmentFactory",
    "check_task_environments",
    "environment_factory",
    "list_environments",
    "load_environment",
    "register_environment",
    "register_environment_prefix",
]


class Environment(ABC):
    """One live, independent environment instance."""

    @abstractmethod
    def reset(self, task: Task) -> Observation:
        """Build the world for ``task`` and return the opening messages and tool schemas."""

    @abstractmethod
    def step(self, action: Action) -> StepResult:
        """Execute the agent's turn. Tool errors become observations with ``is_error=True``.

        A final answer gets ``done=True``, or, from a multi-turn environment, the next user turn in
        ``StepResult.messages`` with ``done=False``.
        """

    @abstractmethod
    def evaluate(self) -> float:
        """Score the current state against the task, in [0, 1] (partial credit allowed)."""

    def close(self) -> None:  # noqa: B027 - optional hook, default is a no-op
        """Release the instance. Idempotent."""

    def list_tasks(self, split: str = "train") -> list[Task]:
        """The environment's own tasks for ``split`` (``train`` / ``test``); empty if it has none."""
        return []

    def list_splits(self) -> list[str]:
        """The splits that hold tasks: what an error names when a command asks for a split that has none. The
        default asks ``list_tasks`` for the usual ones; an environment with its own split names overrides it."""
        return [split for split in ("train", "validation", "test") if self.list_tasks(split)]

    def profile(self) -> dict[str, Any]:
        """Entities, their attributes and operations (used by self-questioning)."""
        return {}

    async def areset(self, task: Task) -> Observation:
        return self.reset(task)

    async def astep(self, action: Action) -> StepResult:
        return self.step(action)

    async def aevaluate(self) -> float:
        return self.evaluate()

    async def aclose(self) -> None:
        self.close()

    def __enter__(self) -> Environment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


EnvironmentFactory = Callable[..., Environment]
"""What the registry holds: ``factory(**kwargs) -> Environment`` (a class or a function)."""
TaskEnvironmentFactory = Callable[[Task], Environment]
"""What the rollout runners take: ``task -> a fresh Environment`` for that task's rollout."""

_REGISTRY: dict[str, str | EnvironmentFactory] = {
    "sandbox": "env_tools.sandbox:SandboxEnvironment",
    "bfcl": "env_tools.bfcl:BFCLEnvironment",  # needs bfcl-eval (make install-bfcl)
}


def register_environment(name: str, factory: str | EnvironmentFactory) -> None:
    """Register ``factory`` (a callable or ``"module:attr"`` path) under ``name``."""
    _REGISTRY[name] = factory


_PREFIXES: dict[str, str | Callable[..., Environment]] = {
    "mcp:": "env_tools.mcp:mcp_environment",  # any MCP server: mcp:<command line>, mcp:http://host:port/mcp
}
"""Name prefixes whose factory takes the whole name first: ``factory(name, **kwargs)``."""


def register_environment_prefix(prefix: str, factory: str | Callable[..., Environment]) -> None:
    """Route every name starting with ``prefix`` to ``factory(name, **kwargs)`` (a callable or ``"module:attr"``)."""
    _PREFIXES[prefix] = factory


def list_environments() -> list[str]:
    return sorted(_REGISTRY)


def _import_factory(path: str, problem: Callable[[Exception], str]) -> Any:
    """``load_object(path)``; a failed import is a ``ConfigError`` with ``problem(error)`` as its message."""
    try:
        return load_object(path, what="environment")
    except (ImportError, AttributeError, ConfigError) as e:
        raise ConfigError(problem(e)) from e


def _resolve_prefixed(name: str, prefix: str) -> EnvironmentFactory:
    factory = _PREFIXES[prefix]
    if isinstance(factory, str):
        factory = _import_factory(factory, lambda e: (
            f"Could not load the {prefix!r} environments ({e}). For mcp: install the MCP packages "
            "(pip install -e '.[dev]', docs/mcp.md)."))  # fmt: skip
    return functools.partial(factory, name)


def _resolve(name: str) -> EnvironmentFactory:
    target = _REGISTRY.get(name)
    prefix = next((p for p in _PREFIXES if name.startswith(p)), None) if target is None else None
    if prefix is not None:
        return _resolve_prefixed(name, prefix)
    if target is None:
        if "." not in name and ":" not in name and "/" not in name:
            raise ConfigError(
                f"Unknown environment {name!r}.{_nearest(name)} Registered: {', '.join(list_environments())}. "
                "Pass a registered name, a dotted path such as 'my_pkg.envs:MyEnv', or a name with a registered "
                f"prefix ({', '.join(sorted(_PREFIXES))} e.g. 'mcp:python my_server.py')."
            )
        target = name
    if isinstance(target, str):
        target = _import_factory(target, lambda e: (
            f"Could not import environment {name!r} ({e}).{_nearest(name)} Registered names: "
            f"{', '.join(list_environments())}; prefixes: {', '.join(sorted(_PREFIXES))} (e.g. 'mcp:python "
            "my_server.py'); a dotted path must be 'module:attr' or 'module.attr' pointing at an Environment class "
            "or factory."
        ))  # fmt: skip
    if not callable(target):
        raise ConfigError(f"Environment {name!r} is a {type(target).__name__}, not an Environment class or factory.")
    return target


def _nearest(name: str) -> str:
    """`` Did you mean 'mcp:python srv.py'?`` for a misspelt prefix (``mpc:``) or registered name, else ``""``."""
    head, colon, rest = name.partition(":")
    if colon:
        prefixes = {p.rstrip(":"): p for p in _PREFIXES if p.endswith(":")}
        close = difflib.get_close_matches(head.lower(), list(prefixes), n=1, cutoff=0.6)
        if close:
            return f" Did you mean {prefixes[close[0]] + rest!r} (the {prefixes[close[0]]!r} prefix)?"
    close = difflib.get_close_matches(name, list(_REGISTRY), n=1, cutoff=0.75)
    return f" Did you mean {close[0]!r}?" if close else ""


def _instantiate(name: str, target: EnvironmentFactory, kwargs: dict[str, Any]) -> Environment:
    env = target(**kwargs)
    if not isinstance(env, Environment):
        raise ConfigError(f"{name!r} produced {type(env).__name__}, which is not an Environment.")
    return env


def load_environment(name: str, **kwargs: Any) -> Environment:
    """Create a fresh environment instance by registry name or dotted path.

    Example:
        >>> env = load_environment("sandbox")
        >>> task = env.list_tasks("train")[0]
        >>> obs = env.reset(task)
    """
    return _instantiate(name, _resolve(name), kwargs)


def environment_factory(name: str, **kwargs: Any) -> TaskEnvironmentFactory:
    """``task -> fresh instance`` of the environment ``name`` (with ``kwargs``), whatever ``task.env`` says.

    What a command names is what runs its rollouts: ``trainers.evaluate --env`` and ``trainers.grpo``'s
    ``env_id`` list the tasks *and* build every rollout's environment through this (a task's ``env`` is
    only a label then; ``check_task_environments`` refuses one that names another known environment).
    """
    target = _resolve(name)

    def make(task: Task) -> Environment:
        return _instantiate(name, target, kwargs)

    return make


def check_task_environments(tasks: Sequence[Task], name: str, split: str) -> None:
    """Refuse tasks of ``split`` that belong to another environment than ``name``, the one that will run them.

    A task belongs elsewhere when its ``env`` names a registered environment of another kind (class) that lists
    that very task: sandbox tasks handed to a user's ``ToolsEnvironment`` would be scored by the wrong checker.
    A label (``Task.env`` defaults to ``"sandbox"``), the same name, or one environment registered under two
    names (``register_tools_environment("library", ...)`` beside a ``library_environment`` factory) is fine:
    ``name`` runs them.
    """
    target = _resolve(name)
    kind: type | None = None
    owners: dict[str, tuple[type, set[str]]] = {}
    for task in tasks:
        if not task.env or task.env == name or task.env not in _REGISTRY or _resolve(task.env) is target:
            continue
        if task.env not in owners:
            other = _instantiate(task.env, _resolve(task.env), {})
            try:
                owners[task.env] = (type(other), {t.id for t in other.list_tasks(split)})
            finally:
                other.close()
        other_kind, ids = owners[task.env]
        if task.id not in ids:
            continue
        if kind is None:
            named = _instantiate(name, target, {})
            kind = type(named)
            named.close()
        if other_kind is not kind:
            raise ConfigError(
                f"Task {task.id!r} is a task of environment {task.env!r} ({other_kind.__name__}), but this run was "
                f"given {name!r} ({kind.__name__}), which is what runs and scores every rollout. Run with "
                f"{task.env!r} (--env / env_id), or give the tasks of {name!r} their own ids and env."
            )

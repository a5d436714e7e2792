"""Drop-in: run *any* LangGraph agent on a task, against a fresh environment, and record it.

The seams (DESIGN.md "Drop-in"):

1. **The agent.** An ``AgentSpec``: a factory ``build(model, tools) -> compiled graph`` (most
   agents have one, or it is one line around their code), or an already compiled graph that
   routes its model with ``EvolverMiddleware`` (``create_agent``) or binds its own tools.
2. **The environment** gives per-rollout tools (``environment_tools``: LangChain tools that
   execute in this rollout's environment instance, so state is fresh per rollout) and the
   reward (``evaluate()``), unless a ``reward(task, final_state, trajectory)`` is given.
3. **The input.** ``to_input(task)`` or ``to_input(task, observation)`` builds the graph's
   input; the default is ``{"messages": [("user", task.query)]}``.
4. **The capture.** A ``TrajectoryRecorder`` (``capture.py``) in the run's callbacks.

What one episode does (``arun_episode``): reset a fresh environment for the task, build the
graph with the policy and the environment's tools, invoke it with the task's input (the live
rollout is reachable from inside the run through ``current_rollout()``, which is how the
middleware finds the policy and the tools), hand the graph's final AI text to the environment as
the answer, score it, and assemble the trajectory. Nothing raises: every failure is recorded
in the trajectory's ``errors`` with what to do about it.

Multi-turn environments answer a final answer with the next user message (``StepResult.messages``,
``done=False``, optionally new ``tools``): the graph is invoked again on its final state plus that
message (``AgentSpec.next_input``; rebuilt first when the tools changed), and ``max_turns`` counts
policy calls per user turn.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import importlib
import inspect
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool, ToolException

from .capture import TrajectoryRecorder, TurnLimitReached
from .context import ContextTemplate
from .errors import ConfigError
from .tracing import trace_metadata
from .types import Action, Observation, StepResult, Task, ToolCall, Trajectory

__all__ = [
    "AgentSpec",
    "EnvironmentTool",
    "Rollout",
    "arun_episode",
    "as_agent",
    "current_rollout",
    "default_input",
    "default_next_input",
    "environment_tools",
    "load_object",
    "set_environment_loader",
]

_CURRENT: contextvars.ContextVar[Rollout | None] = contextvars.ContextVar("evolver_rollout", default=None)


def current_rollout() -> Rollout | None:
    """The rollout running in this context (inside ``arun_episode``), else ``None``."""
    return _CURRENT.get()


@dataclass(slots=True)
class Rollout:
    """The live state of one rollout, visible to the graph's code through ``current_rollout()``."""

    task: Task
    env: Any
    observation: Observation
    tools: list[BaseTool]
    policy: BaseChatModel | None
    recorder: TrajectoryRecorder
    context_template: ContextTemplate | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    context_stats: list[dict[str, Any]] = field(default_factory=list)
    """Context-management steps made by ``EvolverMiddleware`` in this rollout."""
    experience: Any = None
    """The ``ExperienceBlock`` this rollout is guided by (self-navigating), injected into every policy prompt."""

    def tool(self, name: str) -> BaseTool | None:
        return next((t for t in self.tools if t.name == name), None)


# -- the environment's tools ---------------------------------------------------------------------
class EnvironmentTool(BaseTool):
    """A LangChain tool that executes one call in the environment of the rollout it runs in.

    The environment is ``rollout``'s when set, else ``current_rollout()``'s at call time, so one set
    of tools serves every rollout (they are cached per tool list). Error observations (unknown
    arguments, a failing tool, ...) come back as a ``ToolMessage`` with ``status="error"`` and the
    environment's text, so the agent sees exactly what the environment says. Calls of one rollout
    run one at a time (they may depend on each other).
    """

    args_schema: dict[str, Any]  # type: ignore[assignment]
    rollout: Any = None
    handle_tool_error: bool = True

    def _target(self) -> Rollout:
        rollout = self.rollout or current_rollout()
        if rollout is None:
            raise ConfigError(f"Tool {self.name!r} acts on a rollout's environment, and none is running: call it "
                              "inside arun_episode / run_rollouts, or give it rollout=.")  # fmt: skip
        return rollout

    def _action(self, kwargs: dict[str, Any]) -> Action:
        return Action(tool_calls=(ToolCall(name=self.name, arguments=kwargs, id="call"),))

    @staticmethod
    def _content(result: StepResult) -> str:
        if not result.observations:
            return ""
        obs = result.observations[0]
        if obs.is_error:
            raise ToolException(obs.content)
        return obs.content

    def _run(self, run_manager: Any = None, **kwargs: Any) -> str:
        return self._content(self._target().env.step(self._action(kwargs)))

    async def _arun(self, run_manager: Any = None, **kwargs: Any) -> str:
        rollout = self._target()
        async with rollout.lock:
            result = await rollout.env.astep(self._action(kwargs))
        return self._content(result)


_SHARED_TOOLS: dict[str, list[BaseTool]] = {}


def environment_tools(rollout: Rollout | None, schemas: Sequence[dict[str, Any]]) -> list[BaseTool]:
    """One ``EnvironmentTool`` per OpenAI function schema the environment offered on reset.

    ``rollout=None`` gives tools that act on whichever rollout calls them (shared and cached per
    tool list: building pydantic tools per rollout would cost more than the rest of a step).
    ``convert_to_openai_tool`` of each gives back the environment's schema unchanged, so a model
    sees the same tool list whether it is bound to these tools or to the raw schemas.
    """
    key = json.dumps(schemas, sort_keys=True, default=str) if rollout is None else ""
    if key and key in _SHARED_TOOLS:
        return _SHARED_TOOLS[key]
    tools: list[BaseTool] = []
    for schema in schemas:
        fn = schema.get("function", schema)
        parameters = fn.get("parameters") or {"type": "object", "properties": {}}
        tools.append(EnvironmentTool(name=fn["name"], description=fn.get("description") or "", rollout=rollout,
                                     args_schema=parameters))  # fmt: skip
    if key:
        if len(_SHARED_TOOLS) >= 1024:  # bounded: environments that vary their tools per task
            _SHARED_TOOLS.pop(next(iter(_SHARED_TOOLS)))
        _SHARED_TOOLS[key] = tools
    return tools


# -- the agent -----------------------------------------------------------------------------------
def default_input(task: Task) -> dict[str, Any]:
    """``{"messages": [("user", task.query)]}``: the input of ``create_agent`` and most chat agents."""
    return {"messages": [("user", task.query)]}


def default_next_input(state: Any, messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The graph's final state's ``messages`` plus the environment's next user turn (multi-turn environments)."""
    history = state.get("messages") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise ConfigError(
            "A multi-turn environment sent the next user message, but the graph's final state has no 'messages' "
            "list to continue: give AgentSpec(next_input=(state, messages) -> input)."
        )
    return {"messages": [*history, *({"role": m.get("role", "user"), "content": m.get("content") or ""}
                                     for m in messages)]}  # fmt: skip


@functools.lru_cache(maxsize=256)
def _arity(fn: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 2
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty for p in params)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSpec:
    """How to run someone's agent on a task.

    Args:
        build: ``build(model, tools) -> compiled graph``: called per rollout with the policy
            chat model and this rollout's environment tools.
        graph: Or an already compiled graph (``create_agent(..., middleware=[EvolverMiddleware()])``,
            or one built with the policy model and taking its tools from ``current_rollout()``).
        to_input: ``(task)`` or ``(task, observation) -> graph input``.
        reward: ``(task, final_state, trajectory) -> float`` (or an async function, e.g. the
            self-questioning ``ReferenceAwareJudge.areward``) instead of the environment's ``evaluate()``.
        name: Shown in traces and reports.
        applies_context: See the attribute.
        next_input: ``(final_state, messages) -> graph input`` for a multi-turn environment's next user turn.
    """

    build: Callable[[BaseChatModel, list[BaseTool]], Any] | None = None
    graph: Any = None
    to_input: Callable[..., dict[str, Any]] = default_input
    reward: Callable[[Task, Any, Trajectory], Any] | None = None
    name: str = "agent"
    next_input: Callable[[Any, Sequence[dict[str, Any]]], Any] = default_next_input
    applies_context: bool = False
    """The graph applies its context template itself (our agent); else the runner hands the factory a
    policy model that applies it (stateless templates) and ``EvolverMiddleware`` applies it for ``create_agent``."""

    def __post_init__(self) -> None:
        if (self.build is None) == (self.graph is None):
            raise ConfigError(
                "AgentSpec takes exactly one of build=(model, tools) -> graph, or graph=<compiled graph>."
            )

    def graph_for(self, policy: BaseChatModel | None, tools: list[BaseTool]) -> Any:
        if self.graph is not None:
            return self.graph
        assert self.build is not None
        graph = self.build(policy, tools) if policy is not None else self.build(None, tools)  # type: ignore[arg-type]
        if not hasattr(graph, "ainvoke"):
            raise ConfigError(f"The agent factory {_name(self.build)} returned {type(graph).__name__}, not a "
                              "compiled graph; return builder.compile() or create_agent(...).")  # fmt: skip
        return graph

    def input_for(self, task: Task, observation: Observation) -> Any:
        return self.to_input(task, observation) if _arity(self.to_input) >= 2 else self.to_input(task)


def _name(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', type(obj).__name__)}"


def _is_file_path(location: str) -> bool:
    return location.endswith(".py") or "/" in location or "\\" in location


def load_module_file(location: str, *, what: str = "object") -> Any:
    """The module in the Python file ``location`` (``./pkg/agent.py``), loaded once per resolved path.

    Its directory goes on ``sys.path`` first, as ``langgraph dev`` does for the files ``langgraph.json``
    names, so the file can import its neighbours.
    """
    import hashlib
    import importlib.util
    import sys
    from pathlib import Path

    file = Path(location).expanduser().resolve()
    if not file.is_file():
        raise ConfigError(f"{what}: no file {location!r} (resolved to {file}); give a path to a .py file, or a "
                          "module path such as 'my_pkg.agent:graph'.")  # fmt: skip
    name = f"_evolver_file_{file.stem}_{hashlib.sha1(str(file).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    if str(file.parent) not in sys.path:
        sys.path.insert(0, str(file.parent))
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{what}: cannot load {file} as Python.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up while it executes
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules[name]
        raise
    return module


def load_object(path: str, *, what: str = "object") -> Any:
    """``"package.module:attribute"``, ``package.module.attribute`` or ``"./path/file.py:attribute"`` (the form
    ``langgraph.json`` uses) → the object."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
        if module_name and _is_file_path(path) and path.endswith(".py"):  # "./agent.py" with no attribute
            module_name, attr = "", ""
    if not module_name or not attr:
        raise ConfigError(f"{what} {path!r} must look like 'my_pkg.module:name' or './path/file.py:name'.")
    try:
        module = load_module_file(module_name, what=what) if _is_file_path(module_name) else (
            importlib.import_module(module_name))  # fmt: skip
    except ImportError as e:
        raise ConfigError(f"Cannot import {module_name!r} for {what} {path!r}: {e}. Is it on PYTHONPATH "
                          "(run from the directory that holds it, or pip install -e it)?") from e  # fmt: skip
    try:
        obj = module
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        public = sorted(n for n in vars(module) if not n.startswith("_"))
        raise ConfigError(f"{module_name!r} has no {attr!r} for {what}; it defines: {', '.join(public)}") from None
    return obj


def as_agent(
    agent: Any,
    *,
    to_input: Callable[..., dict[str, Any]] | str | None = None,
    reward: Callable[[Task, Any, Trajectory], float] | str | None = None,
) -> AgentSpec:
    """An ``AgentSpec`` from a spec, a compiled graph, a ``build(model, tools)`` factory or a dotted path."""
    if isinstance(agent, str):
        agent = load_object(agent, what="--agent")
    if isinstance(to_input, str):
        to_input = load_object(to_input, what="--agent_input")
    if isinstance(reward, str):
        reward = load_object(reward, what="--reward")
    extra: dict[str, Any] = {}
    if to_input is not None:
        extra["to_input"] = to_input
    if reward is not None:
        extra["reward"] = reward
    if isinstance(agent, AgentSpec):
        return AgentSpec(**{**{f: getattr(agent, f) for f in AgentSpec.__dataclass_fields__}, **extra})
    if hasattr(agent, "ainvoke") and hasattr(agent, "get_graph"):
        return AgentSpec(graph=agent, name=getattr(agent, "name", None) or "agent", **extra)
    if callable(agent):
        return AgentSpec(build=agent, name=getattr(agent, "__name__", "agent"), **extra)
    raise ConfigError(f"An agent is a compiled graph, a build(model, tools) factory or an AgentSpec; got "
                      f"{type(agent).__name__}.")  # fmt: skip


# -- one episode ---------------------------------------------------------------------------------
_ENVIRONMENT_LOADER: Callable[[str], Any] | None = None


def set_environment_loader(loader: Callable[[str], Any]) -> None:
    """Where ``arun_episode`` gets an environment when no ``env_factory`` is given: ``loader(task.env)``.

    ``env_tools`` registers its registry (``load_environment``) here when imported; the library
    itself never imports ``env_tools`` (it depends on this package, not the reverse).
    """
    global _ENVIRONMENT_LOADER
    _ENVIRONMENT_LOADER = loader


def _load_environment(task: Task) -> Any:
    if _ENVIRONMENT_LOADER is None:
        raise ConfigError(f"No environment for task {task.id!r} (env {task.env!r}): pass env_factory=, or import "
                          "env_tools so its registry loads environments by name.")  # fmt: skip
    return _ENVIRONMENT_LOADER(task.env)


def _finish_hint(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, KeyError | TypeError | ValueError) and "messages" in str(exc):
        text += (' (the graph\'s input is built by to_input, default {"messages": [("user", task.query)]}; '
                 "give to_input= / --agent_input for another input shape)")  # fmt: skip
    return text


async def arun_episode(
    agent: AgentSpec,
    task: Task,
    *,
    policy: BaseChatModel | None = None,
    env_factory: Callable[[Task], Any] | None = None,
    group_id: str = "",
    rollout_index: int = 0,
    trajectory_id: str = "",
    callbacks: list | BaseCallbackManager | None = None,
    max_turns: int | None = None,
    context_template: ContextTemplate | None = None,
    recursion_limit: int = 100,
    require_policy: bool = False,
    train_tool_llm_calls: bool = False,
    capture: bool = True,
    navigator: Any = None,
    guided: bool = False,
) -> Trajectory:
    """Run ``agent`` on ``task`` once, against a fresh environment; never raises (see module docstring).

    ``capture=False`` runs without the recorder (the trajectory then has no steps): only for measuring
    what the capture costs (``benchmarks/rollouts.py``). ``guided=True`` with a ``navigator``
    (self-navigating) retrieves experiences for the task and injects them into every policy prompt.
    """
    trajectory_id = trajectory_id or f"{group_id or task.id}/{rollout_index}/{os.urandom(4).hex()}"
    recorder = TrajectoryRecorder(max_turns=max_turns, train_tool_llm_calls=train_tool_llm_calls)
    errors: list[str] = []
    started = time.perf_counter()
    state: Any = None
    env = None
    finish: Any = None
    reward: float | None = None
    try:
        env = env_factory(task) if env_factory is not None else _load_environment(task)
        observation = await env.areset(task)
    except Exception as e:
        errors.append(f"environment reset failed: {type(e).__name__}: {e}")
        traj = recorder.trajectory(task, trajectory_id=trajectory_id, group_id=group_id, rollout_index=rollout_index,
                                   finish_reason="error", errors=errors)  # fmt: skip
        if env is not None:
            await _close(env)
        return traj
    rollout = Rollout(task=task, env=env, observation=observation, tools=[], policy=policy, recorder=recorder,
                      context_template=context_template)  # fmt: skip
    rollout.tools = environment_tools(None, observation.tools)
    navigation: dict[str, Any] = {}
    if guided and navigator is not None:
        try:
            rollout.experience = await navigator.ablock_for(task, observation)
        except Exception as e:  # a failed retrieval leaves the rollout unguided, recorded
            errors.append(f"experience retrieval failed (rollout unguided): {type(e).__name__}: {e}")
        block = rollout.experience
        navigation = {"experience": {"guided": True, **(block.to_dict() if block else {"ids": [], "text": ""})}}
    config: dict[str, Any] = {
        "callbacks": _with_handler(callbacks, recorder) if capture else callbacks,
        "metadata": trace_metadata(
            task.id,
            group_id,
            rollout_index,
            trajectory_id=trajectory_id,
            **({"experience_ids": list(rollout.experience.ids)} if rollout.experience else {}),
        ),
        "run_name": f"rollout {task.id} #{rollout_index}",
        "recursion_limit": recursion_limit,
        # a graph compiled with a checkpointer needs a thread: each rollout its own (ignored without one)
        "configurable": {"thread_id": trajectory_id},
    }
    token = _CURRENT.set(rollout)
    answered = False
    try:
        model = _templated(policy, context_template, agent, rollout.experience)
        graph = agent.graph_for(model, rollout.tools)
        payload = agent.input_for(task, observation)
        while True:
            state = await graph.ainvoke(payload, config)
            answer = recorder.final_text(state)
            if answer is None:
                break
            result = await env.astep(Action(content=answer))
            answered = True
            if result.done or not result.messages:
                break
            answered = False  # a multi-turn environment's next user turn: the rollout goes on
            if result.tools is not None:
                rollout.tools = environment_tools(None, list(result.tools))
                graph = agent.graph_for(model, rollout.tools)
            recorder.start_user_turn()
            payload = agent.next_input(state, result.messages)
    except TurnLimitReached:
        finish = "max_turns"
    except Exception as e:
        if type(e).__name__ == "GraphRecursionError":
            finish = "max_turns"
        else:
            errors.append(f"rollout crashed: {_finish_hint(e)}")
    finally:
        _CURRENT.reset(token)
    try:
        if not answered and finish is None and not errors:
            # the graph stopped without answering: on a tool call that did not parse (never handed to the checker
            # as an answer; the step carries the malformed-call penalty), or at its own turn limit
            finish = "malformed_call" if recorder.malformed_ending(state) else "max_turns"
        if capture and not recorder.calls and not errors:
            errors.append("the graph made no LLM call: check that its model is the one the factory receives and "
                          "that to_input gives it a question")  # fmt: skip
        if require_policy and recorder.calls and not recorder.policy_calls and not errors:
            # (after a crash the missing policy call is the crash's doing: its error says what happened)
            models = ", ".join(recorder.summary()["other_models"])
            errors.append(f"this rollout made no call through the policy (its {len(recorder.calls)} LLM calls went "
                          f"to {models}), so it cannot be trained. If the graph routed away from the policy on "
                          "purpose, that is all; if it should have called it, build the graph with the model the "
                          "factory receives, or add EvolverMiddleware() to create_agent(middleware=[...])")  # fmt: skip
        if agent.reward is not None:
            draft = recorder.trajectory(task, final_state=state, trajectory_id=trajectory_id, group_id=group_id,
                                        rollout_index=rollout_index, finish_reason=finish, errors=errors)  # fmt: skip
            scored = agent.reward(task, state, draft)
            reward = float(await scored if inspect.isawaitable(scored) else scored)
        else:
            reward = float(await env.aevaluate())
    except Exception as e:
        errors.append(f"evaluation failed: {type(e).__name__}: {e}")
    finally:
        await _close(env)
    metadata = {"latency_s": round(time.perf_counter() - started, 4), "agent": agent.name,
                **_context_stats(state, rollout), **navigation}  # fmt: skip
    if recorder.user_turns > 1:
        metadata["user_turns"] = recorder.user_turns
    details = getattr(env, "last_evaluation", None)  # e.g. a benchmark checker's verdict and reason
    if isinstance(details, dict):
        metadata["evaluation"] = details
    return recorder.trajectory(task, reward=reward, final_state=state, trajectory_id=trajectory_id, group_id=group_id,
                               rollout_index=rollout_index, finish_reason=finish, errors=errors, metadata=metadata,
                               experience_ids=rollout.experience.ids if rollout.experience else ())  # fmt: skip


def _templated(policy: BaseChatModel | None, template: ContextTemplate | None, agent: AgentSpec,
               block: Any = None) -> Any:  # fmt: skip
    """The policy a ``build`` factory receives: one that applies the context template (and injects the
    rollout's experience block) on every prompt. Our agent does both itself."""
    if policy is None or agent.applies_context or agent.build is None or (template is None and block is None):
        return policy
    if not hasattr(policy, "context_template"):
        return policy  # not a PolicyChatModel: only EvolverMiddleware can apply templates to it
    if block is not None:
        from .experience.navigate import inject_experience

        inner = template

        def template(messages: Any, _inner: Any = inner) -> list:
            return inject_experience(_inner(messages) if _inner is not None else list(messages), block)

    return policy.model_copy(update={"context_template": template})


def _with_handler(callbacks: Any, recorder: TrajectoryRecorder) -> Any:
    """``callbacks`` (a list, or a node's callback manager: the episode nests in its trace) + the recorder."""
    if isinstance(callbacks, BaseCallbackManager):
        manager = callbacks.copy()
        manager.add_handler(recorder, inherit=True)
        return manager
    return [*(callbacks or []), recorder]


def _context_stats(state: Any, rollout: Rollout) -> dict[str, Any]:
    """Context-management figures: our graph's (in its state) or the middleware's (on the rollout)."""
    stats = (state.get("context_stats") if isinstance(state, dict) else None) or rollout.context_stats
    if not stats:
        return {}
    return {"context": {"steps": len(stats), "invalid": sum(not s.get("valid") for s in stats),
                        "removed": sum(s.get("removed", 0) for s in stats),
                        "compressed": sum(s.get("compressed", 0) for s in stats)}}  # fmt: skip


async def _close(env: Any) -> None:
    try:
        await env.aclose()
    except Exception:  # closing must not mask the rollout's own outcome
        pass

"""Any list of LangChain tools + tasks + a checker -> an ``Environment``.

``ToolsEnvironment`` wraps LangChain tools (``BaseTool``: ``@tool`` functions, ``StructuredTool``,
``Tool``, custom subclasses) or plain typed Python functions (converted with
``StructuredTool.from_function``; a Google-style ``Args:`` section becomes the argument
descriptions) behind the ``Environment`` interface, so the rollout engine, self-questioning and
the HTTP service can use them like the built-in sandbox.

The two callables that define an environment:

- ``tools_factory(task) -> (state, tools)`` is called on every ``reset``. It builds fresh state
  for the task (anything: a dataclass, a dict, a database handle, ``None`` for stateless tools)
  and the tools that act on it, usually closures over that state. Calling it per reset is what
  makes instances independent: two environments never share state unless the factory makes
  them. ``task.env_params`` is the place for the initial-state parameters (seed, records).
- ``checker(task, state, final_answer, calls) -> float`` scores an episode in [0, 1] (partial
  credit allowed). ``state`` is what the factory returned, ``final_answer`` the agent's closing
  text (``None`` until the agent answers without tool calls), ``calls`` every ``ToolCall`` the
  agent made, in order, failed ones included. Prefer checking the final state over the call
  sequence: many sequences solve a task. Results are clamped to [0, 1]; a non-number, NaN or an
  exception raises ``EnvironmentFailure`` (a broken checker is a bug, not a bad action).
  Without a checker, the final answer must contain ``task.metadata[answer_key]``. Synthesized
  tasks (``source="synthetic"``, self-questioning) and trace tasks are scored against their
  reference solution replayed in a fresh instance, whatever the checker: the end state must match;
  a read task's answer must quote a value the reference's reads returned, and its calls (name and
  arguments) give partial credit (``env_tools/replay.py``).

How tool calls are executed (nothing raises out of ``step``; each problem is an observation
with ``is_error=True`` whose text starts with ``Error:`` and says how to fix the call):

- unknown tool -> lists the valid tool names;
- arguments that are not a JSON object (a raw string means the model's JSON did not decode)
  -> says so and lists the parameters;
- unknown argument names -> rejected (LangChain would silently drop them; an agent being
  trained should learn the real signature);
- arguments the tool's ``args_schema`` rejects (pydantic ``ValidationError``) -> names each
  wrong argument, what was wrong and the value given;
- ``ToolException`` -> honours the tool's ``handle_tool_error`` (its content, still marked as
  an error); without a handler the observation is ``Error: <message>``. The same for
  ``handle_validation_error``. Any other exception -> ``Error: <tool> failed with <Type>: ...``;
- a non-string result is JSON-encoded (LangChain's encoding: ``json.dumps``, else ``str``).

Calls run one after another in the order given (they may depend on each other's effects).
Tools are invoked with a LangChain tool call, so ``InjectedToolCallId`` arguments work; other
injected arguments (LangGraph state or store) are not supplied: close over state instead.
``astep`` awaits ``ainvoke`` for tools with a native async implementation and runs sync tools in
a worker thread (``asyncio.to_thread``), so a tool doing blocking I/O does not stall concurrent
rollouts. ``step`` runs an async-only tool outside an event loop on one ``asyncio.Runner`` per
instance, so a tool may keep loop-bound resources (a client, a lock) across calls; ``close()``
closes that loop. ``close()`` also calls ``state.close()`` when the state has one.

Example:
    >>> from langchain_core.tools import tool
    >>> from langgraph_evolver.environment import load_environment, register_environment
    >>> from env_tools.langchain_tools import ToolsEnvironment
    >>> from langgraph_evolver.types import Action, Task, ToolCall
    >>> def counter_tools(task):
    ...     state = {"count": 0}
    ...     @tool
    ...     def increment(by: int = 1) -> int:
    ...         '''Add ``by`` to the counter and return the new value.'''
    ...         state["count"] += by
    ...         return state["count"]
    ...     return state, [increment]
    >>> def reached_target(task, state, final_answer, calls):
    ...     return float(state["count"] == task.metadata["target"])
    >>> tasks = [Task(id="count-3", env="counter", query="Count to 3.", metadata={"target": 3})]
    >>> register_environment(
    ...     "counter", lambda **kw: ToolsEnvironment(counter_tools, tasks=tasks, checker=reached_target, **kw)
    ... )
    >>> env = load_environment("counter")
    >>> obs = env.reset(env.list_tasks("train")[0])
    >>> env.step(Action(tool_calls=(ToolCall(name="increment", arguments={"by": 3}),))).observations[0].content
    '3'
    >>> env.step(Action(content="Done, the counter is at 3.")).done
    True
    >>> env.evaluate()
    1.0
"""

from __future__ import annotations

import asyncio
import logging
import math
import numbers
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ValidationError
from pydantic.v1 import ValidationError as ValidationErrorV1

from env_tools._checks import answer_matches
from env_tools.tool_adapters import (
    ToolLike,
    _close_state,
    _describe_validation_error,
    _has_native_async,
    _is_argument_error,
    _is_async_only,
    _parameters,
    _render_content,
    _short,
    _signature_text,
    as_langchain_tool,
)
from langgraph_evolver.environment import Environment, register_environment
from langgraph_evolver.errors import ConfigError, EnvironmentFailure
from langgraph_evolver.types import Action, Observation, StepResult, Task, ToolCall, ToolObservation

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "Checker",
    "ToolsEnvironment",
    "ToolsFactory",
    "as_langchain_tool",
    "make_tools_environment",
    "register_tools_environment",
]

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant. Use the tools to act. When the task is done, reply without a tool "
    "call, giving a short final answer."
)

ToolsFactory = Callable[[Task], tuple[Any, Sequence[ToolLike]]]
"""``tools_factory(task) -> (state, tools)``: fresh state and the tools acting on it."""
Checker = Callable[[Task, Any, "str | None", list[ToolCall]], float]
"""``checker(task, state, final_answer, calls) -> score in [0, 1]``."""


class ToolsEnvironment(Environment):
    """An environment made of LangChain tools, per-instance state, tasks and a checker.

    Args:
        tools_factory: ``tools_factory(task) -> (state, tools)``, called on every ``reset``;
            ``tools`` are ``BaseTool`` objects or typed functions with docstrings, with unique
            names. See the module docstring.
        tasks: the environment's own tasks: ``{split: [Task, ...]}``, or a list (the ``train``
            split), or ``None``. ``list_tasks`` returns ``[]`` for a split it does not have.
        checker: ``checker(task, state, final_answer, calls) -> float`` in [0, 1]. ``None``
            scores 1.0 when the final answer contains ``task.metadata[answer_key]``, else 0.0.
        system_prompt: the system message opening every episode; ``None`` for none.
        answer_key: the ``task.metadata`` key holding the expected answer, used only when
            ``checker`` is ``None`` (then every task must have it).
        profile: a declared environment profile (entities, attributes) for self-questioning;
            ``profile()`` adds the operations derived from the tool schemas.
    """

    def __init__(
        self,
        tools_factory: ToolsFactory,
        *,
        tasks: Mapping[str, Sequence[Task]] | Sequence[Task] | None = None,
        checker: Checker | None = None,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        answer_key: str = "answer",
        profile: Mapping[str, Any] | None = None,
    ) -> None:
        if not callable(tools_factory):
            raise ConfigError(
                f"tools_factory must be callable as tools_factory(task) -> (state, tools), got "
                f"{type(tools_factory).__name__}; for a fixed list of stateless tools use make_tools_environment."
            )
        if checker is not None and not callable(checker):
            raise ConfigError(f"checker must be callable as checker(task, state, final_answer, calls), got {checker!r}")
        if tasks is None:
            self._tasks: dict[str, list[Task]] = {}
        elif isinstance(tasks, Mapping):
            self._tasks = {str(split): list(items) for split, items in tasks.items()}
        else:
            self._tasks = {"train": list(tasks)}
        self._tools_factory = tools_factory
        self._checker = checker
        self._system_prompt = system_prompt
        self._answer_key = answer_key
        self._declared_profile = dict(profile or {})
        self._task: Task | None = None
        self._state: Any = None
        self._tools: dict[str, BaseTool] = {}
        self._schemas: dict[str, dict[str, Any]] = {}
        self._calls: list[ToolCall] = []
        self._final_answer: str | None = None
        self._done = False
        self._runner: asyncio.Runner | None = None
        """Runs async-only tools for the sync ``step``; created on first use, closed by ``close``."""

    # -- inspection -------------------------------------------------------------------------

    @property
    def task(self) -> Task | None:
        """The task of the current episode."""
        return self._task

    @property
    def state(self) -> Any:
        """The state the factory built for the current episode (what the checker sees)."""
        return self._state

    @property
    def tools(self) -> dict[str, BaseTool]:
        """The current episode's tools by name."""
        return dict(self._tools)

    @property
    def calls(self) -> list[ToolCall]:
        """Every tool call of the current episode, in order, failed ones included."""
        return list(self._calls)

    @property
    def final_answer(self) -> str | None:
        """The agent's closing text, once it answered without tool calls."""
        return self._final_answer

    @property
    def done(self) -> bool:
        return self._done

    # -- episode ----------------------------------------------------------------------------

    def _build_tools(self, task: Task) -> tuple[Any, dict[str, BaseTool], dict[str, dict[str, Any]]]:
        try:
            produced = self._tools_factory(task)
        except EnvironmentFailure:
            raise
        except Exception as e:
            raise EnvironmentFailure(
                f"tools_factory raised {type(e).__name__} for task {task.id!r}: {e}. Fix the factory; "
                "it must build fresh state and tools for any task of this environment."
            ) from e
        if not (isinstance(produced, tuple) and len(produced) == 2) or isinstance(produced[1], str | bytes | BaseTool):
            raise EnvironmentFailure(
                f"tools_factory returned {type(produced).__name__} for task {task.id!r}; it must return a "
                "(state, tools) pair, e.g. `return state, [add_item, list_items]` (state may be None)."
            )
        state, raw_tools = produced
        tools: dict[str, BaseTool] = {}
        schemas: dict[str, dict[str, Any]] = {}
        try:
            for obj in raw_tools:
                tool = as_langchain_tool(obj)
                if tool.name in tools:
                    raise ConfigError(f"two tools are named {tool.name!r}; tool names must be unique")
                tools[tool.name] = tool
                schemas[tool.name] = convert_to_openai_tool(tool)
        except Exception as e:
            raise EnvironmentFailure(f"tools_factory gave unusable tools for task {task.id!r}: {e}") from e
        if not tools:
            raise EnvironmentFailure(
                f"tools_factory gave no tools for task {task.id!r}; an environment needs one or more."
            )
        return state, tools, schemas

    def reset(self, task: Task) -> Observation:
        scorable = task.source in ("synthetic", "trace") and bool(task.reference_solution)  # by its reference's state
        if self._checker is None and self._answer_key not in task.metadata and not scorable:
            raise EnvironmentFailure(
                f"Task {task.id!r} has no metadata[{self._answer_key!r}] and the environment has no checker, "
                "so it cannot be scored: pass checker=... or put the expected answer in the task's metadata."
            )
        previous, self._state = self._state, None
        _close_state(previous)  # the last episode's state, when reset without close
        self._state, self._tools, self._schemas = self._build_tools(task)
        self._task = task
        self._calls = []
        self._final_answer = None
        self._done = False
        messages = [] if self._system_prompt is None else [{"role": "system", "content": self._system_prompt}]
        messages.append({"role": "user", "content": task.query})
        return Observation(messages=messages, tools=list(self._schemas.values()))

    def _require_reset(self) -> Task:
        if self._task is None:
            raise EnvironmentFailure("The environment was not reset: call reset(task) before step/evaluate.")
        return self._task

    def _begin_step(self, action: Action) -> StepResult | None:
        """The step's result when it runs no tools (after the end, or a final answer)."""
        self._require_reset()
        if self._done:
            return StepResult(done=True)
        if not action.tool_calls:
            self._final_answer = action.content
            self._done = True
            return StepResult(done=True)
        return None

    def _prepare(self, call: ToolCall, call_id: str) -> tuple[BaseTool, dict[str, Any]] | ToolObservation:
        """The tool and LangChain tool call to run, or the error observation for a bad call."""

        def error(text: str) -> ToolObservation:
            return ToolObservation(call_id=call_id, name=call.name, content=f"Error: {text}", is_error=True)

        tool = self._tools.get(call.name)
        if tool is None:
            return error(f"unknown tool {call.name!r}. Available tools: {', '.join(sorted(self._tools))}")
        schema = self._schemas[call.name]
        if not isinstance(call.arguments, dict):
            return error(
                f"the arguments of {call.name} are not a JSON object: {_short(call.arguments, 200)}. "
                f"Pass a JSON object with its parameters: {_signature_text(schema)}"
            )
        params = _parameters(schema)
        if not params.get("additionalProperties"):
            unknown = sorted(set(call.arguments) - set(params.get("properties") or ()))
            if unknown:
                return error(f"{call.name} got unknown argument(s) {unknown}; it takes {_signature_text(schema)}")
        lc_call = {"type": "tool_call", "name": call.name, "args": dict(call.arguments), "id": call_id}
        return tool, lc_call

    def _failure(self, call_id: str, tool: BaseTool, error: Exception) -> ToolObservation:
        if isinstance(error, ValidationError | ValidationErrorV1) and _is_argument_error(tool, error):
            text = (
                f"invalid arguments for {tool.name}: {_describe_validation_error(error)}. "
                f"{tool.name} takes {_signature_text(self._schemas[tool.name])}"
            )
        elif isinstance(error, ToolException):
            text = str(error) or f"{tool.name} failed"
        else:
            text = f"{tool.name} failed with {type(error).__name__}: {error}"
        return ToolObservation(call_id=call_id, name=tool.name, content=f"Error: {text}", is_error=True)

    @staticmethod
    def _result(call_id: str, name: str, output: Any) -> ToolObservation:
        if isinstance(output, ToolMessage):
            return ToolObservation(
                call_id=call_id, name=name, content=_render_content(output.content), is_error=output.status == "error"
            )
        return ToolObservation(call_id=call_id, name=name, content=_render_content(output))

    def _run_call(self, call: ToolCall, call_id: str) -> ToolObservation:
        self._calls.append(call)
        prepared = self._prepare(call, call_id)
        if isinstance(prepared, ToolObservation):
            return prepared
        tool, lc_call = prepared
        if _is_async_only(tool):
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass
            else:
                raise EnvironmentFailure(
                    f"Tool {tool.name!r} is async-only and step() was called inside a running event loop; "
                    "drive this environment with `await env.astep(action)`."
                )
        try:
            if _is_async_only(tool):
                if self._runner is None:  # a loop_factory: never install it as this thread's current loop
                    self._runner = asyncio.Runner(loop_factory=asyncio.new_event_loop)
                output = self._runner.run(tool.ainvoke(lc_call))
            else:
                output = tool.invoke(lc_call)
        except Exception as e:  # a bad call or a bug in a tool must not kill the rollout
            return self._failure(call_id, tool, e)
        return self._result(call_id, tool.name, output)

    async def _arun_call(self, call: ToolCall, call_id: str) -> ToolObservation:
        self._calls.append(call)
        prepared = self._prepare(call, call_id)
        if isinstance(prepared, ToolObservation):
            return prepared
        tool, lc_call = prepared
        try:
            if _has_native_async(tool):
                output = await tool.ainvoke(lc_call)
            else:  # off the loop: a blocking tool must not stall the other rollouts
                output = await asyncio.to_thread(tool.invoke, lc_call)
        except Exception as e:  # a bad call or a bug in a tool must not kill the rollout
            return self._failure(call_id, tool, e)
        return self._result(call_id, tool.name, output)

    def step(self, action: Action) -> StepResult:
        ended = self._begin_step(action)
        if ended is not None:
            return ended
        observations = [self._run_call(call, call.id or f"call_{i}") for i, call in enumerate(action.tool_calls)]
        return StepResult(observations=tuple(observations))

    async def astep(self, action: Action) -> StepResult:
        ended = self._begin_step(action)
        if ended is not None:
            return ended
        observations = []
        for i, call in enumerate(action.tool_calls):  # in order: later calls may depend on earlier effects
            observations.append(await self._arun_call(call, call.id or f"call_{i}"))
        return StepResult(observations=tuple(observations))

    def evaluate(self) -> float:
        task = self._require_reset()
        if task.source in ("synthetic", "trace") and task.reference_solution:  # self-questioning, ingested traces
            return self._reference_state_score(task)
        if self._checker is None:
            return 1.0 if answer_matches(self._final_answer, str(task.metadata[self._answer_key])) else 0.0
        name = getattr(self._checker, "__name__", type(self._checker).__name__)
        try:
            score = self._checker(task, self._state, self._final_answer, list(self._calls))
        except Exception as e:
            raise EnvironmentFailure(
                f"The checker {name!r} raised {type(e).__name__} on task {task.id!r}: {e}. A checker must "
                "return a score in [0, 1] for any final state, including unfinished or failed episodes."
            ) from e
        if not isinstance(score, numbers.Real) or math.isnan(float(score)):
            raise EnvironmentFailure(
                f"The checker {name!r} returned {score!r} on task {task.id!r}; it must return a number in [0, 1]."
            )
        score = float(score)
        if not 0.0 <= score <= 1.0:
            logger.warning("Checker %r returned %s on task %r; clamped to [0, 1].", name, score, task.id)
        return min(1.0, max(0.0, score))

    scores_synthetic_by_replay = True
    """Synthesized tasks are scored by ``env_tools.replay.replay_score`` (self-questioning records what a read
    task's answer must quote when it checks the task's feasibility)."""

    def _replay_twin(self) -> ToolsEnvironment:
        """A fresh instance to replay a reference in (a subclass whose state lives elsewhere gives its own)."""
        return ToolsEnvironment(self._tools_factory, system_prompt=self._system_prompt)

    def _reference_state_score(self, task: Task) -> float:
        """Synthesized and trace tasks have no checker of their own: replay the reference in a fresh instance and
        score by ``env_tools.replay.replay_score`` (end state, and for a read task the answer and the calls)."""
        from langgraph_evolver.reference_scoring import state_fingerprint

        from .replay import replay_score

        before, after = self._reference_fingerprints(task)
        return replay_score(task, state_matches=after == state_fingerprint(self), changes_state=after != before,
                            calls=self._calls, final_answer=self._final_answer)  # fmt: skip

    def _reference_fingerprints(self, task: Task) -> tuple[str, str]:
        """``task``'s world as a fresh instance has it (``state_fingerprint``) before and after its reference."""
        from langgraph_evolver.reference_scoring import state_fingerprint

        twin = self._replay_twin()
        try:
            twin.reset(task)
            before = state_fingerprint(twin)
            for call in task.reference_solution or ():
                twin.step(Action(tool_calls=(call,)))
            return before, state_fingerprint(twin)
        finally:
            twin.close()

    def close(self) -> None:
        """End the episode (``step`` / ``evaluate`` then need a ``reset``) and release its state.

        Calls ``state.close()`` when the factory's state has one, and closes the event loop that
        ran async-only tools for ``step``. Idempotent.
        """
        state, self._state = self._state, None
        self._task, self._done = None, False
        self._tools = {}
        self._schemas = {}
        runner, self._runner = self._runner, None
        try:
            _close_state(state)
        finally:
            if runner is not None:
                _close_runner(runner)

    def list_tasks(self, split: str = "train") -> list[Task]:
        return list(self._tasks.get(split, ()))

    def list_splits(self) -> list[str]:
        return sorted(split for split, tasks in self._tasks.items() if tasks)

    def profile(self) -> dict[str, Any]:
        """The declared profile plus ``operations`` derived from the tool schemas.

        Before the first ``reset`` the tools come from calling the factory on the first task
        (a throwaway instance); without tasks, only the declared profile is returned.
        """
        schemas = self._schemas
        if not schemas:
            first = next((t for tasks in self._tasks.values() for t in tasks), None)
            if first is None:
                return dict(self._declared_profile)
            schemas = self._build_tools(first)[2]
        operations = {
            name: {
                "description": schema["function"].get("description", ""),
                "arguments": sorted(_parameters(schema).get("properties") or ()),
                "required": list(_parameters(schema).get("required") or ()),
            }
            for name, schema in schemas.items()
        }
        return {**self._declared_profile, "operations": operations}


def _close_runner(runner: asyncio.Runner) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        runner.close()
        return
    # Called from async code (``aclose``): the runner's loop cannot run inside this one, so shut it
    # down from a helper thread.
    closer = threading.Thread(target=runner.close, name="close-tools-loop")
    closer.start()
    closer.join()


def _factory_for(tools: ToolsFactory | Sequence[ToolLike]) -> ToolsFactory:
    if isinstance(tools, BaseTool) or (callable(tools) and not isinstance(tools, Sequence)):
        if isinstance(tools, BaseTool):
            raise ConfigError(f"Pass a list of tools, not the single tool {tools.name!r}: [{tools.name}].")
        return tools
    converted = [as_langchain_tool(t) for t in tools]  # fail fast, before any reset

    def shared_tools(task: Task) -> tuple[None, list[BaseTool]]:
        return None, converted

    return shared_tools


def make_tools_environment(tools: ToolsFactory | Sequence[ToolLike], **options: Any) -> ToolsEnvironment:
    """A ``ToolsEnvironment`` from a ``tools_factory`` or a fixed list of stateless tools.

    A fixed list is shared by every instance (state ``None``): use it only for tools without
    state (calculators, lookups over constant data); give a factory otherwise. ``options`` are
    ``ToolsEnvironment``'s keyword arguments.

    Example:
        >>> from langgraph_evolver.types import Task
        >>> def add(a: int, b: int) -> int:
        ...     '''Add two integers.'''
        ...     return a + b
        >>> env = make_tools_environment([add], tasks=[Task(id="t", query="2+3?", metadata={"answer": 5})])
    """
    return ToolsEnvironment(_factory_for(tools), **options)


def register_tools_environment(name: str, tools: ToolsFactory | Sequence[ToolLike], **options: Any) -> None:
    """Register a tools environment so ``load_environment(name, **overrides)`` creates instances.

    Each ``load_environment`` call gets a fresh ``ToolsEnvironment``; keyword arguments given
    there override ``options``. Equivalent to
    ``register_environment(name, lambda **kw: ToolsEnvironment(factory, **{**options, **kw}))``.
    """
    factory = _factory_for(tools)

    def create(**overrides: Any) -> ToolsEnvironment:
        return ToolsEnvironment(factory, **{**options, **overrides})

    register_environment(name, create)

"""``SandboxEnvironment``: the built-in multi-app world behind the ``Environment`` interface.

Scoring is state-based: the task's reference solution is replayed in a fresh world and the
agent's final state is compared with it, not its action sequence. Checks (each worth the same):

- every change the reference makes (a record added, removed or modified, the balance) is
  present in the agent's world;
- every resource the reference looks at (a contact, a day's events, the balance, ...) was
  looked at by the agent (the world's audit log), so answers must come from the data;
- the final answer contains the expected value, when the task asks a question.

Changes the reference does not make (a wrong payment, an extra booking) halve the score.
Any task with a reference solution gets a checker this way, synthesized ones included.
"""

from __future__ import annotations

import json
from typing import Any

from env_tools._checks import answer_matches
from langgraph_evolver.environment import Environment
from langgraph_evolver.errors import EnvironmentFailure
from langgraph_evolver.types import Action, Observation, StepResult, Task, ToolCall, ToolObservation

from .apps import APPS, TOOLS, ToolError, tool_schema
from .world import World, diff_worlds

__all__ = ["SYSTEM_PROMPT", "SandboxEnvironment", "check_arguments", "score_state"]

SYSTEM_PROMPT = "Use the tools to act for the user. When done, reply with a short answer."
COLLATERAL_PENALTY = 0.5
_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def check_arguments(name: str, arguments: dict[str, Any] | str) -> str | None:
    """Why a call's arguments do not fit the tool's schema, or ``None`` when they do."""
    if not isinstance(arguments, dict):
        return f"arguments of {name} are not a JSON object: {str(arguments)[:200]!r}"
    params = TOOLS[name].params
    unknown = sorted(set(arguments) - set(params))
    if unknown:
        return f"{name} got unknown argument(s) {unknown}; it takes {sorted(params) or 'no arguments'}"
    missing = [p for p in params if p not in arguments]
    if missing:
        return f"{name} is missing required argument(s) {missing}"
    for key, (json_type, _) in params.items():
        value = arguments[key]
        expected = _JSON_TYPES[json_type]
        if isinstance(value, bool) and json_type != "boolean" or not isinstance(value, expected):
            return f"argument {key!r} of {name} must be a {json_type}, got {type(value).__name__}"
    return None


def _execute(world: World, call: ToolCall) -> tuple[str, bool]:
    """Run one call against ``world``: (observation text, is_error). Never raises."""
    spec = TOOLS.get(call.name)
    if spec is None:
        return f"Error: unknown tool {call.name!r}. Available tools: {', '.join(sorted(TOOLS))}", True
    problem = check_arguments(call.name, call.arguments)
    if problem is not None:
        return f"Error: {problem}", True
    try:
        return _dumps(spec.fn(world, **call.arguments)), False
    except ToolError as e:
        return f"Error: {e}", True
    except Exception as e:  # a bug in a tool must not kill the rollout
        return f"Error: internal error in {call.name}: {type(e).__name__}: {e}", True


def score_state(task: Task, initial: World, final: World) -> float:
    """Score ``final`` against the replay of ``task``'s reference solution from ``initial``."""
    if task.reference_solution is None:
        raise EnvironmentFailure(
            f"Task {task.id!r} has no reference solution, so the sandbox cannot check it; "
            "score it with a judge instead."
        )
    expected = initial.clone()
    expected.viewed.clear()
    for call in task.reference_solution:
        _execute(expected, call)
    want, got = diff_worlds(initial, expected), diff_worlds(initial, final)
    checks = [change in got for change in want]
    checks += [key in final.viewed for key in sorted(expected.viewed)]
    answer = task.metadata.get("answer")
    if answer is not None:
        checks.append(answer_matches(final.answer, str(answer)))
    score = sum(checks) / len(checks) if checks else 1.0
    if got - want:
        score *= COLLATERAL_PENALTY
    return score


class SandboxEnvironment(Environment):
    """The built-in sandbox: contacts, messaging, calendar, flights, payments and profile apps.

    Args:
        seed: world seed used when a task does not carry one.
    """

    def __init__(self, *, seed: int = 0) -> None:
        self._default_seed = seed
        self._task: Task | None = None
        self._initial: World | None = None
        self.world: World | None = None
        self._done = False

    def reset(self, task: Task) -> Observation:
        params = dict(task.env_params)
        seed = int(params.pop("seed", self._default_seed))
        balance = params.pop("balance", None)
        if params:
            raise EnvironmentFailure(f"Task {task.id!r} has unknown sandbox env_params {sorted(params)}")
        self._task = task
        self._initial = World.generate(seed, balance=balance)
        self.world = self._initial.clone()
        self._done = False
        apps = task.metadata.get("apps") or list(APPS)
        unknown = [a for a in apps if a not in APPS]
        if unknown:
            raise EnvironmentFailure(f"Task {task.id!r} names unknown apps {unknown}; apps: {sorted(APPS)}")
        tools = [tool_schema(name) for app in apps for name in APPS[app]]
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task.query}]
        return Observation(messages=messages, tools=tools)

    def _require_world(self) -> World:
        if self.world is None:
            raise EnvironmentFailure("The environment was not reset: call reset(task) before step/evaluate.")
        return self.world

    def step(self, action: Action) -> StepResult:
        world = self._require_world()
        if self._done:
            return StepResult(done=True)
        if not action.tool_calls:
            world.answer = action.content or ""
            self._done = True
            return StepResult(done=True)
        observations = []
        for i, call in enumerate(action.tool_calls):
            text, is_error = _execute(world, call)
            observations.append(
                ToolObservation(call_id=call.id or f"call_{i}", name=call.name, content=text, is_error=is_error)
            )
        return StepResult(observations=tuple(observations))

    def evaluate(self) -> float:
        world = self._require_world()
        assert self._task is not None and self._initial is not None
        return score_state(self._task, self._initial, world)

    def close(self) -> None:
        self.world = None

    def list_tasks(self, split: str = "train") -> list[Task]:
        """``train`` (the first 180 training-stream tasks), or a disjoint pool ``sft`` / ``rl`` / ``validation`` /
        ``test``; ``NAME:N`` for N tasks (pools.py)."""
        from .pools import split_tasks

        try:
            return split_tasks(split)
        except ValueError as e:
            raise EnvironmentFailure(str(e)) from None

    def profile(self) -> dict[str, Any]:
        from .profile import environment_profile

        return environment_profile()

"""A schema-driven offline explorer: valid random tool calls, arguments from what it has seen.

No model is involved, so exploration runs offline on any environment. A breadth phase of
``n_breadth`` calls samples diverse tools (each tool at most once while unused ones can be
filled); a depth phase of ``n_depth`` calls prefers tools whose arguments can be filled from
the most recent observations (an id a search just returned, then the call that uses it). Argument
values come from the schema (enums, numbers named in the description) and from every JSON value
seen in earlier observations, matched by argument name (``contact_id`` <- an ``id`` returned by
a ``*contact*`` tool, ``origin`` <- a ``city``). Deterministic for a given seed.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph_evolver.types import Action, Step, Task, ToolCall, ToolObservation, Trajectory

from ..environment import Environment
from .profile import WRITE_VERBS, tool_entity, tool_verb
from .prompts import DEFAULT_EXPLORE_GOAL

__all__ = ["EXPLORE_QUERY", "aexplore", "exploration_task", "explore"]

EXPLORE_QUERY = DEFAULT_EXPLORE_GOAL
"""The exploration goal (``prompts.DEFAULT_EXPLORE_GOAL``; this name is kept for old imports)."""
_SYNONYMS = {
    "origin": ("city", "home_city", "origin", "destination"),
    "destination": ("city", "destination", "origin", "home_city"),
    "query": ("name", "title"),
}
_RECENT = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class _Seen:
    key: str
    value: Any
    entity: str
    step: int


def exploration_task(seed_task: Task | None = None, *, env: str | None = None, seed: int = 0) -> Task:
    """The task an exploration resets the environment with: the seed task's world, all tools.

    The seed task's ``env`` and ``env_params`` are kept (they define the world); its query and
    metadata are not (the sandbox would otherwise show only the seed task's apps).
    """
    env_name = env or (seed_task.env if seed_task is not None else "sandbox")
    params = dict(seed_task.env_params) if seed_task is not None else {}
    digest = hashlib.sha1(json.dumps([env_name, params, seed], sort_keys=True, default=str).encode()).hexdigest()
    metadata = {"seed_task_id": seed_task.id} if seed_task is not None else {}
    return Task(id=f"explore-{digest[:12]}", query=EXPLORE_QUERY, env=env_name, env_params=params, metadata=metadata)


def _harvest(value: Any, key: str, entity: str, step: int, out: list[_Seen]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _harvest(v, str(k), entity, step, out)
    elif isinstance(value, list):
        for v in value:
            _harvest(v, key, entity, step, out)
    elif value is not None and key:
        out.append(_Seen(key=key, value=value, entity=entity, step=step))


def _type_ok(value: Any, json_type: str | None) -> bool:
    if json_type == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if json_type == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if json_type == "boolean":
        return isinstance(value, bool)
    if json_type == "string":
        return isinstance(value, str) and bool(value)
    return not isinstance(value, Mapping | list)


class _Explorer:
    """The explorer's state: tool schemas, values seen, calls made. Drives sync and async loops."""

    def __init__(self, tools: Sequence[Mapping[str, Any]], *, seed: int) -> None:
        self.rng = random.Random(seed)
        self.tools: dict[str, dict[str, Any]] = {}
        for schema in tools:
            fn = schema.get("function", schema)
            params = fn.get("parameters") or {}
            self.tools[fn["name"]] = {
                "props": dict(params.get("properties") or {}),
                "required": list(params.get("required") or []),
            }
        self.examples: dict[str, str] = {}
        for tool in self.tools.values():  # "Date, e.g. May 3": an example value, shared by argument name
            for arg, prop in tool["props"].items():
                found = re.search(r"e\.g\.,?\s*'?([^,;()']+)", str(prop.get("description", "")))
                if found and not arg.endswith("_id"):
                    self.examples.setdefault(arg, found.group(1).strip())
        self.seen: list[_Seen] = []
        self.used: list[str] = []
        self.step = 0

    def _candidates(self, arg: str, json_type: str | None, *, recent: bool) -> list[Any]:
        keys = {arg, *_SYNONYMS.get(arg, ())}
        entity = arg[:-3] if arg.endswith("_id") else None
        values = []
        for s in self.seen:
            if recent and s.step < self.step - _RECENT:
                continue
            if s.key in keys or (entity is not None and s.key == "id" and entity in s.entity):
                if _type_ok(s.value, json_type) and s.value not in values:
                    values.append(s.value)
        return values

    def _fill(self, arg: str, prop: Mapping[str, Any], *, recent: bool) -> tuple[bool, Any]:
        json_type = prop.get("type")
        if prop.get("enum"):
            return True, self.rng.choice(list(prop["enum"]))
        values = self._candidates(arg, json_type, recent=recent)
        if not values and recent:
            values = self._candidates(arg, json_type, recent=False)
        if values:
            return True, self.rng.choice(values)
        if arg.endswith("_id") or arg == "id":
            return False, None
        if json_type == "boolean":
            return True, self.rng.random() < 0.5
        if json_type in ("integer", "number"):
            named = [int(x) for x in re.findall(r"\b\d+\b", prop.get("description", ""))]
            return True, self.rng.choice(named or [1, 2, 3, 5, 10, 20])
        if json_type in ("string", None):
            example = self.examples.get(arg)
            if example:
                first_digit = r"(?<!\d)\d(?!\d)"
                return True, re.sub(first_digit, lambda _: str(self.rng.randint(1, 9)), example, count=1)
            return True, f"{arg.replace('_', ' ')} {self.rng.randint(2, 99)}"
        return False, None

    def fillable(self, name: str, *, recent: bool = False) -> bool:
        tool = self.tools[name]
        return all(
            bool(self._candidates(a, tool["props"].get(a, {}).get("type"), recent=recent))
            or (recent is False and self._fill_probe(a, tool["props"].get(a, {})))
            for a in tool["required"]
        )

    def _fill_probe(self, arg: str, prop: Mapping[str, Any]) -> bool:
        return not (arg.endswith("_id") or arg == "id") or bool(prop.get("enum"))

    def arguments(self, name: str, *, recent: bool) -> dict[str, Any]:
        tool = self.tools[name]
        args: dict[str, Any] = {}
        for arg, prop in tool["props"].items():
            required = arg in tool["required"]
            if not required and self.rng.random() < 0.5:
                continue
            ok, value = self._fill(arg, prop, recent=recent)
            if not ok and recent:
                ok, value = self._fill(arg, prop, recent=False)
            if ok:
                args[arg] = value
            elif required:
                args[arg] = f"unknown-{arg}"
        return args

    def next_call(self, phase: str) -> ToolCall:
        names = sorted(self.tools)
        if phase == "breadth":
            unused = [n for n in names if n not in self.used]
            pool = [n for n in unused if self.fillable(n)] or [n for n in names if self.fillable(n)] or names
            name = self.rng.choice(pool)
            recent = False
        else:
            weights = []
            for n in names:
                w = 0.0  # a tool whose ids are unknown yet would only return an error
                if self.fillable(n):
                    w = 1.0
                    needs_ids = any(a.endswith("_id") for a in self.tools[n]["required"])
                    if needs_ids and self.fillable(n, recent=True):
                        w += 3.0
                    if tool_verb(n) in WRITE_VERBS:
                        w += 0.5
                    if n in self.used[-3:]:
                        w *= 0.3
                weights.append(w)
            name = self.rng.choices(names, weights=weights)[0] if any(weights) else self.rng.choice(names)
            recent = True
        call = ToolCall(name=name, arguments=self.arguments(name, recent=recent), id=f"explore_{self.step}")
        self.used.append(name)
        return call

    def observe(self, observations: Sequence[ToolObservation]) -> None:
        for obs in observations:
            if obs.is_error:
                continue
            try:
                data = json.loads(obs.content)
            except (json.JSONDecodeError, TypeError):
                continue
            _harvest(data, "", tool_entity(obs.name), self.step, self.seen)
        self.step += 1


def _trajectory(task: Task, steps: list[Step], *, seed: int, n_breadth: int, n_depth: int) -> Trajectory:
    digest = hashlib.sha1(f"{task.id}|{seed}|{n_breadth}|{n_depth}".encode()).hexdigest()
    errors = tuple(f"step {s.index}: {o.content[:160]}" for s in steps for o in s.observations if o.is_error)
    return Trajectory(
        id=f"exploration-{digest[:12]}",
        task=task,
        steps=tuple(steps),
        finish_reason="max_turns",
        errors=errors,
        metadata={"explorer": "schema", "seed": seed, "n_breadth": n_breadth, "n_depth": n_depth},
    )


def _phases(n_breadth: int, n_depth: int) -> list[str]:
    return ["breadth"] * n_breadth + ["depth"] * n_depth


def explore(env: Environment, task: Task, *, n_breadth: int = 3, n_depth: int = 17, seed: int = 0) -> Trajectory:
    """Explore ``env`` from ``task``'s world with schema-driven random calls.

    Args:
        env: an ``env_tools.base.Environment`` instance (reset here with ``task``).
        task: the task whose world to explore, usually ``exploration_task(seed_task)``.
        n_breadth: calls of the breadth phase (diverse tools).
        n_depth: calls of the depth phase (conditioned on recent observations).
        seed: random seed; the same seed gives the same trajectory.

    Returns:
        A ``Trajectory`` with one ``Step`` per call (``node`` is ``explore_breadth`` or
        ``explore_depth``, ``policy=False``); error observations are kept and listed in ``errors``.
    """
    obs = env.reset(task)
    explorer = _Explorer(obs.tools, seed=seed)
    steps = []
    for i, phase in enumerate(_phases(n_breadth, n_depth)):
        call = explorer.next_call(phase)
        result = env.step(Action(tool_calls=(call,)))
        explorer.observe(result.observations)
        steps.append(_step(i, call, result.observations, phase))
    return _trajectory(task, steps, seed=seed, n_breadth=n_breadth, n_depth=n_depth)


async def aexplore(env: Environment, task: Task, *, n_breadth: int = 3, n_depth: int = 17, seed: int = 0) -> Trajectory:
    """Async twin of ``explore`` (``areset`` / ``astep``), for remote environments."""
    obs = await env.areset(task)
    explorer = _Explorer(obs.tools, seed=seed)
    steps = []
    for i, phase in enumerate(_phases(n_breadth, n_depth)):
        call = explorer.next_call(phase)
        result = await env.astep(Action(tool_calls=(call,)))
        explorer.observe(result.observations)
        steps.append(_step(i, call, result.observations, phase))
    return _trajectory(task, steps, seed=seed, n_breadth=n_breadth, n_depth=n_depth)


def _step(index: int, call: ToolCall, observations: Sequence[ToolObservation], phase: str) -> Step:
    errors = [o.content for o in observations if o.is_error]
    return Step(
        index=index,
        action=Action(tool_calls=(call,)),
        observations=tuple(observations),
        error=errors[0][:200] if errors else None,
        node=f"explore_{phase}",
        model="schema-explorer",
        policy=False,
    )

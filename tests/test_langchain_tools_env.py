"""The LangChain tools adapter: tools + tasks + checker -> Environment, driven by scripted actions."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import StructuredTool, ToolException, tool

from env_tools.langchain_tools import (
    DEFAULT_SYSTEM_PROMPT,
    ToolsEnvironment,
    as_langchain_tool,
    make_tools_environment,
    register_tools_environment,
)
from langgraph_evolver.environment import Environment, load_environment, register_environment
from langgraph_evolver.errors import ConfigError, EnvironmentFailure
from langgraph_evolver.types import Action, Task, ToolCall

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "langchain_tools_env.py"


def _load_example():
    name = "examples_langchain_tools_env"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


todo = _load_example()


def call(name: str, arguments: dict[str, Any] | str | None = None, id: str = "") -> Action:
    return Action(tool_calls=(ToolCall(name=name, arguments={} if arguments is None else arguments, id=id),))


def todo_env() -> ToolsEnvironment:
    return ToolsEnvironment(todo.todo_tools, tasks=todo.TASKS, checker=todo.check_todos)


def task(task_id: str) -> Task:
    return next(t for t in todo.TASKS if t.id == task_id)


# -- the to-do example ------------------------------------------------------------------------


@pytest.mark.parametrize("task_id", [t.id for t in todo.TASKS])
def test_oracle_solution_scores_one(task_id):
    t = task(task_id)
    assert todo.run_script(todo_env(), t, t.reference_solution, t.metadata["reply"]) == 1.0


def test_wrong_solutions_score_less():
    rent = task("todo-complete-rent")
    assert todo.run_script(todo_env(), rent, [ToolCall(name="complete_todo", arguments={"todo_id": 1})], "Done.") < 1.0
    clean = task("todo-clean-up")
    # the right state but the wrong count, then the right count without touching the state
    assert todo.run_script(todo_env(), clean, clean.reference_solution, "4 open to-dos are left.") < 1.0
    assert todo.run_script(todo_env(), clean, [], "3 open to-dos are left.") < 1.0
    # doing nothing at all scores less than the oracle too
    assert todo.run_script(todo_env(), task("todo-add-milk"), [], "Added.") < 1.0


def test_example_script_runs(capsys):
    todo.main()
    out = capsys.readouterr().out
    assert out.count("score 1.00") == len(todo.TASKS)
    assert "score 0.25" in out


def test_reset_returns_prompt_and_openai_schemas():
    env = todo_env()
    t = task("todo-add-milk")
    obs = env.reset(t)
    assert obs.messages == [
        {"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": t.query},
    ]
    schemas = {s["function"]["name"]: s for s in obs.tools}
    assert set(schemas) == {"add_todo", "list_todos", "complete_todo", "delete_todo"}
    add = schemas["add_todo"]
    assert add["type"] == "function"
    params = add["function"]["parameters"]
    assert params["properties"]["title"]["type"] == "string"
    assert params["properties"]["priority"]["type"] == "integer"
    assert params["required"] == ["title"]
    assert "priority" in params["properties"] and "description" in params["properties"]["priority"]
    json.dumps(obs.to_dict())  # the observation must travel as JSON


def test_instances_and_episodes_are_isolated():
    t = task("todo-add-milk")
    first, second = todo_env(), todo_env()
    first.reset(t)
    second.reset(t)
    first.step(call("add_todo", {"title": "Only in first"}))
    assert [i.title for i in first.state.items.values()][-1] == "Only in first"
    assert "Only in first" not in [i.title for i in second.state.items.values()]
    listed = json.loads(second.step(call("list_todos")).observations[0].content)
    assert [i["title"] for i in listed] == ["Pay rent", "Call mom"]
    # a new episode on the same instance starts from fresh state as well
    first.reset(t)
    assert [i.title for i in first.state.items.values()] == ["Pay rent", "Call mom"]
    assert first.calls == [] and first.final_answer is None


# -- bad actions become error observations ----------------------------------------------------


def test_unknown_tool_lists_valid_tools_and_rollout_continues():
    env = todo_env()
    env.reset(task("todo-add-milk"))
    result = env.step(call("remove_todo", {"todo_id": 1}, id="c1"))
    assert not result.done
    (obs,) = result.observations
    assert obs.is_error and obs.call_id == "c1" and obs.name == "remove_todo"
    assert obs.content.startswith("Error:")
    for name in ("add_todo", "complete_todo", "delete_todo", "list_todos"):
        assert name in obs.content
    ok = env.step(call("add_todo", {"title": "Buy milk", "priority": 1})).observations[0]
    assert not ok.is_error and json.loads(ok.content)["title"] == "Buy milk"


def test_raw_string_arguments_are_reported_as_bad_json():
    env = todo_env()
    env.reset(task("todo-add-milk"))
    (obs,) = env.step(call("add_todo", '{"title": "Buy milk", ')).observations
    assert obs.is_error and "not a JSON object" in obs.content and "title" in obs.content
    assert len(env.state.items) == 2
    assert env.step(call("add_todo", {"title": "Buy milk"})).observations[0].is_error is False


def test_wrong_argument_type_names_the_argument():
    env = todo_env()
    env.reset(task("todo-complete-rent"))
    (obs,) = env.step(call("complete_todo", {"todo_id": "rent"})).observations
    assert obs.is_error and obs.content.startswith("Error: invalid arguments for complete_todo")
    assert "'todo_id'" in obs.content and "'rent'" in obs.content
    (missing,) = env.step(call("add_todo", {"priority": 1})).observations
    assert missing.is_error and "'title'" in missing.content and "required" in missing.content.lower()
    (unknown,) = env.step(call("add_todo", {"title": "x", "urgent": True})).observations
    assert unknown.is_error and "urgent" in unknown.content
    assert not any(i.done for i in env.state.items.values()) and len(env.state.items) == 3


def test_tool_exceptions_become_error_observations():
    def factory(task):
        @tool
        def crash(x: int) -> str:
            """Always crashes."""
            raise RuntimeError(f"disk full at {x}")

        @tool
        def refuse(x: int) -> str:
            """Refuses through ToolException."""
            raise ToolException(f"cannot do {x}")

        @tool
        def handled(x: int) -> str:
            """Refuses, with its own error handler."""
            raise ToolException(f"nope {x}")

        handled.handle_tool_error = lambda e: f"handled: {e}"

        @tool
        def fine(x: int) -> str:
            """Works."""
            return f"ok {x}"

        return None, [crash, refuse, handled, fine]

    env = ToolsEnvironment(factory, checker=lambda *_: 1.0)
    env.reset(Task(id="t", query="q", env="x"))
    calls = tuple(ToolCall(name=n, arguments={"x": 7}, id=n) for n in ("crash", "refuse", "handled", "fine"))
    result = env.step(Action(tool_calls=calls))
    by_name = {o.name: o for o in result.observations}
    assert [o.call_id for o in result.observations] == ["crash", "refuse", "handled", "fine"]
    assert (
        by_name["crash"].is_error
        and by_name["crash"].content == "Error: crash failed with RuntimeError: disk full at 7"
    )
    assert by_name["refuse"].is_error and by_name["refuse"].content == "Error: cannot do 7"
    assert by_name["handled"].is_error and by_name["handled"].content == "handled: nope 7"
    assert not by_name["fine"].is_error and by_name["fine"].content == "ok 7"
    assert not result.done and [c.name for c in env.calls] == ["crash", "refuse", "handled", "fine"]


def test_todo_tool_exception_is_an_observation():
    env = todo_env()
    env.reset(task("todo-complete-rent"))
    (obs,) = env.step(call("complete_todo", {"todo_id": 42})).observations
    assert obs.is_error and obs.content == "Error: no to-do with id 42; call list_todos to see the ids"


def test_non_string_results_are_json():
    def factory(task):
        def stats(n: int) -> dict:
            """Stats."""
            return {"n": n, "squares": [i * i for i in range(n)], "name": "café"}

        def nothing() -> None:
            """Returns nothing."""

        def empty() -> list:
            """Returns an empty list."""
            return []

        return None, [stats, nothing, empty]

    env = ToolsEnvironment(factory, checker=lambda *_: 1.0)
    env.reset(Task(id="t", query="q"))
    observations = env.step(
        Action(
            tool_calls=(ToolCall(name="stats", arguments={"n": 3}), ToolCall(name="nothing"), ToolCall(name="empty"))
        )
    ).observations
    assert json.loads(observations[0].content) == {"n": 3, "squares": [0, 1, 4], "name": "café"}
    assert observations[1].content == "null"
    assert observations[2].content == "[]"


# -- episode end, checker ---------------------------------------------------------------------


def test_final_answer_ends_episode_and_reaches_checker():
    seen = {}

    def checker(task, state, final_answer, calls):
        seen.update(task=task.id, state=state, answer=final_answer, calls=[c.name for c in calls])
        return 0.5

    def factory(task):
        state = {"pings": 0}

        @tool
        def ping() -> str:
            """Ping."""
            state["pings"] += 1
            return "pong"

        return state, [ping]

    env = ToolsEnvironment(factory, checker=checker)
    env.reset(Task(id="t1", query="ping twice"))
    env.step(call("ping"))
    env.step(call("nope"))
    env.step(Action(tool_calls=(ToolCall(name="ping"),), content="thinking out loud"))
    assert not env.done and env.final_answer is None
    result = env.step(Action(content="Pinged twice."))
    assert result.done and result.observations == ()
    assert env.step(call("ping")).done  # after the end nothing runs
    assert env.evaluate() == 0.5
    assert seen == {"task": "t1", "state": {"pings": 2}, "answer": "Pinged twice.", "calls": ["ping", "nope", "ping"]}


@pytest.mark.parametrize(("returned", "expected"), [(1.7, 1.0), (-0.2, 0.0), (True, 1.0), (0, 0.0)])
def test_checker_scores_are_clamped(returned, expected):
    env = make_tools_environment([as_langchain_tool(_add)], checker=lambda *_: returned)
    env.reset(Task(id="t", query="q"))
    assert env.evaluate() == expected


@pytest.mark.parametrize("returned", [float("nan"), "1.0", None])
def test_checker_non_numbers_fail(returned):
    env = make_tools_environment([_add], checker=lambda *_: returned)
    env.reset(Task(id="t", query="q"))
    with pytest.raises(EnvironmentFailure, match="must return a number"):
        env.evaluate()


def test_checker_exception_is_environment_failure():
    def broken(task, state, final_answer, calls):
        return 1.0 / 0

    env = make_tools_environment([_add], checker=broken)
    env.reset(Task(id="t9", query="q"))
    with pytest.raises(EnvironmentFailure, match=r"'broken' raised ZeroDivisionError on task 't9'"):
        env.evaluate()


def test_default_checker_uses_answer_key():
    env = make_tools_environment([_add], answer_key="expected")
    env.reset(Task(id="t", query="2+3?", metadata={"expected": 5}))
    env.step(call("_add", {"a": 2, "b": 3}))
    env.step(Action(content="The sum is 5."))
    assert env.evaluate() == 1.0
    env.reset(Task(id="t", query="2+3?", metadata={"expected": 5}))
    env.step(Action(content="It is 15."))
    assert env.evaluate() == 0.0
    with pytest.raises(EnvironmentFailure, match="expected"):
        env.reset(Task(id="u", query="no answer"))


# -- plain functions, async, registry, misuse -------------------------------------------------


def _add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


def test_plain_typed_functions_are_accepted():
    def scale(values: list[float], factor: float = 2.0) -> list[float]:
        """Multiply each value by a factor."""
        return [v * factor for v in values]

    env = make_tools_environment([_add, scale], checker=lambda *_: 1.0, system_prompt=None)
    obs = env.reset(Task(id="t", query="q"))
    assert obs.messages == [{"role": "user", "content": "q"}]
    add_schema = next(s for s in obs.tools if s["function"]["name"] == "_add")["function"]
    assert add_schema["description"] == "Add two integers."
    assert add_schema["parameters"]["properties"]["a"] == {"type": "integer", "description": "the first."}
    observations = env.step(
        Action(
            tool_calls=(
                ToolCall(name="_add", arguments={"a": 2, "b": 40}),
                ToolCall(name="scale", arguments={"values": [1, 2.5]}),
                ToolCall(name="_add", arguments={"a": "two", "b": 1}),
            )
        )
    ).observations
    assert observations[0].content == "42"
    assert json.loads(observations[1].content) == [2.0, 5.0]
    assert observations[2].is_error and "'a'" in observations[2].content


def test_function_without_docstring_is_a_clear_error():
    def undocumented(x: int) -> int:
        return x

    with pytest.raises(ConfigError, match="docstring"):
        make_tools_environment([undocumented])


async def test_astep_awaits_async_tools():
    log = []

    def factory(task):
        async def fetch(key: str) -> str:
            """Fetch a value asynchronously."""
            await asyncio.sleep(0)
            log.append(("fetch", key))
            return key.upper()

        @tool
        def store(key: str) -> str:
            """Store synchronously."""
            log.append(("store", key))
            return "stored"

        @tool
        async def explode() -> str:
            """Fails asynchronously."""
            raise ValueError("async boom")

        return None, [fetch, store, explode]

    env = ToolsEnvironment(factory, checker=lambda task, state, answer, calls: float(answer == "done"))
    await env.areset(Task(id="t", query="q"))
    result = await env.astep(
        Action(
            tool_calls=(
                ToolCall(name="fetch", arguments={"key": "a"}),
                ToolCall(name="store", arguments={"key": "b"}),
                ToolCall(name="explode"),
                ToolCall(name="fetch", arguments={"key": 3}),
            )
        )
    )
    assert [o.content for o in result.observations[:2]] == ["A", "stored"]
    assert result.observations[2].is_error and "ValueError: async boom" in result.observations[2].content
    assert result.observations[3].is_error and "'key'" in result.observations[3].content
    assert log == [("fetch", "a"), ("store", "b")]
    assert (await env.astep(Action(content="done"))).done
    assert await env.aevaluate() == 1.0


def test_sync_step_runs_async_only_tools():
    async def double(x: int) -> int:
        """Double asynchronously."""
        return 2 * x

    env = make_tools_environment([double], checker=lambda *_: 1.0)
    env.reset(Task(id="t", query="q"))
    assert env.step(call("double", {"x": 21})).observations[0].content == "42"


async def test_sync_tools_do_not_block_concurrent_asteps():
    def factory(task):
        @tool
        def slow_lookup() -> str:
            """Blocking I/O."""
            time.sleep(0.5)
            return "found"

        return None, [slow_lookup]

    envs = [ToolsEnvironment(factory, checker=lambda *_: 1.0) for _ in range(8)]
    for env in envs:
        await env.areset(Task(id="t", query="q"))
    start = time.perf_counter()
    results = await asyncio.gather(*(env.astep(call("slow_lookup")) for env in envs))
    elapsed = time.perf_counter() - start
    assert [r.observations[0].content for r in results] == ["found"] * 8
    # on the event loop they would run one after another (8 x 0.5 s = 4 s); in threads they overlap (a thread
    # pool of 6 on 2 cores: two waves, ~1 s). The bound is the serial time's 60%: wide for a loaded machine.
    assert elapsed < 0.6 * 8 * 0.5, elapsed


def test_sync_step_keeps_one_event_loop_for_async_tools():
    def factory(task):
        cache: dict[str, asyncio.Event] = {}

        async def wait_for_signal() -> str:
            """Wait on an event created on first use (it binds to the loop that first waits on it)."""
            event = cache.setdefault("event", asyncio.Event())
            event.clear()
            asyncio.get_running_loop().call_soon(event.set)
            await event.wait()
            return "signalled"

        return None, [wait_for_signal]

    env = make_tools_environment(factory, checker=lambda *_: 1.0)
    for _ in range(2):  # a second episode after close() gets a fresh loop and fresh state
        env.reset(Task(id="t", query="q"))
        for _ in range(3):
            (obs,) = env.step(call("wait_for_signal")).observations
            assert not obs.is_error and obs.content == "signalled", obs.content
        env.close()


def test_close_ends_the_episode_and_closes_the_state():
    class Connection:
        closed = 0

        def close(self) -> None:
            self.closed += 1

    connection = Connection()
    env = ToolsEnvironment(lambda task: (connection, [_add]), checker=lambda *_: 1.0)
    env.reset(Task(id="t", query="q"))
    env.step(call("_add", {"a": 1, "b": 2}))
    env.close()
    assert connection.closed == 1 and env.state is None and env.task is None and not env.done
    with pytest.raises(EnvironmentFailure, match="not reset"):
        env.step(call("_add", {"a": 1, "b": 2}))
    with pytest.raises(EnvironmentFailure, match="not reset"):
        env.evaluate()
    env.close()  # idempotent
    assert connection.closed == 1


def test_reset_releases_the_previous_episodes_state():
    class Connection:
        def __init__(self) -> None:
            self.closed = 0

        def close(self) -> None:
            self.closed += 1

    made: list[Connection] = []

    def factory(task):
        made.append(Connection())
        return made[-1], [_add]

    env = ToolsEnvironment(factory, checker=lambda *_: 1.0)
    env.reset(Task(id="t1", query="q"))
    env.reset(Task(id="t2", query="q"))  # no close() in between
    assert [c.closed for c in made] == [1, 0]
    env.close()
    assert [c.closed for c in made] == [1, 1]


async def test_aclose_after_sync_steps_with_async_tools():
    async def double(x: int) -> int:
        """Double asynchronously."""
        return 2 * x

    env = make_tools_environment([double], checker=lambda *_: 1.0)
    env.reset(Task(id="t", query="q"))
    await asyncio.to_thread(env.step, call("double", {"x": 2}))  # sync step, off this loop
    await env.aclose()  # closes the step loop although a loop runs here
    with pytest.raises(EnvironmentFailure, match="not reset"):
        await env.astep(call("double", {"x": 2}))


def test_registry_round_trip():
    register_environment(
        "todo_test_lambda",
        lambda **kw: ToolsEnvironment(todo.todo_tools, tasks=todo.TASKS, checker=todo.check_todos, **kw),
    )
    register_tools_environment(
        "todo_test_helper", todo.todo_tools, tasks={"train": todo.TASKS}, checker=todo.check_todos
    )
    for name in ("todo_test_lambda", "todo_test_helper"):
        env = load_environment(name, system_prompt="Be brief.")
        other = load_environment(name)
        assert isinstance(env, Environment) and env is not other
        t = env.list_tasks("train")[1]
        assert t.id == "todo-complete-rent" and env.list_tasks("test") == []
        assert env.reset(t).messages[0] == {"role": "system", "content": "Be brief."}
        assert todo.run_script(env, t, t.reference_solution, t.metadata["reply"]) == 1.0


def test_profile_lists_operations_before_reset():
    env = ToolsEnvironment(todo.todo_tools, tasks=todo.TASKS, checker=todo.check_todos, profile={"entities": ["todo"]})
    profile = env.profile()
    assert profile["entities"] == ["todo"]
    assert profile["operations"]["complete_todo"]["required"] == ["todo_id"]
    assert set(profile["operations"]) == {"add_todo", "list_todos", "complete_todo", "delete_todo"}


def test_misuse_raises_environment_failure():
    env = todo_env()
    with pytest.raises(EnvironmentFailure, match="reset"):
        env.step(Action(content="hi"))
    bad_shape = ToolsEnvironment(lambda task: [todo.todo_tools(task)[1]], checker=lambda *_: 1.0)
    with pytest.raises(EnvironmentFailure, match=r"\(state, tools\) pair"):
        bad_shape.reset(Task(id="t", query="q"))
    duplicate = ToolsEnvironment(
        lambda task: (None, [_add, StructuredTool.from_function(_add)]), checker=lambda *_: 1.0
    )
    with pytest.raises(EnvironmentFailure, match="unique"):
        duplicate.reset(Task(id="t", query="q"))


def test_validation_error_inside_a_tool_is_a_tool_failure_not_an_argument_error():
    from pydantic import BaseModel

    class Record(BaseModel):
        size: int

    def parse(text: str) -> int:
        """Parse a record."""
        return Record(size=text).size

    env = make_tools_environment([parse], checker=lambda *_: 1.0)
    env.reset(Task(id="t", query="q"))
    (obs,) = env.step(call("parse", {"text": "big"})).observations
    assert obs.is_error and obs.content.startswith("Error: parse failed with ValidationError")
    assert env.step(call("parse", {"text": "12"})).observations[0].content == "12"

"""BFCL v3 multi-turn as an environment (env_tools/bfcl): oracle replay, checker, isolation, turns.

Offline: bfcl-eval ships its data, backends and checker (``make install-bfcl`` installs it).
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed: run `make install-bfcl`")

from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402

from env_tools.bfcl import CATEGORIES, BFCLEnvironment, bfcl_tasks, call_string, entry, reference_turns  # noqa: E402
from graphs.agent import reference_agent  # noqa: E402
from langgraph_evolver.batch import arun_rollouts  # noqa: E402
from langgraph_evolver.chat_model import POLICY_MARKER  # noqa: E402
from langgraph_evolver.environment import load_environment  # noqa: E402
from langgraph_evolver.environment_tools import current_rollout  # noqa: E402
from langgraph_evolver.types import Action, Task, ToolCall  # noqa: E402


@functools.cache
def turns_of(task_id: str) -> list[list[ToolCall]]:
    return reference_turns(task_id)


@functools.cache
def all_tasks() -> dict[str, Task]:
    return {t.id: t for t in bfcl_tasks("all")}


def replay(env: BFCLEnvironment, task: Task, turns: Sequence[Sequence[ToolCall]]) -> float:
    env.reset(task)
    for calls in turns:
        if calls:
            env.step(Action(tool_calls=tuple(calls)))
        env.step(Action(content="Done."))
    return env.evaluate()


def first_multi_call_turn(task_id: str) -> int:
    return next(i for i, calls in enumerate(turns_of(task_id)) if len(calls) > 1)


def dropped(task_id: str, which: int = -1) -> list[list[ToolCall]]:
    turns = [list(t) for t in turns_of(task_id)]
    turns[first_multi_call_turn(task_id)].pop(which)
    return turns


def seen_alone(task: Task, turns: Sequence[Sequence[ToolCall]]) -> list[str]:
    """The observations of one replay with no other rollout around."""
    env = BFCLEnvironment()
    env.reset(task)
    seen = []
    for calls in turns:
        if calls:
            seen += [o.content for o in env.step(Action(tool_calls=tuple(calls))).observations]
        env.step(Action(content="Done."))
    env.close()
    return seen


def live_instances() -> list[str]:
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    return [n for n in vars(multi_turn_utils) if n.startswith("evolver_")]


# -- oracle ------------------------------------------------------------------------------------------
def test_oracle_replay_of_every_entry_scores_one():
    from env_tools.bfcl._data import _entries

    env = BFCLEnvironment()
    tasks = list(all_tasks().values())
    cached = {c: json.dumps(_entries(c), sort_keys=True) for c in CATEGORIES}
    scores = {t.id: replay(env, t, turns_of(t.id)) for t in tasks}
    env.close()
    assert {c: json.dumps(_entries(c), sort_keys=True) for c in CATEGORIES} == cached  # entries are shared, read only
    failed = {k: v for k, v in scores.items() if v != 1.0}
    print(f"oracle replay: {len(tasks) - len(failed)}/{len(tasks)}")
    assert len(tasks) == 800 and {t.metadata["category"] for t in tasks} == set(CATEGORIES)
    assert not failed, failed
    assert live_instances() == []  # the checker's and the executor's backends are freed


def test_dropping_one_call_of_a_multi_call_turn_fails():
    env = BFCLEnvironment()
    rng = random.Random(0)
    picked = [t for t in all_tasks().values() if any(len(c) > 1 for c in turns_of(t.id))]
    assert len(picked) > 400
    for task in rng.sample(picked, 40):
        calls = turns_of(task.id)[first_multi_call_turn(task.id)]
        which = rng.randrange(len(calls))
        assert replay(env, task, dropped(task.id, which)) < 1.0, (task.id, calls[which])
        assert env.last_evaluation is not None and env.last_evaluation["valid"] is False
        assert env.last_evaluation["error_type"].startswith("multi_turn:")
    env.close()


def test_stopping_before_the_last_turn_is_force_terminated():
    task = all_tasks()["multi_turn_base_0"]
    env = BFCLEnvironment()
    env.reset(task)
    first = turns_of(task.id)[0]
    env.step(Action(tool_calls=tuple(first)))
    assert env.step(Action(content="ok")).done is False
    assert env.evaluate() == 0.0
    assert env.last_evaluation == {"valid": False, "error_type": "multi_turn:force_terminated",
                                   "error_message": env.last_evaluation["error_message"]}  # fmt: skip
    env.close()
    assert live_instances() == []


def test_calls_in_a_turn_whose_ground_truth_is_empty_fail_the_irrelevance_check():
    task = next(t for t in all_tasks().values() if t.metadata["category"] == "miss_param")
    turns = [list(t) for t in turns_of(task.id)]
    empty = next(i for i, calls in enumerate(turns) if not calls)
    some_call = next(c for calls in turns for c in calls)
    turns[empty] = [
        ToolCall(name=some_call.name, arguments={"nonsense": 1}, id="x")
    ]  # fails to execute: state unchanged
    env = BFCLEnvironment()
    assert replay(env, task, turns) == 0.0
    assert "irrelevance" in env.last_evaluation["error_type"]
    env.close()


# -- the environment's contract ------------------------------------------------------------------------
def test_tools_are_json_schemas_and_turns_arrive_in_order():
    task = all_tasks()["multi_turn_base_0"]
    env = load_environment("bfcl")
    obs = env.reset(task)
    e = entry(task.id)
    assert obs.messages == e["question"][0]
    assert {t["function"]["name"] for t in obs.tools} == {f["name"] for f in e["function"]}
    for tool in obs.tools:
        params = tool["function"]["parameters"]
        assert tool["type"] == "function" and params["type"] == "object"
        assert all(p.get("type") in (None, "string", "integer", "number", "boolean", "array", "object")
                   for p in params["properties"].values())  # fmt: skip
    seen = []
    for t in range(len(e["question"])):
        result = env.step(Action(content="ok"))
        seen.append([m["content"] for m in result.messages])
        assert result.done is (t == len(e["question"]) - 1)
    assert seen[:-1] == [[m["content"] for m in q] for q in e["question"][1:]] and seen[-1] == []
    env.close()


def test_bad_tool_calls_become_error_observations():
    task = all_tasks()["multi_turn_base_0"]
    env = BFCLEnvironment()
    env.reset(task)
    tool = turns_of(task.id)[0][0].name
    calls = (
        ToolCall(name="no_such_tool", arguments={}, id="a"),
        ToolCall(name=tool, arguments='{"not": json', id="b"),
        ToolCall(name="__import__", arguments={"name": "os"}, id="c"),
        ToolCall(name=tool, arguments={"bad key": 1}, id="d"),
        ToolCall(name=tool, arguments={"unexpected_argument": 1}, id="e"),
        ToolCall(name="open", arguments={"file": "/tmp/x", "mode": "w"}, id="f"),
    )
    result = env.step(Action(tool_calls=calls))
    assert [o.call_id for o in result.observations] == ["a", "b", "c", "d", "e", "f"]
    assert all(o.is_error for o in result.observations) and not result.done
    text = [o.content for o in result.observations]
    assert "unknown tool 'no_such_tool'" in text[0] and "Available tools" in text[0]
    assert "not a JSON object" in text[1] and "unknown tool '__import__'" in text[2]
    assert "not identifiers" in text[3] and "unexpected_argument" in text[4]
    assert "unknown tool 'open'" in text[5]
    assert call_string(ToolCall(name="mv", arguments={"source": "a'b", "n": [1, None, True]})) == (
        'mv(source="a\'b", n=[1, None, True])'
    )
    env.close()


def test_miss_func_adds_the_held_out_functions_at_their_turn():
    from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC

    task = all_tasks()["multi_turn_miss_func_0"]
    e = entry(task.id)
    (turn, held_out), = e["missed_function"].items()  # fmt: skip
    names = {f["name"] for f in held_out}
    env = BFCLEnvironment()
    obs = env.reset(task)
    offered = {t["function"]["name"] for t in obs.tools}
    assert names and not names & offered
    for _ in range(1, int(turn)):
        result = env.step(Action(content="ok"))
        assert result.tools is None and result.messages  # nothing new before the hold-out turn
    result = env.step(Action(content="ok"))
    assert [m["content"] for m in result.messages] == [DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC]
    assert {t["function"]["name"] for t in result.tools} == offered | names
    assert env.step(Action(content="ok")).tools is None
    env.close()


def test_split_is_base_halved_with_seed_42():
    train, test = bfcl_tasks("train"), bfcl_tasks("test")
    assert len(train) == 100 and all(t.metadata["category"] == "base" for t in train)
    assert len(test) == 700 and sum(t.metadata["category"] == "base" for t in test) == 100
    assert not {t.id for t in train} & {t.id for t in test}
    assert [t.id for t in bfcl_tasks("train")] == [t.id for t in train]  # deterministic
    assert len(bfcl_tasks("miss_param")) == 200
    assert [t.id for t in BFCLEnvironment(categories="base,miss_param").list_tasks("test")][:1] == [test[0].id]


def test_sixty_four_threads_on_one_entry_keep_their_own_state():
    task = next(t for t in all_tasks().values() if t.metadata["category"] == "base"
                and any(len(c) > 1 for c in turns_of(t.id)))  # fmt: skip
    good, bad = turns_of(task.id), dropped(task.id)

    def run(i: int) -> float:
        env = BFCLEnvironment()
        try:
            return replay(env, task, good if i % 2 == 0 else bad)
        finally:
            env.close()

    with ThreadPoolExecutor(max_workers=64) as pool:
        scores = list(pool.map(run, range(64)))
    assert scores == [1.0 if i % 2 == 0 else 0.0 for i in range(64)]
    assert live_instances() == []


# -- through the agent: multi-turn episodes, max_turns per user turn, 64 concurrent rollouts --------------
class BFCLOracle(BaseChatModel):
    """Answers each user turn of the running task with its ground truth, then "Done."."""

    one_call_per_step: bool = False
    drop: Any = None

    @property
    def _llm_type(self) -> str:
        return "bfcl-oracle"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> BFCLOracle:
        return self

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        rollout = current_rollout()
        assert rollout is not None
        drop = self.drop is not None and self.drop.get(id(rollout))
        turns = dropped(rollout.task.id) if drop else turns_of(rollout.task.id)
        user = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
        calls = turns[len(user) - 1]
        made = sum(len(m.tool_calls) for m in messages[user[-1] :] if isinstance(m, AIMessage))
        todo = calls[made:]
        if not todo:
            return AIMessage("Done.")
        todo = todo[:1] if self.one_call_per_step else todo
        return AIMessage("", tool_calls=[{"name": c.name, "args": dict(c.arguments), "id": f"c{made + i}"}
                                         for i, c in enumerate(todo)])  # fmt: skip

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

    async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                         **kw: Any) -> ChatResult:  # fmt: skip
        await asyncio.sleep(random.random() / 1000)  # a model takes time: concurrent rollouts interleave
        return self._generate(messages)


def test_agent_runs_every_user_turn_and_scores_one():
    tasks = [all_tasks()[i] for i in ("multi_turn_base_0", "multi_turn_miss_func_0", "multi_turn_miss_param_0",
                                      "multi_turn_long_context_0")]  # fmt: skip
    trajs = asyncio.run(arun_rollouts(reference_agent(max_turns=20), tasks, n=1, policy=BFCLOracle(), max_turns=20))
    for traj in trajs:
        assert traj.reward == 1.0, (traj.task.id, traj.errors, traj.metadata.get("evaluation"))
        assert traj.metadata["user_turns"] == traj.task.metadata["user_turns"]
        assert traj.metadata["evaluation"]["valid"] is True


def test_max_turns_counts_per_user_turn():
    task = next(t for t in all_tasks().values() if t.metadata["category"] == "base"
                and len(turns_of(t.id)) >= 3 and max(map(len, turns_of(t.id))) >= 2)  # fmt: skip
    need = max(map(len, turns_of(task.id))) + 1  # one call per step, then the answer
    assert sum(map(len, turns_of(task.id))) + len(turns_of(task.id)) > need
    model = BFCLOracle(one_call_per_step=True, metadata={POLICY_MARKER: True})
    for agent_limit in (100, need):  # the recorder's limit alone, then the graph's own as well
        ok, short = asyncio.run(
            arun_rollouts(reference_agent(max_turns=agent_limit), [task], n=1, policy=model, max_turns=need)
        ) + asyncio.run(arun_rollouts(reference_agent(max_turns=agent_limit), [task], n=1, policy=model,
                                      max_turns=need - 1))  # fmt: skip
        assert ok.reward == 1.0 and ok.finish_reason != "max_turns"
        # the scripted policy returns no token ids, so the capture is incomplete and the run an error; what
        # ended it is kept in its error line
        assert short.reward == 0.0 and "the run ended by max_turns" in short.errors[-1], short.errors


def test_sixty_four_concurrent_rollouts_are_isolated():
    task = next(t for t in all_tasks().values() if t.metadata["category"] == "base"
                and any(len(c) > 1 for c in turns_of(t.id)))  # fmt: skip
    model = BFCLOracle(drop={})
    coin = random.Random(1)

    class Coin(dict):  # decides, per rollout, whether it drops a call
        def get(self, key: Any, default: Any = None) -> Any:
            if key not in self:
                self[key] = coin.random() < 0.5
            return self[key]

    model.drop = Coin()
    trajs = asyncio.run(arun_rollouts(reference_agent(max_turns=20), [task], n=64, policy=model, concurrency=64,
                                      max_turns=20))  # fmt: skip
    full = sum(map(len, turns_of(task.id)))
    calls = [sum(len(s.action.tool_calls) for s in t.steps) for t in trajs]
    assert set(calls) == {full, full - 1}  # both kinds ran, interleaved on the same entry
    assert [t.reward for t in trajs] == [1.0 if c == full else 0.0 for c in calls]
    alone = {full: seen_alone(task, turns_of(task.id)), full - 1: seen_alone(task, dropped(task.id))}
    for traj, n in zip(trajs, calls, strict=True):  # what each saw is what a rollout alone sees
        assert [o.content for s in traj.steps for o in s.observations] == alone[n]
    assert live_instances() == []


def test_served_over_http():
    from env_tools.client import RemoteEnvironment
    from env_tools.server import create_app
    from langgraph_evolver._serving import serve_in_background

    task = all_tasks()["multi_turn_miss_func_0"]
    with serve_in_background(create_app("bfcl")) as url:
        remote = RemoteEnvironment(url)
        assert [t.id for t in remote.list_tasks("train")] == [t.id for t in bfcl_tasks("train")]
        local = BFCLEnvironment()
        assert remote.reset(task) == local.reset(task)
        for calls in turns_of(task.id):
            if calls:
                assert remote.step(Action(tool_calls=tuple(calls))) == local.step(Action(tool_calls=tuple(calls)))
            assert remote.step(Action(content="ok")) == local.step(Action(content="ok"))
        assert remote.evaluate() == local.evaluate() == 1.0
        remote.close()
        local.close()


def test_evaluate_selects_categories_and_reports_each():
    from langgraph_evolver.errors import ConfigError
    from langgraph_evolver.types import Trajectory
    from trainers.evaluate import select_tasks, summarize

    tasks = select_tasks(bfcl_tasks("test"), "miss_param,base", 3)
    assert [t.metadata["category"] for t in tasks] == ["miss_param"] * 3 + ["base"] * 3
    with pytest.raises(ConfigError, match="not among"):
        select_tasks(bfcl_tasks("test"), "nope", None)
    overflow = "rollout crashed: BadRequestError: This model's maximum context length is 2048 tokens. However, ..."
    trajs = [Trajectory(id=f"{t.id}/{i}", task=t, reward=float(i == 0 and t.metadata["category"] == "base"),
                        errors=(overflow,) if i == 1 else ()) for t in tasks for i in range(2)]  # fmt: skip
    out = summarize(trajs, k=2)
    assert out["base"]["avg@2"] == 0.5 and out["base"]["best@2"] == 1.0 and out["miss_param"]["avg@2"] == 0.0
    assert out["base"]["context_overflow"] == out["context_overflow"] == 0.5


def test_a_create_agent_factory_runs_every_user_turn():
    from langchain.agents import create_agent

    def build(model: Any, tools: list) -> Any:  # a user's own agent: rebuilt when miss_func adds tools
        return create_agent(model, tools)

    tasks = [all_tasks()[i] for i in ("multi_turn_base_0", "multi_turn_miss_func_0")]
    trajs = asyncio.run(arun_rollouts(build, tasks, n=2, policy=BFCLOracle(), max_turns=20))
    assert [t.reward for t in trajs] == [1.0] * 4, [(t.errors, t.metadata.get("evaluation")) for t in trajs]
    assert [t.metadata["user_turns"] for t in trajs] == [t.task.metadata["user_turns"] for t in trajs]

"""Scoring a finished rollout (``langgraph_evolver.scoring``): failure kinds, shaped rewards, per-call advantages.

No torch here: the library scores rollouts on its own; hand-computed examples.
"""

from __future__ import annotations

import doctest
from dataclasses import replace

import pytest

import langgraph_evolver.scoring as scoring_module
from langgraph_evolver.advantages import group_advantages
from langgraph_evolver.scoring import (
    failed_rollouts,
    failure_kind,
    malformed_calls,
    outcome_reward,
    shaped_reward,
    transition_advantages,
    well_formed_counts,
)
from langgraph_evolver.types import Action, Step, Trajectory
from tests._trajectories import TASK
from tests._trajectories import make_trajectory as _traj
from tests._trajectories import make_transition as _tr


def test_docstring_examples():
    assert doctest.testmod(scoring_module).failed == 0


def test_shaped_reward_penalizes_malformed_calls_and_skips_failed_rollouts():
    t = _traj([_tr([1, 2], [3]), _tr([1, 2, 3, 4], [5])], reward=1.0, errors=1)
    assert shaped_reward(t, 0.1) == pytest.approx(0.9)
    assert shaped_reward(_traj([_tr([1], [2])], reward=1.0, finish="error"), 0.1) is None
    assert shaped_reward(_traj([], reward=1.0), 0.1) is None  # no LLM call recorded: nothing to train


# What arun_episode records (langgraph_evolver.episode) for a 400 when the prompt outgrew the window.
CONTEXT_400 = (
    "rollout crashed: BadRequestError: Error code: 400 - {'error': {'message': \"This model's maximum context "
    "length is 2048 tokens. However, your request has 2100 input tokens.\", 'code': 400}}"
)


@pytest.mark.parametrize(
    ("messages", "kind"),
    [
        ((CONTEXT_400,), "policy"),
        (
            ("rollout crashed: GraphRecursionError: Recursion limit of 100 reached without hitting a stop condition",),
            "policy",
        ),  # fmt: skip
        (("rollout crashed: APIConnectionError: Connection error.",), "infrastructure"),
        (("environment reset failed: EnvironmentFailure: service at http://env:8100 unreachable",), "infrastructure"),
        ((CONTEXT_400, "evaluation failed: EnvironmentFailure: instance expired"), "infrastructure"),
        (("rollout crashed: InternalServerError: Error code: 500",), "infrastructure"),
    ],
)
def test_policy_failures_are_scored_and_infrastructure_failures_left_out(messages, kind):
    t = _traj([_tr([1, 2], [3]), _tr([1, 2, 3, 4], [5])], reward=1.0, errors=1, finish="error", messages=messages)
    assert failure_kind(t) == kind
    if kind == "policy":  # 0 minus the penalty, whatever the environment said after the crash
        assert shaped_reward(t, 0.1) == pytest.approx(-0.1)
        assert shaped_reward(t, 0.1, policy_failure_reward=-0.5) == pytest.approx(-0.6)
    else:
        assert shaped_reward(t, 0.1) is None
    assert failure_kind(_traj([_tr([1], [2])])) is None


def test_a_context_length_failure_gets_a_negative_advantage_in_its_group():
    ok = _traj([_tr([1], [2])], reward=0.5)
    blown = _traj([_tr([1], [2])], reward=None, finish="error", messages=(CONTEXT_400,))
    down = _traj([_tr([1], [2])], reward=None, finish="error", messages=("rollout crashed: APIConnectionError: x",))
    rewards = [shaped_reward(t, 0.1) for t in (ok, blown, down, ok)]
    adv = group_advantages(rewards, ["a"] * 4).advantages
    assert adv[2] is None  # the outage: left out, no advantage
    assert adv[1] < 0 < adv[0] == adv[3]  # the policy's own failure: scored below the rollouts that finished


def test_a_context_length_400_from_the_endpoint_is_classified_as_the_policys_failure():
    """Through the real rollout path: a chat model that answers like an endpoint whose window is full."""
    import asyncio

    import httpx
    import openai
    from langchain_core.language_models import BaseChatModel

    from langgraph_evolver.agent_spec import as_agent
    from langgraph_evolver.episode import arun_episode

    request = httpx.Request("POST", "http://policy/v1/chat/completions")
    message = "This model's maximum context length is 2048 tokens. However, your request has 2100 input tokens."

    class FullWindow(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "full-window"

        def bind_tools(self, tools, **kwargs):
            return self

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            raise openai.BadRequestError(message, response=httpx.Response(400, request=request),
                                         body={"message": message})  # fmt: skip

    from langgraph.graph import END, START, MessagesState, StateGraph

    model = FullWindow()

    async def act(state: MessagesState) -> dict:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("act", act)
    graph.add_edge(START, "act")
    graph.add_edge("act", END)
    from langgraph_evolver.environment import load_environment

    task = load_environment("sandbox").list_tasks("train")[0]
    traj = asyncio.run(arun_episode(as_agent(graph.compile()), task))
    assert traj.finish_reason == "error" and failure_kind(traj) == "policy", traj.errors


def test_another_models_error_is_not_the_policys_malformed_call():
    """A helper model's 429 followed by a clean policy answer: no malformed-call penalty on the policy."""
    from dataclasses import replace

    t = _traj([_tr([1, 2], [3])], reward=1.0)
    helper = Step(index=0, action=Action(), error="RateLimitError: Error code: 429", policy=False, model="router")
    t = replace(t, steps=(helper, *(replace(s, index=1) for s in t.steps)))
    assert malformed_calls(t) == 0 and shaped_reward(t, 0.1) == pytest.approx(1.0)
    bad = Step(index=2, action=Action(content="<tool_call>{"), error="unparseable tool call")
    assert malformed_calls(replace(t, steps=(*t.steps, bad))) == 1


def test_outcome_reward_reports_a_policy_failure_as_zero_and_leaves_an_outage_out():
    ok = _traj([_tr([1], [2])], reward=0.5)
    blown = _traj([_tr([1], [2])], reward=1.0, finish="error", messages=(CONTEXT_400,))
    down = _traj([_tr([1], [2])], reward=1.0, finish="error", messages=("rollout crashed: APIConnectionError: x",))
    assert [outcome_reward(t) for t in (ok, blown, down)] == [0.5, 0.0, None]
    assert failed_rollouts([ok, blown, down]) == [down]


def test_well_formed_counts_agree_with_malformed_calls():
    t = _traj([_tr([1], [2]), _tr([1, 2], [3]), _tr([1, 2, 3], [4])], errors=2)
    calls = replace(t.steps[2], action=Action(tool_calls=({"name": "f", "args": {}, "id": "c1"},)))
    t = replace(t, steps=(*t.steps[:2], calls))
    ok, attempts = well_formed_counts([t])
    assert (ok, attempts) == (1, 3) and attempts - ok == malformed_calls(t) == 2


def _steps(*kinds: str, calls: tuple[bool, ...] | None = None) -> Trajectory:
    calls = calls or (True,) * len(kinds)
    steps = tuple(Step(index=i, action=Action(content="x"), kind=k, transition=_tr([i], [i + 1]) if c else None)
                  for i, (k, c) in enumerate(zip(kinds, calls, strict=True)))  # fmt: skip
    return Trajectory(id="r", task=TASK, steps=steps, reward=1.0)


def test_transition_advantages_one_value_per_rollout_or_none_without_signal():
    t = _steps("action", "action")
    assert transition_advantages(t, [0.7]) == 0.7
    assert transition_advantages(t, None) is None
    assert transition_advantages(t, [0.0, 0.0]) is None  # all zero: nothing to learn


def test_transition_advantages_per_call_and_context_steps_take_the_next_steps_value():
    t = _steps("action", "context", "context", "action", "context")
    assert transition_advantages(t, [1.0, 2.0, 3.0, 4.0, 5.0]) == [1.0, 4.0, 4.0, 4.0, 5.0]  # the last keeps its own
    # a step without an LLM call (a failed call) has no transition: its advantage is dropped
    t = _steps("action", "action", "action", calls=(True, False, True))
    assert transition_advantages(t, [1.0, 2.0, 3.0]) == [1.0, 3.0]
    with pytest.raises(ValueError, match="2 step advantages for the 3 steps of r"):
        transition_advantages(t, [1.0, 2.0])


def test_a_scoring_crash_after_the_turn_limit_is_left_out_by_evaluation_and_training_alike():
    """Issue 38 (5c): the checker raised on a turn-limited rollout. The evaluation used to score it 0 and the
    trainer to leave it out; both now leave it out as a failure outside the policy (counted in ``failed``)."""
    from langchain_core.messages import AIMessage

    from env_tools.sandbox import SandboxEnvironment, seed_tasks
    from graphs.agent import create_agent_graph
    from langgraph_evolver.batch import run_rollouts
    from langgraph_evolver.testing import ScriptedChatModel
    from trainers.evaluate import summarize, task_means

    class CrashingChecker(SandboxEnvironment):
        def evaluate(self) -> float:
            raise KeyError("booking B4")  # a checker that assumed the agent finished

    loop = [AIMessage("", tool_calls=[{"name": "get_balance", "args": {}, "id": "c"}])]
    graph = create_agent_graph(ScriptedChatModel(loop), max_turns=2)
    (crashed,) = run_rollouts(graph, seed_tasks("train")[:1], env_factory=lambda task: CrashingChecker())
    assert crashed.finish_reason == "max_turns" and crashed.reward is None, crashed
    assert any(e.startswith("evaluation failed: KeyError") for e in crashed.errors), crashed.errors
    assert failure_kind(crashed) == "infrastructure" and failed_rollouts([crashed]) == [crashed]
    assert task_means([crashed]) == {}  # not a 0 in the evaluation ...
    summary = summarize([crashed], 1)
    assert summary["failed"] == 1 and summary["all"]["samples"] == 0, summary
    # ... and, with the same record, no advantage in training (a rollout with LLM calls, as the trainer sees it)
    trained = _traj([_tr([1], [2])], reward=None, finish="max_turns", messages=crashed.errors)
    assert shaped_reward(trained, 0.1) is None and outcome_reward(trained) is None
    assert failure_kind(replace(trained, reward=0.0)) is None  # scored after the turn limit: the policy's 0

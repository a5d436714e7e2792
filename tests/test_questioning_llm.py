"""Self-questioning with models: the LLM explorer graph, the LLM synthesizer, the reference-aware judge.

Graph logic and parsing use scripted models; the explorer and the judge also run against the real
tiny policy behind the real CPU policy server (``PolicyChatModel`` / ``ChatOpenAI`` over HTTP).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from env_tools.sandbox import SandboxEnvironment, seed_tasks
from langgraph_evolver.agent_spec import AgentSpec
from langgraph_evolver.episode import arun_episode
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.questioning import (
    LLMSynthesizer,
    ReferenceAwareJudge,
    aexplore_with_model,
    exploration_task,
    explore,
    parse_score,
    parse_tasks,
    synthesize_tasks,
)
from langgraph_evolver.types import Task, ToolCall, Trajectory
from tests.test_attribution import ScriptedJudgeModel, answer_step, call_step
from tests.test_experience_pool import HashEmbeddings


def sandbox_factory(task: Task) -> SandboxEnvironment:
    return SandboxEnvironment()


class ToolCaller(BaseChatModel):
    """Calls the tools named in ``plan`` in turn (``None``: a text reply), recording prompts and kwargs."""

    plan: list[Any]
    log: list[Any] = []

    def __init__(self, plan: list[Any], **kwargs: Any) -> None:
        super().__init__(plan=list(plan), log=[], **kwargs)

    @property
    def _llm_type(self) -> str:
        return "tool-caller"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCaller:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        i = len(self.log)
        self.log.append((list(messages), kw))
        item = self.plan[i % len(self.plan)]
        if item is None:
            return ChatResult(generations=[ChatGeneration(message=AIMessage("I think I am done."))])
        name, args = item
        ai = AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call{i}", "type": "tool_call"}])
        return ChatResult(generations=[ChatGeneration(message=ai)])


# -- the LLM explorer ---------------------------------------------------------------------------------


async def test_explorer_graph_phases_prompts_temperatures_and_budget():
    world = seed_tasks("train")[0]
    plan = [("list_events", {}), ("get_balance", {}), None, ("search_flights", {"origin": "Rome"})]
    model = ToolCaller(plan)
    task = exploration_task(world, seed=3)
    traj = await aexplore_with_model(sandbox_factory, task, model, n_breadth=3, n_depth=4, breadth_temperature=1.2,
                                     depth_temperature=0.5)  # fmt: skip
    # 7 turns in all (a text reply counts against the budget), then the graph stops
    assert len(model.log) == 7 and len(traj.steps) == 7 and not traj.errors
    assert [s.node for s in traj.steps] == ["explore_breadth"] * 3 + ["explore_depth"] * 4
    assert [kw.get("temperature") for _, kw in model.log] == [1.2] * 3 + [0.5] * 4
    first = model.log[0][0][1].content
    assert "Breadth phase" in first and "list_events" in first
    second = model.log[1][0][1].content
    assert "list_events" not in second.split("Not tried yet:")[1]  # a used tool is no longer offered
    depth = model.log[3][0][1].content
    assert "Depth phase" in depth and "- get_balance:" in depth  # recent results shown
    # after the text reply the next prompt nudges for a tool call
    assert any(isinstance(m, HumanMessage) and "one tool call" in m.content for m in model.log[3][0])
    # observations are the environment's answers, matched to the calls
    balance = next(s for s in traj.steps if s.action.tool_calls and s.action.tool_calls[0].name == "get_balance")
    assert balance.observations and not balance.observations[0].is_error
    assert traj.metadata["explorer"].startswith("llm:") and traj.reward is None


async def test_explorer_prompt_keeps_only_recent_exchanges():
    model = ToolCaller([("list_events", {})])
    task = exploration_task(seed_tasks("train")[0], seed=0)
    await aexplore_with_model(sandbox_factory, task, model, n_breadth=1, n_depth=9, recent=2)
    last = model.log[-1][0]
    assert sum(isinstance(m, AIMessage) for m in last) == 2 and sum(isinstance(m, ToolMessage) for m in last) == 2


def test_explorer_rejects_an_empty_budget():
    from langgraph_evolver.questioning import create_explorer_graph

    with pytest.raises(ConfigError, match="at least one turn"):
        create_explorer_graph(ToolCaller([None]), [], n_breadth=0, n_depth=0)


@pytest.mark.slow
async def test_the_tiny_policy_explores_over_http_with_token_ids(tiny_policy_url):
    from langgraph_evolver.chat_model import PolicyChatModel

    policy = PolicyChatModel(base_url=tiny_policy_url, model="tiny-policy", max_tokens=96)
    task = exploration_task(seed_tasks("train")[1], seed=0)
    traj = await aexplore_with_model(sandbox_factory, task, policy, n_breadth=3, n_depth=5)
    assert len(traj.steps) == 8 and not traj.errors, traj.errors
    assert all(s.policy and s.transition is not None and s.transition.completion_ids for s in traj.steps)
    assert [s.node for s in traj.steps][:3] == ["explore_breadth"] * 3
    calls = [c for s in traj.steps for c in s.action.tool_calls]
    assert calls, "the tiny policy made no tool call at all"
    assert all(s.observations for s in traj.steps if s.action.tool_calls)  # every call got the env's answer


# -- the LLM synthesizer ---------------------------------------------------------------------------


def _sandbox_exploration() -> Trajectory:
    world = seed_tasks("train")[0]
    task = exploration_task(world, seed=5)
    return explore(SandboxEnvironment(), task, n_breadth=3, n_depth=17, seed=5)


def _synthesis_answer(traj: Trajectory) -> str:
    """A model's answer: two tasks from calls the exploration really made, one with a made-up id."""
    worked = [s for s in traj.steps if s.observations and not s.observations[0].is_error]
    ok = next(c for s in worked for c in s.action.tool_calls if c.name.startswith(("list_", "get_")))
    bad = {"name": "cancel_event", "arguments": {"event_id": "evt-999"}}
    tasks = [
        {"query": "What do I have here? Check it for me.", "confidence": 0.9, "difficulty": 1,
         "reference": [{"name": ok.name, "arguments": ok.arguments}]},
        {"query": "Cancel my event evt-999.", "reference": [bad], "confidence": 0.4, "difficulty": 1},
        {"query": "", "reference": []},
    ]  # fmt: skip
    return "Here are the tasks:\n```json\n" + json.dumps(tasks) + "\n```"


def test_parse_tasks_variants():
    one = {"query": "q", "reference": [{"name": "t", "arguments": {"a": 1}}]}
    assert parse_tasks(json.dumps([one]))[0]["reference"] == [ToolCall(name="t", arguments={"a": 1})]
    assert parse_tasks(json.dumps({"tasks": [one]}))[0]["difficulty"] == 1
    assert parse_tasks("<think>[nope]</think>" + json.dumps(one))[0]["query"] == "q"
    assert parse_tasks(json.dumps([{**one, "reference": [{"name": "t", "arguments": '{"a": 2}'}]}]))[0]["reference"][
        0
    ].arguments == {"a": 2}
    assert parse_tasks("no json here") is None
    assert parse_tasks(json.dumps([{"query": "q", "reference": [{"arguments": {}}]}])) is None  # no tool name
    assert parse_tasks(json.dumps([{"query": "q", "reference": []}])) is None


async def test_llm_synthesizer_tasks_get_new_ids_world_and_provenance():
    traj = _sandbox_exploration()
    model = ScriptedJudgeModel([_synthesis_answer(traj)])
    writer = LLMSynthesizer(model, n_tasks=3)
    tasks = await writer.asynthesize(traj)
    assert len(tasks) == 2 and len({t.id for t in tasks}) == 2
    assert all(t.id.startswith("synthetic-") and t.source == "synthetic" for t in tasks)
    assert all(t.env_params == traj.task.env_params and t.metadata["exploration_id"] == traj.id for t in tasks)
    assert tasks[0].metadata["synthesizer"] == "llm:scripted-judge" and tasks[0].metadata["confidence"] == 0.9
    prompt = model.log.calls[0][0].content
    assert "Write 3 new" in prompt and "->" in prompt  # the successful calls with their results
    assert writer.stats.tasks == 2 and writer.stats.input_tokens == 100


async def test_llm_synthesizer_retries_then_counts_a_fallback():
    writer = LLMSynthesizer(ScriptedJudgeModel(["sorry, no idea"]), max_retries=1, backoff_s=0)
    assert await writer.asynthesize(_sandbox_exploration()) == []
    assert writer.stats.fallbacks == 1 and writer.stats.model_calls == 2
    assert "no readable tasks" in writer.stats.errors[0]


def test_pipeline_with_an_llm_synthesizer_drops_the_infeasible_reference():
    traj = _sandbox_exploration()
    model = ScriptedJudgeModel([_synthesis_answer(traj)])
    tasks, report = synthesize_tasks("sandbox", 5, env_factory=sandbox_factory, synthesizer=model, max_explorations=1,
                                     embeddings=HashEmbeddings(), progress=False, seed=5)  # fmt: skip
    assert report.synthesizer == "llm:scripted-judge" and report.synthesizer_stats["tasks"] == 2
    assert report.filters.removed["infeasible"] >= 1  # evt-999 does not exist
    assert all("evt-999" not in json.dumps([c.to_dict() for c in t.reference_solution]) for t in tasks)


# -- the reference-aware judge -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("ACHIEVED: yes\nSCORE: 92\nREASON: done cleanly", (True, 92, "done cleanly")),
        ("**Achieved**: No\n**Score**: 12/100\nReason: wrong contact", (False, 12, "wrong contact")),
        ('{"achieved": true, "score": 70, "reason": "ok"}', (True, 70, "ok")),
        ("<think>SCORE: 5</think>SCORE: 80", (True, 80, "")),
        ("SCORE: 30", (False, 30, "")),
    ],
)
def test_parse_score_variants(answer, expected):
    assert parse_score(answer) == expected


def test_parse_score_rejects_unreadable_answers():
    assert parse_score("it went fine") is None and parse_score("SCORE: 250") is None


def _run(reward: float | None = None) -> Trajectory:
    task = Task(id="pay-lea", query="Pay Lea 40 dollars.", reference_solution=(
        ToolCall(name="search_contacts", arguments={"query": "Lea"}),
        ToolCall(name="pay", arguments={"contact_id": "c11", "amount": 40})))  # fmt: skip
    steps = (call_step(0, "search_contacts", {"query": "Lea"}, '[{"id": "c11"}]'), answer_step(1, "Paid."))
    return Trajectory(id="r1", task=task, steps=steps, reward=reward)


@pytest.mark.parametrize(
    ("answer", "reward", "clamped"),
    [
        ("ACHIEVED: yes\nSCORE: 95", 0.95, False),
        ("ACHIEVED: yes\nSCORE: 30", 0.60, True),  # achieved → at least 60
        ("ACHIEVED: no\nSCORE: 85", 0.40, True),  # not achieved → at most 40
        ("ACHIEVED: no\nSCORE: 0\nREASON: only repeated the same call", 0.0, False),
    ],
)
async def test_judge_bands(answer, reward, clamped):
    judge = ReferenceAwareJudge(ScriptedJudgeModel([answer]))
    run = _run()
    verdict = await judge.ascore(run.task, run)
    assert verdict.reward == pytest.approx(reward) and verdict.clamped is clamped
    assert judge.stats.out_of_band == int(clamped)


async def test_judge_prompt_shows_the_reference_the_steps_and_the_answer():
    model = ScriptedJudgeModel(["ACHIEVED: no\nSCORE: 20"])
    run = _run()
    await ReferenceAwareJudge(model).ascore(run.task, run)
    prompt = model.log.calls[0][0].content
    assert 'pay(contact_id="c11", amount=40)' in prompt and "search_contacts" in prompt and "Paid." in prompt


async def test_judge_fallback_is_counted_and_cache_saves_calls(tmp_path):
    dead = ReferenceAwareJudge(ScriptedJudgeModel([RuntimeError("endpoint down")]), max_retries=1, backoff_s=0,
                               fallback_reward=0.1)  # fmt: skip
    run = _run()
    verdict = await dead.ascore(run.task, run)
    assert verdict.fallback and verdict.reward == 0.1 and "endpoint down" in verdict.error
    assert dead.stats.fallbacks == 1 and dead.stats.model_calls == 2

    model = ScriptedJudgeModel(["ACHIEVED: yes\nSCORE: 88"])
    judge = ReferenceAwareJudge(model, cache=tmp_path / "judge.jsonl")
    assert (await judge.ascore(run.task, run)).reward == 0.88
    unused = ScriptedJudgeModel([RuntimeError("must not be called")])
    again = ReferenceAwareJudge(unused, cache=tmp_path / "judge.jsonl")
    cached = await again.ascore(run.task, run)
    assert cached.cached and cached.reward == 0.88 and again.stats.model_calls == 0


def test_judge_rejects_bad_options():
    with pytest.raises(ConfigError, match="chat model"):
        ReferenceAwareJudge(object())
    with pytest.raises(ConfigError, match="fallback_reward"):
        ReferenceAwareJudge(ScriptedJudgeModel(["x"]), fallback_reward=2.0)


async def test_judge_is_the_reward_of_a_dropin_rollout():
    """An async ``reward`` (the judge) scores a real rollout on the sandbox instead of ``evaluate()``."""
    task = seed_tasks("train")[0]
    ref = task.reference_solution[0]
    model = ToolCaller([(ref.name, ref.arguments), None])
    from langgraph_evolver.questioning import create_explorer_graph  # any graph over the env tools works

    judge = ReferenceAwareJudge(ScriptedJudgeModel(["ACHIEVED: yes\nSCORE: 75"]))
    agent = AgentSpec(build=lambda m, tools: create_explorer_graph(m, tools, n_breadth=1, n_depth=1),
                      to_input=lambda t: {"messages": []}, reward=judge.areward)  # fmt: skip
    traj = await arun_episode(agent, task, policy=model, env_factory=sandbox_factory)
    assert traj.reward == 0.75 and not traj.errors and judge.stats.verdicts == 1


@pytest.mark.slow
async def test_judge_over_http_never_raises(tiny_policy_url):
    """The tiny policy is no judge: whatever it answers is either read into a band or a counted fallback."""
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(base_url=tiny_policy_url, api_key="EMPTY", model="tiny-policy", max_tokens=32, max_retries=0)
    judge = ReferenceAwareJudge(model, max_retries=1, backoff_s=0)
    run = _run()
    verdict = await judge.ascore(run.task, run)
    assert judge.stats.verdicts == 1 and judge.stats.model_calls >= 1
    if verdict.fallback:
        assert verdict.reward == 0.0 and judge.stats.fallbacks == 1
    else:
        assert (0.6 <= verdict.reward <= 1.0) if verdict.achieved else (0.0 <= verdict.reward <= 0.4)


# -- LLM refinement of a derived profile ----------------------------------------------------------------


async def test_an_llm_refines_what_the_profile_rules_got_wrong():
    from langgraph_evolver.questioning import arefine_profile, derive_profile

    def tool(name: str, **props: str) -> dict:
        return {"type": "function", "function": {"name": name, "description": "",
                "parameters": {"properties": {k: {"type": v} for k, v in props.items()}}}}  # fmt: skip

    derived = derive_profile(
        [tool("archive", note_id="integer"), tool("list_notes"), tool("lookup_weather", city="string")]
    )
    assert derived["operations"]["archive"]["kind"] == "unknown"
    answer = '{"archive": {"entity": "notes", "kind": "write"}, "lookup_weather": {"entity": "forecast"}, "nope": {}}'
    model = ScriptedJudgeModel(["not json", answer])
    refined = await arefine_profile(derived, model, max_retries=1)
    assert refined["refined"] == ["archive", "lookup_weather"]
    archive = refined["operations"]["archive"]
    assert (archive["entity"], archive["kind"], archive["writes"]) == ("note", "write", True)
    assert refined["operations"]["lookup_weather"]["entity"] == "forecast"
    assert "archive" in refined["entities"]["note"]["operations"] and "forecast" in refined["entities"]
    assert "lookup_weather" not in refined["entities"].get("weather", {}).get("operations", [])
    failed = await arefine_profile(derived, ScriptedJudgeModel(["no"]), max_retries=0)
    assert failed["operations"] == derived["operations"] and "no JSON object" in failed["refine_error"]


def test_cli_chat_model_specs_fail_with_what_to_pass():
    from langchain_openai import ChatOpenAI

    from langgraph_evolver.questioning.__main__ import chat_model

    model = chat_model("openai:Qwen/Qwen2.5-7B-Instruct", base_url="http://127.0.0.1:9/v1")
    assert isinstance(model, ChatOpenAI) and model.model_name == "Qwen/Qwen2.5-7B-Instruct"
    assert str(model.openai_api_base) == "http://127.0.0.1:9/v1"
    with pytest.raises(ConfigError, match=r"Cannot build the chat model 'no-such-provider:m'.*'policy:<name>'"):
        chat_model("no-such-provider:m")
    with pytest.raises(ConfigError, match="The chat model is an empty string. Use 'schema'"):
        chat_model("  ")
    with pytest.raises(ConfigError, match="needs --base-url"):
        chat_model("policy:tiny")

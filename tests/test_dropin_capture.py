"""Capture from any graph: several LLM nodes, subgraphs, structured output, parallel tool calls,
streaming, a model that is not the policy, LLM calls inside tools, and incomplete captures.

Token ids are checked against the real CPU policy server on the tiny policy; scripted models are
used only where the graph logic is what is tested."""

from __future__ import annotations

import asyncio
import gc
import operator
import warnings
from typing import Annotated, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from pydantic import BaseModel

from langgraph_evolver import PolicyChatModel, TrajectoryRecorder, run_rollouts
from langgraph_evolver.capture import TurnLimitReached
from langgraph_evolver.testing import ScriptedChatModel
from langgraph_evolver.types import Task

TASK = Task(id="t-1", env="sandbox", query="Find the phone number of Pia.")


@tool
def search_contacts(query: str) -> str:
    """Search contacts by name."""
    return f"[{{'id': 'c1', 'name': '{query}', 'phone': '555-1'}}]"


@tool
def get_balance() -> str:
    """The account balance."""
    return "{'balance': 230}"


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    plan: str
    notes: Annotated[list[str], operator.add]


def planner_executor_graph(planner, executor, tools=(search_contacts,)):
    """planner node → subgraph(executor node ⇄ tools) → END."""

    async def plan(state: State) -> dict:
        ai = await planner.ainvoke([HumanMessage("Plan briefly: " + state["messages"][0].content)])
        return {"plan": ai.content}

    async def execute(state: State) -> dict:
        return {"messages": [await executor.bind_tools(list(tools)).ainvoke(state["messages"])]}

    def route(state: State) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    sub = StateGraph(State)
    sub.add_node("executor", execute)
    sub.add_node("tools", ToolNode(list(tools)))
    sub.add_edge(START, "executor")
    sub.add_conditional_edges("executor", route, ["tools", END])
    sub.add_edge("tools", "executor")
    outer = StateGraph(State)
    outer.add_node("planner", plan)
    outer.add_node("work", sub.compile())
    outer.add_edge(START, "planner")
    outer.add_edge("planner", "work")
    outer.add_edge("work", END)
    return outer.compile()


@pytest.fixture()
def policy(tiny_policy_url):
    return PolicyChatModel(base_url=tiny_policy_url, model="tiny-policy", max_tokens=48, seed=0)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from tests.conftest import TINY_POLICY

    return AutoTokenizer.from_pretrained(TINY_POLICY)


def test_two_llm_nodes_and_a_subgraph_give_transitions_in_order(policy, tokenizer):
    graph = planner_executor_graph(policy, policy)
    recorder = TrajectoryRecorder(max_turns=4)
    try:
        state = asyncio.run(graph.ainvoke({"messages": [("user", TASK.query)]}, {"callbacks": [recorder]}))
    except Exception:  # the tiny policy may loop until max_turns: what was captured is still checked
        state = None
    traj = recorder.trajectory(TASK, reward=0.0, final_state=state)
    assert [s.node for s in traj.steps][:2] == ["planner", "executor"]
    assert traj.steps[0].namespace == "" and traj.steps[1].namespace == "work"
    assert all(s.policy and s.transition is not None for s in traj.steps)
    assert [s.index for s in traj.steps] == list(range(len(traj.steps)))
    plan_prompt = tokenizer.decode(traj.steps[0].transition.prompt_ids)
    exec_prompt = tokenizer.decode(traj.steps[1].transition.prompt_ids)
    assert "Plan briefly: " + TASK.query in plan_prompt  # the ids are exactly what the server was sent
    assert TASK.query in exec_prompt and "search_contacts" in exec_prompt and "Plan briefly" not in exec_prompt
    for step in traj.steps:
        t = step.transition
        assert len(t.completion_ids) == len(t.logprobs) > 0 and all(lp <= 0 for lp in t.logprobs)
    assert traj.metadata["capture"]["incomplete"] is None


@pytest.mark.parametrize("mode", ["ainvoke", "astream-messages", "astream-updates", "astream-values"])
def test_streaming_in_any_mode_keeps_token_ids(policy, mode):
    graph = planner_executor_graph(policy, policy)
    recorder = TrajectoryRecorder(max_turns=2)
    config = {"callbacks": [recorder]}
    inputs = {"messages": [("user", TASK.query)]}

    async def drive(stream_mode):
        return [chunk async for chunk in graph.astream(inputs, config, stream_mode=stream_mode)]

    try:
        if mode == "ainvoke":
            asyncio.run(graph.ainvoke(inputs, config))
        else:
            chunks = asyncio.run(drive(mode.split("-")[1]))
            assert chunks
    except Exception:
        pass  # the turn limit may stop the run; the capture is what is tested
    traj = recorder.trajectory(TASK)
    assert len(traj.steps) >= 2
    assert all(s.transition is not None and s.transition.completion_ids for s in traj.steps)


def test_sync_stream_of_a_sync_graph_keeps_token_ids(policy):
    def answer(state: State) -> dict:
        return {"messages": [policy.invoke(state["messages"])]}

    g = StateGraph(State)
    g.add_node("answer", answer)
    g.add_edge(START, "answer")
    g.add_edge("answer", END)
    recorder = TrajectoryRecorder()
    chunks = list(g.compile().stream({"messages": [("user", TASK.query)]}, {"callbacks": [recorder]},
                                     stream_mode=["messages", "updates"]))  # fmt: skip
    assert chunks
    (step,) = recorder.trajectory(TASK).steps
    assert step.node == "answer" and step.transition is not None and step.transition.completion_ids


def test_structured_output_node_is_captured_with_token_ids(policy):
    class Contact(BaseModel):
        name: str
        phone: str

    async def extract(state: State) -> dict:
        out = await policy.with_structured_output(Contact, method="function_calling", include_raw=True).ainvoke(
            state["messages"]
        )
        return {"notes": [str(out["parsed"] or out["parsing_error"])]}

    g = StateGraph(State)
    g.add_node("extract", extract)
    g.add_edge(START, "extract")
    g.add_edge("extract", END)
    recorder = TrajectoryRecorder()
    asyncio.run(g.compile().ainvoke({"messages": [("user", "Pia's phone is 555-1.")]}, {"callbacks": [recorder]}))
    (step,) = recorder.trajectory(TASK).steps
    assert step.node == "extract" and step.transition is not None
    assert len(step.transition.completion_ids) == len(step.transition.logprobs) > 0


def test_a_model_that_is_not_the_policy_is_recorded_never_trained(policy):
    hosted = ScriptedChatModel([AIMessage("1. search 2. answer")])  # e.g. a hosted planner
    graph = planner_executor_graph(hosted, policy)
    recorder = TrajectoryRecorder(max_turns=1)
    try:
        asyncio.run(graph.ainvoke({"messages": [("user", TASK.query)]}, {"callbacks": [recorder]}))
    except Exception:
        pass
    traj = recorder.trajectory(TASK)
    planner, executor = traj.steps[0], traj.steps[1]
    assert planner.node == "planner" and not planner.policy and planner.transition is None
    assert planner.action.content == "1. search 2. answer"
    assert executor.policy and executor.transition is not None
    assert traj.transitions == [executor.transition]
    assert traj.metadata["capture"]["other_calls"] == 1


@pytest.mark.parametrize("guarded", [True, False], ids=["with-guard", "recorder-alone"])
def test_the_turn_limit_in_a_streamed_async_graph_lets_every_other_handler_run(guarded):
    """LangGraph's stream handler sees the call the turn limit stops: no handler's event is dropped un-awaited,
    whether the turn limit guard raises it (the recorder stays inline: no thread-pool hop per event) or the
    recorder alone does (then it is gathered with the other handlers)."""
    calls = [{"name": "search_contacts", "args": {"query": "Pia"}, "id": "a"}]
    policy = ScriptedChatModel([AIMessage("", tool_calls=calls), AIMessage("done")], metadata={"evolver_policy": True})
    graph = planner_executor_graph(ScriptedChatModel([AIMessage("plan")]), policy)
    recorder = TrajectoryRecorder(max_turns=1)
    handlers = [recorder, recorder.turn_limit_guard()] if guarded else [recorder]  # arun_episode: both
    assert recorder.run_inline is guarded

    async def drive() -> list:
        config = {"callbacks": handlers}
        return [c async for c in graph.astream({"messages": [("user", TASK.query)]}, config, stream_mode="messages")]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TurnLimitReached):
            asyncio.run(drive())
        gc.collect()
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []
    assert [(s.node, s.policy) for s in recorder.trajectory(TASK).steps] == [("planner", False), ("executor", True)]
    assert recorder.turn_limit_hit


def test_llm_calls_inside_tools_are_recorded_and_trained_only_when_asked(policy):
    @tool
    async def summarize(text: str) -> str:
        """Summarize a text with an LLM."""
        return (await policy.ainvoke(f"Summarize: {text}")).content

    script = ScriptedChatModel(
        [AIMessage("", tool_calls=[{"name": "summarize", "args": {"text": "abc"}, "id": "s1"}]), AIMessage("ok")],
        metadata={"evolver_policy": True},
    )
    g = planner_executor_graph(ScriptedChatModel([AIMessage("plan")]), script, tools=(summarize,))
    for train in (False, True):
        recorder = TrajectoryRecorder(train_tool_llm_calls=train)
        asyncio.run(g.ainvoke({"messages": [("user", "go")]}, {"callbacks": [recorder]}))
        steps = recorder.trajectory(TASK).steps
        inner = [s for s in steps if s.model == "tiny-policy"]
        assert len(inner) == 1 and inner[0].node == "tools"
        assert (inner[0].transition is not None) is train


def test_parallel_tool_calls_get_their_own_observations():
    calls = [{"name": "search_contacts", "args": {"query": "Pia"}, "id": "a"},
             {"name": "get_balance", "args": {}, "id": "b"}]  # fmt: skip
    model = ScriptedChatModel([AIMessage("", tool_calls=calls), AIMessage("done")])
    graph = planner_executor_graph(ScriptedChatModel([AIMessage("plan")]), model, tools=(search_contacts, get_balance))
    recorder = TrajectoryRecorder()
    state = asyncio.run(graph.ainvoke({"messages": [("user", "go")]}, {"callbacks": [recorder]}))
    traj = recorder.trajectory(TASK, final_state=state)
    step = traj.steps[1]
    assert [c.name for c in step.action.tool_calls] == ["search_contacts", "get_balance"]
    assert [(o.call_id, o.name) for o in step.observations] == [("a", "search_contacts"), ("b", "get_balance")]
    assert "Pia" in step.observations[0].content and "230" in step.observations[1].content
    assert recorder.final_text(state) == "done"


def test_a_policy_call_without_token_ids_makes_the_capture_incomplete():
    fake = ScriptedChatModel([AIMessage("hi")], metadata={"evolver_policy": True})
    recorder = TrajectoryRecorder()
    asyncio.run(planner_executor_graph(fake, fake).ainvoke({"messages": [("user", "x")]}, {"callbacks": [recorder]}))
    traj = recorder.trajectory(TASK, reward=1.0)
    assert traj.finish_reason == "error" and not traj.transitions
    assert "without token ids" in traj.errors[0] and "node planner" in traj.errors[0]


def test_create_agent_without_middleware_runs_and_says_why_it_cannot_train():
    """A newcomer's graph: hard-coded model, tools bound at build time. It runs and is scored; asked to
    train, the rollout says what to change instead of failing silently."""
    from langchain.agents import create_agent

    from env_tools.sandbox import seed_tasks

    task = seed_tasks("train")[1]  # get_balance
    hosted = ScriptedChatModel([AIMessage("", tool_calls=[{"name": "get_balance", "args": {}, "id": "g"}]),
                                AIMessage("230")])  # fmt: skip
    agent = create_agent(hosted, [get_balance])
    (traj,) = run_rollouts(agent, [task])
    assert traj.errors == () and traj.reward is not None and len(traj.steps) == 2
    assert [s.node for s in traj.steps] == ["model", "model"]
    (traj,) = run_rollouts(agent, [task], require_policy=True)
    assert traj.finish_reason == "error"
    assert (
        "EvolverMiddleware" in traj.errors[0] and "made no call through the policy (its 2 LLM calls" in traj.errors[0]
    )


def test_turn_limit_stops_any_graph():
    from langchain.agents import create_agent

    from env_tools.sandbox import seed_tasks
    from langgraph_evolver import EvolverMiddleware

    loop = ScriptedChatModel([AIMessage("", tool_calls=[{"name": "get_balance", "args": {}, "id": "g"}])],
                             metadata={"evolver_policy": True})  # fmt: skip
    from langchain_openai import ChatOpenAI

    hosted = ChatOpenAI(model="gpt-4.1-mini", api_key="sk-unused", base_url="http://127.0.0.1:9/v1")  # never called
    agent = create_agent(hosted, [get_balance], middleware=[EvolverMiddleware()])
    (traj,) = run_rollouts(agent, seed_tasks("train")[1:2], policy=loop, max_turns=3)
    assert len(traj.steps) == 3 and "the run ended by max_turns" in traj.errors[-1]
    # a scripted "policy" returns no token ids: the capture is incomplete, so the run is an error, not trained
    assert traj.finish_reason == "error" and "without token ids" in traj.errors[-1]
    # the middleware sent the tool calls to the rollout's sandbox, not to the agent's own tool
    assert all('"balance"' in s.observations[0].content for s in traj.steps)


@pytest.mark.parametrize("mode", ["invoke", "ainvoke", "stream"])
def test_the_middleware_leaves_a_production_agent_alone(mode):
    """Outside a rollout: the agent's own model and tools, sync or async, nothing recorded or routed."""
    from langchain.agents import create_agent

    from langgraph_evolver import EvolverMiddleware

    model = ScriptedChatModel([AIMessage("", tool_calls=[{"name": "get_balance", "args": {}, "id": "g"}]),
                               AIMessage("230")])  # fmt: skip
    agent = create_agent(model, [get_balance], middleware=[EvolverMiddleware()])
    inputs = {"messages": [("user", "balance?")]}
    if mode == "invoke":
        out = agent.invoke(inputs)
    elif mode == "ainvoke":
        out = asyncio.run(agent.ainvoke(inputs))
    else:
        out = [c for c in agent.stream(inputs, stream_mode="values")][-1]
    assert [m.type for m in out["messages"]] == ["human", "ai", "tool", "ai"]
    assert out["messages"][2].content == "{'balance': 230}" and out["messages"][-1].content == "230"


def test_an_endpoint_outage_inside_a_run_that_hits_the_turn_limit_is_never_trained(tiny_policy_url):
    """Calls OK -> the endpoint answers 503 (the graph retries) -> OK, until max_turns ends the run: the failed
    policy call makes the capture incomplete, so the rollout is an infrastructure failure, left out of its group
    (it was scored as the policy's max_turns episode and trained with a negative advantage)."""
    import httpx
    import openai
    from langgraph.graph import MessagesState

    from langgraph_evolver.capture import TurnLimitReached
    from langgraph_evolver.scoring import failure_kind, shaped_reward

    fail_on = {2}
    seen = []

    class Flaky(PolicyChatModel):
        async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
            seen.append(1)
            if len(seen) in fail_on:
                request = httpx.Request("POST", "http://policy/v1/chat/completions")
                raise openai.InternalServerError("Service Unavailable", response=httpx.Response(503, request=request),
                                                 body=None)  # fmt: skip
            return await super()._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)

    model = Flaky(base_url=tiny_policy_url, model="tiny-policy", max_tokens=8, seed=0, max_retries=0)
    retrying = model.with_retry(retry_if_exception_type=(openai.InternalServerError,), stop_after_attempt=2)

    async def act(state: MessagesState) -> dict:
        return {"messages": [await retrying.ainvoke(state["messages"]), HumanMessage("go on")]}

    graph = StateGraph(MessagesState)
    graph.add_node("act", act)
    graph.add_edge(START, "act")
    graph.add_edge("act", "act")
    recorder = TrajectoryRecorder(max_turns=3)
    with pytest.raises(TurnLimitReached):
        asyncio.run(graph.compile().ainvoke({"messages": [("user", TASK.query)]}, {"callbacks": [recorder]}))
    traj = recorder.trajectory(TASK, reward=0.0, finish_reason="max_turns")
    assert len(seen) == 3 and len(traj.transitions) == 2  # two calls served, one 503 between them (a turn too)
    assert traj.finish_reason == "error" and failure_kind(traj) == "infrastructure", traj.errors
    assert "failed" in traj.errors[-1] and "the run ended by max_turns" in traj.errors[-1]
    assert shaped_reward(traj, 0.1) is None  # no advantage: left out of its group

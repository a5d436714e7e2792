"""The agent graph with scripted chat models: tool loop, malformed calls, max turns, concurrency."""

from __future__ import annotations

import asyncio

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from env_tools.sandbox import SandboxEnvironment, seed_tasks
from graphs.agent import create_agent_graph, earlier_results, repeat_note, with_repeat_note
from langgraph_evolver.batch import arun_rollouts, run_rollouts
from langgraph_evolver.testing import ReferencePolicy, ScriptedChatModel
from langgraph_evolver.types import Trajectory


def unique_query_tasks(split: str = "train"):
    seen, out = set(), []
    for t in seed_tasks(split):
        if t.query not in seen:
            seen.add(t.query)
            out.append(t)
    return out


class Tracked(SandboxEnvironment):
    """A sandbox that counts its open instances, to check every rollout releases its environment."""

    open: set = set()

    def reset(self, task):
        Tracked.open.add(id(self))
        return super().reset(task)

    def close(self):
        Tracked.open.discard(id(self))
        super().close()


def test_reference_policy_solves_tasks_through_the_graph():
    tasks = unique_query_tasks()[:30]
    graph = create_agent_graph(ReferencePolicy(tasks))
    trajs = run_rollouts(graph, tasks, env_factory=lambda task: Tracked())
    assert [t.reward for t in trajs] == [1.0] * len(tasks)
    for traj, task in zip(trajs, tasks, strict=True):
        assert traj.finish_reason == "final_answer"
        assert traj.errors == ()
        # one step per reference call plus the final answer
        assert len(traj.steps) == len(task.reference_solution) + 1
        assert [s.action.tool_calls[0].name for s in traj.steps[:-1]] == [c.name for c in task.reference_solution]
        assert all(not o.is_error for s in traj.steps for o in s.observations)
        assert traj.steps[-1].action.content == (task.metadata["answer"] or "Done.")
        assert {s.node for s in traj.steps} == {"agent"}
    assert not Tracked.open, "environments must be released"


def test_malformed_calls_become_error_observations_and_the_rollout_goes_on():
    task = next(t for t in seed_tasks("train") if t.metadata["template"] == "contact_phone")
    name = task.reference_solution[0].arguments["query"]
    script = [
        AIMessage('<tool_call>{"name": "search_contacts", "arguments": {oops</tool_call>'),  # unparseable block
        AIMessage(
            "", invalid_tool_calls=[{"name": "search_contacts", "args": "{bad", "id": "x1", "error": "bad json"}]
        ),
        AIMessage("", tool_calls=[{"name": "no_such_tool", "args": {}, "id": "x2"}]),
        AIMessage("", tool_calls=[{"name": "search_contacts", "args": {"q": name}, "id": "x3"}]),  # wrong argument
        AIMessage("", tool_calls=[{"name": "search_contacts", "args": {"query": name}, "id": "x4"}]),
        AIMessage(task.metadata["answer"]),
    ]
    graph = create_agent_graph(ScriptedChatModel(script))
    (traj,) = run_rollouts(graph, [task])
    assert traj.finish_reason == "final_answer"
    assert traj.reward == 1.0
    assert len(traj.steps) == 6
    assert traj.steps[0].error == "unparseable tool call"
    assert "not a JSON object" in traj.steps[1].observations[0].content
    assert traj.steps[1].error
    assert "unknown tool 'no_such_tool'" in traj.steps[2].observations[0].content
    assert "unknown argument(s) ['q']" in traj.steps[3].observations[0].content
    assert all(s.observations[0].is_error for s in traj.steps[1:4])
    assert not traj.steps[4].observations[0].is_error


def test_max_turns_stops_a_looping_agent():
    task = seed_tasks("train")[0]
    loop = [AIMessage("", tool_calls=[{"name": "get_balance", "args": {}, "id": "c"}])]
    graph = create_agent_graph(ScriptedChatModel(loop), max_turns=3)
    (traj,) = run_rollouts(graph, [task])
    assert traj.finish_reason == "max_turns"
    assert len(traj.steps) == 3
    assert traj.reward is not None and traj.reward < 1.0


def test_max_turns_also_stops_unparseable_output():
    graph = create_agent_graph(ScriptedChatModel([AIMessage("<tool_call>{oops")]), max_turns=2)
    (traj,) = run_rollouts(graph, seed_tasks("train")[:1])
    assert traj.finish_reason == "max_turns"
    assert len(traj.steps) == 2 and all(s.error == "unparseable tool call" for s in traj.steps)


def test_policy_failure_is_recorded_not_raised():
    class Broken(ScriptedChatModel):
        def _generate(self, *a, **k):
            raise ConnectionError("endpoint down")

    graph = create_agent_graph(Broken([AIMessage("x")]))
    (traj,) = run_rollouts(graph, seed_tasks("train")[:1], env_factory=lambda task: Tracked())
    assert traj.finish_reason == "error"
    assert any("endpoint down" in e for e in traj.errors)
    assert traj.reward is not None  # the environment was still scored and released
    assert not Tracked.open


def test_environment_failure_on_reset_is_recorded():
    def factory(task):
        raise RuntimeError("cannot start")

    graph = create_agent_graph(ReferencePolicy(seed_tasks("train")[:1]))
    (traj,) = run_rollouts(graph, seed_tasks("train")[:1], env_factory=factory)
    assert traj.finish_reason == "error"
    assert any("cannot start" in e for e in traj.errors)


def test_64_concurrent_rollouts_do_not_cross_talk():
    tasks = unique_query_tasks("train")[:64]
    assert len(tasks) == 64
    created = []

    def factory(task):
        env = SandboxEnvironment()
        created.append(env)
        return env

    graph = create_agent_graph(ReferencePolicy(tasks))
    trajs = asyncio.run(arun_rollouts(graph, tasks, n=1, concurrency=64, env_factory=factory))
    assert len(created) == 64
    assert [t.reward for t in trajs] == [1.0] * 64
    # every trajectory's observations come from its own task's world
    for traj in trajs:
        env = SandboxEnvironment()
        env.reset(traj.task)
        for step in traj.steps[:-1]:
            expected = env.step(step.action).observations
            assert [o.content for o in step.observations] == [o.content for o in expected]
    assert len({t.group_id for t in trajs}) == 64


def test_group_ids_and_jsonl_round_trip(tmp_path):
    from langgraph_evolver.types import read_jsonl, write_jsonl

    tasks = unique_query_tasks()[:3]
    trajs = run_rollouts(create_agent_graph(ReferencePolicy(tasks)), tasks, n=2, group_prefix="step0/")
    assert [t.group_id for t in trajs] == [f"step0/{t.id}" for t in tasks for _ in range(2)]
    assert [t.rollout_index for t in trajs] == [0, 1] * 3
    path = tmp_path / "t.jsonl"
    write_jsonl(path, trajs)
    back = list(read_jsonl(path, Trajectory))
    assert back == trajs


def test_parse_feedback_reaches_the_next_prompt():
    seen = []

    class Recording(ScriptedChatModel):
        def _generate(self, messages, *a, **k):
            seen.append([m.content for m in messages])
            return super()._generate(messages, *a, **k)

    task = seed_tasks("train")[0]
    graph = create_agent_graph(Recording([AIMessage("<tool_call>{oops"), AIMessage("Done.")]))
    (traj,) = run_rollouts(graph, [task])
    assert len(traj.steps) == 2 and traj.steps[0].error == "unparseable tool call"
    assert "could not be parsed" in seen[1][-1]
    assert seen[0][0].startswith("Use the tools")  # the environment's system prompt opens the conversation


class Counted(SandboxEnvironment):
    """A sandbox that counts the tool calls it runs."""

    calls: list = []

    def step(self, action):
        Counted.calls += [c.name for c in action.tool_calls]
        return super().step(action)


def test_the_repeat_guard_notes_a_repeated_call_s_unchanged_result():
    """Adapted small models loop on one read until the turn limit. With ``repeat_guard`` a call that repeats one
    of this user turn still runs, and when its result is the same as before the observation says so: answer from
    it, or make a different call. A repeat whose result changed (the state moved) gets no note; without the
    guard no result gets one."""
    task = next(t for t in seed_tasks("train") if t.metadata["template"] == "contact_phone")
    name = task.reference_solution[0].arguments["query"]

    def call(i, tool="search_contacts", **args):
        return AIMessage("", tool_calls=[{"name": tool, "args": args or {"query": name}, "id": f"c{i}"}])

    script = [call(1), call(2), call(3, tool="no_such_tool"), call(4, tool="no_such_tool"), call(5),
              AIMessage(task.metadata["answer"])]  # fmt: skip
    runs = {}
    for guard in (True, False):
        Counted.calls = []
        graph = create_agent_graph(ScriptedChatModel(list(script)), repeat_guard=guard)
        (traj,) = run_rollouts(graph, [task], env_factory=lambda task: Counted())
        runs[guard] = (traj, list(Counted.calls))
    traj, ran = runs[True]
    assert traj.finish_reason == "final_answer" and traj.reward == 1.0
    seen = [s.observations[0].content for s in traj.steps[:-1]]
    assert seen[1] == with_repeat_note(seen[0], "search_contacts") and "same result" in seen[1]
    assert not traj.steps[1].observations[0].is_error  # still the tool's result
    assert seen[3] == with_repeat_note(seen[2], "no_such_tool") and traj.steps[3].observations[0].is_error
    assert seen[4] == seen[1]  # a repeat of a repeat: compared with the result, not with the note
    assert ran == ["search_contacts", "search_contacts", "no_such_tool", "no_such_tool", "search_contacts"]
    traj_off, ran_off = runs[False]
    assert ran_off == ran and not any(repeat_note("search_contacts") in s.observations[0].content
                                      for s in traj_off.steps[:-1])  # fmt: skip


def test_a_repeat_is_compared_with_the_same_call_s_last_result_in_this_user_turn():
    book = {"name": "get_book", "args": {"book_id": "B9"}, "id": "a"}
    seen = [HumanMessage("Lend B9."), AIMessage("", tool_calls=[book]),
            ToolMessage("Error: no copy left", tool_call_id="a", name="get_book", status="error")]  # fmt: skip
    again = AIMessage("", tool_calls=[{**book, "id": "b"}, {**book, "args": {"book_id": "B2"}, "id": "c"}])
    assert earlier_results(seen, again) == ["Error: no copy left", None]
    assert earlier_results([*seen, HumanMessage("And now B2.")], again) == [None, None]  # a new user turn

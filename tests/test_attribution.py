"""Self-attributing: prompts, lenient parsing, retries/backoff/fallback, cache, concurrency, accounting,
the reference judge on hand-built and real agent-graph trajectories, make_judge errors, the node, and
one LLM judge call over HTTP against the tiny policy server."""

from __future__ import annotations

import asyncio
import doctest
import importlib
import json
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from langgraph_evolver.attribution import (
    DEFAULT_ATTRIBUTION_PROMPT,
    DEFAULT_FAILURE_RULES,
    DEFAULT_RETRY_PROMPT,
    DEFAULT_STEP_FORMAT,
    DEFAULT_SUCCESS_RULES,
    Attribution,
    LLMJudge,
    ReferenceJudge,
    StepLabel,
    aattribute_batch,
    aattribute_steps,
    apply_attribution,
    attribute_steps,
    create_attribution_node,
    label_signs,
    make_judge,
    summarize_attributions,
)
from langgraph_evolver.attribution.parsing import parse_labels
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.types import Action, Step, Task, ToolCall, ToolObservation, Trajectory

# -- helpers --------------------------------------------------------------------------------


class ScriptedJudgeModel(BaseChatModel):
    """Async chat model that answers from a script and records calls and peak concurrency.

    A script item is a reply text, an exception to raise, or ``("sleep", seconds)`` to hang.
    The last item repeats once the script is used up.
    """

    script: list[Any]
    delay: float = 0.0
    usage: tuple[int, int] | None = (100, 20)
    log: Any = None

    def __init__(self, script: list[Any], **kwargs: Any) -> None:
        super().__init__(script=list(script), log=SimpleNamespace(calls=[], active=0, peak=0), **kwargs)

    @property
    def _llm_type(self) -> str:
        return "scripted-judge"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        raise NotImplementedError("async only")

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        log = self.log
        log.calls.append(list(messages))
        item = self.script[min(len(log.calls), len(self.script)) - 1]
        log.active += 1
        log.peak = max(log.peak, log.active)
        try:
            await asyncio.sleep(self.delay)
            if isinstance(item, tuple):
                await asyncio.sleep(item[1])
            if isinstance(item, BaseException):
                raise item
        finally:
            log.active -= 1
        usage = None
        if self.usage is not None:
            usage = {"input_tokens": self.usage[0], "output_tokens": self.usage[1], "total_tokens": sum(self.usage)}
        return ChatResult(generations=[ChatGeneration(message=AIMessage(str(item), usage_metadata=usage))])


def call_step(index: int, name: str, args: dict | str, result: str = "ok", *, is_error: bool = False) -> Step:
    call = ToolCall(name=name, arguments=args, id=f"c{index}")
    obs = ToolObservation(call_id=f"c{index}", name=name, content=result, is_error=is_error)
    return Step(index=index, action=Action(tool_calls=(call,)), observations=(obs,))


def answer_step(index: int, text: str) -> Step:
    return Step(index=index, action=Action(content=text))


REFERENCE = (
    ToolCall(name="search_contacts", arguments={"query": "Lea"}),
    ToolCall(name="pay", arguments={"contact_id": "c11", "amount": 40}),
)
TASK = Task(id="pay-lea", query="Pay Lea 40 dollars.", reference_solution=REFERENCE)


def traj(*steps: Step, reward: float | None = 1.0, task: Task = TASK, tid: str = "t1") -> Trajectory:
    return Trajectory(id=tid, task=task, steps=steps, reward=reward)


def two_steps(reward: float = 1.0, tid: str = "t1") -> Trajectory:
    return traj(
        call_step(0, "search_contacts", {"query": "Lea"}, '[{"id": "c11", "name": "Lea"}]'),
        answer_step(1, "Done."),
        reward=reward,
        tid=tid,
    )


def labels_of(verdict: Attribution) -> list[str]:
    assert verdict.labels is not None, verdict.error
    return [x.label for x in verdict.labels]


# -- prompts --------------------------------------------------------------------------------


def test_each_prompt_constant_formats():
    text = DEFAULT_ATTRIBUTION_PROMPT.format(task="Q", steps="Step 1: a\n  -> b", num_steps=1, score="0.50",
                                            outcome="failed", rules=DEFAULT_FAILURE_RULES)  # fmt: skip
    assert "Task: Q" in text and "score 0.50" in text and "NOT completed" in text
    assert "do not label all steps alike" in text and "for all 1 steps" in text
    assert "{" not in DEFAULT_SUCCESS_RULES + DEFAULT_FAILURE_RULES  # inserted verbatim, never formatted
    assert DEFAULT_STEP_FORMAT.format(number=3, action="x()", observation="y") == "Step 3: x()\n  -> y"
    retry = DEFAULT_RETRY_PROMPT.format(missing="2, 4", num_steps=4)
    assert "step(s) 2, 4" in retry and "4 steps" in retry


def test_rendered_prompt_shows_steps_trimmed_errors_and_outcome_rules():
    judge = LLMJudge(ScriptedJudgeModel(["x"]), max_observation_chars=40)
    failed = traj(
        call_step(0, "search_contacts", {"query": "Lea"}, "x" * 100),
        call_step(1, "pay", {"contact_id": "c99", "amount": 40}, "Error: no contact with id 'c99'", is_error=True),
        Step(index=2, action=Action(content="<tool_call>{oops"), error="unparseable tool call"),
        answer_step(3, "Paid."),
        reward=0.5,
    )
    text = judge.render_prompt(failed)
    assert "Task: Pay Lea 40 dollars." in text
    assert 'Step 1: search_contacts(query="Lea")' in text
    assert "x" * 40 + "… [60 more chars]" in text and "x" * 41 not in text
    assert "Step 2: pay(contact_id=\"c99\", amount=40)\n  -> [error] Error: no contact with id 'c99'" in text
    assert "[step error: unparseable tool call]" in text
    assert 'Step 4: final answer: "Paid."' in text
    assert "score 0.50" in text and "the task failed" in text and DEFAULT_FAILURE_RULES in text
    assert "for all 4 steps" in text
    ok = judge.render_prompt(two_steps(reward=1.0))
    assert "succeeded" in ok and DEFAULT_SUCCESS_RULES in ok and DEFAULT_FAILURE_RULES not in ok
    assert "score unknown" in judge.render_prompt(traj(*two_steps().steps, reward=None))


# -- parsing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        "Sure! Here is my review.\nStep 1: GOOD - found Lea\nStep 2: BAD - premature\nLet me know if you need more.",
        "Step 1 : good (found Lea)\nStep 2 : bad (premature)",
        "**Step 1**: **GOOD** — found Lea\n- **Step 2:** **BAD** – premature",
        "1. GOOD - found Lea\n2. BAD - premature",
        "| Step | Label | Reason |\n|---|---|---|\n| 1 | GOOD | found Lea |\n| 2 | BAD | premature |",
        'Verdict:\n```json\n[{"step": 1, "label": "GOOD", "reason": "found Lea"},'
        ' {"step": 2, "label": "bad", "reason": "premature"}]\n```',
        '{"labels": [{"step": 1, "label": "GOOD", "reason": "found Lea"}, {"step": 2, "label": "BAD", "reason": "premature"}]}',  # noqa: E501
        "<think>Step 1: BAD - hmm, no</think>Step 1: GOOD - found Lea\nStep 2: BAD - premature",
    ],
    ids=["chatter", "lowercase-parens", "bold", "numbered", "table", "json-fenced", "json-object", "think"],
)
def test_parse_labels_variants(answer):
    assert parse_labels(answer, 2) == {1: ("GOOD", "found Lea"), 2: ("BAD", "premature")}


def test_parse_labels_ignores_garbage_and_out_of_range_steps():
    assert parse_labels("I think the agent did GOOD work overall.", 2) == {}
    assert parse_labels("Step 3: GOOD - x\nStep 0: BAD - y", 2) == {}
    assert parse_labels("Step 1: GOODNESS", 1) == {}


# -- LLM judge: retries, fallback, cache, concurrency, accounting ---------------------------


async def test_partial_answer_is_retried_naming_the_missing_steps():
    model = ScriptedJudgeModel(["Step 1: GOOD - found Lea\n(I am not sure about the rest.)", "Step 2: BAD - premature"])
    judge = LLMJudge(model, backoff_s=0.0)
    verdict = await judge.ajudge(two_steps(reward=0.0))
    assert labels_of(verdict) == ["GOOD", "BAD"]
    assert [x.reason for x in verdict.labels] == ["found Lea", "premature"]
    assert verdict.attempts == 2 and verdict.error is None
    retry = model.log.calls[1]
    assert len(retry) == 3 and "step(s) 2" in retry[-1].text and "found Lea" in retry[1].text


async def test_garbage_answers_fall_back_to_outcome_only_and_are_counted():
    model = ScriptedJudgeModel(["The agent did fine."])
    judge = LLMJudge(model, max_retries=2, backoff_s=0.0)
    verdict = await judge.ajudge(two_steps())
    assert verdict.labels is None and verdict.fallback
    assert verdict.attempts == 3 == len(model.log.calls)
    assert "no label for step(s) [1, 2]" in verdict.error
    assert judge.stats.fallbacks == 1 and judge.stats.model_calls == 3
    assert summarize_attributions([verdict])["fallbacks"] == 1
    labelled = apply_attribution(two_steps(), verdict)
    assert labelled.labels is None and labelled.metadata["attribution"]["fallback"] is True
    assert label_signs(labelled) is None
    await judge.ajudge(two_steps())  # fallbacks are not cached: the judge tries again
    assert len(model.log.calls) == 6


async def test_exceptions_and_timeouts_are_retried_with_exponential_backoff():
    # the second attempt hangs for a minute: only the 0.2 s timeout gets the judge to its third attempt in time
    model = ScriptedJudgeModel([RuntimeError("503 overloaded"), ("sleep", 60.0), "Step 1: GOOD - a\nStep 2: GOOD - b"])
    judge = LLMJudge(model, max_retries=2, backoff_s=0.05, timeout_s=0.2)
    started = time.perf_counter()
    verdict = await judge.ajudge(two_steps())
    elapsed = time.perf_counter() - started
    assert labels_of(verdict) == ["GOOD", "GOOD"] and verdict.attempts == 3
    # backoffs 0.05 then 0.1, one 0.2 s timeout; the upper bound only says the hang was cut (generous for a
    # loaded machine)
    assert 0.05 + 0.1 + 0.2 <= elapsed < 30.0
    failing = LLMJudge(ScriptedJudgeModel([ValueError("boom")]), max_retries=1, backoff_s=0.0)
    verdict = await failing.ajudge(two_steps())
    assert verdict.labels is None and verdict.attempts == 2 and "ValueError: boom" in verdict.error


async def test_cache_hit_makes_no_model_call_and_persists_to_jsonl(tmp_path):
    model = ScriptedJudgeModel(["Step 1: GOOD - a\nStep 2: GOOD - b"])
    path = tmp_path / "judge_cache.jsonl"
    judge = LLMJudge(model, cache=path)
    first = await judge.ajudge(two_steps(tid="a"))
    second = await judge.ajudge(two_steps(tid="b"))  # same content, other id
    assert len(model.log.calls) == 1
    assert second.cached and second.attempts == 0 and second.input_tokens == 0 and second.trajectory_id == "b"
    assert labels_of(second) == labels_of(first) and judge.stats.cache_hits == 1
    await judge.ajudge(two_steps(reward=0.5))  # other outcome: other key
    assert len(model.log.calls) == 2
    reloaded = LLMJudge(ScriptedJudgeModel(["unused"]), cache=path)
    again = await reloaded.ajudge(two_steps())
    assert again.cached and labels_of(again) == ["GOOD", "GOOD"]
    assert len(path.read_text().splitlines()) == 2
    other_prompt = LLMJudge(model, cache=path, prompt=DEFAULT_ATTRIBUTION_PROMPT + "\nBe brief.")
    assert other_prompt.cache_key(two_steps()) != judge.cache_key(two_steps())


async def test_concurrency_is_bounded_per_judge_and_identical_trajectories_share_a_call():
    model = ScriptedJudgeModel(["Step 1: GOOD - a\nStep 2: BAD - b"], delay=0.05)
    judge = LLMJudge(model, max_concurrency=3, cache=None)
    trajectories = [two_steps(reward=i / 10, tid=f"t{i}") for i in range(9)]
    verdicts = await aattribute_batch(trajectories, judge)
    assert model.log.peak == 3 and len(model.log.calls) == 9
    assert [v.trajectory_id for v in verdicts] == [t.id for t in trajectories]
    model.log.calls.clear()
    twins = await asyncio.gather(judge.ajudge(two_steps(tid="x")), judge.ajudge(two_steps(tid="y")))
    assert len(model.log.calls) == 1 and sorted(v.cached for v in twins) == [False, True]


async def test_token_and_cost_accounting_sums_over_attempts():
    model = ScriptedJudgeModel(["Step 1: GOOD - a", "Step 2: BAD - b"], usage=(1000, 200))
    judge = LLMJudge(model, backoff_s=0.0, price_per_1k_input=0.5, price_per_1k_output=2.0)
    verdict = await judge.ajudge(two_steps())
    assert (verdict.input_tokens, verdict.output_tokens) == (2000, 400)
    assert verdict.cost_usd == pytest.approx(2 * (0.5 + 0.4))
    assert judge.stats.to_dict()["cost_usd"] == pytest.approx(1.8)
    no_usage = LLMJudge(ScriptedJudgeModel(["Step 1: GOOD\nStep 2: GOOD"], usage=None))
    assert (await no_usage.ajudge(two_steps())).input_tokens == 0


def test_sync_judge_works_inside_and_outside_an_event_loop():
    judge = LLMJudge(ScriptedJudgeModel(["Step 1: GOOD - a\nStep 2: GOOD - b"]))
    assert labels_of(judge.judge(two_steps())) == ["GOOD", "GOOD"]

    async def inside() -> Attribution:
        return judge.judge(two_steps(reward=0.0))

    assert labels_of(asyncio.run(inside())) == ["GOOD", "GOOD"]


# -- reference judge ------------------------------------------------------------------------


def test_reference_judge_labels_match_repeat_error_irrelevant_and_answers():
    t = traj(
        call_step(0, "search_contacts", {"query": " Lea "}, '[{"id": "c11"}]'),  # match (whitespace ignored)
        call_step(1, "search_contacts", {"query": "Lea"}, '[{"id": "c11"}]'),  # repeat
        call_step(2, "pay", {"contact_id": "c12", "amount": 40}, "Error: no contact", is_error=True),  # error
        call_step(3, "get_balance", {}, '{"balance": 90}'),  # irrelevant
        Step(index=4, action=Action(content="<tool_call>{oops"), error="unparseable tool call"),
        call_step(5, "pay", '{"amount": 40.0, "contact_id": "c11"}', '{"transaction_id": "t1"}'),  # JSON string
        answer_step(6, "Paid Lea."),
        reward=1.0,
    )
    verdict = ReferenceJudge().judge(t)
    assert labels_of(verdict) == ["GOOD", "BAD", "BAD", "BAD", "BAD", "GOOD", "GOOD"]
    reasons = [x.reason for x in verdict.labels]
    assert reasons[1].startswith("repeats") and reasons[2].startswith("error") and reasons[3].startswith("irrelevant")
    assert [x.step for x in verdict.labels] == list(range(7)) and verdict.attempts == 0
    failed = ReferenceJudge().judge(dataclass_replace(t, reward=0.5))
    assert labels_of(failed)[-1] == "BAD" and "not completed" in failed.labels[-1].reason


def dataclass_replace(t: Trajectory, **changes: Any) -> Trajectory:
    import dataclasses

    return dataclasses.replace(t, **changes)


def test_reference_judge_options_and_tasks_without_reference():
    repeat = traj(call_step(0, "search_contacts", {"query": "Lea"}), call_step(1, "search_contacts", {"query": "Lea"}))
    assert labels_of(ReferenceJudge().judge(repeat)) == ["GOOD", "BAD"]
    assert labels_of(ReferenceJudge(repeat_is_bad=False).judge(repeat)) == ["GOOD", "GOOD"]
    extra = traj(call_step(0, "search_contacts", {"query": "Lea", "limit": 5}))
    assert labels_of(ReferenceJudge().judge(extra)) == ["BAD"]
    assert labels_of(ReferenceJudge(allow_extra_arguments=True).judge(extra)) == ["GOOD"]
    case = traj(call_step(0, "search_contacts", {"query": "lea"}))
    assert labels_of(ReferenceJudge().judge(case)) == ["BAD"]
    assert labels_of(ReferenceJudge(ignore_case=True).judge(case)) == ["GOOD"]
    no_ref = Task(id="free", query="Do something")
    free = traj(
        call_step(0, "anything", {"x": 1}),
        call_step(1, "anything", {"x": 1}),
        call_step(2, "broken", {}, "Error: nope", is_error=True),
        answer_step(3, "ok"),
        task=no_ref,
        reward=0.0,
    )
    verdict = ReferenceJudge().judge(free)
    assert labels_of(verdict) == ["GOOD", "BAD", "BAD", "BAD"]
    assert all(x.reason.startswith("no reference solution") for x in verdict.labels)
    unknown_outcome = traj(call_step(0, "search_contacts", {"query": "Lea"}), answer_step(1, "done"), reward=None)
    assert labels_of(ReferenceJudge().judge(unknown_outcome)) == ["GOOD", "BAD"]  # pay was never made


def test_reference_judge_multi_call_step_needs_one_match_and_no_error():
    both = Step(
        index=0,
        action=Action(tool_calls=(ToolCall(name="get_balance", id="a"), ToolCall(name="search_contacts", id="b",
                                                                                  arguments={"query": "Lea"}))),
        observations=(ToolObservation(call_id="a", name="get_balance", content="{}"),
                      ToolObservation(call_id="b", name="search_contacts", content="[]")),
    )  # fmt: skip
    verdict = ReferenceJudge().judge(traj(both))
    assert labels_of(verdict) == ["GOOD"] and "not in the reference" in verdict.labels[0].reason
    broken = dataclass_replace(both.observations[1], is_error=True)
    errored = dataclass_replace(both, observations=(both.observations[0], broken))
    assert labels_of(ReferenceJudge().judge(traj(errored))) == ["BAD"]


def test_reference_judge_on_agent_graph_trajectories():
    from env_tools.sandbox import seed_tasks
    from graphs.agent import create_agent_graph
    from langgraph_evolver.batch import run_rollouts
    from langgraph_evolver.testing import ReferencePolicy, ScriptedChatModel

    tasks = seed_tasks("train")[:15]
    solved = run_rollouts(create_agent_graph(ReferencePolicy(tasks)), tasks)
    for verdict in [ReferenceJudge().judge(t) for t in solved]:
        assert labels_of(verdict) == ["GOOD"] * len(verdict.labels)
    task = next(t for t in tasks if t.metadata["template"] == "message_contact")
    search, send = task.reference_solution

    def call(name: str, args: dict) -> AIMessage:
        return AIMessage("", tool_calls=[{"name": name, "args": args, "id": name}])

    script = [
        call("search_contacts", {"q": "x"}),  # wrong argument name: error
        call("send_message", {**send.arguments, "text": "hi"}),  # wrong text: irrelevant
        call("search_contacts", search.arguments),  # the reference lookup
        AIMessage("Sent."),  # the task failed
    ]
    (failed,) = run_rollouts(create_agent_graph(ScriptedChatModel(script)), [task])
    assert failed.reward is not None and failed.reward < 1.0
    assert labels_of(ReferenceJudge().judge(failed)) == ["BAD", "BAD", "GOOD", "BAD"]


# -- make_judge, mechanism, node ------------------------------------------------------------


def test_make_judge_builds_and_rejects_specs():
    assert isinstance(make_judge("reference"), ReferenceJudge)
    assert isinstance(make_judge(" Reference ", repeat_is_bad=False), ReferenceJudge)
    llm = make_judge(ScriptedJudgeModel(["x"]), max_concurrency=2)
    assert isinstance(llm, LLMJudge) and llm.max_concurrency == 2 and llm.name == "llm:scripted-judge"
    ready = ReferenceJudge()
    assert make_judge(ready) is ready
    with pytest.raises(ConfigError, match="'reference', a chat-model string"):
        make_judge(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="empty string"):
        make_judge("  ")
    with pytest.raises(ConfigError, match="Cannot build the judge model 'no-such-provider:model'"):
        make_judge("no-such-provider:model")
    with pytest.raises(ConfigError, match="ReferenceJudge got a bad option"):
        make_judge("reference", max_concurrency=3)
    with pytest.raises(ConfigError, match="only apply when make_judge builds"):
        make_judge(ready, repeat_is_bad=False)
    with pytest.raises(ConfigError, match="max_concurrency must be >= 1"):
        make_judge(ScriptedJudgeModel(["x"]), max_concurrency=0)
    with pytest.raises(ConfigError, match="may use only the fields"):
        LLMJudge(ScriptedJudgeModel(["x"]), prompt="Label {steps} for {trajectory}")


async def test_mechanism_apply_and_label_signs():
    t = two_steps(reward=0.0)
    verdict = attribute_steps(t.to_dict(), "reference")
    assert labels_of(verdict) == labels_of(await aattribute_steps(t, "reference")) == ["GOOD", "BAD"]
    labelled = apply_attribution(t, verdict)
    assert labelled.labels == ({"step": 0, "label": "GOOD", "reason": verdict.labels[0].reason},
                               {"step": 1, "label": "BAD", "reason": verdict.labels[1].reason})  # fmt: skip
    assert label_signs(labelled) == [1, -1] and t.labels is None
    assert labelled.metadata["attribution"]["judge"] == "reference"
    assert Attribution.from_dict(json.loads(json.dumps(verdict.to_dict()))) == verdict
    with pytest.raises(ValueError, match="is for trajectory"):
        apply_attribution(dataclass_replace(t, id="other"), verdict)
    short = Attribution(trajectory_id=t.id, judge="x", labels=(StepLabel(step=0, label="GOOD"),))
    with pytest.raises(ValueError, match="label each step once"):
        apply_attribution(t, short)


async def test_attribution_node_in_a_graph():
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class State(TypedDict, total=False):
        trajectory: dict
        attribution: dict
        labeled: dict

    node = create_attribution_node("reference", labeled_key="labeled")
    graph = StateGraph(State).add_node("attribute", node).add_edge(START, "attribute").add_edge("attribute", END)
    out = await graph.compile().ainvoke({"trajectory": two_steps(reward=0.0).to_dict()})
    assert [x["label"] for x in out["attribution"]["labels"]] == ["GOOD", "BAD"]
    assert Trajectory.from_dict(out["labeled"]).labels[1]["label"] == "BAD"
    batch = await create_attribution_node("reference", input_key="items", output_key="verdicts")(
        {"items": [two_steps(tid="a"), two_steps(tid="b").to_dict()]}
    )
    assert [v["trajectory_id"] for v in batch["verdicts"]] == ["a", "b"]
    with pytest.raises(ConfigError, match="state\\['trajectory'\\]"):
        await node({"other": 1})


def test_docstring_examples():
    for name in ("core", "parsing", "reference", "judges", "attribute"):
        module = importlib.import_module(f"langgraph_evolver.attribution.{name}")
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, name


# -- one real OpenAI-compatible endpoint ----------------------------------------------------


async def test_llm_judge_over_http_against_the_tiny_policy(tiny_policy_url):
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(base_url=tiny_policy_url, api_key="EMPTY", model="tiny-policy", max_tokens=64, max_retries=0)
    judge = make_judge(model, max_retries=1, backoff_s=0.01, timeout_s=120)
    assert judge.name == "llm:tiny-policy"
    verdict = await judge.ajudge(two_steps(reward=0.0))
    assert verdict.attempts == 2 or verdict.labels is not None  # the tiny policy cannot judge: it retries
    assert verdict.input_tokens > 0 and verdict.output_tokens > 0  # counted from the server's usage
    assert verdict.labels is None or len(verdict.labels) == 2
    assert judge.stats.fallbacks == (verdict.labels is None) and judge.stats.model_calls == verdict.attempts
    if verdict.labels is None:
        assert "judge failed after 2 attempt(s)" in verdict.error


def test_labels_go_to_each_steps_traced_llm_run_as_feedback(tiny_policy_url, tmp_path):
    """Each step records its LLM call's run id (the one the tracer records); feedback targets it."""
    from env_tools.sandbox import seed_tasks
    from graphs.agent import create_agent_graph
    from langgraph_evolver import JsonlTracer, PolicyChatModel, read_runs, run_rollouts
    from langgraph_evolver.attribution import FEEDBACK_KEY, write_langsmith_feedback

    tasks = [t for t in seed_tasks("test") if t.metadata["level"] == 2][:2]
    graph = create_agent_graph(PolicyChatModel(base_url=tiny_policy_url, model="tiny-policy", max_tokens=96))
    with JsonlTracer(tmp_path / "runs.jsonl") as tracer:
        trajectories = run_rollouts(graph, tasks, callbacks=[tracer])
    llm_runs = {r["id"] for r in read_runs(tmp_path / "runs.jsonl") if r["run_type"] == "llm"}
    step_runs = [s.llm_run_id for t in trajectories for s in t.steps]
    assert step_runs and all(step_runs) and set(step_runs) <= llm_runs
    assert len(set(step_runs)) == len(step_runs)

    labelled = [apply_attribution(t, attribute_steps(t, "reference")) for t in trajectories]

    class RecordingClient:  # LangSmith is unreachable here; record what would be sent
        def __init__(self, fail_after: int | None = None) -> None:
            self.calls: list[tuple] = []
            self.fail_after = fail_after

        def read_project(self, *, project_name):  # feedback names the runs' project by id
            self.project = project_name
            return SimpleNamespace(id=uuid.UUID(int=7))

        def create_feedback(self, run_id, **kwargs):
            if self.fail_after is not None and len(self.calls) >= self.fail_after:
                raise ConnectionError("LangSmith down")
            self.calls.append((run_id, kwargs))

    client = RecordingClient()
    assert write_langsmith_feedback(labelled, client=client, project="train") == (len(step_runs), 0)
    assert client.project == "train" and {str(kw["session_id"]) for _, kw in client.calls} == {str(uuid.UUID(int=7))}
    expected = {s.llm_run_id: x for t in labelled for s, x in zip(t.steps, t.labels or (), strict=True)}
    for run_id, kwargs in client.calls:
        label = expected[run_id]
        assert kwargs["key"] == FEEDBACK_KEY and kwargs["value"] == label["label"]
        assert kwargs["score"] == (1.0 if label["label"] == "GOOD" else 0.0) and kwargs["comment"] == label["reason"]
    assert write_langsmith_feedback(labelled, client=RecordingClient(fail_after=1)) == (1, len(step_runs) - 1)

"""Experience extraction: prompts, the rules extractor on hand-made and real agent-graph rollouts, the
LLM extractor (provenance, retries, counted fallbacks, validation, tokens, concurrency), make_extractor,
selection across tasks, and the node in a StateGraph."""

from __future__ import annotations

import doctest
import importlib

import pytest
from langchain_core.messages import AIMessage

from langgraph_evolver.errors import ConfigError
from langgraph_evolver.experience.extract import (
    ExtractionResult,
    LLMExtractor,
    RulesExtractor,
    TaskExtraction,
    aextract_experiences,
    create_extraction_node,
    experience_id,
    extract_experiences,
    make_extractor,
)
from langgraph_evolver.experience.extractor import select_experiences
from langgraph_evolver.experience.llm_extractor import parse_experiences, parse_scores
from langgraph_evolver.experience.prompts import (
    DEFAULT_COMPARISON_INSTRUCTIONS,
    DEFAULT_EXTRACTION_PROMPT,
    DEFAULT_EXTRACTION_RETRY_PROMPT,
    DEFAULT_FAILURE_ONLY_INSTRUCTIONS,
    DEFAULT_SUCCESS_ONLY_INSTRUCTIONS,
    DEFAULT_VALIDATION_PROMPT,
    DEFAULT_VALIDATION_RETRY_PROMPT,
    render_candidates,
    render_trajectory,
)
from langgraph_evolver.experience.rules import normalize_query
from langgraph_evolver.experience.types import Experience
from langgraph_evolver.types import Step, Task, Trajectory
from tests.test_attribution import ScriptedJudgeModel, answer_step, call_step

# -- helpers --------------------------------------------------------------------------------


class ScriptedModel(ScriptedJudgeModel):
    """The judge tests' scripted model (script, recorded calls, peak concurrency, usage), named as an extractor."""

    @property
    def _llm_type(self) -> str:
        return "scripted-extractor"


call, answer = call_step, answer_step


TASK = Task(id="pay-lea", query="Pay Lea 40 dollars.")
CONTACTS = '[{"id": "c11", "name": "Lea"}]'


def traj(*steps: Step, reward: float | None = 1.0, task: Task = TASK, tid: str = "t1") -> Trajectory:
    return Trajectory(id=tid, task=task, steps=steps, reward=reward, group_id=task.id)


def solved(tid: str = "win", task: Task = TASK) -> Trajectory:
    return traj(call(0, "search_contacts", {"query": "Lea"}, CONTACTS),
                call(1, "pay", {"contact_id": "c11", "amount": 40}, '{"status": "paid"}'),
                answer(2, "Paid."), task=task, tid=tid)  # fmt: skip


def failed(tid: str = "loss") -> Trajectory:
    return traj(call(0, "pay", {"contact_id": "Lea", "amount": 40}, "Error: no contact 'Lea'", is_error=True),
                answer(1, "Done."), reward=0.0, tid=tid)  # fmt: skip


EXTRACTED = (
    '```json\n[{"when_to_use": "paying a contact by name", "content": "Search the contact first and pay '
    'with its id."}, {"when_to_use": "any task", "content": "Be careful."}]\n```'
)


def contents(result: ExtractionResult | TaskExtraction) -> list[str]:
    return [e.content for e in result.experiences]


# -- prompts --------------------------------------------------------------------------------


def test_each_prompt_formats_and_trajectories_render_compactly():
    text = DEFAULT_EXTRACTION_PROMPT.format(task="Q", successes="S", failures="(none)",
                                            comparison=DEFAULT_COMPARISON_INSTRUCTIONS, max_experiences=3)  # fmt: skip
    assert "Task: Q" in text and "1 to 3 experiences" in text and '[{"when_to_use": "...", "content": "..."}]' in text
    for extra in (DEFAULT_SUCCESS_ONLY_INSTRUCTIONS, DEFAULT_FAILURE_ONLY_INSTRUCTIONS):
        assert extra in DEFAULT_EXTRACTION_PROMPT.format(task="Q", successes="S", failures="F", comparison=extra,
                                                         max_experiences=1)  # fmt: skip
    text = DEFAULT_VALIDATION_PROMPT.format(task="Q", trajectories="R", candidates=render_candidates([("w", "c")]),
                                            num_candidates=1)  # fmt: skip
    assert "1. when_to_use: w\n   content: c" in text and "0 to 10" in text and '"score": 7' in text
    assert "could not be read (bad)" in DEFAULT_EXTRACTION_RETRY_PROMPT.format(problem="bad")
    assert "candidate(s) 2, 3" in DEFAULT_VALIDATION_RETRY_PROMPT.format(missing="2, 3", num_candidates=3)

    long = traj(call(0, "search_contacts", {"query": "Lea"}, "x" * 5000), call(1, "pay", {}, "boom", is_error=True),
                answer(2, "Paid."), reward=0.5)  # fmt: skip
    shown = render_trajectory(long, label="Failure 1", max_observation_chars=50)
    assert shown.startswith("Failure 1 (reward 0.50):")
    assert '1. search_contacts(query="Lea")' in shown and "[4950 more chars]" in shown and len(shown) < 400
    assert "-> [error] boom" in shown and '3. final answer: "Paid."' in shown
    many = traj(*(call(i, "get_balance", {}, "5") for i in range(40)), answer(40, "5"))
    shown = render_trajectory(many, max_steps=6)
    assert "(35 steps left out)" in shown and "41. final answer" in shown and "4. get_balance" not in shown


def test_normalize_query_replaces_entities():
    assert normalize_query("What is Pia's phone number?") == "What is <NAME>'s phone number?"
    assert normalize_query("Book the cheapest flight from New York to Paris on May 5 at 10:30 for $120.") == (
        "Book the cheapest flight from <NAME> to <NAME> on <DATE> at <TIME> for <NUM>."
    )
    assert normalize_query("Cancel booking b39 and mail bo@x.org; I said 'see you soon'") == (
        "Cancel booking <ID> and mail <EMAIL>; I said <TEXT>"
    )


# -- rules extractor ------------------------------------------------------------------------


def test_rules_learn_preconditions_and_recoveries_from_errors():
    t = traj(
        call(0, "lookup_contact", {"name": "Lea"}, "Error: unknown tool 'lookup_contact'", is_error=True),
        call(1, "search_contacts", {"q": "Lea"}, "Error: unknown argument q", is_error=True),
        call(2, "search_contacts", {"query": "Lea"}, CONTACTS),
        call(3, "pay", {"contact_id": "Lea", "amount": "40"}, "Error: amount must be a number", is_error=True),
        call(4, "pay", {"contact_id": "Lea", "amount": 40}, "Error: no contact with id 'Lea'", is_error=True),
        call(5, "pay", {"contact_id": "c11", "amount": 40}, '{"status": "paid"}'),
        answer(6, "Paid."),
        reward=0.0,
    )
    answer_ = RulesExtractor().extract_task([t], step=3)
    assert sorted((e.metadata["kind"], e.content) for e in answer_.experiences) == [
        ("tool_precondition", "When calling `pay`: `amount` must be a number, not a string."),
        ("tool_precondition", "When calling `pay`: take `contact_id` from the `search_contacts` result (a call "
                              "with another value failed: \"no contact with id '<NAME>'\")."),
        ("tool_precondition", "When calling `search_contacts`: use the argument name(s) `query`, not `q`."),
        ("unknown_tool", "There is no `lookup_contact` tool (calling it is an error); use `search_contacts` instead."),
    ]  # fmt: skip
    for e in answer_.experiences:
        assert e.source_trajectory_ids == ("t1",) and e.source_task_ids == ("pay-lea",) and e.step == 3
        assert e.id == experience_id(e.when_to_use, e.content) and e.score == 0.5  # failed rollout: 0.5 + 0.5 * 0
    assert not any(e.metadata["kind"] == "workflow" for e in answer_.experiences)  # the rollout failed


def test_rules_learn_a_state_precondition_and_skip_unexplained_errors():
    t = traj(
        call(0, "pay", {"contact_id": "c11", "amount": 40}, "Error: insufficient funds", is_error=True),
        call(1, "request_money", {"contact_id": "c12", "amount": 50}, '{"status": "received"}'),
        call(2, "pay", {"contact_id": "c11", "amount": 40}, '{"status": "paid"}'),
        call(3, "get_weather", {}, "Error: service down", is_error=True),  # never recovered, not unknown: no lesson
        answer(4, "Paid."),
        reward=1.0,
    )
    (precondition,) = [e for e in RulesExtractor().extract_task([t]).experiences if e.metadata["kind"] != "workflow"]
    assert precondition.content == (
        'When calling `pay`: it failed ("insufficient funds") until `request_money` had been called.'
    )
    assert precondition.score == 1.0


def test_rules_describe_the_successful_tool_sequence_deterministically():
    rollouts = [solved("a"), solved("b"), failed("c")]
    first = RulesExtractor().extract_task(rollouts, step=1)
    (workflow,) = [e for e in first.experiences if e.metadata["kind"] == "workflow"]
    assert workflow.when_to_use == "Pay <NAME> <NUM> dollars."
    assert workflow.content == ("Call `search_contacts` (`query` from the request), then `pay` (`contact_id` from "
                                "the `search_contacts` result, `amount` from the request), then answer.")  # fmt: skip
    assert workflow.source_trajectory_ids == ("a", "b") and workflow.score == 1.0
    again = RulesExtractor().extract_task(list(rollouts), step=1)
    strip = ("created_at", "updated_at")
    assert [{k: v for k, v in e.to_dict().items() if k not in strip} for e in again.experiences] == [
        {k: v for k, v in e.to_dict().items() if k not in strip} for e in first.experiences
    ]
    lookup = traj(call(0, "get_balance", {}, '{"balance": 230}'), answer(1, "You have 230."),
                  task=Task(id="bal", query="How much money do I have?"))  # fmt: skip
    assert contents(RulesExtractor().extract_task([lookup])) == [
        "Call `get_balance`, then answer from the `get_balance` result."
    ]
    assert RulesExtractor().extract_task([failed()]).experiences == ()  # no recovery, no success: nothing learnt


def test_rules_on_real_agent_graph_rollouts():
    from env_tools.sandbox import seed_tasks
    from graphs.agent import create_agent_graph
    from langgraph_evolver.batch import run_rollouts
    from langgraph_evolver.testing import ReferencePolicy, ScriptedChatModel

    tasks = [t for t in seed_tasks("train")[:30] if t.metadata["template"] != "wallet_balance"]
    rollouts = run_rollouts(create_agent_graph(ReferencePolicy(tasks)), tasks)
    assert all(t.reward == 1.0 for t in rollouts)
    result = extract_experiences(rollouts, "rules", step=5)
    assert result.summary()["tasks"] == len(tasks) and result.fallbacks == 0
    workflows = {e.when_to_use: e for e in result.experiences}
    assert len(workflows) == len({t.metadata["template"] for t in tasks})  # same template, same lesson: merged
    send = workflows["Send <NAME> the message: running late"]
    assert send.content == ("Call `search_contacts` (`query` from the request), then `send_message` (`contact_id` "
                            "from the `search_contacts` result, `text` from the request), then answer.")  # fmt: skip
    same = [t for t in tasks if t.metadata["template"] == "message_contact"]
    assert send.source_task_ids == tuple(t.id for t in same) and len(send.source_trajectory_ids) == len(same)
    assert all(e.step == 5 for e in result.experiences)

    task = same[0]
    search, send_call = task.reference_solution

    def tool(name: str, args: dict) -> AIMessage:
        return AIMessage("", tool_calls=[{"name": name, "args": args, "id": name}])

    script = [tool("search_contacts", {"q": "x"}), tool("lookup_contact", {"query": "x"}),
              tool("send_message", {**send_call.arguments, "contact_id": "c999"}),
              tool("search_contacts", search.arguments), tool("send_message", send_call.arguments),
              AIMessage("Sent.")]  # fmt: skip
    (recovered,) = run_rollouts(create_agent_graph(ScriptedChatModel(script)), [task])
    kinds = [e.metadata["kind"] for e in RulesExtractor().extract_task([recovered]).experiences]
    assert sorted(kinds) == ["tool_precondition", "tool_precondition", "unknown_tool", "workflow"]
    learnt = " ".join(contents(RulesExtractor().extract_task([recovered])))
    assert "use `search_contacts` instead" in learnt and "`query`, not `q`" in learnt
    assert "take `contact_id` from the `search_contacts` result" in learnt and "c999" not in learnt


# -- LLM extractor --------------------------------------------------------------------------


async def test_llm_extractor_keeps_validated_experiences_with_provenance():
    model = ScriptedModel([EXTRACTED, '[{"index": 1, "score": 9, "reason": "specific"}, {"index": 2, "score": 2}]'])
    extractor = LLMExtractor(model, backoff_s=0)
    result = await aextract_experiences([solved("a"), failed("b"), solved("c"), solved("d")], extractor, step=4)
    (kept,) = result.experiences
    assert kept.content == "Search the contact first and pay with its id." and kept.score == 0.9
    assert kept.source_trajectory_ids == ("a", "c", "b") and kept.source_task_ids == ("pay-lea",) and kept.step == 4
    assert kept.metadata["validation_reason"] == "specific" and kept.metadata["validated"] is True
    assert [e.content for e in result.rejected] == ["Be careful."]  # 2/10 < min_score
    prompt = model.log.calls[0][0].text
    assert DEFAULT_COMPARISON_INSTRUCTIONS in prompt and "Success 2" in prompt and "Success 3" not in prompt
    assert "Failure 1" in prompt and "Error: no contact 'Lea'" in prompt
    assert "Candidate experiences:\n1. when_to_use: paying a contact by name" in model.log.calls[1][0].text
    assert result.summary()["model_calls"] == 2 and extractor.stats.candidates == 2
    model = ScriptedModel([EXTRACTED, '[{"index": 1, "score": 9}, {"index": 2, "score": 2}]'])
    lenient = extract_experiences([solved()], LLMExtractor(model, backoff_s=0), min_score=0.1)
    assert len(lenient.experiences) == 2  # the threshold is configurable


async def test_llm_extractor_retries_an_unreadable_answer():
    model = ScriptedModel(["I think the agent did well!", EXTRACTED, "1: 8"])
    answer_ = await LLMExtractor(model, backoff_s=0).aextract_task([failed()], max_experiences=1)
    assert contents(answer_) == ["Search the contact first and pay with its id."]  # capped at max_experiences
    assert answer_.attempts == 3 and not answer_.fallback
    retry = model.log.calls[1]
    assert (
        len(retry) == 3 and "could not be read" in retry[2].text and DEFAULT_FAILURE_ONLY_INSTRUCTIONS in retry[0].text
    )
    model = ScriptedModel([EXTRACTED, "Candidate 1: 8/10", '[{"index": 2, "score": 6}]'])
    answer_ = await LLMExtractor(model, backoff_s=0).aextract_task([solved()])
    assert [e.score for e in answer_.experiences] == [0.8, 0.6] and answer_.attempts == 3  # merged across attempts
    assert "no score for candidate(s) 2." in model.log.calls[2][-1].text


async def test_llm_extractor_unreadable_or_failing_model_is_a_counted_fallback():
    extractor = LLMExtractor(ScriptedModel(["no json here"]), max_retries=2, backoff_s=0)
    result = await aextract_experiences([solved(), solved(task=Task(id="other", query="Pay Bo 5 dollars."))],
                                        extractor)  # fmt: skip
    assert result.experiences == () and result.fallbacks == 2 and extractor.stats.fallbacks == 2
    assert all(t.attempts == 3 and "unreadable answer" in (t.error or "") for t in result.tasks)
    assert result.summary()["fallback_share"] == 1.0
    broken = LLMExtractor(ScriptedModel([RuntimeError("rate limited")]), max_retries=1, backoff_s=0)
    (task,) = extract_experiences([solved()], broken).tasks
    assert task.fallback and "RuntimeError: rate limited" in (task.error or "") and task.attempts == 2
    unscored = LLMExtractor(ScriptedModel([EXTRACTED, "looks fine"]), max_retries=1, backoff_s=0)
    (task,) = extract_experiences([solved()], unscored).tasks
    assert task.fallback and "validation" in (task.error or "") and task.experiences == ()
    empty = extract_experiences([solved()], LLMExtractor(ScriptedModel(["[]"]), backoff_s=0))
    assert empty.experiences == () and empty.fallbacks == 0  # "nothing to learn" is an answer, not a failure


async def test_llm_extractor_without_validation_and_token_accounting():
    model = ScriptedModel(["oops", EXTRACTED], usage=(1000, 200))
    extractor = LLMExtractor(model, validate=False, backoff_s=0, price_per_1k_input=0.5, price_per_1k_output=2.0)
    (task,) = (await aextract_experiences([solved()], extractor)).tasks
    assert [e.score for e in task.experiences] == [1.0, 1.0] and not task.experiences[0].metadata["validated"]
    assert (task.input_tokens, task.output_tokens) == (2000, 400) and task.cost_usd == pytest.approx(1.8)
    assert extractor.stats.to_dict() | {"cost_usd": 0} == {"tasks": 1, "model_calls": 2, "fallbacks": 0,
                                                           "candidates": 2, "input_tokens": 2000,
                                                           "output_tokens": 400, "cost_usd": 0}  # fmt: skip


async def test_llm_extractor_bounds_concurrency():
    model = ScriptedModel([EXTRACTED], delay=0.05)
    extractor = LLMExtractor(model, validate=False, concurrency=2)
    tasks = [Task(id=f"t{i}", query=f"Pay Lea {i} dollars.") for i in range(5)]
    result = await aextract_experiences([solved(f"r{i}", task=t) for i, t in enumerate(tasks)], extractor)
    assert model.log.peak == 2 and len(result.tasks) == 5
    # the same two lessons from five tasks: kept once each, with the provenance of all five
    assert len(result.experiences) == 2 and all(len(e.source_task_ids) == 5 for e in result.experiences)


def test_llm_extractor_with_the_project_scripted_chat_model():
    from langgraph_evolver.testing import ScriptedChatModel

    model = ScriptedChatModel([AIMessage(EXTRACTED), AIMessage('{"scores": [6, 8]}')])
    result = extract_experiences([solved()], make_extractor(model, backoff_s=0))
    assert [(e.content, e.score) for e in result.experiences] == [
        ("Be careful.", 0.8), ("Search the contact first and pay with its id.", 0.6)
    ]  # fmt: skip


def test_answer_parsing_is_lenient():
    text = '<think>[oops]</think> Here: {"experiences": [{"when": "w", "advice": "a"}]}'
    assert parse_experiences(text) == [("w", "a")]
    assert parse_experiences('[{"when_to_use": "w"}]') is None and parse_experiences("nothing") is None
    assert parse_scores("Candidate 1: 7/10\n**2**: 3", 2) == {1: (7.0, ""), 2: (3.0, "")}
    assert parse_scores('{"1": 12, "3": 5}', 2) == {1: (10.0, "")}


# -- make_extractor, selection, node --------------------------------------------------------


def test_make_extractor_builds_and_rejects_specs():
    assert isinstance(make_extractor(" Rules ", success_threshold=0.5), RulesExtractor)
    llm = make_extractor(ScriptedModel(["x"]), concurrency=3)
    assert isinstance(llm, LLMExtractor) and llm.concurrency == 3 and llm.name == "llm:scripted-extractor"
    built = make_extractor("openai:gpt-4.1-mini", model_kwargs={"api_key": "sk-test"}, max_retries=0)
    assert isinstance(built, LLMExtractor) and built.name == "llm:gpt-4.1-mini"
    ready = RulesExtractor()
    assert make_extractor(ready) is ready
    with pytest.raises(ConfigError, match="Cannot build the extractor model 'no-such-provider:model'.*'rules'"):
        make_extractor("no-such-provider:model")
    with pytest.raises(ConfigError, match="'rules', a chat-model string"):
        make_extractor(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="empty string"):
        make_extractor("  ")
    with pytest.raises(ConfigError, match="RulesExtractor got a bad option"):
        make_extractor("rules", concurrency=3)
    with pytest.raises(ConfigError, match="only apply when make_extractor builds"):
        make_extractor(ready, success_threshold=0.5)
    with pytest.raises(ConfigError, match="may use only the fields"):
        LLMExtractor(ScriptedModel(["x"]), prompt="Lessons from {rollouts}")
    with pytest.raises(ConfigError, match="concurrency must be >= 1"):
        LLMExtractor(ScriptedModel(["x"]), concurrency=0)
    with pytest.raises(ConfigError, match="min_score"):
        extract_experiences([solved()], "rules", min_score=7)


def test_selection_caps_per_task_and_merges_across_tasks():
    def exp(text: str, score: float, task: str) -> Experience:
        return Experience(id=experience_id("w", text), when_to_use="w", content=text, score=score,
                          source_trajectory_ids=(f"r-{task}",), source_task_ids=(task,))  # fmt: skip

    answers = [
        TaskExtraction(task_id="a", extractor="x", experiences=(exp("low", 0.6, "a"), exp("top", 0.9, "a"))),
        TaskExtraction(task_id="b", extractor="x", experiences=(exp("top", 0.7, "b"), exp("bad", 0.1, "b"))),
        TaskExtraction(task_id="c", extractor="x", error="failed"),
    ]
    result = select_experiences(answers, max_per_task=1, min_score=0.5)
    (top,) = result.experiences
    assert top.content == "top" and top.score == 0.9 and top.source_task_ids == ("a", "b")
    assert top.source_trajectory_ids == ("r-a", "r-b")
    assert sorted(e.content for e in result.rejected) == ["bad", "low"] and result.fallbacks == 1


async def test_extraction_node_in_a_graph():
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class State(TypedDict, total=False):
        trajectories: list
        step: int
        experiences: list

    node = create_extraction_node("rules", step_key="step")
    graph = StateGraph(State).add_node("extract", node).add_edge(START, "extract").add_edge("extract", END)
    out = await graph.compile().ainvoke({"trajectories": [solved().to_dict(), failed().to_dict()], "step": 2})
    (workflow,) = [Experience.from_dict(e) for e in out["experiences"]]
    assert workflow.when_to_use == "Pay <NAME> <NUM> dollars." and workflow.step == 2
    llm_node = create_extraction_node(ScriptedModel([EXTRACTED]), input_key="rollouts", output_key="lessons",
                                      validate=False)  # fmt: skip
    assert len((await llm_node({"rollouts": [solved()]}))["lessons"]) == 2
    with pytest.raises(ConfigError, match="state\\['trajectories'\\]"):
        await node({"other": 1})


def test_docstring_examples():
    for name in ("prompts", "extractor", "rules", "llm_extractor", "extract"):
        module = importlib.import_module(f"langgraph_evolver.experience.{name}")
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, name

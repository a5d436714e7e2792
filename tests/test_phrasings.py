"""Other wordings of a synthesized request (``langgraph_evolver.questioning.phrasings``) and how ``trainers.evolve
adapt`` uses them: each supervised chat in the task's next wording, GRPO's pool in all of them, validation in a
drawn one (issue 43). Library run 13's adapter solved 0.91 of the one-call validation requests, worded as the
synthesizer words them, and 0.38 of the hand-written ones."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from langgraph_evolver.environment import environment_factory
from langgraph_evolver.questioning.phrasings import (
    PHRASINGS_KEY,
    SYNONYMS,
    alternates,
    phrased,
    terse_clause,
    terse_request,
)
from langgraph_evolver.questioning.wording import Owned
from langgraph_evolver.types import Task, ToolCall, ToolObservation, write_jsonl

ROOT = Path(__file__).resolve().parent.parent
SEARCH = f"mcp:{sys.executable} {ROOT / 'tests' / 'mcp_search_server.py'}"


@pytest.mark.parametrize(
    ("name", "arguments", "description", "names", "wants", "expected"),
    [
        ("book", {"patient": "Lily Park", "slot_id": "S3"}, "Book a slot for a patient.", {}, True,
         "Lily Park wants to book slot S3"),
        ("cancel", {"booking_id": "B1"}, "Cancel a booking; its slot becomes free again.", {}, False,
         "cancel booking B1"),
        ("cancelShipment", {"tracking_number": "TRK3"}, "Cancel a shipment.",
         {"TRK3": Owned("Jonas Weber", "shipment")}, True, "Jonas Weber wants to cancel the shipment"),
        ("pay_fine", {"member_id": "M2", "amount": 1}, "Pay some of a fine.", {"M2": "Ben Osei"}, False,
         "pay fine of 1 for Ben Osei"),
        ("find_slots", {"doctor_id": "D1"}, "Free slots of a doctor.", {"D1": "Dr Ana Ruiz"}, False,
         "show me Dr Ana Ruiz's slots"),
        ("get_doctor", {"doctor_id": "D1"}, "One doctor.", {"D1": "Dr Ana Ruiz"}, False, "look up Dr Ana Ruiz"),
        ("find_slots", {"doctor_id": "D1", "date": "2026-03-02"}, "Free slots.", {}, False,
         "show me doctor D1's slots for date 2026-03-02"),
        ("search_books", {"query": "Beloved"}, "Books whose title contains the text.", {}, False, "look up Beloved"),
        ("get_cell", {"sheet": "Budget", "cell": "B3"}, "A cell's value.", {}, False,
         "look up sheet Budget and cell B3"),
        ("create_shipment", {"recipient": "Ana Lima", "city": "Porto", "weight_kg": 2}, "Create a shipment.", {}, True,
         "Ana Lima wants to create shipment city Porto weight kg 2"),
        ("add_sheet", {"name": "Trips", "headers": ["Date", "Cost"]}, "Create an empty sheet.", {}, False,
         "add sheet name Trips headers Date, Cost"),
        ("list_doctors", {"specialty": ""}, "Doctors, optionally of one specialty.", {}, False,
         "list all the doctors"),
        ("zone_info", {"zone": "north"}, "Fee per month for one zone.", {}, False, None),  # no verb in the name
    ],
)  # fmt: skip
def test_a_call_is_asked_in_few_words_from_its_tool_s_verb_and_the_names(name, arguments, description, names,
                                                                         wants, expected):  # fmt: skip
    """Whatever the server: the verb the tool's name starts with, the values (a named record by its name, the
    person it is for first with ``wants``), nothing of the description's qualifiers; no verb, no terse form."""
    call = ToolCall(name=name, arguments=arguments)
    assert terse_clause(call, description, {}, names, wants=wants, quote=False) == expected


def test_a_request_s_wordings_name_the_same_values_and_differ_from_it():
    """``alternates``: the terse wording and the description's under another draw, never the request itself nor
    one twice; an id the request names by its record's name stays a name in every wording (the reference looks
    it up), an id it gives stays an id."""
    obs = ToolObservation(call_id="c", name="reserve", content='{"ok": true}')
    descriptions = {"reserve": "Join the waiting list for a book.", "get_book": "One book: title and copies."}
    by_name = [(ToolCall(name="reserve", arguments={"member_id": "M4", "book_id": "B102"}), obs)]
    names = {"M4": "Dev Patel", "B102": "Beloved"}
    for seed in range(6):
        query = f"Please join the waiting list for book 'Beloved' with member 'Dev Patel' ({seed})."
        others = alternates(query, by_name, descriptions, {}, seed=seed, names=names)
        assert 1 <= len(others) <= 3 and query not in others and len(set(others)) == len(others)
        for text in others:
            assert "Dev Patel" in text and "Beloved" in text and "M4" not in text and "B102" not in text
        assert any(f" {verb} " in f" {text.lower()} " for text in others for verb in SYNONYMS["reserve"])  # everyday
    by_id = [(ToolCall(name="get_book", arguments={"book_id": "B102"}), obs),
             (ToolCall(name="reserve", arguments={"member_id": "M4", "book_id": "B102"}), obs)]  # fmt: skip
    text = terse_request(by_id, descriptions, {"B102": "Beloved"}, seed=1)
    assert text is not None and text.count("B102") == 2 and "M4" in text and text.endswith(".")
    assert terse_request([(ToolCall(name="zone_info", arguments={"zone": "n"}), obs)], {}, {}) is None


def test_the_colloquial_wording_says_a_write_in_everyday_verbs_and_only_where_it_differs():
    """People name what they want in their own verb ("check in loan L2", "call off booking B7"): ``SYNONYMS`` is a
    table of common English verbs, and the colloquial wording is an alternate only where a write's verb has some."""
    obs = ToolObservation(call_id="c", name="x", content='{"ok": true}')
    back = [(ToolCall(name="return_book", arguments={"loan_id": "L2"}), obs)]
    said = {terse_request(back, {}, {}, seed=s, colloquial=True) for s in range(12)}
    assert said <= {f"{v[:1].upper()}{v[1:]} book loan L2." for v in SYNONYMS["return"]} and len(said) >= 2
    assert terse_request(back, {}, {}, seed=0) == "Return book loan L2."  # the tool's own verb otherwise
    archive = [(ToolCall(name="archive_note", arguments={"note_id": "N1"}), obs)]  # no everyday verb listed
    plain = terse_request(archive, {"archive_note": "Archive a note."}, {}, seed=0)
    assert plain == terse_request(archive, {"archive_note": "Archive a note."}, {}, seed=0, colloquial=True)
    others = alternates("Please archive note N1.", archive, {"archive_note": "Archive a note."}, {}, seed=0)
    assert others.count(plain) == 1 and len(others) == len(set(others))  # no wording twice
    reads = [(ToolCall(name="get_member", arguments={"member_id": "M2"}), obs)]  # a read keeps its words
    assert terse_request(reads, {}, {}, seed=3, colloquial=True) == terse_request(reads, {}, {}, seed=3)


def test_synthesized_tasks_on_an_mcp_server_carry_other_wordings():
    """On a real FastMCP server the synthesized tasks keep their other wordings in metadata; a fact question
    (``metadata["fact"]``) is asked under other templates of the same field."""
    from langgraph_evolver.questioning import synthesize_tasks

    env = f"mcp:{sys.executable} {ROOT / 'examples' / 'mcp_servers' / 'library.py'}"
    tasks, _ = synthesize_tasks(env, 30, seed=0, progress=False)
    worded = [t for t in tasks if t.metadata.get(PHRASINGS_KEY)]
    assert len(worded) >= 0.8 * len(tasks)
    for task in worded:
        assert task.query not in task.metadata[PHRASINGS_KEY]
    facts = [t for t in worded if t.metadata.get("fact")]
    assert facts and all(t.query.endswith("?") or t.query.endswith(".") for t in facts)
    assert any(re.search(r" wants to | for ", p) for t in worded for p in t.metadata[PHRASINGS_KEY])


def _task(tid: str, query: str, *others: str) -> Task:
    call = ToolCall(name="search_people", arguments={"query": "Grace Hopper"})
    return Task(id=tid, query=query, env=SEARCH, reference_solution=(call,),
                metadata={"answer": "P8", **({PHRASINGS_KEY: list(others)} if others else {})})  # fmt: skip


def test_phrased_counts_round_the_wordings_and_keeps_the_task():
    task = _task("t", "What is Grace Hopper's id?", "Look up Grace Hopper.", "Find Grace Hopper's id.")
    assert [phrased(task, i).query for i in range(4)] == [task.query, "Look up Grace Hopper.",
                                                          "Find Grace Hopper's id.", task.query]  # fmt: skip
    assert phrased(task, 1).id == task.id and phrased(task, 1).reference_solution == task.reference_solution
    assert phrased(_task("u", "Alone."), 3).query == "Alone."


def test_each_supervised_chat_of_a_task_asks_in_its_next_wording():
    """The reference chat asks in the request, the next chat (the answer after a repeat) in the first other
    wording: the same calls are taught under two shapes at no more examples."""
    from transformers import AutoTokenizer

    from trainers.evolve.adapt_data import supervised_examples

    tokenizer = AutoTokenizer.from_pretrained(str(ROOT / "checkpoints" / "tiny-policy"))
    task = _task("t", "What is Grace Hopper's id?", "Look up Grace Hopper and give me the id.")
    examples, counts = supervised_examples([task], [], tokenizer, environment_factory(SEARCH), repeats=True)
    assert (counts["reference"], counts["repeat"]) == (1, 1) and len(examples) == 2
    texts = [tokenizer.decode(ids) for ids, _ in examples]
    assert task.query in texts[0] and "Look up Grace Hopper and give me the id." not in texts[0]
    assert "Look up Grace Hopper and give me the id." in texts[1] and task.query not in texts[1]


def test_grpo_draws_every_wording_and_validation_asks_in_a_drawn_one(tmp_path):
    """The rl part's store holds each task once in each wording (ids ``<id>~w<i>``, the same reference); a
    validation task is asked in one of its wordings, drawn with the seed, the same for the same seed."""
    from langgraph_evolver.questioning import TaskStore
    from trainers.evolve.adapt_data import split_tasks
    from trainers.evolve.adapt_grpo import _store

    tasks = [_task("a", "Find A.", "Look up A.", "A, please."), _task("b", "Find B.")]
    write_jsonl(tmp_path / "rl.jsonl", tasks)
    with TaskStore(_store(tmp_path / "rl.jsonl", tmp_path / "rl.sqlite")) as store:
        stored = {t.id: t for t in store.list()}
    assert {k: v.query for k, v in stored.items()} == {"a": "Find A.", "a~w1": "Look up A.", "a~w2": "A, please.",
                                                       "b": "Find B."}  # fmt: skip
    assert stored["a~w2"].reference_solution == tasks[0].reference_solution

    many = [Task(id=f"v{i}", query=f"Find {i}.", env=SEARCH,
                 reference_solution=(ToolCall(name="search_people", arguments={"query": str(i)}),),
                 metadata={PHRASINGS_KEY: [f"Look up {i}.", f"{i}, please."]}) for i in range(30)]  # fmt: skip
    asked = [t.query for t in split_tasks(many, (0.0, 0.5, 0.5), seed=3)["validation"]]
    assert asked == [t.query for t in split_tasks(many, (0.0, 0.5, 0.5), seed=3)["validation"]]
    shapes = {"Find" if q.startswith("Find") else "Look" if q.startswith("Look") else "please" for q in asked}
    assert shapes == {"Find", "Look", "please"}

"""Self-questioning on MCP servers written the ordinary way (issue 39): ``examples/mcp_servers/``.

Five FastMCP servers in unlike styles, run over stdio as a user would: bare ``list[str]`` and
``list[dict]`` results (several content blocks), plain ``dict`` results, text results that name an id
("permit 3 revoked", "note n2 saved"), pydantic models with ``structuredContent`` (one tool whose data
is only there), exceptions for errors. The explorer must read every shape and reach the write tools;
the tasks must be worded from the tools' descriptions, never repeat a call, and come from more than one
initial state; a tool no result can open must be named, with what was missing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding

from langgraph_evolver.environment import load_environment
from langgraph_evolver.questioning import synthesize_tasks
from langgraph_evolver.questioning.answers import expected_values
from langgraph_evolver.questioning.explore import exploration_task, explore_environment
from langgraph_evolver.questioning.results import read_result, render_result
from langgraph_evolver.types import Action, ToolCall

ROOT = Path(__file__).resolve().parents[1]
SERVERS = ROOT / "examples" / "mcp_servers"


def spec(server: str) -> str:
    return f"mcp:{sys.executable} {SERVERS / server}"


# what each server's writes are, and one id-taking write the explorer can only reach through an earlier result
WRITES = {
    "permits.py": ({"apply_permit", "renew_permit", "revoke_permit"}, "revoke_permit"),
    "clinic.py": ({"book", "cancel"}, "cancel"),
    "notes_text.py": ({"add_note", "pin_note", "delete_note"}, "pin_note"),
    "inventory_models.py": ({"restock", "place_order", "cancel_order"}, "cancel_order"),
    "rooms_plain.py": ({"reserve", "release"}, "release"),
}


# -- results as servers send them ------------------------------------------------------------------------------


def test_results_are_read_in_every_shape_a_fastmcp_server_sends():
    blocks = '{\n  "id": "D1",\n  "name": "Dr Ana Ruiz"\n}\n{\n  "id": "D2",\n  "name": "Dr Omar Haddad"\n}'
    assert read_result(blocks) == [{"id": "D1", "name": "Dr Ana Ruiz"}, {"id": "D2", "name": "Dr Omar Haddad"}]
    assert read_result("north\nharbour\nold town") == ["north", "harbour", "old town"]
    assert read_result("permit 3 revoked") == {"permit_id": 3}
    assert read_result("note n2 saved") == {"note_id": "n2"}
    assert read_result("n1: Groceries\nn2: Gym (pinned)")[1] == {"text": "n2: Gym (pinned)", "id": "n2",
                                                                 "value": "Gym (pinned)"}  # fmt: skip
    assert read_result('{"zone": "north", "fee": 12.5}') == {"zone": "north", "fee": 12.5}
    assert read_result("") is None and read_result("Order placed.") == "Order placed."


def test_structured_content_the_text_lacks_is_shown_and_nothing_is_repeated():
    assert render_result("Order placed.", {"order_id": 501}) == 'Order placed.\n{"order_id": 501}'
    shown = '{\n  "sku": "SKU-100",\n  "stock": 4\n}'
    assert render_result(shown, {"sku": "SKU-100", "stock": 4}) == shown  # FastMCP repeats the data as text
    assert render_result("north\nharbour", {"result": ["north", "harbour"]}) == "north\nharbour"
    assert render_result("done", None) == "done"
    rows = [["Item", "Amount"], ["Rent", 1200]]  # one block a cell: where a row ends is only in the structure
    assert render_result("Item\nAmount\nRent\n1200", {"result": rows}) == '[["Item", "Amount"], ["Rent", 1200]]'
    assert render_result(json.dumps(rows), {"result": rows}) == json.dumps(rows)  # the text shows the rows


def test_read_tasks_expect_whole_values_from_blocks_and_lines():
    """The old reader split the doctors' names into "Dr", "Ana", "Ruiz" and found nothing in lower-case lines."""
    doctors = '{\n  "id": "D1",\n  "name": "Dr Ana Ruiz"\n}\n{\n  "id": "D2",\n  "name": "Dr Omar Haddad"\n}'
    values = expected_values("List the clinic's doctors.", [ToolCall(name="list_doctors", arguments={})], [doctors])
    assert "Dr Ana Ruiz" in values and "Dr Omar Haddad" in values and "Ana" not in values
    zones = expected_values("List the zones.", [ToolCall(name="list_zones", arguments={})], ["north\nold town"])
    assert zones == ["north", "old town"]


def test_an_order_only_in_structured_content_reaches_the_agent_and_the_explorer():
    env = load_environment(spec("inventory_models.py"))
    try:
        env.reset(exploration_task(None, env="inventory"))
        result = env.step(Action(tool_calls=(ToolCall(name="place_order", arguments={"sku": "SKU-100", "quantity": 1},
                                                      id="c1"),)))  # fmt: skip
        text = result.observations[0].content
        assert text.startswith("Order placed.") and json.loads(text.splitlines()[-1])["order_id"] == 501
    finally:
        env.close()


# -- exploration reaches the write tools -----------------------------------------------------------------------


def explored_calls(name: str) -> list[tuple[ToolCall, Any]]:
    """(call, observation) of one seeded exploration of the environment ``name``."""
    return explore_environment(name, seed=0).tool_results()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("server", sorted(WRITES))
def test_exploration_reaches_the_write_tools_of_every_style(server):
    writes, needs_id = WRITES[server]
    pairs = explored_calls(spec(server))
    ok = {c.name for c, o in pairs if not o.is_error}
    assert len(ok & writes) >= 2 and needs_id in ok, (server, sorted(ok))


@pytest.mark.timeout(300)
def test_ids_that_only_a_search_returns_are_found_with_broad_probes():
    """``search_people(query)`` is the only way to an id: the explorer's free text for a read tool starts broad
    (the empty string, then common letters), so the search answers with people and their ids open the rest; a
    value an error lists ("statuses: away, busy, free") fills that argument next time."""
    pairs = explored_calls(f"mcp:{sys.executable} {ROOT / 'tests' / 'mcp_search_server.py'}")
    searches = [c.arguments["query"] for c, _ in pairs if c.name == "search_people"]
    assert searches and searches[0] == "", searches  # the broadest probe first
    ok = {c.name for c, o in pairs if not o.is_error}
    assert {"get_person", "send_message"} <= ok, sorted(ok)
    # set_status takes only the values its error lists ("statuses: away, busy, free"): learnt from that error
    statuses = [(c.arguments.get("status"), o.is_error) for c, o in pairs if c.name == "set_status"]
    assert any(not failed for _, failed in statuses), statuses


@pytest.mark.timeout(300)
def test_a_tool_an_error_names_is_called_first_then_the_failed_call_again():
    """``invite`` fails while dues are owed ("Ada Lovelace owes 2.50 in dues; pay_dues first"): the explorer
    pays with the amount the error names for the same person, then invites again, and the invitation goes
    through. A random amount never pays exactly 2.50, 3.50 or 1.25."""
    pairs = explored_calls(f"mcp:{sys.executable} {ROOT / 'tests' / 'mcp_search_server.py'}")
    names = [c.name for c, _ in pairs]
    for i, (call, obs) in enumerate(pairs[:-2]):
        if call.name == "invite" and obs.is_error and "pay_dues first" in obs.content:
            paid, again = pairs[i + 1], pairs[i + 2]
            assert paid[0].name == "pay_dues" and paid[0].arguments["person_id"] == call.arguments["person_id"]
            assert not paid[1].is_error, paid[1].content
            assert again[0].name == "invite" and again[0].arguments == call.arguments and not again[1].is_error
            break
    else:
        pytest.fail(f"no invite failed for dues and was retried: {names}")


@pytest.mark.timeout(600)
def test_synthesized_requests_name_records_and_their_reference_looks_them_up():
    """People ask "message Grace Hopper", not "message person P8": a task may name a record by its name, and
    then its reference begins with the lookup that finds the id (the search, with that name), checked on
    replay. A lookup that does not find the record makes the task infeasible."""
    import dataclasses

    from langgraph_evolver.questioning.filters import check_feasibility
    from langgraph_evolver.questioning.synthesize import RESOLVES_KEY

    name = f"mcp:{sys.executable} {ROOT / 'tests' / 'mcp_search_server.py'}"
    tasks, _ = synthesize_tasks(name, 12, embeddings=DeterministicFakeEmbedding(size=32), max_explorations=4,
                                progress=False)  # fmt: skip
    named = [t for t in tasks if t.metadata.get(RESOLVES_KEY)]
    assert named, [t.query for t in tasks]
    people = {"P7": "Ada Lovelace", "P8": "Grace Hopper", "P9": "Alan Turing"}
    for task in named:
        for index, record in task.metadata[RESOLVES_KEY]:
            lookup = task.reference_solution[index]
            assert lookup.name == "search_people" and lookup.arguments["query"] == people[record], task
            assert people[record] in task.query and record not in task.query, task.query
    task = named[0]
    index = task.metadata[RESOLVES_KEY][0][0]
    wrong = [*task.reference_solution]
    wrong[index] = ToolCall(name="search_people", arguments={"query": "Nobody Here"})
    broken = dataclasses.replace(task, reference_solution=tuple(wrong))
    reason, _ = check_feasibility(broken, lambda t: load_environment(t.env))
    assert reason == "a lookup does not find the record the request names"


# -- the whole pipeline ----------------------------------------------------------------------------------------


def _tools_of(server: str) -> set[str]:
    return {n for n in WRITES[server][0]} | {"list_zones", "zone_info", "list_permits", "list_doctors", "find_slots",
                                              "get_booking", "list_notes", "read_note", "list_items", "get_item",
                                              "list_rooms", "room_schedule", "my_reservations"}  # fmt: skip


@pytest.mark.timeout(900)
@pytest.mark.parametrize("server", ["permits.py", "clinic.py", "notes_text.py"])
def test_questioning_stores_state_changing_tasks_worded_from_descriptions(server):
    """Verified tasks, at least half of them changing state, each reaching a write tool of the server's; worded
    from the tools' descriptions (no "use <tool>", no bare tool name); no call repeated in a task; from more
    than one explored initial state."""
    tasks, report = synthesize_tasks(spec(server), 4, embeddings=DeterministicFakeEmbedding(size=32),
                                     max_explorations=6, progress=False)  # fmt: skip
    assert report.kept == 4 and report.state_changing >= 0.5, report
    writes = WRITES[server][0]
    assert {c.name for t in tasks for c in t.reference_solution} & writes
    assert report.initial_states >= 2 and any(t.metadata.get("setup") for t in tasks), report
    for task in tasks:
        calls = [(c.name, json.dumps(c.arguments, sort_keys=True)) for c in task.reference_solution]
        assert len(calls) == len(set(calls)), task.query
        assert "(use " not in task.query and not any(name in task.query for name in _tools_of(server) if "_" in name)
        if not task.metadata["feasibility"]["state_changed"]:  # a read: checked by its values, a fact by its answer
            assert task.metadata.get("expected_values") or task.metadata.get("answer"), task.query


NO_LISTING = '''
from mcp.server.fastmcp import FastMCP

mcp = FastMCP("vault")
LOCKERS = {"L-7": "umbrella"}


@mcp.tool()
def count_lockers() -> int:
    """How many lockers are in use."""
    return len(LOCKERS)


@mcp.tool()
def empty_locker(locker_id: str) -> str:
    """Empty a locker."""
    if LOCKERS.pop(locker_id, None) is None:
        raise ValueError(f"no locker {locker_id}")
    return "emptied"


if __name__ == "__main__":
    mcp.run()
'''


@pytest.mark.timeout(300)
def test_a_tool_no_result_can_open_is_named_with_what_was_missing(tmp_path):
    """No tool lists the lockers' ids: the summary says which tool, which argument, and which results could have
    held it, instead of advising more explorations; the exit code says fewer than --n were stored."""
    server = tmp_path / "vault.py"
    server.write_text(NO_LISTING)
    command = ["-m", "langgraph_evolver.questioning", "--env", f"mcp:{sys.executable} {server}", "--n", "3",
               "--max-explorations", "2", "--out", str(tmp_path / "t.sqlite"), "--no-progress"]  # fmt: skip
    out = subprocess.run([sys.executable, *command], capture_output=True, text=True, cwd=ROOT, timeout=280)
    assert out.returncode == 1, out.stderr[-2000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["stored"] < 3
    (entry,) = summary["unreached"]
    assert entry["tool"] == "empty_locker" and entry["missing"] == ["locker_id"] and entry["calls"] == 0
    assert any(s.startswith("count_lockers") for s in entry["could_come_from"])
    assert "never reached empty_locker: no earlier result held 'locker_id'" in out.stdout
    assert "raise --max-explorations" not in out.stdout


# -- wording ---------------------------------------------------------------------------------------------------


def test_requests_are_worded_from_descriptions_and_records_not_tool_names():
    from langgraph_evolver.questioning.wording import clause, describe_with_descriptions, record_names
    from langgraph_evolver.types import ToolObservation

    cancel = ToolCall(name="cancel", arguments={"booking_id": "B1"})
    assert clause(cancel, "", {}) == "cancel booking B1"  # was "cancel a cancel for booking B1 (use cancel)"
    assert clause(cancel, "Cancel a booking; its slot becomes free again.", {}) == "cancel booking B1"
    renew = ToolCall(name="renew_permit", arguments={"permit_id": 2, "months": 3})
    assert clause(renew, "Extend an active permit by some months.", {}) == "extend active permit 2 by 3 months"
    back = ToolCall(name="return_book", arguments={"loan_id": "L1"})  # "Return" acts here: not "tell me a loan"
    assert clause(back, "Return a loan; a late return adds a fine.", {}) == "return loan L1"
    one = ToolCall(name="get_book", arguments={"book_id": "B101"})  # "One book" -> "book B101": not the verb
    assert clause(one, "One book: title, author, year.", {}) == "tell me the book B101"
    everyone = ToolCall(name="find_member", arguments={"name": ""})  # a broad probe names no filter: all of them
    assert clause(everyone, "Members whose name contains the text.", {}) == "tell me all the members"
    assert clause(ToolCall(name="search_categories", arguments={"query": "", "status": ""}), "Categories.", {}) == (
        "tell me all the categories"
    )
    status = ToolCall(name="set_status", arguments={"work_order_id": "wo_7a", "status": "done"})  # one of the choices
    moved = "Move a work order to open, in_progress, waiting_parts or done; answers with one line."
    assert clause(status, moved, {}, quote=False) == "move work order wo_7a to done"  # not "... or done with status"
    plate = ToolCall(name="get_vehicle", arguments={"plate": "GMT509"})  # the value after the noun's head word
    assert clause(plate, "A vehicle by its plate number.", {}) == "tell me a vehicle by plate number GMT509"
    info = ToolCall(name="zone_info", arguments={"zone": "old town"})
    assert clause(info, "Fee per month, permit cap and streets for one zone.", {}) == (
        "tell me the fee per month, permit cap and streets for zone 'old town'"
    )
    doctors = ToolObservation(call_id="1", name="list_doctors", content='{"id": "D1", "name": "Dr Ana Ruiz"}')
    records = record_names([doctors])
    slots = ToolCall(name="find_slots", arguments={"doctor_id": "D1", "date": "2026-12-01"})
    query = describe_with_descriptions(
        [(slots, doctors)], {"find_slots": "Free appointment slots of a doctor on a date (YYYY-MM-DD)."}, records
    )
    assert "doctor D1 (Dr Ana Ruiz)" in query and "date 2026-12-01" in query and "find_slots" not in query


def test_a_share_of_requests_leave_their_values_bare_as_people_write_them():
    """Requests quote their texts and names or leave them bare, by the seed: an adapter taught only on quoted
    values copied a written request's bare word with the space before it (" Budget")."""
    from langgraph_evolver.questioning.wording import QUOTED, clause, describe_with_descriptions, shown_value
    from langgraph_evolver.types import ToolObservation

    add = ToolCall(name="add_sheet", arguments={"name": "Travel", "headers": ["Date", "Cost"]})
    described = "Create an empty sheet with these column headers."
    assert (
        clause(add, described, {})
        == "create an empty sheet with these column headers with name 'Travel' and headers ['Date', 'Cost']"
    )
    assert clause(add, described, {}, quote=False) == (
        "create an empty sheet with these column headers with name Travel and headers Date, Cost"
    )
    assert shown_value("book_id", "B1", {"B1": "Beloved"}, quote=False) == "B1 (Beloved)"  # ids read alike
    assert shown_value("book_id", "B1", {}, {"B1": "Beloved"}, quote=False) == "Beloved"  # a record by its name
    seen = ToolObservation(call_id="1", name="add_sheet", content='{"ok": true}')
    queries = [describe_with_descriptions([(add, seen)], {"add_sheet": described}, {}, seed=s) for s in range(40)]
    bare = sum("name Travel" in q for q in queries)
    assert sum("name 'Travel'" in q for q in queries) + bare == 40 and 0.25 < bare / 40 < 0.75, queries
    assert QUOTED == 0.5 and all(
        describe_with_descriptions([(add, seen)], {"add_sheet": described}, {}, seed=s, quoted=1.0).count("'Travel'")
        == 1
        for s in range(5)
    )


# -- the state a task is checked on ----------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_reads_with_arguments_make_a_booking_visible_so_doing_nothing_scores_zero():
    """The clinic's bookings show in no argument-free tool: without the task's snapshot calls a booking changed
    nothing the check could see (a write task passed for a read, and an agent doing nothing matched its state)."""
    import dataclasses
    import datetime as dt

    from langgraph_evolver.questioning.filters import check_feasibility
    from langgraph_evolver.types import Task

    name = spec("clinic.py")
    day = (dt.date.today() + dt.timedelta(days=1)).isoformat()
    slots = ToolCall(name="find_slots", arguments={"doctor_id": "D2", "date": day})
    book = ToolCall(name="book", arguments={"patient": "Ann Lee", "slot_id": f"D2-{day.replace('-', '')}-1400"})
    task = Task(id="synthetic-book", query="Book Dr Omar Haddad's 14:00 slot for Ann Lee.", env=name,
                reference_solution=(book,), source="synthetic",
                metadata={"snapshot_calls": [{"name": slots.name, "arguments": slots.arguments}]})  # fmt: skip
    bare = dataclasses.replace(task, metadata={})

    def factory(_task: Task):
        return load_environment(name)

    assert check_feasibility(bare, factory)[1]["state_changed"] is False
    reason, info = check_feasibility(task, factory)
    assert reason is None and info["state_changed"] is True
    env = load_environment(name)
    try:
        env.reset(task)
        env.step(Action(content="Booked."))
        assert env.evaluate() == 0.0
        env.reset(task)
        env.step(Action(tool_calls=(dataclasses.replace(book, id="c1"),)))
        env.step(Action(content="Booked."))
        assert env.evaluate() == 1.0
    finally:
        env.close()


@pytest.mark.parametrize(
    "module",
    [
        "tool_results",
        "questioning.wording",
        "questioning.reach",
        "questioning.profile",
        "questioning.offered",
    ],
)
def test_the_new_modules_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"langgraph_evolver.{module}"))
    assert result.failed == 0 and (result.attempted >= 1 or module == "questioning.reach")


def test_a_named_record_s_field_is_asked_as_a_fact_and_checked_by_its_value():
    """Users ask one fact by a name ("How much does Ben Osei owe?"): a record a read returned gives a question
    about one of its plain fields, by the record's name only; its reference is the lookup by that name (and the
    read when the read needs the id), its answer the field's value. Writes and ids give none."""
    from langgraph_evolver.questioning.facts import fact_questions
    from langgraph_evolver.questioning.wording import record_names
    from langgraph_evolver.types import ToolObservation

    def pair(name: str, arguments: dict[str, Any], result: Any) -> tuple[ToolCall, ToolObservation]:
        return ToolCall(name=name, arguments=arguments), ToolObservation(call_id="", name=name,
                                                                         content=json.dumps(result))  # fmt: skip

    members = [{"member_id": "M1", "name": "Ada Novak"}, {"member_id": "M2", "name": "Ben Osei"}]
    pairs = [pair("find_member", {"name": ""}, members),
             pair("get_member", {"member_id": "M2"}, {"member_id": "M2", "name": "Ben Osei", "fine": 2.5,
                                                      "loans": ["L1"], "joined": "2021"}),
             pair("search_books", {"query": ""}, [{"book_id": "B1", "title": "Beloved", "available": 2}]),
             pair("pay_fine", {"member_id": "M2", "amount": 1}, {"member_id": "M2", "fine": 1.5})]  # fmt: skip

    def find(value: str, name: str, _key: str | None = None) -> ToolCall | None:
        tool, key = ("find_member", "name") if value.startswith("M") else ("search_books", "query")
        return ToolCall(name=tool, arguments={key: name})

    names = record_names([obs for _, obs in pairs])
    facts = fact_questions(pairs, names, lambda n: n == "pay_fine", find, seed=3, id_share=1.0)  # every id asked
    by_record = {(f.resolves[0][1], f.field): f for f in facts}
    # M1's listing row has no field; pay_fine writes; Ben's two fields and Beloved's one, and each record's own id
    assert set(by_record) == {("M2", "fine"), ("M2", "joined"), ("M2", "id"), ("B1", "available"), ("B1", "id")}
    for field, answer in (("fine", "2.5"), ("joined", "2021")):
        ben = by_record["M2", field]
        assert ben.reference == (ToolCall(name="find_member", arguments={"name": "Ben Osei"}), pairs[1][0])
        assert ben.answer == answer and "Ben Osei" in ben.query and "M2" not in ben.query and field in ben.query
    book = by_record["B1", "available"]
    assert book.reference == (ToolCall(name="search_books", arguments={"query": "Beloved"}),)  # the search shows it
    assert book.answer == "2" and book.query == "How many of Beloved are available?"  # not "Beloved's available"
    # the id is asked by the name and answered by the lookup alone ("What is Ben Osei's member id?")
    ben_id, book_id = by_record["M2", "id"], by_record["B1", "id"]
    assert ben_id.reference == (ToolCall(name="find_member", arguments={"name": "Ben Osei"}),) and ben_id.answer == "M2"
    assert "member id" in ben_id.query and "Ben Osei" in ben_id.query and "M2" not in ben_id.query
    assert book_id.answer == "B1" and "book id" in book_id.query
    one = fact_questions(pairs, names, lambda n: n == "pay_fine", find, seed=3, per_record=1, id_share=1.0)
    assert len(one) == 4  # one field per record, and the ids
    no_ids = fact_questions(pairs, names, lambda n: n == "pay_fine", find, seed=3, id_share=0.0)
    assert [f for f in facts if f.field != "id"] == no_ids  # people seldom ask an id: ID_SHARE of the records
    # a count its read's description words without its key is asked in those words half the time
    described = {"search_books": "Books whose title contains the text, with how many copies are on the shelf."}
    asked = {f.query for seed in range(8) for f in fact_questions(pairs, names, lambda n: n == "pay_fine", find,
                                                                  seed=seed, descriptions=described)
             if f.field == "available"}  # fmt: skip
    assert asked == {"How many copies of Beloved are on the shelf?", "How many of Beloved are available?"}


def test_a_row_a_named_record_lists_is_asked_by_the_owner_s_name_and_the_row_s_label():
    """People ask "What year is Maria Santos's Honda?": a customer's read lists their vehicles, and a vehicle goes
    by the text that tells it from her others (its make), with what the list holds (a vehicle). The reference is
    the customer's lookup then the read; the answer the row's field. A lone row goes by its first plain text."""
    from langgraph_evolver.questioning.facts import fact_questions
    from langgraph_evolver.questioning.wording import record_names
    from langgraph_evolver.types import ToolObservation

    def pair(name: str, arguments: dict[str, Any], result: Any) -> tuple[ToolCall, ToolObservation]:
        return ToolCall(name=name, arguments=arguments), ToolObservation(call_id="", name=name,
                                                                         content=json.dumps(result))  # fmt: skip

    maria = {
        "customer_id": "cu_1",
        "name": "Maria Santos",
        "vehicles": [
            {"plate": "KRT482", "make": "Toyota", "year": 2016},
            {"plate": "MSN907", "make": "Honda", "year": 2019},
        ],
    }
    nora = {"customer_id": "cu_2", "name": "Nora Lind", "vehicles": [{"plate": "NRL246", "make": "Mazda",
                                                                       "year": 2021}]}  # fmt: skip
    pairs = [pair("find_customers", {"text": ""}, [{"customer_id": "cu_1", "name": "Maria Santos"},
                                                   {"customer_id": "cu_2", "name": "Nora Lind"}]),
             pair("get_customer", {"customer_id": "cu_1"}, maria),
             pair("get_customer", {"customer_id": "cu_2"}, nora)]  # fmt: skip
    names = record_names([obs for _, obs in pairs])

    def find(value: str, name: str, _key: str | None = None) -> ToolCall | None:
        return ToolCall(name="find_customers", arguments={"text": name})

    facts = [f for f in fact_questions(pairs, names, lambda n: False, find, seed=1, id_share=0.0)
             if f.field.startswith("vehicles.")]  # fmt: skip
    asked = {f.field: f for f in facts}
    assert set(asked) == {"vehicles.Toyota.year", "vehicles.Honda.year", "vehicles.Mazda.year"}, asked
    honda = asked["vehicles.Honda.year"]
    assert honda.answer == "2019" and "Maria Santos's Honda vehicle" in honda.query and "year" in honda.query
    assert honda.reference == (ToolCall(name="find_customers", arguments={"text": "Maria Santos"}), pairs[1][0])
    assert honda.resolves == [[0, "cu_1"]] and "cu_1" not in honda.query and "MSN907" not in honda.query
    assert "Nora Lind's Mazda vehicle" in asked["vehicles.Mazda.year"].query
    assert all(len(f.alternates) == 2 and all("Honda" in a or f is not honda for a in f.alternates) for f in facts)


def test_a_record_is_not_asked_for_by_the_name_of_a_record_it_refers_to():
    """A transaction row holds its account's id, and that id is named ("Main checking"): the row is not the
    account, so no question asks "What is Main checking's amount?" of it (budget run 1 made five such, each
    answered by one transaction's value). The account's own row is asked by its name."""
    from langgraph_evolver.questioning.facts import fact_questions
    from langgraph_evolver.questioning.wording import record_names
    from langgraph_evolver.types import ToolObservation

    def pair(name: str, arguments: dict[str, Any], result: Any) -> tuple[ToolCall, ToolObservation]:
        return ToolCall(name=name, arguments=arguments), ToolObservation(call_id="", name=name,
                                                                         content=json.dumps(result))  # fmt: skip

    pairs = [pair("list_accounts", {}, [{"account_id": "chk", "name": "Main checking", "balance": 120.5}]),
             pair("list_transactions", {}, [{"transaction_id": "tx-1", "account_id": "chk", "amount": -9.4,
                                             "date": "2026-11-03"}])]  # fmt: skip
    names = record_names([obs for _, obs in pairs])
    assert names == {"chk": "Main checking"}

    def find(value: str, name: str, _key: str | None = None) -> ToolCall | None:
        return ToolCall(name="list_accounts", arguments={})

    facts = fact_questions(pairs, names, lambda n: False, find, seed=0, id_share=0.0)
    assert [(f.field, f.answer) for f in facts] == [("balance", "120.5")], facts
    assert "Main checking" in facts[0].query


def test_a_record_s_own_read_is_asked_for_by_its_owner_where_that_read_does_not_show_the_owner():
    """``track`` shows a shipment's status, not its recipient: its own id (the first) still goes by the owner a
    listing showed ("What is the status of Jonas Weber's shipment?", the lookup then the read). Session 70's check
    that a record holds the name it is asked by had dropped these (shipping: 42 named candidates, old code 47)."""
    from langgraph_evolver.questioning.facts import fact_questions
    from langgraph_evolver.types import ToolObservation

    def pair(name: str, arguments: dict[str, Any], result: Any) -> tuple[ToolCall, ToolObservation]:
        return ToolCall(name=name, arguments=arguments), ToolObservation(call_id="", name=name,
                                                                         content=json.dumps(result))  # fmt: skip

    pairs = [
        pair("list_shipments", {"recipient": ""}, [{"tracking_number": "TRK3", "recipient": "Jonas Weber"}]),
        pair("track", {"tracking_number": "TRK3"}, {"tracking_number": "TRK3", "status": "created"}),
    ]

    def find(value: str, name: str, key: str | None) -> ToolCall | None:
        return ToolCall(name="list_shipments", arguments={key: name}) if key else None

    facts = fact_questions(pairs[1:], {}, lambda n: False, find, owners={"TRK3": ("recipient", "Jonas Weber")},
                           seed=0)  # fmt: skip
    assert [(f.field, f.answer) for f in facts] == [("status", "created")], facts
    assert "Jonas Weber's shipment" in facts[0].query and "TRK3" not in facts[0].query, facts
    assert facts[0].reference == (ToolCall(name="list_shipments", arguments={"recipient": "Jonas Weber"}), pairs[1][0])


def test_a_record_with_no_name_is_asked_as_a_fact_by_its_owner_or_by_the_id_its_read_took():
    """A shipment has no name: its owner's only shipment is "Jonas Weber's shipment" (the lookup by recipient,
    then the read); one of a person with two goes by the tracking number the read took ("the status of
    TRK4"), the read alone; a listing row of that person gives none (it would not say which)."""
    from langgraph_evolver.questioning.facts import fact_questions
    from langgraph_evolver.types import ToolObservation

    def pair(name: str, arguments: dict[str, Any], result: Any) -> tuple[ToolCall, ToolObservation]:
        return ToolCall(name=name, arguments=arguments), ToolObservation(call_id="", name=name,
                                                                         content=json.dumps(result))  # fmt: skip

    pairs = [pair("list_shipments", {"recipient": ""}, [{"tracking_number": "TRK3", "recipient": "Jonas Weber"},
                                                        {"tracking_number": "TRK4", "recipient": "Hana Sato"},
                                                        {"tracking_number": "TRK5", "recipient": "Hana Sato"}]),
             pair("track", {"tracking_number": "TRK3"}, {"tracking_number": "TRK3", "recipient": "Jonas Weber",
                                                         "status": "created"}),
             pair("track", {"tracking_number": "TRK4"}, {"tracking_number": "TRK4", "recipient": "Hana Sato",
                                                         "status": "in_transit"})]  # fmt: skip
    lookups = []

    def find(value: str, name: str, key: str | None) -> ToolCall | None:
        lookups.append((value, name, key))
        return ToolCall(name="list_shipments", arguments={key: name}) if key else None

    owners = {"TRK3": ("recipient", "Jonas Weber")}
    both = fact_questions(pairs, {}, lambda n: False, find, owners=owners, seed=0)  # TRK4's status and recipient
    assert sorted(f.field for f in both) == ["recipient", "status", "status"], both  # no id question: no name
    lookups.clear()
    facts = fact_questions(pairs, {}, lambda n: False, find, owners=owners, seed=0, per_record=1)
    assert len(facts) == 2, facts
    jonas, hana = sorted(facts, key=lambda f: "TRK4" in f.query)
    assert (jonas.field, jonas.answer) == ("status", "created"), jonas  # his name is not a field to ask
    assert "Jonas Weber's shipment" in jonas.query and "TRK3" not in jonas.query, jonas
    assert jonas.reference == (ToolCall(name="list_shipments", arguments={"recipient": "Jonas Weber"}), pairs[1][0])
    assert jonas.resolves == [[0, "TRK3"]] and lookups == [("TRK3", "Jonas Weber", "recipient")]
    assert "TRK4" in hana.query and hana.reference == (pairs[2][0],) and hana.resolves == []
    assert (hana.field, hana.answer) in {("status", "in_transit"), ("recipient", "Hana Sato")}


@pytest.mark.timeout(300)
def test_a_table_s_rows_are_records_asked_for_by_their_label():
    """A spreadsheet's range (a bare list of rows, the first its headers) holds records with no ids: each row
    goes by its label (the cell under a name header, else under the first column of distinct texts) and gives
    a fact question about one of its other cells, answered by the read alone (which the request names: a
    reference value the request never says is one a model can only memorize) and kept by the filter; rows
    without headers, or of unequal length, are no table."""
    from langgraph_evolver.questioning.facts import table_facts, table_rows
    from langgraph_evolver.questioning.filters import check_feasibility
    from langgraph_evolver.types import Task

    env = load_environment(spec("sheets.py"))
    calls = [ToolCall(name="read_range", arguments={"sheet": "Budget", "cells": "A1:D3"}),
             ToolCall(name="read_range", arguments={"sheet": "Inventory", "cells": "A1:D3"})]  # fmt: skip
    try:
        env.reset(exploration_task(None, env=spec("sheets.py")))
        pairs = [(c, env.step(Action(tool_calls=(c,))).observations[0]) for c in calls]
    finally:
        env.close()
    facts = table_facts(pairs, lambda n: False, seed=0)
    labels = {f.field.split(" of ")[1]: f for f in facts}
    assert set(labels) == {"Rent", "Groceries", "Stapler", "Paper A4"}, facts  # Inventory goes by its Name column
    rent = labels["Rent"]
    assert rent.reference == (calls[0],) and rent.resolves == [] and "Rent" in rent.query
    # the read the request's answer is in, its values quoted or bare (a share of requests each, by the seed)
    assert rent.query.endswith((" Read sheet 'Budget', cells 'A1:D3'.", " Read sheet Budget, cells A1:D3."))
    assert re.search(r"sheet '?Inventory'?, cells '?A1:D3'?\.$", labels["Stapler"].query), labels["Stapler"].query
    bare = {table_facts(pairs, lambda n: False, seed=s)[0].query.endswith("cells A1:D3.") for s in range(8)}
    assert bare == {True, False}  # both forms are made
    assert (rent.field.split(" of ")[0], rent.answer) in {("Category", "housing"), ("Amount", "1200"), ("Paid", "yes")}
    assert labels["Stapler"].answer in {"SKU-11", "14", "Shelf A"}
    assert table_rows([[1, 2], [3, 4]]) == table_rows([["a", "b"], [1]]) == table_rows([["a", "b"]]) == []
    task = Task(id="t", query=rent.query, env=spec("sheets.py"), reference_solution=rent.reference,
                source="synthetic", metadata={"answer": rent.answer, "fact": rent.field})  # fmt: skip
    assert check_feasibility(task, lambda t: load_environment(t.env))[0] is None


def test_a_result_s_list_of_records_with_no_id_gives_questions_by_their_label():
    """A month's status holds a list of records with no id ({"category": "dining", "spent": 20.6, ...}): each
    goes by its label column and gives a question scoped by the read's arguments, answered by that read alone
    ("What is the spent of dining for month 2026-11?"). A list of records with ids is ``fact_questions``'s, and
    records of different shapes are no list of records."""
    from langgraph_evolver.questioning.facts import record_rows, table_facts
    from langgraph_evolver.types import ToolObservation

    status = {"month": "2026-11", "budgets": [{"category": "dining", "limit": 40, "spent": 20.6, "over": False},
                                              {"category": "rent", "limit": 1200, "spent": 1150, "over": False}],
              "total_spent": 1170.6}  # fmt: skip
    call = ToolCall(name="budget_status", arguments={"month": "2026-11"})
    facts = table_facts([(call, ToolObservation(call_id="", name=call.name, content=json.dumps(status)))],
                        lambda n: False, seed=0)  # fmt: skip
    assert len(facts) == 2 and all(f.reference == (call,) and f.resolves == [] for f in facts), facts
    by_label = {f.field.split(" of ")[1]: f for f in facts}
    dining = by_label["dining"]
    assert (dining.field.split(" of ")[0], dining.answer) in {("limit", "40"), ("spent", "20.6")}  # never a bool
    assert "dining" in dining.query and "for month 2026-11" in dining.query and "rent" not in dining.query
    assert all("for month 2026-11" in other for other in dining.alternates)
    assert record_rows([{"id": 1, "n": "a b"}, {"id": 2, "n": "c d"}]) == []  # records with ids
    # a search's rows are asked once each, found by a search for their label, not for what the explorer typed
    payees = [{"payee": "Fresh Mart", "usual": "groceries"}, {"payee": "City Transit", "usual": "transport"}]
    searched = [
        (
            ToolCall(name="find_payee", arguments={"text": t}),
            ToolObservation(call_id="", name="find_payee", content=json.dumps(payees)),
        )
        for t in ("a", "t")
    ]
    asked = table_facts(searched, lambda n: False, seed=0)
    assert sorted((f.reference[0].arguments["text"], f.answer) for f in asked) == [
        ("City Transit", "transport"),
        ("Fresh Mart", "groceries"),
    ], asked
    assert all("text" not in f.query and "'a'" not in f.query for f in asked), asked
    assert record_rows([{"a": 1}, {"b": 2}]) == [] and record_rows({"rows": [{"a": 1}]}) == []


@pytest.mark.timeout(300)
def test_a_fact_whose_answer_the_reads_do_not_return_is_refused():
    from langgraph_evolver.questioning.filters import check_feasibility
    from langgraph_evolver.types import Task

    reference = (ToolCall(name="find_member", arguments={"name": "Ben Osei"}),
                 ToolCall(name="get_member", arguments={"member_id": "M2"}))  # fmt: skip
    right = Task(id="fact", query="How much is Ben Osei's fine?", env=spec("library.py"), reference_solution=reference,
                 source="synthetic", metadata={"answer": "2.5", "fact": "fine", "resolves": [[0, "M2"]]})  # fmt: skip
    wrong = Task.from_dict({**right.to_dict(), "metadata": {**right.metadata, "answer": "7.25"}})
    assert check_feasibility(right, lambda t: load_environment(t.env))[0] is None
    assert check_feasibility(wrong, lambda t: load_environment(t.env))[0] == "the reads do not return the fact's answer"


@pytest.mark.timeout(300)
def test_a_write_that_needs_two_records_that_agree_is_retried_with_the_value_its_error_names():
    """``assign_desk`` works only for an active person and a desk in their office; its errors name what the record
    is and what it needs ("P2 is on_leave; only an active person gets a desk", "desk D-OSL-1 is in Oslo, not in
    Lima, ..."). The explorer reads the needed value (``list_people(status="active")``, ``list_desks(office=
    "Lima")``) and makes the call again with the argument the error quoted drawn from that read."""
    name = f"mcp:{sys.executable} {ROOT / 'tests' / 'mcp_desks_server.py'}"
    chains = []
    for seed in range(4):
        pairs = explore_environment(name, seed=seed).tool_results()
        for (call, obs), (read, _), (again, result) in zip(pairs, pairs[1:], pairs[2:], strict=False):
            if call.name == again.name == "assign_desk" and obs.is_error and not result.is_error:
                chains.append((read.name, read.arguments, call.arguments, again.arguments))
    reads = {(tool, json.dumps(args, sort_keys=True)) for tool, args, _, _ in chains}
    assert ("list_people", '{"status": "active"}') in reads and ("list_desks", '{"office": "Lima"}') in reads, chains
    for tool, _, failed, again in chains:  # the quoted argument changed, the other kept
        changed = {k for k in failed if failed[k] != again[k]}
        assert changed == ({"person_id"} if tool == "list_people" else {"desk_id"}), (failed, again)


def test_an_error_that_names_only_what_the_record_is_queues_no_read():
    """ "P2 is on_leave" alone says what P2 is, not what the call needs: no read of on-leave people is queued (it
    would only draw another person the call fails for)."""
    from langgraph_evolver.questioning.explore import _Explorer
    from langgraph_evolver.types import ToolObservation

    tools = [{"name": "list_people", "description": "Staff.", "parameters": {"properties": {
                 "status": {"type": "string", "enum": ["active", "on_leave"]}}}},
             {"name": "assign_desk", "description": "Give a person a desk.", "parameters": {"properties": {
                 "person_id": {"type": "string"}, "desk_id": {"type": "string"}},
                 "required": ["person_id", "desk_id"]}}]  # fmt: skip
    explorer = _Explorer(tools, seed=0)
    people = [{"person_id": "P2", "status": "on_leave"}, {"person_id": "P3", "status": "active"}]
    explorer.last_call = ToolCall(name="list_people", arguments={})
    explorer.observe([ToolObservation(call_id="1", name="list_people", content=json.dumps(people))])
    explorer.last_call = ToolCall(name="assign_desk", arguments={"person_id": "P2", "desk_id": "D1"})
    explorer.observe([ToolObservation(call_id="2", name="assign_desk", content="P2 is on_leave", is_error=True)])
    assert explorer.queue == []
    explorer.observe([ToolObservation(call_id="3", name="assign_desk", is_error=True,
                                      content="P2 is on_leave; only an active person gets a desk")])  # fmt: skip
    assert [(c.name, c.arguments) for c in explorer.queue[:1]] == [("list_people", {"status": "active"})]
    assert explorer.next_call("depth").name == "list_people"
    explorer.observe([ToolObservation(call_id="4", name="list_people", content=json.dumps(people[1:]))])
    assert explorer.next_call("depth").arguments == {"person_id": "P3", "desk_id": "D1"}


def test_a_lookup_that_finds_by_id_too_is_tried_with_the_ids_seen_and_noun_first_names_are_read():
    """``member_lookup(who)`` finds a member "by member id, email or name": its free text takes the member ids a bike
    listing showed, not only the id its error's example named (session 73's bike shop read one member of six). A
    noun-first name says what it does by its later verb (``rental_end`` writes, ``member_lookup`` reads)."""
    from langgraph_evolver.questioning.explore import _Explorer
    from langgraph_evolver.questioning.profile import tool_entity, tool_kind
    from langgraph_evolver.types import ToolObservation

    text = {"type": "string"}
    tools = [{"name": "bike_find", "description": "Search every bike.",
              "parameters": {"properties": {"text": text}, "required": ["text"]}},
             {"name": "member_lookup", "description": "A member's card, found by member id (M-0042), email or name.",
              "parameters": {"properties": {"who": text}, "required": ["who"]}},
             {"name": "rental_end", "description": "Check a hired bike back in.",
              "parameters": {"properties": {"bike": text}, "required": ["bike"]}}]  # fmt: skip
    explorer = _Explorer(tools, seed=0)
    assert not explorer.tools["member_lookup"]["writes"] and explorer.tools["rental_end"]["writes"]
    assert not explorer.fillable("rental_end")  # ``bike`` is what bike_find finds: no made-up "bike 7"
    assert (tool_entity("member_lookup"), tool_kind("ticket_add_part", "Use parts from stock")) == ("member", "write")
    explorer.last_call = ToolCall(name="bike_find", arguments={"text": ""})
    bikes = [
        {"code": "BK-1", "owner": {"member_id": "M-0012", "name": "Ada"}},
        {"code": "BK-2", "owner": {"member_id": "M-0070", "name": "Ben"}},
    ]
    explorer.observe([ToolObservation(call_id="1", name="bike_find", content=json.dumps(bikes))])
    assert explorer.fillable("rental_end") and explorer.arguments("rental_end", recent=False)["bike"] in {
        "BK-1",
        "BK-2",
    }
    asked = {explorer.arguments("member_lookup", recent=False)["who"] for _ in range(12)}
    assert {"M-0012", "M-0070"} <= asked, asked
    # a search that does not say it finds by id is not given ids
    assert not {explorer.arguments("bike_find", recent=False)["text"] for _ in range(6)} & {"M-0012", "M-0070"}


def test_a_record_asked_by_a_bare_number_says_what_the_number_is():
    """A ticket whose read took ``ticket_id=104`` is "ticket 104" in its fact questions ("What is the status of
    104?" names nothing a person would say), on the help desk server's own ``get_ticket`` result."""
    from langgraph_evolver.questioning.facts import fact_questions
    from langgraph_evolver.types import ToolObservation

    ticket = {"ticket_id": 104, "subject": "CSV export times out", "status": "open", "priority": "urgent"}
    pairs = [(ToolCall(name="get_ticket", arguments={"ticket_id": 104}),
              ToolObservation(call_id="", name="get_ticket", content=json.dumps(ticket)))]  # fmt: skip
    facts = [f for seed in range(4) for f in fact_questions(pairs, {}, lambda n: False, lambda *a: None, seed=seed)]
    assert facts and all("ticket 104" in f.query and "ticket ticket" not in f.query for f in facts), facts
    assert all(f.reference == (pairs[0][0],) for f in facts)


def test_a_write_s_free_text_is_what_people_would_type_and_is_not_drawn_twice():
    """Nothing seen fills a new ticket's ``subject`` or a comment's ``text``: the explorer draws everyday text by
    what the argument holds ("Office move", "Waiting for the new part"), not "subject 39"; a value the server
    already showed, or one this exploration used, is not drawn again; a kind it does not know keeps the label."""
    from langgraph_evolver.questioning.explore import _Explorer
    from langgraph_evolver.questioning.lexicon import plausible_text
    from langgraph_evolver.types import ToolObservation

    text = {"type": "string"}
    tools = [{"name": "list_tickets", "description": "Tickets.", "parameters": {"properties": {}}},
             {"name": "open_ticket", "description": "Open a ticket.", "parameters": {"properties": {
                 "subject": text, "contact_email": text, "sku": text}, "required": ["subject", "contact_email", "sku"],
             }},
             {"name": "add_comment", "description": "Add a comment.", "parameters": {"properties": {
                 "ticket_id": {"type": "integer"}, "text": text}, "required": ["ticket_id", "text"]}}]  # fmt: skip
    explorer = _Explorer(tools, seed=0)
    explorer.last_call = ToolCall(name="list_tickets", arguments={})
    shown = [{"ticket_id": 101, "title": "Office move"}]  # seen, but not under "subject"
    explorer.observe([ToolObservation(call_id="1", name="list_tickets", content=json.dumps(shown))])
    opened = [explorer.arguments("open_ticket", recent=False) for _ in range(6)]
    subjects = [a["subject"] for a in opened]
    assert len(set(subjects)) == 6 and not any(s.startswith("subject") for s in subjects), subjects
    assert "Office move" not in subjects  # the server showed it: a create tool may refuse a name that exists
    assert plausible_text("subject", explorer.rng, explorer.written) not in subjects
    assert all(a["contact_email"].endswith("@example.com") for a in opened), opened
    assert all(re.fullmatch(r"sku \d+", a["sku"]) for a in opened), opened  # a kind not known: the label
    comment = explorer.arguments("add_comment", recent=False)
    assert comment["ticket_id"] == 101 and not comment["text"].startswith("text "), comment


CAMEL = '''
from mcp.server.fastmcp import FastMCP

mcp = FastMCP("pets")
PETS = {7: {"id": 7, "name": "Biscuit", "ageYears": 3}, 8: {"id": 8, "name": "Luna", "ageYears": 5}}
OWNERS = [{"personId": 31, "fullName": "Ada Brook", "email": "ada@example.org"}]


@mcp.tool()
def listPets() -> list[dict]:
    """Every pet in the shelter."""
    return list(PETS.values())


@mcp.tool()
def searchPeople(query: str = "", limit: int = 10) -> list[dict]:
    """People who adopt, by name."""
    return [o for o in OWNERS if query.lower() in o["fullName"].lower()][:limit]


@mcp.tool()
def assignOwner(petId: int, ownerEmail: str, visitType: str) -> str:
    """Hand a pet to its new owner."""
    if petId not in PETS:
        raise ValueError(f"Pet {petId} not found.")
    if ownerEmail not in {o["email"] for o in OWNERS}:
        raise ValueError(f"No person with email {ownerEmail!r}.")
    if visitType not in ("pickup", "delivery"):
        raise ValueError(f"Unknown visit type {visitType!r}. Valid: pickup, delivery.")
    PETS[petId]["owner"] = ownerEmail
    return "assigned"


if __name__ == "__main__":
    mcp.run()
'''


@pytest.mark.timeout(300)
def test_a_camel_case_server_s_writes_are_filled_from_what_its_reads_returned(tmp_path):
    """Session 72, a shelter server written as a web developer writes a JSON API: ``assignOwner(petId, ownerEmail,
    visitType)`` where reads return ``id`` and ``email``. A camelCase name is read by its snake_case words, so
    ``petId`` is a pet's id (never invented: before, a random number) and ``ownerEmail`` takes an ``email`` seen;
    "Valid: pickup, delivery." (a capital letter) offers ``visitType``'s values. Questions name fields in words
    and leave out a read's row cap ("for limit 5")."""
    from langgraph_evolver.questioning.synthesize import synthesize

    server = tmp_path / "pets.py"
    server.write_text(CAMEL)
    trajectory = explore_environment(f"mcp:{sys.executable} {server}", seed=0, n_breadth=3, n_depth=17)
    pairs = trajectory.tool_results()
    assigned = [c.arguments for c, o in pairs if c.name == "assignOwner" and not o.is_error]
    assert assigned, [(c.name, c.arguments, o.content[:80]) for c, o in pairs]
    assert all(a["petId"] in (7, 8) and a["ownerEmail"] == "ada@example.org" for a in assigned), assigned
    made = [c.arguments["petId"] for c, _ in pairs if c.name == "assignOwner"]
    assert set(made) <= {7, 8}, made  # an id is never invented
    queries = [t.query for t in synthesize(trajectory, max_ops=2, max_tasks=None, seed=1)]
    assert any("age in years" in q or "age years" in q for q in queries), queries
    assert not any(re.search(r"\b(?:petId|ownerEmail|ageYears|for limit \d)", q) for q in queries), queries

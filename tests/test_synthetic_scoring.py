"""Issue 30: a synthesized task on a user's environment rewards the work, not the tool's name.

A parking-permit environment written here (three ``@tool``s over a small registry): its read tasks
are scored by the answer (the values the reference's reads returned, recorded when the task is
filtered) and the calls (name and arguments) as partial credit; its write tasks by the end state."""

from __future__ import annotations

import json
import logging

import pytest
from langchain_core.tools import tool

from env_tools.langchain_tools import ToolsEnvironment
from langgraph_evolver.questioning import filter_tasks
from langgraph_evolver.questioning.answers import EXPECTED_KEY
from langgraph_evolver.questioning.filters import DuplicateIndex
from langgraph_evolver.types import Action, Task, ToolCall
from tests.test_experience_pool import HashEmbeddings


def permit_tools(task: Task):
    state = {"residents": {"Chen Li": {"id": "r7", "zone": "Z4"}, "Ana": {"id": "r2", "zone": "Z2"}}, "permits": []}

    @tool
    def find_resident(name: str) -> str:
        """Find a resident by name: their id and home zone."""
        found = state["residents"].get(name)
        return json.dumps({"name": name, **found}) if found else "no such resident"

    @tool
    def check_resident(name: str) -> str:
        """Whether a resident is registered (yes or no)."""
        return "yes" if name in state["residents"] else "no"

    @tool
    def issue_permit(resident_id: str, zone: str) -> str:
        """Issue a parking permit for a resident in a zone."""
        state["permits"].append({"resident": resident_id, "zone": zone})
        return "issued"

    return state, [find_resident, check_resident, issue_permit]


def env() -> ToolsEnvironment:
    return ToolsEnvironment(permit_tools)


def call(tool_name: str, **arguments) -> ToolCall:
    return ToolCall(name=tool_name, arguments=arguments)


def episode(task: Task, calls: list[ToolCall], answer: str | None) -> float:
    e = env()
    e.reset(task)
    for c in calls:
        e.step(Action(tool_calls=(c,)))
    if answer is not None:
        e.step(Action(content=answer))
    try:
        return e.evaluate()
    finally:
        e.close()


def synthetic(task_id: str, query: str, *reference: ToolCall, **metadata) -> Task:
    return Task(id=task_id, env="permits", query=query, reference_solution=reference, source="synthetic",
                metadata=metadata)  # fmt: skip


@pytest.fixture(scope="module")
def filtered():
    candidates = [
        synthetic("synthetic-zone", "What is the home zone of Chen Li?", call("find_resident", name="Chen Li")),
        synthetic(
            "synthetic-permit", "Give Chen Li a permit for zone Z4.", call("issue_permit", resident_id="r7", zone="Z4")
        ),  # fmt: skip
        synthetic("synthetic-exists", "Is Ana registered?", call("check_resident", name="Ana")),
    ]
    kept, report = filter_tasks(candidates, env_factory=lambda t: env(), index=DuplicateIndex(HashEmbeddings()))
    return {t.id: t for t in kept}, report


def test_a_read_task_records_what_its_answer_must_quote(filtered):
    kept, _ = filtered
    assert kept["synthetic-zone"].metadata[EXPECTED_KEY] == ["r7", "Z4"]  # not "Chen Li": the question names it
    assert EXPECTED_KEY not in kept["synthetic-permit"].metadata  # a write task is checked by its end state


def test_a_read_task_cannot_be_won_by_calling_the_right_tool_with_any_arguments(filtered):
    task = filtered[0]["synthetic-zone"]
    assert episode(task, [call("find_resident", name="Ana")], "I could not find it.") == 0.0  # the issue's case
    assert episode(task, [call("find_resident", name="Chen Li")], "Chen Li's home zone is Z4.") == 1.0
    assert episode(task, [call("find_resident", name="chen li ")], "Zone Z4.") == 1.0  # arguments normalised
    assert episode(task, [call("find_resident", name="Chen Li")], "I could not find it.") == 0.5  # calls: partial
    assert episode(task, [], None) == 0.0  # doing nothing
    assert episode(task, [call("issue_permit", resident_id="r7", zone="Z4")], "Z4") == 0.0  # a write: state differs


def test_a_write_task_is_scored_by_its_end_state(filtered):
    task = filtered[0]["synthetic-permit"]
    assert episode(task, [call("issue_permit", resident_id="r7", zone="Z4")], "Done.") == 1.0
    assert episode(task, [call("issue_permit", resident_id="r2", zone="Z4")], "Done.") == 0.0  # the wrong record
    assert episode(task, [], "Done.") == 0.0


def test_a_read_task_with_no_expected_answer_is_refused_and_counted(filtered):
    kept, report = filtered
    assert "synthetic-exists" not in kept  # "yes" carries no value an answer could be checked by
    assert report.reasons["read task with no expected answer"] == 1 and report.removed["infeasible"] == 1


def test_a_stored_read_task_without_expected_values_is_scored_by_its_calls_not_names(caplog):
    old = synthetic("synthetic-old", "What is the home zone of Chen Li?", call("find_resident", name="Chen Li"))
    with caplog.at_level(logging.WARNING, logger="env_tools.replay"):
        assert episode(old, [call("find_resident", name="Ana")], "I could not find it.") == 0.0
        assert episode(old, [call("find_resident", name="Chen Li")], "Z4") == 1.0
    import env_tools.replay

    assert "carries no expected answer" in caplog.text or env_tools.replay._warned  # logged once per process
    explicit = synthetic("synthetic-explicit", "Which zone is Chen Li in?", call("find_resident", name="Chen Li"),
                         answer="Z4")  # fmt: skip
    assert episode(explicit, [call("find_resident", name="Chen Li")], "Z4") == 1.0
    assert episode(explicit, [call("find_resident", name="Chen Li")], "r7") == 0.5  # metadata["answer"] wins

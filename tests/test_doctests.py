"""The mechanism packages' docstrings are their users' map: every example in them runs, offline."""

from __future__ import annotations

import doctest
import importlib
import time

import pytest

PACKAGES = [
    "langgraph_evolver.attribution",
    "langgraph_evolver.questioning",
    "langgraph_evolver.questioning.facts",  # how facts are asked (field_words, _count_template)
    "langgraph_evolver.questioning.wording",  # how calls are worded (_choose)
    "langgraph_evolver.questioning.profile",  # how names are read (snake, tool_kind)
    "langgraph_evolver.questioning.offered",  # the values an error offers (suggested_values)
    "langgraph_evolver.questioning.lexicon",  # the everyday text a write gets (plausible_text)
    "langgraph_evolver.questioning.pipeline",  # what is kept (_tool_cap, _record_cap, _values_of)
    "langgraph_evolver.questioning.synthesize",  # what is drawn (intents, read_share)
    "langgraph_evolver.experience",
    "langgraph_evolver.context",
    "langgraph_evolver.ingest",
    "langgraph_evolver.environment",
    # the core modules the mechanisms share (issue 41 moved them down): their examples run too
    "langgraph_evolver.rendering",
    "langgraph_evolver.reference_scoring",
    "langgraph_evolver.tool_results",
    "trainers.evolve.adapt_data",  # what a supervised chat ends with (final_answer)
    "trainers.tiny",  # the supervised batches every trainer draws (padded_batches)
]


@pytest.mark.parametrize("name", PACKAGES)
def test_package_docstring_examples_run(name):
    module = importlib.import_module(name)
    started = time.perf_counter()
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted >= 1, f"{name} has no example in its docstrings"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed (output above)"
    assert time.perf_counter() - started < 30, "keep package examples quick"

"""The self-attributing mechanism as a served graph: a trajectory in, GOOD/BAD step labels out.

    START → attribute_steps → END

Input: ``{"trajectory": {...}}`` (a ``Trajectory`` dict, e.g. one line of a run's
``trajectories.jsonl``) or a list of them. Output: ``attribution`` (the verdict: one
``{"step", "label", "reason"}`` per step, or ``labels: null`` when the judge failed and the
trajectory falls back to outcome-only credit) and ``labeled`` (the trajectory with its labels).

The module-level ``graph`` (served by ``langgraph dev`` as ``attribute``) uses the judge named by
``EVOLVER_JUDGE``: ``reference`` (default: deterministic, from the task's reference solution, no
LLM) or a chat-model string such as ``openai:gpt-4.1-mini``.

Example:
    >>> from graphs.attribute import create_attribute_graph
    >>> out = create_attribute_graph("reference").invoke({"trajectory": trajectory.to_dict()})  # doctest: +SKIP
    >>> [x["label"] for x in out["attribution"]["labels"]]                                     # doctest: +SKIP
    ['GOOD', 'BAD', 'GOOD']
"""

from __future__ import annotations

import os
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from langgraph_evolver.attribution import create_attribution_node

__all__ = ["create_attribute_graph", "graph"]


class AttributeState(TypedDict, total=False):
    trajectory: Any
    """A ``Trajectory`` dict (or a list of them)."""
    attribution: Any
    labeled: Any


def create_attribute_graph(judge: Any = "reference", *, name: str = "attribute", **judge_options: Any):
    """Compile the attribution graph for ``judge`` (see ``langgraph_evolver.attribution.make_judge``)."""
    node = create_attribution_node(judge, labeled_key="labeled", **judge_options)
    builder = StateGraph(AttributeState)
    builder.add_node("attribute_steps", node)
    builder.add_edge(START, "attribute_steps")
    builder.add_edge("attribute_steps", END)
    return builder.compile(name=name)


graph = create_attribute_graph(os.environ.get("EVOLVER_JUDGE", "reference"))

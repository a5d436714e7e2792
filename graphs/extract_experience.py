"""Self-navigating's extraction as a served graph: trajectories in, experiences out.

    START → extract_experiences → END

Input: ``{"trajectories": [...]}`` (``Trajectory`` dicts, e.g. lines of a run's
``trajectories/step_N.jsonl``; the rollouts of one task are compared with each other). Output:
``experiences``, one ``{"id", "when_to_use", "content", "source_task_ids", "score", …}`` per
kept experience.

The module-level ``graph`` (served by ``langgraph dev`` as ``extract_experience``) uses the
extractor named by ``EVOLVER_EXTRACTOR``: ``rules`` (default: deterministic, no LLM) or a
chat-model string such as ``openai:gpt-4.1-mini``.

Example:
    >>> from graphs.extract_experience import create_extract_experience_graph
    >>> graph = create_extract_experience_graph("rules")
    >>> out = graph.invoke({"trajectories": [t.to_dict() for t in trajs]})  # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from langgraph_evolver.experience import create_extraction_node

__all__ = ["create_extract_experience_graph", "graph"]


class ExtractState(TypedDict, total=False):
    trajectories: Any
    """``Trajectory`` dicts (or one)."""
    experiences: list[dict[str, Any]]


def create_extract_experience_graph(extractor: Any = "rules", *, name: str = "extract_experience", **options: Any):
    """Compile the extraction graph for ``extractor`` (see ``langgraph_evolver.experience.make_extractor``)."""
    builder = StateGraph(ExtractState)
    builder.add_node("extract_experiences", create_extraction_node(extractor, **options))
    builder.add_edge(START, "extract_experiences")
    builder.add_edge("extract_experiences", END)
    return builder.compile(name=name)


graph = create_extract_experience_graph(os.environ.get("EVOLVER_EXTRACTOR", "rules"))

"""Runs as a tree: where a run sits in its trace (``dotted_order``) and the nested view of a trace.

A run's ``dotted_order`` is its ancestors' segments and its own joined by ``.``, each segment its
start time and id (:func:`dotted_segment`), so sorting by it orders runs by start within a trace.
:func:`build_run_tree` nests a flat list of runs (a :class:`~langgraph_evolver.tracing.JsonlTracer`
file, LangSmith's runs) under their parents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

__all__ = ["build_run_tree", "dotted_segment"]


def dotted_segment(start_time: datetime, run_id: str | UUID) -> str:
    """One dotted-order segment in LangSmith's format: ``<YYYYMMDDTHHMMSSffffffZ><run id>``."""
    return start_time.strftime("%Y%m%dT%H%M%S%fZ") + str(run_id)


def build_run_tree(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Nest runs under their parents as ``child_runs``; returns the roots.

    Roots and every ``child_runs`` list are sorted by ``dotted_order`` (start time, then id). A run
    whose parent is not among ``runs`` is a root. The input dicts are not modified.
    """
    nodes = {str(r["id"]): {**r, "child_runs": []} for r in runs}
    roots: list[dict[str, Any]] = []
    for node in nodes.values():
        parent = nodes.get(str(node.get("parent_run_id")))
        (parent["child_runs"] if parent is not None else roots).append(node)

    def key(node: Mapping[str, Any]) -> tuple[str, str]:
        return (str(node.get("dotted_order") or node.get("start_time") or ""), str(node["id"]))

    for node in nodes.values():
        node["child_runs"].sort(key=key)
    roots.sort(key=key)
    return roots

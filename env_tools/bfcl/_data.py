"""BFCL's multi-turn entries, loaded from the ``bfcl-eval`` package, as our tasks and tool schemas.

The entries, their function docs and ground truth are read with the package's own loaders
(``bfcl_eval.utils.load_dataset_entry`` / ``load_ground_truth_entry``), so the functions an entry
offers (its involved classes' docs, minus the ``miss_func`` hold-outs, with BFCL's "Python 3
syntax" hint) are exactly what BFCL's runner offers. What is ours: the JSON-schema conversion of
those docs, the task split, and turning a ground-truth call string into a JSON tool call.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import inspect
import os
import random
import tempfile
from collections.abc import Sequence
from typing import Any

from langgraph_evolver.errors import ConfigError
from langgraph_evolver.types import Task, ToolCall

__all__ = [
    "CATEGORIES",
    "SPLIT_SEED",
    "bfcl_tasks",
    "entry",
    "ground_truth",
    "parse_call",
    "reference_turns",
    "shared_entry",
    "tool_schema",
]

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
"""BFCL v3's multi-turn categories (shipped in bfcl-eval as ``BFCL_v4_multi_turn_<category>.json``)."""
SPLIT_SEED = 42
"""``base`` is shuffled with this seed and halved: the first half trains, the second is held out."""

_INSTALL_HINT = (
    "The BFCL environment needs the bfcl-eval package, installed without its dependencies "
    "(they pin numpy and pull CUDA torch): `make install-bfcl`, or "
    "`pip install --no-deps bfcl-eval==2026.3.23 && pip install mpmath==1.3.0 filelock`."
)


def bfcl() -> Any:
    """Import ``bfcl_eval`` (its loaders take file locks under ``BFCL_PROJECT_ROOT``: a temp dir, not site-packages)."""
    os.environ.setdefault("BFCL_PROJECT_ROOT", os.path.join(tempfile.gettempdir(), "bfcl-eval"))
    try:
        return importlib.import_module("bfcl_eval")
    except ImportError as e:
        raise ConfigError(f"{_INSTALL_HINT} ({e})") from None


def _check_category(category: str) -> str:
    if category not in CATEGORIES:
        raise ConfigError(f"Unknown BFCL multi-turn category {category!r}; choose from {', '.join(CATEGORIES)}.")
    return category


@functools.cache
def _entries(category: str) -> dict[str, dict[str, Any]]:
    bfcl()
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    entries = load_dataset_entry(f"multi_turn_{_check_category(category)}")
    truth = {e["id"]: e["ground_truth"] for e in load_ground_truth_entry(f"multi_turn_{category}")}
    for e in entries:
        e["ground_truth"] = truth[e["id"]]
    return {e["id"]: e for e in entries}


def _category_of(entry_id: str) -> str:
    prefix, _, _ = entry_id.rpartition("_")
    return prefix.removeprefix("multi_turn_")


def shared_entry(entry_id: str) -> dict[str, Any]:
    """The cached BFCL entry ``entry_id`` itself: read it, never change it (``entry`` gives a copy)."""
    found = _entries(_check_category(_category_of(entry_id))).get(entry_id)
    if found is None:
        raise ConfigError(f"No BFCL entry {entry_id!r}.")
    return found


def entry(entry_id: str) -> dict[str, Any]:
    """The BFCL entry ``entry_id`` (``multi_turn_base_0``): question turns, initial config, functions, ...

    A deep copy: callers may change it without touching the cached one.
    """
    return copy.deepcopy(shared_entry(entry_id))


def ground_truth(entry_id: str) -> list[list[str]]:
    """The ground truth of ``entry_id``: per user turn, the calls as Python call strings."""
    return [list(t) for t in _entries(_check_category(_category_of(entry_id)))[entry_id]["ground_truth"]]


# -- tool schemas ---------------------------------------------------------------------------------
def _json_type(spec: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    out = dict(spec)
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = mapping.get(kind, kind)
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _json_type(v, mapping) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = _json_type(out["items"], mapping)
    return out


def tool_schema(doc: dict[str, Any]) -> dict[str, Any]:
    """One BFCL function doc as an OpenAI function tool (BFCL's types mapped as its own runner maps them)."""
    bfcl()
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI

    parameters = _json_type(doc.get("parameters") or {"type": "dict", "properties": {}}, GORILLA_TO_OPENAPI)
    parameters["type"] = "object"
    return {"type": "function", "function": {"name": doc["name"], "description": doc.get("description") or "",
                                             "parameters": parameters}}  # fmt: skip


# -- tasks and splits -----------------------------------------------------------------------------
def _task(e: dict[str, Any], category: str, split: str) -> Task:
    first = " ".join(m.get("content") or "" for m in e["question"][0] if m.get("role") == "user")
    return Task(id=e["id"], query=first, env="bfcl", env_params={"category": category}, source="seed",
                metadata={"category": category, "split": split, "user_turns": len(e["question"]),
                          "involved_classes": list(e["involved_classes"])})  # fmt: skip


def _index(entry_id: str) -> int:
    return int(entry_id.rpartition("_")[2])


def bfcl_tasks(split: str, categories: Sequence[str] = CATEGORIES) -> list[Task]:
    """Tasks of ``split`` from ``categories``.

    Splits: ``train`` (half of ``base``: shuffled with seed 42, first 100), ``test`` (the other half of
    ``base`` and every entry of the other categories: nothing in it is trained on), ``all``, or one
    category's name (all of its 200 entries).
    """
    cats = [_check_category(c) for c in categories]
    base_ids = sorted(_entries("base"), key=_index)
    random.Random(SPLIT_SEED).shuffle(base_ids)
    train_ids = set(base_ids[: len(base_ids) // 2])
    out: list[Task] = []
    for category in cats:
        for entry_id in sorted(_entries(category), key=_index):
            held_out = category != "base" or entry_id not in train_ids
            member = {"train": not held_out, "test": held_out, "all": True}.get(split, split == category)
            if member:
                out.append(_task(_entries(category)[entry_id], category, "test" if held_out else "train"))
    if not out and split not in ("train", "test", "all", *CATEGORIES):
        raise ConfigError(
            f"Unknown BFCL split {split!r}; use train, test, all or a category ({', '.join(CATEGORIES)})."
        )
    return out


# -- ground truth as JSON tool calls ----------------------------------------------------------------
@functools.cache
def _methods(classes: tuple[str, ...]) -> dict[str, inspect.Signature]:
    bfcl()
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    found: dict[str, inspect.Signature] = {}
    for name in classes:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[name]), name)
        for method, fn in inspect.getmembers(cls, predicate=inspect.isfunction):
            if not method.startswith("_"):
                found[method] = inspect.signature(fn)
    return found


def parse_call(call: str, classes: Sequence[str], *, call_id: str = "") -> ToolCall:
    """A ground-truth call string (``mv(source='a', destination='b')``, positional arguments included)
    as a JSON tool call, positional arguments named after the backend method's parameters."""
    node = ast.parse(call, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {call!r}")
    name = node.func.id
    arguments = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    if node.args:
        signature = _methods(tuple(classes)).get(name)
        if signature is None:
            raise ValueError(f"{name} is no method of {list(classes)}")
        params = [p for p in signature.parameters if p != "self"]
        for param, value in zip(params, node.args, strict=False):
            arguments[param] = ast.literal_eval(value)
    return ToolCall(name=name, arguments=arguments, id=call_id)


def reference_turns(task: Task | str) -> list[list[ToolCall]]:
    """The ground truth of a task as JSON tool calls, one list per user turn (the oracle replay)."""
    entry_id = task if isinstance(task, str) else task.id
    classes = _entries(_check_category(_category_of(entry_id)))[entry_id]["involved_classes"]
    return [[parse_call(c, classes, call_id=f"gt-{t}-{i}") for i, c in enumerate(turn)]
            for t, turn in enumerate(ground_truth(entry_id))]  # fmt: skip

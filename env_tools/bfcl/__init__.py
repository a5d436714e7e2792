"""BFCL v3 multi-turn (from the ``bfcl-eval`` package) as an environment: ``load_environment("bfcl")``.

Needs ``bfcl-eval`` installed without its dependencies (``make install-bfcl``); see docs/bfcl.md.
"""

from ._data import CATEGORIES, SPLIT_SEED, bfcl_tasks, entry, ground_truth, parse_call, reference_turns, tool_schema
from .env import BFCLEnvironment, call_string

__all__ = [
    "CATEGORIES",
    "SPLIT_SEED",
    "BFCLEnvironment",
    "bfcl_tasks",
    "call_string",
    "entry",
    "ground_truth",
    "parse_call",
    "reference_turns",
    "tool_schema",
]

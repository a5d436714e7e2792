"""Packaging contracts: a light core import, the public API, the served graph config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_core_import_pulls_no_heavy_dependencies():
    code = (
        "import sys, langgraph_evolver, env_tools, env_tools.sandbox, graphs.agent; "
        "heavy = ('torch', 'trl', 'fastapi', 'transformers', 'deepspeed', 'faiss'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_public_api_is_exported():
    import langgraph_evolver

    for name in langgraph_evolver.__all__:
        assert hasattr(langgraph_evolver, name), name


def test_langgraph_json_points_at_graph_modules():
    config = json.loads((ROOT / "langgraph.json").read_text())
    for graph_id, target in config["graphs"].items():
        path, _, attr = target.partition(":")
        assert (ROOT / path).exists(), target
        if Path(path).parts[1] == "graphs":  # ours; examples show a user's own graph served beside them
            assert Path(path).stem == graph_id  # graph ids match file stems
            assert attr == "graph"

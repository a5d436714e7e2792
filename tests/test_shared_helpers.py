"""Shared helpers live in the core, not inside one mechanism (issue 41, item 4).

Self-questioning, self-navigating and self-attributing import nothing from each other (what they share,
the step renderers, ``as_trajectory``, tool results, reference-replay scoring, the embeddings, lives in
``langgraph_evolver/``); ``env_tools`` imports nothing from a command's ``__main__``; no module imports another
folder's private name. The old public paths still give the same objects.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MECHANISMS = ("attribution", "experience", "questioning")


def _imports(path: Path) -> list[tuple[int, str, str]]:
    """``(line, module, name)`` of every ``from ... import name`` in ``path`` (lazy and TYPE_CHECKING ones too)."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found += [(node.lineno, module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, "") for a in node.names]
    return found


def _files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def test_no_mechanism_imports_another():
    problems = []
    for mechanism in MECHANISMS:
        for path in _files(f"langgraph_evolver/{mechanism}"):
            for line, module, name in _imports(path):
                target = f"{module}.{name}".split(".")
                other = target[1] if target[0] == "langgraph_evolver" and len(target) > 1 else None
                if other in MECHANISMS and other != mechanism:
                    problems.append(f"{path.relative_to(ROOT)}:{line} imports {module}.{name}")
    assert not problems, "\n".join(problems)


def test_env_tools_imports_no_command_and_nothing_private_across_folders():
    problems = []
    for path in _files("langgraph_evolver", "env_tools"):
        for line, module, name in _imports(path):
            if "__main__" in module and path.name != "__main__.py":
                problems.append(f"{path.relative_to(ROOT)}:{line} imports {module} (a command)")
            folder = ROOT.joinpath(*module.split("."))
            folder = folder if (folder / "__init__.py").is_file() else folder.parent
            private = name.startswith("_") and not name.startswith("__")
            if private and module.split(".")[0] in ("langgraph_evolver", "env_tools") and folder != path.parent:
                problems.append(f"{path.relative_to(ROOT)}:{line} imports the private {module}.{name}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("old", "new", "names"),
    [
        ("langgraph_evolver.attribution.parsing", "langgraph_evolver.rendering", ["render_steps", "trim"]),
        ("langgraph_evolver.questioning.results", "langgraph_evolver.tool_results", ["read_result", "render_result"]),
        ("langgraph_evolver.questioning.answers", "langgraph_evolver.reference_scoring",
         ["expected_answer", "calls_match_share", "EXPECTED_KEY"]),
        ("langgraph_evolver.questioning.filters", "langgraph_evolver.reference_scoring", ["state_fingerprint"]),
        ("langgraph_evolver.experience", "langgraph_evolver.embeddings", ["default_embeddings"]),
        ("langgraph_evolver.questioning.__main__", "langgraph_evolver.chat_model", []),
        ("langgraph_evolver.environment_tools", "langgraph_evolver.rollout", ["Rollout", "current_rollout"]),
        ("langgraph_evolver.chat_model", "langgraph_evolver.transitions", ["POLICY_MARKER", "transition_from_message"]),
    ],
)  # fmt: skip
def test_the_old_paths_give_the_same_objects(old, new, names):
    import importlib

    before, after = importlib.import_module(old), importlib.import_module(new)
    for name in names:
        assert getattr(before, name) is getattr(after, name), f"{old}.{name}"
    if old.endswith("__main__"):
        assert before.chat_model is after.chat_model_from_spec


def test_as_trajectory_reads_a_dict_and_says_what_is_missing():
    from langgraph_evolver.errors import ConfigError
    from langgraph_evolver.types import Task, Trajectory, as_trajectory

    traj = Trajectory(id="r", task=Task(id="t", query="q"), reward=1.0)
    assert as_trajectory(traj) is traj and as_trajectory(traj.to_dict()) == traj
    with pytest.raises(ConfigError, match=r"needs \['task'\]"):
        as_trajectory({"id": "r"})

"""The floors of ARCHITECTURE.md, checked on the code: no import runs back up a floor, no circle.

Every ``import`` / ``from ... import`` of every module counts, at the top of a file, inside a
function (a lazy import is still a dependency) or under ``if TYPE_CHECKING:`` (an annotation-only
import still couples the two modules: a circle closed through one is a circle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# bottom floor first: a package may import its own floor and the floors below it, never above
FLOORS = ["langgraph_evolver", "env_tools", "graphs", "trainers", "benchmarks", "examples"]
OURS = set(FLOORS)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every import of ``path`` that names one of our packages."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = _module_name(path)
    package = name if _is_package(path) else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from pkg import submodule` depends on pkg.submodule when that is a module of ours
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((node.lineno, sub if _exists(sub) else target))
    return [(line, mod) for line, mod in found if mod.split(".")[0] in OURS]


def _exists(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _sources() -> list[Path]:
    return sorted(p for floor in FLOORS for p in (ROOT / floor).rglob("*.py") if ".venv" not in p.parts)


def upward_imports() -> list[str]:
    problems = []
    for path in _sources():
        here = FLOORS.index(path.relative_to(ROOT).parts[0])
        for line, module in imports_of(path):
            there = FLOORS.index(module.split(".")[0])
            if there > here:
                problems.append(f"{path.relative_to(ROOT)}:{line} imports {module} ({FLOORS[there]} is above "
                                f"{FLOORS[here]})")  # fmt: skip
    return problems


def _resolve(module: str, known: set[str]) -> str | None:
    while module and module not in known:
        module = module.rpartition(".")[0]
    return module or None


def import_circles(floor: str) -> list[list[str]]:
    """Strongly connected groups (more than one module) of the import graph of one floor's modules."""
    paths = [p for p in _sources() if p.relative_to(ROOT).parts[0] == floor]
    known = {_module_name(p) for p in paths}
    graph: dict[str, set[str]] = {m: set() for m in known}
    for path in paths:
        src = _module_name(path)
        for _, module in imports_of(path):
            dst = _resolve(module, known)
            if dst and dst != src and not src.startswith(dst + "."):  # a package's modules may import it
                if not dst.startswith(src + ".") or not _is_package(path):  # and it may import them
                    graph[src].add(dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_import_runs_back_up_a_floor():
    problems = upward_imports()
    assert not problems, "imports against ARCHITECTURE.md's floors:\n" + "\n".join(problems)


@pytest.mark.parametrize("floor", FLOORS)
def test_no_import_circle(floor):
    circles = import_circles(floor)
    assert not circles, f"import circles in {floor}/: " + "; ".join(" <-> ".join(c) for c in circles)


def test_the_checks_can_fail(tmp_path, monkeypatch):
    """A planted upward import and a planted circle are found (the checks are not vacuous)."""
    for floor in ("langgraph_evolver", "trainers"):
        (tmp_path / floor).mkdir()
        (tmp_path / floor / "__init__.py").write_text("")
    (tmp_path / "langgraph_evolver" / "a.py").write_text("from trainers import grpo\nfrom . import b\n")
    (tmp_path / "langgraph_evolver" / "b.py").write_text("def f():\n    from .a import x\n")
    (tmp_path / "langgraph_evolver" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import D\n"
    )
    (tmp_path / "langgraph_evolver" / "d.py").write_text("from .c import C\n")
    (tmp_path / "trainers" / "grpo.py").write_text("import langgraph_evolver.a\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert upward_imports() == ["langgraph_evolver/a.py:1 imports trainers.grpo (trainers is above langgraph_evolver)"]
    assert import_circles("langgraph_evolver") == [
        ["langgraph_evolver.a", "langgraph_evolver.b"],
        ["langgraph_evolver.c", "langgraph_evolver.d"],  # closed through a TYPE_CHECKING import: still a circle
    ]
    assert import_circles("trainers") == []


def test_the_library_loads_no_torch():
    """Importing the library and its mechanisms loads no torch / transformers / TRL (they belong to trainers/)."""
    import subprocess
    import sys

    code = (
        "import sys, langgraph_evolver, langgraph_evolver.experience, langgraph_evolver.questioning, "
        "langgraph_evolver.attribution, langgraph_evolver.ingest, langgraph_evolver.context, "
        "langgraph_evolver.tracing; print(sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr

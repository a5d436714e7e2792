"""The house rules of ARCHITECTURE.md that are not floors (those are ``tests/test_layering.py``'s), checked on the
code: module size, one place per loss type, no private names across folders, a short README.

Each check is a function over a root folder, so ``test_the_rules_can_fail`` can show it failing on a made-up tree.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the folders these rules cover; langgraph_evolver/ and env_tools/ join when their modules are split (issue 41)
CHECKED = ["langgraph_evolver", "env_tools", "trainers", "benchmarks", "graphs", "examples"]
ALL_CODE = ["langgraph_evolver", "env_tools", "graphs", "trainers", "benchmarks", "examples"]
MAX_LINES = 600
REASON = "Over 600 lines because"
MAX_README_WORDS = 1200
LOSS_TYPE_COMPARISON = re.compile(r"\bloss_type\b\s*(==|!=|\bin\b|\bnot\s+in\b)")


def _sources(root: Path, folders: list[str]) -> list[Path]:
    return sorted(p for folder in folders for p in (root / folder).rglob("*.py"))


def long_modules(root: Path = ROOT, folders: list[str] = CHECKED) -> list[str]:
    """Modules over ``MAX_LINES`` whose docstring does not say why (``REASON``)."""
    found = []
    for path in _sources(root, folders):
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_LINES and REASON not in (ast.get_docstring(ast.parse(text)) or ""):
            found.append(f"{path.relative_to(root)}: {lines} lines, and its docstring has no '{REASON} ...'")
    return found


def files_comparing_loss_type(root: Path = ROOT, folders: list[str] = ALL_CODE) -> list[str]:
    """Files that compare ``loss_type`` to a value (``==``, ``!=``, ``in``): the loss table should decide."""
    return [
        str(path.relative_to(root)) for path in _sources(root, folders) if LOSS_TYPE_COMPARISON.search(path.read_text())
    ]


def _target_folder(path: Path, node: ast.ImportFrom, root: Path) -> Path | None:
    """The folder of the module ``node`` imports from, or None when it is not one of ours."""
    if node.level:
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        target = base.joinpath(*(node.module.split(".") if node.module else []))
    elif node.module and node.module.split(".")[0] in ALL_CODE:
        target = root.joinpath(*node.module.split("."))
    else:
        return None
    return target if target.is_dir() else target.parent


def private_imports_across_folders(root: Path = ROOT, folders: list[str] = CHECKED) -> list[str]:
    """``from other.folder.module import _name``: a private name used outside its module's folder."""
    found = []
    for path in _sources(root, folders):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            folder = _target_folder(path, node, root)
            if folder is None or folder.resolve() == path.parent.resolve():
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(root)}:{node.lineno} imports {alias.name} from {node.module}")
    return found


def imports_of_the_command(root: Path = ROOT, folders: list[str] = CHECKED) -> list[str]:
    """Modules that import ``trainers.grpo`` (the command) instead of the libraries beside it."""
    found = []
    for path in _sources(root, folders):
        if path.relative_to(root) == Path("trainers/grpo.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                folder = _target_folder(path, node, root)
                module = (node.module or "").rpartition(".")[2]
                if folder == root / "trainers" and module == "grpo":
                    names = ["trainers.grpo"]
                elif folder == root / "trainers" and not node.module and any(a.name == "grpo" for a in node.names):
                    names = ["trainers.grpo"]
            if "trainers.grpo" in names:
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def readme_words(root: Path = ROOT) -> int:
    return len((root / "README.md").read_text().split())


def test_no_module_over_600_lines_without_saying_why():
    assert long_modules() == []


def test_loss_type_is_compared_in_at_most_two_files():
    assert len(files_comparing_loss_type()) <= 2, files_comparing_loss_type()


def test_no_private_name_is_imported_across_folders():
    assert private_imports_across_folders() == []


def test_only_the_command_line_reaches_trainers_grpo():
    assert imports_of_the_command() == []


def test_the_readme_stays_short():
    assert readme_words() <= MAX_README_WORDS


def test_the_rules_can_fail(tmp_path):
    (tmp_path / "trainers" / "evolve").mkdir(parents=True)
    (tmp_path / "trainers" / "big.py").write_text('"""Big."""\n' + "x = 1\n" * MAX_LINES)
    (tmp_path / "trainers" / "ok.py").write_text(f'"""Big. {REASON} it must be."""\n' + "x = 1\n" * MAX_LINES)
    (tmp_path / "trainers" / "grpo.py").write_text("def _load_tasks():\n    pass\n")
    (tmp_path / "trainers" / "evolve" / "loop.py").write_text(
        "from trainers.grpo import _load_tasks\nfrom . import _own\nfrom ..grpo import _load_tasks as t\n"
    )
    (tmp_path / "trainers" / "evolve" / "_own.py").write_text("")
    for name in ("a", "b", "c"):
        (tmp_path / "trainers" / f"{name}.py").write_text(f'ok = cfg.loss_type {"== " if name == "a" else "in "}"x"\n')
    (tmp_path / "README.md").write_text("word " * (MAX_README_WORDS + 1))
    assert long_modules(tmp_path) == [
        "trainers/big.py: 601 lines, and its docstring has no 'Over 600 lines because ...'"
    ]
    assert files_comparing_loss_type(tmp_path, ["trainers"]) == ["trainers/a.py", "trainers/b.py", "trainers/c.py"]
    assert private_imports_across_folders(tmp_path) == [
        "trainers/evolve/loop.py:1 imports _load_tasks from trainers.grpo",
        "trainers/evolve/loop.py:3 imports _load_tasks from grpo",
    ]
    assert readme_words(tmp_path) == MAX_README_WORDS + 1
    assert imports_of_the_command(tmp_path) == ["trainers/evolve/loop.py:1", "trainers/evolve/loop.py:3"]

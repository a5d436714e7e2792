"""Synthesize filtered tasks for any environment and store them in SQLite.

Explores the environment with the schema-driven explorer, synthesizes tasks offline, filters
them (invalid references, near-duplicates of kept/seed/held-out tasks, infeasible references),
writes the kept ones with their provenance to ``--out`` and prints a summary of the filters,
then one JSON line with the figures.

Run:

    python -m langgraph_evolver.questioning --env sandbox --n 50 --out runs/tasks.sqlite
    python -m langgraph_evolver.questioning --setup examples/langchain_tools_env.py:register_todo_environment \\
        --env todo --n 20 --out runs/todo_tasks.sqlite
    python -m langgraph_evolver.questioning --env my_pkg.envs:make_env --n 200 --out tasks.sqlite
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from langgraph_evolver.errors import ConfigError

from .pipeline import synthesize_tasks
from .store import TaskStore


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m langgraph_evolver.questioning", description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="sandbox", help="registered environment name or 'module:factory' path")
    parser.add_argument("--n", type=int, default=50, help="tasks to keep")
    parser.add_argument("--out", default="runs/tasks.sqlite", help="SQLite TaskStore to write")
    parser.add_argument("--jsonl", default=None, help="also export the store to this JSONL file")
    parser.add_argument("--seed", type=int, default=0, help="exploration/synthesis seed")
    parser.add_argument(
        "--setup",
        action="append",
        default=[],
        help="call 'module:function' or 'path/to/file.py:function' first (e.g. one that registers the env)",
    )
    parser.add_argument("--n-breadth", type=int, default=3, help="breadth-phase calls per exploration")
    parser.add_argument("--n-depth", type=int, default=17, help="depth-phase calls per exploration")
    parser.add_argument("--max-ops", type=int, default=3, help="most calls in one task (difficulty)")
    parser.add_argument("--per-exploration", type=int, default=20, help="candidates sampled per exploration")
    parser.add_argument("--threshold", type=float, default=0.9, help="near-duplicate embedding cosine")
    parser.add_argument("--max-explorations", type=int, default=None, help="exploration budget (default 2n+10)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def run_setup(target: str) -> None:
    """Call ``module:function`` or ``path/file.py:function`` (no arguments)."""
    location, sep, attr = target.rpartition(":")
    if not sep or not location or not attr:
        raise ConfigError(f"--setup {target!r} must be 'module:function' or 'path/to/file.py:function'.")
    if location.endswith(".py"):
        path = Path(location).resolve()
        name = f"_questioning_setup_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"--setup: cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the file executes
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(location)
    getattr(module, attr)()


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    import env_tools.base  # noqa: F401 - registers the built-in environments

    for target in args.setup:
        run_setup(target)
    tasks, report = synthesize_tasks(
        args.env,
        args.n,
        seed=args.seed,
        n_breadth=args.n_breadth,
        n_depth=args.n_depth,
        max_ops=args.max_ops,
        per_exploration=args.per_exploration,
        threshold=args.threshold,
        max_explorations=args.max_explorations,
        progress=not args.no_progress,
    )
    with TaskStore(args.out) as store:
        added = store.add_many(tasks)
        if args.jsonl:
            store.export_jsonl(args.jsonl)
        total = len(store)
    f = report.filters
    print(f"explored {report.explorations} worlds, {f.candidates} candidates -> {report.kept} kept ({report.seconds}s)")
    for name, count in f.removed.items():
        print(f"  removed by {name}: {count}")
    for reason, count in sorted(f.reasons.items(), key=lambda kv: -kv[1]):
        print(f"    {count:4d}  {reason}")
    print(f"  by level: {report.by_level}; phrasing overlap with seed tasks: {report.phrasing_overlap:.3f}")
    print(f"  stored {added} new tasks in {args.out} ({total} in all)")
    print(json.dumps({**report.to_dict(), "out": args.out, "added": added, "stored": total}))
    return 0 if report.kept >= args.n else 1


if __name__ == "__main__":
    sys.exit(main())

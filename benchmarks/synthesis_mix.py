"""What a synthesized task set is made of: how many tasks use each tool, which tool opens them, fact questions.

    python benchmarks/synthesis_mix.py --env "mcp:python examples/mcp_servers/sheets.py"   # ~6-10 min on 2 cores

The same call as ``trainers.evolve adapt``'s first phase (``--n 100 --seed 1234 --n_depth 17``), so its figures
are the ones an adapt run trains on. A tool in half the tasks is the prior a model trained on them learns
(``docs/self-questioning.md``, "One tool's share"). Ends with one JSON line: ``env``, ``kept``, ``explorations``,
``over_cap``, ``facts``, ``max_tool_share``, ``tools`` (tasks using each tool), ``first`` (tasks each tool opens)
and ``seconds``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langgraph_evolver.questioning import synthesize_tasks  # noqa: E402
from langgraph_evolver.questioning.facts import FACT_KEY  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", required=True, help="registered environment name, 'module:factory' or 'mcp:<command>'")
    parser.add_argument("--n", type=int, default=100, help="tasks asked for (adapt's --tasks)")
    parser.add_argument("--seed", type=int, default=1234, help="synthesis seed (adapt's --seed)")
    parser.add_argument("--n_depth", type=int, default=17, help="depth-phase calls per exploration (adapt's --n_depth)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    tasks, report = synthesize_tasks(args.env, args.n, seed=args.seed, n_depth=args.n_depth)
    tools, first = Counter[str](), Counter[str]()
    for task in tasks:
        names = [c.name for c in task.reference_solution or ()]
        tools.update(set(names))
        first.update(names[:1])
    figures = {"env": args.env, "kept": len(tasks), "explorations": report.explorations, "over_cap": report.over_cap,
               "facts": sum(FACT_KEY in t.metadata for t in tasks),
               "max_tool_share": round(max(tools.values(), default=0) / max(1, len(tasks)), 3),
               "tools": dict(tools.most_common()), "first": dict(first.most_common()),
               "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()

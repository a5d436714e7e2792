"""What the offline synthesizer makes of an environment, before sampling and filters: every candidate of the
explorations the pipeline would run on a world with no seed tasks (an MCP server), counted.

    python benchmarks/synthesis_candidates.py --env "mcp:python examples/mcp_servers/shipping.py"
    python benchmarks/synthesis_candidates.py --env "mcp:python examples/mcp_servers/garage.py" --show named

The schema explorer is deterministic for a seed and each exploration starts where ``reach.next_setup`` puts it,
as in ``questioning.asynthesize_tasks``; no model runs, so two versions of the code compare on the same
explorations (copy this file into a checkout of the other and run it there). ``--show`` prints the
candidates of a kind (``named``: requests naming records, their lookups first; ``facts``; ``all``) with their
reference tools; ``--out`` writes them all as JSON.

Ends with one JSON line: ``candidates``, ``named`` (``metadata["resolves"]``), ``facts`` (``metadata["fact"]``),
``writes`` (a reference call to a tool ``profile.tool_kind`` reads as a write, by its name and description; since
session 72), ``distinct_queries``, ``explorations``, ``seconds``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langgraph_evolver.questioning import pipeline  # noqa: E402
from langgraph_evolver.questioning.explore import exploration_task, explore_fresh, unsafe_tools  # noqa: E402
from langgraph_evolver.questioning.profile import tool_kind  # noqa: E402
from langgraph_evolver.questioning.reach import next_setup  # noqa: E402
from langgraph_evolver.questioning.synthesize import RESOLVES_KEY, synthesize  # noqa: E402


def candidates(env: str, explorations: int, *, seed: int = 0, max_ops: int = 3) -> list[dict]:
    """Every candidate of ``explorations`` explorations of ``env`` (no seed tasks), as the pipeline makes them."""
    trajectories: list = []
    avoid: set[str] = set()
    rows: list[dict] = []
    for r in range(explorations):
        round_seed = seed * 1_000_003 + r
        task = exploration_task(None, env=env, seed=round_seed)
        setup = next_setup(trajectories, r)
        if setup:
            task = dataclasses.replace(task, metadata={**task.metadata, "setup": setup})
        trajectory = explore_fresh(pipeline._default_factory, task, n_breadth=3, n_depth=17, seed=round_seed,
                                   avoid=avoid)  # fmt: skip
        avoid |= unsafe_tools(trajectory)
        trajectories.append(trajectory)
        described = trajectory.metadata.get("tool_descriptions") or {}
        for task in synthesize(trajectory, max_ops=max_ops, max_tasks=None, seed=seed + r + 1):
            meta = task.metadata
            names = [c.name for c in task.reference_solution or ()]
            rows.append({"exploration": r, "query": task.query,
                         "reference": names, "named": bool(meta.get(RESOLVES_KEY)), "fact": bool(meta.get("fact")),
                         "writes": any(tool_kind(n, described.get(n, "")) == "write" for n in names)})  # fmt: skip
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", required=True, help="an environment with no seed tasks, e.g. 'mcp:python server.py'")
    p.add_argument("--explorations", type=int, default=17, help="explorations (a 100-task adapt run made 13-17)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--show", choices=["named", "facts", "all"], default=None, help="print these candidates")
    p.add_argument("--out", default=None, help="write every candidate to this JSON file")
    args = p.parse_args()
    started = time.perf_counter()
    rows = candidates(args.env, args.explorations, seed=args.seed)
    if args.show:
        for row in rows:
            if args.show == "all" or row["named" if args.show == "named" else "fact"]:
                kind = ("N " if row["named"] else "  ") + ("F " if row["fact"] else "  ")
                print(kind + row["query"], row["reference"])
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    seconds = round(time.perf_counter() - started, 1)
    print(json.dumps({"env": args.env, "candidates": len(rows), "named": sum(r["named"] for r in rows),
                      "facts": sum(r["fact"] for r in rows), "writes": sum(r["writes"] for r in rows),
                      "distinct_queries": len({r["query"] for r in rows}),
                      "explorations": args.explorations, "seconds": seconds}))  # fmt: skip


if __name__ == "__main__":
    main()

"""What the schema explorer reaches on one environment: each tool's calls that worked and that failed, over seeds.

    python benchmarks/explore_reach.py --env "mcp:python examples/mcp_servers/shipping.py" --seeds 20   # ~1 min

A tool with failures and no success is one self-questioning writes no task with (``docs/self-questioning.md``).
Ends with one JSON line: ``env``, ``seeds``, ``ok`` and ``failed`` (calls per tool, all seeds together),
``unreached`` (tools called only with errors) and ``seconds``.
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

from tqdm.auto import tqdm  # noqa: E402

from langgraph_evolver.questioning.explore import explore_environment  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", required=True, help="registered environment name, 'module:factory' or 'mcp:<command>'")
    parser.add_argument("--seeds", type=int, default=20, help="explorations, seeds 0..n-1, each on a fresh instance")
    args = parser.parse_args(argv)
    ok, failed = Counter[str](), Counter[str]()
    started = time.perf_counter()
    for seed in tqdm(range(args.seeds), desc="explore", unit="exploration"):
        for call, obs in explore_environment(args.env, seed=seed).tool_results():
            (failed if obs.is_error else ok)[call.name] += 1
    figures = {"env": args.env, "seeds": args.seeds, "ok": dict(sorted(ok.items())),
               "failed": dict(sorted(failed.items())), "unreached": sorted(set(failed) - set(ok)),
               "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()

"""Transfer to a sandbox app the warm start never saw: reward on the test tasks that use it, against the rest.

A warm start with ``--exclude-apps calendar`` supervised no chat that shows or calls a calendar tool
(``trainers.synthetic_domains.without_apps``). This runs the model on the sandbox's held-out (test)
split, in-process and batched as the warm start's own validation does (``trainers.warm_start.batched_rollouts``,
temperature 1), and reports the figures of the tasks that use any left-out app (``unseen``) and of those
that use none (``seen``), so the gap is the cost of never having seen the app. One JSON line::

    python -m benchmarks.leave_app_out --model runs/warm-no-calendar --apps calendar --tasks 200
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def split_by_apps(tasks: list[Any], apps: list[str]) -> tuple[list[Any], list[Any]]:
    """(tasks that show or call a tool of ``apps``, the others): the complement of ``without_apps``."""
    from trainers.synthetic_domains import without_apps

    seen = without_apps(tasks, apps)
    kept = {id(t) for t in seen}
    return [t for t in tasks if id(t) not in kept], seen


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="the warm start's output directory (an adapter) or a model")
    p.add_argument("--apps", required=True, help="the apps the warm start left out (comma-separated)")
    p.add_argument("--tasks", type=int, default=200, help="test-split tasks to draw both groups from")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from env_tools.sandbox import generate_tasks

    unseen, seen = split_by_apps(generate_tasks("test", args.tasks), [a for a in args.apps.split(",") if a])
    if not unseen:
        raise SystemExit(f"none of the first {args.tasks} test tasks uses {args.apps}; raise --tasks")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainers.models import resolve_model
    from trainers.warm_start import batched_rollouts, summarize_rollouts

    torch.set_num_threads(args.threads)
    path = resolve_model(args.model)
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path).eval()
    result: dict[str, Any] = {"model": args.model, "apps": args.apps, "split": "test"}
    for name, group in (("unseen", unseen), ("seen", seen)):
        rollouts = batched_rollouts(model, tokenizer, group, batch_size=args.batch_size, seed=args.seed)
        result[name] = summarize_rollouts(rollouts) | {"tasks": len(group)}
    result["command"] = "python -m benchmarks.leave_app_out " + " ".join(sys.argv[1:] if argv is None else argv)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

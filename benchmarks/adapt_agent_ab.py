"""A/B of how ``trainers.evolve adapt``'s agent plays, one adapter: a finished run's chosen adapter on the run's
validation part, played with adapt's flags A and then B (say ``--no_repeat_guard`` against the default), paired
and seeded.

    python benchmarks/adapt_agent_ab.py --run runs/r62/adapt-library-11 --out runs/r63/ab-guard \\
        --env "mcp:python examples/mcp_servers/library.py" --model_path checkpoints/smollm2-warm-doc \\
        --a=--no_repeat_guard --b=   # ~15 min

Nothing is trained: the two sides differ only in the flags that shape the episodes (the agent, its turn limit,
the policy server's strict tools). Validation only: the held-out tasks are not read. Ends with one JSON line:
``a``, ``b``, ``paired_gain``, ``lower_bound``, ``max_turns_share`` (share of each side's episodes stopped at the
turn limit), ``answered_after_error``, ``first_call_right``, ``seconds``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.adapt_diagnose import answered_after_error, first_call_right, replay_arguments  # noqa: E402
from langgraph_evolver.types import write_jsonl  # noqa: E402
from trainers.evaluate import summarize  # noqa: E402
from trainers.evolve.adapt import Run, make_parser, phase_dir, tasks_file  # noqa: E402
from trainers.evolve.gate import decide_paired, sample_rewards  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    replay_arguments(p, "where the rollouts go")
    p.add_argument("--a", default="", help="adapt flags of side A, one string (--a=--no_repeat_guard)")
    p.add_argument("--b", default="", help="adapt flags of side B, one string")
    args = p.parse_args(argv)
    started = time.perf_counter()
    src, out = Path(args.run), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chosen = Path(json.loads((phase_dir(src, "gate") / "done.json").read_text())["adapter"])
    adapter = out / "adapter"
    if not adapter.exists():  # the policy server loads weights from under --out only
        shutil.copytree(chosen, adapter)
    tasks = tasks_file(src / "2-split" / "validation.jsonl")
    played = {}
    for side in ("a", "b"):
        flags = ["--env", args.env, "--model_path", args.model_path, "--output_dir", str(out), "--minutes", "60",
                 "--seed", str(args.seed), "--no_progress", *shlex.split(getattr(args, side))]  # fmt: skip
        run = Run(make_parser().parse_args(flags))
        try:
            played[side] = run.rollouts(tasks, adapter, k=args.k, seed=args.seed)
        finally:
            run.stop()
        write_jsonl(out / f"{side}.jsonl", played[side])
    decision = decide_paired(sample_rewards(played["b"]), sample_rewards(played["a"]), seed=args.seed)
    line = {
        "run": str(src), "tasks": len(tasks), "k": args.k, "flags": {"a": args.a, "b": args.b},
        **{side: summarize(played[side], args.k)["all"][f"avg@{args.k}"] for side in played},
        "paired_gain": decision.paired_gain, "lower_bound": decision.lower_bound,
        "max_turns_share": {side: round(sum(t.finish_reason == "max_turns" for t in v) / max(len(v), 1), 3)
                            for side, v in played.items()},
        "answered_after_error": {side: answered_after_error(v) for side, v in played.items()},
        "first_call_right": {side: first_call_right(v) for side, v in played.items()},
        "seconds": round(time.perf_counter() - started, 1),
    }  # fmt: skip
    print(json.dumps(line))
    return line


if __name__ == "__main__":
    main()

"""A/B of strict tool calls (``--strict-tools``: names, argument keys and required arguments held to the server's
tools; with ``--grounded_ids`` also ids copied from the conversation) on a finished ``trainers.evolve adapt`` run:
its starting model and its chosen adapter played again with the same seeds by a policy server with
``--strict-tools``, paired with the run's own evaluations (loose before session 58, strict from then on).

    python benchmarks/strict_tools_ab.py --run runs/r58/adapt-sheets --out runs/r58/ab-strict \\
        --env "mcp:python examples/mcp_servers/sheets.py" --model_path checkpoints/smollm2-warm-doc \\
        [--heldout examples/mcp_servers/sheets_tasks.jsonl]

The validation part decides (the run's ``7-gate``); ``--heldout`` only reports: the run's ``8-heldout`` files are
the ``run`` side. Ends with one JSON line per part: each side's avg@k, the replayed - run paired gains (starting
model and adapter) with the gate's 90% bounds, the replay's own before -> after gain and bound, the share of calls
refused for their schema (an unknown tool or argument, a missing required one) and the share of id values the
conversation had not shown (``ungrounded_ids``) on each side.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.adapt_diagnose import replay_arguments  # noqa: E402
from langgraph_evolver.types import Trajectory, read_jsonl, write_jsonl  # noqa: E402
from trainers.evaluate import summarize  # noqa: E402
from trainers.evolve.adapt import Run, make_parser, phase_dir, tasks_file  # noqa: E402
from trainers.evolve.gate import decide_paired, sample_rewards  # noqa: E402
from trainers.serving.strict_tools import grounded_id  # noqa: E402

SCHEMA_ERRORS = ("unknown tool", "unknown argument", "Field required")
"""What the MCP servers' errors say when a call does not fit a tool's schema (``env_tools.mcp``)."""


def schema_error_share(trajectories: list[Trajectory]) -> float:
    """The share of tool calls whose observation is a schema error."""
    calls = [o for t in trajectories for s in t.steps for o in s.observations]
    bad = [o for o in calls if o.is_error and any(e in o.content for e in SCHEMA_ERRORS)]
    return round(len(bad) / len(calls), 3) if calls else 0.0


def recorded_adapter(run: Path, recorded: str) -> Path:
    """The gate's adapter: the path it recorded (relative to where the run was started), else the same phase
    folder under ``run`` (``5-grpo/train/checkpoint-9``), so the script works from any directory."""
    path = Path(recorded)
    if path.exists():
        return path
    phase = next((i for i, part in enumerate(path.parts) if re.fullmatch(r"\d-[a-z]+", part)), None)
    if phase is None or not (run / Path(*path.parts[phase:])).exists():
        raise SystemExit(f"the gate's adapter {recorded} is not there, nor under {run}")
    return run / Path(*path.parts[phase:])


def ungrounded_id_share(trajectories: list[Trajectory]) -> float:
    """The share of id arguments (``strict_tools.grounded_id``) whose value the request and the results before the
    call did not show."""
    seen = shown = 0
    for t in trajectories:
        context = t.task.query
        for step in t.steps:
            for call in step.action.tool_calls:
                values = [v for k, v in (call.arguments or {}).items() if grounded_id(k) and isinstance(v, str)]
                seen += len(values)
                shown += sum(v in context for v in values)
            context += "".join("\n" + o.content for o in step.observations)
    return round(1 - shown / seen, 3) if seen else 0.0


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    replay_arguments(p, "where the replayed evaluations go")
    p.add_argument("--heldout", default=None, help="the run's --heldout (reported, never chosen on)")
    p.add_argument("--grounded_ids", action="store_true", help="the replay's server copies ids (--grounded-ids)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    src, out = Path(args.run), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gate = json.loads((phase_dir(src, "gate") / "done.json").read_text())
    adapter = out / "adapter"
    if not adapter.exists():  # the policy server loads weights from under --out only
        shutil.copytree(recorded_adapter(src, gate["adapter"]), adapter)
    run = Run(make_parser().parse_args(["--env", args.env, "--model_path", args.model_path, "--output_dir", str(out),
                                        "--minutes", "60", "--seed", str(args.seed), "--strict_tools",
                                        "--no_progress"]))  # fmt: skip
    run.server_args = ["--grounded-ids"] * args.grounded_ids
    parts = {"validation": (tasks_file(src / "2-split" / "validation.jsonl"), phase_dir(src, "gate"))}
    if args.heldout:
        from env_tools.mcp_tasks import load_task_file

        parts["heldout"] = (load_task_file(Path(args.heldout), env=args.env), phase_dir(src, "heldout"))
    lines = {}
    try:
        for part, (tasks, loose_dir) in parts.items():
            line: dict = {"part": part, "tasks": len(tasks), "k": args.k, "chosen": gate.get("chosen")}
            played = {}
            for side, weights in (("before", None), ("after", adapter)):
                path = out / f"{part}-{side}.jsonl"
                if not path.exists():
                    write_jsonl(path, run.rollouts(tasks, weights, k=args.k, seed=args.seed))
                played[side] = list(read_jsonl(path, Trajectory))
                loose = list(read_jsonl(loose_dir / f"{side}.jsonl", Trajectory))
                decision = decide_paired(sample_rewards(played[side]), sample_rewards(loose), seed=args.seed)
                line[side] = {"run": summarize(loose, args.k)["all"][f"avg@{args.k}"],
                              "replayed": summarize(played[side], args.k)["all"][f"avg@{args.k}"],
                              "gain": decision.paired_gain, "lower_bound": decision.lower_bound,
                              "schema_errors": {"run": schema_error_share(loose),
                                                "replayed": schema_error_share(played[side])},
                              "ungrounded_ids": {"run": ungrounded_id_share(loose),
                                                 "replayed": ungrounded_id_share(played[side])}}  # fmt: skip
            own = decide_paired(sample_rewards(played["after"]), sample_rewards(played["before"]), seed=args.seed)
            line["replayed_gain"] = {"gain": own.paired_gain, "lower_bound": own.lower_bound}
            print(json.dumps(line), flush=True)
            lines[part] = line
    finally:
        run.stop()
    result = {**lines, "seconds": round(time.perf_counter() - started, 1)}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

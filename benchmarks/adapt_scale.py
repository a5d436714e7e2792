"""A finished adapt run's chosen adapter with its LoRA update scaled down (WiSE-FT's weight interpolation for a
LoRA: ``lora_alpha`` times ``s`` puts the weights at ``W + s * BA``, between the starting model at 0 and the
adapter at 1), played on the run's tasks, paired and seeded with the run's own rollouts of the starting model and
the full adapter.

    python benchmarks/adapt_scale.py --run runs/r72/adapt-shelter-2 --out runs/r74/scale-shelter \\
        --env "mcp:python examples/mcp_servers/shelter.py" --model_path checkpoints/smollm2-warm-doc \\
        --scales 0.5 --part heldout   # one 1-thread server: ~10-40 min a scale

``--part validation`` plays the run's validation tasks (read back: ``7-gate``), ``--part heldout`` its
held-out ones (``8-heldout``, and so only on a domain whose held-out tasks were already spent: a scale chosen
there is a development figure, and a clean figure needs another domain). The run's ``before.jsonl`` and
``after.jsonl`` there are scale 0 and 1 (the same tasks and seed give the same rollouts; a ``--k`` below the
run's takes their first k samples); each scale's rollouts are written to ``--out/scale-<s>.jsonl`` and read back
on a rerun. Ends with one JSON line: per scale its avg@k, the paired gain over the starting model and over the
full adapter with their 90% lower bounds, and ``first_call_right``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.adapt_diagnose import first_call_right, replay_arguments  # noqa: E402
from langgraph_evolver.types import Trajectory, read_jsonl, write_jsonl  # noqa: E402
from trainers.evaluate import summarize  # noqa: E402
from trainers.evolve.adapt import Run, make_parser, phase_dir  # noqa: E402
from trainers.evolve.adapt_data import played_before  # noqa: E402
from trainers.evolve.gate import decide_paired, sample_rewards  # noqa: E402


def scaled_adapter(adapter: Path, scale: float, out: Path) -> Path:
    """A copy of ``adapter`` under ``out`` whose update is ``scale`` times the original's (``lora_alpha`` and any
    ``alpha_pattern`` entries scaled; the weights are not touched)."""
    if not 0.0 < scale:
        raise SystemExit(f"--scales must be above 0, got {scale}")
    target = out / f"adapter-{scale:g}"
    if not target.exists():
        shutil.copytree(adapter, target)
        config_path = target / "adapter_config.json"
        config = json.loads(config_path.read_text())
        config["lora_alpha"] = config["lora_alpha"] * scale
        config["alpha_pattern"] = {k: v * scale for k, v in (config.get("alpha_pattern") or {}).items()}
        config_path.write_text(json.dumps(config, indent=2))
    return target


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    replay_arguments(p, "where the scaled adapters and their rollouts go")
    p.add_argument("--scales", default="0.5", help="comma-separated factors, each above 0 (1 is the run's adapter)")
    p.add_argument("--part", choices=("validation", "heldout"), default="validation")
    args = p.parse_args(argv)
    started = time.perf_counter()
    src, out = Path(args.run), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    d = phase_dir(src, "gate" if args.part == "validation" else "heldout")
    chosen = json.loads((d / "done.json").read_text())
    ends = {
        name: [t for t in read_jsonl(d / f"{name}.jsonl", Trajectory) if (t.rollout_index or 0) < args.k]
        for name in ("before", "after")
    }  # a smaller --k than the run's: its first k samples, the same seeds
    tasks = list({t.task.id: t.task for t in ends["before"]}.values())
    for name, rows in ends.items():
        if Counter(t.task.id for t in rows) != {t.id: args.k for t in tasks}:
            raise SystemExit(f"{d}/{name}.jsonl does not hold --k {args.k} rollouts of every task")
    run = Run(make_parser().parse_args(["--env", args.env, "--model_path", args.model_path, "--output_dir",
                                        str(out), "--seed", str(args.seed), "--no_progress",
                                        "--eval_servers", "1", "--minutes", "60"]))  # fmt: skip
    played: dict[str, list[Trajectory]] = {}
    try:
        for scale in (float(s) for s in args.scales.split(",")):
            name = f"scale-{scale:g}"
            back = played_before(out, tasks, args.k, name=name)
            if back is None:
                rows = run.rollouts(tasks, scaled_adapter(Path(chosen["adapter"]), scale, out), k=args.k,
                                    seed=args.seed)  # fmt: skip
                write_jsonl(out / f"{name}.jsonl", rows)
                back = {name: rows}
            played[name] = back[name]
    finally:
        run.stop()
    figures = {}
    for name, rows in {"scale-0": ends["before"], **played, "scale-1": ends["after"]}.items():
        over_start = decide_paired(sample_rewards(rows), sample_rewards(ends["before"]), seed=args.seed)
        over_full = decide_paired(sample_rewards(rows), sample_rewards(ends["after"]), seed=args.seed)
        figures[name] = {"avg": summarize(rows, args.k)["all"][f"avg@{args.k}"],
                         "gain_over_start": over_start.paired_gain, "bound_over_start": over_start.lower_bound,
                         "gain_over_full": over_full.paired_gain, "bound_over_full": over_full.lower_bound,
                         "first_call_right": first_call_right(rows)}  # fmt: skip
        print(
            f"{name:10s} avg@{args.k} {figures[name]['avg']:.3f}  over start {over_start.paired_gain:+.3f} "
            f"(bound {over_start.lower_bound:+.3f})  over full {over_full.paired_gain:+.3f}",
            file=sys.stderr,
        )
    line = {"run": str(src), "part": args.part, "tasks": len(tasks), "k": args.k, "adapter": chosen["adapter"],
            "scales": figures, "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    print(json.dumps(line))
    return line


if __name__ == "__main__":
    main()

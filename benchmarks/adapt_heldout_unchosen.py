"""The adapter an adapt run did not choose, on its held-out tasks, paired with the run's own held-out rollouts.

    python benchmarks/adapt_heldout_unchosen.py --run runs/r64/adapt-library-13 --out runs/r64/heldout-supervised \\
        --env "mcp:python examples/mcp_servers/library.py" --model_path checkpoints/smollm2-warm-doc \\
        --heldout examples/mcp_servers/library_tasks.jsonl   # ~6 minutes on 2 cores

Reporting only, never choosing: validation chose the run's adapter, and this says whether the other one (the
supervised adapter when GRPO's was chosen, and the other way round) would have done better on the user's tasks,
which is how to tell GRPO that learns the synthesized tasks' wording from GRPO that learns the domain. The
adapter plays the held-out tasks with the run's ``--k`` and seed (rollouts in ``unchosen.jsonl``); the paired
bootstrap bounds it against the run's starting model and against the chosen adapter (the run's
``before.jsonl`` and ``after.jsonl``). One JSON line at the end. ``--adapter PATH`` plays that adapter instead
(the B side of ``adapt_supervise_ab``: what the held-out tasks say of a change validation chose, for the record).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.adapt_diagnose import replay_arguments  # noqa: E402
from langgraph_evolver.types import Trajectory, read_jsonl, write_jsonl  # noqa: E402
from trainers.evaluate import summarize  # noqa: E402
from trainers.evolve.adapt import Run, make_parser, phase_dir  # noqa: E402
from trainers.evolve.gate import decide_paired, sample_rewards  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    from env_tools.mcp_tasks import load_task_file

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    replay_arguments(p, "where the unchosen adapter's rollouts go")
    p.add_argument("--heldout", required=True, help="the run's --heldout")
    p.add_argument("--adapter", default=None, help="play this adapter instead of the unchosen one (an A/B's B side, "
                   "adapt_supervise_ab's OUT/4-supervise/adapter)")  # fmt: skip
    args = p.parse_args(argv)
    started = time.perf_counter()
    src, out = Path(args.run), Path(args.out)
    gate = json.loads((phase_dir(src, "gate") / "done.json").read_text())
    if gate.get("chosen") not in ("supervised", "grpo"):
        p.error(f"{src}: the gate records no choice between two adapters")
    other = "grpo" if gate["chosen"] == "supervised" else "supervised"
    if args.adapter:
        found, other = Path(args.adapter), args.adapter
    elif other == "supervised":
        found = phase_dir(src, "supervise") / "adapter"
    else:
        found = Path(json.loads((phase_dir(src, "grpo") / "done.json").read_text())["adapter"] or "")
    if not (found / "adapter_config.json").exists():
        p.error(f"{src}: no {other} adapter to play ({found})")
    adapter = out / "adapter"
    if not adapter.exists():  # the policy server loads weights from under --out only
        shutil.copytree(found, adapter)
    run = Run(make_parser().parse_args(["--env", args.env, "--model_path", args.model_path, "--output_dir", str(out),
                                        "--minutes", "60", "--seed", str(args.seed), "--no_progress"]))  # fmt: skip
    tasks = load_task_file(Path(args.heldout), env=args.env)
    try:
        played = run.rollouts(tasks, adapter, k=args.k, seed=args.seed)
    finally:
        run.stop()
    write_jsonl(out / "unchosen.jsonl", played)
    held = phase_dir(src, "heldout")
    sides = {name: list(read_jsonl(held / f"{name}.jsonl", Trajectory)) for name in ("before", "after")}
    line: dict = {"run": str(src), "tasks": len(tasks), "k": args.k, "chosen": gate["chosen"], "unchosen": other,
                  "before": summarize(sides["before"], args.k)["all"][f"avg@{args.k}"],
                  "chosen_after": summarize(sides["after"], args.k)["all"][f"avg@{args.k}"],
                  "unchosen_after": summarize(played, args.k)["all"][f"avg@{args.k}"]}  # fmt: skip
    for name, base in sides.items():
        d = decide_paired(sample_rewards(played), sample_rewards(base), seed=args.seed)
        line[f"vs_{name}"] = {"paired_gain": round(d.paired_gain, 4), "lower_bound": round(d.lower_bound, 4)}
    line["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(line))
    return line


if __name__ == "__main__":
    main()

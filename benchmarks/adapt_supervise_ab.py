"""A/B of ``trainers.evolve adapt``'s supervise phase on a finished run's own tasks: this checkout's code against
the run's supervised adapter, on the run's validation part, paired and seeded.

    python benchmarks/adapt_supervise_ab.py --run runs/r54/adapt-library --out runs/r54/ab-supervise \\
        --env "mcp:python examples/mcp_servers/library.py" --model_path checkpoints/smollm2-warm-doc \\
        -- --mistake_chats   # adapt flags for B; ~30 min

The run's synthesize, split and rollouts phases are copied into ``--out`` and its supervise phase is redone
there with the same budget (``--minutes``, adapt's share) and seed and the adapt flags after ``--`` (with
``--more_sft N``, B also supervises the first N tasks of the run's rl part, as a larger sft share of ``--split``
would give it; the validation part is the run's, disjoint from both by the split); then both
supervised adapters (A: the run's, B: the new one) play the validation tasks, ``--k`` samples each with the
same seeds (rollouts in ``a.jsonl`` and ``b.jsonl``; A's read back from the run's ``5-validate/supervised.jsonl``
when it holds all of them), and the gate's paired bootstrap bounds B - A. Validation
only: the held-out tasks are not read. Ends with one JSON line: ``a``, ``b``, ``paired_gain``, ``lower_bound``,
``examples`` (A's and B's supervise counts), ``answered_after_error`` (share of each side's episodes that end
with an answer right after an error observation), ``first_call_right`` (share whose first call names the
tool the reference begins with), ``seconds``.
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

from benchmarks.adapt_diagnose import answered_after_error, first_call_right, replay_arguments  # noqa: E402
from langgraph_evolver.types import write_jsonl  # noqa: E402
from trainers.evaluate import summarize  # noqa: E402
from trainers.evolve.adapt import Run, make_parser, supervise_phase, tasks_file  # noqa: E402
from trainers.evolve.adapt_data import played_before  # noqa: E402
from trainers.evolve.gate import decide_paired, sample_rewards  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    replay_arguments(p, "where the new supervise phase and the evaluations go")
    p.add_argument("--minutes", type=float, default=60, help="the run's --minutes (sizes the supervise phase)")
    p.add_argument("--more_sft", type=int, default=0, help="B also supervises the run's first N rl tasks")
    p.add_argument("adapt_flags", nargs=argparse.REMAINDER, help="after --: adapt flags for B (e.g. --mistake_chats)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    src, out = Path(args.run), Path(args.out)
    for phase in ("1-synthesize", "2-split", "3-rollouts"):
        if not (out / phase).exists():
            shutil.copytree(src / phase, out / phase)
    if args.more_sft and not (out / "2-split" / "more_sft").exists():
        _move_rl_to_sft(out / "2-split", args.more_sft)
    adapt_args = ["--env", args.env, "--model_path", args.model_path, "--output_dir", str(out),
                  "--minutes", str(args.minutes), "--seed", str(args.seed), "--no_progress",
                  *[f for f in args.adapt_flags if f != "--"]]  # fmt: skip
    run = Run(make_parser().parse_args(adapt_args))
    b_counts = run.phase("supervise", lambda d: supervise_phase(run, d))
    tasks = tasks_file(out / "2-split" / "validation.jsonl")
    if not (out / "a-adapter").exists():  # the policy server loads weights from under --out only
        shutil.copytree(src / "4-supervise" / "adapter", out / "a-adapter")
    sides = {"a": out / "a-adapter", "b": out / "4-supervise" / "adapter"}
    # A's rollouts are the run's own validate phase's (since session 64) when it played all k of each task: the
    # same adapter, tasks and seeds (--seed is the run's) give the same rollouts
    ran = played_before(src / "5-validate", tasks, args.k, name="supervised")
    played = {"a": ran["supervised"]} if ran else {}
    try:
        for side, adapter in sides.items():
            if side not in played:
                played[side] = run.rollouts(tasks, adapter, k=args.k, seed=args.seed)
    finally:
        run.stop()
    for side in sides:
        write_jsonl(out / f"{side}.jsonl", played[side])
    decision = decide_paired(sample_rewards(played["b"]), sample_rewards(played["a"]), seed=args.seed)
    a_counts = json.loads((src / "4-supervise" / "done.json").read_text())
    line = {
        "run": str(src), "tasks": len(tasks), "k": args.k,
        **{side: summarize(played[side], args.k)["all"][f"avg@{args.k}"] for side in sides},
        "paired_gain": decision.paired_gain, "lower_bound": decision.lower_bound,
        "examples": {"a": a_counts, "b": b_counts},
        "answered_after_error": {side: answered_after_error(played[side]) for side in sides},
        "first_call_right": {side: first_call_right(played[side]) for side in sides},
        "seconds": round(time.perf_counter() - started, 1),
    }  # fmt: skip
    print(json.dumps(line))
    return line


def _move_rl_to_sft(split: Path, n: int) -> None:
    """The first ``n`` rl tasks appended to the sft part (once: a ``more_sft`` marker records it)."""
    rl = (split / "rl.jsonl").read_text().splitlines(keepends=True)
    with (split / "sft.jsonl").open("a") as sft:
        sft.writelines(rl[:n])
    (split / "rl.jsonl").write_text("".join(rl[n:]))
    (split / "more_sft").write_text(f"{min(n, len(rl))}\n")


if __name__ == "__main__":
    main()

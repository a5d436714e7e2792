"""Self-navigating without training: an agent made better (or not) at inference by retrieval alone.

1. The agent runs on training tasks; the rules extractor distils its rollouts into experiences;
   they go into a faiss pool keyed by MiniLM embeddings (``runs/navigate_inference/pool``).
2. On the held-out split, every task is run k times unguided and k times guided (the top-k
   experiences for the task, default 3, injected into the system prompt), and the two are compared
   task by task (paired: the difference's standard error is over tasks).

    python examples/navigate_inference.py                 # tiny policy, local CPU server (~6 min)
    python examples/navigate_inference.py --quick         # ~2 min
    python examples/navigate_inference.py --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct

Another local checkpoint (``--model`` without ``--base-url`` is a directory the CPU server loads), on
a pool built once and reused, or on a validation split carved from the training split (tasks
``sandbox-train-200000`` on: never in the pool's rollouts, the warm start's data or the held-out
split) to choose settings::

    python examples/navigate_inference.py --pool-only                      # build runs/navigate_inference/pool
    python examples/navigate_inference.py --reuse-pool --model checkpoints/tiny-policy-navigate
    python examples/navigate_inference.py --reuse-pool --split validation --n-test 40 --k 2

The warm-started checkpoint with the pool it was trained beside, one arm per run (a slow arm can
run on fewer tasks), then the two paired on the tasks both ran (``docs/self-navigating.md``)::

    python examples/navigate_inference.py --reuse-pool --pool-dir checkpoints/tiny-policy-navigate/experience_pool \
    --model checkpoints/tiny-policy-navigate --arms unguided --out /tmp/u.json  # then: --arms guided --out /tmp/g.json
    python examples/navigate_inference.py --combine /tmp/u.json /tmp/g.json

Your own agent: pass ``--agent my_pkg.agent:build_agent`` (any agent ``trainers.evaluate`` takes;
``create_agent`` agents need ``EvolverMiddleware`` to receive the block). Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
VALIDATION_START = 200_000  # training-split tasks from here on: the validation split


async def rollouts(agent, tasks, *, policy, k, navigator=None, guided=False, progress=""):
    from langgraph_evolver.batch import arun_rollouts

    return await arun_rollouts(agent, tasks, n=k, policy=policy, navigator=navigator,
                               guided=[guided] * (len(tasks) * k), max_turns=10, progress=progress)  # fmt: skip


def rewards_by_task(trajectories) -> dict[str, list[float]]:
    by_task: dict[str, list[float]] = {}
    for traj in trajectories:
        by_task.setdefault(traj.task.id, []).append(traj.reward or 0.0)
    return by_task


def _mean_se(values: list[float]) -> tuple[float, float]:
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
    return round(statistics.fmean(values), 4), round(se, 4)


def summary(by_task: dict[str, list[float]], name: str) -> dict[str, float]:
    """avg@k and success (reward 1) with their standard errors over tasks (the k samples of a task averaged)."""
    out = {}
    for key, value in (("avg", lambda r: r), ("success", lambda r: float(r >= 1.0))):
        out[f"{name}_{key}"], out[f"{name}_{key}_stderr"] = _mean_se(
            [statistics.fmean(map(value, rs)) for rs in by_task.values()]
        )
    return out


def paired(unguided: dict[str, list[float]], guided: dict[str, list[float]]) -> dict[str, float]:
    """Guided minus unguided, paired by task (the tasks both arms ran); standard errors over tasks."""
    tasks = [t for t in guided if t in unguided]
    out: dict[str, float] = {"paired_tasks": len(tasks)}
    for key, value in (("gain", lambda r: r), ("success_gain", lambda r: float(r >= 1.0))):
        diffs = [statistics.fmean(map(value, guided[t])) - statistics.fmean(map(value, unguided[t])) for t in tasks]
        out[key], out[f"{key}_stderr"] = _mean_se(diffs)
    return out


def combine(unguided_path: Path, guided_path: Path) -> dict:
    """The figures of two one-arm runs (``--arms unguided`` and ``--arms guided``) of one model."""
    u, g = json.loads(unguided_path.read_text()), json.loads(guided_path.read_text())
    ru, rg = u["rewards"]["unguided"], g["rewards"]["guided"]
    samples = {"unguided_samples": sum(map(len, ru.values())), "guided_samples": sum(map(len, rg.values()))}
    return {"model": u["model"], **samples, **summary(ru, "unguided"), **summary(rg, "guided"), **paired(ru, rg)}


async def main_async(args: argparse.Namespace, base_url: str, model: str) -> dict:
    from env_tools.sandbox import generate_tasks, seed_tasks
    from graphs.agent import reference_agent
    from langgraph_evolver import PolicyChatModel
    from langgraph_evolver.agent_spec import as_agent
    from langgraph_evolver.experience import FaissExperiencePool, Navigator, default_embeddings, extract_experiences

    agent = as_agent(args.agent) if args.agent else reference_agent()
    policy = PolicyChatModel(base_url=base_url, model=model, max_tokens=128, timeout=300)
    n_train, n_test, k = (60, 30, 2) if args.quick else (180, 75, 4)
    n_test, k = args.n_test or n_test, args.k or k
    train = seed_tasks("train")[:n_train]
    test = (
        seed_tasks("test")[:n_test] if args.split == "test" else generate_tasks("train", n_test, start=VALIDATION_START)
    )
    try:
        if args.reuse_pool and (args.pool_dir / "manifest.json").exists():
            seen, pool = [], FaissExperiencePool.load(args.pool_dir, default_embeddings())
        else:
            seen = await rollouts(agent, train, policy=policy, k=2, progress="training-task rollouts")
            result = extract_experiences(seen, "rules")
            pool = FaissExperiencePool(default_embeddings())
            pool.add(result.experiences)
            pool.save(args.pool_dir)
        if args.pool_only:
            return {
                "model": model,
                "train_rollouts": len(seen),
                "experiences": len(pool),
                "pool_dir": str(args.pool_dir),
            }
        navigator = Navigator(pool, top_k=args.top_k)
        runs = {}
        if args.arms in ("both", "unguided"):
            runs["unguided"] = await rollouts(agent, test, policy=policy, k=k, progress="held-out, unguided")
        if args.arms in ("both", "guided"):
            runs["guided"] = await rollouts(agent, test, policy=policy, k=k, navigator=navigator, guided=True,
                                            progress="held-out, guided")  # fmt: skip
    finally:
        await policy.aclose()
    rewards = {arm: rewards_by_task(trajs) for arm, trajs in runs.items()}
    figures = {"model": model, "split": args.split, "train_rollouts": len(seen), "experiences": len(pool),
               "top_k": args.top_k, "held_out_tasks": len(test), "k": k}  # fmt: skip
    for arm, by_task in rewards.items():
        figures.update(summary(by_task, arm))
    if len(rewards) == 2:
        figures.update(paired(rewards["unguided"], rewards["guided"]))
    if "guided" in runs:
        figures["retrieved_share"] = round(sum(bool(t.experience_ids) for t in runs["guided"]) / len(runs["guided"]), 3)
    return {**figures, "pool_dir": str(args.pool_dir), "rewards": rewards}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--base-url", help="an OpenAI-compatible endpoint (default: the CPU server on the tiny policy)")
    p.add_argument("--model", help="the model name at --base-url; without it, the checkpoint directory to serve")
    p.add_argument("--agent", help="your agent, 'my_pkg.agent:build_agent' (default: our reference agent)")
    p.add_argument("--pool-dir", type=Path, default=Path("runs/navigate_inference/pool"))
    p.add_argument("--top-k", type=int, default=3, help="experiences injected per guided rollout")
    p.add_argument("--reuse-pool", action="store_true", help="load the pool saved in --pool-dir instead of building it")
    p.add_argument("--pool-only", action="store_true", help="build (or load) the pool and stop")
    p.add_argument("--split", choices=["test", "validation"], default="test",
                   help="held-out test split, or validation tasks carved from the training split")  # fmt: skip
    p.add_argument("--n-test", type=int, help="tasks to evaluate (default 75, --quick 30)")
    p.add_argument("--k", type=int, help="samples per task each way (default 4, --quick 2)")
    p.add_argument("--out", type=Path, help="also write the JSON figures (with every task's rewards) here")
    p.add_argument("--arms", choices=["both", "unguided", "guided"], default="both", help="which arms to run")
    p.add_argument("--combine", nargs=2, type=Path, metavar=("UNGUIDED_JSON", "GUIDED_JSON"),
                   help="print the figures of two one-arm --out files (paired on shared tasks) and stop")  # fmt: skip
    args = p.parse_args()
    if args.combine:
        print(json.dumps(combine(*args.combine)))
        return
    if args.base_url:
        figures = asyncio.run(main_async(args, args.base_url, args.model))
    else:
        from trainers.serving import PolicyServerProcess
        from trainers.tiny import DEFAULT_CHECKPOINT

        checkpoint = args.model or str(DEFAULT_CHECKPOINT)
        log = Path("runs/navigate_inference") / f"server-{Path(checkpoint).name}-{args.split}.log"
        server = PolicyServerProcess(checkpoint, log_path=log)
        server.start()
        try:
            figures = asyncio.run(main_async(args, server.base_url, server.model_name))
        finally:
            server.stop()
    if not args.base_url:
        figures["model"] = args.model or str(DEFAULT_CHECKPOINT)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=2))
    print(json.dumps({k: v for k, v in figures.items() if k != "rewards"}))


if __name__ == "__main__":
    main()

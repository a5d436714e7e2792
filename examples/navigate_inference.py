"""Self-navigating without training: an agent made better (or not) at inference by retrieval alone.

1. The agent runs on training tasks; the rules extractor distils its rollouts into experiences;
   they go into a faiss pool keyed by MiniLM embeddings (``runs/navigate_inference/pool``).
2. On the held-out split, every task is run k times unguided and k times guided (the top-k
   experiences for the task, default 3, injected into the system prompt), and the two are compared
   task by task (paired: the difference's standard error is over tasks).

    python examples/navigate_inference.py                 # tiny policy, local CPU server (~6 min)
    python examples/navigate_inference.py --quick         # ~2 min
    python examples/navigate_inference.py --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct

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


async def rollouts(agent, tasks, *, policy, k, navigator=None, guided=False, progress=""):
    from langgraph_evolver.rollout import arun_rollouts

    return await arun_rollouts(agent, tasks, n=k, policy=policy, navigator=navigator,
                               guided=[guided] * (len(tasks) * k), max_turns=10, progress=progress)  # fmt: skip


def paired(unguided, guided) -> dict[str, float]:
    by_task: dict[str, list[list[float]]] = {}
    for traj in unguided:
        by_task.setdefault(traj.task.id, [[], []])[0].append(traj.reward or 0.0)
    for traj in guided:
        by_task[traj.task.id][1].append(traj.reward or 0.0)
    diffs = [statistics.fmean(g) - statistics.fmean(u) for u, g in by_task.values()]
    stderr = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else 0.0
    return {"gain": round(statistics.fmean(diffs), 4), "gain_stderr": round(stderr, 4)}


async def main_async(args: argparse.Namespace, base_url: str, model: str) -> dict:
    from env_tools.sandbox import seed_tasks
    from graphs.agent import reference_agent
    from langgraph_evolver import PolicyChatModel
    from langgraph_evolver.dropin import as_agent
    from langgraph_evolver.experience import FaissExperiencePool, Navigator, default_embeddings, extract_experiences

    agent = as_agent(args.agent) if args.agent else reference_agent()
    policy = PolicyChatModel(base_url=base_url, model=model, max_tokens=128, timeout=300)
    n_train, n_test, k = (60, 30, 2) if args.quick else (180, 75, 4)
    train, test = seed_tasks("train")[:n_train], seed_tasks("test")[:n_test]
    try:
        seen = await rollouts(agent, train, policy=policy, k=2, progress="training-task rollouts")
        result = extract_experiences(seen, "rules")
        pool = FaissExperiencePool(default_embeddings())
        pool.add(result.experiences)
        pool.save(args.pool_dir)
        navigator = Navigator(pool, top_k=args.top_k)
        unguided = await rollouts(agent, test, policy=policy, k=k, progress="held-out, unguided")
        guided = await rollouts(agent, test, policy=policy, k=k, navigator=navigator, guided=True,
                                progress="held-out, guided")  # fmt: skip
    finally:
        await policy.aclose()
    mean = lambda ts: round(statistics.fmean(t.reward or 0.0 for t in ts), 4)  # noqa: E731
    return {"model": model, "train_rollouts": len(seen), "experiences": len(pool),
            "held_out_tasks": len(test), "k": k, "unguided_avg": mean(unguided), "guided_avg": mean(guided),
            **paired(unguided, guided),
            "retrieved_share": round(sum(bool(t.experience_ids) for t in guided) / len(guided), 3),
            "pool_dir": str(args.pool_dir)}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--base-url", help="an OpenAI-compatible endpoint (default: the CPU server on the tiny policy)")
    p.add_argument("--model", help="the model name at --base-url")
    p.add_argument("--agent", help="your agent, 'my_pkg.agent:build_agent' (default: our reference agent)")
    p.add_argument("--pool-dir", type=Path, default=Path("runs/navigate_inference/pool"))
    p.add_argument("--top-k", type=int, default=3, help="experiences injected per guided rollout")
    args = p.parse_args()
    if args.base_url:
        figures = asyncio.run(main_async(args, args.base_url, args.model))
    else:
        from trainers.serving import PolicyServerProcess
        from trainers.tiny import DEFAULT_CHECKPOINT

        server = PolicyServerProcess(str(DEFAULT_CHECKPOINT), log_path=Path("runs/navigate_inference/server.log"))
        server.start()
        try:
            figures = asyncio.run(main_async(args, server.base_url, server.model_name))
        finally:
            server.stop()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

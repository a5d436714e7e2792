"""Self-questioning: how fast tasks are made, what each filter keeps, and the schema vs LLM explorer.

    python benchmarks/questioning.py            # ~3 min on 2 cores
    python benchmarks/questioning.py --quick    # ~1 min
    python benchmarks/questioning.py --learning # + the learning comparison (benchmarks/learning.py, ~1 h)

Ends with one JSON line:

- ``{env}_tasks_per_s``: kept tasks per second of the offline pipeline (schema explorer -> offline
  synthesizer -> filters with the packaged MiniLM) on the sandbox and on the LangChain-tools todo app
  of ``examples/langchain_tools_env.py``; ``{env}_candidates_per_s`` before filtering.
- ``{env}_kept_share`` and ``{env}_removed_share_{invalid,duplicate,infeasible}``: the share of
  candidates each filter removed (they run in that order); ``{env}_duplicates_found``;
  ``{env}_reasons``: the filters' reasons with counts.
- ``{env}_phrasing_overlap``: mean max token-Jaccard of the kept queries with the seed queries
  (train + held-out): 1.0 would mean synthetic = seed by construction.
- ``explorer_*``: the same worlds explored by the schema explorer and by the LLM explorer graph
  driving the committed tiny policy through the real CPU policy server (``PolicyChatModel``), side by
  side: turns per second, the share of turns whose tool call ran without an error, distinct tools
  called per exploration, and the tasks the offline synthesizer + filters keep per exploration. The
  tiny policy was trained to solve sandbox tasks, not to explore: its figures are a floor.
- With ``--learning``: runs ``benchmarks/learning.py --variants grpo,questioning,mixed`` (held-out
  avg@4 after training on ``--synthetic-n`` synthetic tasks only, or on the seed training split plus as
  many synthetic tasks, vs on the seed training split; same budget: ``--learning-steps`` steps, 3 seeds;
  ``--synthetic-per-world 1``: one task per explored world) and adds its ``questioning_*`` and
  ``mixed_*`` figures (``benchmarks/results/questioning/``). Both arms start from
  ``--start`` (default ``checkpoints/tiny-policy-synthetic``: the tiny policy that also read 3,000
  synthetic chats of training worlds, so it can read the synthesizer's phrasing; the committed
  ``checkpoints/tiny-policy`` earns 0.005 on synthetic tasks and would give the questioning arm no
  reward to learn from; ``docs/self-questioning.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
for _key, _value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(_key, _value)


def _todo_module():
    spec = importlib.util.spec_from_file_location("examples_langchain_tools_env", ROOT / "examples" /
                                                  "langchain_tools_env.py")  # fmt: skip
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def pipeline_figures(env: str, n: int, embeddings, factory=None) -> dict:
    from langgraph_evolver.questioning import synthesize_tasks

    tasks, report = synthesize_tasks(env, n, seed=0, embeddings=embeddings, env_factory=factory, progress=False)
    f = report.filters
    cands = max(1, f.candidates)
    return {
        f"{env}_kept": report.kept,
        f"{env}_explorations": report.explorations,
        f"{env}_seconds": report.seconds,
        f"{env}_tasks_per_s": round(report.kept / max(report.seconds, 1e-9), 2),
        f"{env}_candidates_per_s": round(f.candidates / max(report.seconds, 1e-9), 2),
        f"{env}_kept_share": round(f.kept / cands, 3),
        **{f"{env}_removed_share_{k}": round(v / cands, 3) for k, v in f.removed.items()},
        f"{env}_duplicates_found": f.removed.get("duplicate", 0),
        f"{env}_reasons": dict(sorted(f.reasons.items(), key=lambda kv: -kv[1])[:6]),
        f"{env}_phrasing_overlap": report.phrasing_overlap,
        f"{env}_by_level": report.by_level,
    }


def _exploration_stats(traj, kept: int, seconds: float) -> dict:
    turns = len(traj.steps)
    calls = [s for s in traj.steps if s.action.tool_calls]
    ok = [s for s in calls if s.observations and not any(o.is_error for o in s.observations)]
    return {"turns": turns, "seconds": seconds, "ok_share": len(ok) / max(1, turns),
            "tools": len({c.name for s in calls for c in s.action.tool_calls}), "kept": kept}  # fmt: skip


def explorer_figures(worlds: int, n_breadth: int, n_depth: int, embeddings) -> dict:
    """Schema vs LLM explorer (the tiny policy) on the same sandbox worlds, with the same synthesizer + filters."""
    import torch

    from env_tools.sandbox import SandboxEnvironment, seed_tasks
    from langgraph_evolver.chat_model import PolicyChatModel
    from langgraph_evolver.questioning import (
        DuplicateIndex,
        aexplore_with_model,
        exploration_task,
        explore,
        filter_tasks,
        synthesize,
    )
    from trainers.policy_server import create_app, serve_in_background

    torch.set_num_threads(1)
    train, test = seed_tasks("train"), seed_tasks("test")

    def factory(task):
        return SandboxEnvironment()

    def kept_from(traj, seed: int) -> int:
        index = DuplicateIndex(embeddings, threshold=0.9)
        index.add([t.query for t in train], "seed")
        index.add([t.query for t in test], "held-out")
        kept, _ = filter_tasks(synthesize(traj, seed=seed, max_tasks=20), env_factory=factory, index=index)
        return len(kept)

    stats: dict[str, list[dict]] = {"schema": [], "llm": []}
    with serve_in_background(create_app(str(ROOT / "checkpoints" / "tiny-policy"), served_model_name="tiny-policy",
                                        seed=0)) as url:  # fmt: skip
        policy = PolicyChatModel(base_url=url + "/v1", model="tiny-policy", max_tokens=96)
        for i in range(worlds):
            task = exploration_task(train[i % len(train)], seed=i)
            started = time.perf_counter()
            traj = explore(factory(task), task, n_breadth=n_breadth, n_depth=n_depth, seed=i)
            elapsed = time.perf_counter() - started  # exploring only; the filters are timed by the pipeline
            stats["schema"].append(_exploration_stats(traj, kept_from(traj, i), elapsed))
            started = time.perf_counter()
            traj = asyncio.run(aexplore_with_model(factory, task, policy, n_breadth=n_breadth, n_depth=n_depth, seed=i))
            elapsed = time.perf_counter() - started
            stats["llm"].append(_exploration_stats(traj, kept_from(traj, i), elapsed))
    out: dict = {"explorer_worlds": worlds, "explorer_turns": n_breadth + n_depth}
    for name, rows in stats.items():
        out[f"explorer_{name}_turns_per_s"] = round(sum(r["turns"] for r in rows) / sum(r["seconds"] for r in rows), 2)
        out[f"explorer_{name}_ok_call_share"] = round(statistics.fmean(r["ok_share"] for r in rows), 3)
        out[f"explorer_{name}_tools_per_exploration"] = round(statistics.fmean(r["tools"] for r in rows), 2)
        out[f"explorer_{name}_kept_per_exploration"] = round(statistics.fmean(r["kept"] for r in rows), 2)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer tasks and worlds")
    p.add_argument("--n", type=int, default=None, help="tasks per environment (default 100, quick 30)")
    p.add_argument("--worlds", type=int, default=None, help="worlds for the explorer comparison (default 6, quick 2)")
    p.add_argument("--learning", action="store_true", help="also run the learning comparison (~1.5 h)")
    p.add_argument("--synthetic-n", type=int, default=100, help="synthetic tasks for the learning comparison")
    p.add_argument("--learning-steps", type=int, default=20, help="optimizer steps per arm and seed")
    p.add_argument("--synthetic-per-world", type=int, default=1, help="the most synthetic tasks from one world")
    p.add_argument("--start", default="checkpoints/tiny-policy-synthetic", help="both arms' start policy")
    args = p.parse_args()
    n = args.n or (30 if args.quick else 100)
    worlds = args.worlds or (2 if args.quick else 6)
    started = time.perf_counter()

    from langgraph_evolver.experience.pool import default_embeddings

    embeddings = default_embeddings()
    todo = _todo_module()
    todo.register_todo_environment("todo")
    figures: dict = {"n": n}
    figures.update(pipeline_figures("sandbox", n, embeddings))
    figures.update(pipeline_figures("todo", min(n, 30), embeddings))
    figures.update(explorer_figures(worlds, 3, 17, embeddings))
    if args.learning:
        results = ROOT / "benchmarks" / "results" / "questioning"
        cmd = [sys.executable, str(ROOT / "benchmarks" / "learning.py"), "--variants", "grpo,questioning,mixed",
               "--synthetic-n", str(args.synthetic_n), "--synthetic-per-world", str(args.synthetic_per_world),
               "--out", str(ROOT / "runs" / "learning-questioning"), "--results", str(results), "--reuse",
               "--steps", str(args.learning_steps), "--eval-every", str(max(1, args.learning_steps // 2)),
               "--model_name_or_path", args.start]  # fmt: skip
        subprocess.run(cmd, check=True, cwd=ROOT)
        learned = json.loads((results / "learning.json").read_text())
        keep = ("questioning_", "mixed_", "grpo_", "start_score", "eval_se", "synthetic_")
        figures.update({k: v for k, v in learned.items() if k.startswith(keep)})
    figures["wall_s"] = round(time.perf_counter() - started, 1)
    figures["loadavg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

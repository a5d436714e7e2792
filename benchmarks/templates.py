"""Context templates side by side: score, prompt tokens, training rows and peak prompt length.

    python benchmarks/templates.py            # 75 held-out tasks x 4 with the tiny policy (~10 min on 2 cores)
    python benchmarks/templates.py --quick    # 20 tasks x 2 (~3 min)
    python benchmarks/templates.py --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-14B   # a real model

For each template (causal, reasoning, sliding with window 2, self-managing with the rules manager):

1. **The tiny policy** through the local CPU server (or ``--base-url``) on the sandbox's held-out
   split: ``avg@k``, and per rollout the prompt tokens sent, the training rows and trained tokens
   the trainer would make of it (``trainers.samples.trajectory_samples``, merging where prefixes
   hold), and the longest prompt.
2. **A scripted long-horizon policy** (22 tool calls, then an answer) whose prompts and
   completions are tokenized with the tiny policy's chat template exactly as the server would:
   the same figures without a model's noise, where the templates' effect on prompt length shows.

Ends with one JSON line. The paper's Table 7 (Qwen3-14B on AppWorld, TGC@8: causal .506,
reasoning .690, sliding .601, self-managing .720) needs a real model; ``--base-url``/``--model``
run this same benchmark against vLLM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langchain_core.messages import AIMessage, BaseMessage  # noqa: E402

TEMPLATES: dict[str, dict[str, Any]] = {
    "causal": {},
    "reasoning": {},
    "sliding": {"window": 2},
    "managing": {"manager": "rules", "trigger_tokens": 600, "protect_last": 2},
}
LONG_TURNS = 22


def long_horizon_policy(tokenizer: Any) -> Any:
    """A scripted policy that makes ``LONG_TURNS`` lookups (thinking first), then answers; token ids
    from the tiny policy's chat template. Calls are counted per rollout: a windowed prompt no longer
    shows how many there were."""
    from langgraph_evolver.environment_tools import current_rollout
    from trainers.scripted import TokenizedScriptedModel

    calls: dict[int, int] = {}
    names = ["Ava", "Ben", "Cleo", "Dan", "Eve", "Finn", "Gus", "Hana", "Ivy", "Jay", "Kai"]

    def respond(messages: list[BaseMessage]) -> AIMessage:
        key = id(current_rollout())
        turn = calls[key] = calls.get(key, -1) + 1
        if turn < LONG_TURNS:
            name = names[turn % len(names)]
            call = {"name": "search_contacts", "args": {"query": name}, "id": f"call_{turn}"}
            return AIMessage(f"<think>look up {name}</think>", tool_calls=[call])
        return AIMessage("<think>all found</think>Done.")

    return TokenizedScriptedModel(tokenizer=tokenizer, respond=respond, metadata={"evolver_policy": True})


def figures(trajectories: list, k: int | None = None) -> dict[str, float]:
    from trainers.samples import trajectory_samples

    prompt_tokens, rows, trained, peak = [], [], [], 0
    for traj in trajectories:
        transitions = traj.transitions
        if not transitions:
            continue
        prompt_tokens.append(sum(len(t.prompt_ids) for t in transitions))
        peak = max(peak, max(len(t.prompt_ids) for t in transitions))
        samples = trajectory_samples(traj, 1.0)
        rows.append(len(samples))
        trained.append(sum(s.trained_tokens for s in samples))
    out = {
        "prompt_tokens_per_rollout": round(statistics.fmean(prompt_tokens), 1) if prompt_tokens else 0.0,
        "rows_per_rollout": round(statistics.fmean(rows), 2) if rows else 0.0,
        "trained_tokens_per_rollout": round(statistics.fmean(trained), 1) if trained else 0.0,
        "peak_prompt_tokens": peak,
    }
    if k is not None:
        out[f"avg@{k}"] = round(statistics.fmean(t.reward or 0.0 for t in trajectories), 4)
        scores = [t.reward or 0.0 for t in trajectories]
        out["stderr"] = round(statistics.stdev(scores) / len(scores) ** 0.5, 4) if len(scores) > 1 else 0.0
    return out


def bench_long_horizon(n_tasks: int) -> dict[str, dict[str, float]]:
    from transformers import AutoTokenizer

    from env_tools.sandbox import seed_tasks
    from graphs.agent import reference_agent
    from langgraph_evolver.batch import run_rollouts

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "checkpoints" / "tiny-policy")
    tasks = seed_tasks("test")[:n_tasks]
    out = {}
    for name, options in TEMPLATES.items():
        policy = long_horizon_policy(tokenizer)
        agent = reference_agent(context_template=name, context_options=options, max_turns=LONG_TURNS + 2)
        trajs = run_rollouts(agent, tasks, policy=policy, max_turns=LONG_TURNS + 2)
        assert all(len([s for s in t.steps if s.kind == "action"]) == LONG_TURNS + 1 for t in trajs), trajs[0].errors
        out[name] = figures(trajs)
        print(f"long-horizon {name}: {out[name]}", file=sys.stderr)
    return out


def bench_policy(base_url: str, model: str, n_tasks: int, k: int) -> dict[str, dict[str, float]]:
    from env_tools.sandbox import seed_tasks
    from graphs.agent import reference_agent
    from trainers.evaluate import evaluate_endpoint

    tasks = seed_tasks("test")[:n_tasks]
    out = {}
    for name, options in TEMPLATES.items():
        agent = reference_agent(context_template=name, context_options=options)
        trajs = asyncio.run(evaluate_endpoint(tasks, base_url=base_url, model=model, k=k, agent=agent, progress=True))
        out[name] = figures(trajs, k)
        print(f"policy {name}: {out[name]}", file=sys.stderr)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--base-url", help="an OpenAI-compatible endpoint (default: the CPU server on the tiny policy)")
    p.add_argument("--model", help="the model name at --base-url")
    args = p.parse_args()
    n_tasks, k = (20, 2) if args.quick else (75, 4)
    result: dict[str, Any] = {"long_horizon": bench_long_horizon(8 if args.quick else 32)}
    if args.base_url:
        result["policy"] = bench_policy(args.base_url, args.model, n_tasks, k)
    else:
        from trainers.serving import PolicyServerProcess
        from trainers.tiny import DEFAULT_CHECKPOINT

        server = PolicyServerProcess(str(DEFAULT_CHECKPOINT), log_path=Path("runs/bench_templates_server.log"))
        server.start()
        try:
            result["policy"] = bench_policy(server.base_url, server.model_name, n_tasks, k)
        finally:
            server.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()

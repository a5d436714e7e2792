"""Run the agent graph on a few sandbox tasks and print each conversation and its score.

    python examples/run_agent.py                                   # starts the local tiny policy
    python examples/run_agent.py --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct
    python examples/run_agent.py --task sandbox-test-00005 --n 3

Each printed step shows what the policy did (tool calls, or the final answer), what the
environment answered, and how many tokens the call sampled; trajectories are also written to
``runs/example/trajectories.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from env_tools.sandbox import seed_tasks  # noqa: E402
from graphs.agent import create_agent_graph  # noqa: E402
from langgraph_evolver import PolicyChatModel, Trajectory, run_rollouts, write_jsonl  # noqa: E402
from trainers.serving import PolicyServerProcess  # noqa: E402
from trainers.tiny import DEFAULT_CHECKPOINT  # noqa: E402


def show(traj: Trajectory) -> None:
    print(f"\n=== {traj.task.id} (level {traj.task.metadata.get('level')}): {traj.task.query}")
    for step in traj.steps:
        n_tokens = len(step.transition.completion_ids) if step.transition else "?"
        if step.action.tool_calls:
            calls = ", ".join(f"{c.name}({c.arguments})" for c in step.action.tool_calls)
            print(f"  [{step.index}] call {calls}   ({n_tokens} tokens)")
        else:
            print(f"  [{step.index}] says {step.action.content!r}   ({n_tokens} tokens)")
        for obs in step.observations:
            print(f"      -> {'ERROR ' if obs.is_error else ''}{obs.content[:160]}")
    print(f"  reward {traj.reward}  finish {traj.finish_reason}  errors {list(traj.errors)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url")
    p.add_argument("--model")
    p.add_argument("--task", action="append", help="task id (repeatable); default: one task per level")
    p.add_argument("--n", type=int, default=1, help="rollouts per task")
    args = p.parse_args()
    tasks = seed_tasks("test")
    if args.task:
        tasks = [t for t in tasks if t.id in set(args.task)]
    else:
        tasks = [next(t for t in tasks if t.metadata["level"] == level) for level in (1, 2, 3)]
    server = None
    if args.base_url is None:
        server = PolicyServerProcess(DEFAULT_CHECKPOINT).start()
    try:
        policy = PolicyChatModel(
            base_url=args.base_url or server.base_url, model=args.model or server.model_name, max_tokens=128
        )
        trajectories = run_rollouts(create_agent_graph(policy), tasks, n=args.n)
    finally:
        if server is not None:
            server.stop()
    for traj in trajectories:
        show(traj)
    write_jsonl("runs/example/trajectories.jsonl", trajectories)


if __name__ == "__main__":
    main()

"""LangSmith figures: trace size per LLM call, a recorded trace set for ingest, the cost of a dead LangSmith.

    python benchmarks/langsmith_bench.py --out runs/langsmith-bench        # ~3 min on 2 cores

1. **Trace size.** Our agent with the committed tiny policy (CPU policy server, temperature 1,
   ``max_tokens`` 128, up to 10 turns) on 24 held-out level-2/3 sandbox tasks, traced at once by a
   ``JsonlTracer`` storing runs as before (``TraceLimits.unbounded()``: logprobs in the message and in
   ``generation_info``, every earlier message's token ids and logprobs in each prompt and node state)
   and one with today's defaults. Bytes per LLM run, mean and max.
2. **A recorded trace set.** The same rollouts' default trace, with each rollout's reward recorded
   beside it (``annotate_rollouts``: ``runs.feedback.jsonl``): the input of
   ``python -m langgraph_evolver.ingest --jsonl OUT/traces/runs.jsonl --env sandbox``.
3. **LangSmith down at exit.** A process that traced 48 rollouts to a closed port with LangChain's
   default LangSmith client vs ``langsmith_callbacks()``: seconds from the end of its work to the
   end of the process.

Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_EXIT_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, sys.argv[1])
    from env_tools.sandbox import seed_tasks
    from graphs.agent import create_agent_graph
    from langgraph_evolver.batch import run_rollouts
    from langgraph_evolver.testing import ReferencePolicy

    if sys.argv[2] == "ours":
        from langgraph_evolver.tracing import langsmith_callbacks
        callbacks = langsmith_callbacks(project="bench")
    else:
        from langchain_core.tracers.langchain import LangChainTracer
        callbacks = [LangChainTracer(project_name="bench")]
    tasks = [t for t in seed_tasks("train") if t.metadata["level"] == 2][:4]
    graph = create_agent_graph(ReferencePolicy(tasks))
    start = time.perf_counter()
    for step in range(3):
        run_rollouts(graph, tasks, n=4, callbacks=callbacks)
    print("REPORT " + json.dumps({"work_s": time.perf_counter() - start, "end": time.time()}), flush=True)
    """
)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def exit_cost(client: str) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env.update(LANGSMITH_TRACING="true", LANGSMITH_API_KEY="lsv2_pt_bench",
               LANGSMITH_ENDPOINT=f"http://127.0.0.1:{_closed_port()}", PYTHONPATH=str(ROOT))  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, str(ROOT), client], capture_output=True, text=True,
                          env=env, timeout=600)  # fmt: skip
    ended = time.time()
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("REPORT ")]
    report = json.loads(line.removeprefix("REPORT "))
    return {"work_s": round(report["work_s"], 2), "exit_s": round(ended - report["end"], 2)}


def trace_sizes(out: Path) -> dict[str, object]:
    import torch

    from env_tools.sandbox import seed_tasks
    from graphs.agent import create_agent_graph
    from langgraph_evolver.batch import run_rollouts
    from langgraph_evolver.chat_model import PolicyChatModel
    from langgraph_evolver.tracing import JsonlTracer, TraceLimits, annotate_rollouts
    from trainers.policy_server import create_app, serve_in_background

    torch.set_num_threads(1)
    tasks = [t for t in seed_tasks("test") if t.metadata["level"] in (2, 3)][:24]
    app = create_app(str(ROOT / "checkpoints" / "tiny-policy"), served_model_name="tiny-policy", seed=0)
    with serve_in_background(app) as url:
        policy = PolicyChatModel(base_url=url + "/v1", model="tiny-policy", max_tokens=128)
        with (
            JsonlTracer(out / "traces" / "runs.jsonl") as now,
            JsonlTracer(out / "before.jsonl", limits=TraceLimits.unbounded()) as before,
        ):
            trajectories = run_rollouts(create_agent_graph(policy, max_turns=10), tasks, n=2,
                                        callbacks=[now, before], group_prefix="bench/")  # fmt: skip
            annotate_rollouts([now], trajectories)
    mean_reward = sum(t.reward or 0.0 for t in trajectories) / len(trajectories)
    figures: dict[str, object] = {"rollouts": len(trajectories), "mean_reward": round(mean_reward, 3)}
    for name, path in (("before", out / "before.jsonl"), ("now", out / "traces" / "runs.jsonl")):
        lines = path.read_text().splitlines()
        llm = [len(x.encode()) for x in lines if json.loads(x)["run_type"] == "llm"]
        figures[f"llm_run_bytes_{name}"] = {"mean": round(sum(llm) / len(llm)), "max": max(llm), "calls": len(llm)}
        figures[f"trace_bytes_{name}"] = path.stat().st_size
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/langsmith-bench")
    parser.add_argument("--skip-exit", action="store_true", help="skip the (slow) default-client exit measurement")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    figures = trace_sizes(out)
    for name, figure in figures.items():
        print(f"{name:<22} {figure}")
    if not args.skip_exit:
        figures["exit_langsmith_down_ours"] = exit_cost("ours")
        figures["exit_langsmith_down_default_client"] = exit_cost("default")
        print(f"exit with LangSmith down: ours {figures['exit_langsmith_down_ours']}, LangChain's default client "
              f"{figures['exit_langsmith_down_default_client']}")  # fmt: skip
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

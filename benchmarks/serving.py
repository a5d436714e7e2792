"""The demo's rollouts against the CPU policy server: before vs after prefix caching, side by side.

Runs the workload of ``make demo`` (``examples/quickstart.yaml``): our reference agent on sandbox
training tasks, ``k`` rollouts per task (8), temperature 1, up to 128 completion tokens per call
and 10 turns, 64 rollouts at a time, against the tiny policy served with 2 torch threads. Each
variant is its own server process, started fresh, warmed up with one request, then given the
same tasks; the variants take turns for ``--rounds`` rounds so that load from other processes on
the machine hits them alike. Variants:

- ``baseline``: the server as it was before these changes (``--baseline-ref``, default the
  commit before them), exported with ``git archive`` and run from a temporary directory;
- ``no_cache``: today's server with ``--no-enable-prefix-caching --kv-spare-columns 0
  --no-lean-decode``: only the first lever, each distinct prompt of a prefill is run once;
- ``cache_only``: plus the prefix cache (``--kv-spare-columns 0 --no-lean-decode``);
- ``new``: today's server as it starts by default: plus the batch KV cache growing in place
  (``kv.GrowableLayer``) and the lean decode step (``forward.LeanDecoder``);
- ``new_2_threads`` (only when asked for): ``new`` with 2 torch threads whatever ``--threads`` says.

Sampling is at temperature 1 with a seed per request (``_SeedingTransport``), so every variant
samples the same trajectories; the prompt and completion token counts are reported per variant
to show that the workloads match. Ends with one JSON line: per variant
``rollouts_per_s`` and ``generated_tokens_per_s`` (completion tokens of all calls / wall time),
from the server's ``/metrics`` the seconds it spent in prefills and decode steps,
``prefill_tokens_saved`` (prompt tokens not run through the model), ``prefix_cache_hit_rate``;
and the ratios ``new_vs_baseline_*``.

``--vs-generate`` instead measures the server against Hugging Face ``generate`` on one model: the
same first-turn prompts (sandbox training tasks, the model's template, its tools), ``--max-tokens``
tokens each (``ignore_eos`` / ``min_new_tokens``), temperature 1, at 1, 8 and 32 requests at once
(``--concurrency``); ``generate`` gets them as one static left-padded batch. The server runs in
this process on its own thread; the two take turns for ``--rounds`` rounds, and the figures are
completion tokens/s of each and their ratio ``server_vs_generate_c{n}`` (best round of each).

Commands::

    python -m benchmarks.serving --vs-generate --model smollm2-135m-instruct   # ~5 min on 2 cores
    python -m benchmarks.serving                        # 8 tasks x 8 rollouts, 2 rounds (~5 min on 2 cores)
    python -m benchmarks.serving --tasks 4 --rounds 1   # quick look
    python -m benchmarks.serving --variants no_cache,new     # no git needed
    python -m benchmarks.serving --variants new,new_2_threads --rounds 1   # 1 vs 2 server threads
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BASELINE_REF = "6b1dd1f"
"""The last commit before the serving subpackage and its prefix cache."""
VARIANTS: dict[str, list[str]] = {
    "baseline": [],
    "no_cache": ["--no-enable-prefix-caching", "--kv-spare-columns", "0", "--no-lean-decode"],
    "cache_only": ["--kv-spare-columns", "0", "--no-lean-decode"],
    "new": [],
    "new_2_threads": ["--threads", "2"],
}
"""Each variant's extra server flags (``baseline`` runs the old code with no extra flag)."""
DEFAULT_VARIANTS = ("baseline", "no_cache", "cache_only", "new")


def _export(ref: str, out: Path) -> Path:
    """The packages of commit ``ref`` unpacked under ``out`` (for its ``python -m trainers.policy_server``)."""
    archive = out / "src.tar"
    with archive.open("wb") as f:
        subprocess.run(["git", "archive", ref, "trainers", "langgraph_evolver"], cwd=ROOT, stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(out / "src", filter="data")
    return out / "src"


class _Server:
    """One variant's server process on a free port (``python -m trainers.policy_server``)."""

    def __init__(self, variant: str, model: Path, threads: int, baseline_src: Path | None, log: Path) -> None:
        from trainers.serving import free_port

        self.port = free_port()
        cmd = [sys.executable, "-m", "trainers.policy_server", "--model", str(model), "--port", str(self.port),
               "--served-model-name", "policy", "--max-batch-size", "64", "--threads", str(threads)]  # fmt: skip
        cmd += VARIANTS[variant]
        cwd = baseline_src if variant == "baseline" else ROOT
        env = {**os.environ, "PYTHONPATH": str(cwd)}
        self.log = log.open("w")
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the {variant} server exited; see {log}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"the {variant} server did not start; see {log}")

    def metrics(self) -> dict[str, float]:
        r = httpx.get(self.url + "/metrics", timeout=10)
        if r.status_code != 200:
            return {}
        pairs = (line.split() for line in r.text.splitlines() if line and not line.startswith("#"))
        return {name.removeprefix("policy_server_"): float(value) for name, value in pairs}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


class _SeedingTransport(httpx.AsyncHTTPTransport):
    """Gives every chat request a seed: the hash of its body and how often that body came before.

    The rollouts of one task send the same first prompt; the i-th copy gets the i-th seed, so the
    group's rollouts still differ, and every variant samples the same set of trajectories (up to
    float rounding) whichever order the requests arrive in: the variants get the same work.
    """

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, int] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/chat/completions"):
            body = json.loads(await request.aread())
            key = json.dumps(_without_call_ids(body), sort_keys=True)
            copy = self._seen[key] = self._seen.get(key, -1) + 1
            body["seed"] = int(hashlib.sha256(f"{copy}:{key}".encode()).hexdigest()[:12], 16)
            headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
            request = httpx.Request(request.method, request.url, headers=headers, json=body)
        return await super().handle_async_request(request)


def _without_call_ids(value: Any) -> Any:
    """``value`` without tool-call ids (random per response, so they would make every seed differ)."""
    if isinstance(value, dict):
        return {k: _without_call_ids(v) for k, v in value.items() if k not in ("id", "tool_call_id")}
    if isinstance(value, list):
        return [_without_call_ids(v) for v in value]
    return value


async def _rollouts(tasks: list, base_url: str, k: int) -> list:
    """The demo's rollouts (``evaluate_endpoint``'s agent and settings) with seeded requests."""
    from graphs.agent import reference_agent
    from langgraph_evolver.batch import arun_rollouts
    from langgraph_evolver.chat_model import PolicyChatModel

    limits = httpx.Limits(max_connections=128, max_keepalive_connections=128)
    async with httpx.AsyncClient(transport=_SeedingTransport(), timeout=600, limits=limits) as client:
        policy = PolicyChatModel(base_url=base_url, model="policy", temperature=1.0, max_tokens=128, max_retries=1,
                                 http_async_client=client)  # fmt: skip
        return await arun_rollouts(reference_agent(max_turns=10), tasks, n=k, policy=policy, concurrency=64,
                                   progress=False, max_turns=10)  # fmt: skip


def _run_variant(variant: str, tasks: list, args: argparse.Namespace, baseline_src: Path | None, out: Path) -> dict:
    server = _Server(variant, args.model, args.threads, baseline_src, out / f"{variant}.log")
    try:
        warmup = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        httpx.post(server.url + "/v1/chat/completions", json=warmup, timeout=120).raise_for_status()
        t0 = time.perf_counter()
        trajectories = asyncio.run(_rollouts(tasks, server.url + "/v1", args.k))
        wall = time.perf_counter() - t0
        metrics = server.metrics()
    finally:
        server.stop()
    transitions = [s.transition for t in trajectories for s in t.steps if s.transition is not None]
    return {
        "wall_s": wall,
        "rollouts": len(trajectories),
        "calls": len(transitions),
        "prompt_tokens": sum(len(t.prompt_ids) for t in transitions),
        "completion_tokens": sum(len(t.completion_ids) for t in transitions),
        "reward": sum(t.reward or 0.0 for t in trajectories) / max(len(trajectories), 1),
        "metrics": metrics,
    }


def _summary(runs: list[dict]) -> dict[str, float]:
    wall = sum(r["wall_s"] for r in runs)
    out = {
        "rollouts_per_s": sum(r["rollouts"] for r in runs) / wall,
        "generated_tokens_per_s": sum(r["completion_tokens"] for r in runs) / wall,
        "calls": sum(r["calls"] for r in runs),
        "prompt_tokens": sum(r["prompt_tokens"] for r in runs),
        "completion_tokens": sum(r["completion_tokens"] for r in runs),
        "mean_reward": sum(r["reward"] for r in runs) / len(runs),
        "wall_s": wall,
    }
    metrics = [r["metrics"] for r in runs if r["metrics"].get("prefill_tokens_total")]
    if metrics:
        out["server_prefill_s"] = sum(m["prefill_seconds_total"] for m in metrics)
        out["server_decode_s"] = sum(m["decode_seconds_total"] for m in metrics)
        out["prefills"] = sum(m["prefills_total"] for m in metrics)
        out["decode_steps"] = sum(m["decode_steps_total"] for m in metrics)
        prefill = sum(m["prefill_tokens_total"] for m in metrics)
        out["prefill_tokens"] = prefill
        out["prefill_tokens_saved"] = sum(m["prefill_saved_tokens_total"] for m in metrics)
        out["prefill_saved_fraction"] = out["prefill_tokens_saved"] / prefill
        queried = sum(m.get("prefix_cache_queries_total", 0) for m in metrics)
        if queried:
            out["prefix_cache_hit_rate"] = sum(m["prefix_cache_hits_total"] for m in metrics) / queried
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}


def vs_generate(args: argparse.Namespace) -> dict[str, Any]:
    """Completion tokens/s of the policy server vs HF ``generate`` (static batch), per concurrency."""
    import torch

    from benchmarks.tool_templates import first_turn_prompts
    from trainers.models import resolve_model
    from trainers.policy_server import create_app, serve_in_background

    torch.set_num_threads(args.threads)
    path = resolve_model(str(args.model))
    levels = [int(c) for c in args.concurrency.split(",")]
    items = first_turn_prompts(max(levels))
    app = create_app(path, max_batch_size=max(levels), threads=args.threads)
    engine = app.state.engine
    model, tokenizer = engine.model, engine.tokenizer
    rates: dict[str, list[float]] = {}

    async def server_round(url: str, c: int) -> float:
        limits = httpx.Limits(max_connections=c + 4, max_keepalive_connections=c + 4)
        async with httpx.AsyncClient(base_url=url, timeout=900, limits=limits) as client:

            async def call(it: dict[str, Any]) -> int:
                body = {"model": engine.served_model_name, "messages": it["messages"], "tools": it["tools"],
                        "max_tokens": args.max_tokens, "temperature": 1.0, "ignore_eos": True}  # fmt: skip
                r = await client.post("/chat/completions", json=body)
                r.raise_for_status()
                return r.json()["usage"]["completion_tokens"]

            await call(items[0])  # warm-up
            t0 = time.perf_counter()
            tokens = sum(await asyncio.gather(*(call(it) for it in items[:c])))
            return tokens / (time.perf_counter() - t0)

    def generate_round(c: int) -> float:
        prompts = [tokenizer.apply_chat_template(it["messages"], tools=it["tools"], add_generation_prompt=True,
                                                 tokenize=False) for it in items[:c]]  # fmt: skip
        side, tokenizer.padding_side = tokenizer.padding_side, "left"
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        tokenizer.padding_side = side
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=args.max_tokens, min_new_tokens=args.max_tokens, do_sample=True,
                                 temperature=1.0, top_k=0, top_p=1.0, pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        return (out.shape[1] - enc.input_ids.shape[1]) * c / (time.perf_counter() - t0)

    with serve_in_background(app) as url:
        for round_ in range(args.rounds):
            for c in levels:
                order = ["server", "generate"] if round_ % 2 == 0 else ["generate", "server"]
                for who in order:
                    rate = asyncio.run(server_round(f"{url}/v1", c)) if who == "server" else generate_round(c)
                    rates.setdefault(f"{who}_c{c}", []).append(rate)
                    print(f"round {round_} {who} at {c}: {rate:.1f} tokens/s", file=sys.stderr)
    figures: dict[str, Any] = {"model": str(args.model), "max_tokens": args.max_tokens, "rounds": args.rounds,
                               "threads": args.threads,
                               "prompt_tokens_mean": round(sum(len(tokenizer(tokenizer.apply_chat_template(
                                   it["messages"], tools=it["tools"], add_generation_prompt=True, tokenize=False),
                                   add_special_tokens=False).input_ids) for it in items) / len(items), 1)}  # fmt: skip
    for c in levels:
        server, generate = max(rates[f"server_c{c}"]), max(rates[f"generate_c{c}"])
        figures[f"server_tokens_per_s_c{c}"] = round(server, 1)
        figures[f"generate_tokens_per_s_c{c}"] = round(generate, 1)
        figures[f"server_vs_generate_c{c}"] = round(server / generate, 2)
    figures["command"] = "python -m benchmarks.serving " + " ".join(sys.argv[1:])
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "checkpoints" / "tiny-policy")
    p.add_argument("--tasks", type=int, default=8, help="training tasks per round (the demo: 8 per step)")
    p.add_argument("--k", type=int, default=8, help="rollouts per task (the demo's num_generations)")
    p.add_argument("--rounds", type=int, default=2, help="times each variant runs, taking turns")
    p.add_argument("--threads", type=int, default=2, help="torch threads of the server (the demo's)")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help=f"comma-separated subset of {list(VARIANTS)}")
    p.add_argument("--baseline-ref", default=BASELINE_REF, help="git commit of the baseline server")
    p.add_argument("--vs-generate", action="store_true", help="server vs HF generate at each --concurrency")
    p.add_argument("--concurrency", default="1,8,32", help="requests at once (--vs-generate)")
    p.add_argument("--max-tokens", type=int, default=48, help="completion tokens per request (--vs-generate)")
    p.add_argument("--out", type=Path, help="also write the JSON figures here")
    args = p.parse_args()
    if args.vs_generate:
        figures = vs_generate(args)
        if args.out:
            args.out.write_text(json.dumps(figures, indent=2) + "\n")
        print(json.dumps(figures))
        return
    variants = [v for v in args.variants.split(",") if v]
    if unknown := set(variants) - set(VARIANTS):
        p.error(f"unknown variants {sorted(unknown)}; pick from {list(VARIANTS)}")

    from env_tools.sandbox import generate_tasks

    runs: dict[str, list[dict]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="bench_serving_") as tmp:
        out = Path(tmp)
        baseline_src = _export(args.baseline_ref, out) if "baseline" in variants else None
        for round_ in range(args.rounds):
            tasks = generate_tasks("train", args.tasks, start=round_ * args.tasks)
            for variant in variants if round_ % 2 == 0 else variants[::-1]:
                result = _run_variant(variant, tasks, args, baseline_src, out)
                runs[variant].append(result)
                shown = {k: round(v, 2) if isinstance(v, float) else v for k, v in result.items() if k != "metrics"}
                print(f"round {round_} {variant}: {shown}", file=sys.stderr)
    figures: dict[str, Any] = {"tasks_per_round": args.tasks, "k": args.k, "rounds": args.rounds}
    for variant in variants:
        figures[variant] = _summary(runs[variant])
    reference = "baseline" if "baseline" in variants else variants[0]
    for variant in variants:
        if variant != reference:
            for key in ("rollouts_per_s", "generated_tokens_per_s"):
                ratio = figures[variant][key] / figures[reference][key]
                figures[f"{variant}_vs_{reference}_{key}"] = round(ratio, 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

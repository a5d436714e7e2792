"""SmolLM2-135M at the speed of this CPU: the fp32 server path before ``--dtype`` vs today's default, side by side.

Two policy servers run at once on the real model (``make real-model``), each its own process with the same
``--threads``: ``old``, the server of commit ``--old-ref`` (the fp32 path before ``--dtype``, exported with
``git archive`` and run from a temporary directory), and ``new``, today's server as it starts by default
(``--dtype auto``: bf16 where the CPU has amx_bf16 / avx512_bf16). At each concurrency the two take turns for
``--rounds`` rounds: ``c`` chat requests at once (the first turns of ``c`` sandbox training tasks, the model's
template and tools, temperature 1, ``--max-tokens`` completion tokens each with ``ignore_eos``); the figure
is completion tokens/s (best round of each, since load from other processes only ever slows a round) and the
server's own seconds per decode step over that round (``/metrics``: decode seconds / decode steps).

In the same run, between rounds, the machine's matmul rate: the model's linear layers (30 x q/k/v/o and the
MLP's three, plus the 49,152-token head) applied to ``c`` rows in fp32 and in bf16, in this process with the
same threads. Their sum is the decode step's matmul floor in each dtype, and ``*_peak_fraction_c{c}`` is that
floor over a variant's measured step (1.0: the step is nothing but matmuls at the machine's rate).

Ends with one JSON line: ``speedup_c1``, ``speedup_c32`` (new / old tokens/s), ``peak_fraction_c32`` (the
new variant's step against the floor of its dtype), the dtype the new server chose, the CPU and its bf16
flags, and the load average before and after (the cores are shared: ratios of alternating runs are what
count). A full run (not ``--quick``) then runs 2 GRPO steps of ``examples/smollm2_cpu.yaml`` with the old
settings (fp32 server, fp32 training) and the new defaults (``benchmarks.grpo_step_speed``): step seconds split
into rollouts and training, ``grpo_step_speedup`` and ``logp_gap_mean``.

Commands::

    python -m benchmarks.real_model_speed --quick        # 1 and 32 requests, 2 rounds (5-8 min on 2 shared cores)
    python -m benchmarks.real_model_speed --out benchmarks/results/real_model_speed.json   # full (~6 min + GRPO steps)
    python -m benchmarks.real_model_speed --profile     # where one decode step's time goes, fp32 and bf16

``--profile`` instead runs one engine per dtype in this process (no HTTP) and splits one decode step at 1 and
32 rows (the first turns of sandbox tasks, temperature 1, a few steps in) with ``torch.profiler``: the linear
layers' matmuls (the vocabulary head among them, also shown alone), attention over the cache, sampling, and
the rest (norms, rotary, residuals, the KV cache's writes, Python); best of 4 profiled steps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the servers run: idle OpenMP threads sleep

OLD_REF = "46694d8"
"""The last commit before ``--dtype`` and the matmul decode attention (the fp32 server path of issue 40)."""
MODEL = "smollm2-135m-instruct"


def _server(src: Path, model: Path, threads: int, extra: list[str], log: Path) -> Any:
    """A policy server of the code under ``src`` (``PolicyServerProcess`` of today's code starts it)."""
    from trainers.serving import PolicyServerProcess

    server = PolicyServerProcess(model, threads=threads, max_batch_size=64, log_path=log, extra_args=extra)
    old_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(src)  # the child imports `src`'s trainers package
    try:
        return server.start()
    finally:
        if old_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_path


def _metrics(url: str) -> dict[str, float]:
    r = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=10)
    r.raise_for_status()
    pairs = (line.split() for line in r.text.splitlines() if line and not line.startswith("#"))
    return {name.removeprefix("policy_server_"): float(value) for name, value in pairs}


async def _round(url: str, name: str, items: list[dict[str, Any]], max_tokens: int) -> float:
    """Completion tokens/s of ``len(items)`` requests sent at once."""
    limits = httpx.Limits(max_connections=len(items) + 4, max_keepalive_connections=len(items) + 4)
    async with httpx.AsyncClient(base_url=url, timeout=900, limits=limits) as client:

        async def call(it: dict[str, Any]) -> int:
            body = {"model": name, "messages": it["messages"], "tools": it["tools"], "max_tokens": max_tokens,
                    "temperature": 1.0, "ignore_eos": True}  # fmt: skip
            r = await client.post("/chat/completions", json=body)
            r.raise_for_status()
            return r.json()["usage"]["completion_tokens"]

        start = time.perf_counter()
        tokens = sum(await asyncio.gather(*(call(it) for it in items)))
        return tokens / (time.perf_counter() - start)


def matmul_floor(config: Any, rows: int, dtype: Any, repeats: int = 3) -> float:
    """Seconds of the decode step's matmuls (every linear layer and the head at ``rows`` rows) in ``dtype``.

    One weight per layer (not one reused), so the weights stream from memory as in the model; best of
    ``repeats`` passes.
    """
    import torch

    hidden, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    kv = config.num_key_value_heads * head_dim
    shapes = [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden), (inter, hidden), (inter, hidden),
              (hidden, inter)] * layers + [(config.vocab_size, hidden)]  # fmt: skip
    weights = [torch.randn(shape, dtype=dtype) * 0.02 for shape in shapes]
    inputs = {n: torch.randn(rows, n, dtype=dtype) for n in {s[1] for s in shapes}}
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats + 1):  # the first pass warms up
            start = time.perf_counter()
            for w in weights:
                torch.nn.functional.linear(inputs[w.shape[1]], w)
            best = min(best, time.perf_counter() - start)
    return best


def _flops(config: Any, rows: int) -> float:
    hidden, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    kv = config.num_key_value_heads * head_dim
    per_layer = 2 * hidden * hidden + 2 * kv * hidden + 3 * inter * hidden
    return 2.0 * rows * (layers * per_layer + config.vocab_size * hidden)


def serving(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Tokens/s, seconds per decode step and matmul floors of both variants at each concurrency."""
    import torch
    from transformers import AutoConfig

    from benchmarks.serving import _export
    from benchmarks.tool_templates import first_turn_prompts
    from trainers.models import resolve_model

    torch.set_num_threads(args.threads)
    model = resolve_model(MODEL)
    config = AutoConfig.from_pretrained(model)
    levels = [int(c) for c in args.concurrency.split(",")]
    items = first_turn_prompts(max(levels))
    old_src = _export(args.old_ref, out)
    servers = {"old": _server(old_src, model, args.threads, [], out / "old.log"),
               "new": _server(ROOT, model, args.threads, [], out / "new.log")}  # fmt: skip
    figures: dict[str, Any] = {}
    try:
        for server in servers.values():  # warm-up: first allocations, the shared prompt prefix cached alike
            asyncio.run(_round(server.base_url, server.model_name, items[:2], 4))
        for c in levels:
            rates: dict[str, list[float]] = {}
            steps: dict[str, list[float]] = {}
            floors: dict[str, list[float]] = {}
            for round_ in range(args.rounds):
                order = ["old", "new"] if round_ % 2 == 0 else ["new", "old"]
                for who in order:
                    server = servers[who]
                    before = _metrics(server.base_url)
                    rates.setdefault(who, []).append(
                        asyncio.run(_round(server.base_url, server.model_name, items[:c], args.max_tokens))
                    )
                    after = _metrics(server.base_url)
                    n = after["decode_steps_total"] - before["decode_steps_total"]
                    steps.setdefault(who, []).append(
                        (after["decode_seconds_total"] - before["decode_seconds_total"]) / n
                    )
                    print(f"c={c} round {round_} {who}: {rates[who][-1]:.1f} tokens/s, "
                          f"{steps[who][-1] * 1e3:.1f} ms/step", file=sys.stderr)  # fmt: skip
                for dtype in (torch.float32, torch.bfloat16):
                    floors.setdefault(str(dtype).removeprefix("torch."), []).append(matmul_floor(config, c, dtype))
            floor = {d: min(v) for d, v in floors.items()}
            old, new = max(rates["old"]), max(rates["new"])
            old_step, new_step = min(steps["old"]), min(steps["new"])
            new_dtype = served_dtype(out / "new.log")
            figures.update({
                f"old_tokens_per_s_c{c}": round(old, 1), f"new_tokens_per_s_c{c}": round(new, 1),
                f"speedup_c{c}": round(new / old, 2),
                f"old_step_ms_c{c}": round(old_step * 1e3, 1), f"new_step_ms_c{c}": round(new_step * 1e3, 1),
                f"matmul_floor_ms_fp32_c{c}": round(floor["float32"] * 1e3, 1),
                f"matmul_floor_ms_bf16_c{c}": round(floor["bfloat16"] * 1e3, 1),
                f"matmul_gflops_fp32_c{c}": round(_flops(config, c) / floor["float32"] / 1e9, 1),
                f"matmul_gflops_bf16_c{c}": round(_flops(config, c) / floor["bfloat16"] / 1e9, 1),
                f"old_peak_fraction_c{c}": round(floor["float32"] / old_step, 3),
                f"new_peak_fraction_c{c}": round(floor[new_dtype] / new_step, 3),
            })  # fmt: skip
            figures[f"peak_fraction_c{c}"] = figures[f"new_peak_fraction_c{c}"]
    finally:
        for server in servers.values():
            server.stop()
    return figures


def served_dtype(log: Path) -> str:
    """The dtype a server of today's code says it computes in (its start-up line: "..., N threads, DTYPE, seed")."""
    found = re.search(r"\d+ threads, (\w+), seed", log.read_text(errors="replace"))
    if not found:
        raise RuntimeError(f"{log} does not say which dtype the server runs (no start-up line)")
    return found.group(1)


def profile_step(args: argparse.Namespace) -> dict[str, Any]:
    """Milliseconds of one decode step and its parts, per dtype and rows (see the module docstring)."""
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile, record_function

    import trainers.serving.forward as forward
    from benchmarks.tool_templates import first_turn_prompts
    from trainers.models import resolve_model
    from trainers.serving.engine import PolicyEngine
    from trainers.serving.sampling import SamplingParams

    def labelled(fn: Any, label: str) -> Any:
        def run(*a: Any, **k: Any) -> Any:
            with record_function(label):
                return fn(*a, **k)

        return run

    class Head(torch.nn.Module):
        def __init__(self, head: Any) -> None:
            super().__init__()
            self.head = head

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with record_function("head"):
                return self.head(x)

    torch.set_num_threads(args.threads)
    forward.decode_attention = labelled(forward.decode_attention, "attention")
    sdpa = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = labelled(sdpa, "attention")
    path = resolve_model(MODEL)
    items = first_turn_prompts(32)
    figures: dict[str, Any] = {}
    try:
        for dtype in ("float32", "bfloat16"):
            engine = PolicyEngine(path, prefix_cache=None, dtype=dtype)
            engine._sample = labelled(engine._sample, "sampling")
            engine.model.lm_head = Head(engine.model.lm_head)
            tok = engine.tokenizer
            prompts = [tok(tok.apply_chat_template(it["messages"], tools=it["tools"], add_generation_prompt=True,
                                                   tokenize=False), add_special_tokens=False).input_ids
                       for it in items]  # fmt: skip
            for rows in (1, 32):
                params = SamplingParams(temperature=1.0, max_tokens=64, ignore_eos=True)
                best: dict[str, float] | None = None
                with torch.inference_mode():
                    batch, _ = engine.prefill([engine.new_row(p, params, i) for i, p in enumerate(prompts[:rows])],
                                              engine.served_model_name)  # fmt: skip
                    for _ in range(3):
                        batch, _ = engine.decode(batch)
                    for _ in range(4):
                        with profile(activities=[ProfilerActivity.CPU]) as prof, record_function("step"):
                            batch, _ = engine.decode(batch)
                        events = prof.key_averages()
                        total = {e.key: e.cpu_time_total / 1e3 for e in events}
                        parts = {"step": total["step"], "head": total.get("head", 0.0),
                                 "attention": total.get("attention", 0.0), "sampling": total.get("sampling", 0.0),
                                 "matmuls": sum(e.self_cpu_time_total for e in events
                                                if e.key in ("aten::mm", "aten::addmm")) / 1e3}  # fmt: skip
                        if best is None or parts["step"] < best["step"]:
                            best = parts
                assert best is not None
                best["rest"] = best["step"] - best["matmuls"] - best["attention"] - best["sampling"]
                for part, ms in best.items():
                    figures[f"{dtype}_c{rows}_{part}_ms"] = round(ms, 1)
                print(f"{dtype} {rows} rows: " + ", ".join(f"{k} {v:.1f} ms" for k, v in best.items()), file=sys.stderr)
    finally:
        F.scaled_dot_product_attention = sdpa
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1 and 32 requests, 2 rounds, 32 tokens each")
    p.add_argument("--concurrency", default=None, help="requests at once, comma-separated (default 1,8,32,64)")
    p.add_argument("--rounds", type=int, default=None, help="turns of each variant per concurrency (default 3)")
    p.add_argument("--max-tokens", type=int, default=None, help="completion tokens per request (default 48)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of each server and of the matmul probe (1, the server's default: on cores shared with "
        "other jobs a 2-thread step waits for its slower thread, and the figures say more about the load)",
    )
    p.add_argument("--old-ref", default=OLD_REF, help="the commit whose server is the old fp32 path")
    p.add_argument("--profile", action="store_true", help="split one decode step instead (no servers)")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    p.add_argument("--grpo-steps", type=int, default=2, help="GRPO steps per setting in a full run (0: none)")
    args = p.parse_args()
    args.concurrency = args.concurrency or ("1,32" if args.quick else "1,8,32,64")
    args.rounds = args.rounds or (2 if args.quick else 3)
    args.max_tokens = args.max_tokens or (32 if args.quick else 48)
    load = os.getloadavg()
    if args.profile:
        figures = profile_step(args)
        figures.update({"threads": args.threads, "load_average_before": [round(x, 2) for x in load],
                        "load_average_after": [round(x, 2) for x in os.getloadavg()], "cpu": _cpu(),
                        "command": "python -m benchmarks.real_model_speed " + " ".join(sys.argv[1:])})  # fmt: skip
        print(json.dumps(figures))
        return
    with tempfile.TemporaryDirectory(prefix="real_model_speed_") as tmp:
        figures: dict[str, Any] = serving(args, Path(tmp))
        if not args.quick and args.grpo_steps:  # 2 GRPO steps of examples/smollm2_cpu.yaml, old vs new settings
            from benchmarks.grpo_step_speed import grpo_steps

            figures.update(grpo_steps(Path(tmp), args.grpo_steps))
        figures.update({
            "threads": args.threads, "rounds": args.rounds, "max_tokens": args.max_tokens, "old_ref": args.old_ref,
            "new_dtype": served_dtype(Path(tmp) / "new.log"),
            "load_average_before": [round(x, 2) for x in load],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "cpu": _cpu(), "command": "python -m benchmarks.real_model_speed " + " ".join(sys.argv[1:]),
        })  # fmt: skip
    line = json.dumps(figures)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(line)


def _cpu() -> str:
    """The CPU's model name, cores and bf16 flags (what the figures depend on)."""
    from trainers.serving.precision import bf16_cpu_flags

    name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), "unknown")  # fmt: skip
    return f"{name}, {os.cpu_count()} cores, bf16 flags: {', '.join(bf16_cpu_flags()) or 'none'}"


if __name__ == "__main__":
    main()

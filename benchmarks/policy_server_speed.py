"""How much the local policy server's batching buys: completion tokens/s, one-at-a-time vs concurrent.

Starts ``trainers.policy_server`` in-process on a free port, sends ``n`` chat requests one at a
time, then the same ``n`` requests at once, every one with ``max_tokens`` tokens exactly
(``ignore_eos``, temperature 1, so both runs do the same work), and prints one JSON line::

    {"sequential_tokens_per_s": ..., "concurrent_tokens_per_s": ..., "policy_server_batch_speedup": ...}

Without ``--model`` it builds a small random Qwen2 model with the tiny tokenizer in a temporary
directory (a few seconds). Commands::

    python -m benchmarks.policy_server_speed
    python -m benchmarks.policy_server_speed --model checkpoints/tiny-policy --n 32 --max-tokens 48 --threads 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = ["build_random_tiny_model", "measure_batch_speedup"]

_QUESTIONS = [
    "What is Pia's phone number?",
    "Add a contact named Omar with phone 5550101.",
    "Delete the contact Lena.",
    "Which city does Ravi live in?",
    "Book the concert for Friday.",
    "Find every event in Oslo.",
    "Send a message to Mia saying hello.",
    "Remove the meeting on Monday.",
]
_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "sandbox tool",
            "parameters": {"type": "object", "properties": {arg: {"type": "string"} for arg in args}},
        },
    }
    for name, args in [
        ("search_contacts", ["query"]),
        ("get_contact", ["contact_id"]),
        ("add_contact", ["name", "phone"]),
    ]
]


def build_random_tiny_model(out_dir: str | Path, *, hidden_size: int = 64, layers: int = 2) -> Path:
    """Save a random tiny Qwen2 model + the tiny chat tokenizer to ``out_dir`` (no downloads)."""
    from trainers.tiny import ModelSize, build_model, build_tiny_tokenizer

    out = Path(out_dir)
    tokenizer = build_tiny_tokenizer(200)
    size = ModelSize(
        hidden_size=hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=2 * hidden_size,
    )
    build_model(tokenizer, size).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _body(i: int, model: str, max_tokens: int) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": "Use the tools to act for the user."},
            {"role": "user", "content": _QUESTIONS[i % len(_QUESTIONS)]},
        ],
        "tools": _TOOLS,
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "ignore_eos": True,
        "logprobs": True,
        "return_token_ids": True,
    }


def measure_batch_speedup(
    model_path: str | Path, n: int = 32, max_tokens: int = 48, *, threads: int | None = None
) -> dict[str, Any]:
    """Completion tokens/s of ``n`` sequential vs ``n`` concurrent requests against an in-process server.

    The client is one asyncio ``httpx.AsyncClient`` (run on its own thread, so this works from
    inside a running event loop too); ``threads`` sets torch's intra-op threads.
    """
    from trainers.policy_server import create_app, serve_in_background

    app = create_app(model_path, max_batch_size=max(n, 1), threads=threads)
    model = app.state.engine.served_model_name
    stats = app.state.scheduler.stats
    with serve_in_background(app) as url, ThreadPoolExecutor(max_workers=1) as runner:
        timings = runner.submit(asyncio.run, _drive(url, model, n, max_tokens, stats)).result()
    sequential_rate = timings["sequential_tokens"] / timings["sequential_s"]
    concurrent_rate = timings["concurrent_tokens"] / timings["concurrent_s"]
    return {
        "sequential_tokens_per_s": round(sequential_rate, 1),
        "concurrent_tokens_per_s": round(concurrent_rate, 1),
        "policy_server_batch_speedup": round(concurrent_rate / sequential_rate, 2),
        "requests": n,
        "max_tokens": max_tokens,
        "concurrent_prefills": timings["concurrent_prefills"],
        "max_running_rows": stats.max_running_rows,
    }


async def _drive(url: str, model: str, n: int, max_tokens: int, stats: Any) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def call(i: int) -> int:
            r = await client.post("/v1/chat/completions", json=_body(i, model, max_tokens))
            r.raise_for_status()
            return r.json()["usage"]["completion_tokens"]

        await call(0)  # warm-up
        t0 = time.perf_counter()
        sequential_tokens = 0
        for i in range(n):
            sequential_tokens += await call(i)
        sequential_s = time.perf_counter() - t0
        prefills_before = stats.prefills
        t0 = time.perf_counter()
        concurrent_tokens = sum(await asyncio.gather(*(call(i) for i in range(n))))
        concurrent_s = time.perf_counter() - t0
    return {
        "sequential_tokens": sequential_tokens,
        "sequential_s": sequential_s,
        "concurrent_tokens": concurrent_tokens,
        "concurrent_s": concurrent_s,
        "concurrent_prefills": stats.prefills - prefills_before,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="save_pretrained directory (default: build a random tiny model)")
    p.add_argument("--n", type=int, default=32, help="requests per phase")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or build_random_tiny_model(tmp)
        result = measure_batch_speedup(model, n=args.n, max_tokens=args.max_tokens, threads=args.threads)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

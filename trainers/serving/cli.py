"""``python -m trainers.policy_server``: the command line of the CPU policy server."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import Any

from .app import create_app
from .engine import PolicyEngine

__all__ = ["main", "make_parser"]

logger = logging.getLogger("trainers.policy_server")


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=_app_doc(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="save_pretrained directory (model + tokenizer with chat template)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", default=None, help="name clients send as `model` (default: dir name)")
    p.add_argument("--max-batch-size", type=int, default=32, help="rows decoded together at most (n counts)")
    p.add_argument("--max-new-tokens-cap", type=int, default=512, help="upper bound on max_tokens per request")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads; 1 suits tiny models and a machine shared with a trainer (more threads on "
        "busy cores make every step wait for the slowest one), raise it for bigger models on idle cores; "
        "`python -m trainers.policy_server` makes idle OpenMP threads sleep (OMP_WAIT_POLICY=PASSIVE unless set)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the generator for requests without a seed")
    p.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the KV of prompt prefixes across requests (exact token prefixes, dropped on an adapter or "
        "weight change); --no-enable-prefix-caching turns it off",
    )
    p.add_argument(
        "--kv-spare-columns",
        type=int,
        default=64,
        help="decode steps a batch's KV cache grows in place before one copy to a bigger buffer (0: concatenate "
        "at every step, as transformers does)",
    )
    p.add_argument(
        "--lean-decode",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="decode steps of Qwen2/Llama models without transformers' forward wrappers (same modules, same "
        "results, less overhead); --no-lean-decode keeps transformers' forward",
    )
    p.add_argument("--prefix-cache-block-size", type=int, default=16, help="tokens per cached block")
    p.add_argument(
        "--prefix-cache-max-tokens", type=int, default=65536, help="cached tokens at most, least recently used evicted"
    )
    p.add_argument(
        "--allow-template-without-tools",
        action="store_true",
        help="serve a chat template that drops the tools it is given (warns); by default the server refuses it",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def _create(args: argparse.Namespace) -> Any:
    from trainers.models import resolve_model

    return create_app(
        resolve_model(args.model),
        served_model_name=args.served_model_name,
        max_batch_size=args.max_batch_size,
        max_new_tokens_cap=args.max_new_tokens_cap,
        seed=args.seed,
        threads=args.threads,
        prefix_caching=args.enable_prefix_caching,
        prefix_cache_block_size=args.prefix_cache_block_size,
        prefix_cache_max_tokens=args.prefix_cache_max_tokens,
        kv_spare_columns=args.kv_spare_columns,
        lean_decode=args.lean_decode,
        allow_template_without_tools=args.allow_template_without_tools,
    )


def main(argv: Sequence[str] | None = None) -> None:
    import torch
    import uvicorn

    args = make_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from trainers.tool_templates import TemplateDropsTools

    try:
        app = _create(args)
    except TemplateDropsTools as e:
        raise SystemExit(f"error: {e}") from None
    engine: PolicyEngine = app.state.engine
    logger.info(
        "policy server: model %s served as %r (%.2fM params, max_model_len %d), max batch %d rows, "
        "max new tokens %d, %d threads, seed %d, prefix caching %s, listening on http://%s:%d/v1",
        engine.model_path,
        engine.served_model_name,
        engine.num_parameters / 1e6,
        engine.max_model_len,
        args.max_batch_size,
        args.max_new_tokens_cap,
        torch.get_num_threads(),
        args.seed,
        "on" if engine.prefix_cache is not None else "off",
        args.host,
        args.port,
    )
    # One access-log line per request drowns the batch lines during rollouts: only in debug mode.
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.log_level == "debug")


def _app_doc() -> str:
    from . import app

    return app.__doc__ or ""

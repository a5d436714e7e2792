"""``python -m trainers.policy_server``: the command line of the CPU policy server."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langgraph_evolver._serving import add_header_limit_arguments, uvicorn_guards

from .access import API_KEY_ENV, WeightAccess, check_api_key, check_bind, is_loopback, split_dirs
from .app import DEFAULT_MAX_REQUEST_BYTES, create_app
from .engine import PolicyEngine
from .precision import DTYPE_CHOICES

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
    p.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default="auto",
        help="what the model computes in: auto (default) = bfloat16 on a CPU with native bf16 (amx_bf16 or "
        "avx512_bf16 in /proc/cpuinfo) for a model of 20M+ parameters, float32 otherwise; logprobs are then those of "
        "the bf16 model, so pair bf16 with importance correction (TIS) against an fp32 trainer",
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
    p.add_argument(
        "--strict-tools",
        action="store_true",
        help="hold every request's tool calls to its tools: names, argument keys, required arguments, listed "
        'values (without it, only functions sent with "strict": true are held)',
    )
    p.add_argument(
        "--grounded-ids",
        action="store_true",
        help="with --strict-tools, id arguments (id, *_id, *Id) must be copied from the request or a tool's result "
        "(off by default: no gain on a library validation set, docs/policy-endpoint.md)",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    limits = p.add_argument_group("limits", "what one request may cost before it is refused")
    limits.add_argument(
        "--max-request-bytes",
        type=int,
        default=DEFAULT_MAX_REQUEST_BYTES,
        help=f"largest request body; larger is a 413 before it is held (default: {DEFAULT_MAX_REQUEST_BYTES})",
    )
    add_header_limit_arguments(limits)
    p.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        metavar="PID",
        help="stop when process PID, which started this server, is gone (killed or exited without stopping it); "
        "PolicyServerProcess passes its own process, so a killed trainer leaves no server behind",
    )
    access = p.add_argument_group("access", "who may call the server, and which weights it may load at runtime")
    access.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV) or None,
        help=f"every route but /health needs 'Authorization: Bearer <key>' (401 otherwise); default ${API_KEY_ENV}, "
        "which is also what the clients send (prefer it: a command line is visible to every user of the machine)",
    )
    access.add_argument(
        "--allow-runtime-updates",
        action="store_true",
        help="serve /v1/load_lora_adapter, /v1/unload_lora_adapter and /update_weights_from_disk (403 otherwise); "
        "they read only safetensors, and only below --allowed-weight-dirs",
    )
    access.add_argument(
        "--allowed-weight-dirs",
        action="append",
        metavar="DIR[,DIR...]",
        help="directories runtime loads may read from, symlinks followed (repeatable or comma-separated); the "
        "model's own directory always counts, and is the only one by default",
    )
    access.add_argument(
        "--insecure",
        action="store_true",
        help="serve on a non-loopback --host without an API key (refused otherwise)",
    )
    return p


def _create(args: argparse.Namespace) -> Any:
    from trainers.models import resolve_model

    model_path = resolve_model(args.model)
    return create_app(
        model_path,
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
        dtype=args.dtype,
        allow_template_without_tools=args.allow_template_without_tools,
        api_key=args.api_key,
        allow_runtime_updates=args.allow_runtime_updates,
        allowed_weight_dirs=split_dirs(args.allowed_weight_dirs),
        max_request_bytes=args.max_request_bytes,
        strict_tools=args.strict_tools,
        grounded_ids=args.grounded_ids,
    )


def exit_with_parent(parent_pid: int, *, poll_s: float = 0.5, grace_s: float = 10.0) -> threading.Thread:
    """Stop this process once ``parent_pid`` is no longer its parent (the parent died; the child was re-parented).

    A daemon thread polls ``os.getppid()``: no signal reaches a child when its parent is SIGKILLed, and a
    server left behind would hold its port, memory and cores. SIGTERM first (uvicorn shuts down cleanly),
    then, if it still runs after ``grace_s``, ``os._exit``.
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        logger.warning("the process that started this server (pid %d) is gone: stopping", parent_pid)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(1)

    thread = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    thread.start()
    return thread


def main(argv: Sequence[str] | None = None) -> None:
    import torch
    import uvicorn

    args = make_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # before minutes of model loading: the access settings are checked first
    check_bind(args.host, api_key=args.api_key, insecure=args.insecure)
    try:
        check_api_key(args.api_key)
        guards = uvicorn_guards(max_header_bytes=args.max_header_bytes, header_timeout_s=args.header_timeout)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    if args.max_request_bytes < 1:
        raise SystemExit(f"error: --max-request-bytes must be positive, got {args.max_request_bytes}.")
    if args.parent_pid is not None:  # from the start: a parent killed while the model loads leaves nothing either
        exit_with_parent(args.parent_pid)
    for d in split_dirs(args.allowed_weight_dirs):
        if not Path(d).expanduser().is_dir():
            raise SystemExit(f"error: --allowed-weight-dirs {d}: no such directory; create it first or fix the path.")
    from trainers.tool_templates import TemplateDropsTools

    try:
        app = _create(args)
    except TemplateDropsTools as e:
        raise SystemExit(f"error: {e}") from None
    engine: PolicyEngine = app.state.engine
    access: WeightAccess = app.state.weight_access
    if not args.api_key and not is_loopback(args.host):
        logger.warning("serving on %s with no API key (--insecure): anyone who reaches it can use it", args.host)
    logger.info(
        "access: API key %s; runtime weight loading %s",
        "required" if args.api_key else "not required",
        f"on, from {', '.join(map(str, access.dirs or ()))}" if access.allow else "off (--allow-runtime-updates)",
    )
    logger.info(
        "policy server: model %s served as %r (%.2fM params, max_model_len %d), max batch %d rows, "
        "max new tokens %d, %d threads, %s, seed %d, prefix caching %s, listening on http://%s:%d/v1",
        engine.model_path,
        engine.served_model_name,
        engine.num_parameters / 1e6,
        engine.max_model_len,
        args.max_batch_size,
        args.max_new_tokens_cap,
        torch.get_num_threads(),
        str(engine.dtype).removeprefix("torch."),
        args.seed,
        "on" if engine.prefix_cache is not None else "off",
        args.host,
        args.port,
    )
    # One access-log line per request drowns the batch lines during rollouts: only in debug mode.
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.log_level == "debug",
                **guards)  # fmt: skip


def _app_doc() -> str:
    from . import app

    return app.__doc__ or ""

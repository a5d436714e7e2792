"""A CPU policy server speaking the subset of vLLM's OpenAI API that the rollouts use.

It serves a Hugging Face causal LM (``save_pretrained`` directory with its tokenizer and chat
template) so that the same client code runs against it and against vLLM in production:
exact ``prompt_token_ids`` / ``token_ids`` / processed logprobs, hermes tool-call parsing and
the runtime LoRA API. Requests are batched by one worker thread (``trainers.serving.scheduler``).

Run it (needs the ``serve`` and ``train`` extras)::

    python -m trainers.policy_server --model checkpoints/tiny-policy --port 8000
    EVOLVER_POLICY_API_KEY=... python -m trainers.policy_server --model /models/qwen --host 0.0.0.0 \
        --port 8000 --served-model-name policy --max-batch-size 64 --threads 8 --seed 1 \
        --allow-runtime-updates --allowed-weight-dirs /runs/qwen-grpo

Access (``trainers.serving.access``): with an API key (``--api-key``, default
``$EVOLVER_POLICY_API_KEY``) every route but ``/health`` needs ``Authorization: Bearer <key>``
(401 otherwise); a non-loopback ``--host`` without a key is refused unless ``--insecure``, and a key
with whitespace around it is refused. The runtime weight routes below answer 403 unless
``--allow-runtime-updates``; then they read only below ``--allowed-weight-dirs`` (and the model's own
directory), symlinks followed for the directory and for every file in it (and every shard an index
names), and only safetensors (a ``.bin`` pickle is a 400). An adapter whose config gives other ranks or
more target modules than its tensors hold is a 400 before anything is allocated.

Limits: a request body over ``max_request_bytes`` (``--max-request-bytes``, 4 MiB) is a 413 before it is
held; a prompt that cannot fit ``max_model_len`` is a 400 before it is tokenized (its bytes after the
tokenizer's normalizer, divided by the most bytes any token of the vocabulary spells, already exceed it).
On the command line a request line and headers over ``--max-header-bytes`` (431) or not sent within
``--header-timeout`` seconds (408) close the connection (``langgraph_evolver._serving.guarded_http``).

Endpoints:

- ``POST /v1/chat/completions``: ``model``, ``messages``, ``tools``, ``tool_choice`` (auto | none |
  required | ``{"type": "function", "function": {"name": ...}}``), ``parallel_tool_calls``,
  ``response_format``, ``temperature`` (1.0; 0 = greedy), ``top_p``, ``max_tokens`` /
  ``max_completion_tokens``, ``n``, ``seed``, ``stop``, ``logprobs``, ``top_logprobs``,
  ``return_token_ids``, and vLLM's extras ``stop_token_ids``, ``ignore_eos``,
  ``skip_special_tokens``, ``return_tokens_as_token_ids``. Every response carries
  ``system_fingerprint``: the version that sampled it (a LoRA adapter's name, or the base
  weights' version: "base" until ``/update_weights_from_disk`` sets one), and
  ``usage.prompt_tokens_details.cached_tokens`` (prompt tokens served from the prefix cache).
- ``GET /v1/models`` (base model and loaded adapters), ``GET /health``, ``GET /metrics``
  (Prometheus text: requests, tokens, prefill tokens computed / saved, prefix-cache hit rate).
- ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path", "load_inplace"}``, ``POST /v1/unload_lora_adapter``
  ``{"lora_name"}`` (200 plain text, as vLLM). Loading a loaded name again from the same,
  unchanged directory is a no-op (200); another path or changed files replace the adapter atomically
  (loaded aside, then the name switched between two batches; a failed load keeps the old one), with or
  without vLLM's ``load_inplace`` (accepted so one call promotes on both servers).
- ``POST /update_weights_from_disk`` ``{"model_path", "version"}`` (SGLang's route): serve the base
  weights of another ``save_pretrained`` directory of the same architecture; answers
  ``{"success": true, "version": ...}``, or 400 with the old weights still serving.

Prefix caching (on; ``--no-enable-prefix-caching`` turns it off): the KV of every full block of
16 prompt tokens (and of prompt + completion when a row ends) is kept, per adapter, and a prompt
is prefilled only past its longest cached prefix (``trainers.serving.cache``); new weights or a
replaced adapter drop the affected blocks.

Errors are ``{"error": {"message", "type", "param", "code"}}`` with 400 (bad body, prompt too
long, weights that are not safetensors), 401 (API key), 403 (runtime weight loading off, or a
path outside the allowed directories), 404 (unknown model or adapter, missing adapter path) or
500; a failing request never stops the server. Departures from vLLM: ``max_tokens`` beyond the
context window is clamped to what fits (and to ``--max-new-tokens-cap``) instead of refused;
sampling defaults never come from the model's ``generation_config`` (vLLM's ``--generation-config
auto`` applies them); no streaming.
Nothing is grammar-constrained: ``tool_choice`` "required" or a named function appends the start of
a tool call, as the chat template writes it, to the prompt (``trainers.serving.tool_choice``) and the
model samples the rest. ``prompt_token_ids`` include those forced tokens (``token_ids`` and
``logprobs`` cover only sampled ones); a continuation that does not parse comes back as content
(forced text + completion) with no ``tool_calls``, where vLLM's grammar always yields a call;
parsed calls end with ``finish_reason`` "tool_calls" (vLLM says "stop" for these two modes) and
keep the template's call format (vLLM's grammar makes named calls plain JSON arguments and
"required" a JSON list). ``response_format`` (json_object / json_schema) is accepted but not
enforced, and ``parallel_tool_calls`` is ignored: every parsed call is returned.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from langgraph_evolver._serving import BodyLimitMiddleware

from ..chat_format import message_text, normalize_messages
from .access import OPEN_PATHS, BearerKeyMiddleware, WeightAccess, check_api_key
from .cache import PrefixCache
from .engine import PolicyEngine
from .errors import GenerationError
from .protocol import (
    ChatCompletionRequest,
    LoadAdapterRequest,
    UnloadAdapterRequest,
    UpdateWeightsRequest,
    build_choice,
    error_response,
    error_responses,
)
from .sampling import SamplingParams
from .scheduler import BatchScheduler, prometheus_metrics
from .strict_tools import ToolGrammar
from .tool_choice import ForcedToolCall, ToolChoice, force_tool_call, resolve_tool_choice

__all__ = ["create_app"]

logger = logging.getLogger("trainers.policy_server")


class _InternalError(GenerationError):
    """An unexpected failure while serving one request (HTTP 500); the server keeps running."""

    status_code = 500


# Every route is wrapped in `_guarded` rather than relying on an app-wide `exception_handler(Exception)`: Starlette
# sends that handler's 500 response and then re-raises the exception, so uvicorn logs the traceback again and closes
# the client's keep-alive connection; a `GenerationError` is answered by the `GenerationError` handler, which doesn't.
def _guarded(endpoint):
    """Turn unexpected exceptions of ``endpoint`` into a 500 error body; the server keeps running."""

    @functools.wraps(endpoint)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await endpoint(*args, **kwargs)
        except GenerationError:
            raise
        except Exception as e:
            logger.exception("request failed")
            raise _InternalError(f"Internal error: {type(e).__name__}: {e}") from e

    return wrapper


_DISCONNECT_POLL_S = 0.2
"""How often a waiting chat completion checks whether its client is still connected."""
DEFAULT_MAX_REQUEST_BYTES = 4 << 20
"""Request bodies larger than this are a 413 (``--max-request-bytes``): a prompt of the longest context a model
of 128K tokens takes is about 0.5 MB of text; 30 MB took 116 s and 5.6 GB to tokenize."""


def _too_large(max_bytes: int) -> Any:
    def refusal(size: str) -> dict[str, Any]:
        message = (f"The request body is {size} bytes, over this server's limit of {max_bytes} bytes. Send a "
                   "shorter prompt, or start the server with a larger --max-request-bytes.")  # fmt: skip
        return {"error": {"message": message, "type": "RequestTooLargeError", "param": None, "code": 413}}

    return refusal


# -- the app -------------------------------------------------------------------------------
def create_app(
    model_path: str | Path,
    *,
    served_model_name: str | None = None,
    max_batch_size: int = 32,
    max_new_tokens_cap: int = 512,
    seed: int = 0,
    threads: int | None = None,
    prefix_caching: bool = True,
    prefix_cache_block_size: int = 16,
    prefix_cache_max_tokens: int = 65536,
    kv_spare_columns: int = 64,
    lean_decode: bool = True,
    dtype: str = "float32",
    allow_template_without_tools: bool = False,
    api_key: str | None = None,
    allow_runtime_updates: bool = True,
    allowed_weight_dirs: Sequence[str | Path] | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    strict_tools: bool = False,
    grounded_ids: bool = False,
) -> FastAPI:
    """Load the model at ``model_path`` and return the FastAPI app that serves it.

    Access: ``api_key`` makes every route but ``/health`` require ``Authorization: Bearer <key>`` (a key with
    whitespace around it is a ``ValueError``); ``max_request_bytes`` caps request bodies (413 beyond).
    ``allow_runtime_updates`` serves the adapter and weight routes; ``allowed_weight_dirs`` confines
    the paths they read to those directories and ``model_path``'s own (symlinks followed; a missing
    directory is a ``ValueError``). These
    defaults (no key, runtime loading from any directory, safetensors only) suit a server that trusted
    code starts for itself on loopback (tests, benchmarks, ``serve_in_background``); the command line
    (``python -m trainers.policy_server``) defaults to closed: no runtime loading, the model's directory only.

    The engine and its worker thread live on ``app.state.engine`` / ``app.state.scheduler``
    (``scheduler.stats`` counts batches and requests, ``engine.prefill_stats`` and
    ``engine.prefix_cache.stats`` the prefill tokens saved); the worker stops when the app shuts down.
    A chat template that drops the tools it is given is refused (``TemplateDropsTools``) unless
    ``allow_template_without_tools``, which logs a warning instead. ``dtype`` is ``PolicyEngine``'s (fp32 here,
    ``auto`` on the command line). ``strict_tools`` holds every request's tool calls to its tools' names and
    argument keys (``strict_tools``), and with ``grounded_ids`` their id arguments to ids the conversation shows;
    without it, only requests with a ``"strict": true`` function are held (to their schema alone).
    """
    import torch

    # before the model loads: a missing allowed directory fails fast (ValueError naming it)
    check_api_key(api_key)
    if max_request_bytes < 1:
        raise ValueError(f"max_request_bytes must be positive, got {max_request_bytes}.")
    access = WeightAccess.create(allow=allow_runtime_updates, dirs=allowed_weight_dirs, model_dir=model_path)
    if threads:
        torch.set_num_threads(threads)
    cache = (
        PrefixCache(block_size=prefix_cache_block_size, max_tokens=prefix_cache_max_tokens) if prefix_caching else None
    )
    engine = PolicyEngine(
        model_path,
        served_model_name=served_model_name,
        seed=seed,
        prefix_cache=cache,
        kv_spare_columns=kv_spare_columns,
        lean_decode=lean_decode,
        dtype=dtype,
    )
    from trainers.tool_templates import TemplateDropsTools, check_renders_tools

    try:
        check_renders_tools(engine.tokenizer, where=f"policy server --model {model_path}")
    except TemplateDropsTools as e:
        if not allow_template_without_tools:
            raise
        logger.warning("%s Serving it anyway (--allow-template-without-tools): tool calls will be guesses.", e)
    scheduler = BatchScheduler(engine, max_batch_size=max_batch_size)
    token_text = engine.token_texts
    token_bytes = longest_token_bytes(engine.tokenizer)
    auth = (401,) if api_key else ()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        scheduler.close()

    app = FastAPI(title="langgraph-evolver policy server", lifespan=lifespan)
    app.state.engine = engine
    app.state.scheduler = scheduler
    app.state.weight_access = access
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_request_bytes, refusal=_too_large(max_request_bytes))
    if api_key:  # outermost: a request without the key is refused before its body is read
        app.add_middleware(BearerKeyMiddleware, api_key=api_key)
    _document_access(app, bearer=bool(api_key))

    @app.exception_handler(GenerationError)
    async def _generation_error(_: Request, exc: GenerationError) -> JSONResponse:
        return error_response(exc.status_code, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
            parts.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
        return error_response(400, "Invalid request body: " + "; ".join(parts))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail))

    @app.get("/health", responses=error_responses(503))
    @_guarded
    async def health() -> Response:
        if not scheduler.alive:
            return error_response(503, "The generation worker is not running.")
        if (error := scheduler.failing) is not None:
            return error_response(
                503,
                f"Generation failed {scheduler.stats.failures_in_a_row} times in a row with no request served since; "
                f"last error: {error}",
            )
        return Response(status_code=200)

    @app.get("/metrics", responses=error_responses(*auth))
    @_guarded
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(prometheus_metrics(engine, scheduler))

    @app.get("/v1/models", responses=error_responses(*auth))
    @_guarded
    async def models() -> dict[str, Any]:
        def card(name: str, root: str, parent: str | None) -> dict[str, Any]:
            return {
                "id": name,
                "object": "model",
                "created": engine.created,
                "owned_by": "langgraph-evolver",
                "root": root,
                "parent": parent,
                "max_model_len": engine.max_model_len,
                "permission": [],
            }

        data = [card(engine.served_model_name, engine.model_path, None)]
        data += [card(name, path, engine.served_model_name) for name, path in list(engine.adapters.items())]
        return {"object": "list", "data": data}

    @app.post("/v1/load_lora_adapter", responses=error_responses(400, *auth, 403, 404, 413))
    @_guarded
    async def load_lora_adapter(body: LoadAdapterRequest) -> PlainTextResponse:
        resolved = access.check(body.lora_path, route="/v1/load_lora_adapter")
        access.check_files(resolved, route="/v1/load_lora_adapter")
        name, path = body.lora_name, str(resolved)
        loaded = await asyncio.wrap_future(scheduler.call(lambda: engine.load_adapter(name, path)))
        if not loaded:
            return PlainTextResponse(f"Success: LoRA adapter '{name}' was already loaded from this path.")
        logger.info("loaded LoRA adapter %s from %s", name, path)
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    @app.post("/update_weights_from_disk", responses=error_responses(400, *auth, 403, 413))
    @_guarded
    async def update_weights_from_disk(body: UpdateWeightsRequest) -> dict[str, Any]:
        resolved = access.check(body.model_path, route="/update_weights_from_disk")
        access.check_files(resolved, route="/update_weights_from_disk")
        path, version = str(resolved), body.version
        served = await asyncio.wrap_future(scheduler.call(lambda: engine.update_weights(path, version)))
        logger.info("base weights updated from %s (version %s)", path, served)
        return {"success": True, "version": served, "message": f"Loaded the weights at {path}."}

    @app.post("/v1/unload_lora_adapter", responses=error_responses(400, *auth, 403, 404, 413))
    @_guarded
    async def unload_lora_adapter(body: UnloadAdapterRequest) -> PlainTextResponse:
        access.check_allowed("/v1/unload_lora_adapter")
        name = body.lora_name
        await asyncio.wrap_future(scheduler.call(lambda: engine.unload_adapter(name)))
        logger.info("unloaded LoRA adapter %s", name)
        return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

    @app.post("/v1/chat/completions", responses=error_responses(400, *auth, 404, 413))
    @_guarded
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        if body.stream:
            raise GenerationError("stream=true is not supported by this server; send stream=false.")
        if body.top_logprobs and not body.logprobs:
            raise GenerationError("when using `top_logprobs`, `logprobs` must be set to true.")
        if body.n > scheduler.max_batch_size:  # before `[params] * body.n`: n=10**9 would be a list of 8 GB
            raise GenerationError(f"n={body.n} exceeds the server's max batch size {scheduler.max_batch_size}.")
        choice = resolve_tool_choice(body.tool_choice, [t.function.name for t in body.tools or ()])
        model = engine.check_model(body.model)
        # template + tokenizer: off the event loop
        prompt_ids, forced = await asyncio.to_thread(_prompt_ids, engine, body, choice, token_bytes)
        room = engine.max_model_len - len(prompt_ids)
        if room <= 0:
            raise GenerationError(
                f"This model's maximum context length is {engine.max_model_len} tokens. However, your request has "
                f"{len(prompt_ids)} input tokens. Please reduce the length of the input messages."
            )
        requested = body.max_completion_tokens or body.max_tokens or max_new_tokens_cap
        params = SamplingParams(
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            max_tokens=max(1, min(requested, max_new_tokens_cap, room)),
            seed=body.seed,
            top_logprobs=(body.top_logprobs or 0) if body.logprobs else 0,
            stop=(body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ()),
            stop_token_ids=tuple(body.stop_token_ids or ()),
            ignore_eos=body.ignore_eos,
            skip_special_tokens=body.skip_special_tokens,
            tool_grammar=_tool_grammar(body, choice, forced, strict_tools, grounded=grounded_ids),
        )
        future = scheduler.submit(prompt_ids, [params] * body.n, model=model)
        completions = await _result_unless_disconnected(future, request)
        if completions is None:
            logger.info("client disconnected; dropped its generation")
            return Response(status_code=499)  # nginx's "client closed request"; nobody reads it
        parse_tools = bool(body.tools) and choice.mode != "none"

        def respond() -> JSONResponse:  # decoding, tool-call parsing and JSON encoding: off the event loop
            choices = [
                build_choice(
                    i,
                    c,
                    engine.tokenizer,
                    logprobs=body.logprobs,
                    return_token_ids=body.return_token_ids,
                    parse_tools=parse_tools,
                    tokens_as_ids=body.return_tokens_as_token_ids,
                    skip_special_tokens=body.skip_special_tokens,
                    token_text=token_text,
                    forced_text=forced.text if forced else None,
                )
                for i, c in enumerate(completions)
            ]
            completion_tokens = sum(len(c.token_ids) for c in completions)
            return JSONResponse(
                {
                    "id": f"chatcmpl-{uuid.uuid4().hex}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": choices,
                    "usage": {
                        "prompt_tokens": len(prompt_ids),
                        "completion_tokens": completion_tokens,
                        "total_tokens": len(prompt_ids) + completion_tokens,
                        "prompt_tokens_details": {"cached_tokens": completions[0].cached_tokens},
                    },
                    "prompt_logprobs": None,
                    "prompt_token_ids": prompt_ids if body.return_token_ids else None,
                    "system_fingerprint": completions[0].version,
                }
            )

        return await asyncio.to_thread(respond)

    return app


def _document_access(app: FastAPI, *, bearer: bool) -> None:
    """Make ``/openapi.json`` say what the server answers: no 422 (bad bodies are 400s), and the bearer key.

    FastAPI lists a 422 on every route with a body, but the validation handler answers 400 as vLLM does.
    """
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        for unused in ("HTTPValidationError", "ValidationError"):
            schema.get("components", {}).get("schemas", {}).pop(unused, None)
        if bearer:
            components = schema.setdefault("components", {})
            components.setdefault("securitySchemes", {})["bearer"] = {"type": "http", "scheme": "bearer"}
            for path, operations in schema.get("paths", {}).items():
                if path not in OPEN_PATHS:
                    for operation in operations.values():
                        operation["security"] = [{"bearer": []}]
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


async def _result_unless_disconnected(future: Future, request: Request) -> Any:
    """The scheduler ``future``'s result, or None once the client has disconnected.

    uvicorn does not cancel a handler whose client went away (timeout, crash), so waiting on the future alone would
    decode to ``max_tokens`` for nobody. Cancelling the future makes the worker drop the request's rows.
    """
    waiting = asyncio.wrap_future(future)
    try:
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=_DISCONNECT_POLL_S)
            if done:
                return waiting.result()
            if await request.is_disconnected():
                return None
    finally:
        waiting.cancel()  # no-op once done; otherwise it cancels `future` too


def longest_token_bytes(tokenizer: Any) -> int:
    """The most UTF-8 bytes any token of ``tokenizer`` spells (its string or its decoded text, whichever is
    longer): no token covers more of a prompt's (normalized) text, so a prompt of B bytes has at least
    B / this many tokens."""
    ids = list(range(len(tokenizer)))
    spelled = tokenizer.convert_ids_to_tokens(ids)
    decoded = tokenizer.batch_decode([[i] for i in ids])
    return max(1, *(len(str(t).encode()) for t in spelled), *(len(t.encode()) for t in decoded))


def _check_fits_untokenized(engine: PolicyEngine, prompt: str, token_bytes: int) -> None:
    """400 when ``prompt`` cannot fit ``max_model_len`` whatever its tokens: checked before tokenizing, which
    took 116 s and 5.6 GB for a 30 MB prompt. The text is measured as the tokenizer sees it, after its
    normalizer (NFC can shorten text: three Hangul jamo make one syllable), which is linear and cheap."""
    backend = getattr(engine.tokenizer, "backend_tokenizer", None)
    normalizer = getattr(backend, "normalizer", None)
    text = normalizer.normalize_str(prompt) if normalizer is not None else prompt
    size = len(text.encode())
    least = size // token_bytes
    if least >= engine.max_model_len:
        raise GenerationError(
            f"This model's maximum context length is {engine.max_model_len} tokens. However, your request has at "
            f"least {least} input tokens (its prompt is {size} bytes and no "
            f"token of this model spells more than {token_bytes}); it was refused without tokenizing. Please "
            "reduce the length of the input messages."
        )


def _tool_grammar(
    body: ChatCompletionRequest,
    choice: ToolChoice,
    forced: ForcedToolCall | None,
    strict_all: bool,
    *,
    grounded: bool = False,
) -> ToolGrammar | None:
    """The request's tools held strictly (``--strict-tools``, or a function sent with ``"strict": true``); under
    ``--strict-tools`` with ``grounded`` (``--grounded-ids``) id arguments are copied from the request's user and
    tool messages."""
    if not body.tools or choice.mode == "none":
        return None
    tools = [t.model_dump(exclude_none=True) for t in body.tools]
    if not strict_all and not any(t["function"].get("strict") is True for t in tools):
        return None
    context = (
        "\n".join(message_text(m.content) for m in body.messages if m.role in ("user", "tool"))
        if strict_all and grounded
        else None
    )
    return ToolGrammar.from_tools(tools, prefix=forced.text if forced is not None else "", context=context)


def _prompt_ids(
    engine: PolicyEngine, body: ChatCompletionRequest, choice: ToolChoice, token_bytes: int = 1
) -> tuple[list[int], ForcedToolCall | None]:
    """The chat template applied to the request, tokenized without extra special tokens.

    For a ``choice`` that forces a tool call, the ids also hold the forced start of the call,
    and the second value says which text that is. A prompt that cannot fit (``_check_fits_untokenized``) is
    refused before it is tokenized.
    """
    tokenizer = engine.tokenizer
    if not getattr(tokenizer, "chat_template", None):
        raise GenerationError(f"The model at {engine.model_path} has no chat template; save one with the tokenizer.")
    messages = normalize_messages([m.model_dump(exclude_none=True) for m in body.messages])
    tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
    try:
        prompt = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    except Exception as e:
        raise GenerationError(f"Could not apply the chat template to these messages: {type(e).__name__}: {e}") from e
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate: valid as a JSON escape ("\\ud800"), not as text
        raise GenerationError(
            f"The messages or tools hold text that is not valid Unicode ({e.reason}: {e.object[e.start : e.end]!a}); "
            "send UTF-8 text."
        ) from e
    _check_fits_untokenized(engine, prompt, token_bytes)
    prompt_ids = list(tokenizer(prompt, add_special_tokens=False).input_ids)
    if not choice.forced:
        return prompt_ids, None
    forced = force_tool_call(tokenizer, messages, tools or [], prompt, prompt_ids, choice)
    return forced.token_ids, forced

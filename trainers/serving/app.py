"""A CPU policy server speaking the subset of vLLM's OpenAI API that the rollouts use.

It serves a Hugging Face causal LM (``save_pretrained`` directory with its tokenizer and chat
template) so that the same client code runs against it and against vLLM in production:
exact ``prompt_token_ids`` / ``token_ids`` / processed logprobs, hermes tool-call parsing and
the runtime LoRA API. Requests are batched by one worker thread (``trainers._generation``).

Run it (needs the ``serve`` and ``train`` extras)::

    python -m trainers.policy_server --model checkpoints/tiny-policy --port 8000
    python -m trainers.policy_server --model /models/qwen --host 0.0.0.0 --port 8000 \
        --served-model-name policy --max-batch-size 64 --threads 8 --seed 1

Endpoints:

- ``POST /v1/chat/completions``: ``model``, ``messages``, ``tools``, ``tool_choice`` (auto | none |
  required | ``{"type": "function", "function": {"name": ...}}``), ``parallel_tool_calls``,
  ``response_format``, ``temperature`` (1.0; 0 = greedy), ``top_p``, ``max_tokens`` /
  ``max_completion_tokens``, ``n``, ``seed``, ``stop``, ``logprobs``, ``top_logprobs``,
  ``return_token_ids``, and vLLM's extras ``stop_token_ids``, ``ignore_eos``,
  ``skip_special_tokens``, ``return_tokens_as_token_ids``.
- ``GET /v1/models`` (base model and loaded adapters), ``GET /health``.
- ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path", "load_inplace"}``,
  ``POST /v1/unload_lora_adapter`` ``{"lora_name"}`` (200 plain text, as vLLM).

Errors are ``{"error": {"message", "type", "param", "code"}}`` with 400 (bad body, prompt too
long), 404 (unknown model or adapter, missing adapter path) or 500; a failing request never
stops the server. Departures from vLLM: ``max_tokens`` beyond the context window is clamped to
what fits (and to ``--max-new-tokens-cap``) instead of refused; sampling defaults never come from
the model's ``generation_config`` (vLLM's ``--generation-config auto`` applies them); no streaming.
Nothing is grammar-constrained: ``tool_choice`` "required" or a named function appends the start of
a tool call, as the chat template writes it, to the prompt (``trainers._tool_choice``) and the
model samples the rest. ``prompt_token_ids`` include those forced tokens (``token_ids`` and
``logprobs`` cover only sampled ones); a continuation that does not parse comes back as content
(forced text + completion) with no ``tool_calls``, where vLLM's grammar always yields a call;
parsed calls end with ``finish_reason`` "tool_calls" (vLLM says "stop" for these two modes) and
keep the template's call format (vLLM's grammar makes named calls plain JSON arguments and
"required" a JSON list). ``response_format`` (json_object / json_schema) is accepted but not
enforced, and ``parallel_tool_calls`` is ignored: every parsed call is returned.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from langgraph_evolver._serving import serve_in_background

from ._generation import (
    LOGPROB_FLOOR,
    BatchScheduler,
    Completion,
    GenerationError,
    PolicyEngine,
    SamplingParams,
)
from ._tool_choice import ForcedToolCall, ToolChoice, force_tool_call, resolve_tool_choice
from .chat_format import normalize_messages, parse_tool_calls

__all__ = ["build_choice", "create_app", "main", "make_parser", "serve_in_background"]

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

_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError", 503: "ServiceUnavailable"}


# -- request bodies (the HTTP boundary) -------------------------------------------------------
class _FunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    arguments: str | dict[str, Any] = "{}"


class _ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = ""
    type: Literal["function"] = "function"
    function: _FunctionCall


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[Any] | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None


class _FunctionDef(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class _Tool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: _FunctionDef


class ChatCompletionRequest(BaseModel):
    """The accepted body of ``/v1/chat/completions``; unknown fields are ignored, like vLLM."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    messages: list[_Message] = Field(min_length=1)
    tools: list[_Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    """Accepted and ignored: every parsed tool call is returned."""
    response_format: dict[str, Any] | None = None
    """Accepted but not enforced: there is no grammar-constrained decoding here."""
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: int = Field(default=1, ge=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    stream: bool = False

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        # Clients send explicit nulls for unset options ("logprobs": null, "n": null): use the defaults.
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


class LoadAdapterRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)
    load_inplace: bool = False


class UnloadAdapterRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None


# -- responses -----------------------------------------------------------------------------
def _error(status: int, message: str, *, param: str | None = None) -> JSONResponse:
    body = {"message": message, "type": _ERROR_TYPES.get(status, "BadRequestError"), "param": param, "code": status}
    return JSONResponse({"error": body}, status_code=status)


class _TokenText:
    """Per-token strings and bytes for logprob entries (cached; the vocabulary is fixed)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int, as_id: bool = False) -> str:
        if as_id:
            return f"token_id:{token_id}"
        text = self._cache.get(token_id)
        if text is None:
            text = self._tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
            self._cache[token_id] = text
        return text


def _logprob_entry(token_text: _TokenText, token_id: int, logprob: float, as_id: bool) -> dict[str, Any]:
    token = token_text(token_id, as_id)
    return {"token": token, "logprob": max(float(logprob), LOGPROB_FLOOR), "bytes": list(token.encode("utf-8"))}


def build_choice(
    index: int,
    completion: Completion,
    tokenizer: Any,
    *,
    logprobs: bool = False,
    return_token_ids: bool = False,
    parse_tools: bool = False,
    tokens_as_ids: bool = False,
    skip_special_tokens: bool = True,
    token_text: _TokenText | None = None,
    forced_text: str | None = None,
) -> dict[str, Any]:
    """One ``choices[i]`` entry of a chat completion, in vLLM's shape.

    The text excludes the EOS / stop token that ended the completion (``token_ids`` keeps it) and
    anything from a matched stop string on; with ``parse_tools`` the hermes ``<tool_call>`` blocks
    become ``tool_calls`` (all must parse, else the raw text stays the content). ``forced_text``
    (the start of a tool call that was appended to the prompt for ``tool_choice`` "required" or a
    named function) is put before the completion's text, which is then always parsed.
    """
    ids = list(completion.token_ids)
    text_ids = ids
    if completion.finish_reason == "stop" and not isinstance(completion.stop_reason, str) and ids:
        text_ids = ids[:-1]
    text = tokenizer.decode(text_ids, skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=False)
    if isinstance(completion.stop_reason, str) and (cut := text.find(completion.stop_reason)) >= 0:
        text = text[:cut]
    if forced_text is not None:
        text, parse_tools = forced_text + text, True
    finish_reason: str = completion.finish_reason
    content: str | None = text
    tool_calls: list[dict[str, Any]] = []
    if parse_tools:
        parsed = parse_tool_calls(text)
        if parsed.tool_calls:
            content, tool_calls, finish_reason = parsed.content, parsed.tool_calls, "tool_calls"
    logprobs_body = None
    if logprobs:
        token_text = token_text or _TokenText(tokenizer)
        entries = []
        for pos, (tid, lp) in enumerate(zip(ids, completion.logprobs, strict=True)):
            entry = _logprob_entry(token_text, tid, lp, tokens_as_ids)
            alternatives = completion.top_logprobs[pos] if completion.top_logprobs else ()
            entry["top_logprobs"] = [_logprob_entry(token_text, t, v, tokens_as_ids) for t, v in alternatives]
            entries.append(entry)
        logprobs_body = {"content": entries}
    return {
        "index": index,
        "message": {"role": "assistant", "content": content, "tool_calls": tool_calls, "reasoning_content": None},
        "logprobs": logprobs_body,
        "finish_reason": finish_reason,
        "stop_reason": completion.stop_reason,
        "token_ids": ids if return_token_ids else None,
    }


# -- the app -------------------------------------------------------------------------------
def create_app(
    model_path: str | Path,
    *,
    served_model_name: str | None = None,
    max_batch_size: int = 32,
    max_new_tokens_cap: int = 512,
    seed: int = 0,
    threads: int | None = None,
) -> FastAPI:
    """Load the model at ``model_path`` and return the FastAPI app that serves it.

    The engine and its worker thread live on ``app.state.engine`` / ``app.state.scheduler``
    (``scheduler.stats`` counts batches and requests); the worker stops when the app shuts down.
    """
    import torch

    if threads:
        torch.set_num_threads(threads)
    engine = PolicyEngine(model_path, served_model_name=served_model_name, seed=seed)
    scheduler = BatchScheduler(engine, max_batch_size=max_batch_size)
    token_text = _TokenText(engine.tokenizer)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        scheduler.close()

    app = FastAPI(title="langgraph-evolver policy server", lifespan=lifespan)
    app.state.engine = engine
    app.state.scheduler = scheduler

    @app.exception_handler(GenerationError)
    async def _generation_error(_: Request, exc: GenerationError) -> JSONResponse:
        return _error(exc.status_code, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for err in exc.errors():
            loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
            parts.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
        return _error(400, "Invalid request body: " + "; ".join(parts))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.get("/health")
    @_guarded
    async def health() -> Response:
        if not scheduler.alive:
            return _error(503, "The generation worker is not running.")
        return Response(status_code=200)

    @app.get("/v1/models")
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

    @app.post("/v1/load_lora_adapter")
    @_guarded
    async def load_lora_adapter(body: LoadAdapterRequest) -> PlainTextResponse:
        name, path = body.lora_name, body.lora_path
        await asyncio.wrap_future(scheduler.call(lambda: engine.load_adapter(name, path, replace=body.load_inplace)))
        logger.info("loaded LoRA adapter %s from %s", name, path)
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    @_guarded
    async def unload_lora_adapter(body: UnloadAdapterRequest) -> PlainTextResponse:
        name = body.lora_name
        await asyncio.wrap_future(scheduler.call(lambda: engine.unload_adapter(name)))
        logger.info("unloaded LoRA adapter %s", name)
        return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

    @app.post("/v1/chat/completions")
    @_guarded
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        if body.stream:
            raise GenerationError("stream=true is not supported by this server; send stream=false.")
        if body.top_logprobs and not body.logprobs:
            raise GenerationError("when using `top_logprobs`, `logprobs` must be set to true.")
        choice = resolve_tool_choice(body.tool_choice, [t.function.name for t in body.tools or ()])
        model = engine.check_model(body.model)
        # template + tokenizer: off the event loop
        prompt_ids, forced = await asyncio.to_thread(_prompt_ids, engine, body, choice)
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
                    },
                    "prompt_logprobs": None,
                    "prompt_token_ids": prompt_ids if body.return_token_ids else None,
                    "system_fingerprint": None,
                }
            )

        return await asyncio.to_thread(respond)

    return app


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


def _prompt_ids(
    engine: PolicyEngine, body: ChatCompletionRequest, choice: ToolChoice
) -> tuple[list[int], ForcedToolCall | None]:
    """The chat template applied to the request, tokenized without extra special tokens.

    For a ``choice`` that forces a tool call, the ids also hold the forced start of the call,
    and the second value says which text that is.
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
    prompt_ids = list(tokenizer(prompt, add_special_tokens=False).input_ids)
    if not choice.forced:
        return prompt_ids, None
    forced = force_tool_call(tokenizer, messages, tools or [], prompt, prompt_ids, choice)
    return forced.token_ids, forced


# -- command line --------------------------------------------------------------------------
def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
        "busy cores make every step wait for the slowest one), raise it for bigger models on idle cores",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the generator for requests without a seed")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def main(argv: Sequence[str] | None = None) -> None:
    import torch
    import uvicorn

    args = make_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(
        args.model,
        served_model_name=args.served_model_name,
        max_batch_size=args.max_batch_size,
        max_new_tokens_cap=args.max_new_tokens_cap,
        seed=args.seed,
        threads=args.threads,
    )
    engine: PolicyEngine = app.state.engine
    logger.info(
        "policy server: model %s served as %r (%.2fM params, max_model_len %d), max batch %d rows, "
        "max new tokens %d, %d threads, seed %d, listening on http://%s:%d/v1",
        engine.model_path,
        engine.served_model_name,
        engine.num_parameters / 1e6,
        engine.max_model_len,
        args.max_batch_size,
        args.max_new_tokens_cap,
        torch.get_num_threads(),
        args.seed,
        args.host,
        args.port,
    )
    # One access-log line per request drowns the batch lines during rollouts: only in debug mode.
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.log_level == "debug")


if __name__ == "__main__":
    main()

"""The HTTP boundary of the policy server: request bodies (pydantic) and vLLM-shaped responses."""

from __future__ import annotations

import json
from typing import Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..chat_format import parse_tool_calls
from .sampling import LOGPROB_FLOOR, Completion
from .token_texts import TokenTexts

__all__ = [
    "ChatCompletionRequest",
    "LoadAdapterRequest",
    "UnloadAdapterRequest",
    "UpdateWeightsRequest",
    "build_choice",
    "error_response",
    "error_responses",
]

_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    413: "RequestTooLargeError",
    500: "InternalServerError",
    503: "ServiceUnavailable",
}


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
    """The body of ``/v1/load_lora_adapter`` (vLLM's ``LoadLoRAAdapterRequest``).

    Answers as vLLM: 200 ``Success: LoRA adapter '<name>' added successfully.`` for a new name and for a
    replaced one; ``... was already loaded from this path.`` when the name already serves that very,
    unchanged directory (nothing is reloaded); an error body (400/404) when the directory does not load.
    """

    model_config = ConfigDict(extra="ignore")
    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)
    load_inplace: bool = False
    """vLLM's switch to replace an adapter already loaded under ``lora_name`` (without it vLLM answers 400
    "already been loaded"). Accepted so that one call works on both servers, and changes nothing here: this
    server always replaces a loaded name given another path or changed files (callers relied on that before
    the field existed), atomically: the new weights load beside the old, then the name switches to them, so
    no request meets a missing name and a directory that fails to load leaves the old adapter serving."""


class UpdateWeightsRequest(BaseModel):
    """The body of ``/update_weights_from_disk`` (SGLang's name and fields, plus a version label)."""

    model_config = ConfigDict(extra="ignore")
    model_path: str = Field(min_length=1)
    """A ``save_pretrained`` directory with the new base weights (same architecture and tokenizer)."""
    version: str | None = None
    """What responses answered by these weights carry as ``system_fingerprint`` (default: the path)."""


class UnloadAdapterRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    lora_name: str = Field(min_length=1)
    lora_int_id: int | None = None


# -- responses -----------------------------------------------------------------------------
class _ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorBody(BaseModel):
    """Every error answer: ``{"error": {"message", "type", "param", "code"}}`` (OpenAI's shape)."""

    error: _ErrorDetail


_ERROR_WHEN = {
    400: "Bad request body, prompt too long, or weights that cannot be read (not safetensors, another base).",
    401: "Missing or wrong API key: send 'Authorization: Bearer <key>' (the server's --api-key).",
    403: "Runtime weight loading is off (--allow-runtime-updates) or the path is outside --allowed-weight-dirs.",
    404: "Unknown model or adapter, or no adapter at the path.",
    413: "The request body is over the server's --max-request-bytes.",
    503: "The generation worker stopped or keeps failing.",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of a route that can answer with these error ``codes``."""
    return {code: {"model": ErrorBody, "description": _ERROR_WHEN[code]} for code in codes}


def error_response(status: int, message: str, *, param: str | None = None) -> JSONResponse:
    body = {"message": message, "type": _ERROR_TYPES.get(status, "BadRequestError"), "param": param, "code": status}
    return _AsciiJSONResponse({"error": body}, status_code=status)


class _AsciiJSONResponse(JSONResponse):
    """JSON with non-ASCII characters escaped: an error message that quotes the client's text (a model or tool
    name) may hold a lone surrogate, which JSON can escape but UTF-8 cannot encode (``JSONResponse`` would raise)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode()


def _logprob_entry(token_text: TokenTexts, token_id: int, logprob: float, as_id: bool) -> dict[str, Any]:
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
    token_text: TokenTexts | None = None,
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
        token_text = token_text or TokenTexts(tokenizer)
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

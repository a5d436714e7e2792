"""What a trace stores of a value: plain JSON (:func:`to_jsonable`) and bounded (:class:`TraceLimits`).

Both tracers (:class:`~langgraph_evolver.tracing.JsonlTracer` and
:class:`~langgraph_evolver.tracing.RolloutTracer`) keep the same amount of each run:

- :func:`to_jsonable` turns anything into plain JSON types and never raises (unknown objects become
  their ``repr``).
- :func:`bound_payload` shortens long lists of node runs and cuts long strings; :func:`compact_llm_outputs`
  stores an LLM run's logprobs once; :func:`shrink_run` applies both to a finished run as the JSONL
  tracer writes it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from datetime import date, datetime, time
from pathlib import PurePath
from typing import Any
from uuid import UUID

__all__ = ["TraceLimits", "bound_payload", "compact_llm_outputs", "shrink_run", "to_jsonable"]

_MAX_DEPTH = 64
"""Nesting depth beyond which values are stored as ``repr`` (guards against cycles)."""


# --------------------------------------------------------------------------- serialization


def _safe_repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:  # a broken __repr__ must not break tracing
        return f"<unrepresentable {type(value).__qualname__}>"


def to_jsonable(value: Any, _depth: int = 0) -> Any:
    """Convert ``value`` into plain JSON types; never raises (unknown objects become their ``repr``)."""
    try:
        if value is None or isinstance(value, bool | int | str):
            return value
        if isinstance(value, float):
            # NaN/inf are not JSON; keep them readable instead of emitting invalid tokens.
            return value if value == value and value not in (float("inf"), float("-inf")) else repr(value)
        if _depth >= _MAX_DEPTH:
            return _safe_repr(value)
        if isinstance(value, Mapping):
            return {str(k): to_jsonable(v, _depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [to_jsonable(v, _depth + 1) for v in value]
        if isinstance(value, datetime | date | time):
            return value.isoformat()
        if isinstance(value, UUID | PurePath):
            return str(value)
        if isinstance(value, enum.Enum):
            return to_jsonable(value.value, _depth + 1)
        if isinstance(value, bytes | bytearray):
            return value.decode("utf-8", errors="replace")
        model_dump = getattr(value, "model_dump", None)
        if callable(model_dump) and not isinstance(value, type):
            # Pydantic models, including every BaseMessage, Document and LLMResult. serialize_as_any: a field
            # typed BaseMessage holding an AIMessage must keep its tool_calls.
            try:
                dumped = model_dump(warnings=False, serialize_as_any=True)
            except TypeError:  # not pydantic v2's signature
                dumped = model_dump()
            return to_jsonable(dumped, _depth + 1)
        to_dict = getattr(value, "to_dict", None)
        if callable(to_dict) and not isinstance(value, type):
            return to_jsonable(to_dict(), _depth + 1)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            return {"__type__": type(value).__name__, **to_jsonable(fields, _depth + 1)}
    except Exception:
        pass
    return _safe_repr(value)


# --------------------------------------------------------------------------- bounded payloads


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TraceLimits:
    """How much of a run's inputs and outputs a trace keeps.

    A LangGraph node's run stores the whole graph state, so a trace of a long-horizon episode grows
    with the square of its length; node runs (chain runs below the root) keep the first
    ``head_items`` and last ``tail_items`` entries of every list longer than their sum (a marker says
    how many were left out). Every string is cut to ``max_string_chars``. The root run (the
    episode's input and final state) and LLM runs (the exact prompt) keep every list entry.
    ``TraceLimits.unbounded()`` keeps everything, as stored before these limits existed.
    """

    head_items: int = 2
    """List entries kept from the start in node runs (the system prompt and the task)."""
    tail_items: int = 6
    """List entries kept from the end in node runs (the latest turns)."""
    max_string_chars: int = 20_000
    """Longest string stored in any run (0: no limit)."""
    compact_logprobs: bool = True
    """Store each LLM call's logprobs once (:func:`compact_llm_outputs`)."""

    @classmethod
    def unbounded(cls) -> TraceLimits:
        return cls(head_items=0, tail_items=0, max_string_chars=0, compact_logprobs=False)

    @property
    def bounded_lists(self) -> bool:
        return self.head_items > 0 or self.tail_items > 0


_OMITTED_KEY = "__omitted__"
"""The marker a bounded list carries in place of the entries left out: ``{"__omitted__": n}``."""


_SAMPLING_KEYS = ("logprobs", "prompt_token_ids", "token_ids")
"""What a policy call's message carries in ``response_metadata`` and its own LLM run already stores."""


def bound_payload(
    value: Any, limits: TraceLimits, *, lists: bool = True, sampling: bool = True, _depth: int = 0
) -> Any:
    """``value`` with long lists shortened (``lists=True``) and long strings cut; a new object.

    ``sampling=False`` also drops the token ids and logprobs that earlier policy messages carry in
    their ``response_metadata`` (a prompt's history, a node's state): each call's own LLM run keeps them
    once. Other objects are left as they are, except messages holding those fields (a shallow copy).
    """
    if isinstance(value, str):
        cap = limits.max_string_chars
        if cap and len(value) > cap:
            return value[:cap] + f"... [{len(value) - cap} more chars]"
        return value
    if _depth >= _MAX_DEPTH:
        return value
    if isinstance(value, Mapping):
        out = {k: bound_payload(v, limits, lists=lists, sampling=sampling, _depth=_depth + 1) for k, v in value.items()}
        meta = out.get("response_metadata")
        if not sampling and isinstance(meta, Mapping) and any(k in meta for k in _SAMPLING_KEYS):
            out["response_metadata"] = {k: v for k, v in meta.items() if k not in _SAMPLING_KEYS}
        return out
    if isinstance(value, list | tuple):
        items = list(value)
        head, tail = limits.head_items, limits.tail_items
        if lists and limits.bounded_lists and len(items) > head + tail + 1:
            items = [*items[:head], {_OMITTED_KEY: len(items) - head - tail}, *(items[-tail:] if tail else [])]
        return [bound_payload(v, limits, lists=lists, sampling=sampling, _depth=_depth + 1) for v in items]
    if not sampling:
        meta = getattr(value, "response_metadata", None)
        if isinstance(meta, Mapping) and any(k in meta for k in _SAMPLING_KEYS) and hasattr(value, "model_copy"):
            try:
                return value.model_copy(update={"response_metadata": {k: v for k, v in meta.items()
                                                                      if k not in _SAMPLING_KEYS}})  # fmt: skip
            except Exception:
                return value
    return value


def compact_llm_outputs(outputs: Any) -> Any:
    """An LLM run's outputs with each generation's logprobs stored once.

    ``ChatOpenAI`` puts the sampled logprobs both in ``generation_info`` and in the message's
    ``response_metadata`` (and each entry carries the token's UTF-8 ``bytes``): the copy in
    ``generation_info`` is dropped when the message has it, and ``bytes`` (the token text says the
    same) and empty ``top_logprobs`` go. Returns a new object; anything unexpected is left as is.
    """
    if not isinstance(outputs, Mapping) or not isinstance(outputs.get("generations"), list):
        return outputs
    out = dict(outputs)
    out["generations"] = [
        [_compact_generation(g) for g in batch] if isinstance(batch, list) else batch
        for batch in outputs["generations"]
    ]
    return out


def _compact_generation(generation: Any) -> Any:
    if not isinstance(generation, Mapping):
        return generation
    out = dict(generation)
    message = out.get("message")
    meta_holder: dict[str, Any] | None = None
    if isinstance(message, Mapping):
        message = dict(message)
        # LangSmith's serializer nests a message's fields under "kwargs"; to_jsonable keeps them at the top.
        if isinstance(message.get("kwargs"), Mapping):
            message["kwargs"] = meta_holder = dict(message["kwargs"])
        else:
            meta_holder = message
        out["message"] = message
    kept_in_message = False
    if meta_holder is not None and isinstance(meta_holder.get("response_metadata"), Mapping):
        meta = dict(meta_holder["response_metadata"])
        if isinstance(meta.get("logprobs"), Mapping):
            meta["logprobs"] = _compact_logprobs(meta["logprobs"])
            kept_in_message = True
        meta_holder["response_metadata"] = meta
    info = out.get("generation_info")
    if isinstance(info, Mapping) and "logprobs" in info:
        info = dict(info)
        if kept_in_message:
            del info["logprobs"]
        elif isinstance(info["logprobs"], Mapping):
            info["logprobs"] = _compact_logprobs(info["logprobs"])
        out["generation_info"] = info
    return out


def _compact_logprobs(logprobs: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(logprobs)
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = [
            {k: v for k, v in e.items() if k != "bytes" and not (k == "top_logprobs" and not v)}
            if isinstance(e, Mapping)
            else e
            for e in content
        ]
    return out


def shrink_run(run: dict[str, Any], limits: TraceLimits) -> dict[str, Any]:
    """A finished run (plain JSON) as stored: node runs bounded, strings capped, token ids and logprobs once."""
    node = run.get("run_type") == "chain" and run.get("parent_run_id") is not None
    llm = run.get("run_type") == "llm"
    out = dict(run)
    for key in ("inputs", "outputs"):
        value = out.get(key)
        own = key == "outputs" and llm  # the call's own sampling record: kept (logprobs once)
        if own and limits.compact_logprobs:
            value = compact_llm_outputs(value)
        out[key] = bound_payload(value, limits, lists=node, sampling=own or not limits.compact_logprobs)
    return out

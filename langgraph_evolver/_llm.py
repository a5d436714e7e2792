"""What every LLM role (the judges, the experience extractor, the task synthesizer) shares: one
bounded, retried conversation with a chat model, the settings that shape it, and small helpers.

``LLMSettings`` holds a role's retry, concurrency, timeout and token-price settings; every role
takes one as ``settings=`` (and still takes the single keywords, which override it), and
``LLMRole`` gives the role the settings' attributes, its per-loop concurrency bound and ``_ask_model``.

``ask_with_retries`` asks, parses the answer, and on an unreadable answer follows up with a
message saying what was missing; exceptions and timeouts are retried too. Every retry waits
``backoff_s * 2**k`` seconds (capped at ``max_backoff_s``); calls hold a per-event-loop semaphore
(``LoopSemaphores``), so one role's concurrency bound spans all its callers on a loop. Token
usage, attempts and the time spent queued are added to a ``CallTally``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import re
import time
import weakref
from collections.abc import Callable, Coroutine, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from .errors import ConfigError

__all__ = [
    "UNSET",
    "LLMKeywords",
    "CallTally",
    "LLMRole",
    "LLMSettings",
    "VerdictTally",
    "JsonlCache",
    "LoopSemaphores",
    "ask_with_retries",
    "ask_with_settings",
    "check_template",
    "init_model",
    "json_values",
    "make_cache",
    "message_text",
    "model_id",
    "resolve_settings",
    "run_sync",
    "strip_think",
    "usage_of",
]

T = TypeVar("T")


def check_template(name: str, template: str, fields: tuple[str, ...]) -> None:
    """Raise ``ConfigError`` unless ``template`` formats with exactly ``fields``."""
    try:
        template.format(**{f: f"<{f}>" for f in fields})
    except (KeyError, IndexError, ValueError) as e:
        raise ConfigError(
            f"{name} is not a valid template ({type(e).__name__}: {e}); it may use only the fields "
            f"{', '.join('{' + f + '}' for f in fields)}, and literal braces must be doubled."
        ) from None


@dataclass(slots=True, kw_only=True)
class VerdictTally:
    """Running totals every LLM judge keeps (mutable: the judge adds each verdict it returns).

    A verdict is anything with ``attempts``, ``cached``, ``fallback``, ``input_tokens`` and
    ``output_tokens``; the judges' own stats add what only they count.
    """

    model_calls: int = 0
    cache_hits: int = 0
    fallbacks: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, verdict: Any) -> None:
        self.model_calls += verdict.attempts
        self.cache_hits += verdict.cached
        self.fallbacks += verdict.fallback
        self.input_tokens += verdict.input_tokens
        self.output_tokens += verdict.output_tokens

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def init_model(spec: str, *, role: str, accepted: str, **model_kwargs: Any) -> Any:
    """``init_chat_model(spec, **model_kwargs)`` for an LLM role; an empty spec or a model that
    cannot be built is a ``ConfigError`` naming the role, the cause and ``accepted`` (what to pass)."""
    name = spec.strip()
    if not name:
        raise ConfigError(f"The {role} model is an empty string. {accepted}")
    try:
        from langchain.chat_models import init_chat_model

        return init_chat_model(name, **model_kwargs)
    except Exception as e:
        raise ConfigError(
            f"Cannot build the {role} model {name!r}: {type(e).__name__}: {str(e).splitlines()[0]}. {accepted}"
        ) from e


_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)


def strip_think(text: str | None) -> str:
    """``text`` without its ``<think>…</think>`` blocks (reasoning models write them before the answer)."""
    return _THINK.sub("", text or "")


def json_values(text: str | None) -> list[Any]:
    """Every JSON value found in a model's answer: fenced blocks first, then the outermost ``[...]`` and ``{...}``.

    ``<think>`` blocks are dropped first; candidates that do not parse are skipped.
    """
    text = strip_think(text)
    candidates = [m.group(1) for m in _FENCED.finditer(text)]
    for opener, closer in (("[", "]"), ("{", "}")):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    values = []
    for candidate in candidates:
        try:
            values.append(json.loads(candidate))
        except (json.JSONDecodeError, TypeError):
            continue
    return values


def model_id(model: Any) -> str:
    """A short name for a chat model (its model name, else its type)."""
    for attr in ("model_name", "model", "model_id", "deployment_name"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return value
    default = getattr(model, "_default_config", None)  # init_chat_model(..., configurable_fields=...)
    if isinstance(default, dict) and isinstance(default.get("model"), str):
        return default["model"]
    return str(getattr(model, "_llm_type", type(model).__name__))


def usage_of(message: Any) -> tuple[int, int]:
    """(input tokens, output tokens) of a model reply."""
    usage = getattr(message, "usage_metadata", None)
    if usage:
        return int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
    token_usage = (getattr(message, "response_metadata", None) or {}).get("token_usage") or {}
    return int(token_usage.get("prompt_tokens") or 0), int(token_usage.get("completion_tokens") or 0)


def message_text(message: Any) -> str:
    if isinstance(message, BaseMessage):
        return message.text
    return str(message)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from sync code, also when an event loop already runs here."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


class JsonlCache(dict):
    """A dict that appends every new entry to a JSONL file and loads the file on creation.

    Each line is ``{"key": ..., <field>: value}``; a torn last line (an interrupted run) is skipped.
    """

    def __init__(self, path: Path, field: str = "value") -> None:
        super().__init__()
        self.path, self.field = path, field
        if path.exists():
            with path.open(encoding="utf-8") as f:
                for line in f:
                    try:
                        entry = json.loads(line)
                        super().__setitem__(entry["key"], entry[field])
                    except (json.JSONDecodeError, KeyError, TypeError):
                        continue
        path.parent.mkdir(parents=True, exist_ok=True)

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"key": key, self.field: value}, ensure_ascii=False) + "\n")


def make_cache(cache: Any, *, field: str = "value") -> MutableMapping[str, Any] | None:
    """``True``: an in-memory dict; ``None``/``False``: no cache; a path: a ``JsonlCache``; a mapping: itself."""
    if cache is True:
        return {}
    if cache is None or cache is False:
        return None
    if isinstance(cache, str | Path):
        return JsonlCache(Path(cache), field)
    if isinstance(cache, MutableMapping):
        return cache
    raise ConfigError(f"cache must be True, False/None, a dict or a file path; got {type(cache).__name__}.")


class LoopSemaphores:
    """One ``asyncio.Semaphore(limit)`` per running event loop (a semaphore is bound to its loop)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._by_loop.get(loop)
        if sem is None:
            sem = self._by_loop[loop] = asyncio.Semaphore(self.limit)
        return sem


@dataclass(slots=True)
class CallTally:
    """Running totals of the model calls made for one answer (possibly several conversations)."""

    attempts: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    waited_s: float = 0.0
    """Time spent queued on the concurrency bound (excluded from latencies)."""

    def cost(self, price_per_1k_input: float, price_per_1k_output: float) -> float:
        return self.input_tokens / 1000 * price_per_1k_input + self.output_tokens / 1000 * price_per_1k_output


async def ask_with_retries(
    model: Any,
    prompt: str,
    *,
    parse: Callable[[str], T | None],
    retry_message: Callable[[str], str],
    problem_of: Callable[[str], str],
    max_retries: int,
    backoff_s: float,
    max_backoff_s: float,
    timeout_s: float | None,
    semaphores: LoopSemaphores,
    tally: CallTally,
) -> tuple[T | None, str]:
    """One conversation: ask, ``parse`` the answer, retry an unreadable one or an error.

    Returns ``(parsed, "")``, or ``(None, why)`` when ``max_retries`` retries did not give a
    readable answer (``why`` is ``problem_of(text)`` of the last answer, or the last exception).
    """
    messages: list[BaseMessage] = [HumanMessage(prompt)]
    problem = ""
    for attempt in range(max_retries + 1):
        if attempt:
            await asyncio.sleep(min(backoff_s * 2 ** (attempt - 1), max_backoff_s))
        queued = time.perf_counter()
        async with semaphores.get():
            tally.waited_s += time.perf_counter() - queued
            tally.attempts += 1
            try:
                reply = await asyncio.wait_for(model.ainvoke(messages), timeout_s)
            except Exception as e:  # retried: rate limits, timeouts, server errors
                problem = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                continue
        got_in, got_out = usage_of(reply)
        tally.input_tokens += got_in
        tally.output_tokens += got_out
        text = message_text(reply)
        parsed = parse(text)
        if parsed is not None:
            return parsed, ""
        problem = problem_of(text)
        messages = [*messages, AIMessage(text), HumanMessage(retry_message(text))]
    return None, problem


class _Unset:
    """The default of a role's old single keywords: "not given", so ``settings`` decides."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMSettings:
    """How an LLM role talks to its model: retries, concurrency, timeout and token prices.

    Every LLM role (``LLMJudge``, ``ReferenceAwareJudge``, ``LLMExtractor``, ``LLMSynthesizer``,
    ``arefine_profile``) takes one as ``settings=``. Each role has its own defaults (its
    ``DEFAULT_SETTINGS``); the role's single keywords (``max_retries=``, ...) still work and
    override the matching field.

    Example:
        >>> fast = LLMSettings(max_retries=1, timeout_s=None)
        >>> fast.replace(max_concurrency=2).max_concurrency, fast.max_retries
        (2, 1)
        >>> LLMSettings(max_concurrency=0)
        Traceback (most recent call last):
        ...
        langgraph_evolver.errors.ConfigError: max_concurrency must be >= 1, got 0.
    """

    max_concurrency: int = 8
    """Most model calls in flight at once for the role (per event loop, across all its callers)."""
    max_retries: int = 3
    """Extra attempts after the first when an answer is unreadable or the call fails."""
    backoff_s: float = 1.0
    """Wait before the first retry; doubled for each further retry."""
    max_backoff_s: float = 30.0
    """Cap on one wait."""
    timeout_s: float | None = 60.0
    """Per-call timeout in seconds (``None``: none)."""
    price_per_1k_input: float = 0.0
    """Dollars per 1,000 input tokens, for the roles that report ``cost_usd``."""
    price_per_1k_output: float = 0.0
    """Dollars per 1,000 output tokens."""

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1, got {self.max_concurrency}.")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}.")
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ConfigError(
                f"backoff_s and max_backoff_s must be >= 0, got {self.backoff_s} and {self.max_backoff_s}."
            )
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ConfigError(f"timeout_s must be > 0 or None, got {self.timeout_s}.")
        if self.price_per_1k_input < 0 or self.price_per_1k_output < 0:
            raise ConfigError("Token prices must be >= 0.")

    def replace(self, **changes: Any) -> LLMSettings:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def cost(self, tally: CallTally) -> float:
        """Dollars spent on the tokens counted in ``tally``."""
        return tally.cost(self.price_per_1k_input, self.price_per_1k_output)


class LLMKeywords(TypedDict, total=False):
    """The ``LLMSettings`` fields every LLM role also takes one by one (``LLMJudge(model, max_retries=1)``).

    The roles take them as ``**llm: Unpack[LLMKeywords]`` and hand them to ``LLMRole._use_settings``: one
    list of the keywords, next to ``LLMSettings``, instead of a copy in each role's signature.
    """

    max_concurrency: int
    max_retries: int
    backoff_s: float
    max_backoff_s: float
    timeout_s: float | None
    price_per_1k_input: float
    price_per_1k_output: float


SETTINGS_KEYWORDS = tuple(LLMKeywords.__annotations__)
"""The names of ``LLMKeywords``, in order."""


def resolve_settings(settings: LLMSettings | None, defaults: LLMSettings, /, **keywords: Any) -> LLMSettings:
    """``settings`` (else the role's ``defaults``) with every keyword that was given applied on top.

    Example:
        >>> resolve_settings(None, LLMSettings(max_retries=2), max_retries=UNSET, timeout_s=None).timeout_s is None
        True
    """
    if settings is not None and not isinstance(settings, LLMSettings):
        raise ConfigError(f"settings must be an LLMSettings, got a {type(settings).__name__}.")
    base = settings if settings is not None else defaults
    given = {name: value for name, value in keywords.items() if value is not UNSET}
    return base.replace(**given) if given else base


class LLMRole:
    """What an LLM role holds: its model, its ``settings``, a concurrency bound and ``_ask_model``.

    A role calls ``self._use_settings(...)`` in its ``__init__``; ``max_concurrency``,
    ``max_retries``, ``backoff_s``, ``max_backoff_s``, ``timeout_s`` and the prices read through
    to ``settings``.
    """

    model: Any
    settings: LLMSettings
    _semaphores: LoopSemaphores
    DEFAULT_SETTINGS = LLMSettings()

    def _use_settings(self, settings: LLMSettings | None, /, **keywords: Any) -> None:
        """``self.settings``: ``settings`` (else the role's ``DEFAULT_SETTINGS``) with the ``LLMKeywords`` given.

        A keyword that is no ``LLMSettings`` field is refused as Python refuses an unknown argument
        (``TypeError``), naming the ones there are.
        """
        unknown = sorted(set(keywords) - set(SETTINGS_KEYWORDS))
        if unknown:
            raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {unknown[0]!r} (its LLM "
                            f"settings keywords are {', '.join(SETTINGS_KEYWORDS)}; see help({type(self).__name__}) "
                            "for the rest)")  # fmt: skip
        self.settings = resolve_settings(settings, self.DEFAULT_SETTINGS, **keywords)
        self._semaphores = LoopSemaphores(self.settings.max_concurrency)

    @property
    def max_concurrency(self) -> int:
        return self.settings.max_concurrency

    @property
    def max_retries(self) -> int:
        return self.settings.max_retries

    @property
    def backoff_s(self) -> float:
        return self.settings.backoff_s

    @property
    def max_backoff_s(self) -> float:
        return self.settings.max_backoff_s

    @property
    def timeout_s(self) -> float | None:
        return self.settings.timeout_s

    @property
    def price_per_1k_input(self) -> float:
        return self.settings.price_per_1k_input

    @property
    def price_per_1k_output(self) -> float:
        return self.settings.price_per_1k_output

    async def _ask_model(
        self,
        prompt: str,
        *,
        parse: Callable[[str], T | None],
        retry_message: Callable[[str], str],
        problem_of: Callable[[str], str],
        tally: CallTally,
    ) -> tuple[T | None, str]:
        """``ask_with_retries`` with this role's model, settings and concurrency bound."""
        return await ask_with_settings(self.model, prompt, self.settings, parse=parse, retry_message=retry_message,
                                       problem_of=problem_of, semaphores=self._semaphores, tally=tally)  # fmt: skip


async def ask_with_settings(
    model: Any,
    prompt: str,
    settings: LLMSettings,
    *,
    parse: Callable[[str], T | None],
    retry_message: Callable[[str], str],
    problem_of: Callable[[str], str],
    semaphores: LoopSemaphores,
    tally: CallTally,
) -> tuple[T | None, str]:
    """``ask_with_retries`` with the retry and timeout fields of ``settings``."""
    return await ask_with_retries(
        model, prompt, parse=parse, retry_message=retry_message, problem_of=problem_of,
        max_retries=settings.max_retries, backoff_s=settings.backoff_s, max_backoff_s=settings.max_backoff_s,
        timeout_s=settings.timeout_s, semaphores=semaphores, tally=tally,
    )  # fmt: skip

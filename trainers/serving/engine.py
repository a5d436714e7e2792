"""The batched sampling engine behind ``trainers.policy_server`` (model code only, no HTTP).

``PolicyEngine`` owns a Hugging Face causal LM, its tokenizer and any runtime LoRA adapters, and
knows how to prefill prompts and decode one token for a batch of rows with a KV cache.
``BatchScheduler`` runs it on one worker thread: requests queue up, and between two decode steps
the worker admits every queued request for the same model into the running batch (continuous
batching at token boundaries), up to ``max_batch_size`` rows. Finished rows leave the batch at
once, and cache columns that only padding still uses are trimmed, so short answers stop costing
compute.

Sampling is pure temperature / top-p: there is no top-k anywhere (``generate``'s default
``top_k=50`` would make RL samples off-policy). The logprob reported for a token is the one of
the distribution it was drawn from ("processed" logprobs in vLLM's terms): log-softmax of
``logits / T``, renormalised over the top-p nucleus, floored at -9999.0. Greedy rows
(``T == 0``) report the log-softmax of the raw logits.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from langgraph_evolver.errors import EvolverError

__all__ = [
    "LOGPROB_FLOOR",
    "BatchScheduler",
    "Completion",
    "GenerationError",
    "PolicyEngine",
    "SamplingParams",
    "SchedulerStats",
    "UnknownModelError",
]

logger = logging.getLogger("trainers.policy_server")

LOGPROB_FLOOR = -9999.0
"""vLLM's floor for reported logprobs (``-inf`` cannot travel as JSON)."""

_STOP_WINDOW_MARGIN = 8
"""Tokens (and characters) beyond the longest stop string that the stop check decodes."""


class GenerationError(EvolverError, ValueError):
    """A generation or adapter request the engine cannot serve (HTTP 400 unless overridden)."""

    status_code = 400


class UnknownModelError(GenerationError):
    """The requested model/adapter name or adapter path does not exist (HTTP 404)."""

    status_code = 404


class _WorkerStoppedError(GenerationError):
    """The worker thread died; no request can be served until the server restarts (HTTP 503)."""

    status_code = 503


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams:
    """How one row is sampled and when it stops."""

    temperature: float = 1.0
    """0 = greedy; otherwise logits are divided by it before the softmax."""
    top_p: float = 1.0
    """Nucleus mass kept (1.0 = the full distribution)."""
    max_tokens: int = 16
    """Completion tokens at most (the EOS token counts)."""
    seed: int | None = None
    """Seeds this row's own generator; ``None`` draws from the engine's generator."""
    top_logprobs: int = 0
    """How many most likely alternatives to report per position."""
    stop: tuple[str, ...] = ()
    """Stop strings, checked on the decoded completion."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra token ids that end the row (kept in the ids, like EOS)."""
    ignore_eos: bool = False
    """Keep generating past EOS (benchmarks)."""
    skip_special_tokens: bool = True
    """How stop strings see the text (same as the response's decoding)."""

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise GenerationError(f"temperature must be >= 0, got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise GenerationError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.max_tokens < 1:
            raise GenerationError(f"max_tokens must be >= 1, got {self.max_tokens}.")
        if self.top_logprobs < 0:
            raise GenerationError(f"top_logprobs must be >= 0, got {self.top_logprobs}.")


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """One sampled sequence."""

    token_ids: tuple[int, ...]
    """Every sampled id, including the EOS / stop token that ended the row."""
    logprobs: tuple[float, ...]
    """Processed logprob of each id (one per id)."""
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] | None
    """Per position, the ``top_logprobs`` most likely ``(id, logprob)`` pairs; None if not asked."""
    finish_reason: Literal["stop", "length"]
    stop_reason: int | str | None = None
    """The stop token id or stop string that ended the row (None for EOS or length)."""


@dataclass(slots=True, kw_only=True)
class SchedulerStats:
    """Counters of the worker (read them for tests and benchmarks)."""

    requests: int = 0
    rows: int = 0
    batches: int = 0
    """Runs of the batch from empty to empty."""
    prefills: int = 0
    """Admission forwards (each admits every queued request that fits)."""
    decode_steps: int = 0
    max_running_rows: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(slots=True, eq=False)
class _Request:
    prompt_ids: list[int]
    params: list[SamplingParams]
    model: str
    future: Future
    rows: list[_Row] = field(default_factory=list)
    remaining: int = 0


@dataclass(slots=True, eq=False)
class _Row:
    request: _Request | None
    prompt_ids: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[tuple[tuple[int, float], ...]] = field(default_factory=list)
    finish_reason: Literal["stop", "length"] | None = None
    stop_reason: int | str | None = None

    def completion(self) -> Completion:
        return Completion(
            token_ids=tuple(self.token_ids),
            logprobs=tuple(self.logprobs),
            top_logprobs=tuple(self.top) if self.params.top_logprobs else None,
            finish_reason=self.finish_reason or "length",
            stop_reason=self.stop_reason,
        )


@dataclass(slots=True)
class _RunLog:
    """What one run of the batch (from empty to empty) did, for its debug log line."""

    start: float = 0.0
    requests: int = 0
    rows: int = 0
    steps: int = 0
    tokens: int = 0


@dataclass(slots=True, eq=False)
class _Batch:
    """Rows decoding together: their KV cache, its padding mask and each row's next input token."""

    model: str
    rows: list[_Row]
    cache: Any
    mask: torch.Tensor
    """[rows, cache columns]; 1 where a column holds a real token of that row."""
    next_tokens: torch.Tensor
    """[rows] the last sampled token of each row, fed at the next decode step."""


class PolicyEngine:
    """A causal LM + tokenizer + runtime LoRA adapters, stepped one token at a time for a batch.

    Args:
        model_path: a directory written by ``save_pretrained`` (model and tokenizer).
        served_model_name: the name clients use as ``model``; default the directory's name.
        seed: seeds the generator of rows that do not bring their own seed.
    """

    def __init__(self, model_path: str | Path, *, served_model_name: str | None = None, seed: int = 0) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.cache_utils import DynamicCache, DynamicLayer

        path = Path(model_path)
        if not path.is_dir():
            raise UnknownModelError(f"Model directory {str(path)!r} does not exist; pass a save_pretrained directory.")
        self.model_path = str(path.resolve())
        self.served_model_name = served_model_name or path.resolve().name
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch.float32)
        self.model.eval()
        self.config = self.model.config.get_text_config()
        self.max_model_len = int(getattr(self.config, "max_position_embeddings", 0) or 1 << 20)
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(self.tokenizer.eos_token_id)
        self.eos_token_ids = frozenset(int(i) for i in eos_ids)
        self.adapters: dict[str, str] = {}
        self.created = int(time.time())
        self._generator = torch.Generator().manual_seed(seed)
        self._active: str | None = None
        self._cache_cls = DynamicCache
        # Joining rows into a running batch edits the cache tensors; only plain layers allow it.
        probe = DynamicCache(config=self.model.config)
        self.can_join = all(type(layer) is DynamicLayer for layer in probe.layers)
        self.num_parameters = sum(p.numel() for p in self.model.parameters())

    # -- models and adapters ---------------------------------------------------------------
    def model_names(self) -> list[str]:
        return [self.served_model_name, *self.adapters]

    def check_model(self, name: str | None) -> str:
        """The name to serve ``name`` with (None = the base model); 404 when it is unknown."""
        if name is None or name == self.served_model_name:
            return self.served_model_name
        if name in self.adapters:
            return name
        raise UnknownModelError(f"The model `{name}` does not exist. Available: {', '.join(self.model_names())}.")

    def load_adapter(self, name: str, path: str, *, replace: bool = False) -> None:
        """Load a PEFT LoRA adapter saved at ``path`` under ``name`` (call between batches)."""
        if not name:
            raise GenerationError("lora_name must be a non-empty string.")
        if name == self.served_model_name:
            raise GenerationError(f"lora_name {name!r} is the base model's name; pick another name.")
        if name in self.adapters and not replace:
            raise GenerationError(f"The lora adapter '{name}' has already been loaded.")
        adapter_dir = Path(path)
        if not (adapter_dir / "adapter_config.json").is_file():
            raise UnknownModelError(f"No adapter found for {path!r}: expected a directory with adapter_config.json.")
        if name in self.adapters:
            self.unload_adapter(name)
        from transformers.utils import logging as hf_logging

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the load report lists other adapters' keys as "missing"
        self._active = None
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*multiple adapters.*")
                self.model.load_adapter(str(adapter_dir), adapter_name=name)
        except Exception as e:
            self._drop_partial_adapter(name)
            raise GenerationError(f"Could not load the LoRA adapter {name!r} from {path!r}: {e}") from e
        finally:
            hf_logging.set_verbosity(verbosity)
        self.adapters[name] = str(adapter_dir.resolve())

    def _drop_partial_adapter(self, name: str) -> None:
        try:
            if name in getattr(self.model, "peft_config", {}):
                self.model.delete_adapter(name)
        except Exception:  # best-effort cleanup after a failed load
            logger.exception("cleanup of the failed adapter %s failed", name)

    def unload_adapter(self, name: str) -> None:
        if name not in self.adapters:
            raise UnknownModelError(f"The lora adapter '{name}' cannot be found.")
        self._active = None
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*was active which is now deleted.*")
            self.model.delete_adapter(name)
        del self.adapters[name]

    def _activate(self, name: str) -> None:
        if name == self._active:
            return
        if name == self.served_model_name:
            if self.adapters:
                self.model.disable_adapters()
        else:
            if name not in self.adapters:
                raise UnknownModelError(f"The model `{name}` does not exist (was its adapter unloaded?).")
            self.model.enable_adapters()
            self.model.set_adapter(name)
        self._active = name

    # -- one batch ---------------------------------------------------------------------------
    def new_row(self, prompt_ids: Sequence[int], params: SamplingParams, index: int = 0) -> _Row:
        generator = None
        if params.seed is not None and params.temperature > 0:
            generator = torch.Generator().manual_seed((params.seed * 1_000_003 + index) % (1 << 63))
        return _Row(request=None, prompt_ids=list(prompt_ids), params=params, generator=generator)

    def prefill(self, rows: list[_Row], model: str) -> tuple[_Batch | None, list[_Row]]:
        """Run the prompts of ``rows`` and sample their first token.

        Returns the batch of rows still running (None if every row finished) and the finished rows.
        """
        self._activate(model)
        width = max(len(r.prompt_ids) for r in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):  # left padding: every row's next token goes in the last column
            ids[i, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids, dtype=torch.long)
            mask[i, width - len(r.prompt_ids) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = self._cache_cls(config=self.model.config)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        batch = _Batch(model=model, rows=rows, cache=cache, mask=mask, next_tokens=torch.zeros(0, dtype=torch.long))
        return self._advance(batch, out.logits[:, -1, :])

    def decode(self, batch: _Batch) -> tuple[_Batch | None, list[_Row]]:
        """Feed each row's last token, sample the next one; returns the running batch and finished rows."""
        self._activate(batch.model)
        positions = batch.mask.sum(-1, keepdim=True)
        batch.mask = torch.cat([batch.mask, torch.ones((len(batch.rows), 1), dtype=torch.long)], dim=1)
        out = self.model(
            input_ids=batch.next_tokens[:, None],
            attention_mask=batch.mask,
            position_ids=positions,
            past_key_values=batch.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return self._advance(batch, out.logits[:, -1, :])

    def join(self, running: _Batch | None, new: _Batch | None) -> _Batch | None:
        """One batch holding the rows of both (their caches left-padded to a common width)."""
        if running is None or new is None:
            return running or new
        width = max(running.mask.shape[1], new.mask.shape[1])

        def left_pad(t: torch.Tensor, dim: int) -> torch.Tensor:
            missing = width - t.shape[dim]
            if missing == 0:
                return t
            shape = list(t.shape)
            shape[dim] = missing
            return torch.cat([t.new_zeros(shape), t], dim=dim)

        for a, b in zip(running.cache.layers, new.cache.layers, strict=True):
            a.keys = torch.cat([left_pad(a.keys, -2), left_pad(b.keys, -2)], dim=0)
            a.values = torch.cat([left_pad(a.values, -2), left_pad(b.values, -2)], dim=0)
        running.mask = torch.cat([left_pad(running.mask, 1), left_pad(new.mask, 1)], dim=0)
        running.next_tokens = torch.cat([running.next_tokens, new.next_tokens])
        running.rows = running.rows + new.rows
        return running

    def generate(
        self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams], *, model: str | None = None
    ) -> list[Completion]:
        """Sample one completion per prompt as one batch, synchronously (no scheduler, no HTTP)."""
        name = self.check_model(model)
        rows = [self.new_row(p, sp, i) for i, (p, sp) in enumerate(zip(prompts, params, strict=True))]
        with torch.inference_mode():
            batch, _ = self.prefill(rows, name)
            while batch is not None:
                batch, _ = self.decode(batch)
        return [r.completion() for r in rows]

    # -- sampling ------------------------------------------------------------------------------
    def _advance(self, batch: _Batch, logits: torch.Tensor) -> tuple[_Batch | None, list[_Row]]:
        rows = batch.rows
        tokens, chosen, top = self._sample(logits.float(), rows)
        keep: list[int] = []
        finished: list[_Row] = []
        for i, (r, tid, logprob) in enumerate(zip(rows, tokens.tolist(), chosen.tolist(), strict=True)):
            r.token_ids.append(tid)
            r.logprobs.append(logprob)
            if top is not None and r.params.top_logprobs:
                ids, vals = top
                k = r.params.top_logprobs
                r.top.append(tuple(zip(ids[i][:k], vals[i][:k], strict=True)))
            self._check_stop(r, tid)
            if r.finish_reason:
                finished.append(r)
            else:
                keep.append(i)
        batch.next_tokens = tokens
        return self.select(batch, keep), finished

    def select(self, batch: _Batch, keep: Sequence[int]) -> _Batch | None:
        """Keep only the rows at ``keep`` (None when no row is left); frees their cache columns."""
        if not keep:
            return None
        if len(keep) == len(batch.rows):
            return batch
        index = torch.tensor(keep, dtype=torch.long)
        batch.cache.batch_select_indices(index)
        batch.mask = batch.mask[index]
        batch.next_tokens = batch.next_tokens[index]
        batch.rows = [batch.rows[i] for i in keep]
        self._trim(batch)
        return batch

    def _trim(self, batch: _Batch) -> None:
        """Drop leading cache columns that are padding for every remaining row."""
        if not self.can_join:
            return
        used = batch.mask.any(dim=0).nonzero()
        first = int(used[0]) if len(used) else 0
        if first == 0:
            return
        batch.mask = batch.mask[:, first:]
        for layer in batch.cache.layers:
            layer.keys = layer.keys[..., first:, :]
            layer.values = layer.values[..., first:, :]

    def _check_stop(self, r: _Row, tid: int) -> None:
        p = r.params
        if tid in self.eos_token_ids and not p.ignore_eos:
            r.finish_reason = "stop"
        elif tid in p.stop_token_ids:
            r.finish_reason, r.stop_reason = "stop", tid
        elif p.stop and (hit := self._stop_string(r)) is not None:
            r.finish_reason, r.stop_reason = "stop", hit
        elif len(r.token_ids) >= p.max_tokens or len(r.prompt_ids) + len(r.token_ids) >= self.max_model_len:
            r.finish_reason = "length"

    def _stop_string(self, r: _Row) -> str | None:
        """The stop string that the completion now contains, if any.

        Only a tail of the completion is decoded, so a check costs O(1) instead of O(length): it runs after every
        token, so a stop string not found before must end in the newest token and lie within the last
        ``len(stop)`` characters or so.
        """
        longest = max(len(s) for s in r.params.stop)
        window = longest + _STOP_WINDOW_MARGIN
        while True:
            tail = r.token_ids[-window:]
            text = self.tokenizer.decode(
                tail, skip_special_tokens=r.params.skip_special_tokens, clean_up_tokenization_spaces=False
            )
            # Tokens that decode to no whole character (skipped special tokens, pieces of one UTF-8 character)
            # can leave the tail shorter than a stop string: widen it until the text is long enough.
            if len(tail) == len(r.token_ids) or len(text) >= longest + _STOP_WINDOW_MARGIN:
                return next((s for s in r.params.stop if s and s in text), None)
            window *= 2

    def _sample(
        self, logits: torch.Tensor, rows: list[_Row]
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[list[list[int]], list[list[float]]] | None]:
        """Sampled ids, their processed logprobs and (if any row asks) the top alternatives."""
        temps = [r.params.temperature for r in rows]
        if all(t == 0 for t in temps):
            logp = torch.log_softmax(logits, dim=-1)
            tokens = logits.argmax(dim=-1)
        else:
            scale = torch.tensor([t if t > 0 else 1.0 for t in temps], dtype=logits.dtype)
            logp = torch.log_softmax(logits / scale[:, None], dim=-1)
            nucleus = [i for i, r in enumerate(rows) if r.params.temperature > 0 and r.params.top_p < 1]
            if nucleus:
                top_p = torch.tensor([rows[i].params.top_p for i in nucleus], dtype=logits.dtype)
                logp[nucleus] = _top_p_filter(logp[nucleus], top_p)
            tokens = logits.argmax(dim=-1)  # kept for greedy rows
            sampled = [i for i, t in enumerate(temps) if t > 0]
            if sampled:
                # One uniform per row (from the row's own generator when it has a seed), inverse CDF.
                uniform = torch.rand(len(sampled), generator=self._generator, dtype=torch.float64)
                for j, i in enumerate(sampled):
                    if rows[i].generator is not None:
                        uniform[j] = torch.rand(1, generator=rows[i].generator, dtype=torch.float64)[0]
                tokens[sampled] = _inverse_cdf(logp[sampled], uniform)
        chosen = logp.gather(1, tokens[:, None])[:, 0].clamp(min=LOGPROB_FLOOR)
        k = max(r.params.top_logprobs for r in rows)
        top = None
        if k:
            vals, ids = logp.topk(min(k, logp.shape[-1]), dim=-1)
            top = (ids.tolist(), vals.clamp(min=LOGPROB_FLOOR).tolist())
        return tokens, chosen, top


def _inverse_cdf(logp: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Draw one id per row of ``exp(logp)`` given one uniform in [0, 1) per row.

    Cheaper than ``torch.multinomial`` (one random number per row instead of one per vocabulary
    entry). Zero-probability ids are never drawn: the CDF does not rise at them.
    """
    cdf = logp.double().exp().cumsum(dim=-1)
    target = uniform[:, None] * cdf[:, -1:]
    return torch.searchsorted(cdf, target, right=True)[:, 0].clamp(max=logp.shape[-1] - 1)


def _top_p_filter(logp: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches ``top_p``; renormalise."""
    sorted_logp, order = logp.sort(dim=-1)  # ascending, as vLLM does
    cumulative = sorted_logp.exp().cumsum(dim=-1)
    drop = cumulative <= (1 - top_p)[:, None]
    drop[:, -1] = False  # always keep the most likely token
    sorted_logp = sorted_logp.masked_fill(drop, float("-inf"))
    filtered = torch.full_like(logp, float("-inf")).scatter(-1, order, sorted_logp)
    return torch.log_softmax(filtered, dim=-1)


class BatchScheduler:
    """A single worker thread that serves queued requests from one running batch.

    Between decode steps the worker admits every queued request for the batch's model that fits in
    ``max_batch_size`` rows (one prefill forward for all of them). Requests for another model wait
    until the running batch drains (one model/adapter per batch); control calls (adapter load and
    unload) also run only when no batch is running, so they never change weights under a request.
    """

    def __init__(self, engine: PolicyEngine, *, max_batch_size: int = 32) -> None:
        if max_batch_size < 1:
            raise GenerationError(f"max_batch_size must be >= 1, got {max_batch_size}.")
        self.engine = engine
        self.max_batch_size = max_batch_size
        self.stats = SchedulerStats()
        self._cv = threading.Condition()
        self._pending: deque[_Request] = deque()
        self._controls: deque[tuple[Callable[[], Any], Future]] = deque()
        self._closed = False
        self._failure: BaseException | None = None
        """What killed the worker thread (None while it runs or after a clean shutdown)."""
        self._thread = threading.Thread(target=self._run, name="policy-engine", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._closed

    def submit(
        self, prompt_ids: Sequence[int], params: Sequence[SamplingParams], *, model: str | None = None
    ) -> Future:
        """Queue one prompt with one ``SamplingParams`` per choice; the future gives a ``list[Completion]``."""
        if not params:
            raise GenerationError("A request needs at least one choice (n >= 1).")
        if len(params) > self.max_batch_size:
            raise GenerationError(f"n={len(params)} exceeds the server's max batch size {self.max_batch_size}.")
        if not prompt_ids:
            raise GenerationError("The prompt is empty.")
        name = self.engine.check_model(model)
        request = _Request(prompt_ids=list(prompt_ids), params=list(params), model=name, future=Future())
        with self._cv:
            self._check_open()
            self._pending.append(request)
            self._cv.notify()
        return request.future

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run ``fn`` on the worker thread when no batch is running (e.g. loading an adapter)."""
        future: Future = Future()
        with self._cv:
            self._check_open()
            self._controls.append((fn, future))
            self._cv.notify()
        return future

    def _check_open(self) -> None:
        """Refuse new work once the worker is gone (call with ``self._cv`` held)."""
        if self._closed and self._failure is None:
            raise GenerationError("The policy server is shutting down.")
        if self._failure is not None or not self._thread.is_alive():
            reason = f"{type(self._failure).__name__}: {self._failure}" if self._failure else "the thread exited"
            raise _WorkerStoppedError(f"the generation worker stopped: {reason}; restart the server")

    def close(self, timeout: float = 10.0) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout)

    # -- worker -------------------------------------------------------------------------------
    def _run(self) -> None:
        batch: _Batch | None = None
        admitted: list[_Request] = []
        run = _RunLog()
        try:
            while True:
                control, admitted, finished = None, [], []
                with self._cv:
                    while not self._closed and batch is None and not self._pending and not self._controls:
                        self._cv.wait()
                    if self._closed:
                        self._fail_all(batch, GenerationError("The policy server shut down."))
                        return
                    if self._controls and batch is None:
                        control = self._controls.popleft()
                    elif not self._controls:
                        admitted = self._admissible(batch)
                if control is not None:
                    fn, future = control
                    if future.set_running_or_notify_cancel():  # False: the caller went away, skip it
                        try:
                            future.set_result(fn())
                        except Exception as e:  # reported to the caller
                            future.set_exception(e)
                    continue
                if admitted:
                    if batch is None:
                        run = _RunLog(start=time.perf_counter())
                        self.stats.batches += 1
                    try:
                        with torch.inference_mode():
                            new, finished = self._prefill(admitted)
                    except Exception as e:  # only these requests fail; the running batch goes on
                        self._log_failure(e)
                        self._fail_all(None, e, admitted)
                        continue
                    run.requests += len(admitted)
                    run.rows += sum(len(r.rows) for r in admitted)
                elif batch is None:  # every queued request was cancelled before it started
                    continue
                try:
                    with torch.inference_mode():
                        if admitted:
                            batch = self.engine.join(batch, new)
                        elif batch is not None:
                            batch = self._drop_cancelled(batch)
                            if batch is not None:
                                batch, finished = self.engine.decode(batch)
                            self.stats.decode_steps += 1
                            run.steps += 1
                except Exception as e:  # a failing batch must not kill the server
                    self._log_failure(e)
                    self._fail_all(batch, e)
                    batch = None
                    continue
                self.stats.max_running_rows = max(self.stats.max_running_rows, len(batch.rows) if batch else 0)
                run.tokens += self._finish(finished)
                if batch is None:
                    elapsed = time.perf_counter() - run.start
                    logger.debug(
                        "batch done: %d requests, %d rows, %d decode steps, "
                        "%d completion tokens in %.3f s (%.0f tok/s)",
                        run.requests,
                        run.rows,
                        run.steps,
                        run.tokens,
                        elapsed,
                        run.tokens / max(elapsed, 1e-9),
                    )
        except BaseException as e:  # a bug in this loop: fail every caller rather than leave them waiting forever
            logger.exception("the generation worker stopped; failing every queued and running request")
            with self._cv:
                self._failure = e
                self._closed = True
                self._fail_all(batch, e, admitted)

    @staticmethod
    def _log_failure(e: Exception) -> None:
        if isinstance(e, GenerationError):
            logger.warning("generation failed: %s", e)
        else:
            logger.exception("generation failed; failing the requests of this batch")

    def _admissible(self, batch: _Batch | None) -> list[_Request]:
        """Pop the queued requests that join ``batch`` now (FIFO; stops at another model's request)."""
        if batch is not None and not self.engine.can_join:
            return []
        model = batch.model if batch is not None else (self._pending[0].model if self._pending else None)
        room = self.max_batch_size - (len(batch.rows) if batch is not None else 0)
        admitted = []
        while self._pending and self._pending[0].model == model and len(self._pending[0].params) <= room:
            request = self._pending.popleft()
            if request.future.cancelled():  # the caller went away before it started
                continue
            room -= len(request.params)
            admitted.append(request)
        return admitted

    def _prefill(self, admitted: list[_Request]) -> tuple[_Batch | None, list[_Row]]:
        model = admitted[0].model
        rows = []
        for request in admitted:
            request.rows = [self.engine.new_row(request.prompt_ids, p, i) for i, p in enumerate(request.params)]
            request.remaining = len(request.rows)
            for row in request.rows:
                row.request = request
            rows.extend(request.rows)
        self.stats.prefills += 1
        self.stats.requests += len(admitted)
        self.stats.rows += len(rows)
        self.stats.prompt_tokens += sum(len(r.prompt_ids) for r in admitted)
        logger.debug(
            "admit %d requests (%d rows, %d prompt tokens) for model %s",
            len(admitted),
            len(rows),
            sum(len(r.prompt_ids) for r in admitted),
            model,
        )
        return self.engine.prefill(rows, model)

    def _drop_cancelled(self, batch: _Batch) -> _Batch | None:
        """Stop decoding rows whose caller went away (their future was cancelled)."""
        keep = [i for i, r in enumerate(batch.rows) if r.request is None or not r.request.future.cancelled()]
        return self.engine.select(batch, keep)

    def _finish(self, finished: list[_Row]) -> int:
        tokens = 0
        for row in finished:
            tokens += len(row.token_ids)
            request = row.request
            assert request is not None
            request.remaining -= 1
            if request.remaining == 0 and request.future.set_running_or_notify_cancel():
                request.future.set_result([r.completion() for r in request.rows])
        self.stats.completion_tokens += tokens
        return tokens

    def _fail_all(self, batch: _Batch | None, error: BaseException, admitted: Sequence[_Request] = ()) -> None:
        requests = {id(r.request): r.request for r in (batch.rows if batch else []) if r.request is not None}
        requests.update({id(r): r for r in admitted})
        if self._closed:
            requests.update({id(r): r for r in self._pending})
            self._pending.clear()
            for _, future in self._controls:
                if not future.done() and future.set_running_or_notify_cancel():
                    future.set_exception(error)
            self._controls.clear()
        for request in requests.values():
            if not request.future.done() and request.future.set_running_or_notify_cancel():
                request.future.set_exception(error)

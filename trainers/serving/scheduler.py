"""One worker thread that serves queued requests from one running batch (continuous batching).

Requests queue up, and between two decode steps the worker admits every queued request for the
same model into the running batch (at token boundaries), up to ``max_batch_size`` rows. Requests
for another model wait until the running batch drains (one model/adapter per batch); control
calls (adapter and weight loads) also run only when no batch is running, so they never change
weights under a request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from .engine import PolicyEngine, _Batch, _Row
from .errors import GenerationError, WorkerStoppedError
from .sampling import SamplingParams

__all__ = ["BatchScheduler", "SchedulerStats", "prometheus_metrics"]

logger = logging.getLogger("trainers.policy_server")


UNHEALTHY_AFTER = 3
"""Unexpected generation failures in a row (no request finished between them) after which ``/health`` says 503."""


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
    prefill_s: float = 0.0
    """Seconds the worker spent in prefills (admissions and joins)."""
    decode_s: float = 0.0
    """Seconds the worker spent in decode steps."""
    failed_batches: int = 0
    """Prefills or batches that raised an unexpected error (their requests got HTTP 500)."""
    failures_in_a_row: int = 0
    """Unexpected failures since the last request that finished; ``/health`` reports 503 at ``UNHEALTHY_AFTER``."""
    last_error: str = ""
    """The last unexpected failure, as ``Type: message``."""


@dataclass(slots=True, eq=False)
class _Request:
    prompt_ids: list[int]
    params: list[SamplingParams]
    model: str
    future: Future
    rows: list[_Row] = field(default_factory=list)
    remaining: int = 0


@dataclass(slots=True)
class _RunLog:
    """What one run of the batch (from empty to empty) did, for its debug log line."""

    start: float = 0.0
    requests: int = 0
    rows: int = 0
    steps: int = 0
    tokens: int = 0


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
            raise WorkerStoppedError(f"the generation worker stopped: {reason}; restart the server")

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
                    started = time.perf_counter()
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
                else:
                    started = time.perf_counter()
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
                if admitted:
                    self.stats.prefill_s += time.perf_counter() - started
                else:
                    self.stats.decode_s += time.perf_counter() - started
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

    def _log_failure(self, e: Exception) -> None:
        if isinstance(e, GenerationError):
            logger.warning("generation failed: %s", e)
        else:
            logger.exception("generation failed; failing the requests of this batch")
            self.stats.failed_batches += 1
            self.stats.failures_in_a_row += 1
            self.stats.last_error = f"{type(e).__name__}: {e}"

    @property
    def failing(self) -> str | None:
        """The last error when generation failed ``UNHEALTHY_AFTER`` times in a row with no success since, else None."""
        if self.stats.failures_in_a_row >= UNHEALTHY_AFTER:
            return self.stats.last_error
        return None

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
        if finished:
            self.stats.failures_in_a_row = 0
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


def prometheus_metrics(engine: PolicyEngine, scheduler: BatchScheduler) -> str:
    """The counters of the worker, the prefills and the prefix cache in Prometheus' text format."""
    prefill, cache = engine.prefill_stats, engine.prefix_cache
    values: dict[str, tuple[str, float]] = {
        "requests_total": ("counter", scheduler.stats.requests),
        "prompt_tokens_total": ("counter", scheduler.stats.prompt_tokens),
        "generation_tokens_total": ("counter", scheduler.stats.completion_tokens),
        "decode_steps_total": ("counter", scheduler.stats.decode_steps),
        "prefills_total": ("counter", scheduler.stats.prefills),
        "prefill_seconds_total": ("counter", round(scheduler.stats.prefill_s, 6)),
        "decode_seconds_total": ("counter", round(scheduler.stats.decode_s, 6)),
        "prefill_tokens_total": ("counter", prefill.prompt_tokens),
        "prefill_computed_tokens_total": ("counter", prefill.computed_tokens),
        "prefill_saved_tokens_total": ("counter", prefill.saved_tokens),
        "prefix_cache_enabled": ("gauge", int(cache is not None)),
    }
    if cache is not None:
        values |= {
            "prefix_cache_queries_total": ("counter", cache.stats.queried_tokens),
            "prefix_cache_hits_total": ("counter", cache.stats.hit_tokens),
            "prefix_cache_hit_rate": ("gauge", round(cache.stats.hit_rate, 6)),
            "prefix_cache_tokens": ("gauge", cache.cached_tokens),
            "prefix_cache_evicted_blocks_total": ("counter", cache.stats.evicted_blocks),
            "prefix_cache_invalidated_blocks_total": ("counter", cache.stats.invalidated_blocks),
        }
    lines = []
    for name, (kind, value) in values.items():
        lines += [f"# TYPE policy_server_{name} {kind}", f"policy_server_{name} {value}"]
    return "\n".join(lines) + "\n"

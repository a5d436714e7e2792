"""The batched model runner behind the policy server (model code only, no HTTP, no threads).

``PolicyEngine`` owns a Hugging Face causal LM, its tokenizer and any runtime LoRA adapters, and
knows how to prefill prompts and decode one token for a batch of rows with a KV cache; the
``BatchScheduler`` (``scheduler.py``) runs it on one worker thread. Rows can join a running batch
(their caches are left-padded to a common width); finished rows leave it at once, and cache
columns that only padding still uses are trimmed, so short answers stop costing compute.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from .errors import GenerationError, UnknownModelError
from .sampling import Completion, SamplingParams, sample

__all__ = ["PolicyEngine"]

logger = logging.getLogger("trainers.policy_server")

_STOP_WINDOW_MARGIN = 8
"""Tokens (and characters) beyond the longest stop string that the stop check decodes."""


@dataclass(slots=True, eq=False)
class _Row:
    request: Any
    """The scheduler's request this row answers (None outside the scheduler)."""
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

    def _sample(
        self, logits: torch.Tensor, rows: list[_Row]
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[list[list[int]], list[list[float]]] | None]:
        """Sampled ids, their logprobs and top alternatives for ``rows`` (a seam the tests script)."""
        return sample(logits, [r.params for r in rows], [r.generator for r in rows], self._generator)

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

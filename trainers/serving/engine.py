"""The batched model runner behind the policy server (model code only, no HTTP, no threads).

``PolicyEngine`` owns a Hugging Face causal LM, its tokenizer and any runtime LoRA adapters, and
knows how to prefill prompts and decode one token for a batch of rows with a KV cache; the
``BatchScheduler`` (``scheduler.py``) runs it on one worker thread. Rows can join a running batch
(their caches are left-padded to a common width); finished rows leave it at once, and cache
columns that only padding still uses are trimmed, so short answers stop costing compute.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from .cache import PrefillStats, PrefixCache
from .errors import GenerationError, UnknownModelError
from .forward import LeanDecoder
from .kv import GrowableLayer, new_batch_cache, row_kv, stack_prefixes
from .precision import BF16_CPU_FLAGS, bf16_cpu_flags, resolve_dtype
from .sampling import Completion, SamplingParams, sample
from .strict_tools import advance, constrain_logits, start_scanner
from .token_texts import TokenTexts
from .weights import activate_adapter, delete_adapter, directory_stamp, load_adapter, load_base_weights

__all__ = ["PolicyEngine"]

logger = logging.getLogger("trainers.policy_server")

_STOP_WINDOW_MARGIN = 8
"""Tokens (and characters) beyond the longest stop string that the stop check decodes."""


def _adapter_key(name: str, load: int) -> str:
    """The PEFT key of the ``load``-th adapter load, for public ``name``: unique per load, so a replacement can
    load beside the adapter it replaces. Characters PEFT's keys cannot hold ("." names a submodule; "lora_" is
    its parameter prefix) are replaced: only the public name reaches clients."""
    return f"{re.sub(r'[^0-9A-Za-z-]+', '-', name)}@{load}"


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
    cached_tokens: int = 0
    version: str = ""
    scanner: Any = None
    """Where the completion stands in a tool call (``strict_tools.CallScanner``; None: unconstrained)."""

    def completion(self) -> Completion:
        return Completion(
            token_ids=tuple(self.token_ids),
            logprobs=tuple(self.logprobs),
            top_logprobs=tuple(self.top) if self.params.top_logprobs else None,
            finish_reason=self.finish_reason or "length",
            stop_reason=self.stop_reason,
            cached_tokens=self.cached_tokens,
            version=self.version,
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
        prefix_cache: keep the KV of prompt prefixes across requests (``cache.PrefixCache``); None
            turns it off. Prompts prefilled together are always run once per distinct prompt.
        kv_spare_columns: decode steps a batch's KV cache grows in place before it is copied to a
            bigger buffer (``kv.GrowableLayer``); 0 concatenates at every step, as transformers does.
        lean_decode: run decode steps through ``forward.LeanDecoder`` when the model is one it
            supports (Qwen2, Llama); False keeps transformers' forward.
        dtype: what the model computes in: ``float32``, ``bfloat16`` (weights, activations, KV cache and runtime
            LoRA adapters; logits are sampled in fp32), or ``auto`` (``precision.resolve_dtype``: bf16 on a CPU
            with native bf16 for a model big enough to gain from it). The default keeps fp32, which matches an
            fp32 trainer's logprobs exactly; the command line defaults to ``auto``.
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        served_model_name: str | None = None,
        seed: int = 0,
        prefix_cache: PrefixCache | None = None,
        kv_spare_columns: int = 64,
        lean_decode: bool = True,
        dtype: str | torch.dtype = "float32",
    ) -> None:
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
        self.num_parameters = sum(p.numel() for p in self.model.parameters())
        self.dtype = resolve_dtype(dtype, num_parameters=self.num_parameters)
        """What the model computes in (``--dtype``, resolved); adapters loaded later take it too."""
        if self.dtype != torch.float32:
            self.model.to(self.dtype)  # tied embedding and head stay one tensor
            if not bf16_cpu_flags():
                logger.warning(
                    "serving in %s on a CPU without native bf16 (no %s in /proc/cpuinfo): it is emulated and "
                    "likely slower than --dtype float32",
                    self.dtype,
                    " or ".join(BF16_CPU_FLAGS),
                )
        self.config = self.model.config.get_text_config()
        self.max_model_len = int(getattr(self.config, "max_position_embeddings", 0) or 1 << 20)
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(self.tokenizer.eos_token_id)
        self.eos_token_ids = frozenset(int(i) for i in eos_ids)
        self.adapters: dict[str, str] = {}
        """Each loaded adapter's public name (what clients send as ``model``) -> its resolved directory."""
        self._adapter_keys: dict[str, str] = {}
        """Public name -> the PEFT adapter key its weights are loaded under (``_adapter_key``)."""
        self._adapter_stamps: dict[str, tuple] = {}
        self._adapter_loads = 0
        self.base_version = "base"
        """What responses of the base model carry as ``system_fingerprint`` (set by ``update_weights``)."""
        self.created = int(time.time())
        self._generator = torch.Generator().manual_seed(seed)
        self._active: str | None = None
        # Joining rows into a running batch edits the cache tensors; only plain layers allow it.
        probe = DynamicCache(config=self.model.config)
        self.can_join = all(type(layer) is DynamicLayer for layer in probe.layers)
        self.prefix_cache = prefix_cache if self.can_join else None
        self.kv_spare_columns = kv_spare_columns
        self.lean_decoder = LeanDecoder(self.model) if lean_decode and LeanDecoder.supports(self.model) else None
        """Decode steps without transformers' wrappers (``forward.LeanDecoder``); None: the model's forward."""
        self.prefill_stats = PrefillStats()
        self.token_texts = TokenTexts(self.tokenizer, int(self.config.vocab_size), self.eos_token_ids)
        """Each id's text (the responses' logprob entries and strict tool calls read it)."""

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

    def version(self, name: str) -> str:
        """The version ``name`` answers with: an adapter's name, or the base weights' version."""
        return self.base_version if name == self.served_model_name else name

    def load_adapter(self, name: str, path: str, *, replace: bool = True) -> bool:
        """Load a PEFT LoRA adapter saved at ``path`` under ``name`` (call between batches).

        Loading a name again with the same, unchanged directory does nothing (returns False); a
        different path or changed files replace the adapter (unless ``replace`` is False: then
        it is an error, as in vLLM without ``load_inplace``) and drop its cached prefixes.

        A replacement is atomic: the new weights load under a fresh PEFT key while the old ones keep
        serving ``name``, then ``name`` is repointed to them and the old key deleted. ``name`` never
        stops existing (a request checked by ``check_model`` on the HTTP thread meanwhile is still
        served), and a directory that fails to load raises with the old adapter still serving.
        """
        if not name:
            raise GenerationError("lora_name must be a non-empty string.")
        if name == self.served_model_name:
            raise GenerationError(f"lora_name {name!r} is the base model's name; pick another name.")
        adapter_dir = Path(path)
        if not (adapter_dir / "adapter_config.json").is_file():
            raise UnknownModelError(f"No adapter found for {path!r}: expected a directory with adapter_config.json.")
        stamp = directory_stamp(adapter_dir)
        old_key = self._adapter_keys.get(name)
        if old_key is not None:
            if self._adapter_stamps.get(name) == stamp:
                return False
            if not replace:
                raise GenerationError(
                    f"The lora adapter '{name}' has already been loaded. If you want to load the adapter in place, "
                    "set 'load_inplace' to True."
                )
        self._adapter_loads += 1
        key = _adapter_key(name, self._adapter_loads)
        self._active = None  # loading may change which adapter the LoRA layers run
        load_adapter(self.model, key, path)  # on failure nothing of `key` is left and `name` is untouched
        self._adapter_keys[name] = key  # the swap: `name` now runs the new weights
        self.adapters[name] = stamp[0]
        self._adapter_stamps[name] = stamp
        if old_key is not None:
            if self.prefix_cache is not None:
                self.prefix_cache.drop(name)  # blocks computed with the old weights
            try:
                delete_adapter(self.model, old_key)
            except Exception:  # the swap is done: freeing the old weights must not report it as failed
                logger.exception("freeing the replaced weights of adapter %s (%s) failed", name, old_key)
        return True

    def unload_adapter(self, name: str) -> None:
        if name not in self.adapters:
            raise UnknownModelError(f"The lora adapter '{name}' cannot be found.")
        self._active = None
        delete_adapter(self.model, self._adapter_keys.pop(name))
        del self.adapters[name]
        self._adapter_stamps.pop(name, None)
        if self.prefix_cache is not None:
            self.prefix_cache.drop(name)

    def update_weights(self, path: str, version: str | None = None) -> str:
        """Serve the base weights saved at ``path`` from now on (call between batches); returns the version.

        Every cached prefix is dropped (adapters sit on the base weights). A directory that cannot
        be loaded raises ``GenerationError`` and the old weights keep serving.
        """
        load_base_weights(self.model, path)
        self.base_version = version or str(Path(path).resolve())
        if self.prefix_cache is not None:
            self.prefix_cache.drop()
        return self.base_version

    def _activate(self, name: str) -> None:
        if name == self._active:
            return
        if name == self.served_model_name:
            activate_adapter(self.model, None)
        else:
            key = self._adapter_keys.get(name)
            if key is None:
                raise UnknownModelError(f"The model `{name}` does not exist (was its adapter unloaded?).")
            activate_adapter(self.model, key)
        self._active = name

    # -- one batch ---------------------------------------------------------------------------
    def new_row(self, prompt_ids: Sequence[int], params: SamplingParams, index: int = 0) -> _Row:
        generator = None
        if params.seed is not None and params.temperature > 0:
            generator = torch.Generator().manual_seed((params.seed * 1_000_003 + index) % (1 << 63))
        row = _Row(request=None, prompt_ids=list(prompt_ids), params=params, generator=generator)
        if params.tool_grammar is not None:
            row.scanner = start_scanner(params.tool_grammar)
        return row

    def prefill(self, rows: list[_Row], model: str) -> tuple[_Batch | None, list[_Row]]:
        """Run the prompts of ``rows`` and sample their first token.

        Each distinct prompt is run once (the ``n`` rows of a request and the identical first
        prompts of a rollout group share it), and only past its longest cached prefix. Returns the
        batch of rows still running (None if every row finished) and the finished rows.
        """
        self._activate(model)
        distinct: dict[tuple[int, ...], int] = {}
        source = [distinct.setdefault(tuple(r.prompt_ids), len(distinct)) for r in rows]
        prompts = list(distinct)
        cache_ = self.prefix_cache
        # At least the last prompt token is always run: its logits give the first sampled token.
        chains = [cache_.match(model, p, limit=len(p) - 1) if cache_ else [] for p in prompts]
        starts = [len(c) * cache_.block_size if cache_ else 0 for c in chains]
        suffixes = [p[start:] for p, start in zip(prompts, starts, strict=True)]
        past, width = max(starts), max(len(x) for x in suffixes)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), past + width), dtype=torch.long)
        positions = torch.zeros((len(prompts), width), dtype=torch.long)
        # Left padding: every row's next token goes in the last column. A cached prefix sits
        # right-aligned in the first `past` columns, so a row may have padding between its prefix
        # and the rest of its prompt; the mask hides it and the positions skip it.
        for i, (start, suffix) in enumerate(zip(starts, suffixes, strict=True)):
            ids[i, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
            mask[i, past - start : past] = 1
            mask[i, past + width - len(suffix) :] = 1
            positions[i, width - len(suffix) :] = torch.arange(start, start + len(suffix))
        cache = new_batch_cache(self.model.config, self.kv_spare_columns if self.can_join else 0)
        if past:
            for layer, (keys, values) in enumerate(stack_prefixes(chains, past)):
                cache.update(keys, values, layer)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        logits = out.logits[:, -1, :]
        self.prefill_stats.prompt_tokens += sum(len(r.prompt_ids) for r in rows)
        self.prefill_stats.computed_tokens += sum(len(x) for x in suffixes)
        if cache_ is not None:
            for i, prompt in enumerate(prompts):
                cache_.insert(model, prompt, row_kv(cache, mask, i))
        if len(prompts) < len(rows):
            index = torch.tensor(source, dtype=torch.long)
            cache.batch_select_indices(index)
            mask, logits = mask[index], logits[index]
        version = self.version(model)
        for r, k in zip(rows, source, strict=True):
            r.cached_tokens, r.version = starts[k], version
        batch = _Batch(model=model, rows=rows, cache=cache, mask=mask, next_tokens=torch.zeros(0, dtype=torch.long))
        return self._advance(batch, logits)

    def decode(self, batch: _Batch) -> tuple[_Batch | None, list[_Row]]:
        """Feed each row's last token, sample the next one; returns the running batch and finished rows."""
        self._activate(batch.model)
        positions = batch.mask.sum(-1, keepdim=True)
        batch.mask = torch.cat([batch.mask, torch.ones((len(batch.rows), 1), dtype=torch.long)], dim=1)
        if self.lean_decoder is not None:
            return self._advance(batch, self.lean_decoder(batch.next_tokens, batch.mask, positions, batch.cache))
        out = self.model(
            input_ids=batch.next_tokens[:, None],
            attention_mask=batch.mask,
            position_ids=positions,
            cache=batch.cache,
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
            if isinstance(a, GrowableLayer):
                a.stack(b, width)
                continue
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
        logits = logits.float()
        strict = [i for i, r in enumerate(rows) if r.scanner is not None]
        if strict:
            texts = self.token_texts
            for i in strict:
                constrain_logits(logits[i], rows[i].scanner, texts)
        tokens, chosen, top = self._sample(logits, rows)
        keep: list[int] = []
        finished: list[_Row] = []
        for i, (r, tid, logprob) in enumerate(zip(rows, tokens.tolist(), chosen.tolist(), strict=True)):
            r.token_ids.append(tid)
            r.logprobs.append(logprob)
            if r.scanner is not None:
                r.scanner = advance(r.scanner, self.token_texts(tid))
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
        if self.prefix_cache is not None:
            # The next call of an agent starts with this prompt + completion: keep its KV (all but
            # the newest token, which was sampled and never run through the model).
            index = {id(r): i for i, r in enumerate(rows)}
            for r in finished:
                sequence = r.prompt_ids + r.token_ids[:-1]
                self.prefix_cache.insert(batch.model, sequence, row_kv(batch.cache, batch.mask, index[id(r)]))
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
            if isinstance(layer, GrowableLayer):
                layer.drop_leading(first)
            else:
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

"""What a row samples and how: ``SamplingParams``, the ``Completion`` it yields, and the sampler.

Sampling is pure temperature / top-p: there is no top-k anywhere (``generate``'s default
``top_k=50`` would make RL samples off-policy). The logprob reported for a token is the one of
the distribution it was drawn from ("processed" logprobs in vLLM's terms): log-softmax of
``logits / T``, renormalised over the top-p nucleus, floored at -9999.0. Greedy rows
(``T == 0``) report the log-softmax of the raw logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from .errors import GenerationError

__all__ = ["LOGPROB_FLOOR", "Completion", "SamplingParams", "sample"]

LOGPROB_FLOOR = -9999.0
"""vLLM's floor for reported logprobs (``-inf`` cannot travel as JSON)."""


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
    tool_grammar: Any = None
    """Strict tool calls (``strict_tools.ToolGrammar``): names and argument keys held to the request's tools."""

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
    cached_tokens: int = 0
    """Prompt tokens whose KV came from the prefix cache."""
    version: str = ""
    """The weights that sampled it: an adapter's name, or the base weights' version."""


def sample(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    generators: Sequence[torch.Generator | None],
    default_generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, tuple[list[list[int]], list[list[float]]] | None]:
    """Sampled ids, their processed logprobs and (if any row asks) the top alternatives.

    Row ``i`` is sampled with ``params[i]``, from ``generators[i]`` when it has one (a seeded
    request) and from ``default_generator`` otherwise: one uniform per sampled row, inverse CDF.
    """
    temps = [p.temperature for p in params]
    if all(t == 0 for t in temps):
        logp = torch.log_softmax(logits, dim=-1)
        tokens = logits.argmax(dim=-1)
    else:
        scale = torch.tensor([t if t > 0 else 1.0 for t in temps], dtype=logits.dtype)
        logp = torch.log_softmax(logits / scale[:, None], dim=-1)
        nucleus = [i for i, p in enumerate(params) if p.temperature > 0 and p.top_p < 1]
        if nucleus:
            top_p = torch.tensor([params[i].top_p for i in nucleus], dtype=logits.dtype)
            logp[nucleus] = _top_p_filter(logp[nucleus], top_p)
        tokens = logits.argmax(dim=-1)  # kept for greedy rows
        sampled = [i for i, t in enumerate(temps) if t > 0]
        if sampled:
            # One uniform per row (from the row's own generator when it has a seed), inverse CDF.
            uniform = torch.rand(len(sampled), generator=default_generator, dtype=torch.float64)
            for j, i in enumerate(sampled):
                if generators[i] is not None:
                    uniform[j] = torch.rand(1, generator=generators[i], dtype=torch.float64)[0]
            tokens[sampled] = _inverse_cdf(logp[sampled], uniform)
    chosen = logp.gather(1, tokens[:, None])[:, 0].clamp(min=LOGPROB_FLOOR)
    k = max(p.top_logprobs for p in params)
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

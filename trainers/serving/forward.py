"""A lean decode step for Qwen2 / Llama models: the same modules, without transformers' wrappers.

On a small model one decode step is mostly framework overhead: ``Qwen2ForCausalLM.forward``
builds a 4-D mask through the masking utilities, runs output-capturing and kwargs-checking
wrappers and dispatches attention through an interface table, for a batch whose only new token
per row needs none of it. ``LeanDecoder`` calls the model's own submodules in the order
``Qwen2DecoderLayer.forward`` does (so LoRA layers injected by PEFT still apply) with a plain
padding mask: the same operations on the same tensors, and on the tiny policy 1.3-1.5x faster
decode steps. In bf16, attention over the cache is two batched matmuls (``decode_attention``) instead of
``scaled_dot_product_attention``, whose CPU kernel is 14-18x slower for a single bf16 query.
Models it does not recognise keep the transformers forward (``supports``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["LeanDecoder", "decode_attention"]

_ARCHITECTURES = ("qwen2", "llama")


class LeanDecoder:
    """One decode step (one new token per row) of a supported causal LM; see the module docstring."""

    def __init__(self, model: Any) -> None:
        from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb

        self.model = model
        self.inner = model.model
        self._rotary = apply_rotary_pos_emb

    @staticmethod
    def supports(model: Any) -> bool:
        """Whether ``model`` has exactly the layer structure this step reproduces."""
        config = model.config
        inner = getattr(model, "model", None)
        if config.model_type not in _ARCHITECTURES or inner is None or not hasattr(inner, "rotary_emb"):
            return False
        if getattr(config, "use_sliding_window", False) or getattr(config, "pretraining_tp", 1) != 1:
            return False
        if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
            return False
        attn = inner.layers[0].self_attn
        plain = all(hasattr(attn, name) for name in ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling"))
        return plain and not hasattr(attn, "q_norm")

    def __call__(self, tokens: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        """Logits of the next token: ``tokens`` [rows] fed at ``positions`` [rows, 1]; ``mask``
        [rows, columns] covers the cache and the new column; ``cache`` gets the new keys/values."""
        inner = self.inner
        h = inner.embed_tokens(tokens[:, None])
        cos, sin = inner.rotary_emb(h, positions)
        # fp32 keeps SDPA, the step its exactness tests pin (token for token against transformers' forward, 1e-4 in
        # logprob against a trainer); bf16 takes decode_attention, with one additive mask for every layer (0
        # visible, -inf over padding).
        matmul = h.dtype != torch.float32
        visible = mask.bool()[:, None, None, :]
        bias = torch.zeros(mask.shape).masked_fill_(mask == 0, float("-inf"))[:, None, None, :] if matmul else None
        rows = h.shape[0]
        for index, layer in enumerate(inner.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            shape = (rows, 1, -1, attn.head_dim)
            q = attn.q_proj(x).view(shape).transpose(1, 2)
            k = attn.k_proj(x).view(shape).transpose(1, 2)
            v = attn.v_proj(x).view(shape).transpose(1, 2)
            q, k = self._rotary(q, k, cos, sin)
            k, v = cache.update(k, v, index)
            if bias is not None:
                out = decode_attention(q, k, v, bias, attn.scaling)
            else:
                out = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=visible, scale=attn.scaling, enable_gqa=k.shape[1] != q.shape[1]
                ).transpose(1, 2)
                out = out.reshape(rows, 1, -1)
            h = h + attn.o_proj(out)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.model.lm_head(inner.norm(h))[:, -1, :]


def decode_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float
) -> torch.Tensor:
    """Attention of one new token per row over the cache, as two batched matmuls: [rows, 1, heads * head_dim].

    ``q`` is [rows, heads, 1, head_dim], ``k`` / ``v`` [rows, kv_heads, columns, head_dim] (grouped-query heads
    share a kv head: query head ``h`` reads kv head ``h // (heads // kv_heads)``), ``bias`` [rows, 1, 1,
    columns] (0 or -inf). The query heads of one kv head are stacked as rows of one matmul, so no key or value
    is repeated. ``F.scaled_dot_product_attention`` computes the same thing, but its CPU kernel is built for long
    queries: for one query in bf16 it took 14-18x this time (32 rows, 150-300 columns, docs/policy-endpoint.md).
    The softmax runs in fp32 whatever the model's dtype. The cache is a view of a buffer with spare columns
    (``kv.GrowableLayer``); a bf16 batched matmul over such a view takes a path ~7x slower than one copy to
    contiguous memory followed by the fast kernel, so ``k`` and ``v`` are made contiguous first.
    """
    rows, heads, _, head_dim = q.shape
    kv_heads = k.shape[1]
    k, v = k.contiguous(), v.contiguous()
    grouped = q.reshape(rows, kv_heads, heads // kv_heads, head_dim)
    scores = torch.matmul(grouped, k.transpose(-1, -2)).float().mul_(scale).add_(bias)
    weights = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.matmul(weights, v).reshape(rows, 1, heads * head_dim)

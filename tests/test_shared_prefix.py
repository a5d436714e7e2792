"""``trainers.shared_prefix``: a batch's shared opening computed once gives the ordinary loss and gradients.

On a small Llama (SmolLM2's architecture) built from a config, with a LoRA adapter on every linear layer as
``adapt`` trains it, and right-padded rows as ``padded_batches`` makes them."""

from __future__ import annotations

import random

import pytest
import torch

from trainers.shared_prefix import MIN_SHARED, shared_prefix_length, shared_prefix_loss
from trainers.tiny import padded_batches, supervised_step


def _lora_llama(seed: int = 0):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)  # fmt: skip
    model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    for name, p in model.named_parameters():  # LoRA's B starts at zero: give it weights so its gradients flow
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    return model


def _chats(opening: int, rng: random.Random) -> list[tuple[list[int], list[int]]]:
    """Chats that share an ``opening`` (a system turn, untrained) and then differ: a request (untrained) and an
    answer (trained), of several lengths."""
    system = [rng.randrange(1, 97) for _ in range(opening)]
    chats = []
    for _ in range(6):
        request = [rng.randrange(1, 97) for _ in range(rng.randint(3, 12))]
        answer = [rng.randrange(1, 97) for _ in range(rng.randint(2, 9))]
        chats.append(([*system, *request, *answer], [-100] * (opening + len(request)) + answer))
    return chats


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def test_the_shared_opening_gives_the_ordinary_loss_and_gradients():
    model = _lora_llama()
    ids, labels, mask = next(padded_batches(_chats(48, random.Random(1)), 3, 0, random.Random(0)))
    assert mask.min() == 0  # rows of other lengths, right-padded
    prefix = shared_prefix_length(ids, labels, mask)
    assert prefix >= 48  # the opening, and as much of the requests as the rows have alike
    ordinary = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    ordinary.backward()
    want = _grads(model)
    model.zero_grad()
    shared = shared_prefix_loss(model, ids, labels, mask, prefix)
    shared.backward()
    got = _grads(model)
    assert shared.item() == pytest.approx(ordinary.item(), rel=1e-5)
    for name, grad in want.items():
        assert torch.allclose(got[name], grad, rtol=1e-4, atol=1e-6), name
    assert any(g.abs().sum() > 0 for n, g in got.items() if "lora_A" in n and "layers.0." in n)  # reached the opening


def test_a_step_shares_only_what_every_row_has_and_trains_on_none():
    rng = random.Random(2)
    short = _chats(MIN_SHARED - 8, rng)  # too short an opening to bother: the ordinary forward
    ids, labels, mask = next(padded_batches(short, 3, 0, random.Random(0)))
    assert shared_prefix_length(ids, labels, mask) < MIN_SHARED
    ids[1, 0] = (ids[1, 0] + 1) % 97  # one row differs at its first token: nothing is shared
    assert shared_prefix_length(ids, labels, mask) == 0
    one = next(padded_batches(short[:1], 1, 0, random.Random(0)))
    assert shared_prefix_length(*one) == 0


def test_supervised_steps_with_and_without_sharing_train_alike():
    chats = _chats(64, random.Random(3))
    losses = {}
    for share in (False, True):
        model = _lora_llama(seed=4)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-2)
        batches = padded_batches(chats, 3, 0, random.Random(0))
        losses[share] = [supervised_step(model, opt, params, next(batches), share_prefix=share) for _ in range(4)]
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)
    assert losses[True][-1] < losses[True][0]  # it learns

"""Build and warm-start the tiny policy that the embedded default serves.

There are no pretrained weights offline, so the embedded default is a small Qwen2-architecture
model trained here from scratch: a byte-level BPE tokenizer trained on the sandbox's texts
(single digits as tokens; entity names kept out of the merges so they are copied character by
character), ChatML with ``<tool_call>`` blocks, then supervised training on the reference
solutions of the sandbox's training stream (the loss covers assistant tokens only).

The warm start stops short on purpose: RL needs a policy that succeeds *sometimes* (groups with
reward variance), so the committed checkpoint is the one whose held-out success on the easier
levels is mid-range. With a real model (e.g. a Qwen2.5 instruct checkpoint) none of this runs.

Regenerate the committed checkpoint (``make tiny-policy``, under an hour on 2 CPU cores): from
scratch until the easy levels leave the 20-60% band (the last checkpoint inside it is kept),
then continue that checkpoint with recovery examples (a masked mistake, the error, the fix)::

    python -m trainers.tiny --out /tmp/tiny-stage1 --minutes 60 --mistake-rate 0 --stop-above-band
    python -m trainers.tiny --init-from /tmp/tiny-stage1 --out checkpoints/tiny-policy --minutes 24 --lr 1e-3 \
        --eval-every 3 --l3-fraction 1

Teach it to read experience blocks (``docs/self-navigating.md``, "Teaching the tiny policy to read
experiences"): that share of the supervised chats gets the block the ``Navigator`` retrieves for
its task from a pool the rules extractor built from *training-task* rollouts, appended to the
system message by ``inject_experience`` exactly as at rollout time (the loss stays on assistant
turns); a separate checkpoint, never ``checkpoints/tiny-policy``; the control is the same run with
``--experience-rate 0``. Evaluation during training is on a validation split carved from the
training split (``--eval-split validation``), unguided and guided::

    python examples/navigate_inference.py --pool-only --pool-dir runs/navigate_inference/pool-train180
    python -m trainers.tiny --init-from checkpoints/tiny-policy --out checkpoints/tiny-policy-navigate \
        --experience-rate 0.5 --experience-pool runs/navigate_inference/pool-train180 --experience-top-k 3 \
        --minutes 20 --lr 1e-3 --warmup-steps 20 --examples 3000 --l3-fraction 1 --threads 1 \
        --eval-split validation --eval-tasks 20 --eval-every 100 --keep last

Quick look (a few minutes, worse model)::

    python -m trainers.tiny --out /tmp/tiny --minutes 3 --eval-tasks 30

Over 600 lines because the tokenizer, the model, the supervised examples (plain,
guided, with mistakes) and the in-process rollouts that choose the checkpoint are one recipe for
one committed artefact and change together.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from env_tools.sandbox import SandboxEnvironment, generate_tasks, seed_tasks
from env_tools.sandbox.world import CITIES, EVENT_TITLES, FIRST_NAMES
from langgraph_evolver.types import Action, Task, ToolCall

from .chat_format import EOS_TOKEN, PAD_TOKEN, TINY_CHAT_TEMPLATE, parse_tool_calls

__all__ = [
    "ModelSize",
    "apply_reply",
    "build_model",
    "build_tokenizer",
    "reference_conversation",
    "rollout_in_process",
]

DEFAULT_CHECKPOINT = Path(__file__).resolve().parent.parent / "checkpoints" / "tiny-policy"
VALIDATION_START = 200_000  # training-split task indices from here on: validation (never supervised)


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSize:
    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    intermediate_size: int = 384
    max_position_embeddings: int = 2048


def reference_conversation(
    task: Task, *, rng: random.Random | None = None, mistake_rate: float = 0.0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The chat (OpenAI message dicts) of ``task`` solved by its reference, and its tool schemas.

    With ``mistake_rate`` > 0, that share of chats gets one mistake before a reference call (an
    unparseable call, a nonexistent id or a wrong argument name) followed by the environment's
    error and the correct call: the model learns to recover. Mistakes carry ``"weight": 0`` and
    are left out of the loss, so it never learns to make them.
    """
    env = SandboxEnvironment()
    obs = env.reset(task)
    messages = list(obs.messages)
    calls = task.reference_solution or ()
    mistake_at = -1
    if rng is not None and calls and rng.random() < mistake_rate:
        mistake_at = rng.randrange(len(calls))
    for i, call in enumerate(calls):
        if i == mistake_at:
            messages += _mistake(env, call, rng, f"call_{i}x")
        call_id = f"call_{i}"
        result = env.step(Action(tool_calls=(ToolCall(name=call.name, arguments=call.arguments, id=call_id),)))
        messages.append(_assistant_call(call_id, call.name, call.arguments))
        messages.append({"role": "tool", "tool_call_id": call_id, "content": result.observations[0].content})
    messages.append({"role": "assistant", "content": task.metadata.get("answer") or "Done."})
    return messages, obs.tools


def _assistant_call(call_id: str, name: str, arguments: Any, **extra: Any) -> dict[str, Any]:
    fn = {"name": name, "arguments": arguments}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": call_id, "type": "function", "function": fn}],
        **extra,
    }


def with_experience(messages: list[dict[str, Any]], block: Any) -> list[dict[str, Any]]:
    """``messages`` (OpenAI dicts) with ``block`` injected by ``inject_experience``, as at rollout time.

    The system message (or a new first one) goes through the same function the agent graph calls,
    so the supervised chats hold the block's exact text and separator.
    """
    from langchain_core.messages import SystemMessage

    from langgraph_evolver.experience import inject_experience

    if block is None or not block.text:
        return list(messages)
    if messages and messages[0]["role"] == "system":
        injected = inject_experience([SystemMessage(messages[0]["content"])], block)[0]
        return [{**messages[0], "content": injected.content}, *messages[1:]]
    return [{"role": "system", "content": inject_experience([], block)[0].content}, *messages]


def experience_navigator(pool_dir: str | Path, top_k: int):
    """The ``Navigator`` over the pool saved in ``pool_dir`` (MiniLM embeddings, as in rollouts)."""
    from langgraph_evolver.experience import FaissExperiencePool, Navigator, default_embeddings

    return Navigator(FaissExperiencePool.load(pool_dir, default_embeddings()), top_k=top_k)


class _QueriesEmbeddedAhead:
    """The pool's embeddings with the rollout queries of many chats embedded in one batch (MiniLM is
    ~15x faster batched on a loaded CPU); retrieval itself still goes through the ``Navigator``.
    """

    def __init__(self, inner: Any, queries: list[str]) -> None:
        from langgraph_evolver.experience._base import embed_texts

        self.inner = inner
        self.model_name = getattr(inner, "model_name", None)
        self._vectors = dict(zip(queries, embed_texts(inner, queries).tolist(), strict=True)) if queries else {}

    def embed_query(self, text: str) -> list[float]:
        from langgraph_evolver.experience._base import embed_query

        return self._vectors.get(text) or embed_query(self.inner, text).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        from langgraph_evolver.experience._base import embed_texts

        return embed_texts(self.inner, texts).tolist()


def embed_queries_ahead(navigator: Any, tasks: list[Task]) -> None:
    """Embed the retrieval queries of ``tasks`` (as ``Navigator`` builds them) in one batch."""
    from langgraph_evolver.experience import retrieval_query

    queries = [retrieval_query(t, SandboxEnvironment().reset(t)) for t in tasks]
    navigator.pool.embeddings = _QueriesEmbeddedAhead(navigator.pool.embeddings, queries)


def guided_conversation(
    task: Task, navigator: Any, *, rng: random.Random | None = None, mistake_rate: float = 0.0, max_tokens: int = 0,
    tokenizer: Any = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:  # fmt: skip
    """``reference_conversation`` with the block the navigator retrieves for ``task`` in its system message.

    With ``max_tokens`` (and ``tokenizer``), experiences are dropped from the end of the block until
    the rendered chat fits (the block's top-1 is kept; a chat that still does not fit has no block).
    Returns the messages, the tools and the block used (``None``: nothing retrieved or nothing fits).
    """
    from dataclasses import replace

    from langgraph_evolver.experience import format_block

    messages, tools = reference_conversation(task, rng=rng, mistake_rate=mistake_rate)
    block = navigator.block_for(task, SimpleNamespace(messages=messages[:2]))
    while block is not None:
        guided = with_experience(messages, block)
        if not max_tokens or len(tokenizer(_render(guided, tools), add_special_tokens=False).input_ids) <= max_tokens:
            return guided, tools, block
        if len(block.ids) <= 1:
            break
        kept = [navigator.pool.get(i) for i in block.ids[:-1]]
        block = replace(block, ids=block.ids[:-1], scores=block.scores[:-1], text=format_block(kept))
    return messages, tools, None


_ID_VALUE = re.compile(r"^([A-Za-z]+)(\d+)$")


def _mistake(env: SandboxEnvironment, call: ToolCall, rng: random.Random, call_id: str) -> list[dict[str, Any]]:
    """A wrong turn before ``call`` and what the agent sees after it (mistake turn weighted 0)."""
    from graphs.agent import PARSE_ERROR_FEEDBACK

    args = dict(call.arguments)
    id_keys = [k for k, v in args.items() if k.endswith("_id") and isinstance(v, str) and _ID_VALUE.match(v)]
    kinds = ["malformed"] + (["bad_id"] if id_keys else []) + (["bad_key"] if args else [])
    kind = rng.choice(kinds)
    if kind == "malformed":
        body = json.dumps({"name": call.name, "arguments": args}, ensure_ascii=False)
        cut = rng.choice(["brace", "quote", "key"])
        if cut == "quote" and '"' in body[1:]:
            quotes = [i for i, ch in enumerate(body) if ch == '"']
            drop = rng.choice(quotes)
            body = body[:drop] + body[drop + 1 :]
        elif cut == "key":
            body = body.replace('"arguments": ', "", 1)
        else:
            body = body[:-1]
        text = f"<tool_call>{body}</tool_call>"
        if parse_tool_calls(text).parse_error is None:  # the cut happened to keep valid JSON
            text = f"<tool_call>{json.dumps({'name': call.name, 'arguments': args})[:-1]}</tool_call>"
        return [
            {"role": "assistant", "content": text, "weight": 0},
            {"role": "user", "content": PARSE_ERROR_FEEDBACK},
        ]
    if kind == "bad_id":
        key = rng.choice(id_keys)
        prefix = _ID_VALUE.match(args[key]).group(1)
        args[key] = f"{prefix}0{rng.randrange(10)}"  # generated ids are 10-99 and 100+: 00-09 never exist
    else:
        key = rng.choice(list(args))
        args["id" if key != "id" else "name"] = args.pop(key)
    result = env.step(Action(tool_calls=(ToolCall(name=call.name, arguments=args, id=call_id),)))
    assert result.observations[0].is_error, "a mistake must not change the world"
    return [
        _assistant_call(call_id, call.name, args, weight=0),
        {"role": "tool", "tool_call_id": call_id, "content": result.observations[0].content},
    ]


def _render(messages: list[dict], tools: list[dict], template: str = TINY_CHAT_TEMPLATE, **kw: Any) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=template, **kw)
    return rendered[0]


def build_tokenizer(texts: list[str], *, vocab_size: int = 700):
    """Train the byte-level BPE tokenizer on ``texts`` (entity names are removed first)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    names = sorted({*FIRST_NAMES, *CITIES, *EVENT_TITLES}, key=len, reverse=True)
    names += [n.lower() for n in names]

    def scrub(text: str) -> str:
        for name in names:
            text = text.replace(name, " ")
        return text

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[PAD_TOKEN, "<|im_start|>", EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator((scrub(t) for t in texts), trainer=trainer)
    tok.add_tokens([AddedToken("<tool_call>", special=False), AddedToken("</tool_call>", special=False)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN)
    fast.chat_template = TINY_CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def build_model(tokenizer, size: ModelSize = ModelSize(), *, seed: int = 0):
    """A randomly initialised Qwen2 causal LM sized ``size`` for ``tokenizer``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden_size,
        intermediate_size=size.intermediate_size,
        num_hidden_layers=size.num_hidden_layers,
        num_attention_heads=size.num_attention_heads,
        num_key_value_heads=size.num_key_value_heads,
        max_position_embeddings=size.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def encode_example(tokenizer, messages: list[dict], tools: list[dict]) -> tuple[list[int], list[int]]:
    """Token ids of the whole chat, rendered with ``tokenizer``'s chat template, and labels that are
    -100 everywhere but assistant turns (their ``<|im_end|>`` included)."""
    template = getattr(tokenizer, "chat_template", None) or TINY_CHAT_TEMPLATE
    text = _render(messages, tools, template)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] == "assistant" and m.get("weight", 1):
            start = len(_render(messages[:i], tools, template, add_generation_prompt=True))
            end = len(_render(messages[: i + 1], tools, template)) - 1  # keep <|im_end|>, drop the "\n"
            spans.append((start, end))
    enc = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    labels = []
    for tid, (a, b) in zip(enc["input_ids"], enc["offset_mapping"], strict=True):
        inside = any(s <= a and b <= e for s, e in spans) and b > a
        labels.append(tid if inside else -100)
    return enc["input_ids"], labels


def build_tiny_tokenizer(n_texts: int = 3000, vocab_size: int = 700):
    texts = [_render(*reference_conversation(t)) for t in generate_tasks("train", n_texts, start=100_000)]
    return build_tokenizer(texts, vocab_size=vocab_size)


def apply_reply(episode: dict[str, Any], text: str, feedback: str) -> None:
    """Apply one policy reply to ``episode`` (keys ``env``, ``messages``, ``calls``, ``parsed``, ``done``)
    by the agent graph's rules: an unparseable call gets the ``feedback`` user turn and the episode goes
    on, a reply without a call is the answer and ends it, calls are stepped and their results appended.
    ``calls`` counts call attempts, ``parsed`` those whose arguments all decoded to objects."""
    parsed = parse_tool_calls(text)
    if parsed.parse_error is not None:
        episode["calls"] += 1
        episode["messages"] += [{"role": "assistant", "content": text}, {"role": "user", "content": feedback}]
        return
    if not parsed.tool_calls:
        episode["env"].step(Action(content=text))
        episode["done"] = True
        return
    episode["calls"] += 1
    calls, ok = [], True
    for c in parsed.tool_calls:
        args = json.loads(c["function"]["arguments"])
        if not isinstance(args, dict):  # the graph turns these into invalid tool calls
            ok, args = False, c["function"]["arguments"]
        calls.append(ToolCall(name=c["function"]["name"], arguments=args, id=c["id"]))
    episode["parsed"] += ok
    result = episode["env"].step(Action(tool_calls=tuple(calls), content=parsed.content))
    episode["messages"].append({"role": "assistant", "content": parsed.content or "", "tool_calls": parsed.tool_calls})
    for o in result.observations:
        episode["messages"].append({"role": "tool", "tool_call_id": o.call_id, "content": o.content})
    if result.done:
        episode["done"] = True


def rollout_in_process(
    model, tokenizer, task: Task, *, temperature: float = 1.0, max_turns: int = 10, navigator: Any = None
) -> dict[str, Any]:
    """Run ``task`` with ``model`` directly (no server), by the agent graph's rules (``apply_reply``).
    Used to pick the warm-start checkpoint. With ``navigator``, the rollout is guided: the retrieved
    block is in the system message.
    """
    import torch

    from graphs.agent import PARSE_ERROR_FEEDBACK

    env = SandboxEnvironment()
    obs = env.reset(task)
    episode: dict[str, Any] = {"env": env, "messages": list(obs.messages), "calls": 0, "parsed": 0, "done": False}
    if navigator is not None:
        episode["messages"] = with_experience(episode["messages"], navigator.block_for(task, obs))
    limit = model.config.max_position_embeddings - 96
    for _ in range(max_turns):
        prompt = tokenizer.apply_chat_template(
            episode["messages"], tools=obs.tools, add_generation_prompt=True, tokenize=False
        )
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
        if ids.shape[1] > limit:
            break
        with torch.no_grad():
            out = model.generate(
                ids,
                max_new_tokens=96,
                do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None,
                top_k=0 if temperature > 0 else None,
                top_p=1.0 if temperature > 0 else None,
            )
        text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=False).replace(EOS_TOKEN, "")
        apply_reply(episode, text, PARSE_ERROR_FEEDBACK)
        if episode["done"]:
            break
    return {"score": env.evaluate(), "calls": episode["calls"], "parsed": episode["parsed"],
            "level": task.metadata["level"]}  # fmt: skip


def evaluate_in_process(
    model, tokenizer, tasks: list[Task], *, temperature: float, navigator: Any = None
) -> dict[str, float]:
    results = [rollout_in_process(model, tokenizer, t, temperature=temperature, navigator=navigator) for t in tasks]
    out: dict[str, float] = {}
    for level in (1, 2, 3):
        rs = [r for r in results if r["level"] == level]
        if rs:
            out[f"success_l{level}"] = sum(r["score"] == 1.0 for r in rs) / len(rs)
            out[f"score_l{level}"] = sum(r["score"] for r in rs) / len(rs)
    calls = sum(r["calls"] for r in results)
    out["parse_rate"] = sum(r["parsed"] for r in results) / calls if calls else 0.0
    out["success"] = sum(r["score"] == 1.0 for r in results) / len(results)
    return out


def supervised_step(model: Any, opt: Any, params: Any, batch: tuple[Any, Any, Any], dtype: Any = None,
                    share_prefix: bool = False) -> float:  # fmt: skip
    """One optimizer step on a ``padded_batches`` batch (the loss on labelled tokens only), gradients clipped to
    norm 1; the loss. ``dtype`` bfloat16: the forward under CPU bf16 autocast (``train_precision``). With
    ``share_prefix`` the rows' common untrained opening runs once (``trainers.shared_prefix``: the same loss and
    gradients; a transformers model with a KV cache). Shared by the tiny policy, ``trainers.warm_start`` and
    ``trainers.evolve adapt``."""
    import torch

    from .shared_prefix import batch_loss
    from .train_precision import precision_context

    with precision_context(dtype):
        loss = batch_loss(model, *batch, share_prefix=share_prefix)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    return loss.item()


def padded_batches(examples: list[tuple[list[int], list[int]]], batch_size: int, pad_id: int, rng: random.Random):
    """Endless right-padded batches of similar length (padding would otherwise double the cost), in passes: each
    pass gives every example once, its batches (runs of ``batch_size`` in length order, the last one shorter
    where they do not divide) in a fresh order drawn from ``rng``.

    Until session 69 each batch was drawn with replacement and the longest ``len % batch_size`` examples never
    came: an adapt run's supervised phase takes about one pass (help desk run 1: 202 examples, 81 steps of 4), and
    drawn with replacement a fifth of its batches never came up (``(1 - 1/50) ** 81``); two in five at 31 steps.

    Example:
        >>> import random
        >>> examples = [([1] * n, [1] * n) for n in (3, 1, 2, 5, 4)]
        >>> batches = padded_batches(examples, 2, 0, random.Random(0))
        >>> sorted(tuple(ids.shape) for ids, _, _ in (next(batches) for _ in range(3)))
        [(1, 5), (2, 2), (2, 4)]
    """
    import torch

    order = sorted(range(len(examples)), key=lambda i: len(examples[i][0]))
    chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    while True:
        for chunk in rng.sample(chunks, len(chunks)):
            batch = [examples[i] for i in chunk]
            width = max(len(ids) for ids, _ in batch)
            ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, (x, y) in enumerate(batch):
                ids[row, : len(x)] = torch.tensor(x)
                labels[row, : len(y)] = torch.tensor(y)
                mask[row, : len(x)] = 1
            yield ids, labels, mask


def warm_start(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from tqdm import tqdm

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.init_from:  # continue a warm start (fresh optimizer, same tokenizer)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.init_from)
        model = AutoModelForCausalLM.from_pretrained(args.init_from)
        # RoPE has no learned positions: a longer window only lets long (flailing) episodes finish
        model.config.max_position_embeddings = max(
            model.config.max_position_embeddings, ModelSize().max_position_embeddings
        )
    else:
        tokenizer = build_tiny_tokenizer()
        model = build_model(tokenizer, ModelSize(hidden_size=args.hidden, num_hidden_layers=args.layers))
    n_params = sum(p.numel() for p in model.parameters())
    # Level-3 chats are the longest; the easy levels are what RL starts from, so thin them out.
    tasks = [
        t
        for i, t in enumerate(generate_tasks("train", args.examples))
        if t.metadata["level"] < 3 or (i // 15) % round(1 / args.l3_fraction) == 0
    ]
    tasks += store_tasks(args.task_store) if args.task_store else []
    mistakes = random.Random(1)
    navigator = experience_navigator(args.experience_pool, args.experience_top_k) if args.experience_pool else None
    if args.experience_rate > 0 and navigator is None:
        raise SystemExit("--experience-rate needs --experience-pool (a pool built from training-task rollouts)")
    guide = random.Random(2)  # drawn for every chat, so the control (rate 0) sees the same chats and mistakes
    guided_flags = [guide.random() < args.experience_rate for _ in tasks]
    if any(guided_flags):
        embed_queries_ahead(navigator, [t for t, g in zip(tasks, guided_flags, strict=True) if g])
    examples, blocks = [], []
    for t, guided in zip(tqdm(tasks, desc="encoding", mininterval=2), guided_flags, strict=True):
        if guided:
            messages, tools, block = guided_conversation(
                t, navigator, rng=mistakes, mistake_rate=args.mistake_rate,
                max_tokens=model.config.max_position_embeddings, tokenizer=tokenizer,
            )  # fmt: skip
            blocks.append(len(block.ids) if block else 0)
        else:
            messages, tools = reference_conversation(t, rng=mistakes, mistake_rate=args.mistake_rate)
        examples.append(encode_example(tokenizer, messages, tools))
    lengths = sorted(len(x) for x, _ in examples)
    print(
        f"tokenizer {len(tokenizer)} tokens; model {n_params / 1e6:.2f}M params; "
        f"{len(examples)} examples, length median {lengths[len(lengths) // 2]} max {lengths[-1]}"
    )
    if blocks:
        print(
            f"experience blocks in {sum(b > 0 for b in blocks)} chats (top-{args.experience_top_k}; "
            f"{sum(0 < b < args.experience_top_k for b in blocks)} trimmed to fit "
            f"{model.config.max_position_embeddings} tokens, {blocks.count(0)} without a block)"
        )
    if args.eval_split == "validation" and args.examples > VALIDATION_START:
        raise SystemExit(f"--examples {args.examples} would reach the validation tasks (from {VALIDATION_START})")
    if args.eval_split == "validation":  # training-split tasks outside the supervised stream and the pool
        eval_tasks = generate_tasks("train", args.eval_tasks, start=VALIDATION_START)
    else:
        eval_tasks = generate_tasks("test", args.eval_tasks)
    rng = random.Random(0)
    batches = padded_batches(examples, args.batch_size, tokenizer.pad_token_id, rng)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    budget = args.minutes * 60
    history, step, best = [], 0, None
    next_eval = args.eval_every * 60
    bar = tqdm(total=int(budget), desc="warm-start", unit="s", mininterval=5)
    train_start = time.perf_counter()
    while (elapsed := time.perf_counter() - train_start) < budget:
        frac = elapsed / budget
        lr = args.lr * min(1.0, (step + 1) / args.warmup_steps) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for group in opt.param_groups:
            group["lr"] = lr
        model.train()
        loss = supervised_step(model, opt, model.parameters(), next(batches))
        step += 1
        bar.update(int(time.perf_counter() - train_start) - bar.n)
        bar.set_postfix(step=step, loss=f"{loss:.3f}")
        if elapsed >= next_eval or time.perf_counter() - train_start >= budget:
            next_eval += args.eval_every * 60
            model.eval()
            if args.keep == "last":  # saved before the (slow) rollouts, so an interrupted evaluation keeps it
                model.save_pretrained(out, safe_serialization=True)
                tokenizer.save_pretrained(out)
            figures = evaluate_in_process(model, tokenizer, eval_tasks, temperature=1.0)
            if navigator is not None:  # the same tasks guided by the pool's block
                guided = evaluate_in_process(model, tokenizer, eval_tasks, temperature=1.0, navigator=navigator)
                figures.update({f"guided_{k}": v for k, v in guided.items()})
            figures.update(step=step, minutes=round(elapsed / 60, 1), loss=round(loss, 4))
            figures["eval_split"] = args.eval_split
            history.append(figures)
            tqdm.write(json.dumps(figures))
            with (out / "warm_start_history.jsonl").open("a") as f:
                f.write(json.dumps(figures) + "\n")
            easy = (figures.get("success_l1", 0) + figures.get("success_l2", 0)) / 2
            key = selection_key(figures, args.max_easy_success)
            if args.keep == "last":
                best = (key, step)
            elif best is None or key >= best[0]:
                best = (key, step)
                model.save_pretrained(out, safe_serialization=True)
                tokenizer.save_pretrained(out)
            if easy > args.max_easy_success and args.stop_above_band:
                tqdm.write(f"easy-level success {easy:.2f} is above {args.max_easy_success}: stopping")
                break
    bar.close()
    summary = {
        "params": n_params,
        "vocab": len(tokenizer),
        "steps": step,
        "batch_size": args.batch_size,
        "wall_min": round((time.perf_counter() - t0) / 60, 1),
        "chosen_step": best[1] if best else None,
        "chosen": next((h for h in history if best and h["step"] == best[1]), None),
        "experience_rate": args.experience_rate,
        "experience_top_k": args.experience_top_k if navigator else None,
        "experience_pool": args.experience_pool,
        "task_store": args.task_store,
        "command": "python -m trainers.tiny " + " ".join(sys.argv[1:]),
    }
    (out / "warm_start_summary.json").write_text(json.dumps(summary, indent=2))
    plot_history(out / "warm_start_history.jsonl", out / "warm_start.png")
    print(json.dumps(summary))
    return summary


def world_key(task: Task) -> str:
    """The world a task is set in, as a key (its ``env_params``): tasks with equal keys share a world."""
    return json.dumps(task.env_params, sort_keys=True)


def store_tasks(path: str | Path) -> list[Task]:
    """The tasks of a ``TaskStore`` to supervise beside the seed stream (their reference solutions).

    Meant for offline-synthesized tasks of training-stream worlds, so that the policy reads their
    generic phrasing as a model that follows instructions would. A store holding a held-out task
    (same id or query) or a task set in a held-out world (same ``env_params``) is refused.
    """
    from langgraph_evolver.questioning import TaskStore

    if not Path(path).exists():
        raise SystemExit(f"--task-store {path}: no such file (make one with python -m langgraph_evolver.questioning)")
    with TaskStore(path) as store:
        tasks = [t for t in store.list() if t.reference_solution]
    held_out = seed_tasks("test")
    leaked = {t.id for t in held_out} | {t.query for t in held_out} | {world_key(t) for t in held_out}
    bad = [t.id for t in tasks if leaked & {t.id, t.query, world_key(t)}]
    if bad:
        raise SystemExit(f"--task-store {path} holds {len(bad)} held-out task(s) or task(s) of held-out "
                         f"worlds ({', '.join(bad[:3])}); supervising them would leak the evaluation")  # fmt: skip
    return tasks


def selection_key(figures: dict[str, float], band_max: float) -> tuple[float, bool, float]:
    """Which warm-start checkpoint to keep (the largest key): well-formed calls first (90% is
    enough), then easy-level success inside the band (the more the better), else the least above it.
    """
    easy = (figures.get("success_l1", 0) + figures.get("success_l2", 0)) / 2
    in_band = easy <= band_max
    return (min(figures["parse_rate"], 0.9), in_band, easy if in_band else -easy)


def plot_history(history_path: Path, png_path: Path) -> None:
    """Held-out success per level and the share of well-formed calls against training time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in history_path.read_text().splitlines() if line.strip()]
    if not rows:
        return
    # a continued run restarts its clock: lay the runs end to end
    offset, last, minutes = 0.0, -1.0, []
    for row in rows:
        if row["minutes"] < last:
            offset += last
        last = row["minutes"]
        minutes.append(offset + row["minutes"])
    fig, ax = plt.subplots(figsize=(7, 4))
    for level in (1, 2, 3):
        ax.plot(minutes, [r.get(f"success_l{level}", 0) for r in rows], marker="o", label=f"success, level {level}")
    ax.plot(minutes, [r["parse_rate"] for r in rows], "k--", label="well-formed calls")
    ax.axhspan(0.2, 0.6, color="green", alpha=0.08, label="target band (easy levels)")
    ax.set(xlabel="training minutes (2 CPU cores)", ylabel="held-out share", ylim=(0, 1.02),
           title="Tiny policy warm start (T=1 samples, in-process)")  # fmt: skip
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(DEFAULT_CHECKPOINT), help="output directory of the checkpoint")
    p.add_argument("--minutes", type=float, default=60.0, help="training time budget")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup-steps", type=int, default=200, help="linear warm-up of the learning rate")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--examples", type=int, default=30_000, help="training conversations to encode")
    p.add_argument("--eval-tasks", type=int, default=90, help="held-out tasks per evaluation")
    p.add_argument("--eval-every", type=float, default=5.0, help="minutes between evaluations")
    p.add_argument("--max-easy-success", type=float, default=0.6, help="keep checkpoints at or below this")
    p.add_argument("--mistake-rate", type=float, default=0.3, help="share of chats with a recovered mistake")
    p.add_argument("--l3-fraction", type=float, default=0.5, help="share of level-3 examples kept")
    p.add_argument("--stop-above-band", action="store_true", help="stop once easy success exceeds the band")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--init-from", help="continue training this checkpoint instead of starting from scratch")
    p.add_argument("--experience-rate", type=float, default=0.0,
                   help="share of chats with the retrieved experience block in their system message")  # fmt: skip
    p.add_argument("--experience-pool", help="pool directory (rules extractor on training-task rollouts only)")
    p.add_argument("--experience-top-k", type=int, default=3, help="experiences per block (trimmed to fit)")
    p.add_argument("--eval-split", choices=["test", "validation"], default="test",
                   help="evaluate on the held-out split or on training-split tasks from 200000 on")  # fmt: skip
    p.add_argument("--task-store", help="also supervise this TaskStore's tasks (synthetic tasks of training worlds)")
    p.add_argument("--keep", choices=["best", "last"], default="best",
                   help="save the checkpoint selection_key prefers, or the last one evaluated")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> None:
    warm_start(make_parser().parse_args(argv))


if __name__ == "__main__":
    main()

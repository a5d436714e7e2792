"""Supervised warm start of any Hugging Face causal LM on the sandbox's reference solutions.

A pretrained instruct model does not know this project's tools or the sandbox's tasks; zero-shot
SmolLM2-135M-Instruct writes prose or code instead of tool calls. RL needs a policy that
succeeds *sometimes*, so it starts from a short supervised stage, as the tiny policy does
(``trainers/tiny.py``, whose chats, mistakes and masking this reuses):

- the training split's reference solutions (with a share of recovered mistakes whose wrong
  call is left out of the loss) rendered with **the model's own chat template**, which must
  render tools (``trainers.tool_templates.check_renders_tools``; ``--template`` installs one);
- loss on assistant tokens only;
- LoRA on every linear layer by default (``--full`` trains all weights);
- validation while it trains: batched rollouts, in-process, on training-split tasks that are
  never supervised (``--eval-split test`` for the held-out split); the best checkpoint by
  validation reward is kept;
- a time budget (``--minutes``), then ``warm_start_summary.json``, ``warm_start_history.jsonl``
  and ``warm_start.png`` beside the adapter.

The output directory is a LoRA adapter (a few MB) with the tokenizer; wherever a model path is
read, such a directory stands for its base with the adapter merged (``trainers.models.resolve_model``).
Commands::

    python -m trainers.warm_start --model smollm2-135m-instruct --out checkpoints/smollm2-warm --minutes 60
    python -m trainers.warm_start --model <dir> --out runs/warm --full --lr 5e-5 --minutes 30
    python -m trainers.warm_start --model smollm2-135m-instruct --template compact_doc --synthetic-share 0.5 \
        --exclude-apps calendar --out runs/warm-transfer --minutes 60   # docs/transfer.md
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

from env_tools.sandbox import SandboxEnvironment
from env_tools.sandbox.pools import split_tasks
from langgraph_evolver.types import Task

from .pools import check_disjoint, record_supervised
from .synthetic_domains import sandbox_count, supervised_chats, supervised_tasks
from .tiny import apply_reply, encode_example, padded_batches, supervised_step

__all__ = ["batched_rollouts", "enable_checkpointing", "summarize_rollouts", "warm_start"]


def batched_rollouts(model: Any, tokenizer: Any, tasks: list[Task], *, temperature: float = 1.0, max_turns: int = 8,
                     max_new_tokens: int = 96, batch_size: int = 16,
                     seed: int = 0) -> list[dict[str, Any]]:  # fmt: skip
    """Run every task to its end, all turns of all tasks batched (left padding), by the agent
    graph's rules: an unparseable call gets the graph's feedback turn, a reply without a call ends
    the episode. Per task: score, success, calls made, well-formed calls, level."""
    import torch

    from graphs.agent import PARSE_ERROR_FEEDBACK

    torch.manual_seed(seed)
    states = []
    for task in tasks:
        env = SandboxEnvironment()
        obs = env.reset(task)
        states.append({"env": env, "tools": obs.tools, "messages": list(obs.messages), "done": False,
                       "calls": 0, "parsed": 0, "level": task.metadata.get("level")})  # fmt: skip
    pad_side, tokenizer.padding_side = tokenizer.padding_side, "left"
    try:
        for _ in range(max_turns):
            live = [s for s in states if not s["done"]]
            if not live:
                break
            for b in range(0, len(live), batch_size):
                chunk = live[b : b + batch_size]
                prompts = [tokenizer.apply_chat_template(s["messages"], tools=s["tools"], add_generation_prompt=True,
                                                         tokenize=False) for s in chunk]  # fmt: skip
                enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
                sampled = temperature > 0
                with torch.no_grad():
                    out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=sampled,
                                         temperature=temperature if sampled else None, top_k=0 if sampled else None,
                                         top_p=1.0 if sampled else None,
                                         pad_token_id=tokenizer.pad_token_id)  # fmt: skip
                for s, row in zip(chunk, out, strict=True):
                    apply_reply(
                        s,
                        tokenizer.decode(row[enc.input_ids.shape[1] :], skip_special_tokens=True),
                        PARSE_ERROR_FEEDBACK,
                    )
    finally:
        tokenizer.padding_side = pad_side
    return [{"score": s["env"].evaluate(), "calls": s["calls"], "parsed": s["parsed"], "level": s["level"]}
            for s in states]  # fmt: skip


def summarize_rollouts(results: list[dict[str, Any]]) -> dict[str, float]:
    n = len(results)
    scores = [r["score"] for r in results]
    mean = sum(scores) / n
    var = sum((x - mean) ** 2 for x in scores) / max(1, n - 1)
    calls = sum(r["calls"] for r in results)
    out = {"avg": round(mean, 4), "se": round(math.sqrt(var / n), 4),
           "success": round(sum(x == 1.0 for x in scores) / n, 4),
           "well_formed": round(sum(r["parsed"] for r in results) / calls, 4) if calls else 0.0}  # fmt: skip
    for level in (1, 2, 3):
        rs = [r["score"] for r in results if r["level"] == level]
        if rs:
            out[f"avg_l{level}"] = round(sum(rs) / len(rs), 4)
    return out


def _load(args: argparse.Namespace) -> tuple[Any, Any, str]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .models import MODELS, resolve_model
    from .tool_templates import TEMPLATES, check_renders_tools

    path = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if args.template:
        tokenizer.chat_template = TEMPLATES[args.template]
    check_renders_tools(tokenizer, where=f"trainers.warm_start --model {args.model}")
    if tokenizer.pad_token is None:
        raise SystemExit(f"{path}: the tokenizer has no pad token; set one in its tokenizer_config.json")
    model = AutoModelForCausalLM.from_pretrained(path)
    base_name = args.model if args.model in MODELS else str(Path(path).resolve())
    return model, tokenizer, base_name


def enable_checkpointing(model: Any, *, lora: bool) -> None:
    """Recompute activations in the backward pass (transformers' ``activation_checkpointing_enable``: the
    ``gradient_checkpointing_enable`` alias goes in v6). With LoRA the embeddings are frozen, so the checkpointed
    blocks' inputs must carry gradients themselves."""
    model.activation_checkpointing_enable()
    if lora:
        model.enable_input_require_grads()


def warm_start(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from tqdm import tqdm

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model, tokenizer, base_name = _load(args)
    if not args.full:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))  # fmt: skip
    if args.gradient_checkpointing:
        enable_checkpointing(model, lora=not args.full)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    tasks = supervised_tasks(args)  # the sft pool (trainers.pools), less --exclude-apps
    chats = supervised_chats(args, tasks)
    examples = [encode_example(tokenizer, *chat) for chat in tqdm(chats, desc="encoding", mininterval=2)]
    examples = [e for e in examples if len(e[0]) <= args.max_length]
    lengths = sorted(len(x) for x, _ in examples)
    print(f"{base_name}: {trainable / 1e6:.2f}M trainable parameters ({'all' if args.full else 'LoRA'}); "
          f"{len(examples)} chats, tokens median {lengths[len(lengths) // 2]} max {lengths[-1]}")  # fmt: skip
    eval_tasks = split_tasks(f"{args.eval_split}:{args.eval_tasks}")
    check_disjoint({"sft": tasks, args.eval_split: eval_tasks})  # refuses an overlap before any training
    record_supervised(out, tasks, split=f"sft:{sandbox_count(args)}")  # trainers.grpo checks its tasks against it
    batches = padded_batches(examples, args.batch_size, tokenizer.pad_token_id, random.Random(0))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0 if not args.full else 0.01)
    history_path = out / "warm_start_history.jsonl"
    history_path.unlink(missing_ok=True)
    history: list[dict[str, Any]] = []
    best: tuple[float, int] | None = None

    def evaluate(step: int, elapsed: float, loss: float | None) -> None:
        nonlocal best
        model.eval()
        e0 = time.perf_counter()
        results = batched_rollouts(model, tokenizer, eval_tasks, temperature=1.0, batch_size=args.eval_batch_size)
        figures = summarize_rollouts(results) | {"step": step, "minutes": round(elapsed / 60, 1),
                                                 "loss": loss, "eval_split": args.eval_split,
                                                 "eval_seconds": round(time.perf_counter() - e0)}  # fmt: skip
        history.append(figures)
        tqdm.write(json.dumps(figures))
        with history_path.open("a") as f:
            f.write(json.dumps(figures) + "\n")
        if step > 0 and (args.keep == "last" or best is None or figures["avg"] >= best[0]):
            best = (figures["avg"], step)
            model.save_pretrained(out, safe_serialization=True)
            tokenizer.save_pretrained(out)
        model.train()

    if args.eval_at_start:
        evaluate(0, 0.0, None)
    budget, step, next_eval = args.minutes * 60, 0, args.eval_every * 60
    bar = tqdm(total=int(budget), desc="warm-start", unit="s", mininterval=5)
    train_start = time.perf_counter()
    losses: list[float] = []
    model.train()
    while (elapsed := time.perf_counter() - train_start) < budget:
        lr = (
            args.lr
            * min(1.0, (step + 1) / args.warmup_steps)
            * (0.1 + 0.45 * (1 + math.cos(math.pi * elapsed / budget)))
        )
        for group in opt.param_groups:
            group["lr"] = lr
        loss = supervised_step(model, opt, params, next(batches))
        step += 1
        losses.append(loss)
        bar.update(int(time.perf_counter() - train_start) - bar.n)
        bar.set_postfix(step=step, loss=f"{loss:.3f}", refresh=False)
        done = time.perf_counter() - train_start >= budget
        if elapsed >= next_eval or done:
            next_eval += args.eval_every * 60
            recent = losses[-20:]
            evaluate(step, time.perf_counter() - train_start, round(sum(recent) / len(recent), 4))
    bar.close()
    if not args.full:  # the adapter names its base by registry name, so a committed adapter works on any machine
        cfg_path = out / "adapter_config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["base_model_name_or_path"] = base_name
        cfg_path.write_text(json.dumps(cfg, indent=2))
    summary = {"base_model": base_name, "mode": "full" if args.full else f"lora r{args.lora_r}",
               "trainable_params": trainable, "steps": step, "batch_size": args.batch_size, "lr": args.lr,
               "chats": len(examples), "synthetic_share": args.synthetic_share, "exclude_apps": args.exclude_apps,
               "wall_min": round((time.perf_counter() - t0) / 60, 1),
               "chosen_step": best[1] if best else None,
               "chosen": next((h for h in history if best and h["step"] == best[1]), None),
               "start": history[0] if history and history[0]["step"] == 0 else None,
               "command": "python -m trainers.warm_start " + " ".join(sys.argv[1:])}  # fmt: skip
    (out / "warm_start_summary.json").write_text(json.dumps(summary, indent=2))
    plot_history(history_path, out / "warm_start.png", title=f"Warm start of {base_name} ({summary['mode']})")
    print(json.dumps(summary))
    return summary


def plot_history(history_path: Path, png_path: Path, *, title: str) -> None:
    """Validation reward, success and well-formed calls (left axis) and training loss (right) by minute."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in history_path.read_text().splitlines() if line.strip()]
    if not rows:
        return
    minutes = [r["minutes"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.errorbar(minutes, [r["avg"] for r in rows], yerr=[r["se"] for r in rows], marker="o", capsize=3,
                label="reward (mean ± SE)")  # fmt: skip
    ax.plot(minutes, [r["success"] for r in rows], marker="s", label="success")
    ax.plot(minutes, [r["well_formed"] for r in rows], "k--", label="well-formed calls")
    ax.set(
        xlabel="training minutes (2 CPU cores)", ylabel=f"{rows[0]['eval_split']} share", ylim=(0, 1.02), title=title
    )
    trained = [r for r in rows if r.get("loss") is not None]
    if trained:
        twin = ax.twinx()
        twin.plot([r["minutes"] for r in trained], [r["loss"] for r in trained], color="grey", alpha=0.6, label="loss")
        twin.set_ylabel("training loss (last 20 steps)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a checkpoint directory or a trainers.models name")
    p.add_argument("--out", required=True, help="where the adapter (or, with --full, the model) is written")
    p.add_argument("--template", help="install this tool template first (compact, hermes, list)")
    p.add_argument("--full", action="store_true", help="train all weights instead of a LoRA adapter")
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--lora-alpha", type=int, default=32)
    p.add_argument("--minutes", type=float, default=60.0, help="training time budget")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (LoRA; try 5e-5 with --full)")
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--examples", type=int, default=4000, help="training-split chats to encode")
    p.add_argument("--max-length", type=int, default=2048, help="drop longer chats")
    p.add_argument(
        "--synthetic-share",
        type=float,
        default=0.0,
        help="share of chats from generated tool domains (trainers/synthetic_domains.py), rest sandbox",
    )
    p.add_argument(
        "--exclude-apps",
        type=lambda s: [a for a in s.split(",") if a],
        default=[],
        metavar="APP[,APP]",
        help="no supervised chat uses these sandbox apps' tools (leave-one-app-out transfer)",
    )
    p.add_argument("--mistake-rate", type=float, default=0.2, help="share of chats with a recovered mistake")
    p.add_argument("--l3-fraction", type=float, default=0.5, help="share of level-3 chats kept")
    p.add_argument("--eval-tasks", type=int, default=32)
    p.add_argument("--eval-every", type=float, default=10.0, help="minutes between evaluations")
    p.add_argument("--eval-split", choices=["validation", "test"], default="validation")
    p.add_argument("--eval-batch-size", type=int, default=16)
    p.add_argument(
        "--eval-at-start",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="evaluate before training (the zero-shot figure with this template)",
    )
    p.add_argument("--keep", choices=["best", "last"], default="best")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    return p


def main(argv: list[str] | None = None) -> None:
    warm_start(make_parser().parse_args(argv))


if __name__ == "__main__":
    main()

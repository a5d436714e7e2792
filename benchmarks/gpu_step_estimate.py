"""What one GRPO step of ``examples/smollm2_cpu.yaml`` costs on an accelerator: generation and training, timed apart.

The CPU recipe's step (8 tasks x 4 rollouts, up to 8 turns of up to 96 new tokens, the trainer's forward and
backward with LoRA r16 over the rollouts' tokens) took 92-420 s on 2 cores (docs/real-model.md). This times its
two halves with nothing but torch, transformers and peft, so it runs on a bare GPU machine: ``--rollouts``
sequences of ``--prompt_tokens`` generate ``--new_tokens`` each (every token, no early stop; a KV cache, bf16
weights), and the trainer's pass (bf16 autocast, fp32 log-softmax over the vocabulary, as ``trainers.grpo``
computes it) runs over the same rollouts at ``--train_tokens`` each, in microbatches of
``--tokens_per_microbatch``, then one AdamW step. The weights are SmolLM2-135M's, or random ones of its
architecture from ``--config`` (a ``config.json``'s folder): the time does not depend on their values. One JSON
line at the end: the median seconds of each half and ``step_s`` = ``--turns`` generations + one training pass.

    python -m benchmarks.gpu_step_estimate --config DIR [--device cuda] [--repeats 3]

Generation here is transformers' ``generate``, not vLLM's paged batching, so ``generate_s`` is an upper
estimate of what a served model takes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _model(args: argparse.Namespace, dtype: torch.dtype) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    if args.config:
        config = AutoConfig.from_pretrained(args.config)
        return AutoModelForCausalLM.from_config(config, dtype=dtype).to(args.device)
    from trainers.models import resolve_model

    path = str(resolve_model("smollm2-135m-instruct"))
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(args.device)


def time_generation(args: argparse.Namespace) -> list[float]:
    """Seconds to generate ``new_tokens`` for ``rollouts`` prompts at once, per repeat (after one warm-up)."""
    model = _model(args, torch.bfloat16).eval()
    ids = torch.randint(100, model.config.vocab_size, (args.rollouts, args.prompt_tokens), device=args.device)
    options = {"max_new_tokens": args.new_tokens, "min_new_tokens": args.new_tokens, "do_sample": True,
               "top_k": 0, "temperature": 1.0, "pad_token_id": 0}  # fmt: skip
    out = []
    with torch.no_grad():
        for i in range(args.repeats + 1):
            _sync(args.device)
            started = time.perf_counter()
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **options)
            _sync(args.device)
            if i:
                out.append(round(time.perf_counter() - started, 3))
    del model
    return out


def time_training(args: argparse.Namespace) -> list[float]:
    """Seconds of one training pass (forward, backward, AdamW) over ``rollouts`` x ``train_tokens``, per repeat."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_model(args, torch.float32), LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    ids = torch.randint(100, model.config.vocab_size, (args.rollouts, args.train_tokens), device=args.device)
    per_batch = max(1, args.tokens_per_microbatch // args.train_tokens)
    kind = "cuda" if args.device.startswith("cuda") else "cpu"
    out = []
    for i in range(args.repeats + 1):
        _sync(args.device)
        started = time.perf_counter()
        for start in range(0, args.rollouts, per_batch):
            batch = ids[start : start + per_batch]
            with torch.autocast(kind, dtype=torch.bfloat16):
                logits = model(input_ids=batch).logits[:, :-1].float()
            logps = torch.log_softmax(logits, -1).gather(-1, batch[:, 1:, None]).squeeze(-1)
            (logps.mean() * len(batch) / args.rollouts).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(args.device)
        if i:
            out.append(round(time.perf_counter() - started, 3))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="", help="a config.json's folder: random weights of that architecture")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--rollouts", type=int, default=32, help="rollouts per step (the CPU recipe: 8 tasks x 4)")
    p.add_argument("--prompt_tokens", type=int, default=1200)
    p.add_argument("--new_tokens", type=int, default=96, help="max_completion_length of the CPU recipe")
    p.add_argument("--turns", type=int, default=4, help="generations per rollout counted in step_s")
    p.add_argument("--train_tokens", type=int, default=1600)
    p.add_argument("--tokens_per_microbatch", type=int, default=32768)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    generate = time_generation(args)
    train = time_training(args)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"cpu x{torch.get_num_threads()}"
    gen_s, train_s = statistics.median(generate), statistics.median(train)
    print(json.dumps({"device": name, "generate_s": generate, "train_s": train, "rollouts": args.rollouts,
                      "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens, "turns": args.turns,
                      "train_tokens": args.train_tokens, "step_s": round(args.turns * gen_s + train_s, 2),
                      "torch": torch.__version__}))  # fmt: skip


if __name__ == "__main__":
    main()

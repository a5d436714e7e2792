"""One trainer forward+backward of SmolLM2-135M with LoRA r16 on 2 x 1,024 tokens, fp32 vs bf16 autocast, alternating.

What ``train_dtype: auto`` rests on (docs/real-model.md, "Training precision"): the loss path of the trainer
(the model's forward, fp32 log-softmax over the vocabulary at every position, the backward into the LoRA
weights) with the weights in fp32, once as is and once under ``torch.autocast("cpu", dtype=torch.bfloat16)``,
the two taking turns for ``--repeats`` pairs after one warm-up each. Prints each pass's seconds with the load
average, then one JSON line (the cores are shared: compare the two within a pair).

    python -m benchmarks.train_step_precision [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def main() -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from trainers.models import resolve_model

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(str(resolve_model("smollm2-135m-instruct")), dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS))
    ids = torch.randint(0, model.config.vocab_size, (2, 1024))

    def step(bf16: bool) -> float:
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=ids).logits[:, :-1].float()
            logps = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        logps.mean().backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - started

    step(False), step(True)  # warm-up
    seconds: dict[str, list[float]] = {"float32": [], "bfloat16": []}
    for _ in range(args.repeats):
        for name in seconds:
            seconds[name].append(round(step(name == "bfloat16"), 2))
            print(name, seconds[name][-1], "s, load", os.getloadavg()[0], flush=True)
    ratios = [round(f / b, 2) for f, b in zip(seconds["float32"], seconds["bfloat16"], strict=True)]
    print(json.dumps({**seconds, "speedup_per_pair": ratios, "threads": args.threads}))


if __name__ == "__main__":
    main()

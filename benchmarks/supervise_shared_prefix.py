"""``adapt``'s supervised step with the batch's shared opening computed once, against the ordinary step.

The chats are an adapt run's own (its sft part, made into supervised examples as its supervise phase makes them)
on SmolLM2-135M with the LoRA adapter adapt trains (r16, every linear layer), under the precision adapt trains in
(``--train_dtype auto``: bf16 autocast where the CPU has it). The same batches (``padded_batches``, 4 rows) go
through both, taking turns, forward and backward, gradients dropped; each pair also compares the two losses.
Prints each pair with the load average, then one JSON line (the cores are shared: compare within a pair).

    python -m benchmarks.supervise_shared_prefix --run runs/r69/adapt-budget-1 \\
        --env "mcp:python examples/mcp_servers/budget.py" [--batches 8] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from langgraph_evolver.environment import environment_factory
    from trainers.evolve.adapt import LORA, tasks_file
    from trainers.evolve.adapt_data import supervised_examples
    from trainers.models import resolve_model
    from trainers.shared_prefix import batch_loss, shared_prefix_length
    from trainers.tiny import padded_batches
    from trainers.train_precision import precision_context, resolve_train_dtype

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", required=True, help="a finished adapt run (its 2-split/sft.jsonl)")
    p.add_argument("--env", required=True, help="the run's --env")
    p.add_argument("--model_path", default="checkpoints/smollm2-warm-doc")
    p.add_argument("--tasks", type=int, default=12, help="sft tasks made into examples")
    p.add_argument("--batches", type=int, default=8, help="batch pairs timed (after one warm-up pair)")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model_path = resolve_model(args.model_path)
    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    tasks = tasks_file(Path(args.run) / "2-split" / "sft.jsonl")[: args.tasks]
    examples, _ = supervised_examples(tasks, [], tokenizer, environment_factory(args.env), swaps=3, repeats=True)
    base = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=LORA["lora_r"], lora_alpha=LORA["lora_alpha"],
                                            target_modules=LORA["lora_target_modules"]))  # fmt: skip
    dtype = resolve_train_dtype("auto", num_parameters=sum(p.numel() for p in base.parameters()))
    batches = padded_batches(examples, 4, tokenizer.pad_token_id, random.Random(0))

    def timed(batch, share: bool) -> tuple[float, float]:
        started = time.perf_counter()
        with precision_context(dtype):
            loss = batch_loss(model, *batch, share_prefix=share)  # what adapt's supervised step computes
        loss.backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - started, loss.item()

    seconds: dict[str, list[float]] = {"ordinary": [], "shared": []}
    tokens, shared_tokens, loss_gaps = [], [], []
    for i in range(args.batches + 1):
        batch = next(batches)
        (a, loss_a), (b, loss_b) = timed(batch, False), timed(batch, True)
        if i == 0:
            continue  # warm-up
        seconds["ordinary"].append(round(a, 2))
        seconds["shared"].append(round(b, 2))
        ids, labels, mask = batch
        prefix = shared_prefix_length(ids, labels, mask)
        tokens.append(int(ids.numel()))
        shared_tokens.append(prefix * (ids.shape[0] - 1))
        loss_gaps.append(abs(loss_a - loss_b) / max(abs(loss_a), 1e-9))
        print(f"batch {i}: {tuple(ids.shape)} shared {prefix}: ordinary {a:.2f} s, shared {b:.2f} s, "
              f"loss {loss_a:.4f} / {loss_b:.4f}, load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    ratios = [round(a / b, 2) for a, b in zip(seconds["ordinary"], seconds["shared"], strict=True)]
    result = {**seconds, "speedup_per_pair": ratios, "speedup_median": statistics.median(ratios),
              "tokens_saved": round(sum(shared_tokens) / sum(tokens), 3), "loss_rel_gap_max": max(loss_gaps),
              "examples": len(examples), "dtype": str(dtype).removeprefix("torch."),
              "threads": args.threads}  # fmt: skip
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

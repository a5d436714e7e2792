"""Which tool-calling format a real model knows: valid-call rate zero-shot, per chat template.

For each template of ``trainers.tool_templates.TEMPLATES``, renders the first turn of sandbox
training-split tasks (system line, question, the task's tools), lets the model write its first
reply (HF ``generate``, batched, left-padded) and counts:

- ``valid``: the reply parses (``trainers.chat_format.parse_tool_calls``) into at least one call,
  every call names one of the task's tools and its arguments decode to an object;
- ``right_tool``: valid and the first call is the reference solution's first tool;
- ``any_call``: the reply opens a ``<tool_call>`` block at all;
- ``prompt_tokens``: mean prompt length (what each turn costs the server).

Greedy and ``--samples`` draws at temperature 1 (the rollout temperature). The template picked
for ``trainers.models`` is the one with the highest valid rate; ties go to the fewest prompt
tokens. Ends with one JSON line, also written to ``benchmarks/results/tool_templates.json``::

    python -m benchmarks.tool_templates --model smollm2-135m-instruct --tasks 48 --samples 2
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def first_turn_prompts(n_tasks: int, start: int = 0) -> list[dict[str, Any]]:
    from env_tools.sandbox import SandboxEnvironment, generate_tasks

    out = []
    for task in generate_tasks("train", n_tasks, start=start):
        obs = SandboxEnvironment().reset(task)
        names = [t["function"]["name"] for t in obs.tools]
        first = task.reference_solution[0].name if task.reference_solution else None
        out.append({"messages": list(obs.messages), "tools": obs.tools, "names": names, "first": first})
    return out


def judge(text: str, names: list[str], first: str | None) -> dict[str, bool]:
    from trainers.chat_format import parse_tool_calls

    parsed = parse_tool_calls(text)
    calls = parsed.tool_calls if parsed.parse_error is None else []
    valid = bool(calls) and all(
        c["function"]["name"] in names and isinstance(json.loads(c["function"]["arguments"]), dict) for c in calls
    )
    return {
        "valid": valid,
        "right_tool": valid and calls[0]["function"]["name"] == first,
        "any_call": "<tool_call>" in text,
    }


def measure(model: Any, tokenizer: Any, template: str, items: list[dict[str, Any]], *, samples: int,
            batch_size: int, max_new_tokens: int) -> dict[str, Any]:  # fmt: skip
    import torch

    rows: list[dict[str, bool]] = []
    lengths, examples = [], []
    prompts = [
        tokenizer.apply_chat_template(
            it["messages"], tools=it["tools"], chat_template=template, add_generation_prompt=True, tokenize=False
        )  # fmt: skip
        for it in items
    ]
    draws = [("greedy", None)] + [("sampled", s) for s in range(samples)]
    figures: dict[str, Any] = {}
    for kind, seed in draws:
        kind_rows = []
        for b in range(0, len(items), batch_size):
            batch = prompts[b : b + batch_size]
            enc = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False)
            lengths += enc.attention_mask.sum(1).tolist() if seed is None else []
            if seed is not None:
                torch.manual_seed(1000 * seed + b)
            sampling = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0} if seed is not None else {}
            with torch.no_grad():
                out = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                     **({"do_sample": False} | sampling))  # fmt: skip
            for row, it in zip(out, items[b : b + batch_size], strict=True):
                text = tokenizer.decode(row[enc.input_ids.shape[1] :], skip_special_tokens=True)
                kind_rows.append(judge(text, it["names"], it["first"]))
                if len(examples) < 3 and kind == "greedy":
                    examples.append(text[:200])
        figures[kind] = {k: round(sum(r[k] for r in kind_rows) / len(kind_rows), 3) for k in kind_rows[0]}
        rows += kind_rows
    figures["valid"] = round(sum(r["valid"] for r in rows) / len(rows), 3)
    figures["right_tool"] = round(sum(r["right_tool"] for r in rows) / len(rows), 3)
    figures["replies"] = len(rows)
    figures["prompt_tokens"] = round(sum(lengths) / len(lengths), 1)
    figures["greedy_examples"] = examples
    return figures


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct", help="a checkpoint directory or a trainers.models name")
    p.add_argument("--tasks", type=int, default=48, help="training-split tasks (first turn each)")
    p.add_argument("--samples", type=int, default=2, help="draws at temperature 1 per task, besides greedy")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "tool_templates.json"))
    args = p.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainers.models import resolve_model
    from trainers.tool_templates import TEMPLATES

    torch.set_num_threads(args.threads)
    path = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    items = first_turn_prompts(args.tasks)
    results: dict[str, Any] = {}
    for name, template in TEMPLATES.items():
        t0 = time.perf_counter()
        results[name] = measure(model, tokenizer, template, items, samples=args.samples,
                                batch_size=args.batch_size, max_new_tokens=args.max_new_tokens)  # fmt: skip
        results[name]["seconds"] = round(time.perf_counter() - t0, 1)
        print(name, json.dumps(results[name]), file=sys.stderr)
    chosen = max(results, key=lambda n: (results[n]["valid"], -results[n]["prompt_tokens"]))
    command = "python -m benchmarks.tool_templates " + " ".join(sys.argv[1:] if argv is None else argv)
    summary = {"model": str(args.model), "tasks": args.tasks, "split": "train", "samples": args.samples,
               "chosen": chosen, "templates": results,
               "command": command}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "templates"}
                     | {n: {"valid": r["valid"], "right_tool": r["right_tool"], "prompt_tokens": r["prompt_tokens"]}
                        for n, r in results.items()}))  # fmt: skip
    return summary


if __name__ == "__main__":
    main()

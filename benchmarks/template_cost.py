"""What each tool template costs in prompt tokens: ``compact`` against ``compact_doc`` (issue 43).

``compact_doc`` shows each tool's argument types and first description line, so a model can read a tool
it never saw; every turn pays for those tokens. This renders the first turn (system line, question,
tools) with each template and the model's tokenizer and counts the tokens, for the sandbox's
training-split tasks (their tools, as the warm start sees them) and for each MCP server named by
``--env`` (its tools as ``McpEnvironment`` gives them to the agent). No model is run. Ends with one JSON
line::

    python -m benchmarks.template_cost --env "mcp:python examples/mcp_servers/clinic.py"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TEMPLATE_NAMES = ("compact", "compact_doc")


def mcp_prompt(spec: str) -> dict[str, Any]:
    """The first turn an agent gets from the MCP server ``spec`` (its tools, a system line, a question)."""
    from langgraph_evolver.environment import load_environment
    from langgraph_evolver.types import Task

    env = load_environment(spec)
    try:
        obs = env.reset(Task(id="template-cost", query="Do what I need with your tools.", env=spec))
        return {"messages": list(obs.messages), "tools": obs.tools}
    finally:
        env.close()


def prompt_tokens(tokenizer: Any, items: list[dict[str, Any]], template: str) -> float:
    texts = [tokenizer.apply_chat_template(it["messages"], tools=it["tools"], chat_template=template,
                                           add_generation_prompt=True, tokenize=False) for it in items]  # fmt: skip
    lengths = [len(tokenizer(text, add_special_tokens=False).input_ids) for text in texts]
    return round(sum(lengths) / len(lengths), 1)


def costs(tokenizer: Any, items: list[dict[str, Any]]) -> dict[str, Any]:
    from trainers.tool_templates import TEMPLATES

    out: dict[str, Any] = {name: prompt_tokens(tokenizer, items, TEMPLATES[name]) for name in TEMPLATE_NAMES}
    out["tools"] = round(sum(len(it["tools"]) for it in items) / len(items), 1)
    out["extra_tokens"] = round(out["compact_doc"] - out["compact"], 1)
    out["ratio"] = round(out["compact_doc"] / out["compact"], 2)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct", help="whose tokenizer counts (a directory or a name)")
    p.add_argument("--tasks", type=int, default=48, help="sandbox training-split tasks (first turn each)")
    p.add_argument("--env", action="append", default=[], help="an MCP server spec (mcp:...); repeatable")
    args = p.parse_args(argv)
    from transformers import AutoTokenizer

    from benchmarks.tool_templates import first_turn_prompts
    from trainers.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(args.model))
    result: dict[str, Any] = {"model": args.model, "unit": "prompt tokens of the first turn (mean)",
                              "sandbox": costs(tokenizer, first_turn_prompts(args.tasks))}  # fmt: skip
    for spec in args.env:
        result[spec] = costs(tokenizer, [mcp_prompt(spec)])
    result["command"] = "python -m benchmarks.template_cost " + " ".join(sys.argv[1:] if argv is None else argv)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

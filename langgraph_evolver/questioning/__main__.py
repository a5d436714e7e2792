"""Synthesize filtered tasks for any environment and store them in SQLite.

Explores the environment with the schema-driven explorer, synthesizes tasks offline, filters
them (invalid references, near-duplicates of kept/seed/held-out tasks and of the tasks ``--out``
already holds, infeasible references), writes the kept ones with their provenance to ``--out``
and prints a summary of the filters, then one JSON line with the figures: ``kept``, ``stored``
(new in ``--out``; equal to ``kept`` unless ``dropped_at_store`` says why not), ``in_store``,
``state_changing`` (share of the kept tasks whose reference changes the state), ``initial_states``,
``unreached`` (tools no exploration reached, with the id argument no earlier result held and the tools
whose results could have). Exits 0 when ``--n`` tasks were stored, 1 when fewer.

Run:

    python -m langgraph_evolver.questioning --env sandbox --n 50 --out runs/tasks.sqlite
    python -m langgraph_evolver.questioning --setup examples/langchain_tools_env.py:register_todo_environment \\
        --env todo --n 20 --out runs/todo_tasks.sqlite
    python -m langgraph_evolver.questioning --env my_pkg.envs:make_env --n 200 --out tasks.sqlite
    # an LLM explores and writes the tasks (any init_chat_model string; --base-url for vLLM):
    python -m langgraph_evolver.questioning --env sandbox --n 100 --out runs/tasks.sqlite \
        --explorer openai:Qwen2.5-7B-Instruct --synthesizer openai:Qwen2.5-7B-Instruct \
        --base-url http://localhost:8000/v1
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from langgraph_evolver.chat_model import chat_model_from_spec as chat_model  # the --model spec (also env_tools')
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.loading import load_object

from .pipeline import synthesize_tasks
from .store import TaskStore


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m langgraph_evolver.questioning", description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="sandbox", help="registered environment name or 'module:factory' path")
    parser.add_argument("--n", type=int, default=50, help="tasks to keep")
    parser.add_argument("--out", default="runs/tasks.sqlite", help="SQLite TaskStore to write")
    parser.add_argument("--jsonl", default=None, help="also export the store to this JSONL file")
    parser.add_argument("--seed", type=int, default=0, help="exploration/synthesis seed")
    parser.add_argument(
        "--setup",
        action="append",
        default=[],
        help="call 'module:function' or 'path/to/file.py:function' first (e.g. one that registers the env)",
    )
    parser.add_argument("--n-breadth", type=int, default=3, help="breadth-phase calls per exploration")
    parser.add_argument("--n-depth", type=int, default=17, help="depth-phase calls per exploration")
    parser.add_argument("--max-ops", type=int, default=3, help="most calls in one task (difficulty)")
    parser.add_argument("--per-exploration", type=int, default=20, help="candidates sampled per exploration")
    parser.add_argument("--threshold", type=float, default=0.9, help="near-duplicate embedding cosine")
    parser.add_argument("--max-explorations", type=int, default=None, help="exploration budget (default 2n+10)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--explorer", default="schema",
                        help="'schema' (offline, default), 'policy:<served name>' (our policy endpoint, token ids "
                             "recorded) or an init_chat_model string such as 'openai:gpt-4.1-mini'")  # fmt: skip
    parser.add_argument("--synthesizer", default="offline",
                        help="'offline' (default) or a chat model spec as for --explorer")  # fmt: skip
    parser.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint for the model specs")
    parser.add_argument("--api-key", default=None,
                        help="API key for --base-url (default: $EVOLVER_POLICY_API_KEY for policy:<name>, else "
                        "$OPENAI_API_KEY, else 'EMPTY')")  # fmt: skip
    return parser


def run_setup(target: str) -> None:
    """Call ``module:function`` or ``path/file.py:function`` (no arguments)."""
    location, sep, attr = target.rpartition(":")
    if not sep or not location or not attr:
        raise ConfigError(f"--setup {target!r} must be 'module:function' or 'path/to/file.py:function'.")
    load_object(target, what="--setup")()


def _unreached_line(entry: dict[str, Any]) -> str:
    """One tool no exploration called without an error, and what was missing."""
    name, missing, sources = entry["tool"], entry["missing"], entry["could_come_from"]
    if not entry["calls"] and missing:
        text = f"{name}: no earlier result held {' or '.join(repr(m) for m in missing)}"
        text += f" (results that could: {', '.join(sources)})" if sources else " (no tool's results name that record)"
        return text
    return f"{name}: {entry['calls']} calls, all failed (last: {entry['last_error']})"


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    for target in args.setup:
        run_setup(target)
    with TaskStore(args.out) as store:
        tasks, report = synthesize_tasks(
            args.env,
            args.n,
            seed=args.seed,
            n_breadth=args.n_breadth,
            n_depth=args.n_depth,
            max_ops=args.max_ops,
            per_exploration=args.per_exploration,
            threshold=args.threshold,
            max_explorations=args.max_explorations,
            progress=not args.no_progress,
            explorer=None if args.explorer == "schema" else chat_model(args.explorer, base_url=args.base_url,
                                                                         api_key=args.api_key),
            synthesizer=None if args.synthesizer == "offline" else chat_model(args.synthesizer,
                                                                                base_url=args.base_url,
                                                                                api_key=args.api_key),
            store=store,  # what it holds is skipped while exploring, so the n kept tasks are all new
        )  # fmt: skip
        added, dropped = store.add_many_counted(tasks)
        if args.jsonl:
            store.export_jsonl(args.jsonl)
        total = len(store)
    f = report.filters
    print(f"explored {report.explorations} worlds, {f.candidates} candidates -> {report.kept} kept ({report.seconds}s)")
    for name, count in f.removed.items():
        print(f"  removed by {name}: {count}")
    for reason, count in sorted(f.reasons.items(), key=lambda kv: -kv[1]):
        print(f"    {count:4d}  {reason}")
    print(f"  by level: {report.by_level}; phrasing overlap with seed tasks: {report.phrasing_overlap:.3f}")
    print(f"  explorer {report.explorer}, synthesizer {report.synthesizer} {report.synthesizer_stats or ''}")
    print(
        f"  {report.state_changing:.0%} of the kept tasks change state, "
        f"{report.multi_intent:.0%} ask for several things, {report.named:.0%} name records"
    )
    print(
        f"  stored {added} new tasks in {args.out} ({total} in all)" + (f"; not stored: {dropped}" if dropped else "")
    )
    if report.initial_states > 1:
        print(f"  explored {report.initial_states} initial states")
    for entry in report.unreached:
        print(f"  never reached {_unreached_line(entry)}")
    if added < args.n:
        print(
            f"  only {added} of {args.n} stored: "
            + (
                "the tools above were never reached; more explorations read the same results (see what was missing)"
                if report.unreached
                else f"{report.over_cap} candidates were about a tool that had its share of the tasks "
                "(pipeline.MAX_TOOL_SHARE): the explorations found too few about the other tools"
                if report.over_cap
                else f"raise --max-explorations (spent {report.explorations}) or --n-depth"
            )
        )
    summary = {**report.to_dict(), "out": args.out, "stored": added, "dropped_at_store": dropped, "in_store": total}
    print(json.dumps(summary))
    return 0 if added >= args.n else 1


if __name__ == "__main__":
    sys.exit(main())

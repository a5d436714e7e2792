"""Turn recorded runs of any LangGraph agent into trajectories, seed tasks, experiences and step labels.

Reads traces from a LangSmith project (``--project``; with ``--run-ids``, those runs' whole traces) or a
local ``JsonlTracer`` file (``--jsonl``), filtered by time, tags, metadata and feedback; prints what
it read, skipped and made, then one JSON line with the figures. Nothing is written with
``--dry-run``; feedback goes back to LangSmith only with ``--write-feedback``.

Run:

    python -m langgraph_evolver.ingest --jsonl runs/evaluate/runs.jsonl --env sandbox --out runs/ingest
    python -m langgraph_evolver.ingest --project my-agent-prod --env my_pkg.envs:make_env \\
        --start 2026-11-01 --feedback "user_score<0.5" --redact langgraph_evolver.ingest:redact_pii --dry-run
    python -m langgraph_evolver.ingest --project my-agent-prod --env my_pkg.envs:make_env --out runs/ingest \\
        --write-feedback
    python -m trainers.grpo --config examples/quickstart.yaml --task_store runs/ingest/tasks.sqlite \\
        --synthetic_ratio 0.5     # train on them
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..errors import ConfigError
from .pipeline import ingest_traces, write_ingest, write_label_feedback
from .sources import FeedbackCondition, TraceFilter, read_jsonl_traces, read_langsmith_traces


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m langgraph_evolver.ingest", description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--project", help="LangSmith project to read root runs from")
    source.add_argument("--jsonl", help="a JsonlTracer file (runs in LangSmith's schema)")
    parser.add_argument("--run-ids", nargs="+",
                        help="LangSmith run ids of --project (each one's whole trace is read)")  # fmt: skip
    parser.add_argument("--start", help="traces that started at or after this time (ISO 8601, UTC if no zone)")
    parser.add_argument("--end", help="traces that started before this time")
    parser.add_argument("--tag", action="append", default=[], help="the root run must carry this tag (repeatable)")
    parser.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE",
                        help="the root run's metadata must match (repeatable)")  # fmt: skip
    parser.add_argument("--feedback", action="append", default=[], metavar="KEY<op>SCORE",
                        help="feedback condition on the root run, e.g. 'user_score<0.5' (repeatable)")  # fmt: skip
    parser.add_argument("--limit", type=int, default=None, help="read at most this many traces")
    parser.add_argument("--env", default=None, help="the environment the tasks run in (registry id or module:factory)")
    parser.add_argument("--env-params", default=None, help="JSON object of environment parameters for every task")
    parser.add_argument("--policy-model", default=None,
                        help="served name of the policy being trained: only its calls keep token ids")  # fmt: skip
    parser.add_argument("--positive", type=float, default=1.0,
                        help="score from which a run is positive (its calls become the reference)")  # fmt: skip
    parser.add_argument("--reward-key", action="append", default=None,
                        help="feedback keys that make the reward (default: all but step_attribution)")  # fmt: skip
    parser.add_argument("--extractor", default="rules", help="experience extractor ('rules', a model, or 'none')")
    parser.add_argument("--judge", default="reference", help="step judge ('reference', a model, or 'none')")
    parser.add_argument("--redact", default=None, metavar="MODULE:FUNCTION",
                        help="text -> text applied to every text before it is stored")  # fmt: skip
    parser.add_argument("--out", default="runs/ingest", help="folder for the JSONL outputs and summary.json")
    parser.add_argument(
        "--task-store", default=None, help="SQLite TaskStore for the trainable tasks (default OUT/tasks.sqlite)"
    )
    parser.add_argument("--dry-run", action="store_true", help="read and report; write nothing, send nothing")
    parser.add_argument("--write-feedback", action="store_true",
                        help="send the step labels to LangSmith as feedback on the original LLM runs")  # fmt: skip
    return parser


def _time(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError as e:
        raise ConfigError(f"{text!r} is not an ISO 8601 time (e.g. 2026-11-01 or 2026-11-01T12:00:00+00:00).") from e
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def trace_filter(args: argparse.Namespace) -> TraceFilter:
    metadata = {}
    for item in args.metadata:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--metadata {item!r}: write KEY=VALUE.")
        metadata[key] = value
    return TraceFilter(start=_time(args.start), end=_time(args.end), tags=tuple(args.tag), metadata=metadata,
                       feedback=tuple(FeedbackCondition.parse(f) for f in args.feedback))  # fmt: skip


def _none(spec: str) -> str | None:
    return None if spec.strip().lower() == "none" else spec


def run(args: argparse.Namespace) -> dict[str, Any]:
    from ..loading import load_object

    selection = trace_filter(args)
    redact = load_object(args.redact, what="--redact") if args.redact else None
    env_params = json.loads(args.env_params) if args.env_params else None
    client = None
    if args.jsonl and args.run_ids:
        raise ConfigError("--run-ids name LangSmith runs: give them with --project, not --jsonl.")
    if args.jsonl:
        traces = read_jsonl_traces(args.jsonl, selection, limit=args.limit)
        source = {"jsonl": args.jsonl}
    else:
        from ..tracing import langsmith_client

        client = langsmith_client()
        traces = read_langsmith_traces(client, project=args.project, run_ids=args.run_ids or (),
                                       trace_filter=selection, limit=args.limit)  # fmt: skip
        source = {"project": args.project, **({"run_ids": len(args.run_ids)} if args.run_ids else {})}
    result = ingest_traces(traces, env=args.env, env_params=env_params, policy_model=args.policy_model, redact=redact,
                           positive=args.positive, reward_keys=args.reward_key, extractor=_none(args.extractor),
                           judge=_none(args.judge))  # fmt: skip
    figures: dict[str, Any] = {**source, "filter": selection.langsmith_filter(), **result.summary(),
                               "dry_run": args.dry_run}  # fmt: skip
    labelled_runs = sum(1 for t in result.labelled for s in t.steps if s.llm_run_id and t.labels)
    if args.dry_run:
        figures["would_write"] = {"out": args.out, "tasks": len(result.tasks),
                                  "task_store": len(result.trainable_tasks), "experiences": len(result.experiences),
                                  "feedback": labelled_runs if args.write_feedback else 0}  # fmt: skip
        return figures
    figures["outputs"] = write_ingest(result, args.out, task_store=args.task_store)
    if args.write_feedback:
        if client is None:
            from ..tracing import langsmith_client

            client = langsmith_client()
        written, failed = write_label_feedback(result, client)
        client.flush()
        figures["feedback"] = {"written": written, "failed": failed}
    return figures


def _report(figures: dict[str, Any]) -> str:
    lines = [
        f"traces read            {figures['traces_read']} ({figures['runs_read']} runs)",
        f"skipped                {figures['skipped'] or 'none'}",
        f"trajectories           {figures['trajectories']} ({figures['with_reward']} with a reward from feedback, "
        f"{figures['policy_gradient_trajectories']} usable for policy-gradient rows)",
        f"tasks (source=trace)   {figures['tasks']}: {figures['tasks_trainable']} trainable (reference from positive "
        f"feedback), {figures['tasks_not_trained']} kept for experiences/evaluation",
        f"experiences            {figures['experiences']}",
        f"step labels            {figures['labelled_steps']} ({figures['labels_good']} GOOD)",
    ]
    if figures.get("dry_run"):
        lines.append(f"dry run: nothing written; would write {figures['would_write']}")
    if "feedback" in figures:
        lines.append(f"feedback to LangSmith  {figures['feedback']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        figures = run(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(_report(figures))
    print(json.dumps(figures, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Evaluate a policy endpoint on the sandbox: avg@k / best@k per difficulty level, per task.

Runs k rollouts of every task of a split through the agent graph (``graphs/agent.py``) against
an OpenAI-compatible endpoint, scores them with the environment and prints a line per task and
a table per level, then one JSON line of figures. Without ``--base-url`` it starts the local CPU
policy server on the committed tiny policy and stops it afterwards.

    python -m trainers.evaluate                              # tiny policy, test split, k=4
    python -m trainers.evaluate --k 8 --limit 30
    python -m trainers.evaluate --base_url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-7B-Instruct
    python -m trainers.evaluate --env_url http://127.0.0.1:8080  # environments over HTTP
    python -m trainers.evaluate --config examples/quickstart.yaml --k 8   # a training config's model/env
    python -m trainers.evaluate --config examples/quickstart.yaml --adapter runs/quickstart/final
    python -m trainers.evaluate --env bfcl --categories base,miss_param --k 4   # BFCL multi-turn (docs/bfcl.md)
    python -m trainers.evaluate --env "mcp:python server.py" --task_store tasks.sqlite --limit 20   # stored tasks
    python -m trainers.evaluate --seed 1 --adapter runs/x/final   # paired with another `--seed 1` evaluation

``--task_store`` evaluates the tasks a self-questioning run stored (``python -m langgraph_evolver.questioning
--out tasks.sqlite``; ``trainers.grpo``'s ``task_store``) instead of the split's, ``--limit`` the first N of them;
each is scored by its environment, a synthetic one by replaying its reference solution.

``--seed S`` makes evaluations paired ("common random numbers"): every request of sample i of task t at
turn j (the rollout's j-th policy call) carries the sampling seed ``paired_seed(S, t, i, j)``
(``PolicyChatModel.sample_seed``), so two policies, or two adapters, evaluated with the same ``S`` draw the
same random numbers where their conversations agree, and the per-task difference of their scores
(``task_means``, ``paired_gain``) is much less noisy than that of independent runs. The same policy
evaluated twice with the same ``S`` repeats its samples (up to the endpoint's batch-dependent float
rounding). The k samples of a task get different seeds. Without ``--seed`` nothing is seeded (as before).

Before any rollout, an environment that can check itself (an MCP server: ``preflight``) is started once, so a
server that cannot start is one error (exit 2) with its exit status and last stderr lines. ``--reference_policy``
exits 1 when its check is NOT OK. ``--verbose`` shows the MCP servers' INFO logs (docs/mcp.md).

``--config`` reads a ``trainers.grpo`` YAML file (model, endpoint, environment, eval split, turn
and token limits); flags given on the command line win. ``--adapter`` loads a trained LoRA
adapter into the local server (or into any endpoint with the runtime LoRA API) and evaluates it.

Outputs in ``--output-dir``: ``trajectories.jsonl``, ``runs.jsonl`` (the LangGraph run tree in
LangSmith's run schema) and ``summary.json``. ``avg@k`` is the mean reward over all samples,
``best@k`` the mean over tasks of the best of k, ``success`` the share of samples scoring 1.0,
``well_formed_calls`` the share of tool-call attempts that parsed. Tasks with a ``category``
(BFCL) get a table row per category (``--categories`` picks them), and ``context_overflow`` is the
share of samples that ended on the endpoint's "maximum context length" error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langgraph_evolver.experience.extractor import group_by_task
from langgraph_evolver.scoring import failed_rollouts, failure_kind, well_formed_counts
from langgraph_evolver.types import Trajectory, write_jsonl

from .tiny import DEFAULT_CHECKPOINT

__all__ = [
    "context_overflow",
    "evaluate_endpoint",
    "failure_summary",
    "plumbing_report",
    "main",
    "no_tasks_message",
    "preflight",
    "make_parser",
    "select_tasks",
    "summarize",
    "too_many_failures",
]


def failure_summary(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """``failed`` (count), ``failed_share`` and ``first_failure`` (its first error line) of ``trajectories``."""
    failed = failed_rollouts(trajectories)
    return {
        "failed": len(failed),
        "failed_share": round(len(failed) / len(trajectories), 4) if trajectories else 0.0,
        "first_failure": failed[0].errors[0] if failed and failed[0].errors else None,
    }


def too_many_failures(figures: dict[str, Any], max_share: float, what: str) -> str | None:
    """The one-line reason a run must stop when more than ``max_share`` of its rollouts failed, else None."""
    if not figures.get("failed") or figures["failed_share"] <= max_share:
        return None
    total = figures["failed"] + figures["all"]["samples"]
    return (f"{figures['failed']} of {total} rollouts of {what} failed outside the policy (more than "
            f"{max_share:.0%}); they are not scored. First error: {figures['first_failure']}")  # fmt: skip


def plumbing_report(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """What ``--reference_policy`` checks: the reference solutions score 1.0 through the user's graph, and every
    tool call was captured with its observation. Lists the first tasks where either fails."""
    calls = observed = 0
    below: list[str] = []
    unobserved: list[str] = []
    for t in trajectories:
        made = [c for s in t.steps for c in s.action.tool_calls]
        seen = sum(len(s.observations) for s in t.steps)
        calls, observed = calls + len(made), observed + min(seen, len(made))
        if seen < len(made) and len(unobserved) < 5:
            unobserved.append(t.task.id)
        if (t.reward is None or t.reward < 1.0) and len(below) < 5:
            below.append(f"{t.task.id}: {t.reward} {t.errors[0] if t.errors else ''}".strip())
    return {"tool_calls": calls, "observed": observed, "below_1": below, "calls_without_observation": unobserved,
            "ok": not below and calls == observed and calls > 0}  # fmt: skip


def plumbing_text(report: dict[str, Any]) -> str:
    lines = [f"plumbing: {report['observed']} of {report['tool_calls']} tool calls captured with their observation; "
             + ("every task scored 1.0 with its reference solution: environment, checker and capture agree"
                if report["ok"] else "NOT OK")]  # fmt: skip
    if report["below_1"]:
        lines.append("  the reference solution scored below 1.0 on (checker, answer or environment): "
                     + "; ".join(report["below_1"]))  # fmt: skip
    if report["calls_without_observation"]:
        lines.append("  calls without a captured observation (a tool node the recorder cannot see?): "
                     + ", ".join(report["calls_without_observation"]))  # fmt: skip
    if not report["tool_calls"]:
        lines.append("  no tool call reached the graph's tools: does the graph use the model its factory receives?")
    return "\n".join(lines)


def task_means(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Each task's mean reward over its scored samples (what a paired before/after comparison differences);
    failed rollouts (``failed_rollouts``) are left out, and a task with no scored sample too."""
    scored = [t for t in trajectories if failure_kind(t) != "infrastructure"]
    return {tid: statistics.fmean(t.reward or 0.0 for t in g) for tid, g in group_by_task(scored).items()}


def paired_gain(before: dict[str, float], after: dict[str, float]) -> tuple[float, float]:
    """Mean after - before over the tasks both saw, and its standard error (task-paired)."""
    diffs = [after[t] - before[t] for t in before if t in after]
    if not diffs:
        return 0.0, 0.0
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
    return round(statistics.fmean(diffs), 4), round(se, 4)


def context_overflow(trajectories: Sequence[Trajectory]) -> float:
    """The share of ``trajectories`` that ended because a prompt passed the model's context window."""
    hit = sum(any("maximum context length" in e for e in t.errors) for t in trajectories)
    return round(hit / len(trajectories), 4) if trajectories else 0.0


def summarize(trajectories: Sequence[Trajectory], k: int) -> dict[str, Any]:
    """avg@k, best@k, success and call well-formedness, overall, per level and per category.

    Rollouts that failed outside the policy (the endpoint answered 500, the environment died) are
    not wrong answers: they are left out of every figure and counted in ``failed`` /
    ``failed_share``, with ``first_failure`` the first error line.
    """
    failures = failure_summary(trajectories)
    all_trajectories, trajectories = trajectories, [t for t in trajectories if failure_kind(t) != "infrastructure"]
    by_task = group_by_task(trajectories)

    def figures(groups: list[list[Trajectory]]) -> dict[str, float]:
        samples = [t for g in groups for t in g]
        rewards = [t.reward or 0.0 for t in samples]
        ok, attempts = well_formed_counts(samples)
        return {
            f"avg@{k}": round(statistics.fmean(rewards), 4) if rewards else 0.0,
            f"best@{k}": round(statistics.fmean(max(t.reward or 0.0 for t in g) for g in groups), 4) if groups else 0.0,
            "success": round(sum(r == 1.0 for r in rewards) / len(rewards), 4) if rewards else 0.0,
            "well_formed_calls": round(ok / attempts, 4) if attempts else 0.0,
            "samples": len(samples),
        }

    out: dict[str, Any] = {"all": figures(list(by_task.values()))}
    for level in sorted({t.task.metadata.get("level") for t in trajectories if t.task.metadata.get("level")}):
        out[f"level{level}"] = figures([g for g in by_task.values() if g[0].task.metadata.get("level") == level])
    for category in dict.fromkeys(t.task.metadata["category"] for t in trajectories if t.task.metadata.get("category")):
        groups = [g for g in by_task.values() if g[0].task.metadata.get("category") == category]
        out[category] = {**figures(groups), "context_overflow": context_overflow([t for g in groups for t in g])}
    out["errors"] = sum(bool(t.errors) for t in all_trajectories)
    out["context_overflow"] = context_overflow(trajectories)
    out.update(failures)
    return out


def print_report(trajectories: Sequence[Trajectory], summary: dict[str, Any], k: int, file: Any = sys.stdout) -> None:
    for task_id, group in group_by_task(trajectories).items():
        meta = group[0].task.metadata
        rewards = " ".join("fail" if failure_kind(t) == "infrastructure" else f"{t.reward or 0.0:.2f}" for t in group)
        best = max((t.reward or 0.0 for t in group if failure_kind(t) != "infrastructure"), default=0.0)
        print(
            f"{task_id:<22} L{meta.get('level', '?')} {meta.get('template', ''):<18} {rewards}  best {best:.2f}",
            file=file,
        )
    print(f"\n{'group':<13}{'avg@' + str(k):>9}{'best@' + str(k):>9}{'success':>9}{'calls ok':>10}{'n':>6}", file=file)
    for name, fig in summary.items():
        if isinstance(fig, dict):
            print(f"{name:<13}{fig[f'avg@{k}']:>9.3f}{fig[f'best@{k}']:>9.3f}{fig['success']:>9.3f}"
                  f"{fig['well_formed_calls']:>10.3f}{fig['samples']:>6}", file=file)  # fmt: skip
    if summary.get("failed"):
        print(f"\nfailed rollouts (not scored, not in the figures above): {summary['failed']} "
              f"({summary['failed_share']:.0%}); first error: {summary['first_failure']}", file=file)  # fmt: skip


async def evaluate_endpoint(
    tasks: Sequence[Any],
    *,
    base_url: str,
    model: str,
    k: int = 4,
    temperature: float = 1.0,
    max_tokens: int = 128,
    max_turns: int = 10,
    concurrency: int = 64,
    env_url: str | None = None,
    callbacks: list | None = None,
    progress: bool = True,
    agent: Any = None,
    agent_input: Any = None,
    reward: Any = None,
    env_factory: Any = None,
    reference_policy: bool = False,
    seed: int | None = None,
) -> list[Trajectory]:
    """k rollouts of every task against the endpoint; returns the trajectories.

    ``agent`` is any agent ``as_agent`` accepts (a ``build(model, tools)`` factory, a compiled graph
    with ``EvolverMiddleware``, a dotted path); default: our reference agent. ``env_factory`` builds
    each rollout's environment (``langgraph_evolver.environment.environment_factory(name)`` for the environment a
    command names); ``env_url`` uses the HTTP service instead; neither: each task's ``env`` by name.
    ``seed`` pairs the evaluation with any other one given the same seed (``PolicyChatModel.sample_seed``:
    sample i of task t at turn j samples with the same seed); ``None`` sends no seed.
    """
    from graphs.agent import reference_agent
    from langgraph_evolver.batch import arun_rollouts
    from langgraph_evolver.chat_model import PolicyChatModel

    if reference_policy:
        from langgraph_evolver.testing import ReferencePolicy

        policy: Any = ReferencePolicy(tasks)
    else:
        policy = PolicyChatModel(base_url=base_url, model=model, temperature=temperature, max_tokens=max_tokens,
                                 timeout=300, max_retries=1, sample_seed=seed)  # fmt: skip
    spec = agent if agent is not None else reference_agent(max_turns=max_turns)
    if env_url:
        from env_tools.client import remote_environment_factory

        env_factory = remote_environment_factory(env_url)
    try:
        return await arun_rollouts(spec, tasks, n=k, policy=policy, concurrency=concurrency, env_factory=env_factory,
                                   callbacks=callbacks, progress=progress, max_turns=max_turns,
                                   to_input=agent_input, reward=reward)  # fmt: skip
    finally:
        if not reference_policy:
            await policy.aclose()


# trainers.grpo config keys -> our flags' destinations
_CONFIG_KEYS = {"model_name_or_path": "model_path", "policy_base_url": "base_url", "policy_model": "model",
                "env_id": "env", "env_url": "env_url", "eval_split": "split", "eval_k": "k", "eval_limit": "limit",
                "temperature": "temperature", "max_completion_length": "max_tokens", "max_turns": "max_turns",
                "rollout_concurrency": "concurrency", "agent": "agent", "agent_input": "agent_input",
                "reward_fn": "reward", "repeat_guard": "repeat_guard"}  # fmt: skip


def config_defaults(path: str | Path) -> dict[str, Any]:
    """The evaluation settings of a ``trainers.grpo`` YAML config (unknown keys are ignored)."""
    from .config_files import read_yaml_mapping

    data = read_yaml_mapping(path, label=f"config {path}")
    out = {dest: data[key] for key, dest in _CONFIG_KEYS.items() if data.get(key) is not None}
    if data.get("output_dir"):
        out["output_dir"] = str(Path(data["output_dir"]) / "evaluate")
    return out


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="a trainers.grpo YAML config to take the model/endpoint/env settings from")
    p.add_argument("--adapter", help="a LoRA adapter directory to load into the endpoint and evaluate")
    p.add_argument("--base_url", help="OpenAI-compatible endpoint (…/v1); default: start the local server")
    p.add_argument("--model", help="model name at the endpoint (default: the served tiny policy)")
    p.add_argument("--model_path", default=str(DEFAULT_CHECKPOINT), help="model for the local server")
    p.add_argument("--agent", help="your agent, 'my_pkg.agent:build_agent' (default: our reference agent)")
    p.add_argument("--agent_input", help="'my_pkg:to_input', (task[, observation]) -> the graph's input")
    p.add_argument(
        "--reward_fn",
        dest="reward",
        help="'my_pkg:score', (task, final_state, trajectory) -> float, instead of evaluate()",
    )
    p.add_argument("--env", default="sandbox", help="environment registry id or 'my_pkg.module:factory'")
    p.add_argument("--env_url", help="use the HTTP environment service at this URL instead of in-process")
    p.add_argument("--split", default="test")
    p.add_argument("--categories", help="comma-separated task categories to evaluate (BFCL: base,miss_func,"
                   "miss_param,long_context); default: every task of the split")  # fmt: skip
    p.add_argument("--limit", type=int, default=None, help="only the first N tasks of the split (or of --task_store)")
    p.add_argument("--task_store", help="evaluate the tasks of this TaskStore (SQLite, made by `python -m "
                   "langgraph_evolver.questioning --out ...`) instead of the split's")  # fmt: skip
    p.add_argument("--k", type=int, default=4, help="samples per task")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None,
                   help="pair this evaluation with others given the same seed: sample i of task t at turn j samples "
                   "with the same seed (common random numbers); default: unseeded")  # fmt: skip
    p.add_argument("--max_tokens", type=int, default=128)
    p.add_argument("--max_turns", type=int, default=10)
    p.add_argument(
        "--repeat_guard",
        action="store_true",
        help="our agent notes a repeated call's unchanged result (as trainers.evolve adapt plays it)",
    )
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--server_threads", type=int, default=None,
                   help="torch threads of the local server (1 for paired figures: one float rounding)")  # fmt: skip
    p.add_argument(
        "--strict_tools",
        action="store_true",
        help="the local server holds tool calls to the tools: names, argument keys, required arguments",
    )
    p.add_argument("--output_dir", default="runs/evaluate")
    p.add_argument("--quiet", action="store_true", help="no per-task lines")
    p.add_argument("--verbose", action="store_true",
                   help="show the MCP servers' INFO logs (EVOLVER_MCP_LOG_LEVEL=INFO; quiet by default)")  # fmt: skip
    p.add_argument("--reference_policy", action="store_true",
                   help="check the plumbing on your own domain: play each task's reference solution through your "
                   "graph (a scripted model, no endpoint), then its answer; a correct setup scores 1.0 with every "
                   "call captured with its observation")  # fmt: skip
    p.add_argument("--max_failed_share", type=float, default=0.5,
                   help="exit 1 when more than this share of the rollouts failed outside the policy (endpoint or "
                   "environment errors; they are never scored as wrong answers)")  # fmt: skip
    return p


_RENAMED_FLAGS = {"--reward": "--reward_fn"}
"""Old spellings of ``trainers.evaluate`` flags, accepted with a note (``trainers.grpo`` spells them this way)."""


def canonical_flags(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """``argv`` with each flag in its one spelling: underscores as in ``trainers.grpo`` (``--agent_input``, not
    ``--agent-input``) and ``--reward_fn`` for ``--reward``. A flag given the other way is accepted, with a note."""
    known = {o for action in parser._actions for o in action.option_strings}
    out, noted = [], []
    for arg in argv:
        flag, eq, value = arg.partition("=")
        new = _RENAMED_FLAGS.get(flag) or (flag.replace("-", "_").replace("__", "--", 1) if flag.startswith("--")
                                           else flag)  # fmt: skip
        if new != flag and new in known:
            noted.append(f"{flag} -> {new}")
            arg = new + eq + value
        out.append(arg)
    if noted:
        print(f"note: trainers.evaluate spells its flags like trainers.grpo: {', '.join(noted)}", file=sys.stderr)
    return out


def select_tasks(tasks: Sequence[Any], categories: str | None, limit: int | None) -> list[Any]:
    """The tasks of the chosen ``categories`` (comma-separated, in that order), each category cut to ``limit``."""
    if not categories:
        return list(tasks)[:limit]
    from langgraph_evolver.errors import ConfigError

    wanted = [c.strip() for c in categories.split(",") if c.strip()]
    known = {t.metadata.get("category") for t in tasks} - {None}
    unknown = [c for c in wanted if c not in known]
    if unknown:
        raise ConfigError(f"--categories {unknown} not among this split's task categories: {sorted(known) or 'none'}.")
    return [t for c in wanted for t in [t for t in tasks if t.metadata.get("category") == c][:limit]]


def load_tasks(env: str, split: str, task_store: str | None) -> list[Any]:
    """The tasks to evaluate: those of ``task_store`` (every stored task, synthesized for ``env``), else the split's."""
    from langgraph_evolver.environment import load_environment

    if not task_store:
        return list(load_environment(env).list_tasks(split))
    from langgraph_evolver.questioning import stored_tasks

    make = f"`python -m langgraph_evolver.questioning --env {env!r} --out {task_store}`"
    return stored_tasks(task_store, label=f"--task_store {task_store}", make_hint=make)


def no_tasks_message(env: str, split: str, categories: str | None) -> str:
    """Why a run has nothing to evaluate, with the splits that do hold tasks and the flag that picks one."""
    if categories:
        return f"Environment {env!r} has no tasks in split {split!r} in categories {categories}."
    from langgraph_evolver.environment import load_environment

    instance = load_environment(env)
    try:
        found = {name: len(instance.list_tasks(name)) for name in instance.list_splits()}
    finally:
        instance.close()
    where = f"no tasks in split {split!r}"
    if not found:
        return (f"Environment {env!r} has {where}, nor in any other split: give it tasks (an MCP server: "
                "#tasks=tasks.jsonl) or evaluate stored ones with --task_store.")  # fmt: skip
    listed = ", ".join(f"{name!r} ({count} tasks)" for name, count in found.items())
    hint = (" (an MCP task without \"split\" is in 'train'; give held-out tasks \"split\": \"test\")"
            if env.startswith("mcp:") else "")  # fmt: skip
    first = next(iter(found))
    return f"Environment {env!r} has {where}; its tasks are in {listed}. Choose one with --split {first}{hint}."


def preflight(env_factory: Any, task: Any) -> None:
    """Start the environment once before any rollout when it can check itself (an MCP server: ``preflight``), so a
    server that cannot start is one error with its cause, not one per rollout."""
    env = env_factory(task)
    try:
        check = getattr(env, "preflight", None)
        if callable(check):
            check()
    finally:
        env.close()


def write_evaluation(out: Path, trajectories: list[Trajectory], figures: dict[str, Any]) -> None:
    """``out/trajectories.jsonl`` and ``out/summary.json`` (what every evaluation leaves behind)."""
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "trajectories.jsonl", trajectories)
    (out / "summary.json").write_text(json.dumps(figures, indent=2))


def serve_adapter(base_url: str, path: str) -> str:
    """Load the adapter at ``path`` into the endpoint under a fresh name; return the name."""
    import uuid

    from langgraph_evolver.errors import ConfigError

    from .sync import load_adapter

    if not (Path(path) / "adapter_config.json").exists():
        raise ConfigError(f"--adapter {path}: no adapter_config.json there (pass e.g. runs/quickstart/final).")
    return load_adapter(base_url, path, f"{Path(path).resolve().name}-{uuid.uuid4().hex[:6]}")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from langgraph_evolver.environment import check_task_environments, environment_factory
    from langgraph_evolver.errors import EvolverError
    from langgraph_evolver.tracing import JsonlTracer, langsmith_callbacks

    from .serving import PolicyServerProcess, check_endpoint

    parser = make_parser()
    argv = canonical_flags(sys.argv[1:] if argv is None else argv, parser)
    pre, _ = parser.parse_known_args(argv)
    try:
        if pre.config:
            parser.set_defaults(**config_defaults(pre.config))
    except EvolverError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    args = parser.parse_args(argv)
    if args.verbose:  # the MCP servers this run starts log at INFO (env_tools/_mcp_process.py)
        os.environ["EVOLVER_MCP_LOG_LEVEL"] = "INFO"
    out = Path(args.output_dir)
    try:
        agent = None
        if args.agent or args.agent_input or args.reward or args.repeat_guard:
            from graphs.agent import reference_agent
            from langgraph_evolver.agent_spec import as_agent

            ours = reference_agent(max_turns=args.max_turns, repeat_guard=args.repeat_guard)
            agent = as_agent(args.agent or ours, to_input=args.agent_input, reward=args.reward)
        tasks = select_tasks(load_tasks(args.env, args.split, args.task_store), args.categories, args.limit)
        if not tasks:
            raise EvolverError(no_tasks_message(args.env, args.split, args.categories))
        check_task_environments(tasks, args.env, args.split)
        env_factory = None if args.env_url else environment_factory(args.env)  # what --env names runs
        if env_factory is not None:
            preflight(env_factory, tasks[0])
        server = None
        if args.reference_policy:
            if not any(t.reference_solution for t in tasks):
                raise EvolverError(f"--reference_policy plays each task's reference_solution, and no task of split "
                                   f"{args.split!r} has one: add them to your tasks.")  # fmt: skip
            base_url, model = "", "reference-policy"
        elif args.base_url:
            base_url, model = args.base_url, args.model
            served = check_endpoint(base_url, model)
            model = model or served[0]
        else:
            from .models import resolve_model

            server = PolicyServerProcess(
                resolve_model(args.model_path),
                log_path=out / "policy_server.log",
                allowed_weight_dirs=[out, *([args.adapter] if args.adapter else [])],
                threads=args.server_threads,
                extra_args=["--strict-tools"] * args.strict_tools,
            )
            out.mkdir(parents=True, exist_ok=True)
            print(f"starting the policy server on {args.model_path} …", file=sys.stderr)
            server.start()
            base_url, model = server.base_url, server.model_name
        if args.adapter:
            model = serve_adapter(base_url, args.adapter)
    except EvolverError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        with JsonlTracer(out / "runs.jsonl", project="evaluate") as tracer:
            trajectories = asyncio.run(
                evaluate_endpoint(tasks, base_url=base_url, model=model, k=args.k, temperature=args.temperature,
                                  max_tokens=args.max_tokens, max_turns=args.max_turns, concurrency=args.concurrency,
                                  env_url=args.env_url, callbacks=[tracer, *langsmith_callbacks(project="evaluate")],
                                  agent=agent, env_factory=env_factory, reference_policy=args.reference_policy,
                                  seed=args.seed)
            )  # fmt: skip
    finally:
        if server is not None:
            server.stop()
    wall = time.perf_counter() - started
    summary = summarize(trajectories, args.k)
    if not args.quiet:
        print_report(trajectories, summary, args.k)
    figures = {"model": model, "env": args.env, "split": args.split, **({"task_store": args.task_store}
               if args.task_store else {}), "tasks": len(tasks), "k": args.k,
               **({"seed": args.seed} if args.seed is not None else {}), **summary,
               "wall_s": round(wall, 1), "rollouts_per_s": round(len(trajectories) / wall, 2)}  # fmt: skip
    if args.reference_policy:
        figures["plumbing"] = plumbing_report(trajectories)
    write_evaluation(out, trajectories, figures)
    if args.reference_policy:
        print(plumbing_text(figures["plumbing"]), file=sys.stderr)
    print(json.dumps(figures))
    if args.reference_policy and not figures["plumbing"]["ok"]:
        print("error: the --reference_policy check is NOT OK (above): fix the environment, checker or capture "
              "before evaluating or training a policy on it", file=sys.stderr)  # fmt: skip
        raise SystemExit(1)
    if (reason := too_many_failures(figures, args.max_failed_share, "the evaluation")) is not None:
        print(f"error: {reason}", file=sys.stderr)
        raise SystemExit(1)
    return figures


if __name__ == "__main__":
    main()

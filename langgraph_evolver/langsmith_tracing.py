"""Training as LangSmith shows it: rollout traces with their training figures, feedback, experiments.

- :func:`langsmith_client` is the one ``langsmith.Client`` the library uses. It differs from the
  default client only where training needs it: sends are not retried (a dead endpoint fails at once
  instead of backing off for seconds per batch), its background sender is a daemon thread, and at
  process exit it flushes while sends make progress and stops after ``exit_timeout_s`` (default 2 s)
  without any (the default client keeps the interpreter alive for ~30 s retrying a dead endpoint).
- :class:`RolloutTracer` is LangChain's LangSmith tracer with bounded payloads (node runs keep the
  first and last state entries, strings are capped, LLM runs store their logprobs once; see
  :class:`~langgraph_evolver.tracing.TraceLimits`) that remembers the root run of every rollout.
- :func:`annotate_rollouts` then writes onto each rollout's root run what is only known after it
  ended: the training step, model version, reward, advantage summary and finish reason (as
  metadata next to the task id, group id and rollout index), and the reward as feedback.
- :func:`write_evaluation_experiments` writes before/after evaluations as a LangSmith dataset (the
  held-out tasks) and one experiment per evaluated checkpoint, for the comparison view.

Nothing here raises into training: failures are logged once and counted.
"""

from __future__ import annotations

import atexit
import logging
import os
import statistics
import threading
import time
import weakref
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

from langchain_core.tracers.langchain import LangChainTracer

from .tracing import JsonlTracer, TraceLimits, bound_payload, compact_llm_outputs, to_jsonable
from .types import Task, Trajectory

__all__ = [
    "REWARD_FEEDBACK_KEY",
    "RolloutTracer",
    "annotate_rollouts",
    "langsmith_client",
    "rollout_metadata",
    "with_training_step",
    "write_evaluation_experiments",
    "write_evaluation_folders",
]

logger = logging.getLogger(__name__)

REWARD_FEEDBACK_KEY = "reward"
"""Feedback key of a rollout's outcome reward on its root run (score in [0, 1])."""

_CLIENT: Any = None
_CLIENT_LOCK = threading.Lock()
_EXIT_HARD_LIMIT_S = 60.0
"""However much progress sending makes, the exit flush ends after this long."""
_TRACERS: weakref.WeakSet[RolloutTracer] = weakref.WeakSet()
"""Every tracer, so that the exit hook sends the roots they hold before the last flush."""


# --------------------------------------------------------------------------- the client


def _no_retries() -> Any:
    from urllib3.util.retry import Retry

    return Retry(total=0, connect=0, read=0, status=0, redirect=0, raise_on_status=False)


def langsmith_client(*, new: bool = False, exit_timeout_s: float | None = None, **options: Any) -> Any:
    """The shared ``langsmith.Client`` for tracing and feedback (created on first use).

    Args:
        new: Build a new client instead of returning the shared one (tests, other endpoints).
        exit_timeout_s: At process exit the client sends what is queued for as long as sends make
            progress, and gives up after this many seconds without any (default
            ``EVOLVER_LANGSMITH_EXIT_TIMEOUT`` or 2; at most 60 s in all).
        **options: More ``langsmith.Client`` arguments (``api_url``, ``api_key``, ``timeout_ms`` ...).
    """
    global _CLIENT
    with _CLIENT_LOCK:
        if _CLIENT is not None and not new and not options:
            return _CLIENT
        client = _build_client(exit_timeout_s, options)
        if not new and not options:
            _CLIENT = client
            _make_default(client)
        return client


def _make_default(client: Any) -> None:
    """Make ``client`` LangSmith's process default (what LangChain's environment-configured tracer uses),
    unless one exists already: every run this process sends then gets the bounded exit."""
    try:
        from langsmith import run_trees

        if run_trees._CLIENT is None:
            run_trees.configure(client=client)
    except Exception:
        logger.debug("LangSmith: could not make the evolver client the default", exc_info=True)


def _build_client(exit_timeout_s: float | None, options: dict[str, Any]) -> Any:
    from langsmith import Client

    if exit_timeout_s is None:
        exit_timeout_s = float(os.environ.get("EVOLVER_LANGSMITH_EXIT_TIMEOUT", "2"))
    options.setdefault("retry_config", _no_retries())
    options.setdefault("timeout_ms", (2_000, 10_000))
    client = Client(auto_batch_tracing=False, **options)
    try:
        # The default sender is a non-daemon thread that drains the queue (3 attempts per batch, urllib3
        # backoff) before the interpreter may exit. Ours is a daemon thread and the exit hook bounds the
        # flush. These are the client's own queue and thread function, started as auto_batch_tracing does.
        from queue import PriorityQueue

        from langsmith._internal._background_thread import tracing_control_thread_func
        from langsmith._internal._constants import _TRACING_QUEUE_MAX_SIZE

        client._use_daemon_threads = True
        client.tracing_queue = PriorityQueue(maxsize=_TRACING_QUEUE_MAX_SIZE)
        threading.Thread(target=tracing_control_thread_func, args=(weakref.ref(client),), daemon=True,
                         name="langsmith-sender").start()  # fmt: skip
    except Exception:  # another langsmith version: its own batching, its own exit behaviour
        logger.warning("Could not start a bounded LangSmith sender; using the client's default.", exc_info=True)
        client = Client(**options)
    atexit.register(_flush_at_exit, weakref.ref(client), exit_timeout_s)
    return client


def _flush_at_exit(ref: weakref.ref[Any], timeout: float) -> None:
    """Send what is queued while sends make progress; give up after ``timeout`` seconds without any
    (a dead endpoint fails fast, so its queue empties at once; a slow one stops making progress)."""
    client = ref()
    queue = getattr(client, "tracing_queue", None)
    if client is None or queue is None:
        return
    try:
        for tracer in list(_TRACERS):
            if tracer.client is client:
                tracer.release()
        start = last_progress = time.monotonic()
        left = queue.unfinished_tasks
        while left and time.monotonic() - start < _EXIT_HARD_LIMIT_S:
            client.flush(timeout=min(0.25, timeout))
            now_left = queue.unfinished_tasks
            if now_left < left:
                left, last_progress = now_left, time.monotonic()
            elif time.monotonic() - last_progress >= timeout:
                logger.warning("LangSmith: %d runs not sent at exit (no progress for %.1f s).", now_left, timeout)
                return
    except Exception:
        pass


# --------------------------------------------------------------------------- the tracer


class RolloutTracer(LangChainTracer):
    """LangChain's LangSmith tracer, with bounded payloads and the root run of each rollout remembered.

    A rollout's root is the outermost run whose metadata carries its ``trajectory_id`` (what
    ``arun_episode`` puts in the config); :func:`annotate_rollouts` updates it later. Copies the
    tracer makes of itself share the registry.

    Args:
        project_name: LangSmith project.
        client: Default :func:`langsmith_client`.
        limits: What node runs and strings keep (:class:`TraceLimits`).
        metadata: Tracer-level metadata added to runs that lack the key.
    """

    def __init__(self, *args: Any, limits: TraceLimits | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("client", None)
        if kwargs["client"] is None:
            kwargs["client"] = langsmith_client()
        super().__init__(*args, **kwargs)
        self.limits = limits if limits is not None else TraceLimits()
        self.rollouts: dict[str, dict[str, Any]] = {}
        self._rollouts_lock = threading.Lock()
        _TRACERS.add(self)

    def copy_with_metadata_defaults(self, **kwargs: Any) -> LangChainTracer:
        copy = super().copy_with_metadata_defaults(**kwargs)
        if isinstance(copy, RolloutTracer):
            copy.limits, copy.rollouts, copy._rollouts_lock = self.limits, self.rollouts, self._rollouts_lock
        return copy

    def _remember(self, run: Any) -> None:
        metadata = {**(self.tracing_metadata or {}), **((run.extra or {}).get("metadata") or {})}
        trajectory_id = metadata.get("trajectory_id")
        if not trajectory_id:
            return
        parent = self.run_map.get(str(run.parent_run_id)) if run.parent_run_id else None
        if parent is not None and ((parent.extra or {}).get("metadata") or {}).get("trajectory_id") == trajectory_id:
            return
        with self._rollouts_lock:
            self.rollouts.setdefault(str(trajectory_id), {
                "run_id": str(run.id), "trace_id": str(run.trace_id), "dotted_order": run.dotted_order,
                "metadata": metadata, "project": run.session_name,
                # A training rollout (see with_training_step) keeps its root's end until annotate_rollouts adds
                # the reward: one patch, so no second update can race the first.
                "hold": "training_step" in metadata, "run": None})  # fmt: skip
            while len(self.rollouts) > 100_000:
                self.rollouts.pop(next(iter(self.rollouts)))

    def _held(self, run: Any) -> bool:
        if run.parent_run_id is not None and str(run.parent_run_id) in self.run_map:
            return False
        trajectory_id = ((run.extra or {}).get("metadata") or {}).get("trajectory_id")
        with self._rollouts_lock:
            root = self.rollouts.get(str(trajectory_id)) if trajectory_id else None
            if root is None or root["run_id"] != str(run.id) or not root["hold"]:
                return False
            root["run"] = run
            return True

    def release(self, trajectory_ids: Sequence[str] | None = None) -> int:
        """Send the held ends of rollout roots (all of them by default) without annotations."""
        with self._rollouts_lock:
            ids = list(self.rollouts) if trajectory_ids is None else list(trajectory_ids)
            held = [self.rollouts.pop(i) for i in ids if (self.rollouts.get(i) or {}).get("run") is not None]
        for root in held:
            self._send_end(root["run"])
        return len(held)

    def _send_end(self, run: Any) -> None:
        try:
            LangChainTracer._update_run_single(run)
        except Exception as e:
            logger.warning("LangSmith: could not send the end of run %s (%s: %s)", run.id, type(e).__name__, e)

    def _shrink(self, run: Any) -> None:
        node = run.run_type == "chain" and run.parent_run_id is not None
        llm = run.run_type == "llm"
        once = self.limits.compact_logprobs
        try:
            # On the raw values (no serialization here: the client serializes once, and this runs in the agent's
            # thread): long lists of node runs are sliced, long strings cut, the token ids and logprobs of earlier
            # policy messages dropped (each call's own LLM run keeps them), anything else left as it is.
            if run.inputs:
                run.inputs = bound_payload(run.inputs, self.limits, lists=node, sampling=not once)
            if run.outputs:
                outputs = compact_llm_outputs(run.outputs) if llm and once else run.outputs
                run.outputs = bound_payload(outputs, self.limits, lists=node, sampling=llm or not once)
        except Exception:  # a payload we cannot bound is sent as it is
            logger.debug("RolloutTracer: could not bound run %s", run.id, exc_info=True)

    def _persist_run_single(self, run: Any) -> None:
        self._remember(run)
        self._shrink(run)
        super()._persist_run_single(run)

    def _update_run_single(self, run: Any) -> None:  # type: ignore[override]
        self._shrink(run)
        if not self._held(run):
            super()._update_run_single(run)


def with_training_step(callbacks: Any, step: int, model_version: str | None = None) -> Any:
    """``callbacks`` with each :class:`RolloutTracer` tagging its runs with ``training_step`` (and ``model_version``).

    Roots tagged so are held until :func:`annotate_rollouts` completes them. Anything else passes through.
    """
    if not isinstance(callbacks, list) or not _tracers(callbacks):
        return callbacks
    extra: dict[str, Any] = {"training_step": int(step)}
    if model_version:
        extra["model_version"] = str(model_version)
    return [c.copy_with_metadata_defaults(metadata=extra) if isinstance(c, RolloutTracer) else c for c in callbacks]


# --------------------------------------------------------------------------- after the rollouts


def _model_version(trajectory: Trajectory) -> str | None:
    versions = Counter(t.model_version for t in trajectory.transitions if t.model_version)
    if versions:
        return versions.most_common(1)[0][0]
    models = Counter(s.model for s in trajectory.steps if s.policy and s.model)
    return models.most_common(1)[0][0] if models else None


def _advantage_summary(advantages: Any) -> dict[str, float] | float | None:
    if advantages is None:
        return None
    if isinstance(advantages, int | float):
        return float(advantages)
    values = [float(a) for a in advantages]
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values), "first": values[0]}


def rollout_metadata(trajectory: Trajectory, *, step: int | None = None, advantages: Any = None) -> dict[str, Any]:
    """The keys a rollout's root run carries once training knows them (see docs/langsmith.md for filters).

    Example:
        >>> from langgraph_evolver.types import Task, Trajectory
        >>> t = Trajectory(id="step3/t1#0/2/ab", task=Task(id="t1", query="q"), reward=1.0, group_id="step3/t1#0")
        >>> rollout_metadata(t, step=3, advantages=[0.5])["advantage"]
        0.5
    """
    advantage = _advantage_summary(advantages)
    meta: dict[str, Any] = {
        "task_id": trajectory.task.id,
        "group_id": trajectory.group_id,
        "rollout_index": trajectory.rollout_index,
        "trajectory_id": trajectory.id,
        "env": trajectory.task.env,
        "env_params": to_jsonable(trajectory.task.env_params),
        "task_source": trajectory.task.source,
        "reward": trajectory.reward,
        "finish_reason": trajectory.finish_reason,
        "turns": trajectory.metadata.get("turns"),
    }
    if step is not None:
        meta["training_step"] = int(step)
    version = _model_version(trajectory)
    if version is not None:
        meta["model_version"] = version
    if isinstance(advantage, dict):
        meta["advantage"] = advantage["mean"]
        meta["advantage_min"], meta["advantage_max"] = advantage["min"], advantage["max"]
    elif advantage is not None:
        meta["advantage"] = advantage
    if trajectory.experience_ids:
        meta["experience_ids"] = list(trajectory.experience_ids)
    return meta


def _tracers(callbacks: Any) -> list[RolloutTracer]:
    handlers = getattr(callbacks, "handlers", callbacks) or []
    return [h for h in handlers if isinstance(h, RolloutTracer)]


def annotate_rollouts(
    callbacks: Any,
    trajectories: Sequence[Trajectory],
    advantages: Sequence[Any] | None = None,
    *,
    step: int | None = None,
    background: bool = True,
) -> int:
    """Put :func:`rollout_metadata` on each traced rollout's root run, and its reward as feedback.

    ``callbacks`` are the rollouts' callbacks: :class:`RolloutTracer` s among them complete each held
    root (one patch, queued on the client and sent in the background) and write the reward feedback
    from a daemon thread (``background=False``: now); a ``JsonlTracer`` gets the reward as a line in
    its feedback file, with the metadata. Anything else is ignored, so with tracing off this does
    nothing. Returns the number of roots annotated (LangSmith and local).
    """
    updated = _annotate_local(callbacks, trajectories, advantages, step)
    tracers = _tracers(callbacks)
    if not tracers:
        return updated
    feedback: list[tuple[Any, dict[str, Any]]] = []
    for tracer in tracers:
        for i, trajectory in enumerate(trajectories):
            with tracer._rollouts_lock:
                root = tracer.rollouts.pop(trajectory.id, None)
            if root is None:
                continue
            try:
                advantage = advantages[i] if advantages else None
                meta = {**root["metadata"], **rollout_metadata(trajectory, step=step, advantages=advantage)}
                run = root["run"]
                if run is not None:  # held: complete it, one patch
                    run.extra.setdefault("metadata", {}).update(meta)
                    tracer._send_end(run)
                else:
                    tracer.client.update_run(root["run_id"], trace_id=root["trace_id"],
                                             dotted_order=root["dotted_order"], extra={"metadata": meta})  # fmt: skip
                updated += 1
            except Exception as e:
                logger.warning("LangSmith: could not annotate rollout %s (%s: %s)", trajectory.id, type(e).__name__, e)
                continue
            if trajectory.reward is not None:
                feedback.append((tracer.client, {"run_id": root["run_id"], "trace_id": root["trace_id"],
                                                 "key": REWARD_FEEDBACK_KEY, "score": float(trajectory.reward),
                                                 "value": trajectory.finish_reason}))  # fmt: skip
        tracer.release()  # rollouts of this batch that were not annotated (failed, another rank's) end as they are
    if feedback:
        if background:
            threading.Thread(target=_write_feedback, args=(feedback,), daemon=True).start()
        else:
            _write_feedback(feedback)
    return updated


def _annotate_local(callbacks: Any, trajectories: Sequence[Trajectory], advantages: Sequence[Any] | None,
                    step: int | None) -> int:  # fmt: skip
    """``JsonlTracer`` s: the reward as a feedback line on each rollout's root, with the rollout metadata."""
    handlers = getattr(callbacks, "handlers", callbacks) or []
    done = 0
    for tracer in (h for h in handlers if isinstance(h, JsonlTracer)):
        for i, trajectory in enumerate(trajectories):
            root = tracer.rollout_roots.get(trajectory.id)
            if root is None or trajectory.reward is None:
                continue
            try:
                meta = rollout_metadata(trajectory, step=step, advantages=advantages[i] if advantages else None)
                tracer.add_feedback(root, REWARD_FEEDBACK_KEY, float(trajectory.reward),
                                    value=trajectory.finish_reason, extra={"metadata": meta})  # fmt: skip
                done += 1
            except Exception as e:
                logger.warning("Could not record the reward of %s locally (%s: %s)", trajectory.id, type(e).__name__, e)
    return done


def _write_feedback(items: list[tuple[Any, dict[str, Any]]]) -> tuple[int, int]:
    """Create each feedback once; the first failure (LangSmith down) drops the rest of the batch."""
    written = 0
    for client, kwargs in items:
        try:
            client.create_feedback(**kwargs, stop_after_attempt=1)
            written += 1
        except Exception as e:  # best effort: one warning per batch
            logger.warning("LangSmith feedback failed (%s: %s); %d more of this batch dropped.", type(e).__name__, e,
                           len(items) - written - 1)  # fmt: skip
            return written, len(items) - written
    return written, 0


# --------------------------------------------------------------------------- evaluations as experiments


def write_evaluation_experiments(
    tasks: Sequence[Task],
    evaluations: Mapping[str, Sequence[Trajectory]],
    *,
    dataset_name: str,
    client: Any = None,
    description: str = "",
) -> dict[str, Any]:
    """Held-out tasks as a LangSmith dataset, each evaluated checkpoint as an experiment on it.

    Each example's inputs are the task (``query``, ``task_id``, ``env``), its reference outputs the
    reference solution and expected answer. Each checkpoint (``evaluations``: name -> its
    trajectories, several samples per task allowed) becomes a project with
    ``reference_dataset_id`` set; each trajectory a run on its task's example, with the final answer
    as output and the reward as ``reward`` feedback, so LangSmith's comparison view lines the
    checkpoints up per task. An existing dataset of that name is reused (examples matched by task id).

    Returns ``{"dataset_id", "examples", "experiments": {checkpoint: project name}, "runs"}``.
    """
    client = client or langsmith_client()
    dataset = _dataset(client, dataset_name, description)
    examples = {str((e.inputs or {}).get("task_id")): str(e.id) for e in client.list_examples(dataset_id=dataset.id)}
    missing = [t for t in tasks if t.id not in examples]
    if missing:
        ids = [uuid4() for _ in missing]
        client.create_examples(dataset_id=dataset.id, examples=[
            {"id": eid, "inputs": {"query": t.query, "task_id": t.id, "env": t.env},
             "outputs": {"reference_solution": [c.to_dict() for c in t.reference_solution or ()],
                         "answer": t.metadata.get("answer")},
             "metadata": {"source": t.source, **({"level": t.metadata["level"]} if "level" in t.metadata else {})}}
            for eid, t in zip(ids, missing, strict=True)])  # fmt: skip
        examples.update({t.id: str(eid) for t, eid in zip(missing, ids, strict=True)})
    experiments: dict[str, str] = {}
    runs = 0
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    for checkpoint, trajectories in evaluations.items():
        project = f"{dataset_name}/{checkpoint}/{stamp}"
        client.create_project(project, reference_dataset_id=dataset.id,
                              metadata={"checkpoint": checkpoint, "samples": len(trajectories)})  # fmt: skip
        experiments[checkpoint] = project
        for trajectory in trajectories:
            example_id = examples.get(trajectory.task.id)
            if example_id is None:
                continue
            run_id = uuid4()
            start = datetime.now(UTC)
            answer = next((s.action.content for s in reversed(trajectory.steps)
                           if s.action.content and not s.action.tool_calls), None)  # fmt: skip
            client.create_run(name=f"{checkpoint}: {trajectory.task.id}", run_type="chain", id=run_id,
                              inputs={"query": trajectory.task.query, "task_id": trajectory.task.id},
                              outputs={"answer": answer, "reward": trajectory.reward,
                                       "tool_calls": [c.to_dict() for s in trajectory.steps
                                                      for c in s.action.tool_calls]},
                              project_name=project, reference_example_id=example_id, start_time=start,
                              end_time=start, trace_id=run_id, dotted_order=_dotted(start, run_id),
                              extra={"metadata": {"checkpoint": checkpoint, "task_id": trajectory.task.id,
                                                  "rollout_index": trajectory.rollout_index,
                                                  "finish_reason": trajectory.finish_reason}})  # fmt: skip
            if trajectory.reward is not None:
                client.create_feedback(run_id, key=REWARD_FEEDBACK_KEY, score=float(trajectory.reward),
                                       trace_id=run_id, stop_after_attempt=2)  # fmt: skip
            runs += 1
    client.flush()
    return {"dataset_id": str(dataset.id), "examples": len(examples), "experiments": experiments, "runs": runs}


def _dataset(client: Any, name: str, description: str) -> Any:
    try:
        return client.read_dataset(dataset_name=name)
    except Exception:
        return client.create_dataset(name, description=description or "langgraph-evolver held-out tasks")


def _dotted(start: datetime, run_id: UUID) -> str:
    return start.strftime("%Y%m%dT%H%M%S%fZ") + str(run_id)


# --------------------------------------------------------------------------- command line


def write_evaluation_folders(
    folders: Mapping[str, Any], *, dataset_name: str, client: Any = None, timeout_s: float | None = None
) -> dict[str, Any] | None:
    """:func:`write_evaluation_experiments` from evaluation folders (``name -> folder`` with ``trajectories.jsonl``).

    With ``timeout_s`` it runs in a daemon thread and gives up waiting after that long; failures are
    logged and give ``None`` (the end of a training run must not hang on LangSmith).
    """
    from pathlib import Path

    from .types import read_jsonl

    def work() -> dict[str, Any]:
        evaluations = {name: list(read_jsonl(Path(folder) / "trajectories.jsonl", Trajectory))
                       for name, folder in folders.items()}  # fmt: skip
        tasks = list({t.task.id: t.task for runs in evaluations.values() for t in runs}.values())
        return write_evaluation_experiments(tasks, evaluations, dataset_name=dataset_name, client=client)

    if timeout_s is None:
        return work()
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = work()
        except Exception as e:
            logger.warning("LangSmith: evaluations not written as experiments (%s: %s)", type(e).__name__, e)

    thread = threading.Thread(target=run, daemon=True, name="langsmith-experiments")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        logger.warning("LangSmith: writing the evaluation experiments took over %.0f s; not waiting.", timeout_s)
    return result.get("value")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m langgraph_evolver.langsmith_tracing --dataset NAME before=DIR after=DIR``: evaluations
    (``trainers.grpo``'s ``eval_before/``, ``eval_after/``, or ``trainers.evaluate --output-dir``) as a
    LangSmith dataset of their held-out tasks and one experiment per checkpoint."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m langgraph_evolver.langsmith_tracing", description=main.__doc__)
    parser.add_argument(
        "--dataset", required=True, help="LangSmith dataset of the held-out tasks (reused if it exists)"
    )
    parser.add_argument(
        "checkpoints", nargs="+", metavar="NAME=DIR", help="an evaluation folder with trajectories.jsonl"
    )
    args = parser.parse_args(argv)
    folders: dict[str, str] = {}
    for item in args.checkpoints:
        name, sep, folder = item.partition("=")
        if not sep:
            parser.error(f"{item!r}: write NAME=DIR")
        folders[name] = folder
    print(json.dumps(write_evaluation_folders(folders, dataset_name=args.dataset)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

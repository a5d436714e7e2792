"""Which rollout a run belongs to, and what training learned about it after the rollout ended.

- :func:`trace_metadata` is what a rollout puts in its config when it starts (task id, group id,
  rollout index), so every run of the rollout carries it.
- :func:`with_training_step` tags the runs of a training step; their roots are held until
  :func:`annotate_rollouts` completes them.
- :func:`annotate_rollouts` writes onto each rollout's root run what is only known after it ended:
  the training step, model version, reward, advantage summary and finish reason
  (:func:`rollout_metadata`, next to the task id, group id and rollout index), and the reward as
  feedback, in LangSmith (:class:`~langgraph_evolver.tracing.RolloutTracer`) and in a local
  trace's feedback file (:class:`~langgraph_evolver.tracing.JsonlTracer`).

Nothing here raises into training: failures are logged once and counted.
"""

from __future__ import annotations

import logging
import statistics
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..types import Trajectory
from .jsonl import JsonlTracer
from .langsmith import RolloutTracer, project_id
from .payload import to_jsonable

__all__ = [
    "REWARD_FEEDBACK_KEY",
    "annotate_rollouts",
    "rollout_metadata",
    "trace_metadata",
    "with_training_step",
]

logger = logging.getLogger(__name__)

REWARD_FEEDBACK_KEY = "reward"
"""Feedback key of a rollout's outcome reward on its root run (score in [0, 1])."""


def trace_metadata(task_id: str, group_id: str, rollout_index: int, **extra: Any) -> dict[str, Any]:
    """The metadata a rollout puts in its RunnableConfig so traces show which task/group/rollout they are.

    Example:
        >>> trace_metadata("task-7", "step3-task-7", 2, model_version="lora-v3")
        {'task_id': 'task-7', 'group_id': 'step3-task-7', 'rollout_index': 2, 'model_version': 'lora-v3'}
    """
    return {"task_id": str(task_id), "group_id": str(group_id), "rollout_index": int(rollout_index), **extra}


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
                                                 "value": trajectory.finish_reason,
                                                 "session_id": root.get("project")}))  # fmt: skip
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
    """Create each feedback once, on the run's project (``session_id`` holds its name until here, where looking up
    its id may wait on LangSmith); the first failure (LangSmith down) drops the rest of the batch."""
    written = 0
    for client, kwargs in items:
        try:
            session = project_id(client, kwargs["session_id"])
            client.create_feedback(**{**kwargs, "session_id": session}, stop_after_attempt=1)
            written += 1
        except Exception as e:  # best effort: one warning per batch
            logger.warning("LangSmith feedback failed (%s: %s); %d more of this batch dropped.", type(e).__name__, e,
                           len(items) - written - 1)  # fmt: skip
            return written, len(items) - written
    return written, 0

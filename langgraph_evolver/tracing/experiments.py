"""Before/after evaluations as LangSmith experiments, for its comparison view.

:func:`write_evaluation_experiments` writes the held-out tasks as a LangSmith dataset and each
evaluated checkpoint as an experiment on it; :func:`write_evaluation_folders` does it from
evaluation folders, and :func:`main` is its command line
(``python -m langgraph_evolver.langsmith_tracing --dataset NAME before=DIR after=DIR``).
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

from ..types import Task, Trajectory, read_jsonl
from .langsmith import langsmith_client
from .rollouts import REWARD_FEEDBACK_KEY
from .runtree import dotted_segment

__all__ = ["main", "write_evaluation_experiments", "write_evaluation_folders"]

logger = logging.getLogger(__name__)


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
             "reference_outputs": {"reference_solution": [c.to_dict() for c in t.reference_solution or ()],
                         "answer": t.metadata.get("answer")},
             "metadata": {"source": t.source, **({"level": t.metadata["level"]} if "level" in t.metadata else {})}}
            for eid, t in zip(ids, missing, strict=True)])  # fmt: skip
        examples.update({t.id: str(eid) for t, eid in zip(missing, ids, strict=True)})
    experiments: dict[str, str] = {}
    runs = 0
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    for checkpoint, trajectories in evaluations.items():
        project = f"{dataset_name}/{checkpoint}/{stamp}"
        session = client.create_project(project, reference_dataset_id=dataset.id,
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
                              end_time=start, trace_id=run_id, dotted_order=dotted_segment(start, run_id),
                              extra={"metadata": {"checkpoint": checkpoint, "task_id": trajectory.task.id,
                                                  "rollout_index": trajectory.rollout_index,
                                                  "finish_reason": trajectory.finish_reason}})  # fmt: skip
            if trajectory.reward is not None:
                client.create_feedback(run_id, key=REWARD_FEEDBACK_KEY, score=float(trajectory.reward),
                                       trace_id=run_id, session_id=session.id, start_time=start,
                                       stop_after_attempt=2)  # fmt: skip
            runs += 1
    client.flush()
    return {"dataset_id": str(dataset.id), "examples": len(examples), "experiments": experiments, "runs": runs}


def _dataset(client: Any, name: str, description: str) -> Any:
    try:
        return client.read_dataset(dataset_name=name)
    except Exception:
        return client.create_dataset(name, description=description or "langgraph-evolver held-out tasks")


# --------------------------------------------------------------------------- command line


def write_evaluation_folders(
    folders: Mapping[str, Any], *, dataset_name: str, client: Any = None, timeout_s: float | None = None
) -> dict[str, Any] | None:
    """:func:`write_evaluation_experiments` from evaluation folders (``name -> folder`` with ``trajectories.jsonl``).

    With ``timeout_s`` it runs in a daemon thread and gives up waiting after that long; failures are
    logged and give ``None`` (the end of a training run must not hang on LangSmith).
    """

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

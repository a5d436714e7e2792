"""Small hand-made trajectories for the scoring and sample tests (no torch)."""

from __future__ import annotations

from langgraph_evolver.types import Action, Step, Task, Trajectory, Transition

__all__ = ["TASK", "make_trajectory", "make_transition"]

TASK = Task(id="t1", env="sandbox", query="q")


def make_trajectory(transitions: list[Transition], *, reward: float | None = 1.0, errors: int = 0,
                    finish: str = "final_answer", messages: tuple[str, ...] = ()) -> Trajectory:  # fmt: skip
    steps = [Step(index=i, action=Action(content="x"), transition=tr, error="bad call" if i < errors else None)
             for i, tr in enumerate(transitions)]  # fmt: skip
    return Trajectory(id="g/0/x", task=TASK, steps=tuple(steps), reward=reward, finish_reason=finish,  # type: ignore[arg-type]
                      errors=messages)  # fmt: skip


def make_transition(prompt, completion, logps=None, version="v0"):
    return Transition(prompt_ids=tuple(prompt), completion_ids=tuple(completion),
                      logprobs=tuple(logps or [-0.5] * len(completion)), model_version=version)  # fmt: skip

"""``ReferenceJudge``: deterministic GOOD/BAD labels from the task's reference solution, no LLM.

For offline runs and cheap large sweeps. Rules, step by step in order:

- **Error → BAD.** A step whose output did not parse (``Step.error``) or any of whose tool calls
  came back as an error observation is BAD, whatever else it did.
- **Progress → GOOD.** A tool call *matches* a reference call when the tool name is the same and
  the arguments are equal after normalizing: strings stripped and inner whitespace collapsed,
  numbers compared by value (``5 == 5.0``), booleans only equal to booleans, key order ignored,
  arguments given as a JSON string decoded first. Matching is exact on keys by default (the
  sandbox rejects unknown arguments anyway); ``allow_extra_arguments=True`` also accepts calls
  that add keys the reference does not set (tools with optional parameters). Case matters
  unless ``ignore_case=True`` (sandbox state checks compare text exactly). Each reference call
  is matched once, in any order, so a task whose reference repeats a call needs the repeat.
  A step is GOOD when at least one of its calls matches a not-yet-matched reference call and
  none of its calls errors or repeats.
- **Repeat → BAD.** A call identical (after normalizing) to an earlier call that succeeded, once
  the reference has no unmatched copy of it left. With ``repeat_is_bad=False``, repeating a call
  that matched the reference is tolerated (GOOD); other repeats stay BAD as irrelevant.
- **Irrelevant → BAD.** A successful call that matches no reference call (a wrong id, the other
  branch of a conditional task, an unneeded lookup). In a multi-call step, a matching call
  outweighs irrelevant siblings.
- **Final answer.** GOOD when the trajectory's reward reaches ``success_threshold`` (the answer
  completed the task), BAD below it. Without a reward: GOOD when every reference call was made.

Tasks without a reference solution get the state-free part of these rules (errors and repeats
BAD, everything else GOOD, the final answer by reward when there is one), and every reason says
``no reference solution``.

Example:
    >>> from langgraph_evolver.types import Action, Step, Task, ToolCall, Trajectory
    >>> task = Task(id="t", query="Lea's phone?", reference_solution=(ToolCall(name="search", arguments={"q": "Lea"}),))
    >>> steps = (Step(index=0, action=Action(tool_calls=(ToolCall(name="search", arguments={"q": " Lea"}),))),
    ...          Step(index=1, action=Action(content="555-734")))
    >>> verdict = ReferenceJudge().judge(Trajectory(id="r1", task=task, steps=steps, reward=1.0))
    >>> [x.label for x in verdict.labels]
    ['GOOD', 'GOOD']
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from langgraph_evolver.rendering import render_call, trim
from langgraph_evolver.types import Step, ToolCall, ToolObservation, Trajectory

from .core import Attribution, JudgeStats, Label, StepLabel

__all__ = ["ReferenceJudge", "normalize_arguments"]

_SPACES = re.compile(r"\s+")
_REASON_CHARS = 160


def normalize_arguments(value: Any, *, ignore_case: bool = False) -> Any:
    """A canonical form of tool-call arguments for equality tests (see the module rules)."""
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            pass
    return _normalize(value, ignore_case)


def _normalize(value: Any, ignore_case: bool) -> Any:
    if isinstance(value, dict):
        return {str(k).strip(): _normalize(v, ignore_case) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(v, ignore_case) for v in value]
    if isinstance(value, bool):
        return ("<bool>", value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = _SPACES.sub(" ", value).strip()
        return text.casefold() if ignore_case else text
    return value


class ReferenceJudge:
    """Labels steps against ``task.reference_solution``; deterministic, no model calls.

    Args:
        repeat_is_bad: Label exact repeats of earlier successful calls BAD (the default), or
            tolerate repeats of reference calls.
        allow_extra_arguments: A call may set keys the reference call does not (subset match).
        ignore_case: Compare string arguments case-insensitively.
        success_threshold: Reward at or above which the final answer completed the task.
    """

    name = "reference"

    def __init__(
        self,
        *,
        repeat_is_bad: bool = True,
        allow_extra_arguments: bool = False,
        ignore_case: bool = False,
        success_threshold: float = 1.0,
    ) -> None:
        self.repeat_is_bad = repeat_is_bad
        self.allow_extra_arguments = allow_extra_arguments
        self.ignore_case = ignore_case
        self.success_threshold = success_threshold
        self.stats = JudgeStats()

    def __repr__(self) -> str:
        return (
            f"ReferenceJudge(repeat_is_bad={self.repeat_is_bad}, allow_extra_arguments={self.allow_extra_arguments}, "
            f"ignore_case={self.ignore_case}, success_threshold={self.success_threshold})"
        )

    async def ajudge(self, trajectory: Trajectory) -> Attribution:
        return self.judge(trajectory)

    def judge(self, trajectory: Trajectory) -> Attribution:
        started = time.perf_counter()
        labels = tuple(self.label_steps(trajectory))
        verdict = Attribution(
            trajectory_id=trajectory.id, labels=labels, judge=self.name, latency_s=time.perf_counter() - started
        )
        self.stats.add(verdict)
        return verdict

    # -- rules -------------------------------------------------------------------------------
    def _key(self, call: ToolCall) -> str:
        args = normalize_arguments(call.arguments, ignore_case=self.ignore_case)
        return json.dumps([call.name, args], sort_keys=True, ensure_ascii=False)

    def _matches(self, call: ToolCall, ref: ToolCall) -> bool:
        if call.name != ref.name:
            return False
        got = normalize_arguments(call.arguments, ignore_case=self.ignore_case)
        want = normalize_arguments(ref.arguments, ignore_case=self.ignore_case)
        if self.allow_extra_arguments and isinstance(got, dict) and isinstance(want, dict):
            return all(k in got and got[k] == v for k, v in want.items())
        return got == want

    def label_steps(self, trajectory: Trajectory) -> list[StepLabel]:
        """The labels of every step of ``trajectory``, in order (see the module rules)."""
        reference = trajectory.task.reference_solution
        unmatched: list[ToolCall] | None = None if reference is None else list(reference)
        matched_keys: set[str] = set()
        succeeded: set[str] = set()
        labels = []
        for step in trajectory.steps:
            if not step.action.tool_calls:
                label, reason = self._final_or_malformed(step, trajectory, unmatched)
            else:
                label, reason = self._tool_step(step, unmatched, matched_keys, succeeded)
            if reference is None:
                reason = f"no reference solution; {reason}"
            labels.append(StepLabel(step=step.index, label=label, reason=trim(reason, _REASON_CHARS)))
        return labels

    def _final_or_malformed(
        self, step: Step, trajectory: Trajectory, unmatched: list[ToolCall] | None
    ) -> tuple[Label, str]:
        if step.error:
            return "BAD", f"error: output was not a valid tool call or answer ({step.error})"
        reward = trajectory.reward
        if reward is not None:
            if reward >= self.success_threshold:
                return "GOOD", f"final answer completed the task (reward {reward:.2f})"
            return "BAD", f"final answer, but the task was not completed (reward {reward:.2f})"
        if unmatched:
            return "BAD", f"answered before making reference call(s) {', '.join(render_call(c) for c in unmatched)}"
        return "GOOD", "final answer (outcome unknown)"

    def _tool_step(
        self, step: Step, unmatched: list[ToolCall] | None, matched_keys: set[str], succeeded: set[str]
    ) -> tuple[Label, str]:
        calls = step.action.tool_calls
        observations = _pair_observations(step)
        errors = [o for o in observations if o is not None and o.is_error]
        if errors or step.error:
            detail = errors[0].content if errors else step.error
            return "BAD", f"error: {detail}"
        keys = [self._key(c) for c in calls]
        matches: list[ToolCall] = []
        tolerated: list[ToolCall] = []
        repeats: list[ToolCall] = []
        irrelevant: list[ToolCall] = []
        for call, key in zip(calls, keys, strict=True):
            ref = None
            if unmatched is not None:
                ref = next((r for r in unmatched if self._matches(call, r)), None)
            if ref is not None:
                unmatched.remove(ref)  # type: ignore[union-attr]
                matches.append(call)
                matched_keys.add(key)
            elif key in succeeded:
                allowed = not self.repeat_is_bad and (unmatched is None or key in matched_keys)
                (tolerated if allowed else repeats).append(call)
            else:
                irrelevant.append(call)
        succeeded.update(keys)
        if repeats:
            return "BAD", f"repeats an earlier call: {render_call(repeats[0])}"
        if unmatched is None:
            return "GOOD", "ran without error" + (" (a tolerated repeat)" if tolerated and not irrelevant else "")
        if matches:
            reason = f"makes reference call {render_call(matches[0])}"
            if irrelevant:
                reason += f"; also {render_call(irrelevant[0])}, which is not in the reference"
            return "GOOD", reason
        if tolerated and not irrelevant:
            return "GOOD", f"repeats reference call {render_call(tolerated[0])} (repeats tolerated)"
        return "BAD", f"irrelevant: {render_call(irrelevant[0])} is not part of the reference solution"


def _pair_observations(step: Step) -> list[ToolObservation | None]:
    """The observation of each call of ``step``, by call id, else by position."""
    by_id = {o.call_id: o for o in step.observations if o.call_id}
    out: list[ToolObservation | None] = []
    for i, call in enumerate(step.action.tool_calls):
        obs = by_id.get(call.id) if call.id else None
        if obs is None and i < len(step.observations):
            obs = step.observations[i]
        out.append(obs)
    return out

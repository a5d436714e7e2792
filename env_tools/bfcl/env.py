"""``BFCLEnvironment``: BFCL v3's multi-turn categories behind the ``Environment`` interface.

One entry is a conversation: several user turns, each answered by tool calls and then text. The
environment opens with the first turn; a final answer (text without tool calls) ends the turn and
is answered with the next user message (``StepResult.messages``, ``done=False``) until the last
turn, which ends the episode (``done=True``). A ``miss_func`` turn that adds held-out functions
arrives as BFCL's own "I have updated some more functions" message with the new tool list.

Tool calls run in bfcl-eval's executable backends through its ``execute_multi_turn_func_call``.
Those backends are cached in that module's globals under ``{model_name}_{entry_id}_{class}``: every
reset takes a fresh random ``model_name``, so concurrent rollouts of one entry never share state,
and the instances are deleted on ``close`` (and the checker's right after scoring).

Scoring is BFCL's: 1.0 iff ``multi_turn_checker`` (state and execution results after every turn,
against the ground truth replayed in fresh backends) and ``multi_turn_irrelevance_checker`` (no
calls in a turn whose ground truth is empty) both pass; else 0.0. A conversation that did not
reach its last turn scores 0 as BFCL's "force-terminated". ``last_evaluation`` keeps the verdict and
the checker's reason. More than BFCL's 20 tool steps in one turn also force-terminates, as in its runner.

How calls reach the backends: a JSON tool call ``{"name": "mv", "arguments": {"source": "a"}}``
becomes the call string ``mv(source='a')`` (``repr`` of each decoded JSON value), only for a method
of the entry's backend classes, with identifier names; anything else is an error observation and is
never evaluated. As in BFCL's executor, a method runs even while its doc is held out (``miss_func``):
the ground truth of ``multi_turn_miss_func_49`` calls ``tail`` two turns before it is offered.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Sequence
from typing import Any

from langgraph_evolver.environment import Environment
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.types import Action, Observation, StepResult, Task, ToolCall, ToolObservation

from ._data import CATEGORIES, _methods, bfcl, bfcl_tasks, shared_entry, tool_schema

__all__ = ["BFCLEnvironment", "call_string"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UNKNOWN_CALL = "__evolver_unknown_tool__()"
"""What the checker sees for a call of an unknown tool: it fails to execute (a NameError), as a call
of an unknown function does in BFCL, and still counts as a call (the irrelevance check)."""
_EXEC_ERROR = "Error during execution:"


def call_string(call: ToolCall) -> str:
    """``name(key=repr(value), ...)``: a JSON tool call as the Python call BFCL's backends execute.

    Raises ``ValueError`` when the arguments are not a JSON object or a name is not an identifier.
    """
    if not _IDENTIFIER.fullmatch(call.name):
        raise ValueError(f"{call.name!r} is not a function name")
    if not isinstance(call.arguments, dict):
        raise ValueError(f"arguments of {call.name} are not a JSON object: {str(call.arguments)[:200]!r}")
    bad = [k for k in call.arguments if not _IDENTIFIER.fullmatch(str(k))]
    if bad:
        raise ValueError(f"{call.name} got argument names that are not identifiers: {bad}")
    return f"{call.name}({', '.join(f'{k}={v!r}' for k, v in call.arguments.items())})"


class BFCLEnvironment(Environment):
    """BFCL v3 multi-turn (``base``, ``miss_func``, ``miss_param``, ``long_context``).

    Args:
        categories: The categories ``list_tasks`` draws from.
    """

    def __init__(self, *, categories: Sequence[str] | str = CATEGORIES) -> None:
        bfcl()  # a missing package fails here, with the install command
        if isinstance(categories, str):
            categories = [c.strip() for c in categories.split(",") if c.strip()]
        unknown = sorted(set(categories) - set(CATEGORIES))
        if unknown:
            raise ConfigError(f"Unknown BFCL categories {unknown}; choose from {', '.join(CATEGORIES)}.")
        self.categories = tuple(categories)
        self._entry: dict[str, Any] | None = None
        self._key = ""
        self.last_evaluation: dict[str, Any] | None = None

    # -- Environment --------------------------------------------------------------------------------
    def list_tasks(self, split: str = "train") -> list[Task]:
        return bfcl_tasks(split, self.categories)

    def reset(self, task: Task) -> Observation:
        self.close()
        e = shared_entry(task.id)  # read only: the backends deep-copy its initial config, the checker only reads
        self._entry = e
        self._category = task.id.removeprefix("multi_turn_").rpartition("_")[0]
        self._key = f"evolver_{uuid.uuid4().hex}"  # this rollout's own backend instances
        self._turn = 0
        self._steps_in_turn = 0
        self._decoded: list[list[list[str]]] = [[]]  # per turn, per step: the call strings BFCL's checker replays
        self._offered: list[dict[str, Any]] = list(e["function"])
        self._ended = self._forced = False
        self._score: float | None = None
        self.last_evaluation = None
        return Observation(messages=[dict(m) for m in e["question"][0]], tools=self._schemas())

    async def areset(self, task: Task) -> Observation:
        # The first reset of a category reads its files: off the event loop (langgraph dev refuses blocking IO).
        await asyncio.to_thread(shared_entry, task.id)
        return self.reset(task)

    def step(self, action: Action) -> StepResult:
        if self._entry is None:
            raise ConfigError("BFCLEnvironment.step before reset.")
        if self._ended or self._forced:
            why = "ended" if self._ended else f"was force-terminated (over {self._step_limit()} steps in a turn)"
            return StepResult(observations=tuple(ToolObservation(call_id=c.id, name=c.name, is_error=True,
                                                                 content=f"Error: the conversation {why}.")
                                                 for c in action.tool_calls), done=True)  # fmt: skip
        self._score = None
        if not action.tool_calls:
            return self._next_turn()
        observations = self._execute(action.tool_calls)
        self._steps_in_turn += 1
        if self._steps_in_turn > self._step_limit():
            self._forced = True
            return StepResult(observations=observations, done=True)
        return StepResult(observations=observations)

    def evaluate(self) -> float:
        if self._entry is None:
            return 0.0
        if self._score is None:
            self._score, self.last_evaluation = self._check()
        return self._score

    def close(self) -> None:
        if self._key:
            self._free(self._key)
            self._key = ""

    # -- turns ----------------------------------------------------------------------------------------
    def _schemas(self) -> list[dict[str, Any]]:
        return [tool_schema(doc) for doc in self._offered]

    @staticmethod
    def _step_limit() -> int:
        from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT

        return int(MAXIMUM_STEP_LIMIT)

    def _next_turn(self) -> StepResult:
        assert self._entry is not None
        from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC

        self._turn += 1
        self._steps_in_turn = 0
        questions = self._entry["question"]
        if self._turn >= len(questions):
            self._ended = True
            return StepResult(done=True)
        self._decoded.append([])
        messages = [dict(m) for m in questions[self._turn]]
        added = (self._entry.get("missed_function") or {}).get(str(self._turn))
        if not added:
            return StepResult(messages=tuple(messages))
        self._offered.extend(added)  # BFCL's holdout turn: no user text of its own, the functions arrive
        messages = messages or [{"role": "user", "content": DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC}]
        return StepResult(messages=tuple(messages), tools=tuple(self._schemas()))

    def _execute(self, calls: Sequence[ToolCall]) -> tuple[ToolObservation, ...]:
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

        assert self._entry is not None
        known = set(_methods(tuple(self._entry["involved_classes"])))
        outcome: list[str | None] = []  # an error text, or None: executed
        strings: list[str] = []  # what this step adds to the checker's replay
        runnable: list[str] = []
        for call in calls:
            try:
                text = call_string(call)
            except ValueError as e:
                outcome.append(f"Error: {e}. Call a tool with a JSON object of named arguments.")
                continue
            if call.name not in known:
                offered = ", ".join(sorted(doc["name"] for doc in self._offered))
                outcome.append(f"Error: unknown tool {call.name!r}. Available tools: {offered}")
                strings.append(_UNKNOWN_CALL)
                continue
            outcome.append(None)
            strings.append(text)
            runnable.append(text)
        results: list[str] = []
        if runnable:
            results, _ = execute_multi_turn_func_call(
                runnable,
                self._entry["initial_config"],
                self._entry["involved_classes"],
                self._key,
                self._entry["id"],
                long_context="long_context" in self._category,
                is_evaL_run=False,
            )
        if strings:
            self._decoded[self._turn].append(strings)
        done = iter(results)
        observations = []
        for call, error in zip(calls, outcome, strict=True):
            content = error if error is not None else str(next(done))
            failed = error is not None or content.startswith(_EXEC_ERROR)
            observations.append(ToolObservation(call_id=call.id, name=call.name, content=content, is_error=failed))
        return tuple(observations)

    # -- scoring ----------------------------------------------------------------------------------------
    def _check(self) -> tuple[float, dict[str, Any]]:
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import (
            multi_turn_checker,
            multi_turn_irrelevance_checker,
        )

        assert self._entry is not None
        truth = self._entry["ground_truth"]
        turns = len(self._decoded) if self._ended else len(self._decoded) - 1
        if self._forced or not self._ended:
            why = "over the step limit in a turn" if self._forced else "the conversation did not reach its end"
            return 0.0, {"valid": False, "error_type": "multi_turn:force_terminated",
                         "error_message": f"{why}: {turns} of {len(truth)} turns answered"}  # fmt: skip
        checker_key = f"{self._key}_check"
        try:
            verdict = multi_turn_checker(self._decoded, truth, self._entry, f"multi_turn_{self._category}", checker_key)
            if verdict.get("valid"):
                verdict = multi_turn_irrelevance_checker(self._decoded, truth)
        except Exception as e:  # the checker asserting on a malformed replay: a failed entry, not a crash
            verdict = {"valid": False, "error_type": "multi_turn:checker_error",
                       "error_message": f"{type(e).__name__}: {e}"}  # fmt: skip
        finally:
            self._free(checker_key)
        details = {"valid": bool(verdict.get("valid")), "error_type": verdict.get("error_type"),
                   "error_message": verdict.get("error_message")}  # fmt: skip
        return (1.0 if details["valid"] else 0.0), details

    @staticmethod
    def _free(prefix: str) -> None:
        """Delete the backend instances cached under ``prefix`` in bfcl-eval's module globals."""
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

        cache = vars(multi_turn_utils)
        for name in [n for n in list(cache) if n.startswith(prefix)]:
            cache.pop(name, None)

"""Capture: turn whatever a LangGraph run did into a ``Trajectory``, with no change to the graph.

A ``TrajectoryRecorder`` is a LangChain callback handler. Passed in a run's config
(``graph.invoke(x, {"callbacks": [recorder]})``) it sees every chat-model call in every node and
subgraph, and every tool run, however the graph is driven (``invoke``/``ainvoke``/``stream``/
``astream`` in any ``stream_mode``):

- each chat-model call becomes a ``Step``, in start order, tagged with the LangGraph node that
  made it (``langgraph_node``), its subgraph namespace and the model's name;
- a call **of the policy** (a ``PolicyChatModel``, which marks itself with
  ``metadata={"evolver_policy": True}``) keeps its exact prompt/completion token ids and sampled
  logprobs as the step's ``Transition``; calls of any other model are recorded as text and
  never trained;
- calls made inside a tool (an LLM used by a tool) are recorded, and trained only with
  ``train_tool_llm_calls=True``;
- tool results are matched to the calls by ``tool_call_id`` and become the step's observations.

A trajectory whose capture is incomplete (a policy call that came back without token ids, a call
that never finished) says why in ``errors`` and in ``metadata["capture"]["incomplete"]``; the
trainer does not train on it.

Example:
    >>> recorder = TrajectoryRecorder()
    >>> state = graph.invoke({"messages": [("user", "hi")]}, {"callbacks": [recorder]})   # doctest: +SKIP
    >>> trajectory = recorder.trajectory(task, reward=1.0, final_state=state)              # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from ._llm import message_text
from .context.templates import strip_thoughts
from .errors import EvolverError
from .transitions import POLICY_MARKER, transition_from_message
from .types import Action, FinishReason, Step, Task, ToolCall, ToolObservation, Trajectory

__all__ = [
    "POLICY_MARKER",
    "LLMCall",
    "TrajectoryRecorder",
    "TurnLimitReached",
    "calls_of",
    "message_text",
    "subgraph_path",
]

MALFORMED_MARKER = "<tool_call>"
logger = logging.getLogger(__name__)


class TurnLimitReached(EvolverError):
    """Raised (by the recorder, through LangChain's callbacks) when a run exceeds ``max_turns`` policy calls."""


class _QuietTurnLimit(logging.Filter):
    """LangChain logs every exception a handler raises as a warning before re-raising it; the turn
    limit is a planned stop (the rollout records it as ``max_turns``), so its warning is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(isinstance(a, str) and a.startswith("TurnLimitReached(") for a in record.args or ())


logging.getLogger("langchain_core.callbacks.manager").addFilter(_QuietTurnLimit())


def calls_of(ai: AIMessage, turn: int = 0) -> list[ToolCall]:
    """The tool calls of an AI message, invalid ones included (arguments stay the raw string)."""
    calls = [
        ToolCall(name=tc["name"], arguments=tc.get("args") or {}, id=tc.get("id") or f"call_{turn}_{i}")
        for i, tc in enumerate(ai.tool_calls)
    ]
    offset = len(calls)
    calls += [
        ToolCall(
            name=tc.get("name") or "", arguments=tc.get("args") or "", id=tc.get("id") or f"call_{turn}_{offset + i}"
        )  # fmt: skip
        for i, tc in enumerate(ai.invalid_tool_calls)
    ]
    return calls


def step_error(ai: AIMessage) -> str | None:
    """Why this output is a malformed tool call, or ``None``."""
    if ai.invalid_tool_calls:
        return "; ".join(f"{c.get('name')}: {c.get('error') or 'bad arguments'}" for c in ai.invalid_tool_calls)
    if not ai.tool_calls and MALFORMED_MARKER in message_text(ai):
        return "unparseable tool call"
    return None


def _never_raises(method: Any) -> Any:
    """Recording must never break the user's graph: only ``TurnLimitReached`` leaves a handler."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            method(self, *args, **kwargs)
        except TurnLimitReached:
            raise
        except Exception as e:  # noqa: BLE001 - a capture bug is logged, the run goes on
            logger.warning("trajectory capture: %s failed (%s: %s); the step may be missing", method.__name__,
                           type(e).__name__, e)  # fmt: skip

    return wrapper


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class TurnLimitGuard(AsyncCallbackHandler):
    """Raises a ``TrajectoryRecorder``'s turn limit in an async run, from outside the inline recorder.

    Not inline, so LangChain gathers it with the other non-inline handlers and every coroutine made for the event
    runs; async, so that costs no thread-pool hop. It listens to chat-model starts only (a completion model's
    limit is raised by the recorder itself, as in a sync run).
    """

    run_inline = False
    raise_error = True
    ignore_llm = ignore_chain = ignore_agent = ignore_retriever = ignore_retry = ignore_custom_event = True

    def __init__(self, recorder: TrajectoryRecorder) -> None:
        super().__init__()
        self.recorder = recorder

    async def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.recorder.refuse_if_over(run_id)


@dataclass(slots=True)
class LLMCall:
    """One chat-model call as the callbacks saw it."""

    run_id: str
    order: int
    node: str | None
    namespace: str
    model: str
    policy: bool
    in_tool: bool
    kind: str = "action"
    output: AIMessage | None = None
    error: str | None = None
    done: bool = False


@dataclass(slots=True)
class _ToolRun:
    name: str
    call_id: str | None
    output: ToolObservation | None = None


@dataclass(eq=False)  # hashable by identity: LangChain merges handler sets when a subgraph runs
class TrajectoryRecorder(BaseCallbackHandler):
    """Records the LLM calls and tool results of one run (see the module docstring).

    Args:
        max_turns: Stop the run (``TurnLimitReached``) before the policy's ``max_turns + 1``-th call
            (per user turn: ``start_user_turn`` starts the count again for a multi-turn environment's next message).
        train_tool_llm_calls: Also train on policy calls made inside tools.
    """

    max_turns: int | None = None
    train_tool_llm_calls: bool = False
    calls: list[LLMCall] = field(default_factory=list)
    _by_run: dict[UUID, LLMCall] = field(default_factory=dict)
    _parents: dict[UUID, UUID | None] = field(default_factory=dict)
    _tool_runs: dict[UUID, _ToolRun] = field(default_factory=dict)
    _node_results: dict[str, ToolObservation] = field(default_factory=dict)
    """Tool messages seen in any node's output, at any depth (first per call id): results no tool run reported,
    such as ``ToolNode``'s error for an unknown tool inside a subgraph whose state the final state never shows."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    turn_limit_hit: bool = False
    user_turns: int = 1
    """User turns of the run so far (a multi-turn environment sends more than one)."""
    _turn_base: int = 0
    _guard: Any = None
    _refused: set[UUID] = field(default_factory=set)

    # Exceptions from handlers are swallowed by LangChain unless raise_error: only the turn limit is
    # raised on purpose; everything else is caught here so recording can never break the user's graph.
    raise_error = True

    # Inline (called on the event loop, no thread-pool hop per event) unless it may have to raise the turn limit
    # itself. LangChain's async callback manager makes every handler's coroutine for an event before it runs the
    # inline ones, so a turn limit raised inline would leave the others un-awaited (LangGraph's stream handler's
    # "coroutine 'ahandle_event' was never awaited"). With a ``turn_limit_guard()`` attached (``arun_episode``
    # does), an async run's refused call is only marked here and the guard, gathered with the other handlers,
    # raises; without one, a recorder with ``max_turns`` is gathered itself (one hop per event). Constant for a
    # run: LangChain reads it twice per event, and a value that changed in between would run the handler twice.
    @property
    def run_inline(self) -> bool:  # type: ignore[override]
        return self.max_turns is None or self._guard is not None

    def __post_init__(self) -> None:
        super().__init__()

    # -- bookkeeping ------------------------------------------------------------------------------
    def _in_tool(self, parent: UUID | None) -> bool:
        seen = 0
        while parent is not None and seen < 1000:
            if parent in self._tool_runs:
                return True
            parent = self._parents.get(parent)
            seen += 1
        return False

    @_never_raises
    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                       **kwargs: Any) -> None:  # fmt: skip
        self._parents[run_id] = parent_run_id

    @_never_raises
    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        for message in _tool_messages(outputs):
            if message.tool_call_id and message.tool_call_id not in self._node_results:
                self._node_results[message.tool_call_id] = _observation(message, message.name or "")

    @_never_raises
    def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], *, run_id: UUID,
                            parent_run_id: UUID | None = None, metadata: dict[str, Any] | None = None,
                            **kwargs: Any) -> None:  # fmt: skip
        self._start_llm(run_id, parent_run_id, metadata or {}, kwargs, chat=True)

    @_never_raises
    def on_llm_start(self, serialized: Any, prompts: list[str], *, run_id: UUID, parent_run_id: UUID | None = None,
                     metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:  # fmt: skip
        self._start_llm(run_id, parent_run_id, metadata or {}, kwargs)

    def _start_llm(self, run_id: UUID, parent: UUID | None, metadata: dict[str, Any], kwargs: dict, *,
                   chat: bool = False) -> None:  # fmt: skip
        with self._lock:
            self._parents[run_id] = parent
            params = kwargs.get("invocation_params") or {}
            policy = bool(metadata.get(POLICY_MARKER))
            call = LLMCall(
                run_id=str(run_id),
                order=len(self.calls),
                node=metadata.get("langgraph_node"),
                namespace=subgraph_path(str(metadata.get("langgraph_checkpoint_ns") or "")),
                model=str(
                    params.get("model")
                    or params.get("model_name")
                    or metadata.get("ls_model_name")
                    or kwargs.get("name")
                    or "unknown"
                ),  # fmt: skip
                policy=policy,
                in_tool=self._in_tool(parent),
                kind=str(metadata.get("evolver_step_kind") or "action"),
            )
            if policy and self.max_turns is not None and not call.in_tool and call.kind == "action":
                made = sum(c.policy and not c.in_tool and c.kind == "action" for c in self.calls) - self._turn_base
                if made >= self.max_turns:
                    self.turn_limit_hit = True
                    if chat and self._guard is not None and _on_event_loop():
                        self._refused.add(run_id)  # the guard raises it, gathered with the other handlers
                        return
                    raise TurnLimitReached(f"the run reached max_turns={self.max_turns} policy calls")
            self.calls.append(call)
            self._by_run[run_id] = call

    @_never_raises
    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._by_run.get(run_id)
        if call is None:
            return
        try:
            message = response.generations[0][0].message
        except (AttributeError, IndexError):
            message = None
        if isinstance(message, AIMessage):
            call.output = message
        elif message is None and response.generations and response.generations[0]:
            call.output = AIMessage(getattr(response.generations[0][0], "text", ""))
        call.done = True

    @_never_raises
    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._by_run.get(run_id)
        if call is not None:
            call.error, call.done = f"{type(error).__name__}: {error}", True

    @_never_raises
    def on_tool_start(self, serialized: Any, input_str: str, *, run_id: UUID, parent_run_id: UUID | None = None,
                      inputs: Any = None, **kwargs: Any) -> None:  # fmt: skip
        name = (serialized or {}).get("name") or kwargs.get("name") or ""
        call_id = kwargs.get("tool_call_id")
        if call_id is None and isinstance(inputs, dict):
            call_id = inputs.get("tool_call_id") or inputs.get("id")
        with self._lock:
            self._parents[run_id] = parent_run_id
            self._tool_runs[run_id] = _ToolRun(name=name, call_id=call_id)

    @_never_raises
    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._tool_runs.get(run_id)
        if run is None:
            return
        if isinstance(output, ToolMessage):
            run.call_id = run.call_id or output.tool_call_id
            run.output = _observation(output, run.name)
        elif run.call_id:
            run.output = ToolObservation(call_id=run.call_id, name=run.name, content=str(output))

    @_never_raises
    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        run = self._tool_runs.get(run_id)
        if run is not None and run.call_id:
            run.output = ToolObservation(call_id=run.call_id, name=run.name, is_error=True,
                                         content=f"Error: {type(error).__name__}: {error}")  # fmt: skip

    def turn_limit_guard(self) -> TurnLimitGuard:
        """The handler that raises this recorder's turn limit in an async run; add it after the recorder."""
        if self._guard is None:
            self._guard = TurnLimitGuard(self)
        return self._guard

    def refuse_if_over(self, run_id: UUID) -> None:
        """``TurnLimitReached`` when the recorder refused ``run_id`` (the guard's check)."""
        with self._lock:
            if run_id not in self._refused:
                return
            self._refused.discard(run_id)
        raise TurnLimitReached(f"the run reached max_turns={self.max_turns} policy calls")

    def start_user_turn(self) -> None:
        """A new user message arrived (multi-turn environments): ``max_turns`` counts from here."""
        with self._lock:
            self._turn_base = sum(c.policy and not c.in_tool and c.kind == "action" for c in self.calls)
            self.user_turns += 1

    # -- assembly ---------------------------------------------------------------------------------
    @property
    def policy_calls(self) -> list[LLMCall]:
        return [c for c in self.calls if c.policy and (self.train_tool_llm_calls or not c.in_tool)]

    @property
    def turns(self) -> int:
        """Policy calls that acted (context-management calls are not turns)."""
        return sum(c.kind == "action" for c in self.policy_calls)

    def observations(self, final_state: Any = None) -> dict[str, list[ToolObservation]]:
        """Tool results per call id, in order: from the tool runs, else the tool messages of any node's output (a
        subgraph's included), else the final state's ``ToolMessage``s.

        A list per id, consumed in order, so two calls that reuse an id still get their own results.
        """
        found: dict[str, list[ToolObservation]] = {}
        for run in list(self._tool_runs.values()):
            if run.call_id and run.output is not None:
                found.setdefault(run.call_id, []).append(run.output)
        for call_id, observation in list(self._node_results.items()):
            found.setdefault(call_id, [observation])
        from_state: dict[str, list[ToolObservation]] = {}
        for m in _state_messages(final_state):
            if isinstance(m, ToolMessage) and m.tool_call_id not in found:
                from_state.setdefault(m.tool_call_id, []).append(_observation(m, m.name or ""))
        return found | from_state

    def steps(self, final_state: Any = None) -> list[Step]:
        """One ``Step`` per recorded LLM call, in start order."""
        observed = self.observations(final_state)
        steps = []
        for call in self.calls:
            ai = call.output
            trained = call.policy and (self.train_tool_llm_calls or not call.in_tool)
            if ai is None:
                steps.append(Step(index=call.order, action=Action(), error=call.error or "no output",
                                  llm_run_id=call.run_id, node=call.node, model=call.model,
                                  namespace=call.namespace, policy=trained, kind=call.kind))  # fmt: skip
                continue
            tool_calls = calls_of(ai, call.order) if call.kind == "action" else []
            steps.append(
                Step(
                    index=call.order,
                    action=Action(tool_calls=tuple(tool_calls), content=message_text(ai) or None),
                    observations=tuple(observed[c.id].pop(0) for c in tool_calls if observed.get(c.id)),
                    transition=transition_from_message(ai) if trained else None,
                    error=step_error(ai) if call.kind == "action" else None,
                    llm_run_id=call.run_id,
                    node=call.node,
                    model=call.model,
                    namespace=call.namespace,
                    policy=trained,
                    kind=call.kind,
                )
            )
        return steps

    def incomplete(self) -> str | None:
        """Why this capture cannot be trained on, or ``None`` when it is complete."""
        for call in self.policy_calls:
            where = f"policy call #{call.order} (node {call.node or '?'})"
            if not call.done:
                return f"{where} never finished"
            if call.error is not None:
                return f"{where} failed: {call.error}"
            if call.output is None or transition_from_message(call.output) is None:
                return (f"{where} came back without token ids; the endpoint must return prompt_token_ids, token_ids "
                        "and logprobs (vLLM >= 0.10.2; PolicyChatModel asks for them)")  # fmt: skip
        return None

    def summary(self) -> dict[str, Any]:
        policy = self.policy_calls
        return {
            "llm_calls": len(self.calls),
            "policy_calls": len(policy),
            "other_calls": len(self.calls) - len(policy),
            "other_models": sorted({c.model for c in self.calls if not c.policy}),
            "nodes": [c.node for c in self.calls],
            "incomplete": self.incomplete(),
        }

    def _last_output(self, final_state: Any = None) -> AIMessage | None:
        """The graph's last AI message: the final state's last message, else the last action call's output."""
        messages = _state_messages(final_state)
        if messages:
            return messages[-1] if isinstance(messages[-1], AIMessage) else None
        for call in reversed(self.calls):
            if call.output is not None and not call.in_tool and call.kind == "action":
                return call.output
        return None

    def final_text(self, final_state: Any = None) -> str | None:
        """The graph's final answer: its last AI message's text, when that is neither a tool call nor a malformed
        one (a ``<tool_call>`` that did not parse is not an answer: ``malformed_ending``)."""
        last = self._last_output(final_state)
        if last is None or last.tool_calls or step_error(last) is not None:
            return None
        return strip_thoughts(message_text(last))

    def malformed_ending(self, final_state: Any = None) -> str | None:
        """Why the graph's last AI message is a malformed tool call (the graph stopped on it), or ``None``."""
        last = self._last_output(final_state)
        return step_error(last) if last is not None and not last.tool_calls else None

    def trajectory(
        self,
        task: Task,
        *,
        reward: float | None = None,
        final_state: Any = None,
        trajectory_id: str = "",
        group_id: str = "",
        rollout_index: int = 0,
        finish_reason: FinishReason | None = None,
        errors: tuple[str, ...] | list[str] = (),
        metadata: dict[str, Any] | None = None,
        experience_ids: tuple[str, ...] = (),
    ) -> Trajectory:
        """Assemble the ``Trajectory`` of this run."""
        steps = self.steps(final_state)
        errors = list(errors)
        summary = self.summary()
        if summary["incomplete"]:
            ended = f" (the run ended by {finish_reason})" if finish_reason not in (None, "error") else ""
            errors.append(f"capture incomplete, not trained on: {summary['incomplete']}{ended}")
            # whatever ended the run (its turn limit included), a policy call is missing: the rollout cannot be
            # scored as the policy's doing, so it is an error (``failure_kind``: infrastructure, left out)
            finish_reason = "error"
        if finish_reason is None:
            if self.turn_limit_hit:
                finish_reason = "max_turns"
            elif errors:
                finish_reason = "error"
            else:
                finish_reason = "final_answer"
        return Trajectory(
            id=trajectory_id or f"{task.id}/{rollout_index}",
            task=task,
            steps=tuple(steps),
            reward=reward,
            finish_reason=finish_reason,
            group_id=group_id,
            rollout_index=rollout_index,
            errors=tuple(errors),
            experience_ids=tuple(experience_ids),
            metadata={"turns": self.turns, "capture": summary, **(metadata or {})},
        )


def _observation(message: ToolMessage, name: str) -> ToolObservation:
    content = message.content if isinstance(message.content, str) else message.text
    return ToolObservation(call_id=message.tool_call_id, name=message.name or name, content=content,
                           is_error=message.status == "error")  # fmt: skip


def _tool_messages(value: Any, depth: int = 0) -> list[ToolMessage]:
    """The ``ToolMessage``s in a node's output: a message, a list, a state dict, a ``Command``'s update."""
    if depth > 4 or value is None:
        return []
    if isinstance(value, ToolMessage):
        return [value]
    if isinstance(value, list | tuple):
        return [m for v in value for m in _tool_messages(v, depth + 1)]
    if isinstance(value, dict):
        return _tool_messages(value.get("messages"), depth + 1)
    update = getattr(value, "update", None)  # langgraph.types.Command
    return _tool_messages(update, depth + 1) if update is not None and not callable(update) else []


def subgraph_path(checkpoint_ns: str) -> str:
    """``"work:<id>|executor:<id>"`` (the node's own checkpoint namespace) → ``"work"`` (its subgraph path)."""
    return "|".join(part.split(":", 1)[0] for part in checkpoint_ns.split("|")[:-1])


def _state_messages(state: Any) -> list[BaseMessage]:
    if isinstance(state, dict):
        messages = state.get("messages")
        if isinstance(messages, list):
            return [m for m in messages if isinstance(m, BaseMessage)]
    return []

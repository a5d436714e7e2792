"""Tool runs for tool calls a node executes itself, so its trace looks like any LangGraph agent's."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from ..types import ToolCall, ToolObservation

__all__ = ["trace_tool_calls"]

logger = logging.getLogger(__name__)


@asynccontextmanager
async def trace_tool_calls(calls: Sequence[ToolCall]) -> AsyncIterator[Callable[[Sequence[ToolObservation]], None]]:
    """``tool`` runs for calls a node executes itself (e.g. one environment step for a whole turn).

    Inside a LangGraph node, opens one tool run per call under the node's run (in every callback of
    the node's config: LangSmith, ``JsonlTracer``, the trajectory recorder), so the trace looks like
    any LangGraph agent's. Call the yielded function with the observations (matched by call id, else
    by position); calls without one, or all of them when the block raises, end as errors. Tracing
    failures are logged, never raised.

    Example:
        >>> async with trace_tool_calls(calls) as record:  # doctest: +SKIP
        ...     result = await env.astep(Action(tool_calls=tuple(calls)))
        ...     record(result.observations)
    """
    managers: list[Any] = []
    try:
        from langchain_core.callbacks.manager import AsyncCallbackManager
        from langchain_core.runnables.config import ensure_config

        config = ensure_config()
        manager = AsyncCallbackManager.configure(
            inheritable_callbacks=config.get("callbacks"),
            inheritable_tags=config.get("tags"),
            inheritable_metadata=config.get("metadata"),
        )
        if manager.handlers:
            for call in calls:
                arguments = call.arguments if isinstance(call.arguments, dict) else {"arguments": call.arguments}
                managers.append(await manager.on_tool_start(
                    {"name": call.name, "description": ""}, json.dumps(arguments, ensure_ascii=False, default=str),
                    inputs=arguments, name=call.name, tool_call_id=call.id))  # fmt: skip
    except Exception:
        logger.debug("trace_tool_calls: could not open tool runs", exc_info=True)
        managers = []
    outputs: list[ToolObservation | None] = [None] * len(managers)

    def record(observations: Sequence[ToolObservation]) -> None:
        by_id = {o.call_id: o for o in observations}
        for i, call in enumerate(calls[: len(managers)]):
            outputs[i] = by_id.get(call.id) or (observations[i] if i < len(observations) else None)

    error: BaseException | None = None
    try:
        yield record
    except BaseException as e:
        error = e
        raise
    finally:
        if managers:
            await _end_tool_runs(managers, calls, outputs, error)


async def _end_tool_runs(managers: list[Any], calls: Sequence[ToolCall], outputs: list[ToolObservation | None],
                         error: BaseException | None) -> None:  # fmt: skip
    from langchain_core.messages import ToolMessage

    for run, call, obs in zip(managers, calls, outputs, strict=False):
        try:
            if obs is None:
                await run.on_tool_error(error or RuntimeError(f"no observation for tool call {call.id!r}"))
            else:
                status = "error" if obs.is_error else "success"
                await run.on_tool_end(ToolMessage(obs.content, tool_call_id=call.id, name=obs.name or call.name,
                                                  status=status))  # fmt: skip
        except Exception:
            logger.debug("trace_tool_calls: could not close a tool run", exc_info=True)

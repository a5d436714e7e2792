"""LangChain tools as an environment's tools: turning a function into one, and saying what went wrong in a call.

``as_langchain_tool`` and the helpers ``ToolsEnvironment`` (``langchain_tools.py``, which re-exports
``as_langchain_tool``) uses to run a call and describe its failure; apart so each module stays under 600 lines.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool, Tool
from pydantic import ValidationError
from pydantic.v1 import ValidationError as ValidationErrorV1

from langgraph_evolver.errors import ConfigError

__all__ = ["as_langchain_tool"]

ToolLike = BaseTool | Callable[..., Any]
"""A LangChain tool, or a plain typed function with a docstring (converted on reset)."""

_MAX_ERRORS_SHOWN = 5


def as_langchain_tool(obj: ToolLike) -> BaseTool:
    """Return ``obj`` as a LangChain tool, converting a plain (sync or async) typed function.

    Raises:
        ConfigError: ``obj`` is neither a tool nor a function LangChain can describe (for
            example a function without a docstring).
    """
    if isinstance(obj, BaseTool):
        return obj
    if not callable(obj):
        raise ConfigError(f"{obj!r} is not a tool: pass a LangChain BaseTool or a typed function with a docstring.")
    key = "coroutine" if inspect.iscoroutinefunction(obj) else "func"
    name = getattr(obj, "__name__", repr(obj))
    try:
        return StructuredTool.from_function(**{key: obj}, parse_docstring=True)
    except ValueError:
        pass  # the docstring has no parseable Args section: describe the function by its docstring only
    try:
        return StructuredTool.from_function(**{key: obj})
    except Exception as e:
        raise ConfigError(
            f"Could not turn function {name!r} into a tool ({e}). Give it type hints and a docstring "
            "(the docstring becomes the tool description), or wrap it with @tool(description=...)."
        ) from e


def _is_async_only(tool: BaseTool) -> bool:
    return isinstance(tool, StructuredTool | Tool) and tool.func is None and tool.coroutine is not None


def _has_native_async(tool: BaseTool) -> bool:
    if isinstance(tool, StructuredTool | Tool):
        return tool.coroutine is not None
    return type(tool)._arun is not BaseTool._arun


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parameters(schema: dict[str, Any]) -> dict[str, Any]:
    return schema.get("function", {}).get("parameters") or {}


def _signature_text(schema: dict[str, Any]) -> str:
    """``title (string, required), priority (integer)`` from an OpenAI tool schema."""
    params = _parameters(schema)
    required = set(params.get("required") or ())
    parts = []
    for key, spec in (params.get("properties") or {}).items():
        kind = spec.get("type", "any") if isinstance(spec, dict) else "any"
        parts.append(f"{key} ({kind}{', required' if key in required else ''})")
    return ", ".join(parts) or "no arguments"


def _describe_validation_error(error: ValidationError | ValidationErrorV1) -> str:
    problems = []
    errors = error.errors()
    for err in errors[:_MAX_ERRORS_SHOWN]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(arguments)"
        text = f"argument {loc!r}: {err.get('msg', 'invalid value')}"
        if err.get("type") != "missing" and "input" in err:
            text += f" (got {_short(err['input'])})"
        problems.append(text)
    if len(errors) > _MAX_ERRORS_SHOWN:
        problems.append(f"and {len(errors) - _MAX_ERRORS_SHOWN} more")
    return "; ".join(problems)


def _is_argument_error(tool: BaseTool, error: ValidationError | ValidationErrorV1) -> bool:
    """Whether a ValidationError came from the tool's ``args_schema`` rather than its body."""
    schema = tool.args_schema
    title = getattr(error, "title", None)
    if title is None or not isinstance(schema, type):
        return True  # pydantic v1 errors carry no model name; assume the arguments
    return title == schema.__name__


def _render_content(content: Any) -> str:
    """Text of a tool result: strings as they are, text blocks joined, anything else as JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and all(isinstance(b, dict) and b.get("type") == "text" for b in content):
        return "\n".join(str(b.get("text", "")) for b in content)
    try:
        return json.dumps(content, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(content)


def _close_state(state: Any) -> None:
    """Release a factory's state object when it has a ``close()``."""
    close = getattr(state, "close", None)
    if callable(close):
        close()

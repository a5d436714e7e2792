"""An ``mcp:`` name and an MCP tasks file, read: ``parse_mcp_spec`` and ``load_mcp_tasks``.

Apart from ``mcp.py`` (which re-exports both, their public path) so each stays under 600 lines.
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from langgraph_evolver.errors import ConfigError
from langgraph_evolver.types import Task, ToolCall, read_jsonl

__all__ = ["load_mcp_tasks", "load_task_file", "parse_mcp_spec", "task_calls"]

logger = logging.getLogger("env_tools.mcp")  # the environment's logger, as before the split

_OPTION_KEYS = (
    "tasks",
    "timeout",
    "startup_timeout",
    "isolation",
    "reset_tool",
    "checker",
    "judge",
    "judge_base_url",
    "snapshot_tools",
    "max_output_bytes",
)

_PYTHONS = frozenset({"python", "python3"})
_NOTED_INTERPRETER: set[str] = set()


# -- the spec ------------------------------------------------------------------------------------------------------


def parse_mcp_spec(spec: str) -> tuple[dict[str, Any], dict[str, str]]:
    """``"mcp:python srv.py#tasks=t.jsonl"`` -> (a langchain-mcp-adapters connection, the ``#`` options)."""
    body = spec.removeprefix("mcp:").strip()
    body, _, fragment = body.partition("#")
    options = dict(parse_qsl(fragment, keep_blank_values=True))
    unknown = sorted(set(options) - set(_OPTION_KEYS))
    if unknown:
        raise ConfigError(f"Unknown option(s) {unknown} in {spec!r}; valid: {', '.join(_OPTION_KEYS)}.")
    body = body.strip()
    if not body:
        raise ConfigError(f"{spec!r} names no server: write mcp:<command line> or mcp:http://host:port/mcp.")
    if body.startswith(("http://", "https://")):
        return {"transport": "streamable_http", "url": body}, options
    try:
        argv = shlex.split(body)
    except ValueError as e:
        raise ConfigError(f"Could not split the command line of {spec!r}: {e}") from e
    return {"transport": "stdio", "command": _interpreter(argv[0], spec), "args": argv[1:]}, options


def _interpreter(command: str, spec: str) -> str:
    """A bare ``python`` / ``python3`` is this interpreter (``sys.executable``), said once: the first ``python`` on
    PATH is often not the one with the server's packages (a run without the venv activated failed that way)."""
    if command not in _PYTHONS:
        return command
    if spec not in _NOTED_INTERPRETER:
        _NOTED_INTERPRETER.add(spec)
        logger.warning("%s: %r runs as this interpreter, %s (sys.executable), not the first %r on PATH; write "
                       "its full path to run another.", spec.partition("#")[0], command, sys.executable,
                       command)  # fmt: skip
    return sys.executable


# -- tasks --------------------------------------------------------------------------------------------------------


def task_calls(value: Any, where: str) -> tuple[ToolCall, ...]:
    """A task row's ``setup`` / ``reference`` / ``check`` calls, read; ``ConfigError`` naming ``where`` if malformed."""
    if not isinstance(value, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in value):
        raise ConfigError(f'{where} must be a list of calls like {{"name": "list_todos", "arguments": {{}}}}.')
    return tuple(ToolCall(name=c["name"], arguments=dict(c.get("arguments") or {})) for c in value)


def load_mcp_tasks(path: str | Path, *, env: str = "mcp") -> dict[str, list[Task]]:
    """Tasks from a JSONL file, by split. One object a line:

    ``id``; ``instruction`` or ``query``; ``split`` (``train``); ``initial_state`` (the reset tool's arguments);
    ``setup`` (calls run before the episode); ``reference`` (calls that solve it); ``check`` (read-only calls
    compared with the reference's replay); ``checker`` (``module:function``); ``answer``; ``metadata``.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"MCP tasks file {str(path)!r} does not exist.")
    splits: dict[str, list[Task]] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where} is not JSON: {e}") from e
        query = row.get("instruction", row.get("query"))
        if not isinstance(query, str) or not query.strip():
            raise ConfigError(f"{where} has no 'instruction' (or 'query').")
        metadata = dict(row.get("metadata") or {})
        for key in ("answer", "checker"):
            if key in row:
                metadata[key] = row[key]
        if "setup" in row:
            metadata["setup"] = [c.to_dict() for c in task_calls(row["setup"], f"{where} 'setup'")]
        reference = task_calls(row["reference"], f"{where} 'reference'") if "reference" in row else None
        if "check" in row:
            task_calls(row["check"], f"{where} 'check'")
            if reference is None:
                raise ConfigError(f"{where} has 'check' calls but no 'reference' to replay and compare with.")
            metadata["check"] = row["check"]
        task = Task(id=str(row.get("id", f"{path.stem}-{number}")), query=query, env=env,
                    env_params=dict(row.get("initial_state") or {}), reference_solution=reference,
                    metadata=metadata)  # fmt: skip
        splits.setdefault(str(row.get("split", "train")), []).append(task)
    return splits


def load_task_file(path: str | Path, *, env: str = "mcp") -> list[Task]:
    """Every task of a file in either format: ``Task`` rows (with ``reference_solution``, as the synthesizer
    writes them) or the MCP tasks format above (every split)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"tasks file {str(path)!r} does not exist.")
    try:
        first = next(read_jsonl(path), {})
    except ValueError as e:
        raise ConfigError(f"{path} is not JSON: {e}") from e
    if isinstance(first, dict) and "reference_solution" in first:
        return list(read_jsonl(path, Task))
    return [t for split in load_mcp_tasks(path, env=env).values() for t in split]

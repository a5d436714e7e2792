"""A small stateful to-do MCP server (FastMCP) for tests/test_mcp_env.py and benchmarks/mcp_env.py.

State is kept per MCP session (the convention docs/mcp.md describes), so over streamable HTTP every
client session sees its own list; over stdio a process has one session. A ``reset`` tool (the
declared reset convention) empties the list and seeds it from ``items``.

Also: ``crash`` kills the process mid-call, ``hang`` never answers.

Run:
    python tests/mcp_todo_server.py                 # stdio
    python tests/mcp_todo_server.py --http 8123     # streamable HTTP at http://127.0.0.1:8123/mcp
"""

from __future__ import annotations

import argparse
import asyncio
import os
import weakref
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp.server.fastmcp import Context, FastMCP
from pydantic import BaseModel, Field

Priority = Literal["low", "normal", "high"]
_RANK = {"low": 0, "normal": 1, "high": 2}


class Due(BaseModel):
    """A due date (a nested object in the tool schema)."""

    date: str = Field(description="ISO date, e.g. 2026-05-01")
    reminder: bool = False


@dataclass
class TodoList:
    items: dict[int, dict[str, Any]] = field(default_factory=dict)
    next_id: int = 1

    def add(self, title: str, priority: Priority, tags: list[str], due: Due | None) -> dict[str, Any]:
        item = {"id": self.next_id, "title": title, "priority": priority, "tags": sorted(tags), "done": False,
                "due": None if due is None else due.model_dump()}  # fmt: skip
        self.items[self.next_id] = item
        self.next_id += 1
        return item


_LISTS: weakref.WeakKeyDictionary[Any, TodoList] = weakref.WeakKeyDictionary()


def _todos(ctx: Context) -> TodoList:
    session = ctx.session
    if session not in _LISTS:
        _LISTS[session] = TodoList()
    return _LISTS[session]


def build_server(port: int = 8000) -> FastMCP:
    server = FastMCP("todo", port=port, log_level="WARNING")

    @server.tool()
    def reset(ctx: Context, items: list[str] | None = None) -> str:
        """Empty the to-do list, then add ``items`` (titles, normal priority)."""
        todos = TodoList()
        _LISTS[ctx.session] = todos
        for title in items or ():
            todos.add(title, "normal", [], None)
        return f"reset: {len(todos.items)} item(s)"

    @server.tool()
    def add_todo(
        ctx: Context, title: str, priority: Priority = "normal", tags: list[str] | None = None, due: Due | None = None
    ) -> dict[str, Any]:
        """Add a to-do item; returns it with its id."""
        return _todos(ctx).add(title, priority, tags or [], due)

    @server.tool()
    def list_todos(
        ctx: Context,
        status: Literal["open", "done", "all"] = "open",
        tag: str | None = None,
        min_priority: Priority = "low",
    ) -> list[dict[str, Any]]:
        """List to-do items, filtered by status, tag and minimum priority, by id."""
        out = []
        for item in _todos(ctx).items.values():
            if status != "all" and item["done"] != (status == "done"):
                continue
            if tag is not None and tag not in item["tags"]:
                continue
            if _RANK[item["priority"]] < _RANK[min_priority]:
                continue
            out.append(item)
        return out

    @server.tool()
    def complete_todo(ctx: Context, id: int) -> str:
        """Mark the item ``id`` done."""
        todos = _todos(ctx)
        if id not in todos.items:
            raise ValueError(f"no to-do with id {id}; list_todos shows the ids")
        todos.items[id]["done"] = True
        return f"done: {todos.items[id]['title']}"

    @server.tool()
    def delete_todo(ctx: Context, id: int) -> str:
        """Delete the item ``id``."""
        todos = _todos(ctx)
        if id not in todos.items:
            raise ValueError(f"no to-do with id {id}; list_todos shows the ids")
        return f"deleted: {todos.items.pop(id)['title']}"

    @server.tool()
    def crash() -> str:
        """Kill the server process (for tests)."""
        os._exit(3)

    @server.tool()
    async def hang() -> str:
        """Never answer (for tests)."""
        await asyncio.Event().wait()
        return "unreachable"

    return server


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, help="serve streamable HTTP on this port instead of stdio")
    args = parser.parse_args()
    if args.http:
        build_server(args.http).run(transport="streamable-http")
    else:
        build_server().run()

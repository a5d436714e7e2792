"""A to-do assistant whose tools come from an MCP server, as its author wrote it; trainable unchanged.

The tools are loaded from ``tests/mcp_todo_server.py`` with ``MultiServerMCPClient``, the agent is
``create_agent`` with ``EvolverMiddleware()`` (the one langgraph-evolver line, marked ``# drop-in``).
Outside a rollout this is the production agent: its tools talk to the author's own server (each call
opens an MCP session of its own, which is how ``MultiServerMCPClient.get_tools()`` tools work).

Inside a rollout the middleware sends each tool call to the rollout's environment tool of the same
name. With ``--env "mcp:<the same server>"`` those are the environment's MCP tools, on the rollout's
own session (one server process per rollout over stdio), so the agent's writes land in the instance
that the checker reads; the calls are captured as steps like any others (docs/mcp.md).

    python -m trainers.evaluate --agent examples.mcp_agent:agent \\
        --env "mcp:python tests/mcp_todo_server.py#tasks=todo_tasks.jsonl" --k 4

Loading the tools starts the server once at import (to list its tools); the model is any
OpenAI-compatible endpoint (``TODO_MODEL``, ``TODO_BASE_URL``), replaced by the policy in a rollout.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from langchain.agents import create_agent
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_openai import ChatOpenAI

from langgraph_evolver import EvolverMiddleware  # drop-in

SERVER = Path(__file__).resolve().parent.parent / "tests" / "mcp_todo_server.py"
SYSTEM_PROMPT = "You keep the user's to-do list. Use the tools to act. When done, reply briefly."

client = MultiServerMCPClient(
    {"todo": {"command": sys.executable, "args": [str(SERVER)], "transport": "stdio"}},
)
tools = [t for t in asyncio.run(client.get_tools()) if t.name != "reset"]  # the server's reset is not the agent's
model = ChatOpenAI(
    model=os.environ.get("TODO_MODEL", "tiny-policy"),
    base_url=os.environ.get("TODO_BASE_URL", "http://127.0.0.1:8000/v1"),
    api_key=os.environ.get("TODO_API_KEY", "EMPTY"),
)

agent = create_agent(model, tools, system_prompt=SYSTEM_PROMPT, middleware=[EvolverMiddleware()])

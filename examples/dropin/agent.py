"""The library assistant, as its author wrote it: ``create_agent`` + ``@tool``s, a hosted model.

The only langgraph-evolver lines are the two marked ``# drop-in``: the import, and the middleware
in the ``create_agent`` call. Without a rollout around it the middleware does nothing, so this is
still the production agent (``agent.invoke({"messages": [("user", "Lend Dune to Ana.")]})``).
Inside a rollout it talks to the policy being trained and acts on that rollout's own library.

Evaluate and train it (the tasks and the checker are in ``examples/dropin/env.py``):

    python -m trainers.evaluate --agent examples.dropin.agent:agent --env examples.dropin.env:library_environment --k 4
    python -m trainers.grpo --config examples/dropin/train.yaml
"""

from __future__ import annotations

import os

from langchain.agents import create_agent
from langchain_openai import ChatOpenAI

from examples.dropin.library import Library, make_tools
from langgraph_evolver import EvolverMiddleware  # drop-in

SYSTEM_PROMPT = "You are the library's assistant. Use the tools to act for the user. When done, reply briefly."

model = ChatOpenAI(
    model=os.environ.get("LIBRARY_MODEL", "tiny-policy"),
    base_url=os.environ.get("LIBRARY_BASE_URL", "http://127.0.0.1:8000/v1"),
    api_key=os.environ.get("LIBRARY_API_KEY", "EMPTY"),
)
library = Library.sample()

agent = create_agent(model, make_tools(library), system_prompt=SYSTEM_PROMPT, middleware=[EvolverMiddleware()])

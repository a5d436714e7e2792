"""Our reference agent: a tool-using LangGraph graph, built like any user's agent.

    START → start → retrieve_experience → agent ⇄ tools (→ manage_context) → … → END

It is one user of the drop-in seams (``langgraph_evolver/agent_spec.py``, ``environment_tools.py``,
``episode.py``): ``create_agent_graph(model, tools)`` is a ``build(model, tools)`` factory, the
rollout runner records it with the same callbacks as any other graph, and its environment is
reached only through the tools it is given (``None``: the tools of the rollout it runs in). What
it adds to a plain ReAct loop is what the tiny policy was trained with:

- ``start`` opens with the environment's system prompt when the input has none;
- ``agent`` calls the policy on the prompt the context template makes of the history;
- ``tools`` runs the turn's calls. With the environment's own tools the whole turn is one
  environment step, so malformed calls (undecodable JSON, arguments that are not an object, an
  unknown tool, wrong arguments) get the environment's exact error observation and the rollout
  goes on; an unparseable ``<tool_call>`` block gets a feedback turn saying how to write a call;
- with ``repeat_guard``, a call that repeats one made earlier in this user turn (same name and arguments) and
  gets the same result has ``repeat_note`` added to its observation: "You called get_book with these arguments
  before and got this same result: answer from it, or make a different call." Small models loop on one read
  (15 of 40 fact-question episodes of an adapted SmolLM2 repeated ``get_book`` until the turn limit). The call
  still runs and its result is still shown: refusing it instead (an error, the result left out) cost an adapted
  library model 0.08 on validation, more episodes looping to the turn limit (docs/your-domain.md).

Stops when the model answers without tool calls or after ``max_turns`` LLM calls. A multi-turn
environment answers the answer with its next user message; the rollout runner then invokes the
graph again on its final state plus that message (``arun_episode``), so ``max_turns`` is per user turn.

The module-level ``graph`` (served by ``langgraph dev`` as ``agent``) runs this agent on a task end to
end (``langgraph_evolver/served_graph.py``): input ``{"task_id": "sandbox-test-00003", "env": "sandbox"}`` or
``{"task": {...}}``. It talks to the policy endpoint named by ``EVOLVER_POLICY_BASE_URL`` (default
``http://127.0.0.1:8000/v1``) and ``EVOLVER_POLICY_MODEL`` (default ``tiny-policy``);
``EVOLVER_AGENT=my_pkg.agent:build_agent`` serves your own agent through the same episode instead
(``EVOLVER_AGENT_INPUT`` for its input builder), and ``EVOLVER_ENV_MODULES`` (comma-separated)
names modules to import first, so custom environments are registered. Example:
    >>> from graphs.agent import create_agent_graph
    >>> from langgraph_evolver import PolicyChatModel, run_rollouts
    >>> policy = PolicyChatModel(base_url="http://127.0.0.1:8000/v1", model="tiny-policy")
    >>> trajectories = run_rollouts(create_agent_graph, tasks, policy=policy, n=4)   # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
import os
from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages

from langgraph_evolver.agent_spec import AgentSpec, as_agent
from langgraph_evolver.capture import MALFORMED_MARKER, calls_of, message_text
from langgraph_evolver.chat_model import PolicyChatModel
from langgraph_evolver.context import ContextTemplate, SelfManagingTemplate, amanage_context, get_context_template
from langgraph_evolver.environment import list_environments, load_environment
from langgraph_evolver.environment_tools import EnvironmentTool, current_rollout
from langgraph_evolver.errors import ConfigError, EnvironmentFailure
from langgraph_evolver.experience.navigate import current_block
from langgraph_evolver.loading import import_modules
from langgraph_evolver.served_graph import create_episode_graph
from langgraph_evolver.tracing import trace_tool_calls
from langgraph_evolver.types import Action, Observation, Task, ToolCall, ToolObservation

__all__ = ["AgentState", "create_agent_graph", "environment_input", "find_task", "graph", "reference_agent",
           "earlier_results", "repeat_note", "with_repeat_note"]  # fmt: skip

DEFAULT_MAX_TURNS = 10
PARSE_ERROR_FEEDBACK = (
    'Error: your tool call could not be parsed. Write <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call> '
    "with valid JSON."
)


def repeat_note(name: str) -> str:
    """What ``repeat_guard`` adds to a result that repeats the one an earlier, identical call of ``name`` got.

    Example:
        >>> repeat_note("get_book")
        'You called get_book with these arguments before and got this same result: answer from it, or make a ...'
    """
    return (f"You called {name} with these arguments before and got this same result: answer from it, or make a "
            "different call.")  # fmt: skip


def with_repeat_note(content: str, name: str) -> str:
    """``content`` (a tool result) followed by ``repeat_note``: the observation of a call that repeats an earlier
    one and got the same result."""
    return f"{content}\n\n{repeat_note(name)}"


def _call_key(name: str, args: Any) -> str:
    return f"{name}:{json.dumps(args, sort_keys=True, default=str)}"


def earlier_results(messages: Sequence[AnyMessage], ai: AIMessage) -> list[str | None]:
    """For each call of ``ai``, the result the same call (name and arguments) last got in this user turn (after
    the last request of ``messages``, the note of a repeat left out), ``None`` when it was not made.

    Example:
        >>> call = {"name": "get_book", "args": {"book_id": "B1"}, "id": "a"}
        >>> seen = [HumanMessage("How many?"), AIMessage("", tool_calls=[call]), ToolMessage("{}", tool_call_id="a")]
        >>> earlier_results(seen, AIMessage("", tool_calls=[{**call, "id": "b"}, {**call, "args": {"book_id": "B2"}}]))
        ['{}', None]
    """
    start = max((i for i, m in enumerate(messages)
                 if isinstance(m, HumanMessage) and m.content != PARSE_ERROR_FEEDBACK), default=-1)  # fmt: skip
    results: dict[str, str] = {}
    pending: list[str] = []  # the keys of the last AI turn's calls, matched to its observations in order
    for m in messages[start + 1 :]:
        if isinstance(m, AIMessage) and m is not ai:
            pending = [_call_key(c["name"], c["args"]) for c in m.tool_calls]
        elif isinstance(m, ToolMessage) and pending:
            key, content = pending.pop(0), message_text(m)
            results[key] = content.split("\n\n" + repeat_note(m.name or ""))[0] if m.name else content
    return [results.get(_call_key(c["name"], c["args"])) for c in ai.tool_calls]


class AgentState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    turn: int
    context_stats: Annotated[list[dict[str, Any]], operator.add]
    """One entry per context-management step (``managing`` template): valid, removed, compressed, …"""
    experience: dict[str, Any] | None
    """The experience block this rollout is guided by (self-navigating): ids, the injected text, scores."""


def environment_input(task: Task, observation: Observation) -> dict[str, Any]:
    """The environment's opening messages (its system prompt and the task) as the graph's input."""
    return {"messages": [_to_lc_message(m) for m in observation.messages]}


def _to_lc_message(message: dict[str, Any]) -> AnyMessage:
    role, content = message.get("role"), message.get("content") or ""
    if role == "system":
        return SystemMessage(content)
    if role in ("user", "human"):
        return HumanMessage(content)
    raise ConfigError(f"Environments open with system/user messages; got role {role!r}.")


async def _run_tools(tools: Sequence[BaseTool], ai: AIMessage, turn: int,
                     earlier: Sequence[str | None] = ()) -> list[ToolMessage]:  # fmt: skip
    """Execute the turn's tool calls; errors become error observations, never exceptions. A result equal to
    its call's ``earlier`` one (``earlier_results``) gets ``repeat_note``."""
    calls = calls_of(ai, turn)
    rollout = current_rollout()
    by_name = {t.name: t for t in tools}
    if rollout is not None and all(isinstance(t, EnvironmentTool) and t.rollout in (None, rollout) for t in tools):
        async with trace_tool_calls(calls) as record:  # one `tool` run per call in the trace
            try:  # one environment step for the whole turn: the environment judges every call, malformed included
                async with rollout.lock:
                    result = await rollout.env.astep(Action(tool_calls=tuple(calls), content=message_text(ai) or None))
            except Exception as e:
                raise EnvironmentFailure(f"environment step failed: {type(e).__name__}: {e}") from e
            observations = _noted(list(result.observations), earlier)
            record(observations)
    else:
        observations = _noted([await _run_one(by_name, c) for c in calls], earlier)
    return [
        ToolMessage(o.content, tool_call_id=c.id, name=o.name or c.name, status="error" if o.is_error else "success")
        for c, o in zip(calls, observations, strict=False)
    ]


def _noted(observations: list[ToolObservation], earlier: Sequence[str | None]) -> list[ToolObservation]:
    padded = [*earlier, *[None] * len(observations)]
    return [dataclasses.replace(o, content=with_repeat_note(o.content, o.name)) if o.name and o.content == before
            else o for o, before in zip(observations, padded, strict=False)]  # fmt: skip


async def _run_one(tools: dict[str, BaseTool], call: ToolCall) -> ToolObservation:
    def error(text: str) -> ToolObservation:
        return ToolObservation(call_id=call.id, name=call.name, content=f"Error: {text}", is_error=True)

    tool = tools.get(call.name)
    if tool is None:
        return error(f"unknown tool {call.name!r}. Available tools: {', '.join(sorted(tools))}")
    if not isinstance(call.arguments, dict):
        return error(f"arguments of {call.name} are not a JSON object: {str(call.arguments)[:200]!r}")
    try:
        out = await tool.ainvoke({"type": "tool_call", "name": call.name, "args": call.arguments, "id": call.id})
    except Exception as e:
        return error(f"{call.name} failed with {type(e).__name__}: {e}")
    content = out.content if isinstance(out, ToolMessage) else out
    failed = isinstance(out, ToolMessage) and out.status == "error"
    return ToolObservation(call_id=call.id, name=call.name, content=str(content), is_error=failed)


def create_agent_graph(
    model: str | BaseChatModel,
    tools: Sequence[BaseTool] | None = None,
    *,
    context_template: str | ContextTemplate = "causal",
    context_options: dict[str, Any] | None = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    repeat_guard: bool = False,
    name: str = "agent",
):
    """Compile the agent for ``model`` (a chat model, or an ``init_chat_model`` string).

    Args:
        model: The policy. Use ``PolicyChatModel`` to record token ids and logprobs.
        tools: The tools to call; ``None``: the tools of the rollout the graph runs in.
        context_template: How history becomes each prompt: ``causal``, ``reasoning``, ``sliding``,
            ``managing`` (adds the ``manage_context`` node) or a callable.
        context_options: The template's options, e.g. ``{"window": 2}`` for ``sliding``.
        max_turns: Maximum policy calls per run, i.e. per user turn (context-management calls not counted).
        repeat_guard: A call that repeats one of this user turn and gets the same result has ``repeat_note``
            added to its observation (``earlier_results``).
    """
    if max_turns < 1:
        raise ConfigError(f"max_turns must be >= 1, got {max_turns}")
    if isinstance(model, str):
        from langchain.chat_models import init_chat_model

        model = init_chat_model(model)
    template = get_context_template(context_template, **(context_options or {}))
    managing = isinstance(template, SelfManagingTemplate)
    manager = template.resolve_manager(model) if managing else None
    fixed_tools = list(tools) if tools is not None else None

    def tools_now() -> list[BaseTool]:
        if fixed_tools is not None:
            return fixed_tools
        rollout = current_rollout()
        return rollout.tools if rollout is not None else []

    async def start(state: AgentState) -> dict[str, Any]:  # async: sync nodes hop to a thread under ainvoke
        messages = state.get("messages") or []
        rollout = current_rollout()
        if rollout is None or any(isinstance(m, SystemMessage) for m in messages):
            return {"turn": 0}
        opening = [
            SystemMessage(m.get("content") or "") for m in rollout.observation.messages if m.get("role") == "system"
        ]
        if not opening:
            return {"turn": 0}
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *opening, *messages], "turn": 0}

    async def retrieve_experience(state: AgentState) -> dict[str, Any]:
        """Self-navigating, visible in the graph: the block the rollout runner retrieved for this task
        (``None`` when unguided). It is injected into every policy prompt, after the template."""
        block = current_block()
        return {"experience": block.to_dict() if block is not None else None}

    async def agent(state: AgentState) -> dict[str, Any]:
        available = tools_now()
        try:
            bound = model.bind_tools(available) if available else model
        except NotImplementedError:  # scripted test models
            bound = model
        rollout = current_rollout()  # the episode hooks' transforms (self-navigating's block) after the template
        prompt = rollout.transform(template(state["messages"])) if rollout is not None else template(state["messages"])
        ai = await bound.ainvoke(prompt)
        return {"messages": [ai], "turn": state.get("turn", 0) + 1}

    async def act(state: AgentState) -> dict[str, Any]:
        ai: AIMessage = state["messages"][-1]
        if ai.tool_calls or ai.invalid_tool_calls:
            earlier = earlier_results(state["messages"], ai) if repeat_guard else []
            return {"messages": await _run_tools(tools_now(), ai, state.get("turn", 0), earlier)}
        return {"messages": [HumanMessage(PARSE_ERROR_FEEDBACK)]}  # an unparseable <tool_call> block

    async def after_agent(state: AgentState) -> Literal["tools", "__end__"]:
        ai = state["messages"][-1]
        if ai.tool_calls or ai.invalid_tool_calls or MALFORMED_MARKER in message_text(ai):
            return "tools"
        return END

    async def manage_context(state: AgentState) -> dict[str, Any]:
        assert manager is not None and isinstance(template, SelfManagingTemplate)
        edit = await amanage_context(state["messages"], manager, template)
        if edit is None:
            return {}
        return {"messages": edit.updates, "context_stats": [edit.stats()]}

    async def after_tools(state: AgentState) -> str:
        if state.get("turn", 0) >= max_turns:
            return END
        return "manage_context" if managing else "agent"

    builder = StateGraph(AgentState)
    builder.add_node("start", start)
    builder.add_node("agent", agent)
    builder.add_node("tools", act)
    if managing:
        builder.add_node("manage_context", manage_context)
        builder.add_edge("manage_context", "agent")
    builder.add_node("retrieve_experience", retrieve_experience)
    builder.add_edge(START, "start")
    builder.add_edge("start", "retrieve_experience")
    builder.add_edge("retrieve_experience", "agent")
    builder.add_conditional_edges("agent", after_agent)
    builder.add_conditional_edges("tools", after_tools, ["agent", END, *(["manage_context"] if managing else [])])
    return builder.compile(name=name)


def reference_agent(
    *,
    context_template: str | ContextTemplate = "causal",
    context_options: dict[str, Any] | None = None,
    max_turns: int = DEFAULT_MAX_TURNS,
    repeat_guard: bool = False,
) -> AgentSpec:
    """Our agent as an ``AgentSpec``: built per rollout with the policy and the environment's tools."""
    get_context_template(context_template, **(context_options or {}))  # a bad name or option fails here
    build = functools.partial(create_agent_graph, context_template=context_template, context_options=context_options,
                              max_turns=max_turns, repeat_guard=repeat_guard)  # fmt: skip
    return AgentSpec(build=build, to_input=environment_input, name="agent", applies_context=True)


def find_task(task_id: str, env: str | None = None) -> Task:
    """The task ``task_id`` of environment ``env`` (any registered environment when ``None``)."""
    names = [env] if env else sorted(list_environments(), key=lambda n: n != "sandbox")  # the built-in one first
    for name in names:
        try:
            instance = load_environment(name)
        except Exception:  # a registered environment that cannot load here (bfcl without bfcl-eval)
            if env:
                raise
            continue
        try:
            for split in ("train", "test"):
                try:
                    tasks = instance.list_tasks(split)
                except Exception:  # an environment without this split
                    continue
                for task in tasks:
                    if task.id == task_id:
                        return task
        finally:
            instance.close()
    where = f"environment {env!r}" if env else f"the registered environments ({', '.join(names)})"
    raise ConfigError(f"No task {task_id!r} in {where}. Pass the whole task as {{'task': {{'id', 'query', 'env'}}}}, "
                      "or name its environment with {'env': ...} (a custom one must be registered: list its module "
                      "in EVOLVER_ENV_MODULES).")  # fmt: skip


def _served_graph():  # what `langgraph dev` serves as `agent`
    import_modules(os.environ.get("EVOLVER_ENV_MODULES", ""))
    policy = PolicyChatModel(
        base_url=os.environ.get("EVOLVER_POLICY_BASE_URL", "http://127.0.0.1:8000/v1"),
        model=os.environ.get("EVOLVER_POLICY_MODEL", "tiny-policy"),
        max_tokens=int(os.environ.get("EVOLVER_POLICY_MAX_TOKENS", "128")),
        timeout=float(os.environ.get("EVOLVER_POLICY_TIMEOUT", "120")),
    )
    user_agent = os.environ.get("EVOLVER_AGENT")
    agent = as_agent(user_agent, to_input=os.environ.get("EVOLVER_AGENT_INPUT")) if user_agent else reference_agent()
    max_turns = int(os.environ.get("EVOLVER_MAX_TURNS", "10"))
    return create_episode_graph(agent, policy, find_task=find_task, max_turns=max_turns)


graph = _served_graph()

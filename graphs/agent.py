"""The tool-using agent as a LangGraph graph, recording a trajectory as it runs.

    START → reset → agent ⇄ act → … → answer/finish → END

- ``reset`` builds a fresh environment for the task (``env_factory`` in the run's
  ``configurable``, else the registry) and opens the conversation with its messages and tools.
- ``agent`` calls the policy on the prompt the context template makes of the history.
- ``act`` executes the tool calls against the environment. Malformed calls (undecodable JSON,
  arguments that are not an object, an unparseable ``<tool_call>`` block, an unknown tool, wrong
  arguments) become error observations and the rollout goes on.
- ``answer`` hands a final text answer to the environment; ``finish`` scores and releases it.

Stops when the model answers without tool calls, the environment says done, or after
``max_turns`` LLM calls. The graph never raises for a bad model output or a failing
environment: the error goes into the state's ``errors`` and the run ends cleanly.

Served by ``langgraph dev`` as ``agent`` (see ``langgraph.json``); the module-level ``graph``
talks to the policy endpoint named by ``EVOLVER_POLICY_BASE_URL`` (default
``http://127.0.0.1:8000/v1``) and ``EVOLVER_POLICY_MODEL`` (default ``tiny-policy``). Input:
``{"task": {...}}`` (a ``Task`` dict) or ``{"task_id": "sandbox-test-00003"}``.

Example:
    >>> from graphs.agent import create_agent_graph
    >>> from langgraph_evolver import PolicyChatModel, run_rollouts
    >>> graph = create_agent_graph(PolicyChatModel(base_url="http://127.0.0.1:8000/v1", model="tiny-policy"))
    >>> trajectories = run_rollouts(graph, tasks, n=4)        # doctest: +SKIP
"""

from __future__ import annotations

import operator
import os
import uuid
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from env_tools.base import load_environment
from langgraph_evolver.chat_model import PolicyChatModel, transition_from_message
from langgraph_evolver.context import ContextTemplate, get_context_template
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.rollout import live_environment, register_live_environment, release_live_environment
from langgraph_evolver.types import Action, Step, Task, ToolCall, ToolObservation

__all__ = ["AgentState", "create_agent_graph", "graph"]

DEFAULT_MAX_TURNS = 10
MALFORMED_MARKER = "<tool_call>"
PARSE_ERROR_FEEDBACK = (
    'Error: your tool call could not be parsed. Write <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call> '
    "with valid JSON."
)


class AgentState(TypedDict, total=False):
    task: dict[str, Any]
    """The task (``Task.to_dict()``); or give ``task_id`` and it is looked up."""
    task_id: str
    messages: Annotated[list[AnyMessage], add_messages]
    tools: list[dict[str, Any]]
    steps: Annotated[list[dict[str, Any]], operator.add]
    """One ``Step.to_dict()`` per LLM call."""
    turn: int
    done: bool
    finish_reason: str
    reward: float | None
    errors: Annotated[list[str], operator.add]
    env_handle: str


def _resolve_task(state: AgentState) -> Task:
    if state.get("task"):
        return Task.from_dict(state["task"])
    task_id = state.get("task_id")
    if not task_id:
        raise ConfigError('The agent needs {"task": {...}} or {"task_id": "..."} as input.')
    env = load_environment(task_id.split("-", 1)[0] if "-" in task_id else "sandbox")
    for split in ("train", "test"):
        for task in env.list_tasks(split):
            if task.id == task_id:
                return task
    raise ConfigError(f"Unknown task id {task_id!r}; pass the whole task as {{'task': {{...}}}} instead.")


def _to_lc_message(message: dict[str, Any]) -> AnyMessage:
    role, content = message.get("role"), message.get("content") or ""
    if role == "system":
        return SystemMessage(content)
    if role in ("user", "human"):
        return HumanMessage(content)
    raise ConfigError(f"Environments open with system/user messages; got role {role!r}.")


def _calls_of(ai: AIMessage, turn: int) -> list[ToolCall]:
    calls = [
        ToolCall(name=tc["name"], arguments=tc.get("args") or {}, id=tc.get("id") or f"call_{turn}_{i}")
        for i, tc in enumerate(ai.tool_calls)
    ]
    offset = len(calls)
    calls += [  # arguments stay a raw string: the environment answers with an error observation
        ToolCall(
            name=tc.get("name") or "", arguments=tc.get("args") or "", id=tc.get("id") or f"call_{turn}_{offset + i}"
        )
        for i, tc in enumerate(ai.invalid_tool_calls)
    ]
    return calls


def _text(ai: AIMessage) -> str:
    return ai.content if isinstance(ai.content, str) else ai.text


def _run_id(ai: AIMessage) -> str | None:
    return (ai.response_metadata or {}).get("llm_run_id")


async def _execute_calls(env: Any, ai: AIMessage, calls: list[ToolCall], turn: int, transition: Any) -> dict[str, Any]:
    """Run the turn's tool calls in the environment; an environment failure ends the rollout."""
    step_error = None
    if ai.invalid_tool_calls:
        step_error = "; ".join(f"{c.get('name')}: {c.get('error') or 'bad arguments'}" for c in ai.invalid_tool_calls)
    action = Action(tool_calls=tuple(calls), content=_text(ai) or None)
    errors: list[str] = []
    try:
        result = await env.astep(action)
        observations, done = result.observations, result.done
    except Exception as e:
        msg = f"environment step failed: {type(e).__name__}: {e}"
        observations = tuple(
            ToolObservation(call_id=c.id, name=c.name, content=f"Error: {msg}", is_error=True) for c in calls
        )
        done, errors = True, [msg]
    step = Step(index=turn - 1, action=action, observations=tuple(observations), transition=transition,
                error=step_error, llm_run_id=_run_id(ai))  # fmt: skip
    tool_messages = [
        ToolMessage(o.content, tool_call_id=o.call_id, name=o.name, status="error" if o.is_error else "success")
        for o in observations
    ]
    update: dict[str, Any] = {"messages": tool_messages, "steps": [step.to_dict()], "errors": errors}
    if done:
        update.update(done=True, finish_reason="error" if errors else "env_done")
    return update


def create_agent_graph(
    model: str | BaseChatModel,
    *,
    context_template: str | ContextTemplate = "causal",
    max_turns: int = DEFAULT_MAX_TURNS,
    name: str = "agent",
):
    """Compile the agent graph for ``model`` (a chat model, or an ``init_chat_model`` string).

    Args:
        model: the policy. Use ``PolicyChatModel`` to record token ids and logprobs.
        context_template: how history becomes each prompt (``"causal"`` or a callable).
        max_turns: maximum LLM calls per rollout.
    """
    if max_turns < 1:
        raise ConfigError(f"max_turns must be >= 1, got {max_turns}")
    if isinstance(model, str):
        from langchain.chat_models import init_chat_model

        model = init_chat_model(model)
    template = get_context_template(context_template)

    async def reset(state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        task = _resolve_task(state)
        handle = state.get("env_handle") or os.urandom(8).hex()
        factory = (config.get("configurable") or {}).get("env_factory")
        try:
            env = factory(task) if factory is not None else load_environment(task.env)
            register_live_environment(handle, env)
            obs = await env.areset(task)
        except Exception as e:
            return {"task": task.to_dict(), "env_handle": handle, "done": True, "finish_reason": "error",
                    "errors": [f"environment reset failed: {type(e).__name__}: {e}"]}  # fmt: skip
        return {
            "task": task.to_dict(),
            "env_handle": handle,
            "messages": [_to_lc_message(m) for m in obs.messages],
            "tools": obs.tools,
            "turn": 0,
            "done": False,
        }

    async def agent(state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        prompt = template(state["messages"])
        try:
            bound = model.bind_tools(state["tools"]) if state.get("tools") else model
        except NotImplementedError:  # scripted test models
            bound = model
        try:
            run_id = uuid.uuid4()  # named, so the step can point at its LLM run (trace, LangSmith feedback)
            ai = await bound.ainvoke(prompt, {**config, "run_id": run_id})
            ai.response_metadata["llm_run_id"] = str(run_id)
        except Exception as e:
            return {"turn": state.get("turn", 0) + 1, "finish_reason": "error",
                    "errors": [f"policy call failed: {type(e).__name__}: {e}"]}  # fmt: skip
        return {"messages": [ai], "turn": state.get("turn", 0) + 1}

    async def act(state: AgentState) -> dict[str, Any]:
        ai: AIMessage = state["messages"][-1]
        turn = state.get("turn", 0)
        calls = _calls_of(ai, turn)
        transition = transition_from_message(ai)
        if calls:
            update = await _execute_calls(live_environment(state["env_handle"]), ai, calls, turn, transition)
        else:  # the model wrote a <tool_call> block that did not parse: tell it, as the next user turn
            feedback = ToolObservation(call_id="", name="", content=PARSE_ERROR_FEEDBACK, is_error=True)
            step = Step(index=turn - 1, action=Action(content=_text(ai)), observations=(feedback,),
                        transition=transition, error="unparseable tool call", llm_run_id=_run_id(ai))  # fmt: skip
            update = {"messages": [HumanMessage(PARSE_ERROR_FEEDBACK)], "steps": [step.to_dict()]}
        if not update.get("done") and turn >= max_turns:
            update.update(done=True, finish_reason="max_turns")
        return update

    async def answer(state: AgentState) -> dict[str, Any]:
        ai: AIMessage = state["messages"][-1]
        turn = state.get("turn", 0)
        action = Action(content=_text(ai))
        errors = []
        try:
            await live_environment(state["env_handle"]).astep(action)
        except Exception as e:
            errors.append(f"environment rejected the final answer: {type(e).__name__}: {e}")
        step = Step(index=turn - 1, action=action, transition=transition_from_message(ai), llm_run_id=_run_id(ai))
        return {"steps": [step.to_dict()], "done": True, "finish_reason": "final_answer", "errors": errors}

    async def finish(state: AgentState) -> dict[str, Any]:
        handle = state.get("env_handle")
        env = live_environment(handle) if handle else None
        update: dict[str, Any] = {"done": True, "finish_reason": state.get("finish_reason") or "error"}
        if env is not None:
            try:
                update["reward"] = float(await env.aevaluate())
            except Exception as e:
                update["reward"] = None
                update["errors"] = [f"evaluation failed: {type(e).__name__}: {e}"]
            await release_live_environment(handle)
        return update

    def after_reset(state: AgentState) -> Literal["agent", "finish"]:
        return "finish" if state.get("done") else "agent"

    def after_agent(state: AgentState) -> Literal["act", "answer", "finish"]:
        if state.get("finish_reason") == "error":
            return "finish"
        ai = state["messages"][-1]
        if ai.tool_calls or ai.invalid_tool_calls or MALFORMED_MARKER in _text(ai):
            return "act"
        return "answer"

    def after_act(state: AgentState) -> Literal["agent", "finish"]:
        return "finish" if state.get("done") else "agent"

    builder = StateGraph(AgentState)
    builder.add_node("reset", reset)
    builder.add_node("agent", agent)
    builder.add_node("act", act)
    builder.add_node("answer", answer)
    builder.add_node("finish", finish)
    builder.add_edge(START, "reset")
    builder.add_conditional_edges("reset", after_reset)
    builder.add_conditional_edges("agent", after_agent)
    builder.add_conditional_edges("act", after_act)
    builder.add_edge("answer", "finish")
    builder.add_edge("finish", END)
    return builder.compile(name=name)


def _default_policy() -> PolicyChatModel:
    return PolicyChatModel(
        base_url=os.environ.get("EVOLVER_POLICY_BASE_URL", "http://127.0.0.1:8000/v1"),
        model=os.environ.get("EVOLVER_POLICY_MODEL", "tiny-policy"),
        max_tokens=int(os.environ.get("EVOLVER_POLICY_MAX_TOKENS", "128")),
        timeout=float(os.environ.get("EVOLVER_POLICY_TIMEOUT", "120")),
    )


graph = create_agent_graph(_default_policy())

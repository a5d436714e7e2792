"""Recorded run trees (LangSmith's run schema) → ``Trajectory`` objects, whoever's agent made them.

A trace is the tree of runs one agent invocation left: chain runs for the graph and its nodes, an
``llm`` run per chat-model call, a ``tool`` run per tool call. Messages come in the two shapes
stored traces use: LangChain's serialized form (``{"lc": 1, "kwargs": {...}}``, what the LangSmith
tracer sends) and ``model_dump`` dicts (``JsonlTracer``), plus ``("user", "text")`` pairs and
OpenAI-style ``{"role", "content"}``.

Each LLM run becomes a ``Step`` in start order with its tool calls, the node that made it, its run id
(so labels can go back as feedback on it) and, when the run kept the exact token ids and logprobs
of the policy being trained (``policy_model``), its ``Transition``. Calls of any other model, or of
another version, stay text only and the trajectory is flagged ``metadata["policy_gradient"] =
False``: it feeds experiences, tasks and evaluation, never a policy-gradient row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..capture import subgraph_path
from ..types import Action, Step, Task, ToolCall, ToolObservation, Trajectory, Transition

__all__ = ["message_dict", "run_feedback_reward", "trajectory_from_trace", "user_query"]

Redact = Callable[[str], str]

_ROLES = {"human": "user", "user": "user", "ai": "assistant", "assistant": "assistant", "system": "system",
          "tool": "tool", "function": "tool"}  # fmt: skip
_CLASS_ROLES = {"HumanMessage": "user", "AIMessage": "assistant", "SystemMessage": "system", "ToolMessage": "tool",
                "HumanMessageChunk": "user", "AIMessageChunk": "assistant"}  # fmt: skip


def message_dict(message: Any) -> dict[str, Any] | None:
    """A stored message as ``{"role", "content", "tool_calls", "tool_call_id", "response_metadata", ...}``."""
    if isinstance(message, list | tuple) and len(message) == 2 and isinstance(message[0], str):
        return {"role": _ROLES.get(message[0], message[0]), "content": _text(message[1])}
    if isinstance(message, str):
        return {"role": "user", "content": message}
    if not isinstance(message, Mapping):
        return None
    data: Mapping[str, Any] = message
    role = None
    if isinstance(message.get("kwargs"), Mapping):  # LangChain's serialized form
        data = message["kwargs"]
        ids = message.get("id") or []
        role = _CLASS_ROLES.get(str(ids[-1])) if ids else None
    role = role or _ROLES.get(str(data.get("type") or data.get("role") or ""), None)
    if role is None:
        return None
    out = dict(data)
    out["role"] = role
    out["content"] = _text(data.get("content"))
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return "".join(b.get("text", "") if isinstance(b, Mapping) else str(b) for b in content)
    return "" if content is None else str(content)


def _messages(value: Any) -> list[dict[str, Any]]:
    """Messages out of a run's ``inputs``/``outputs`` (``{"messages": [...]}`` or ``[[...]]`` batches)."""
    if isinstance(value, Mapping):
        value = value.get("messages", value.get("input"))
    if (
        isinstance(value, list)
        and value
        and isinstance(value[0], list)
        and value[0]
        and not isinstance(value[0][0], str)
    ):
        value = value[0]  # an LLM run's batch of one
    if not isinstance(value, list):
        return []
    return [m for m in (message_dict(v) for v in value) if m is not None]


def user_query(root: Mapping[str, Any]) -> str | None:
    """The first user message of a trace (its root's input; else its first LLM run's prompt)."""
    for message in _messages(root.get("inputs")):
        if message["role"] == "user" and message["content"].strip():
            return message["content"]
    for run in _walk(root):
        if run.get("run_type") == "llm":
            for message in _messages(run.get("inputs")):
                if message["role"] == "user" and message["content"].strip():
                    return message["content"]
            break
    return None


def run_feedback_reward(feedback: Sequence[Mapping[str, Any]], *, keys: Sequence[str] | None = None,
                        exclude: Sequence[str] = ("step_attribution",)) -> float | None:  # fmt: skip
    """Mean score of a run's feedback (``keys`` only, when given), or ``None`` without any."""
    scores = [float(f["score"]) for f in feedback
              if isinstance(f.get("score"), int | float) and not isinstance(f.get("score"), bool)
              and (keys is None or f.get("key") in keys) and f.get("key") not in exclude]  # fmt: skip
    return sum(scores) / len(scores) if scores else None


def _walk(run: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    out = [run]
    for child in run.get("child_runs") or []:
        out.extend(_walk(child))
    return out


def _generation_message(run: Mapping[str, Any]) -> dict[str, Any] | None:
    outputs = run.get("outputs") or {}
    generations: Any = outputs.get("generations") if isinstance(outputs, Mapping) else None
    try:
        generation = generations[0][0]
    except (TypeError, IndexError, KeyError):
        return None
    message = message_dict(generation.get("message")) if isinstance(generation, Mapping) else None
    if message is None and isinstance(generation, Mapping):
        message = {"role": "assistant", "content": _text(generation.get("text"))}
    if message is not None and isinstance(generation, Mapping):
        info = generation.get("generation_info") or {}
        meta = dict(message.get("response_metadata") or {})
        if "logprobs" not in meta and isinstance(info, Mapping) and info.get("logprobs"):
            meta["logprobs"] = info["logprobs"]  # older traces kept them only here
        message["response_metadata"] = meta
    return message


def _transition(meta: Mapping[str, Any]) -> Transition | None:
    prompt_ids, completion_ids = meta.get("prompt_token_ids"), meta.get("token_ids")
    content = (meta.get("logprobs") or {}).get("content") if isinstance(meta.get("logprobs"), Mapping) else None
    if not prompt_ids or not completion_ids or content is None or len(content) != len(completion_ids):
        return None
    try:
        return Transition(
            prompt_ids=tuple(int(i) for i in prompt_ids),
            completion_ids=tuple(int(i) for i in completion_ids),
            logprobs=tuple(float(e["logprob"]) for e in content),
            # as PolicyChatModel records it: the weights version that answered, else the served name
            model_version=str(meta.get("system_fingerprint") or meta.get("model_name") or ""),
            finish_reason=meta.get("finish_reason"),
        )
    except (KeyError, TypeError, ValueError):
        return None


def _calls(message: Mapping[str, Any], turn: int) -> list[ToolCall]:
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        if not isinstance(call, Mapping):
            continue
        if "function" in call:  # OpenAI shape
            fn = call["function"] or {}
            calls.append(ToolCall(name=str(fn.get("name") or ""), arguments=fn.get("arguments") or {},
                                  id=str(call.get("id") or f"call_{turn}_{i}")))  # fmt: skip
        else:
            calls.append(ToolCall(name=str(call.get("name") or ""), arguments=call.get("args") or {},
                                  id=str(call.get("id") or f"call_{turn}_{i}")))  # fmt: skip
    for i, call in enumerate(message.get("invalid_tool_calls") or []):
        if isinstance(call, Mapping):
            calls.append(ToolCall(name=str(call.get("name") or ""), arguments=call.get("args") or "",
                                  id=str(call.get("id") or f"call_{turn}_invalid_{i}")))  # fmt: skip
    return calls


def _tool_observation(run: Mapping[str, Any]) -> ToolObservation:
    output = (run.get("outputs") or {}).get("output") if isinstance(run.get("outputs"), Mapping) else None
    message = message_dict(output) if isinstance(output, Mapping) else None
    if message is not None:
        return ToolObservation(call_id=str(message.get("tool_call_id") or ""),
                               name=str(message.get("name") or run["name"]), content=message["content"],
                               is_error=message.get("status") == "error")  # fmt: skip
    if run.get("error"):
        return ToolObservation(call_id="", name=str(run.get("name")), content=f"Error: {str(run['error'])[:500]}",
                               is_error=True)  # fmt: skip
    return ToolObservation(call_id="", name=str(run.get("name")), content=_text(output))


def _redacted_arguments(arguments: Any, redact: Redact) -> Any:
    if isinstance(arguments, str):
        return redact(arguments)
    if isinstance(arguments, Mapping):
        return {k: _redacted_arguments(v, redact) for k, v in arguments.items()}
    if isinstance(arguments, list):
        return [_redacted_arguments(v, redact) for v in arguments]
    return arguments


def trajectory_from_trace(
    root: Mapping[str, Any],
    *,
    task: Task,
    reward: float | None = None,
    policy_model: str | None = None,
    redact: Redact | None = None,
) -> Trajectory:
    """One recorded trace (its root with nested ``child_runs``, see ``build_run_tree``) as a ``Trajectory``.

    Args:
        root: The trace's root run.
        task: The task the trace is a rollout of (its query already redacted).
        reward: The outcome reward (from feedback), or ``None``.
        policy_model: The policy being trained (its served name, or the weights version the endpoint
            reports as ``system_fingerprint``): only LLM runs of it with token ids become transitions.
        redact: Applied to every text kept (model outputs, tool arguments and observations).
    """
    clean = redact or (lambda text: text)
    runs = sorted(_walk(root), key=lambda r: str(r.get("dotted_order") or r.get("start_time") or ""))
    tool_runs = [r for r in runs if r.get("run_type") == "tool"]
    observations = [_tool_observation(r) for r in tool_runs]
    by_id: dict[str, list[ToolObservation]] = {}
    for obs in observations:
        if obs.call_id:
            by_id.setdefault(obs.call_id, []).append(obs)
    unmatched = [o for o in observations if not o.call_id]
    final_state_tools = {m.get("tool_call_id"): m for m in _messages(root.get("outputs")) if m["role"] == "tool"}
    steps: list[Step] = []
    versions: set[str] = set()
    text_only = 0
    for run in runs:
        if run.get("run_type") != "llm":
            continue
        message = _generation_message(run)
        meta = ((run.get("extra") or {}).get("metadata") or {}) if isinstance(run.get("extra"), Mapping) else {}
        index = len(steps)
        if message is None:
            steps.append(Step(index=index, action=Action(), error=str(run.get("error") or "no output")[:500],
                              llm_run_id=str(run["id"]), node=meta.get("langgraph_node"), policy=False))  # fmt: skip
            text_only += 1
            continue
        calls = _calls(message, index)
        found: list[ToolObservation] = []
        for call in calls:
            if by_id.get(call.id):
                found.append(by_id[call.id].pop(0))
            elif call.id in final_state_tools:
                m = final_state_tools.pop(call.id)
                found.append(ToolObservation(call_id=call.id, name=str(m.get("name") or call.name),
                                             content=m["content"], is_error=m.get("status") == "error"))  # fmt: skip
            else:
                same = next((o for o in unmatched if o.name == call.name), None)
                if same is not None:
                    unmatched.remove(same)
                    found.append(ToolObservation(call_id=call.id, name=same.name, content=same.content,
                                                 is_error=same.is_error))  # fmt: skip
        response = message.get("response_metadata") or {}
        model = str(response.get("model_name") or meta.get("ls_model_name") or run.get("name") or "unknown")
        transition = _transition(response)
        trainable = (
            transition is not None
            and policy_model is not None
            and policy_model in (transition.model_version, str(response.get("model_name") or ""))
        )
        if transition is not None:
            versions.add(transition.model_version)
        if not trainable:
            text_only += 1
        steps.append(Step(
            index=index,
            action=Action(tool_calls=tuple(ToolCall(name=c.name, arguments=_redacted_arguments(c.arguments, clean),
                                                    id=c.id) for c in calls),
                          content=clean(message["content"]) or None),
            observations=tuple(ToolObservation(call_id=o.call_id, name=o.name, content=clean(o.content),
                                               is_error=o.is_error) for o in found),
            transition=transition if trainable and redact is None else None,
            error="; ".join(str(c.get("error") or "bad arguments") for c in message.get("invalid_tool_calls") or []
                            if isinstance(c, Mapping)) or None,
            llm_run_id=str(run["id"]), node=meta.get("langgraph_node"),
            namespace=subgraph_path(str(meta.get("langgraph_checkpoint_ns") or "")),
            model=model, policy=trainable and redact is None))  # fmt: skip
    # Redacted text no longer matches the sampled token ids: such a trajectory is never a policy-gradient row.
    policy_gradient = bool(steps) and text_only == 0 and redact is None
    root_meta = ((root.get("extra") or {}).get("metadata") or {}) if isinstance(root.get("extra"), Mapping) else {}
    finish = "error" if root.get("error") else ("final_answer" if steps and not steps[-1].action.tool_calls
                                                 else "max_turns")  # fmt: skip
    return Trajectory(
        id=f"trace/{root['id']}",
        task=task,
        steps=tuple(steps),
        reward=reward,
        finish_reason=finish,  # type: ignore[arg-type]
        group_id=f"trace/{task.id}",
        rollout_index=0,
        errors=(clean(str(root["error"]))[:2000],) if root.get("error") else (),
        metadata={"source": "trace", "trace_id": str(root.get("trace_id") or root["id"]),
                  "root_run_id": str(root["id"]),
                  **({"session_id": str(root["session_id"])} if root.get("session_id") else {}),
                  "policy_gradient": policy_gradient, "model_versions": sorted(versions),
                  "text_only_steps": text_only, "trace_metadata": {k: v for k, v in root_meta.items()
                                                                    if isinstance(v, str | int | float | bool)}},
    )  # fmt: skip

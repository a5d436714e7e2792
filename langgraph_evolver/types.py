"""The shared vocabulary: tasks, environment I/O, transitions, steps and trajectories.

Every value object here is a frozen, slotted, keyword-only dataclass that round-trips through
plain JSON (``to_dict`` / ``from_dict``), so trajectories can be written to JSONL, shipped over
HTTP and rendered in reports without custom encoders.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from .errors import ConfigError

__all__ = [
    "Action",
    "Observation",
    "Step",
    "StepResult",
    "Task",
    "ToolCall",
    "ToolObservation",
    "Trajectory",
    "Transition",
    "as_trajectory",
    "read_jsonl",
    "write_jsonl",
]

TaskSource = Literal["seed", "synthetic", "trace"]
FinishReason = Literal["final_answer", "env_done", "max_turns", "malformed_call", "error"]
"""How a rollout ended. ``malformed_call``: the policy's last output was a tool call that did not parse, so the
graph stopped without an answer; the environment scores the episode with no final answer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One tool call as the model asked for it."""

    name: str
    """Tool name; may be unknown to the environment (it answers with an error observation)."""
    arguments: dict[str, Any] | str = field(default_factory=dict)
    """Decoded JSON object, or the raw string when the model's arguments did not decode to one."""
    id: str = ""
    """Call id used to pair the observation with the call."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "id": self.id}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        return cls(name=data["name"], arguments=data.get("arguments", {}), id=data.get("id", ""))


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """A task an agent can be asked to do in an environment."""

    id: str
    """Unique id. Synthesized tasks get their own ids, never their seed's (GRPO groups by id)."""
    query: str
    """What the user asks for."""
    env: str = "sandbox"
    """Environment registry id (or dotted path) that runs this task."""
    env_params: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the environment, including its seed."""
    reference_solution: tuple[ToolCall, ...] | None = None
    """A sequence of tool calls that solves the task, when known."""
    source: TaskSource = "seed"
    """Where the task came from."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Free-form extras (difficulty ``level``, expected ``answer``, template name, ...)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "query": self.query,
            "env": self.env,
            "env_params": dict(self.env_params),
            "reference_solution": None
            if self.reference_solution is None
            else [c.to_dict() for c in self.reference_solution],
            "source": self.source,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        ref = data.get("reference_solution")
        return cls(
            id=str(data["id"]),
            query=data["query"],
            env=data.get("env", "sandbox"),
            env_params=dict(data.get("env_params") or {}),
            reference_solution=None if ref is None else tuple(ToolCall.from_dict(c) for c in ref),
            source=data.get("source", "seed"),
            metadata=dict(data.get("metadata") or {}),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """What an environment shows the agent on reset."""

    messages: list[dict[str, Any]]
    """OpenAI-style chat messages (``role``/``content``) that open the conversation."""
    tools: list[dict[str, Any]]
    """OpenAI function-tool schemas the agent may call."""

    def to_dict(self) -> dict[str, Any]:
        return {"messages": self.messages, "tools": self.tools}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Observation:
        return cls(messages=list(data["messages"]), tools=list(data["tools"]))


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """One agent turn as the environment sees it: tool calls, or a final text answer."""

    tool_calls: tuple[ToolCall, ...] = ()
    content: str | None = None
    """The assistant's text; when there are no tool calls it is the final answer."""

    def to_dict(self) -> dict[str, Any]:
        return {"tool_calls": [c.to_dict() for c in self.tool_calls], "content": self.content}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Action:
        calls = tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or [])
        return cls(tool_calls=calls, content=data.get("content"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolObservation:
    """The environment's answer to one tool call."""

    call_id: str
    name: str
    content: str
    is_error: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolObservation:
        return cls(**data)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResult:
    """What ``Environment.step`` returns."""

    observations: tuple[ToolObservation, ...] = ()
    done: bool = False
    messages: tuple[dict[str, Any], ...] = ()
    """Multi-turn environments: the next user turn (OpenAI-style messages), sent in answer to a final
    answer with ``done=False``; the rollout goes on with them. Empty: no further turn."""
    tools: tuple[dict[str, Any], ...] | None = None
    """The tool schemas offered from the next user turn on, when the environment changes them (``None``: unchanged)."""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"observations": [o.to_dict() for o in self.observations], "done": self.done}
        if self.messages:
            data["messages"] = [dict(m) for m in self.messages]
        if self.tools is not None:
            data["tools"] = [dict(t) for t in self.tools]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepResult:
        obs = tuple(ToolObservation.from_dict(o) for o in data.get("observations") or [])
        tools = data.get("tools")
        return cls(observations=obs, done=bool(data.get("done", False)), messages=tuple(data.get("messages") or ()),
                   tools=None if tools is None else tuple(tools))  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    """One LLM call, exactly as the policy endpoint returned it (never re-tokenized)."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    """Behaviour log-probabilities of ``completion_ids`` as sampled (one per id)."""
    model_version: str = ""
    """The served model name that sampled this call (a LoRA version name during training)."""
    finish_reason: str | None = None
    experience_span: tuple[int, int] | None = None
    """Where retrieved experience was injected into the prompt: the span to strip."""

    def __post_init__(self) -> None:
        if len(self.completion_ids) != len(self.logprobs):
            raise ValueError(
                f"Transition has {len(self.completion_ids)} completion ids but "
                f"{len(self.logprobs)} logprobs; the endpoint must return one logprob per id."
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_ids": list(self.prompt_ids),
            "completion_ids": list(self.completion_ids),
            "logprobs": list(self.logprobs),
            "model_version": self.model_version,
            "finish_reason": self.finish_reason,
            "experience_span": None if self.experience_span is None else list(self.experience_span),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Transition:
        span = data.get("experience_span")
        return cls(
            prompt_ids=tuple(data["prompt_ids"]),
            completion_ids=tuple(data["completion_ids"]),
            logprobs=tuple(data["logprobs"]),
            model_version=data.get("model_version", ""),
            finish_reason=data.get("finish_reason"),
            experience_span=None if span is None else (int(span[0]), int(span[1])),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One agent turn: the LLM call, the parsed action, what the environment answered."""

    index: int
    action: Action
    observations: tuple[ToolObservation, ...] = ()
    transition: Transition | None = None
    """``None`` when the chat model did not return token ids (e.g. a hosted model)."""
    error: str | None = None
    """Set when the turn's output could not be parsed or executed as intended."""
    llm_run_id: str | None = None
    """The LangChain run id of this step's LLM call (trace and LangSmith feedback target)."""
    node: str | None = None
    """The LangGraph node that made the call (``langgraph_node``)."""
    namespace: str = ""
    """The subgraph/checkpoint namespace of that node (``""`` at the top level)."""
    model: str | None = None
    """The model that answered (a served policy version, or another model's name)."""
    policy: bool = True
    """Whether the call went to the policy being trained (other models are recorded, never trained)."""
    kind: str = "action"
    """``action`` (the agent acting: tool calls or an answer) or ``context`` (a context-management call)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "action": self.action.to_dict(),
            "observations": [o.to_dict() for o in self.observations],
            "transition": None if self.transition is None else self.transition.to_dict(),
            "error": self.error,
            "llm_run_id": self.llm_run_id,
            "node": self.node,
            "namespace": self.namespace,
            "model": self.model,
            "policy": self.policy,
            "kind": self.kind,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        tr = data.get("transition")
        return cls(
            index=int(data["index"]),
            action=Action.from_dict(data["action"]),
            observations=tuple(ToolObservation.from_dict(o) for o in data.get("observations") or []),
            transition=None if tr is None else Transition.from_dict(tr),
            error=data.get("error"),
            llm_run_id=data.get("llm_run_id"),
            node=data.get("node"),
            namespace=data.get("namespace") or "",
            model=data.get("model"),
            policy=bool(data.get("policy", True)),
            kind=data.get("kind") or "action",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Trajectory:
    """One rollout of one task: the unit every mechanism consumes."""

    id: str
    task: Task
    steps: tuple[Step, ...] = ()
    reward: float | None = None
    """Outcome reward in [0, 1] from ``Environment.evaluate`` (or a judge); ``None`` if unknown."""
    finish_reason: FinishReason = "final_answer"
    group_id: str = ""
    """Rollouts of the same task in one training step share a group id."""
    rollout_index: int = 0
    labels: tuple[dict[str, Any], ...] | None = None
    """Step attribution labels (``{"step", "label", "reason"}``), once attributed."""
    experience_ids: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    """Everything that went wrong in this rollout, in order (the rollout never raises)."""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def transitions(self) -> list[Transition]:
        return [s.transition for s in self.steps if s.transition is not None]

    def tool_results(self) -> list[tuple[ToolCall, ToolObservation]]:
        """Every tool call of every step with the observation that answered it: the one with its call id, else
        the step's observation at the same position; a call nothing answered is left out.

        Example:
            >>> call = ToolCall(name="get", arguments={"id": 1}, id="c1")
            >>> step = Step(index=0, action=Action(tool_calls=(call,)),
            ...             observations=(ToolObservation(call_id="c1", name="get", content="{}"),))
            >>> trajectory = Trajectory(id="t", task=Task(id="x", query="q"), steps=(step,))
            >>> [(c.name, o.content) for c, o in trajectory.tool_results()]
            [('get', '{}')]
        """
        out = []
        for step in self.steps:
            by_id = {o.call_id: o for o in step.observations if o.call_id}
            for i, call in enumerate(step.action.tool_calls):
                obs = by_id.get(call.id) if call.id else None
                if obs is None and i < len(step.observations):
                    obs = step.observations[i]
                if obs is not None:
                    out.append((call, obs))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task": self.task.to_dict(),
            "steps": [s.to_dict() for s in self.steps],
            "reward": self.reward,
            "finish_reason": self.finish_reason,
            "group_id": self.group_id,
            "rollout_index": self.rollout_index,
            "labels": None if self.labels is None else [dict(x) for x in self.labels],
            "experience_ids": list(self.experience_ids),
            "errors": list(self.errors),
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        labels = data.get("labels")
        return cls(
            id=data["id"],
            task=Task.from_dict(data["task"]),
            steps=tuple(Step.from_dict(s) for s in data.get("steps") or []),
            reward=data.get("reward"),
            finish_reason=data.get("finish_reason", "final_answer"),
            group_id=data.get("group_id", ""),
            rollout_index=int(data.get("rollout_index", 0)),
            labels=None if labels is None else tuple(dict(x) for x in labels),
            experience_ids=tuple(data.get("experience_ids") or ()),
            errors=tuple(data.get("errors") or ()),
            metadata=dict(data.get("metadata") or {}),
        )


def write_jsonl(path: str | Path, items: Iterable[Any], *, append: bool = False) -> int:
    """Write objects with ``to_dict`` (or plain dicts) as JSON lines; returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("a" if append else "w", encoding="utf-8") as f:
        for item in items:
            data = item.to_dict() if hasattr(item, "to_dict") else item
            f.write(json.dumps(data, ensure_ascii=False) + "\n")
            n += 1
    return n


def read_jsonl(path: str | Path, cls: Any = None) -> Iterator[Any]:
    """Read JSON lines, decoding each with ``cls.from_dict`` when ``cls`` is given."""
    with Path(path).open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from e
            yield cls.from_dict(data) if cls is not None else data


def as_trajectory(value: Trajectory | Mapping[str, Any]) -> Trajectory:
    """``value`` as a ``Trajectory``: itself, or read from its ``to_dict()`` (one line of ``trajectories.jsonl``).

    What every mechanism that takes "a trajectory or its dict" calls (attribution, experience extraction).
    """
    if isinstance(value, Trajectory):
        return value
    if isinstance(value, Mapping):
        missing = [k for k in ("id", "task") if k not in value]
        if missing:
            raise ConfigError(f"A trajectory needs {missing} (it has {sorted(value)}); pass one line of a run's "
                              "trajectories.jsonl, or Trajectory.to_dict().")  # fmt: skip
        try:
            return Trajectory.from_dict(dict(value))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"Not a valid trajectory ({type(e).__name__}: {e}); pass one line of a run's "
                              "trajectories.jsonl, or Trajectory.to_dict().") from e  # fmt: skip
    raise ConfigError(f"Expected a Trajectory or its dict, got {type(value).__name__}.")

"""An LLM synthesizer: from an exploration trajectory, a chat model writes tasks with references.

The prompt shows the calls the exploration made that succeeded (with trimmed results) and the
preferences (how many tasks, how many calls and entities each, difficulty 1-3); the model answers
with a JSON list of ``{query, reference: [{name, arguments}], confidence, difficulty}``. Each
parsed task becomes a new ``Task`` with its own id (a hash of the world, the reference and the
query: never the seed's, never another task's), ``source="synthetic"``, the exploration's world,
and provenance in ``metadata``. Whether a reference really runs (a hallucinated tool or id) is the
feasibility filter's job (``filters.py``).

Same machinery as the attribution judge (``_llm.ask_with_retries``): retries with a follow-up
saying what was wrong, a per-loop concurrency bound, token accounting in ``stats``, and a
counted fallback (no tasks from that exploration) instead of an exception.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Unpack

from langgraph_evolver._llm import (
    CallTally,
    LLMKeywords,
    LLMRole,
    LLMSettings,
    check_template,
    json_values,
    model_id,
    run_sync,
)
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.rendering import render_call, trim
from langgraph_evolver.types import Task, ToolCall, Trajectory

from .prompts import DEFAULT_SYNTHESIS_PROMPT, DEFAULT_SYNTHESIS_RETRY_PROMPT, SYNTHESIS_PROMPT_FIELDS

__all__ = ["DEFAULT_SYNTHESIS_PROMPT", "LLMSynthesizer", "SynthesisStats", "parse_tasks"]


def _task_items(text: str) -> list[Any] | None:
    """The answer's tasks: a JSON list of them, ``{"tasks": [...]}`` or one task object (fenced or not)."""
    for value in json_values(text):
        if isinstance(value, dict):
            value = value["tasks"] if isinstance(value.get("tasks"), list) else [value]
        if isinstance(value, list) and any(isinstance(v, dict) and "query" in v for v in value):
            return value
    return None


def _call_of(item: Any) -> ToolCall | None:
    if not isinstance(item, dict):
        return None
    name = item.get("name") or item.get("tool")
    args = item.get("arguments", item.get("args", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(name, str) or not name or not isinstance(args, dict):
        return None
    return ToolCall(name=name, arguments=args)


def parse_tasks(text: str) -> list[dict[str, Any]] | None:
    """Tasks (``{query, reference: [ToolCall], confidence, difficulty}``) from a model's answer.

    ``None`` when no JSON list of tasks can be read; items that are not tasks (no query, an empty
    or malformed reference) are skipped, and an answer with none left is unreadable.
    """
    items = _task_items(text)
    if items is None:
        return None
    tasks = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("query"), str) or not item["query"].strip():
            continue
        raw = item.get("reference") or item.get("solution") or []
        calls = [_call_of(c) for c in raw] if isinstance(raw, list) else [None]
        if not calls or any(c is None for c in calls):
            continue
        try:
            confidence = min(max(float(item.get("confidence", 0.5)), 0.0), 1.0)
        except (TypeError, ValueError):
            confidence = 0.5
        try:
            difficulty = min(max(int(item.get("difficulty", len(calls))), 1), 3)
        except (TypeError, ValueError):
            difficulty = min(len(calls), 3)
        tasks.append({"query": item["query"].strip(), "reference": calls, "confidence": confidence,
                      "difficulty": difficulty})  # fmt: skip
    return tasks or None


@dataclass(slots=True)
class SynthesisStats:
    """Running totals of one LLM synthesizer."""

    explorations: int = 0
    tasks: int = 0
    fallbacks: int = 0
    """Explorations that gave no readable tasks after every retry."""
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class LLMSynthesizer(LLMRole):
    """Writes tasks from exploration trajectories with any LangChain chat model.

    Args:
        model: the chat model (hosted, vLLM or another OpenAI-compatible endpoint).
        n_tasks: tasks asked for per exploration.
        min_ops, max_ops: calls per task.
        max_entities: distinct objects a task may involve.
        max_calls_shown: successful exploration calls shown in the prompt (the last ones).
        max_observation_chars: each shown result is trimmed to this length.
        settings: retries, concurrency and timeout (``LLMSettings``; default
            ``LLMSynthesizer.DEFAULT_SETTINGS``).
        max_concurrency, max_retries, backoff_s, max_backoff_s, timeout_s: single ``LLMSettings``
            fields; each one given overrides ``settings``.
        prompt: the synthesis prompt (fields ``calls``, ``n_tasks``, ``min_ops``, ``max_ops``,
            ``max_entities``).
    """

    DEFAULT_SETTINGS = LLMSettings(max_concurrency=4, max_retries=2, timeout_s=120.0)

    def __init__(
        self,
        model: Any,
        *,
        n_tasks: int = 5,
        min_ops: int = 1,
        max_ops: int = 3,
        max_entities: int = 2,
        max_calls_shown: int = 20,
        max_observation_chars: int = 300,
        settings: LLMSettings | None = None,
        prompt: str = DEFAULT_SYNTHESIS_PROMPT,
        **llm: Unpack[LLMKeywords],
    ) -> None:
        if not hasattr(model, "ainvoke"):
            raise ConfigError(f"LLMSynthesizer needs a LangChain chat model, got {type(model).__name__}.")
        if n_tasks < 1 or not 1 <= min_ops <= max_ops:
            raise ConfigError(f"need n_tasks >= 1 and 1 <= min_ops <= max_ops; got {n_tasks}, {min_ops}, {max_ops}.")
        check_template("prompt", prompt, SYNTHESIS_PROMPT_FIELDS)
        self._use_settings(settings, **llm)
        self.model = model
        self.n_tasks, self.min_ops, self.max_ops, self.max_entities = n_tasks, min_ops, max_ops, max_entities
        self.max_calls_shown, self.max_observation_chars = max_calls_shown, max_observation_chars
        self.prompt = prompt
        self.name = f"llm:{model_id(model)}"
        self.stats = SynthesisStats()

    def __repr__(self) -> str:
        return f"LLMSynthesizer(name={self.name!r}, n_tasks={self.n_tasks})"

    def render_prompt(self, trajectory: Trajectory) -> str:
        shown = [f"- {render_call(call)} -> {trim(obs.content, self.max_observation_chars)}"
                 for call, obs in trajectory.tool_results() if not obs.is_error]  # fmt: skip
        calls = "\n".join(shown[-self.max_calls_shown :]) or "(no call succeeded)"
        return self.prompt.format(calls=calls, n_tasks=self.n_tasks, min_ops=self.min_ops, max_ops=self.max_ops,
                                  max_entities=self.max_entities)  # fmt: skip

    def synthesize(self, trajectory: Trajectory) -> list[Task]:
        """Synchronous ``asynthesize``."""
        return run_sync(self.asynthesize(trajectory))

    async def asynthesize(self, trajectory: Trajectory) -> list[Task]:
        """New tasks from one exploration trajectory (``[]`` when the model gives none; never raises)."""
        self.stats.explorations += 1
        tally = CallTally()
        parsed, problem = await self._ask_model(
            self.render_prompt(trajectory), parse=parse_tasks,
            retry_message=lambda text: DEFAULT_SYNTHESIS_RETRY_PROMPT.format(
                problem="no JSON list of tasks with a query and a reference"),
            problem_of=lambda text: f"no readable tasks (last answer: {text[:200]!r})", tally=tally,
        )  # fmt: skip
        self.stats.model_calls += tally.attempts
        self.stats.input_tokens += tally.input_tokens
        self.stats.output_tokens += tally.output_tokens
        if parsed is None:
            self.stats.fallbacks += 1
            self.stats.errors.append(f"{trajectory.id}: {problem}")
            return []
        tasks: dict[str, Task] = {}
        for item in parsed:
            reference: list[ToolCall] = item["reference"]
            key = json.dumps([trajectory.task.env, trajectory.task.env_params, [c.to_dict() for c in reference],
                              item["query"]], sort_keys=True, default=str)  # fmt: skip
            task_id = f"synthetic-{hashlib.sha1(key.encode()).hexdigest()[:16]}"
            tasks[task_id] = Task(
                id=task_id,
                query=item["query"],
                env=trajectory.task.env,
                env_params=json.loads(json.dumps(trajectory.task.env_params, default=str)),
                reference_solution=tuple(reference),
                source="synthetic",
                metadata={
                    "level": len(reference),
                    "difficulty": item["difficulty"],
                    "confidence": item["confidence"],
                    "exploration_id": trajectory.id,
                    "synthesizer": self.name,
                },  # fmt: skip
            )
        self.stats.tasks += len(tasks)
        return list(tasks.values())

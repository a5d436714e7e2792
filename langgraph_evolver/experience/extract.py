"""Experience extraction: ``extract_experiences`` (+ async twin), its node, ``make_extractor``.

Trajectories are grouped by ``task.id``; the extractor reads each task's rollouts (successes,
failures, and both side by side when the task has both) and proposes scored experiences; per
task the best ``max_per_task`` scoring at least ``min_score`` are kept, and the same lesson found
for several tasks is kept once with the provenance of all (``select_experiences``). Every kept
``Experience`` carries its source trajectory and task ids, the training ``step`` and its
validation score. An extractor failure on a task is a counted fallback: that task yields no
experiences, and nothing raises.

``extractor`` is anything ``make_extractor`` accepts: ``"rules"`` (``RulesExtractor``:
deterministic, offline, no LLM), a chat-model string or instance (``LLMExtractor``), or an
extractor built once (reuse one across calls so its concurrency bound and stats are shared).

Example:
    >>> from langgraph_evolver.types import Action, Step, Task, ToolCall, ToolObservation, Trajectory
    >>> call = ToolCall(name="get_balance", id="1")
    >>> t = Trajectory(id="r", task=Task(id="a", query="How much money do I have?"), reward=1.0, steps=(
    ...     Step(index=0, action=Action(tool_calls=(call,)),
    ...          observations=(ToolObservation(call_id="1", name="get_balance", content="230"),)),
    ...     Step(index=1, action=Action(content="230"))))
    >>> result = extract_experiences([t], "rules", step=7)
    >>> [(e.when_to_use, e.content, e.step) for e in result.experiences]
    [('How much money do I have?', 'Call `get_balance`, then answer from the `get_balance` result.', 7)]
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel

from langgraph_evolver._llm import run_sync
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.types import Trajectory, as_trajectory

from .extractor import (
    ExtractionResult,
    Extractor,
    ExtractorStats,
    TaskExtraction,
    experience_id,
    group_by_task,
    select_experiences,
)
from .llm_extractor import LLMExtractor
from .rules import RulesExtractor

__all__ = [
    "DEFAULT_MIN_SCORE",
    "ExtractionResult",
    "Extractor",
    "ExtractorStats",
    "LLMExtractor",
    "RulesExtractor",
    "TaskExtraction",
    "aextract_experiences",
    "create_extraction_node",
    "experience_id",
    "extract_experiences",
    "make_extractor",
]

DEFAULT_MIN_SCORE = 0.5
"""Experiences scoring below it (a validation score under 5/10) are dropped."""

ExtractorSpec = str | BaseChatModel | Extractor

_ACCEPTED = (
    "An extractor is 'rules', a chat-model string for init_chat_model such as 'openai:gpt-4.1-mini' "
    "(endpoint settings in model_kwargs={{'base_url': ..., 'api_key': ...}}), a LangChain chat model "
    "instance, or an object with aextract_task/extract_task methods; got {got}."
)


def make_extractor(spec: ExtractorSpec, **options: Any) -> Extractor:
    """An extractor from a spec: ``"rules"``, a chat-model string or instance, or a ready extractor.

    Args:
        spec: ``"rules"`` (``RulesExtractor``, no LLM); any other string is a model for
            ``init_chat_model`` (``"openai:gpt-4.1-mini"``); a chat model instance (e.g.
            ``ChatOpenAI(base_url=..., model=...)`` for vLLM or our policy server); or an
            extractor, returned as is.
        **options: Keyword options of the extractor class (``LLMExtractor``/``RulesExtractor``);
            for a model string, ``model_kwargs={...}`` goes to ``init_chat_model``.

    Raises:
        ConfigError: an unknown provider, a bad option, or a spec of another type; the message
            says what to pass instead.

    Example:
        >>> make_extractor("rules").name
        'rules'
    """
    if isinstance(spec, BaseChatModel):
        return _build(LLMExtractor, spec, options)
    if isinstance(spec, str):
        name = spec.strip()
        if name.lower() == "rules":
            return _build(RulesExtractor, None, options)
        if not name:
            raise ConfigError(_ACCEPTED.format(got="an empty string"))
        return _build(LLMExtractor, name, options)
    if callable(getattr(spec, "aextract_task", None)) and callable(getattr(spec, "extract_task", None)):
        if options:
            raise ConfigError(f"Options {sorted(options)} only apply when make_extractor builds the extractor; "
                              f"configure the {type(spec).__name__} you passed instead.")  # fmt: skip
        return spec
    raise ConfigError(_ACCEPTED.format(got=f"a {type(spec).__name__}"))


def _build(cls: type, model: Any, options: dict[str, Any]) -> Any:
    try:
        return cls(**options) if model is None else cls(model, **options)
    except TypeError as e:
        raise ConfigError(f"{cls.__name__} got a bad option ({e}); see help({cls.__name__}) for its options.") from e


def _check(max_per_task: int, min_score: float) -> None:
    if max_per_task < 1:
        raise ConfigError(f"max_per_task must be >= 1, got {max_per_task}.")
    if not 0.0 <= min_score <= 1.0:
        raise ConfigError(f"min_score is a score in [0, 1] (a validation score / 10), got {min_score}.")


async def aextract_experiences(
    trajectories: Sequence[Trajectory | Mapping[str, Any]],
    extractor: ExtractorSpec,
    *,
    max_per_task: int = 3,
    min_score: float = DEFAULT_MIN_SCORE,
    step: int | None = None,
    **options: Any,
) -> ExtractionResult:
    """Async ``extract_experiences``: tasks are extracted concurrently (bounded by the extractor)."""
    _check(max_per_task, min_score)
    bound = make_extractor(extractor, **options)
    groups = group_by_task(as_trajectory(t) for t in trajectories)
    answers: list[TaskExtraction] = list(
        await asyncio.gather(
            *(bound.aextract_task(g, max_experiences=max_per_task, step=step) for g in groups.values())
        )
    )
    return select_experiences(answers, max_per_task=max_per_task, min_score=min_score)


def extract_experiences(
    trajectories: Sequence[Trajectory | Mapping[str, Any]],
    extractor: ExtractorSpec,
    *,
    max_per_task: int = 3,
    min_score: float = DEFAULT_MIN_SCORE,
    step: int | None = None,
    **options: Any,
) -> ExtractionResult:
    """Distil experiences from trajectories, task by task.

    Args:
        trajectories: Rollouts (or their ``to_dict()``) of any number of tasks, grouped here by ``task.id``.
        extractor: ``"rules"``, a chat-model string or instance, or an extractor (see ``make_extractor``).
        max_per_task: Most experiences kept per task (also what the LLM is asked to write).
        min_score: Candidates scoring below it (validation score / 10 for the LLM extractor) are dropped.
        step: The training step, recorded on every experience.
        **options: Extractor options, when ``extractor`` is a spec to build.

    Returns:
        The kept experiences, the rejected ones, and each task's answer (fallbacks counted in
        ``summary()``).
    """
    return run_sync(aextract_experiences(trajectories, extractor, max_per_task=max_per_task, min_score=min_score,
                                         step=step, **options))  # fmt: skip


def create_extraction_node(
    extractor: ExtractorSpec,
    *,
    input_key: str = "trajectories",
    output_key: str = "experiences",
    step_key: str | None = None,
    max_per_task: int = 3,
    min_score: float = DEFAULT_MIN_SCORE,
    **options: Any,
) -> Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]:
    """A LangGraph node that distils experiences from the trajectories at ``input_key``.

    The extractor is built once, so its concurrency bound and stats span every run of the node.

    Args:
        extractor: ``"rules"``, a chat-model string or instance, or an extractor (see ``make_extractor``).
        input_key: State key holding a list of ``Trajectory`` or their dicts (or one of them).
        output_key: State key the kept experiences (``Experience.to_dict()`` list) are written to.
        step_key: State key holding the training step, if any.
        max_per_task, min_score: As in ``extract_experiences``.
        **options: Extractor options, when ``extractor`` is a spec to build.

    Example:
        >>> from langgraph.graph import StateGraph
        >>> node = create_extraction_node("rules")
        >>> builder = StateGraph(dict).add_node("extract", node)   # doctest: +SKIP
    """
    _check(max_per_task, min_score)
    bound = make_extractor(extractor, **options)

    async def extract(state: Mapping[str, Any]) -> dict[str, Any]:
        if input_key not in state:
            raise ConfigError(f"The extraction node reads trajectories from state[{input_key!r}], which is "
                              f"missing (state keys: {sorted(state)}); pass them or set input_key.")  # fmt: skip
        value = state[input_key]
        trajectories = list(value) if isinstance(value, list | tuple) else [value]
        step = state.get(step_key) if step_key is not None else None
        result = await aextract_experiences(trajectories, bound, max_per_task=max_per_task, min_score=min_score,
                                            step=step)  # fmt: skip
        return {output_key: [e.to_dict() for e in result.experiences]}

    extract.__name__ = "extract_experiences"
    return extract

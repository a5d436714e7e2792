"""The self-attributing mechanism: ``attribute_steps`` (+ async twin, batch), its node, ``make_judge``.

``judge`` is anything ``make_judge`` accepts: ``"reference"``, a chat-model string or instance,
or a judge built once (reuse one judge across calls so its cache, concurrency bound and stats
are shared). The verdict is returned, not applied: ``apply_attribution(trajectory, verdict)``
gives the labelled trajectory.

Example:
    >>> from langgraph_evolver.types import Action, Step, Task, ToolCall, Trajectory
    >>> task = Task(id="t", query="Balance?", reference_solution=(ToolCall(name="get_balance"),))
    >>> traj = Trajectory(id="r", task=task, reward=0.0, steps=(
    ...     Step(index=0, action=Action(tool_calls=(ToolCall(name="get_balance"),))),
    ...     Step(index=1, action=Action(content="You have $5."))))
    >>> [x.label for x in attribute_steps(traj, "reference").labels]
    ['GOOD', 'BAD']
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel

from langgraph_evolver._llm import init_model
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.types import Trajectory, as_trajectory

from .core import Attribution, Judge, apply_attribution
from .judges import LLMJudge, run_sync
from .reference import ReferenceJudge

__all__ = [
    "aattribute_batch",
    "aattribute_steps",
    "attribute_batch",
    "attribute_steps",
    "create_attribution_node",
    "make_judge",
]

JudgeSpec = str | BaseChatModel | Judge


def make_judge(spec: str | BaseChatModel | Judge, **options: Any) -> Judge:
    """A judge from a spec: ``"reference"``, a chat-model string or instance, or a ready judge.

    Args:
        spec: ``"reference"`` (``ReferenceJudge``, no LLM); any other string is a model for
            ``init_chat_model`` (``"openai:gpt-4.1-mini"``); a chat model instance (e.g.
            ``ChatOpenAI(base_url=..., model=...)`` for vLLM or our policy server); or a judge,
            returned as is.
        **options: Keyword options of the judge class (``LLMJudge``/``ReferenceJudge``). For a
            model string, ``model_kwargs={...}`` goes to ``init_chat_model`` (``base_url``,
            ``api_key``, ``temperature``...).

    Example:
        >>> make_judge("reference", repeat_is_bad=False).name
        'reference'
    """
    if isinstance(spec, BaseChatModel):
        return _build(LLMJudge, spec, options)
    if isinstance(spec, str):
        name = spec.strip()
        if name.lower() == "reference":
            return _build(ReferenceJudge, None, options)
        if not name:
            raise ConfigError(_ACCEPTED.format(got="an empty string"))
        model = init_model(name, role="judge", accepted=_ACCEPTED.format(got=repr(name)),
                           **(options.pop("model_kwargs", None) or {}))  # fmt: skip
        return _build(LLMJudge, model, options)
    if callable(getattr(spec, "ajudge", None)) and callable(getattr(spec, "judge", None)):
        if options:
            raise ConfigError(f"Options {sorted(options)} only apply when make_judge builds the judge; "
                              f"configure the {type(spec).__name__} you passed instead.")  # fmt: skip
        return spec
    raise ConfigError(_ACCEPTED.format(got=f"a {type(spec).__name__}"))


_ACCEPTED = (
    "A judge is 'reference', a chat-model string for init_chat_model such as 'openai:gpt-4.1-mini' "
    "(endpoint settings in model_kwargs={{'base_url': ..., 'api_key': ...}}), a LangChain chat model "
    "instance, or an object with ajudge/judge methods; got {got}."
)


def _build(cls: type, model: Any, options: dict[str, Any]) -> Any:
    try:
        return cls(**options) if model is None else cls(model, **options)
    except TypeError as e:
        raise ConfigError(f"{cls.__name__} got a bad option ({e}); see help({cls.__name__}) for its options.") from e


def attribute_steps(trajectory: Trajectory | Mapping[str, Any], judge: JudgeSpec, **options: Any) -> Attribution:
    """Label every step of ``trajectory`` GOOD or BAD with a short reason.

    Args:
        trajectory: The trajectory (or its ``to_dict()``).
        judge: ``"reference"``, a chat-model string or instance, or a judge (see ``make_judge``).
        **options: Judge options, when ``judge`` is a spec to build.

    Returns:
        The verdict; ``labels`` is ``None`` when the judge failed (outcome-only fallback).
    """
    return make_judge(judge, **options).judge(as_trajectory(trajectory))


async def aattribute_steps(trajectory: Trajectory | Mapping[str, Any], judge: JudgeSpec, **options: Any) -> Attribution:
    """Async ``attribute_steps``."""
    return await make_judge(judge, **options).ajudge(as_trajectory(trajectory))


async def aattribute_batch(
    trajectories: Sequence[Trajectory | Mapping[str, Any]], judge: JudgeSpec, **options: Any
) -> list[Attribution]:
    """Verdicts for many trajectories, judged concurrently (bounded by the judge's ``max_concurrency``)."""
    bound = make_judge(judge, **options)
    return list(await asyncio.gather(*(bound.ajudge(as_trajectory(t)) for t in trajectories)))


def attribute_batch(
    trajectories: Sequence[Trajectory | Mapping[str, Any]], judge: JudgeSpec, **options: Any
) -> list[Attribution]:
    """Sync ``aattribute_batch``."""
    return run_sync(aattribute_batch(trajectories, judge, **options))


def create_attribution_node(
    judge: JudgeSpec,
    *,
    input_key: str = "trajectory",
    output_key: str = "attribution",
    labeled_key: str | None = None,
    **options: Any,
) -> Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]:
    """A LangGraph node that attributes the trajectory (or list of trajectories) at ``input_key``.

    The judge is built once, so its cache and concurrency bound span every run of the node.

    Args:
        judge: ``"reference"``, a chat-model string or instance, or a judge (see ``make_judge``).
        input_key: State key holding a ``Trajectory``/its dict, or a list of them.
        output_key: State key the verdict (``Attribution.to_dict()``, or a list) is written to.
        labeled_key: If set, the labelled trajectory dict(s) (``apply_attribution``) are also
            written under this key.
        **options: Judge options, when ``judge`` is a spec to build.

    Example:
        >>> from langgraph.graph import StateGraph
        >>> node = create_attribution_node("reference", labeled_key="labeled")
        >>> builder = StateGraph(dict).add_node("attribute", node)   # doctest: +SKIP
    """
    bound = make_judge(judge, **options)

    async def attribute(state: Mapping[str, Any]) -> dict[str, Any]:
        if input_key not in state:
            raise ConfigError(f"The attribution node reads the trajectory from state[{input_key!r}], which is "
                              f"missing (state keys: {sorted(state)}); pass it or set input_key.")  # fmt: skip
        value = state[input_key]
        many = isinstance(value, list | tuple)
        trajectories = [as_trajectory(v) for v in (value if many else [value])]
        verdicts = await aattribute_batch(trajectories, bound)
        update: dict[str, Any] = {}
        dicts = [v.to_dict() for v in verdicts]
        update[output_key] = dicts if many else dicts[0]
        if labeled_key is not None:
            labeled = [apply_attribution(t, v).to_dict() for t, v in zip(trajectories, verdicts, strict=True)]
            update[labeled_key] = labeled if many else labeled[0]
        return update

    attribute.__name__ = "attribute_steps"
    return attribute

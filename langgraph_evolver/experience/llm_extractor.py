"""``LLMExtractor``: any LangChain chat model distils experiences from the rollouts of one task.

Two calls per task, with the prompts of ``prompts.py``: extraction (the task, its successful and
failed rollouts, a success-vs-failure comparison when both exist; answer: a JSON list of
``{"when_to_use", "content"}``), then validation (each candidate scored 0-10 for being specific,
actionable and consistent with the rollouts; the score divided by 10 becomes
``Experience.score``). Answers are parsed leniently (fenced or bare JSON, ``<think>`` blocks
dropped); an unreadable answer is followed by a message saying so, and exceptions and timeouts
are retried too, each retry after ``backoff_s * 2**k`` seconds (capped at ``max_backoff_s``).
When ``max_retries`` retries do not give a readable answer, the task is a counted fallback
(``TaskExtraction.error`` set, ``stats.fallbacks`` counts it): it yields no experiences, and
nothing raises. A failed validation is a fallback too: unvalidated candidates are not stored.

Model calls are bounded by ``settings.max_concurrency`` (the ``concurrency`` keyword) per extractor
(across all tasks on one event loop).
Tokens come from each reply's ``usage_metadata`` (or ``response_metadata["token_usage"]``);
``price_per_1k_input``/``price_per_1k_output`` turn them into ``cost_usd``.

Example:
    >>> from langchain_core.messages import AIMessage
    >>> from langgraph_evolver.testing import ScriptedChatModel
    >>> from langgraph_evolver.types import Action, Step, Task, Trajectory
    >>> model = ScriptedChatModel([AIMessage('[{"when_to_use": "a greeting", "content": "Reply hi."}]'),
    ...                            AIMessage('[{"index": 1, "score": 8}]')])
    >>> t = Trajectory(id="r", task=Task(id="a", query="Say hi"), reward=1.0,
    ...                steps=(Step(index=0, action=Action(content="hi")),))
    >>> [(e.content, e.score) for e in LLMExtractor(model).extract_task([t]).experiences]
    [('Reply hi.', 0.8)]
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, Unpack

from langchain_core.language_models import BaseChatModel

from langgraph_evolver._llm import (
    UNSET,
    CallTally,
    LLMKeywords,
    LLMRole,
    LLMSettings,
    check_template,
    init_model,
    json_values,
    model_id,
    run_sync,
    strip_think,
)
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.types import Trajectory

from .extractor import ExtractorStats, TaskExtraction, experience_id
from .prompts import (
    DEFAULT_COMPARISON_INSTRUCTIONS,
    DEFAULT_EXTRACTION_PROMPT,
    DEFAULT_EXTRACTION_RETRY_PROMPT,
    DEFAULT_FAILURE_ONLY_INSTRUCTIONS,
    DEFAULT_SUCCESS_ONLY_INSTRUCTIONS,
    DEFAULT_VALIDATION_PROMPT,
    DEFAULT_VALIDATION_RETRY_PROMPT,
    EXTRACTION_PROMPT_FIELDS,
    EXTRACTION_RETRY_PROMPT_FIELDS,
    VALIDATION_PROMPT_FIELDS,
    VALIDATION_RETRY_PROMPT_FIELDS,
    render_candidates,
    render_trajectories,
)
from .types import Experience

__all__ = ["LLMExtractor", "parse_experiences", "parse_scores"]

T = TypeVar("T")
_SCORE_LINE = re.compile(r"^\W*(?:candidate|experience)?\s*#?(\d+)[*_`\s]*[:.)\-–]\s*\**(\d+(?:\.\d+)?)", re.I)
_WHEN_KEYS = ("when_to_use", "when", "situation", "condition")
_CONTENT_KEYS = ("content", "experience", "advice", "lesson")


def _first(item: dict[str, Any], keys: tuple[str, ...]) -> str:
    value = next((item[k] for k in keys if k in item), "")
    return value.strip() if isinstance(value, str) else ""


def parse_experiences(text: str) -> list[tuple[str, str]] | None:
    """``(when_to_use, content)`` pairs from an extraction answer; ``None`` when it is unreadable.

    A JSON list (or ``{"experiences": [...]}``, or one object) is read; ``[]`` is a readable
    answer with no experiences. Items without both fields are skipped.

    Example:
        >>> parse_experiences('Sure: ```json\\n[{"when_to_use": "w", "content": "c"}]\\n```')
        [('w', 'c')]
    """
    for value in json_values(text):
        if isinstance(value, dict):
            nested = next((value[k] for k in ("experiences", "items", "lessons") if k in value), None)
            value = nested if isinstance(nested, list) else [value]
        if not isinstance(value, list):
            continue
        pairs = [(_first(x, _WHEN_KEYS), _first(x, _CONTENT_KEYS)) for x in value if isinstance(x, dict)]
        pairs = list(dict.fromkeys((w, c) for w, c in pairs if w and c))
        if pairs or not value:
            return pairs
    return None


def parse_scores(text: str, num_candidates: int) -> dict[int, tuple[float, str]]:
    """``{candidate number (from 1): (score 0-10, reason)}`` from a validation answer; others absent.

    Example:
        >>> parse_scores('[{"index": 1, "score": 9, "reason": "specific"}, {"index": 2, "score": 2}]', 2)
        {1: (9.0, 'specific'), 2: (2.0, '')}
    """
    out: dict[int, tuple[float, str]] = {}
    for value in json_values(text):
        if isinstance(value, dict):
            value = next((value[k] for k in ("scores", "candidates", "results") if isinstance(value.get(k), list)),
                         [{"index": k, "score": v} for k, v in value.items()])  # fmt: skip
        if not isinstance(value, list):
            continue
        for i, item in enumerate(value, 1):
            if isinstance(item, int | float) and not isinstance(item, bool):
                item = {"index": i, "score": item}
            if not isinstance(item, dict):
                continue
            number = next((item[k] for k in ("index", "candidate", "id", "number") if k in item), i)
            score = next((item[k] for k in ("score", "rating") if k in item), None)
            try:
                n, s = int(re.sub(r"\D", "", str(number))), float(score)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                continue
            out[n] = (min(max(s, 0.0), 10.0), str(item.get("reason") or ""))
        if out:
            break
    if not out:
        for line in strip_think(text).splitlines():
            if match := _SCORE_LINE.match(line):
                out[int(match.group(1))] = (min(max(float(match.group(2)), 0.0), 10.0), "")
    return {n: v for n, v in sorted(out.items()) if 1 <= n <= num_candidates}


class LLMExtractor(LLMRole):
    """Distils experiences from one task's rollouts with a chat model, then validates them (two calls, plus retries).

    Args:
        model: Any LangChain chat model, or a model string for ``init_chat_model``
            (``"openai:gpt-4.1-mini"``; endpoint settings in ``model_kwargs``).
        settings: Retries, concurrency, timeout and token prices (``LLMSettings``; default
            ``LLMExtractor.DEFAULT_SETTINGS``). When ``max_retries`` retries give no readable
            answer, the task is a counted fallback with no experiences.
        max_retries, concurrency (``settings.max_concurrency``), backoff_s, max_backoff_s, timeout_s,
            price_per_1k_input, price_per_1k_output: Single ``LLMSettings`` fields; each one given
            overrides ``settings``.
        validate: Score every candidate with a second call (``min_score`` then drops the weak
            ones); ``False`` keeps them unscored (``score=1.0``, ``metadata["validated"]=False``).
        max_rollouts: Most successful and most failed rollouts shown per task (each).
        success_threshold: A reward at or above it marks a successful rollout.
        max_observation_chars: Each step's action and observation are trimmed to this length.
        prompt, validation_prompt, retry_prompt, validation_retry_prompt: The templates (see ``prompts.py``).
        comparison_instructions, success_only_instructions, failure_only_instructions: ``{comparison}``.
        model_kwargs: Keyword arguments for ``init_chat_model`` when ``model`` is a string.
        name: Overrides the extractor's name (default ``"llm:<model>"``).
    """

    DEFAULT_SETTINGS = LLMSettings(max_concurrency=8, max_retries=2, timeout_s=120.0)

    def __init__(
        self,
        model: str | BaseChatModel,
        *,
        settings: LLMSettings | None = None,
        concurrency: int = UNSET,
        validate: bool = True,
        max_rollouts: int = 2,
        success_threshold: float = 1.0,
        max_observation_chars: int = 300,
        prompt: str = DEFAULT_EXTRACTION_PROMPT,
        validation_prompt: str = DEFAULT_VALIDATION_PROMPT,
        retry_prompt: str = DEFAULT_EXTRACTION_RETRY_PROMPT,
        validation_retry_prompt: str = DEFAULT_VALIDATION_RETRY_PROMPT,
        comparison_instructions: str = DEFAULT_COMPARISON_INSTRUCTIONS,
        success_only_instructions: str = DEFAULT_SUCCESS_ONLY_INSTRUCTIONS,
        failure_only_instructions: str = DEFAULT_FAILURE_ONLY_INSTRUCTIONS,
        model_kwargs: dict[str, Any] | None = None,
        name: str | None = None,
        **llm: Unpack[LLMKeywords],
    ) -> None:
        if isinstance(model, str):
            model = init_model(model, role="extractor", accepted=_EXTRACTOR_ACCEPTED, **(model_kwargs or {}))
        if not hasattr(model, "ainvoke"):
            got = type(model).__name__
            raise ConfigError(f"LLMExtractor needs a LangChain chat model or a model string, got a {got}.")
        if concurrency is not UNSET:  # this role's name for max_concurrency
            if "max_concurrency" in llm:
                raise TypeError("LLMExtractor() got both concurrency and max_concurrency: give one.")
            llm["max_concurrency"] = concurrency
        self._use_settings(settings, **llm)
        if max_rollouts < 1:
            raise ConfigError(f"max_rollouts must be >= 1, got {max_rollouts}.")
        check_template("prompt", prompt, EXTRACTION_PROMPT_FIELDS)
        check_template("validation_prompt", validation_prompt, VALIDATION_PROMPT_FIELDS)
        check_template("retry_prompt", retry_prompt, EXTRACTION_RETRY_PROMPT_FIELDS)
        check_template("validation_retry_prompt", validation_retry_prompt, VALIDATION_RETRY_PROMPT_FIELDS)
        self.model = model
        self.validate = validate
        self.max_rollouts, self.success_threshold = max_rollouts, success_threshold
        self.max_observation_chars = max_observation_chars
        self.prompt, self.validation_prompt = prompt, validation_prompt
        self.retry_prompt, self.validation_retry_prompt = retry_prompt, validation_retry_prompt
        self.comparison_instructions = comparison_instructions
        self.success_only_instructions = success_only_instructions
        self.failure_only_instructions = failure_only_instructions
        self.name = name or f"llm:{model_id(model)}"
        self.stats = ExtractorStats()

    @property
    def concurrency(self) -> int:
        """``settings.max_concurrency``."""
        return self.settings.max_concurrency

    def __repr__(self) -> str:
        return f"LLMExtractor(name={self.name!r}, concurrency={self.concurrency}, validate={self.validate})"

    # -- prompts -----------------------------------------------------------------------------
    def shown_rollouts(self, trajectories: Sequence[Trajectory]) -> tuple[list[Trajectory], list[Trajectory]]:
        """The successful and failed rollouts the prompt shows (the first ``max_rollouts`` of each)."""
        won = [t.reward is not None and t.reward >= self.success_threshold for t in trajectories]
        wins = [t for t, w in zip(trajectories, won, strict=True) if w]
        losses = [t for t, w in zip(trajectories, won, strict=True) if not w]
        return wins[: self.max_rollouts], losses[: self.max_rollouts]

    def render_prompt(self, trajectories: Sequence[Trajectory], *, max_experiences: int = 3) -> str:
        """The extraction prompt for the rollouts of one task."""
        wins, losses = self.shown_rollouts(trajectories)
        comparison = (self.comparison_instructions if wins and losses
                      else self.success_only_instructions if wins else self.failure_only_instructions)  # fmt: skip
        chars = self.max_observation_chars
        return self.prompt.format(
            task=trajectories[0].task.query,
            successes=render_trajectories(wins, label="Success", max_observation_chars=chars),
            failures=render_trajectories(losses, label="Failure", max_observation_chars=chars),
            comparison=comparison,
            max_experiences=max_experiences,
        )

    def render_validation_prompt(
        self, trajectories: Sequence[Trajectory], candidates: Sequence[tuple[str, str]]
    ) -> str:
        """The validation prompt for ``candidates`` distilled from the rollouts of one task."""
        wins, losses = self.shown_rollouts(trajectories)
        return self.validation_prompt.format(
            task=trajectories[0].task.query,
            trajectories=render_trajectories([*wins, *losses], max_observation_chars=self.max_observation_chars),
            candidates=render_candidates(candidates),
            num_candidates=len(candidates),
        )

    # -- extraction --------------------------------------------------------------------------
    def extract_task(
        self, trajectories: Sequence[Trajectory], *, max_experiences: int = 3, step: int | None = None
    ) -> TaskExtraction:
        """Synchronous ``aextract_task``."""
        return run_sync(self.aextract_task(trajectories, max_experiences=max_experiences, step=step))

    async def aextract_task(
        self, trajectories: Sequence[Trajectory], *, max_experiences: int = 3, step: int | None = None
    ) -> TaskExtraction:
        """Scored experiences from the rollouts of one task; a failure gives a counted fallback, never raises."""
        task_id = trajectories[0].task.id if trajectories else ""
        if not trajectories:
            return self._done(TaskExtraction(task_id=task_id, extractor=self.name))
        started = time.perf_counter()
        tally = CallTally()
        prompt = self.render_prompt(trajectories, max_experiences=max_experiences)
        candidates, problem = await self._ask(prompt, parse_experiences, self._extraction_retry, tally)
        scores: dict[int, tuple[float, str]] | None = None
        if candidates:
            candidates = candidates[:max_experiences]
            if self.validate:
                prompt = self.render_validation_prompt(trajectories, candidates)
                n, found = len(candidates), {}

                def all_scores(text: str) -> dict[int, tuple[float, str]] | None:
                    found.update(parse_scores(text, n))  # scores are merged across attempts
                    return dict(found) if len(found) == n else None

                scores, problem = await self._ask(prompt, all_scores, lambda _: self._validation_retry(found, n), tally)
                problem = problem and f"validation: {problem}"
        fields: dict[str, Any] = {
            "task_id": task_id, "extractor": self.name, "attempts": tally.attempts,
            "input_tokens": tally.input_tokens, "output_tokens": tally.output_tokens,
            "cost_usd": self.settings.cost(tally),
            "latency_s": time.perf_counter() - started - tally.waited_s,
        }  # fmt: skip
        if candidates is None or (candidates and self.validate and scores is None):
            error = f"extraction failed after {tally.attempts} attempt(s): {problem}"
            return self._done(TaskExtraction(error=error, **fields))
        wins, losses = self.shown_rollouts(trajectories)
        sources = tuple(t.id for t in (*wins, *losses))
        experiences = []
        for i, (when, content) in enumerate(candidates, 1):
            score, reason = scores[i] if scores is not None else (10.0, "")
            metadata = {"extractor": self.name, "validated": scores is not None, "validation_reason": reason,
                        "successes": len(wins), "failures": len(losses)}  # fmt: skip
            experiences.append(Experience(
                id=experience_id(when, content), when_to_use=when, content=content, source_trajectory_ids=sources,
                source_task_ids=(task_id,), step=step, score=score / 10, metadata=metadata,
            ))  # fmt: skip
        experiences.sort(key=lambda e: -e.score)
        return self._done(TaskExtraction(experiences=tuple(experiences), **fields))

    def _done(self, answer: TaskExtraction) -> TaskExtraction:
        self.stats.add(answer)
        return answer

    def _extraction_retry(self, text: str) -> str:
        return self.retry_prompt.format(problem=f"no JSON list of when_to_use/content objects in: {text[:200]!r}")

    def _validation_retry(self, found: dict[int, tuple[float, str]], n: int) -> str:
        missing = [i for i in range(1, n + 1) if i not in found]
        return self.validation_retry_prompt.format(missing=", ".join(map(str, missing)), num_candidates=n)

    async def _ask(
        self, prompt: str, parse: Callable[[str], T | None], retry_message: Callable[[str], str], tally: CallTally
    ) -> tuple[T | None, str]:
        """One conversation: ask, parse, and on an unreadable answer or an error, retry; ``(None, why)`` at the end."""
        return await self._ask_model(
            prompt, parse=parse, retry_message=retry_message,
            problem_of=lambda text: f"unreadable answer {text[:200]!r}", tally=tally,
        )  # fmt: skip


_EXTRACTOR_ACCEPTED = (
    "Pass 'rules' (no LLM), a model string with a known provider prefix such as 'openai:gpt-4.1-mini' "
    "(endpoint settings in model_kwargs={'base_url': ..., 'api_key': ...}), or a LangChain chat model instance."
)

"""``LLMJudge``: any LangChain chat model labels every step of a trajectory GOOD or BAD.

One model call per trajectory, with the prompt of ``prompts.py``: the task, every step's action
and trimmed observation, the outcome score, and stricter rules when the outcome failed. The answer
is parsed leniently (``parsing.parse_labels``); an answer that leaves steps unlabelled is followed
by a message naming them, and labels are merged across attempts. Exceptions and timeouts are
retried too. Every retry waits ``backoff_s * 2**k`` seconds (capped at ``max_backoff_s``). When
``max_retries`` retries do not label every step, the verdict is an outcome-only fallback
(``labels=None`` with the reason in ``error``) and ``stats.fallbacks`` counts it; nothing raises.

Model calls are bounded by ``max_concurrency`` per judge (across all concurrent ``ajudge`` calls
on one event loop). Verdicts are cached by a sha256 of the judge's identity (model, prompts,
options) and the rendered prompt (which holds the query, every step's action, observation and
error, and the outcome): in memory, or also in a JSONL file that later runs reuse. Identical
trajectories judged concurrently share one model call. Fallbacks are not cached.

Example:
    >>> from langgraph_evolver.testing import ScriptedChatModel
    >>> from langchain_core.messages import AIMessage
    >>> from langgraph_evolver.types import Action, Step, Task, Trajectory
    >>> judge = LLMJudge(ScriptedChatModel([AIMessage("Step 1: GOOD - answered")]))
    >>> steps = (Step(index=0, action=Action(content="hi")),)
    >>> traj = Trajectory(id="t", task=Task(id="a", query="Say hi"), steps=steps, reward=1.0)
    >>> [x.label for x in judge.judge(traj).labels]
    ['GOOD']
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import weakref
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, Unpack

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable

from langgraph_evolver._llm import (
    CallTally,
    LLMKeywords,
    LLMRole,
    LLMSettings,
    check_template,
    make_cache,
    model_id,
    run_sync,
)
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.rendering import render_steps
from langgraph_evolver.types import Trajectory

from .core import Attribution, JudgeStats, Label, StepLabel
from .parsing import parse_labels
from .prompts import (
    ATTRIBUTION_PROMPT_FIELDS,
    DEFAULT_ATTRIBUTION_PROMPT,
    DEFAULT_FAILURE_RULES,
    DEFAULT_RETRY_PROMPT,
    DEFAULT_STEP_FORMAT,
    DEFAULT_SUCCESS_RULES,
    RETRY_PROMPT_FIELDS,
    STEP_FORMAT_FIELDS,
)

__all__ = ["LLMJudge", "run_sync"]

Cache = MutableMapping[str, list[list[str]]]
"""cache key -> one ``[label, reason]`` per step, in step order."""


class LLMJudge(LLMRole):
    """Labels every step of a trajectory GOOD or BAD with one chat-model call (plus retries).

    Args:
        model: Any LangChain chat model (hosted, vLLM or another OpenAI-compatible endpoint).
        settings: Retries, concurrency, timeout and token prices (``LLMSettings``; default
            ``LLMJudge.DEFAULT_SETTINGS``). When ``max_retries`` retries leave steps unlabelled,
            the trajectory falls back to outcome-only.
        max_concurrency, max_retries, backoff_s, max_backoff_s, timeout_s, price_per_1k_input,
            price_per_1k_output: Single ``LLMSettings`` fields; each one given overrides ``settings``.
        max_observation_chars: Each step's action and observation are trimmed to this length.
        cache: ``True`` (in memory, this judge's lifetime), a mapping to share, a JSONL file path
            to persist verdicts across runs, or ``None``/``False`` for no cache.
        success_threshold: A reward at or above it means the task succeeded.
        prompt: The attribution prompt (fields: see ``prompts.py``).
        success_rules: ``{rules}`` when the outcome succeeded or is unknown.
        failure_rules: ``{rules}`` when the outcome failed (stricter).
        retry_prompt: Sent after an answer with unlabelled steps.
        step_format: How one step is shown (fields ``number``, ``action``, ``observation``).
        name: Overrides the judge's name (default ``"llm:<model>"``).
    """

    DEFAULT_SETTINGS = LLMSettings(max_concurrency=8, max_retries=3, timeout_s=60.0)

    def __init__(
        self,
        model: BaseChatModel | Runnable,
        *,
        settings: LLMSettings | None = None,
        max_observation_chars: int = 400,
        cache: bool | MutableMapping[str, Any] | str | Path | None = True,
        success_threshold: float = 1.0,
        prompt: str = DEFAULT_ATTRIBUTION_PROMPT,
        success_rules: str = DEFAULT_SUCCESS_RULES,
        failure_rules: str = DEFAULT_FAILURE_RULES,
        retry_prompt: str = DEFAULT_RETRY_PROMPT,
        step_format: str = DEFAULT_STEP_FORMAT,
        name: str | None = None,
        **llm: Unpack[LLMKeywords],
    ) -> None:
        if not hasattr(model, "ainvoke"):
            raise ConfigError(f"LLMJudge needs a LangChain chat model, got {type(model).__name__}.")
        self._use_settings(settings, **llm)
        check_template("prompt", prompt, ATTRIBUTION_PROMPT_FIELDS)
        check_template("retry_prompt", retry_prompt, RETRY_PROMPT_FIELDS)
        check_template("step_format", step_format, STEP_FORMAT_FIELDS)
        self.model = model
        self.max_observation_chars = max_observation_chars
        self.success_threshold = success_threshold
        self.prompt, self.retry_prompt, self.step_format = prompt, retry_prompt, step_format
        self.success_rules, self.failure_rules = success_rules, failure_rules
        self.name = name or f"llm:{model_id(model)}"
        self.stats = JudgeStats()
        self.cache: MutableMapping[str, Any] | None = make_cache(cache, field="labels")
        identity = json.dumps([self.name, prompt, success_rules, failure_rules, retry_prompt, step_format,
                               max_observation_chars, success_threshold])  # fmt: skip
        self._identity = hashlib.sha256(identity.encode()).hexdigest()
        self._inflight: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Future]] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        return f"LLMJudge(name={self.name!r}, max_concurrency={self.max_concurrency}, max_retries={self.max_retries})"

    # -- prompt ------------------------------------------------------------------------------
    def render_prompt(self, trajectory: Trajectory) -> str:
        """The attribution prompt for ``trajectory``."""
        reward = trajectory.reward
        if reward is None:
            score, outcome, rules = "unknown", "has an unknown outcome", self.success_rules
        elif reward >= self.success_threshold:
            score, outcome, rules = f"{reward:.2f}", "succeeded", self.success_rules
        else:
            score, outcome, rules = f"{reward:.2f}", "failed", self.failure_rules
        steps = render_steps(trajectory.steps, max_observation_chars=self.max_observation_chars,
                             step_format=self.step_format)  # fmt: skip
        return self.prompt.format(task=trajectory.task.query, steps=steps, num_steps=len(trajectory.steps),
                                  score=score, outcome=outcome, rules=rules)  # fmt: skip

    def cache_key(self, trajectory: Trajectory) -> str:
        """sha256 of this judge's identity and the rendered prompt (the trajectory's content)."""
        return self._key(self.render_prompt(trajectory))

    def _key(self, prompt: str) -> str:
        return hashlib.sha256(f"{self._identity}\n{prompt}".encode()).hexdigest()

    # -- judging -----------------------------------------------------------------------------
    def judge(self, trajectory: Trajectory) -> Attribution:
        """Synchronous ``ajudge``."""
        return run_sync(self.ajudge(trajectory))

    async def ajudge(self, trajectory: Trajectory) -> Attribution:
        """Label every step of ``trajectory``; a judge failure gives an outcome-only fallback."""
        if not trajectory.steps:
            verdict = Attribution(trajectory_id=trajectory.id, labels=(), judge=self.name)
            self.stats.add(verdict)
            return verdict
        prompt = self.render_prompt(trajectory)
        key = self._key(prompt)
        cached = self.cache.get(key) if self.cache is not None else None
        if cached is not None and len(cached) == len(trajectory.steps):
            verdict = self._verdict_from(trajectory, cached, cached=True)
        else:
            verdict = await self._judge_once(trajectory, prompt, key)
        self.stats.add(verdict)
        return verdict

    def _verdict_from(self, trajectory: Trajectory, rows: list[list[str]], **fields: Any) -> Attribution:
        labels = tuple(
            StepLabel(step=s.index, label=label, reason=reason)  # type: ignore[arg-type]
            for s, (label, reason) in zip(trajectory.steps, rows, strict=True)
        )
        return Attribution(trajectory_id=trajectory.id, labels=labels, judge=self.name, **fields)

    async def _judge_once(self, trajectory: Trajectory, prompt: str, key: str) -> Attribution:
        """Judge with the model, sharing one call among identical trajectories in flight."""
        loop = asyncio.get_running_loop()
        inflight = self._inflight.setdefault(loop, {})
        pending = inflight.get(key)
        if pending is not None:
            first: Attribution = await asyncio.shield(pending)
            if first.labels is None:
                return Attribution(trajectory_id=trajectory.id, labels=None, judge=self.name, error=first.error)
            rows = [[x.label, x.reason] for x in first.labels]
            return self._verdict_from(trajectory, rows, cached=True)
        future: asyncio.Future = loop.create_future()
        inflight[key] = future
        try:
            verdict = await self._call_model(trajectory, prompt, key)
            future.set_result(verdict)
            return verdict
        finally:
            inflight.pop(key, None)
            if not future.done():
                future.cancel()

    async def _call_model(self, trajectory: Trajectory, prompt: str, key: str) -> Attribution:
        n = len(trajectory.steps)
        found: dict[int, tuple[Label, str]] = {}
        tally = CallTally()
        started = time.perf_counter()

        def missing() -> list[int]:
            return [i for i in range(1, n + 1) if i not in found]

        def all_labels(text: str) -> dict[int, tuple[Label, str]] | None:
            found.update(parse_labels(text, n))  # labels are merged across attempts
            return found if not missing() else None

        _, problem = await self._ask_model(
            prompt, parse=all_labels,
            retry_message=lambda text: self.retry_prompt.format(missing=", ".join(map(str, missing())), num_steps=n),
            problem_of=lambda text: f"no label for step(s) {missing()} (last answer: {text[:200]!r})", tally=tally,
        )  # fmt: skip
        fields: dict[str, Any] = {
            "attempts": tally.attempts, "latency_s": time.perf_counter() - started - tally.waited_s,
            "input_tokens": tally.input_tokens, "output_tokens": tally.output_tokens,
            "cost_usd": self.settings.cost(tally),
        }  # fmt: skip
        if len(found) < n:
            error = f"judge failed after {tally.attempts} attempt(s): {problem}"
            return Attribution(trajectory_id=trajectory.id, labels=None, judge=self.name, error=error, **fields)
        rows = [[found[i][0], found[i][1]] for i in range(1, n + 1)]
        if self.cache is not None:
            self.cache[key] = rows
        return self._verdict_from(trajectory, rows, **fields)

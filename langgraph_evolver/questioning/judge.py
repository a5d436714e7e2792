"""A reference-aware judge: the reward of a task whose environment has no state check.

The judge sees the task, its reference solution (one correct sequence of tool calls), what the
agent did and its final answer, and scores 0-100 in bands: the goal achieved → 60-100 (lower for
unneeded actions), not achieved → 0-40 (partial progress higher; irrelevant actions or runaway
repetition near 0). An answer outside its band is clamped into it and counted
(``stats.out_of_band``). ``reward = score / 100``.

It is the attribution judge's machinery (``_llm.ask_with_retries``): any LangChain chat model,
retries with a follow-up saying what was missing, a per-loop concurrency bound, a cache keyed by
the judge's identity and the rendered prompt (memory or a JSONL file), token accounting, and a
counted fallback (``fallback_reward``, default 0.0) when no readable answer comes; it never raises.

Use it as a drop-in ``reward`` (``reward(task, state, trajectory)``, async), e.g. in the trainer's
``reward_fn``:

    judge = ReferenceAwareJudge(ChatOpenAI(model="gpt-4o-mini"), cache="runs/judge.jsonl")
    reward_fn = judge.areward
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

from langgraph_evolver._llm import (
    CallTally,
    LLMKeywords,
    LLMRole,
    LLMSettings,
    VerdictTally,
    check_template,
    json_values,
    make_cache,
    model_id,
    run_sync,
    strip_think,
)
from langgraph_evolver.errors import ConfigError
from langgraph_evolver.rendering import render_call, render_steps, trim
from langgraph_evolver.types import Task, Trajectory

from .prompts import DEFAULT_REFERENCE_PROMPT, DEFAULT_REFERENCE_RETRY_PROMPT, REFERENCE_PROMPT_FIELDS

__all__ = ["DEFAULT_REFERENCE_PROMPT", "JudgeScore", "ReferenceAwareJudge", "ReferenceAwareJudgeStats", "parse_score"]

_ACHIEVED = re.compile(r"achieved\W{0,4}\s*(yes|no|true|false)\b", re.I)
_SCORE = re.compile(r"score\W{0,4}\s*(\d{1,3})(?:\s*/\s*100)?\b", re.I)
_REASON = re.compile(r"reason\W{0,4}\s*(.+)", re.I)


def parse_score(text: str) -> tuple[bool, int, str] | None:
    """``(achieved, score 0-100, reason)`` from a judge's answer, or ``None`` when unreadable.

    Reads ``ACHIEVED: yes|no`` / ``SCORE: n`` / ``REASON: ...`` lines (any case, markdown
    emphasis allowed) or a JSON object with those keys; a missing ``ACHIEVED`` is inferred from
    the score (>= 60), a score above 100 is unreadable.
    """
    text = strip_think(text).replace("*", "")
    loaded = next((v for v in json_values(text) if isinstance(v, dict)), None)
    data = {str(k).lower(): v for k, v in loaded.items()} if loaded is not None else None
    if data is not None and "score" in data:
        try:
            score = int(float(data["score"]))
        except (TypeError, ValueError):
            return None
        raw = data.get("achieved")
        achieved = score >= 60 if raw is None else str(raw).strip().lower() in ("yes", "true", "1")
        reason = str(data.get("reason") or "")
    else:
        got = _SCORE.search(text)
        if got is None:
            return None
        score = int(got.group(1))
        flag = _ACHIEVED.search(text)
        achieved = score >= 60 if flag is None else flag.group(1).lower() in ("yes", "true")
        why = _REASON.search(text)
        reason = why.group(1).strip() if why else ""
    if not 0 <= score <= 100:
        return None
    return achieved, score, trim(reason, 200)


@dataclass(frozen=True, slots=True, kw_only=True)
class JudgeScore:
    """One verdict of the reference-aware judge."""

    reward: float
    """``score / 100``; ``fallback_reward`` when the judge failed."""
    score: int | None = None
    """0-100 after band clamping; ``None`` on a fallback."""
    achieved: bool | None = None
    reason: str = ""
    clamped: bool = False
    """The judge's score was outside the band its ``ACHIEVED`` implies and was clamped into it."""
    error: str | None = None
    """Why the verdict is a fallback (``None``: the judge answered)."""
    cached: bool = False
    attempts: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0

    @property
    def fallback(self) -> bool:
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(slots=True, kw_only=True)
class ReferenceAwareJudgeStats(VerdictTally):
    """Running totals of one reference judge (``out_of_band``: scores clamped into their band)."""

    verdicts: int = 0
    out_of_band: int = 0

    def add(self, verdict: JudgeScore) -> None:
        VerdictTally.add(self, verdict)  # explicit: zero-argument super() fails in slotted dataclasses
        self.verdicts += 1
        self.out_of_band += verdict.clamped


def _banded(achieved: bool, score: int) -> tuple[int, bool]:
    low, high = (60, 100) if achieved else (0, 40)
    clamped = min(max(score, low), high)
    return clamped, clamped != score


class ReferenceAwareJudge(LLMRole):
    """Scores a trajectory against its task's reference solution (0-100 in bands; reward = score/100).

    Args:
        model: any LangChain chat model (hosted, vLLM, another OpenAI-compatible endpoint).
        settings: retries, concurrency and timeout (``LLMSettings``; default
            ``ReferenceAwareJudge.DEFAULT_SETTINGS``).
        max_concurrency, max_retries, backoff_s, max_backoff_s, timeout_s: single ``LLMSettings``
            fields; each one given overrides ``settings``.
        max_observation_chars: each step's action and observation are trimmed to this length.
        cache: ``True`` (memory), a mapping, a JSONL file path (persists across runs), or ``None``.
        fallback_reward: the reward when the judge gives no readable answer (counted in ``stats``).
        prompt: the judge prompt (fields ``task``, ``reference``, ``steps``, ``num_steps``, ``answer``).
        name: overrides the judge's name (default ``"reference:<model>"``).
    """

    DEFAULT_SETTINGS = LLMSettings(max_concurrency=8, max_retries=3, timeout_s=60.0)

    def __init__(
        self,
        model: Any,
        *,
        settings: LLMSettings | None = None,
        max_observation_chars: int = 400,
        cache: bool | MutableMapping[str, Any] | str | Path | None = True,
        fallback_reward: float = 0.0,
        prompt: str = DEFAULT_REFERENCE_PROMPT,
        name: str | None = None,
        **llm: Unpack[LLMKeywords],
    ) -> None:
        if not hasattr(model, "ainvoke"):
            raise ConfigError(f"ReferenceAwareJudge needs a LangChain chat model, got {type(model).__name__}.")
        self._use_settings(settings, **llm)
        if not 0.0 <= fallback_reward <= 1.0:
            raise ConfigError(f"fallback_reward must be in [0, 1], got {fallback_reward}.")
        check_template("prompt", prompt, REFERENCE_PROMPT_FIELDS)
        self.model = model
        self.max_observation_chars = max_observation_chars
        self.fallback_reward = fallback_reward
        self.prompt = prompt
        self.name = name or f"reference-aware:{model_id(model)}"
        self.cache = make_cache(cache, field="verdict")
        self.stats = ReferenceAwareJudgeStats()
        identity = json.dumps([self.name, prompt, max_observation_chars])
        self._identity = hashlib.sha256(identity.encode()).hexdigest()

    def __repr__(self) -> str:
        return f"ReferenceAwareJudge(name={self.name!r}, max_retries={self.max_retries})"

    def render_prompt(self, task: Task, trajectory: Trajectory) -> str:
        reference = "\n".join(f"{i}. {render_call(c)}" for i, c in enumerate(task.reference_solution or (), 1))
        steps = render_steps(trajectory.steps, max_observation_chars=self.max_observation_chars)
        last = trajectory.steps[-1].action if trajectory.steps else None
        answer = (last.content if last is not None and not last.tool_calls else "") or "(none)"
        return self.prompt.format(task=task.query, reference=reference or "(none given)", steps=steps or "(no steps)",
                                  num_steps=len(trajectory.steps), answer=trim(str(answer), 600))  # fmt: skip

    def score(self, task: Task, trajectory: Trajectory) -> JudgeScore:
        """Synchronous ``ascore``."""
        return run_sync(self.ascore(task, trajectory))

    async def ascore(self, task: Task, trajectory: Trajectory) -> JudgeScore:
        """Score ``trajectory`` on ``task``; a judge failure gives the counted fallback, never raises."""
        prompt = self.render_prompt(task, trajectory)
        key = hashlib.sha256(f"{self._identity}\n{prompt}".encode()).hexdigest()
        cached = self.cache.get(key) if self.cache is not None else None
        if cached is not None:
            verdict = JudgeScore(**{**cached, "cached": True, "attempts": 0, "input_tokens": 0, "output_tokens": 0})
        else:
            verdict = await self._ask(prompt)
            if self.cache is not None and not verdict.fallback:
                self.cache[key] = {k: v for k, v in verdict.to_dict().items() if k in ("reward", "score", "achieved",
                                                                                    "reason", "clamped")}  # fmt: skip
        self.stats.add(verdict)
        return verdict

    async def _ask(self, prompt: str) -> JudgeScore:
        tally = CallTally()
        started = time.perf_counter()
        parsed, problem = await self._ask_model(
            prompt, parse=parse_score, retry_message=lambda text: DEFAULT_REFERENCE_RETRY_PROMPT,
            problem_of=lambda text: f"no ACHIEVED/SCORE in the answer (last answer: {text[:200]!r})", tally=tally,
        )  # fmt: skip
        fields: dict[str, Any] = {"attempts": tally.attempts, "input_tokens": tally.input_tokens,
                                  "output_tokens": tally.output_tokens,
                                  "latency_s": round(time.perf_counter() - started - tally.waited_s, 4)}  # fmt: skip
        if parsed is None:
            error = f"reference judge failed after {tally.attempts} attempt(s): {problem}"
            return JudgeScore(reward=self.fallback_reward, error=error, **fields)
        achieved, raw, reason = parsed
        score, clamped = _banded(achieved, raw)
        return JudgeScore(reward=score / 100.0, score=score, achieved=achieved, reason=reason, clamped=clamped,
                          **fields)  # fmt: skip

    async def areward(self, task: Task, state: Any, trajectory: Trajectory) -> float:
        """A drop-in ``reward(task, state, trajectory)``: ``score / 100`` (the fallback on failure)."""
        return (await self.ascore(task, trajectory)).reward

    def reward(self, task: Task, state: Any, trajectory: Trajectory) -> float:
        """Synchronous ``areward``."""
        return self.score(task, trajectory).reward

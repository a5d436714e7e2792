"""Self-navigating in rollouts and training: retrieve, inject, strip, boost.

- **Retrieve.** ``Navigator.ablock_for(task, observation)``: the query is the task's system and
  user text; the top-k experiences from the pool become one ``ExperienceBlock`` (cached per
  query and pool version, so the guided rollouts of a group share one retrieval). With a
  ``rewriter`` chat model, the retrieved experiences are reranked (irrelevant ones dropped) and
  rewritten into one short block of advice; a failed rewrite falls back to the plain block
  (counted in ``stats``), and a rewrite that keeps nothing leaves the rollout unguided.
  ``aguide(navigator, task, observation)`` is the rollout runner's one call: the block, the
  trajectory metadata that records the rollout as guided, and the error of a failed retrieval
  (the rollout then runs unguided).
- **Inject.** ``inject_experience(messages, block)`` appends the block to the first system
  message of a prompt (a new system message when there is none). It is applied at prompt time,
  after the context template, so no template can drop or compress it: our graph's ``agent``
  node injects ``current_block()``, ``EvolverMiddleware`` the ``guided_system_message``, and the
  policy model handed to a factory carries a ``guided_template``.
- **Strip.** ``strip_block(transition, block, tokenizer)``: the guided prompt is decoded, the
  block (with its separator) removed and the text re-tokenized: the row trains the policy to act
  *without* the advice. Completions stay exactly as sampled; the old logprobs stay the behaviour
  logprobs sampled under the guided prompt (``docs/self-navigating.md`` says why). ``keep`` mode
  trains on the guided prompt as it was.
- **Boost.** ``epsilon_highs``: a guided call with a positive advantage and a non-empty retrieval
  gets the wider upper clip bound (0.6); every other call the normal one.

One reading of a trajectory, for everything above and the trainer's figures: ``is_guided`` reads
``metadata["experience"]["guided"]`` (set by ``aguide``, also when nothing was retrieved), and
``retrieved_ids`` the trajectory's ``experience_ids`` (empty when unguided or nothing retrieved).
Both accept a ``Trajectory`` or its ``to_dict()``.

``prepare_for_training`` applies strip/keep to a batch of trajectories and returns what it did,
so the trainer has one call and the figures to log.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from langchain_core.messages import BaseMessage, SystemMessage

from .._llm import CallTally, LoopSemaphores, ask_with_retries, strip_think
from ..context import ContextTemplate
from ..context.templates import pin
from ..rollout import EpisodeHooks, MessageTransform, Rollout, current_rollout, register_guide
from ..types import Task, Trajectory, Transition
from .types import Experience

__all__ = [
    "BLOCK_HEADER",
    "BLOCK_SEPARATOR",
    "DEFAULT_REWRITE_PROMPT",
    "ExperienceBlock",
    "NavigationHooks",
    "Navigator",
    "aguide",
    "current_block",
    "epsilon_highs",
    "format_block",
    "guided_block",
    "guided_system_message",
    "guided_template",
    "inject_experience",
    "is_guided",
    "prepare_for_training",
    "retrieval_query",
    "retrieved_ids",
    "strip_block",
]

BLOCK_HEADER = "Experience from earlier tasks (follow it when it applies):"
BLOCK_SEPARATOR = "\n\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class ExperienceBlock:
    """What one guided rollout is shown: the experiences' ids and the exact injected text."""

    ids: tuple[str, ...]
    text: str
    scores: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "text": self.text, "scores": list(self.scores)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExperienceBlock:
        return cls(ids=tuple(data["ids"]), text=data["text"], scores=tuple(data.get("scores") or ()))


def format_block(experiences: Sequence[Experience]) -> str:
    lines = [BLOCK_HEADER, *(f"- When {e.when_to_use.rstrip('.')}: {e.content}" for e in experiences)]
    return "\n".join(lines)


def _hits_block(hits: Sequence[tuple[Experience, float]], text: str | None = None) -> ExperienceBlock:
    """The block of retrieved ``(experience, score)`` hits: ``text``, else the hits listed by ``format_block``."""
    ids = tuple(e.id for e, _ in hits)
    scores = tuple(round(float(s), 4) for _, s in hits)
    return ExperienceBlock(ids=ids, text=format_block([e for e, _ in hits]) if text is None else text, scores=scores)


def retrieval_query(task: Task, observation: Any = None) -> str:
    """The task's system and user text (the environment's opening messages), else its query."""
    messages = getattr(observation, "messages", None) or []
    parts = [m.get("content") or "" for m in messages if m.get("role") in ("system", "user")]
    return "\n".join(p for p in parts if p) or task.query


def inject_experience(messages: Sequence[BaseMessage], block: ExperienceBlock | None) -> list[BaseMessage]:
    """``messages`` with ``block`` appended to the first system message (pinned), or as a new first one."""
    out = list(messages)
    if block is None or not block.text:
        return out
    for i, m in enumerate(out):
        if isinstance(m, SystemMessage):
            text = m.content if isinstance(m.content, str) else m.text
            out[i] = pin(m.model_copy(update={"content": f"{text}{BLOCK_SEPARATOR}{block.text}",
                                              "additional_kwargs": dict(m.additional_kwargs)}))  # fmt: skip
            return out
    return [pin(SystemMessage(block.text)), *out]


def guided_system_message(system_message: SystemMessage | None, block: ExperienceBlock) -> SystemMessage:
    """An agent's system prompt with ``block`` appended (pinned); the block alone when it has none.

    What ``EvolverMiddleware`` hands a ``create_agent`` agent's model in a guided rollout.
    """
    injected = inject_experience([system_message] if system_message is not None else [], block)[0]
    return cast(SystemMessage, injected)  # the first system message, appended to, or the new one


def guided_template(template: ContextTemplate | None, block: ExperienceBlock | None) -> ContextTemplate | None:
    """``template`` followed by ``inject_experience(..., block)``: the block survives every template.

    What the policy a ``build`` factory receives applies on every prompt; ``template`` itself without a block.
    """
    if block is None:
        return template

    def guided(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        return inject_experience(template(messages) if template is not None else list(messages), block)

    return guided


def current_block() -> ExperienceBlock | None:
    """The block the running rollout is guided by (``NavigationHooks`` keeps it); ``None`` outside one."""
    rollout = current_rollout()
    return rollout.extras.get(_KEY) if rollout is not None else None


DEFAULT_REWRITE_PROMPT = """An agent is about to work on this task:
{task}

Experiences from earlier tasks were retrieved for it:
{experiences}

Keep only the experiences that help with this task, most useful first, and rewrite them as one short
block of advice (a few bullet points, concrete, no preamble). Answer in exactly this form:
KEEP: <numbers, comma-separated, or none>
ADVICE:
<the advice>"""
_KEEP = re.compile(r"keep\W{0,3}\s*([0-9 ,]+|none)", re.I)
_ADVICE = re.compile(r"advice[ \t]*:?[ \t]*\n?(.*)", re.I | re.S)


def parse_rewrite(text: str, n: int) -> tuple[list[int], str] | None:
    """``(kept 0-based indices, advice)`` from a rewriter's answer; ``None`` when unreadable."""
    text = strip_think(text).replace("*", "")
    keep = _KEEP.search(text)
    if keep is None:
        return None
    if keep.group(1).strip().lower() == "none":
        return [], ""
    kept = list(dict.fromkeys(int(x) - 1 for x in re.findall(r"\d+", keep.group(1)) if 1 <= int(x) <= n))
    advice = _ADVICE.search(text[keep.end() :])
    body = advice.group(1).strip() if advice else ""
    return (kept, body) if kept and body else None


@dataclass(slots=True)
class NavigatorStats:
    retrievals: int = 0
    rewrites: int = 0
    rewrite_fallbacks: int = 0
    """Rewrites that failed (the plain block was used)."""
    dropped_by_rewrite: int = 0
    """Retrievals the rewriter judged irrelevant (the rollout ran unguided)."""


@dataclass
class Navigator:
    """Retrieval for rollouts: ``pool``, ``top_k``, an optional ``min_score``; cached per query and pool version.

    ``rewriter`` (any LangChain chat model) reranks and rewrites the retrieved experiences into one
    block (``rewrite_prompt``, fields ``task`` and ``experiences``), with ``rewrite_retries`` retries.
    """

    pool: Any
    top_k: int = 5
    min_score: float | None = None
    rewriter: Any = None
    rewrite_prompt: str = DEFAULT_REWRITE_PROMPT
    rewrite_retries: int = 1
    stats: NavigatorStats = field(default_factory=NavigatorStats)
    _semaphores: LoopSemaphores = field(default_factory=lambda: LoopSemaphores(4), repr=False)
    """Bounds the rewriter's calls in flight (per event loop), across all rollouts."""
    _cache: dict[tuple[str, int], ExperienceBlock | None] = field(default_factory=dict)

    async def _rewrite(self, query: str, hits: list[tuple[Experience, float]]) -> ExperienceBlock | None:
        listed = "\n".join(f"{i}. When {e.when_to_use.rstrip('.')}: {e.content}" for i, (e, _) in enumerate(hits, 1))
        prompt = self.rewrite_prompt.format(task=query, experiences=listed)
        self.stats.rewrites += 1
        parsed, _ = await ask_with_retries(
            self.rewriter, prompt, parse=lambda text: parse_rewrite(text, len(hits)),
            retry_message=lambda text: "Answer with a 'KEEP: <numbers or none>' line, then 'ADVICE:' and the advice.",
            problem_of=lambda text: text[:200], max_retries=self.rewrite_retries, backoff_s=0.5, max_backoff_s=5.0,
            timeout_s=60.0, semaphores=self._semaphores, tally=CallTally(),
        )  # fmt: skip
        if parsed is None:
            self.stats.rewrite_fallbacks += 1
            return _hits_block(hits)
        kept, advice = parsed
        if not kept:
            self.stats.dropped_by_rewrite += 1
            return None
        return _hits_block([hits[i] for i in kept], text=f"{BLOCK_HEADER}\n{advice}")

    async def ablock_for(self, task: Task, observation: Any = None) -> ExperienceBlock | None:
        query = retrieval_query(task, observation)
        key = (query, int(getattr(self.pool, "version", 0)))
        if key not in self._cache:
            if len(self._cache) > 4096:
                self._cache.clear()
            hits = await self.pool.aretrieve(query, k=self.top_k, min_score=self.min_score) if len(self.pool) else []
            self.stats.retrievals += 1
            if hits and self.rewriter is not None:
                self._cache[key] = await self._rewrite(query, list(hits))
                return self._cache[key]
            self._cache[key] = _hits_block(hits) if hits else None
        return self._cache[key]

    def block_for(self, task: Task, observation: Any = None) -> ExperienceBlock | None:
        return asyncio.run(self.ablock_for(task, observation))


_KEY = "experience"
"""The trajectory metadata key ``aguide`` writes: ``{"guided": True, "ids", "text", "scores"}``."""


async def aguide(navigator: Navigator, task: Task, observation: Any = None
                 ) -> tuple[ExperienceBlock | None, dict[str, Any], str | None]:  # fmt: skip
    """Guide one rollout: ``(block, metadata, error)``.

    ``block`` is what to inject (``None`` when nothing was retrieved or retrieval failed); ``metadata``
    goes into the trajectory's metadata and records the rollout as guided (``is_guided``), with the
    block's ids, text and scores; ``error`` says why retrieval failed (the rollout then runs unguided).
    """
    block: ExperienceBlock | None = None
    error = None
    try:
        block = await navigator.ablock_for(task, observation)
    except Exception as e:  # a failed retrieval leaves the rollout unguided, recorded
        error = f"experience retrieval failed (rollout unguided): {type(e).__name__}: {e}"
    record = block.to_dict() if block is not None else {"ids": [], "text": ""}
    return block, {_KEY: {"guided": True, **record}}, error


class NavigationHooks(EpisodeHooks):
    """Self-navigating as episode hooks: retrieve before the run (``aguide``), inject into every policy prompt.

    The block is kept in ``rollout.extras["experience"]`` (``current_block()``); the metadata that records
    the rollout as guided and the block's ids go into the trajectory.
    """

    def __init__(self, navigator: Any) -> None:
        self.navigator = navigator  # a ``Navigator``, or anything with its ``ablock_for``

    async def before_run(self, rollout: Rollout) -> str | None:
        block, metadata, error = await aguide(self.navigator, rollout.task, rollout.observation)
        rollout.metadata.update(metadata)
        if block is not None:
            rollout.extras[_KEY] = block
            rollout.experience_ids = block.ids
        return error

    def message_transform(self, rollout: Rollout) -> MessageTransform | None:
        block = rollout.extras.get(_KEY)
        if block is None:
            return None
        return lambda messages: inject_experience(messages, block)


register_guide(NavigationHooks)  # arun_episode(navigator=..., guided=True) plugs these in


def _field(trajectory: Trajectory | Mapping[str, Any], name: str) -> Any:
    return trajectory.get(name) if isinstance(trajectory, Mapping) else getattr(trajectory, name)


def is_guided(trajectory: Trajectory | Mapping[str, Any]) -> bool:
    """Whether the rollout runner guided this rollout (``metadata["experience"]["guided"]``), retrieval or not.

    ``trajectory`` is a ``Trajectory`` or its ``to_dict()``.
    """
    record = (_field(trajectory, "metadata") or {}).get(_KEY) or {}
    return bool(record.get("guided"))


def retrieved_ids(trajectory: Trajectory | Mapping[str, Any]) -> tuple[str, ...]:
    """The ids of the experiences injected into this rollout (its ``experience_ids``); empty when none were."""
    return tuple(_field(trajectory, "experience_ids") or ())


def guided_block(trajectory: Trajectory) -> ExperienceBlock | None:
    """The block injected into a guided rollout that retrieved something (what stripping removes), else ``None``."""
    if not (is_guided(trajectory) and retrieved_ids(trajectory)):
        return None
    return ExperienceBlock.from_dict(trajectory.metadata[_KEY])


def strip_block(transition: Transition, block: ExperienceBlock, tokenizer: Any) -> Transition | None:
    """The transition with ``block`` removed from its prompt and the prompt re-tokenized; ``None`` if absent.

    ``experience_span`` records the block's token span in the guided prompt.
    """
    text = tokenizer.decode(list(transition.prompt_ids), skip_special_tokens=False)
    needle = BLOCK_SEPARATOR + block.text
    start = text.find(needle)
    if start < 0:
        needle, start = block.text, text.find(block.text)
        if start < 0:
            return None
    stripped = list(tokenizer(text[:start] + text[start + len(needle) :], add_special_tokens=False).input_ids)
    span_start = len(tokenizer(text[:start], add_special_tokens=False).input_ids)
    span = (span_start, span_start + len(transition.prompt_ids) - len(stripped))
    return replace(transition, prompt_ids=tuple(stripped), experience_span=span)


def epsilon_highs(trajectory: Trajectory, advantages: float | Sequence[float], *, epsilon_high: float,
                  boost: float | None) -> list[float]:  # fmt: skip
    """The upper clip bound of each trained call: ``boost`` for guided calls with retrieval and a positive advantage."""
    n = len(trajectory.transitions)
    values = [float(advantages)] * n if isinstance(advantages, int | float) else [float(a) for a in advantages]
    if boost is None or guided_block(trajectory) is None:
        return [epsilon_high] * n
    return [boost if a > 0 else epsilon_high for a in values]


@dataclass(slots=True)
class PreparedBatch:
    """What ``prepare_for_training`` did to a batch."""

    trajectories: list[Trajectory]
    guided: int = 0
    """Guided trajectories with an injected block (the ones stripped or kept)."""
    stripped: int = 0
    strip_failed: int = 0


def prepare_for_training(trajectories: Sequence[Trajectory], tokenizer: Any, *, mode: str = "strip") -> PreparedBatch:
    """Strip the injected block from every guided transition (``mode="strip"``), or keep it (``"keep"``)."""
    if mode not in ("strip", "keep"):
        from ..errors import ConfigError

        raise ConfigError(f"navigation mode must be 'strip' or 'keep', got {mode!r}.")
    out = PreparedBatch(trajectories=[])
    for traj in trajectories:
        block = guided_block(traj)
        if block is None:
            out.trajectories.append(traj)
            continue
        out.guided += 1
        if mode == "keep":
            out.trajectories.append(traj)
            continue
        steps = []
        for step in traj.steps:
            if step.transition is None:
                steps.append(step)
                continue
            new = strip_block(step.transition, block, tokenizer)
            if new is None:
                out.strip_failed += 1
                steps.append(step)
            else:
                out.stripped += 1
                steps.append(replace(step, transition=new))
        out.trajectories.append(replace(traj, steps=tuple(steps)))
    return out

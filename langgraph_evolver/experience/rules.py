"""``RulesExtractor``: deterministic experiences from tool errors, recoveries and successful tool sequences.

No LLM and no knowledge of any environment: it reads only tool names, arguments, observations
and their ``is_error`` flags, and the outcome reward. From the rollouts of one task it learns:

- **tool preconditions** (``kind="tool_precondition"``): a call of ``X`` that got an error,
  followed later in the rollout by a call of ``X`` that did not. The lesson says what differed:
  argument names (``use `query`, not `q```), types, missing or extra arguments, a value that must
  come from another tool's result, or a tool that had to be called in between;
- **unknown-tool recoveries** (``kind="unknown_tool"``): an error saying the tool does not exist,
  and the tool the agent used next;
- **workflows** (``kind="workflow"``), from successful rollouts only: the tool sequence that solved
  the request, with where each argument's value came from (the request, or an earlier tool's
  result). ``when_to_use`` is the request with entity-like tokens (names, dates, numbers, ids)
  replaced by placeholders (``normalize_query``), so that similar requests find it.

Same input, same output: experience ids are a hash of ``when_to_use`` and ``content``
(``experience_id``), and a lesson seen in several rollouts is one experience whose sources list
them all. Scores: a workflow scores the mean reward of its rollouts; an error lesson, which the
environment itself confirmed by accepting the corrected call, scores ``0.5 + 0.5 * mean reward``.

Example:
    >>> normalize_query("Pay Lea 15 dollars on May 6 for order A17.")
    'Pay <NAME> <NUM> dollars on <DATE> for order <ID>.'
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langgraph_evolver.rendering import trim
from langgraph_evolver.types import Step, ToolCall, Trajectory

from .extractor import ExtractorStats, TaskExtraction, experience_id
from .types import Experience

__all__ = ["RulesExtractor", "normalize_query"]

Kind = Literal["tool_precondition", "unknown_tool", "workflow"]
_KIND_RANK = {"tool_precondition": 0, "unknown_tool": 1, "workflow": 2}

_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|"
          r"Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")  # fmt: skip
_WEEKDAY = r"(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day"
_PLACEHOLDERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.]+\b"), "<EMAIL>"),
    (re.compile(r"\bhttps?://\S+"), "<URL>"),
    (
        re.compile(r"(?<!\w)\"[^\"\n]{0,200}\s[^\"\n]{0,200}\"(?!\w)|(?<!\w)'[^'\n]{0,200}\s[^'\n]{0,200}'(?!\w)"),
        "<TEXT>",
    ),
    (re.compile(rf"\b{_MONTH}\.?\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?\b"), "<DATE>"),
    (re.compile(rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}\b(?:,?\s+\d{{4}})?"), "<DATE>"),
    (re.compile(rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b\d{{1,2}}/\d{{1,2}}(?:/\d{{2,4}})?\b|\b{_WEEKDAY}\b"), "<DATE>"),
    (re.compile(r"\b\d{1,2}:\d{2}(?:\s?[ap]\.?m\.?)?\b", re.I), "<TIME>"),
    (re.compile(r"\b(?=[\w-]*[A-Za-z])(?=[\w-]*\d)[A-Za-z0-9][\w-]*\b"), "<ID>"),
    (re.compile(r"[$€£]?\b\d+(?:[.,-]\d+)*\b"), "<NUM>"),
)
_CAPITALIZED = re.compile(r"(?<![<\w])[A-Z][A-Za-z]*(?:[-'’][A-Z][A-Za-z]*)*(?![\w>])")
_UNKNOWN_TOOL = re.compile(
    r"unknown tool|not a valid tool|no such tool|is not a tool|tool[^.\n]{0,60}(?:not found|does not exist)", re.I
)


def normalize_query(text: str) -> str:
    """``text`` with entity-like tokens replaced: ``<NAME>``, ``<DATE>``, ``<TIME>``, ``<ID>``, ``<NUM>``...

    Quoted text of several words becomes ``<TEXT>``. A capitalized word becomes ``<NAME>`` unless
    it starts a sentence or is ``I``; adjacent ``<NAME>`` tokens ("New York") merge into one.
    """
    for pattern, placeholder in _PLACEHOLDERS:
        text = pattern.sub(placeholder, text)

    def name(match: re.Match[str]) -> str:
        before = text[: match.start()].rstrip()
        if match.group() == "I" or not before or before[-1] in ".!?\n":
            return match.group()
        return "<NAME>"

    text = _CAPITALIZED.sub(name, text)
    return re.sub(r"<NAME>(?:\s+<NAME>)+", "<NAME>", " ".join(text.split()))


@dataclass(frozen=True, slots=True)
class _Call:
    """One tool call of a rollout with what the environment answered."""

    position: int
    call: ToolCall
    status: Literal["ok", "error", "unknown"]
    observation: str


def _acting(trajectory: Trajectory) -> list[Step]:
    """The agent's own turns (context-management calls, where recorded, are not actions)."""
    return [s for s in trajectory.steps if getattr(s, "kind", "action") == "action"]


def _calls(trajectory: Trajectory) -> list[_Call]:
    out: list[_Call] = []
    for step in _acting(trajectory):
        by_id = {o.call_id: o for o in step.observations if o.call_id}
        for k, call in enumerate(step.action.tool_calls):
            obs = by_id.get(call.id) if call.id else None
            if obs is None and not call.id and k < len(step.observations):
                obs = step.observations[k]
            status: Literal["ok", "error", "unknown"] = "unknown" if obs is None else "error" if obs.is_error else "ok"
            out.append(_Call(position=len(out), call=call, status=status, observation=obs.content if obs else ""))
    return out


def _mentions(text: str, value: Any, *, ignore_case: bool = True) -> bool:
    """Whether ``value`` (a string or number of 2+ characters) occurs in ``text`` as a whole token."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return False
    token = value.strip() if isinstance(value, str) else json.dumps(value)
    if len(token) < 2:
        return False
    flags = re.I if ignore_case else 0
    return re.search(rf"(?<![\w.]){re.escape(token)}(?!\w)", text, flags) is not None


def _answers_from(answer: str, observation: str) -> bool:
    """Whether a final answer repeats a tool result: all of it, or one of its tokens that holds a digit."""
    tokens = [w for w in re.findall(r"[\w][\w.:/-]*[\w]", answer) if any(ch.isdigit() for ch in w)]
    return any(_mentions(observation, x, ignore_case=False) for x in [answer, *tokens])


def _source(value: Any, query: str, earlier: Sequence[_Call]) -> str | None:
    """Where an argument value came from: ``"request"``, the name of the latest tool whose result held it, or None."""
    if _mentions(query, value):
        return "request"
    for c in reversed(earlier):
        if c.status == "ok" and _mentions(c.observation, value):
            return c.call.name
    return None


def _names(keys: Sequence[str]) -> str:
    return ", ".join(f"`{k}`" for k in keys)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list | tuple) else "object"


@dataclass(frozen=True, slots=True)
class _Lesson:
    kind: Kind
    when_to_use: str
    content: str


class RulesExtractor:
    """Deterministic experiences from tool errors, recoveries and successful tool sequences (no LLM).

    Args:
        success_threshold: A reward at or above it marks a successful rollout (workflows are
            learnt from those only).
        max_error_chars: Error messages quoted in a lesson are normalized and trimmed to this length.
        name: The extractor's name in answers and metadata.
    """

    def __init__(self, *, success_threshold: float = 1.0, max_error_chars: int = 120, name: str = "rules") -> None:
        self.success_threshold = success_threshold
        self.max_error_chars = max_error_chars
        self.name = name
        self.stats = ExtractorStats()

    def __repr__(self) -> str:
        return f"RulesExtractor(success_threshold={self.success_threshold})"

    def extract_task(
        self, trajectories: Sequence[Trajectory], *, max_experiences: int = 3, step: int | None = None
    ) -> TaskExtraction:
        """Experiences from the rollouts of one task, best first (the selection happens in ``select_experiences``)."""
        task_id = trajectories[0].task.id if trajectories else ""
        found: dict[_Lesson, list[Trajectory]] = {}
        worked = {c.call.name for t in trajectories for c in _calls(t) if c.status == "ok"}
        for t in trajectories:
            for lesson in self._error_lessons(t, worked):
                found.setdefault(lesson, []).append(t)
        workflow = self._workflow(trajectories)
        if workflow is not None:
            lesson, sources = workflow
            found[lesson] = sources
        experiences = []
        for lesson, sources in found.items():
            ids = tuple(dict.fromkeys(t.id for t in sources))
            mean = sum(t.reward or 0.0 for t in sources) / len(sources)
            score = mean if lesson.kind == "workflow" else 0.5 + 0.5 * mean
            experiences.append(Experience(
                id=experience_id(lesson.when_to_use, lesson.content), when_to_use=lesson.when_to_use,
                content=lesson.content, source_trajectory_ids=ids, source_task_ids=(task_id,), step=step,
                score=round(score, 6), metadata={"extractor": self.name, "kind": lesson.kind},
            ))  # fmt: skip
        experiences.sort(key=lambda e: (-e.score, _KIND_RANK[e.metadata["kind"]], e.id))
        answer = TaskExtraction(task_id=task_id, extractor=self.name, experiences=tuple(experiences))
        self.stats.add(answer)
        return answer

    async def aextract_task(
        self, trajectories: Sequence[Trajectory], *, max_experiences: int = 3, step: int | None = None
    ) -> TaskExtraction:
        """Async ``extract_task`` (it does no I/O)."""
        return self.extract_task(trajectories, max_experiences=max_experiences, step=step)

    # -- error lessons ----------------------------------------------------------------------
    def _error_text(self, observation: str) -> str:
        text = re.sub(r"^\s*error\s*:\s*", "", observation.strip(), flags=re.I)
        return trim(normalize_query(text), self.max_error_chars)

    def _error_lessons(self, trajectory: Trajectory, worked: set[str]) -> list[_Lesson]:
        """Lessons from the errors of one rollout; ``worked``: tools some rollout of the task called without error."""
        calls = _calls(trajectory)
        lessons: list[_Lesson] = []
        for i, failed in enumerate(calls):
            if failed.status != "error":
                continue
            name = failed.call.name
            fixed = next((c for c in calls[i + 1 :] if c.call.name == name and c.status == "ok"), None)
            if fixed is not None:
                difference = self._difference(failed, fixed, calls, trajectory.task.query)
                if difference:
                    lessons.append(_Lesson("tool_precondition", f"When calling `{name}`",
                                           f"When calling `{name}`: {difference}."))  # fmt: skip
                continue
            if name not in worked and _UNKNOWN_TOOL.search(failed.observation):
                recovery = next((c for c in calls[i + 1 :] if c.status == "ok"), None)
                advice = f"use `{recovery.call.name}` instead" if recovery else "do not call it"
                lessons.append(_Lesson("unknown_tool", f"When a `{name}` tool seems needed",
                                       f"There is no `{name}` tool (calling it is an error); {advice}."))  # fmt: skip
        return lessons

    def _difference(self, failed: _Call, fixed: _Call, calls: list[_Call], query: str) -> str:
        """What the accepted call did differently from the rejected one, as advice."""
        bad, good = failed.call.arguments, fixed.call.arguments
        if not isinstance(good, dict):
            return ""
        if not isinstance(bad, dict):
            return f"pass the arguments as a JSON object ({_names(sorted(good)) or 'empty'})"
        parts = []
        removed, added = sorted(set(bad) - set(good)), sorted(set(good) - set(bad))
        if removed and added:
            parts.append(f"use the argument name(s) {_names(added)}, not {_names(removed)}")
        elif added:
            parts.append(f"pass {_names(added)} (the call without it failed)")
        elif removed:
            parts.append(f"do not pass {_names(removed)}")
        shared = [k for k in bad if k in good]
        for key in shared:
            if _json_type(bad[key]) != _json_type(good[key]):
                parts.append(f"`{key}` must be a {_json_type(good[key])}, not a {_json_type(bad[key])}")
        if parts:
            return "; ".join(parts)
        error = self._error_text(failed.observation)
        changed = [k for k in shared if bad[k] != good[k]]
        for key in changed:
            source = _source(good[key], query, calls[: fixed.position])
            if source not in (None, "request") and source != _source(bad[key], query, calls[: failed.position]):
                parts.append(f"take `{key}` from the `{source}` result")
            else:
                parts.append(f"check the value of `{key}`")
        if parts:
            return f'{"; ".join(parts)} (a call with another value failed: "{error}")'
        between = [c.call.name for c in calls[failed.position + 1 : fixed.position] if c.status == "ok"]
        if between:
            return f'it failed ("{error}") until {_names(list(dict.fromkeys(between)))} had been called'
        return ""

    # -- workflows --------------------------------------------------------------------------
    def _workflow(self, trajectories: Sequence[Trajectory]) -> tuple[_Lesson, list[Trajectory]] | None:
        """The tool sequence most successful rollouts used, with the rollouts that used it."""
        by_content: dict[str, list[Trajectory]] = {}
        for t in trajectories:
            if t.reward is not None and t.reward >= self.success_threshold and (content := self._describe(t)):
                by_content.setdefault(content, []).append(t)
        if not by_content:
            return None
        content = min(by_content, key=lambda c: (-len(by_content[c]), c.count(", then "), c))
        when = normalize_query(trajectories[0].task.query)
        return _Lesson("workflow", when, content), by_content[content]

    @staticmethod
    def _describe(trajectory: Trajectory) -> str:
        """``Call `a` (`x` from the request), then `b` (`y` from the `a` result), then answer.``; ``""`` if idle."""
        calls = _calls(trajectory)
        query = trajectory.task.query
        parts = []
        for c in calls:
            if c.status == "error":
                continue
            args = []
            for key, value in c.call.arguments.items() if isinstance(c.call.arguments, dict) else ():
                source = _source(value, query, calls[: c.position])
                where = "" if source is None else " from the request" if source == "request" else (
                    f" from the `{source}` result")  # fmt: skip
                args.append(f"`{key}`{where}")
            parts.append(f"`{c.call.name}`" + (f" ({', '.join(args)})" if args else ""))
        steps = _acting(trajectory)
        last = steps[-1] if steps else None
        answer = (last.action.content or "").strip().rstrip(".!") if last and not last.action.tool_calls else ""
        if not parts:
            return "Answer directly, without calling a tool." if answer else ""
        ending = ""
        if answer:
            holder = next(
                (c for c in reversed(calls) if c.status == "ok" and _answers_from(answer, c.observation)), None
            )
            ending = f", then answer from the `{holder.call.name}` result" if holder else ", then answer"
        return f"Call {', then '.join(parts)}{ending}."

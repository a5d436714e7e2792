"""Read GOOD/BAD labels out of a judge's free-text answer (the step renderers live in ``rendering.py``).

``render_*`` and ``trim`` are re-exported here (their old path); questioning and experience use them too,
so they live in the core.

Steps are numbered from 1 in the prompt (``Step 1`` is ``trajectory.steps[0]``). ``parse_labels``
accepts what judges actually write: ``Step 3: GOOD - reason``, ``Step 3 : bad (reason)``,
``**Step 3**: **GOOD** — reason``, ``- Step 3 - BAD: reason``, ``3. GOOD - reason``, a markdown
table row, or a JSON list/object (fenced or not), with any chatter before or after and
``<think>`` blocks dropped. When a step is labelled twice, the last label wins (judges often
restate their verdict after reasoning).

Example:
    >>> parse_labels("Sure!\\n**Step 1**: GOOD - found it\\nStep 2 : bad (wrong id)\\nHope this helps.", 2)
    {1: ('GOOD', 'found it'), 2: ('BAD', 'wrong id')}
"""

from __future__ import annotations

import json
import re
from typing import Any

from langgraph_evolver._llm import strip_think
from langgraph_evolver.rendering import render_action, render_call, render_observation, render_steps, trim

from .core import Label

__all__ = ["parse_labels", "render_action", "render_call", "render_observation", "render_steps", "trim"]

MAX_REASON_CHARS = 200

_SEP = r"[\s*_`:.)\]=\-–—]*"
_LINE_PATTERNS = (
    # Step 3: GOOD - reason | **Step 3**: **bad** (reason) | - Step #3 - [GOOD]: reason
    re.compile(rf"^[\s>\-*+#|_`]*step\s*#?\s*(\d+){_SEP}\[?\s*(GOOD|BAD)\b[\s*_`\]]*(.*)$", re.I),
    # 3. GOOD - reason | 3: BAD (reason)
    re.compile(r"^[\s>\-*+_`]*(\d+)[*_`]*\s*[:.)][\s*_`]*(GOOD|BAD)\b[\s*_`]*(.*)$", re.I),
    # | 3 | GOOD | reason |
    re.compile(r"^\s*\|\s*(?:step\s*)?(\d+)\s*\|\s*\**\s*(GOOD|BAD)\s*\**\s*\|\s*(.*?)\s*\|?\s*$", re.I),
)
_JSON_BLOCK = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)


def _label_of(value: Any) -> Label | None:
    text = str(value).strip().strip("*`[]").upper()
    if text in ("GOOD", "BAD"):
        return text  # type: ignore[return-value]
    if text in ("+1", "1", "TRUE"):
        return "GOOD"
    if text in ("-1", "0", "FALSE"):
        return "BAD"
    return None


def _clean_reason(text: str) -> str:
    text = text.strip().strip("*_`|").strip()
    text = re.sub(r"^[\s:\-–—,.=]+", "", text).strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    elif text.startswith("(") and ")" not in text:
        text = text[1:]
    return trim(text.strip().strip("*_`").strip(), MAX_REASON_CHARS)


def _from_json(data: Any, out: dict[int, tuple[Label, str]]) -> None:
    if isinstance(data, dict):
        for key in ("labels", "steps", "verdicts", "attribution"):
            if isinstance(data.get(key), list | dict):
                _from_json(data[key], out)
                return
        for key, value in data.items():  # {"1": "GOOD"} or {"Step 1": {"label": ..., "reason": ...}}
            number = re.search(r"\d+", str(key))
            if number is None:
                continue
            if isinstance(value, dict):
                _from_json([{"step": int(number.group()), **value}], out)
            elif (label := _label_of(value)) is not None:
                out[int(number.group())] = (label, "")
        return
    if not isinstance(data, list):
        return
    for item in data:
        if not isinstance(item, dict):
            continue
        number = next((item[k] for k in ("step", "index", "number", "id") if k in item), None)
        label = next((_label_of(item[k]) for k in ("label", "verdict", "judgement", "judgment") if k in item), None)
        try:
            n = int(re.sub(r"\D", "", str(number)))
        except ValueError:
            continue
        if label is not None:
            reason = next((str(item[k]) for k in ("reason", "explanation", "why", "rationale") if k in item), "")
            out[n] = (label, _clean_reason(reason))


def _json_candidates(text: str) -> list[str]:
    found = [m.group(1) for m in _JSON_BLOCK.finditer(text)]
    for opener, closer in (("[", "]"), ("{", "}")):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            found.append(text[start : end + 1])
    return found


def parse_labels(text: str, num_steps: int) -> dict[int, tuple[Label, str]]:
    """``{step number (from 1): (label, reason)}`` for every step ``text`` labels; others are absent.

    Numbers outside ``1..num_steps`` are ignored. Nothing raises: garbage gives ``{}``.
    """
    text = strip_think(text)
    out: dict[int, tuple[Label, str]] = {}
    for candidate in _json_candidates(text):
        try:
            _from_json(json.loads(candidate), out)
        except (json.JSONDecodeError, TypeError):
            continue
        if out:
            break
    for line in text.splitlines():
        for pattern in _LINE_PATTERNS:
            match = pattern.match(line)
            if match:
                out[int(match.group(1))] = (match.group(2).upper(), _clean_reason(match.group(3)))  # type: ignore[assignment]
                break
    return {n: v for n, v in sorted(out.items()) if 1 <= n <= num_steps}

"""A self-contained HTML report of step attribution labels, for a person to read.

``write_attribution_report`` renders trajectories into one HTML file (inline CSS, no scripts, no
network): a header of summary figures, then one collapsible block per trajectory with its query
and a table of steps (action, trimmed observations, the judge's GOOD/BAD label and reason).

Failed trajectories (reward below 1.0, or no reward) come first and are open; successful ones
follow, collapsed. Input order is kept within each part, so rollouts of one group stay together.
When there are more than ``max_trajectories``, the summary still covers all of them but only
the first ``max_trajectories`` of that order are rendered.

    python -m langgraph_evolver.attribution.report runs/x/trajectories.jsonl -o report.html
    python -m langgraph_evolver.attribution.report trajectories.jsonl --metrics summary.json
"""

from __future__ import annotations

import argparse
import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph_evolver.types import Step, ToolCall, Trajectory, read_jsonl

__all__ = ["main", "make_parser", "write_attribution_report"]

_SUCCESS_REWARD = 1.0
_MAX_TEXT_CHARS = 2000
"""Cap for texts that are not observations (queries, reasons, errors, metric values)."""

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.5em;margin:.2em 0 .6em}
table{border-collapse:collapse}
td,th{border:1px solid #ddd;padding:3px 7px;vertical-align:top;text-align:left}
th{background:#f4f4f4}
.figures td:last-child,.metrics td:last-child{text-align:right;font-variant-numeric:tabular-nums}
.header{display:flex;gap:2em;flex-wrap:wrap;align-items:flex-start;margin-bottom:1em}
.note{color:#666;font-size:.9em}
details{border:1px solid #ccc;border-radius:4px;margin:.4em 0;padding:.2em .6em}
details.fail{border-left:4px solid #c62828}
details.success{border-left:4px solid #2e7d32}
summary{cursor:pointer;padding:.2em 0}
summary code{font-size:.95em}
.badge{display:inline-block;border-radius:3px;padding:0 6px;color:#fff;font-size:.85em;font-weight:600}
.badge.success{background:#2e7d32}.badge.fail{background:#c62828}.badge.fallback{background:#888}
.strip{display:inline-block;margin-left:.5em;vertical-align:middle}
.strip i{display:inline-block;width:9px;height:12px;margin-right:1px;background:#bbb}
.strip i.good{background:#43a047}.strip i.bad{background:#e53935}
.query{background:#f8f8f8;padding:.4em .6em;margin:.4em 0;white-space:pre-wrap}
table.steps{width:100%;margin:.4em 0 .6em}
table.steps td.idx{width:2em;text-align:right}
table.steps td.lbl{width:5em;font-weight:700;text-align:center}
tr.step.good td.lbl{background:#c8e6c9;color:#1b5e20}
tr.step.bad td.lbl{background:#ffcdd2;color:#b71c1c}
tr.step.none td.lbl{background:#eee;color:#777}
pre{margin:0;white-space:pre-wrap;word-break:break-word;font:12px/1.35 ui-monospace,monospace}
.obs{margin-bottom:3px}
.obs.error pre,.err{background:#fff0f0;color:#b71c1c}
.answer{font-weight:600}
.trim{color:#999}
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Counts:
    """GOOD/BAD step counts of one trajectory, by its labels matched to its steps."""

    good: int
    bad: int
    labels: dict[int, dict[str, Any]]
    """Step index → the label dict for it (first one wins if the judge repeated a step)."""


def _is_success(t: Trajectory) -> bool:
    return t.reward is not None and t.reward >= _SUCCESS_REWARD


def _label_of(label: Mapping[str, Any] | None) -> str:
    """``"good"``, ``"bad"`` or ``"none"``; the CSS class of a step's label."""
    value = str((label or {}).get("label", "")).strip().upper()
    return {"GOOD": "good", "BAD": "bad"}.get(value, "none")


def _counts(t: Trajectory) -> _Counts:
    labels: dict[int, dict[str, Any]] = {}
    for label in t.labels or ():
        try:
            labels.setdefault(int(label.get("step", -1)), dict(label))
        except (TypeError, ValueError):
            continue  # a malformed label: shown nowhere, counted nowhere
    kinds = [_label_of(labels.get(s.index)) for s in t.steps]
    return _Counts(good=kinds.count("good"), bad=kinds.count("bad"), labels=labels)


def _trim(text: str, limit: int) -> str:
    """Escaped ``text``, cut to ``limit`` characters with a note of how much was left out."""
    if limit > 0 and len(text) > limit:
        return f'{html.escape(text[:limit])}<span class="trim">… (+{len(text) - limit} chars)</span>'
    return html.escape(text)


def _format_call(call: ToolCall) -> str:
    """``name(arg=value, ...)``, values as JSON; undecoded arguments are shown raw."""
    if isinstance(call.arguments, dict):
        args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in call.arguments.items())
    else:
        args = f"<undecoded> {call.arguments}"
    return f"{call.name}({args})"


def _share(good: int, bad: int) -> str:
    return f"{good / (good + bad):.1%} ({good}/{good + bad})" if good + bad else "—"


def _reward(t: Trajectory) -> str:
    return "—" if t.reward is None else f"{t.reward:.3g}"


def _flatten(metrics: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested dicts become dotted keys, so a ``summary.json`` fits in a two-column table."""
    rows: list[tuple[str, Any]] = []
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            rows.extend(_flatten(value, prefix=f"{name}."))
        else:
            rows.append((name, value))
    return rows


def _metric_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _table(rows: Sequence[tuple[str, str]], css_class: str) -> str:
    body = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="{css_class}">{body}</table>'


def _render_header(trajectories: Sequence[Trajectory], counts: Sequence[_Counts], metrics: Mapping | None) -> str:
    good = {True: 0, False: 0}  # keyed by "trajectory succeeded"
    bad = {True: 0, False: 0}
    for t, c in zip(trajectories, counts, strict=True):
        good[_is_success(t)] += c.good
        bad[_is_success(t)] += c.bad
    n_success = sum(_is_success(t) for t in trajectories)
    labelled = sum(good.values()) + sum(bad.values())
    figures = [
        ("trajectories", str(len(trajectories))),
        ("successful (reward ≥ 1.0)", str(n_success)),
        ("failed", str(len(trajectories) - n_success)),
        ("steps", str(sum(len(t.steps) for t in trajectories))),
        ("labelled steps", f"{labelled} (GOOD {sum(good.values())}, BAD {sum(bad.values())})"),
        ("GOOD share, successful", f'<span id="good-share-success">{_share(good[True], bad[True])}</span>'),
        ("GOOD share, failed", f'<span id="good-share-failed">{_share(good[False], bad[False])}</span>'),
        ("without labels (judge fallbacks)", f'<span id="fallbacks">{sum(not t.labels for t in trajectories)}</span>'),
    ]
    parts = [f"<div><h3>Summary</h3>{_table(figures, 'figures')}</div>"]
    if metrics:
        rows = [(html.escape(k), _trim(_metric_value(v), 200)) for k, v in _flatten(metrics)]
        parts.append(f"<div><h3>Metrics</h3>{_table(rows, 'metrics')}</div>")
    note = (
        '<p class="note">GOOD share = GOOD / (GOOD + BAD) over labelled steps; trajectories without labels '
        "are left out of it. Failed trajectories come first, open.</p>"
    )
    return f'<div class="header">{"".join(parts)}</div>{note}'


def _render_step(step: Step, label: Mapping[str, Any] | None, max_obs: int) -> str:
    action = [f"<pre>{_trim(_format_call(c), max_obs)}</pre>" for c in step.action.tool_calls]
    if step.action.content:
        # Text with no calls is the final answer, unless the environment answered it (an unparsed call).
        is_answer = not (step.action.tool_calls or step.observations or step.error)
        css, prefix = (' class="answer"', "answer: ") if is_answer else ("", "")
        action.append(f"<pre{css}>{prefix}{_trim(step.action.content, max_obs)}</pre>")
    if not action:
        action.append('<pre class="trim">(empty turn)</pre>')
    if step.error:
        action.append(f'<pre class="err">error: {_trim(step.error, _MAX_TEXT_CHARS)}</pre>')
    observations = "".join(
        f'<div class="obs{" error" if o.is_error else ""}"><pre>{html.escape(o.name) + " → " if o.name else ""}'
        f"{_trim(o.content, max_obs)}</pre></div>"
        for o in step.observations
    )
    kind = _label_of(label)
    shown = str((label or {}).get("label", "")) or "—"
    reason = _trim(str((label or {}).get("reason", "")), _MAX_TEXT_CHARS)
    return (
        f'<tr class="step {kind}"><td class="idx">{step.index}</td><td>{"".join(action)}</td>'
        f'<td>{observations}</td><td class="lbl">{html.escape(shown)}</td><td>{reason}</td></tr>'
    )


def _render_trajectory(t: Trajectory, counts: _Counts, max_obs: int) -> str:
    ok = _is_success(t)
    status = "success" if ok else "fail"
    badges = f'<span class="badge {status}">{"SUCCESS" if ok else "FAIL"}</span>'
    if not t.labels:
        badges += ' <span class="badge fallback">NO LABELS</span>'
    strip = "".join(f'<i class="{_label_of(counts.labels.get(s.index))}"></i>' for s in t.steps)
    summary = (
        f"<summary>{badges} <code>{html.escape(t.task.id)}</code> group <code>{html.escape(t.group_id or '—')}"
        f"</code> · reward {_reward(t)} · {len(t.steps)} steps · GOOD {counts.good} · BAD {counts.bad}"
        f'<span class="strip">{strip}</span></summary>'
    )
    meta = [f"trajectory <code>{html.escape(t.id)}</code>", f"finish: {html.escape(t.finish_reason)}"]
    if t.task.metadata.get("answer") is not None:
        meta.append(f"expected answer: <code>{_trim(str(t.task.metadata['answer']), 200)}</code>")
    errors = "".join(f'<pre class="err">{_trim(e, _MAX_TEXT_CHARS)}</pre>' for e in t.errors)
    rows = "".join(_render_step(s, counts.labels.get(s.index), max_obs) for s in t.steps)
    table = (
        '<table class="steps"><tr><th>#</th><th>action</th><th>observations</th><th>label</th><th>reason</th></tr>'
        f"{rows}</table>"
        if t.steps
        else '<p class="note">(no steps)</p>'
    )
    return (
        f'<details class="trajectory {status}"{"" if ok else " open"}>{summary}'
        f'<div class="query">{_trim(t.task.query, _MAX_TEXT_CHARS)}</div>'
        f'<p class="note">{" · ".join(meta)}</p>{errors}{table}</details>'
    )


def write_attribution_report(
    trajectories: Sequence[Trajectory],
    path: str | Path,
    *,
    title: str = "Step attribution",
    max_trajectories: int = 200,
    max_observation_chars: int = 600,
    metrics: dict | None = None,
) -> Path:
    """Write a self-contained HTML page showing why each step was labelled GOOD or BAD.

    Args:
        trajectories: Trajectories, labelled (``Trajectory.labels``) or not; unlabelled ones count
            as judge fallbacks.
        path: The HTML file to write (parent folders are created).
        title: Page title and heading.
        max_trajectories: Render at most this many (failed first); summary figures cover all.
        max_observation_chars: Cut each observation, tool call and answer to this many characters.
        metrics: Extra figures shown as a table in the header; nested dicts become dotted keys.

    Returns:
        The path written.

    Example:
        >>> write_attribution_report(labelled, "runs/x/attribution.html", metrics={"judge": "gpt-4.1-mini"})
    """
    trajectories = list(trajectories)
    counts = [_counts(t) for t in trajectories]
    # Failed first: the labels worth reading are the ones that explain a failure.
    order = sorted(range(len(trajectories)), key=lambda i: _is_success(trajectories[i]))
    shown = order[: max(max_trajectories, 0)]
    body = "".join(_render_trajectory(trajectories[i], counts[i], max_observation_chars) for i in shown)
    if len(shown) < len(trajectories):
        body += f'<p class="note">Showing {len(shown)} of {len(trajectories)} trajectories (max_trajectories).</p>'
    page = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"
        f"{_render_header(trajectories, counts, metrics)}<h2>Trajectories</h2>\n{body}</body></html>\n"
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trajectories", help="a trajectories.jsonl file (labelled or not)")
    p.add_argument("-o", "--output", help="HTML file to write (default: the input with .html)")
    p.add_argument("--title", default="Step attribution")
    p.add_argument("--max-trajectories", type=int, default=200)
    p.add_argument("--max-observation-chars", type=int, default=600)
    p.add_argument("--metrics", help="a JSON file of figures to show in the header (e.g. summary.json)")
    return p


def main(argv: Sequence[str] | None = None) -> Path:
    args = make_parser().parse_args(argv)
    trajectories = list(read_jsonl(args.trajectories, Trajectory))
    metrics = json.loads(Path(args.metrics).read_text(encoding="utf-8")) if args.metrics else None
    out = write_attribution_report(
        trajectories,
        args.output or Path(args.trajectories).with_suffix(".html"),
        title=args.title,
        max_trajectories=args.max_trajectories,
        max_observation_chars=args.max_observation_chars,
        metrics=metrics,
    )
    print(out)
    return out


if __name__ == "__main__":
    main()

"""What a person reads about a loop: one JSON line per cycle, the lineage table, ``evolve.png``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

__all__ = ["cycle_line", "lineage_text", "plot_lineage"]


def cycle_line(record: dict[str, Any], production: dict[str, Any] | None) -> dict[str, Any]:
    """The one JSON line a finished cycle prints (and ``status --json`` lists)."""
    gate = record.get("gate") or {}
    data = record.get("data") or {}
    evaluation = record.get("evaluation") or {}
    line = {
        "cycle": record["cycle"],
        "incumbent": record.get("incumbent"),
        "paired_gain": gate.get("paired_gain"),
        "lower_bound": gate.get("lower_bound"),
        "upper_bound": gate.get("upper_bound"),
        "confidence": gate.get("confidence"),
        "promoted": bool(record.get("promoted")),
        "reason": record.get("reason"),
        "candidate_avg": gate.get("candidate_mean"),
        "incumbent_avg": gate.get("incumbent_mean"),
        "heldout_tasks": gate.get("tasks"),
        "tasks_ingested": data.get("tasks_ingested", 0),
        "tasks_synthesized": data.get("tasks_synthesized", 0),
        "train_steps": (record.get("train") or {}).get("steps"),
        "production": (production or {}).get("version"),
        "wall_s": round(record.get("finished", time.time()) - record.get("started", time.time()), 1),
    }
    test = record.get("test") or {}
    if test:  # production's figure after the cycle, apart from the gate (and the promoted candidate's gain there)
        line["test_avg"] = test.get("candidate_avg" if record.get("promoted") else "incumbent_avg")
        if record.get("promoted"):
            line["test_gain"] = test.get("gain")
    if record.get("error"):
        line["error"] = record["error"]
    if evaluation:
        line["failed_share"] = {who: e.get("failed_share") for who, e in evaluation.items()}
    return line


def _fmt(value: Any, spec: str = "+.3f") -> str:
    return "-" if value is None else format(value, spec)


def lineage_text(state: Any) -> str:
    """The ``status`` table: each cycle's data, steps, paired gain with its interval, promoted or not."""
    data = state.data
    rows = [f"production: {data['production']['version']} ({data['production']['adapter']}) serving "
            f"{data.get('served_name')!r}" if data.get("production") else "production: none yet"]  # fmt: skip
    if data.get("history"):
        rows.append("before it: " + " <- ".join(h["version"] for h in reversed(data["history"])))
    rows.append("")
    rows.append(f"{'cycle':>5}  {'phase':8} {'ingested':>8} {'synth':>5} {'steps':>5}  {'incumbent':>9} "
                f"{'cand.':>6} {'inc.':>6} {'gain':>7}  {'interval':17} promoted")  # fmt: skip
    for c in state.cycles:
        gate, d = c.get("gate") or {}, c.get("data") or {}
        interval = f"[{_fmt(gate.get('lower_bound'))}, {_fmt(gate.get('upper_bound'))}]" if gate else "-"
        promoted = "yes" if c.get("promoted") else ("no" if c["phase"] == "done" else "…")
        rows.append(f"{c['cycle']:>5}  {c['phase']:8} {d.get('tasks_ingested', 0):>8} "
                    f"{d.get('tasks_synthesized', 0):>5} "
                    f"{(c.get('train') or {}).get('steps', '-')!s:>5}  {c.get('incumbent', '-'):>9} "
                    f"{_fmt(gate.get('candidate_mean'), '.3f'):>6} {_fmt(gate.get('incumbent_mean'), '.3f'):>6} "
                    f"{_fmt(gate.get('paired_gain')):>7}  {interval:17} {promoted}"
                    + (f"  ({c['reason']})" if c.get("reason") and c["phase"] == "done" else ""))  # fmt: skip
    if data.get("events"):
        rows.append("")
        rows += [f"{e['time']}  {e['action']:8} {e.get('from') or '-'} -> {e['to']}" for e in data["events"]]
    return "\n".join(rows)


def plot_lineage(state: Any, path: Path) -> Path | None:
    """``evolve.png``: per cycle the incumbent's and the candidate's held-out avg@k, and the paired gain with
    its bootstrap interval (filled: promoted). None when matplotlib is missing or no cycle was gated."""
    gated = [c for c in state.cycles if c.get("gate")]
    if not gated:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    xs = [c["cycle"] for c in gated]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax1.plot(xs, [c["gate"]["incumbent_mean"] for c in gated], "o-", color="0.4", label="incumbent")
    ax1.plot(xs, [c["gate"]["candidate_mean"] for c in gated], "s--", color="C0", label="candidate")
    ax1.set_xlabel("cycle")
    ax1.set_ylabel("held-out mean reward (paired tasks)")
    ax1.legend()
    for c in gated:
        g = c["gate"]
        color = "C2" if c.get("promoted") else "C3"
        ax2.errorbar([c["cycle"]], [g["paired_gain"]], yerr=[[g["paired_gain"] - g["lower_bound"]],
                     [max(0.0, g["upper_bound"] - g["paired_gain"])]], fmt="o", color=color,
                     mfc=color if c.get("promoted") else "white", capsize=4)  # fmt: skip
    ax2.axhline(gated[-1]["gate"]["min_gain"], color="0.5", lw=0.8, ls=":", label="min_gain")
    ax2.set_xlabel("cycle")
    conf = gated[-1]["gate"]["confidence"]
    ax2.set_ylabel(f"paired gain, {conf:.0%} one-sided bounds")
    ax2.set_title("filled: promoted", fontsize=9)
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.set_xticks(xs)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

"""Where an adapt run's episodes go wrong, read from its recorded rollouts: no model is run.

For each evaluation an ``adapt`` run wrote (``7-gate/*.jsonl``: validation;
``8-heldout/*.jsonl``: held-out; ``6-gate`` and ``7-heldout`` before session 64), and
for any other rollout files given, per side: the mean reward, ``first_call_right`` (the episode's first call names
the tool the reference begins with), ``copied`` (of the first calls' text arguments, the share whose value the
request holds, case and spacing folded: a model that copies values from training instead of the request scores
low), ``spaced`` (text arguments anywhere with a space before or after the value: a bare word copied with its
token's space), ``answered_after_error``, and the most common (reference's first tool, model's first tool) pairs.

    python benchmarks/adapt_diagnose.py runs/r56/adapt-sheets

Ends with one JSON line: ``{"files": {name: figures}}``. The held-out files were already read by the run's last
phase; this reads what that phase recorded, to explain a figure, never to choose anything.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from langgraph_evolver.reference_scoring import folded  # noqa: E402
from langgraph_evolver.types import Trajectory, read_jsonl  # noqa: E402


def replay_arguments(p: argparse.ArgumentParser, out_help: str) -> None:
    """The arguments every A/B on a finished adapt run takes: the run, where its output goes, the run's env,
    model, k and seed."""
    p.add_argument("--run", required=True, help="a finished adapt run's --output_dir")
    p.add_argument("--out", required=True, help=out_help)
    p.add_argument("--env", required=True, help="the run's --env")
    p.add_argument("--model_path", required=True, help="the run's --model_path")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--seed", type=int, default=1234, help="the run's --seed")


def _calls(t: Trajectory) -> list:
    return [c for step in t.steps for c in step.action.tool_calls]


def answered_after_error(trajectories: Sequence[Trajectory]) -> float:
    """The share of episodes whose last tool result was an error and that then ended with an answer."""
    ended = 0
    for t in trajectories:
        observations = [o for step in t.steps for o in step.observations]
        ended += bool(observations and observations[-1].is_error and t.finish_reason == "final_answer")
    return round(ended / max(len(trajectories), 1), 3)


def first_call_right(trajectories: Sequence[Trajectory]) -> float:
    """The share of episodes whose first call names the tool the task's reference begins with."""
    right = 0
    for t in trajectories:
        calls, reference = _calls(t), t.task.reference_solution or ()
        right += bool(calls and reference and calls[0].name == reference[0].name)
    return round(right / max(len(trajectories), 1), 3)


def diagnose(trajectories: Sequence[Trajectory], *, top: int = 6) -> dict:
    """The figures of the module docstring for one side's episodes."""
    texts = copied = spaced = every = 0
    pairs: Counter[str] = Counter()
    for t in trajectories:
        calls, reference = _calls(t), t.task.reference_solution or ()
        pairs[f"{reference[0].name if reference else None} -> {calls[0].name if calls else None}"] += 1
        request = folded(t.task.query)
        for i, call in enumerate(calls):
            for value in (call.arguments if isinstance(call.arguments, dict) else {}).values():
                if not isinstance(value, str) or not value.strip():
                    continue
                every += 1
                spaced += value != value.strip()
                if i == 0:
                    texts += 1
                    copied += folded(value) in request
    n = max(len(trajectories), 1)
    return {
        "episodes": len(trajectories),
        "reward": round(sum(t.reward or 0.0 for t in trajectories) / n, 3),
        "first_call_right": first_call_right(trajectories),
        "copied": round(copied / texts, 3) if texts else None,
        "spaced": round(spaced / every, 3) if every else None,
        "answered_after_error": answered_after_error(trajectories),
        "first_tools": dict(pairs.most_common(top)),
    }


def run_files(run: Path) -> list[Path]:
    """An adapt run's evaluation files: the gate's (validation) and the held-out phase's (``adapt.phase_dir``: a
    run from before the validate phase has them in ``6-gate``, ``7-heldout``)."""
    from trainers.evolve.adapt import phase_dir

    return [f for phase in ("gate", "heldout") for f in sorted(phase_dir(run, phase).glob("*.jsonl"))]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="+", type=Path, help="adapt --output_dir folders or rollout .jsonl files")
    args = p.parse_args(argv)
    files = [f for path in args.paths for f in (run_files(path) if path.is_dir() else [path])]
    if not files:
        p.error(f"no rollouts under {', '.join(map(str, args.paths))} (an adapt run writes 7-gate/ and 8-heldout/)")
    out = {}
    for f in files:
        phase = f.parent.name.endswith(("-gate", "-heldout"))
        name = f"{f.parent.parent.name}/{f.parent.name}/{f.name}" if phase else str(f)
        figures = diagnose(list(read_jsonl(f, Trajectory)))
        out[name] = figures
        print(f"{name:40s} reward {figures['reward']:.3f}  first call right {figures['first_call_right']:.3f}  "
              f"copied {figures['copied']}  spaced {figures['spaced']}", file=sys.stderr)  # fmt: skip
    line = {"files": out}
    print(json.dumps(line))
    return line


if __name__ == "__main__":
    main()

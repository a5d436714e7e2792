"""``python -m trainers.evolve adapt``: one command from a new environment to a better adapter.

    python -m trainers.evolve adapt --env "mcp:python my_server.py" --minutes 60 --output_dir runs/adapt \\
        [--agent my_pkg.agent:graph] [--heldout my_tasks.jsonl] [--model_path checkpoints/smollm2-warm-doc]

Phases, each writing its output and a ``done.json`` into ``output_dir/<n>-<phase>/`` (a rerun skips the done
ones, resumes a partly done GRPO from its last checkpoint and charges a killed phase's seconds to it):

1. ``synthesize``: self-questioning explores the environment and keeps verified tasks (their references replay);
2. ``split``: the tasks cut into sft / rl / validation parts, disjoint by task and by (query, calls) signature;
3. ``rollouts``: the starting model tries the sft part once per task (its successes are what it supervises on;
   it stops after ``PROBE`` tasks if it solved none);
4. ``supervise``: a LoRA adapter on the model's own successful rollouts, the explorer's references otherwise
   (with ``--mistake_chats``, each task once more begun with a mistake and the server's error; with
   ``--swap_chats N``, 3 by default, up to N first calls with the request's values swapped);
5. ``validate``: the starting model and the supervised adapter on the validation part, ``--k`` samples a task
   with the same seeds (the gate reads them back; timed here, the GRPO adapter's evaluation is predicted from
   them);
6. ``grpo``: ``trainers.grpo`` from that adapter on the rl part only, for the time ``--minutes`` leaves;
7. ``gate``: the GRPO adapter on the validation part with the same seeds; the better adapter there is the
   candidate (a tie keeps the supervised one: GRPO from an adapter that solves few tasks can drift), gated
   against the starting model by the evolve loop's paired gate (``gate.decide_paired``);
8. ``heldout`` (only with ``--heldout``): before and after on the user's tasks, paired and seeded. The file is
   opened in this phase and nowhere else: never trained on, never used to choose anything.

``--minutes`` bounds the phases before the held-out one (``adapt_s`` in the JSON line): synthesize and supervise
stop at their ``SHARES``, the own rollouts stop after a probe that solves nothing (``PROBE``), and GRPO gets what
is left once the gate's time, predicted from the seconds an episode of the supervised adapter took in the
validate phase, is set aside (too little left: no GRPO, the supervised adapter is the candidate). The held-out
evaluation is the user's yardstick and comes on top (a killed one reads back its starting model's rollouts
when they were all written). Then one JSON line (``heldout_before``, ``heldout_after``, ``paired_gain``,
``lower_bound``, ``tasks_synthesized``, ``sft_examples``, ``grpo_steps``, ``adapt_s``, ``wall_s``, ...).
Every phase's policy server holds tool calls to the environment's tools (``--strict_tools``, on by default:
docs/policy-endpoint.md); serve the adapter with ``--strict-tools`` too, or send ``"strict": true`` functions.
``--promote NAME --policy_base_url URL`` points NAME at the adapter when the gate passed, as the evolve loop
promotes (``ProductionEndpoint.serve``). docs/your-domain.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langgraph_evolver.errors import ConfigError, EvolverError

from .adapt_data import played_before, replayed
from .adapt_eval import EvalServers, eval_servers
from .adapt_grpo import grpo_phase

__all__ = ["PHASES", "SHARES", "Run", "main", "make_parser", "phase_dir", "supervise_phase", "tasks_file"]

PHASES = ("synthesize", "split", "rollouts", "supervise", "validate", "grpo", "gate", "heldout")
SHARES = {"synthesize": 0.2, "supervise": 0.2}
"""Shares of ``--minutes`` that stop these phases; GRPO gets the rest less the gate's predicted time
(``Run.budget_s``), the rollouts and evaluations are sized by their tasks."""

PROBE = 16
"""The starting model's own rollouts stop after this many sft tasks when it solved none of them: four runs on
the library and sheets servers solved 1 of 159 (260-293 s each), time the GRPO phase can use."""

LORA = {"lora_r": 16, "lora_alpha": 32,
        "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                "down_proj"]}  # fmt: skip


def make_parser() -> argparse.ArgumentParser:
    shares = ", ".join(f"{k} {v:.0%}" for k, v in SHARES.items() if v).replace("%", "%%")  # argparse formats help
    p = argparse.ArgumentParser(prog="python -m trainers.evolve adapt", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--env", required=True, help="the environment: 'mcp:python server.py', a name or 'module:factory'")
    p.add_argument("--agent", default=None, help="your agent, 'module:object' (default: the reference agent)")
    p.add_argument("--heldout", default=None,
                   help="your own tasks (JSONL: docs/mcp.md's format or Task rows), evaluated before and "
                   "after only (never trained on)")  # fmt: skip
    p.add_argument("--minutes", type=float, required=True,
                   help=f"the time budget of every phase but the held-out evaluation: {shares} at most, the "
                   "rollouts and the validate phase sized by their tasks, GRPO the rest less the gate's predicted "
                   "time (the validation tasks times --k times the seconds an episode of the supervised adapter "
                   "took in the validate phase)")  # fmt: skip
    p.add_argument("--output_dir", required=True, help="where each phase writes (rerun the command to resume)")
    p.add_argument("--model_path", default="checkpoints/smollm2-warm-doc",
                   help="the starting model: a checkpoint, an adapter directory or a trainers.models name")  # fmt: skip
    p.add_argument("--tasks", type=int, default=100, help="verified tasks to synthesize (40 before session 67)")
    p.add_argument("--split", default="0.6,0.2,0.2", help="sft,rl,validation shares of the synthesized tasks "
                   "(0.4,0.4,0.2 before session 57: docs/your-domain.md)")  # fmt: skip
    p.add_argument("--max_explorations", type=int, default=None, help="self-questioning's exploration budget")
    p.add_argument("--n_depth", type=int, default=17, help="depth-phase calls per exploration")
    p.add_argument("--k", type=int, default=4, help="paired samples per task in the gate and the held-out evaluation")
    p.add_argument("--seed", type=int, default=1234, help="the paired sampling seed (and the split's)")
    p.add_argument("--num_generations", type=int, default=4, help="GRPO group size")
    p.add_argument("--batch_size", type=int, default=8, help="GRPO rollouts per step")
    p.add_argument("--grpo_steps", type=int, default=200, help="most GRPO steps (the time left stops it earlier)")
    p.add_argument("--grpo_lr", type=float, default=1e-4, help="GRPO's learning rate (constant)")
    p.add_argument("--sft_steps", type=int, default=None, help="most supervised steps (default: its time share)")
    p.add_argument("--mistake_chats", action="store_true",
                   help="also supervise each sft task begun with a mistake of its first call and the server's error "
                   "(off: on library it did not help, docs/your-domain.md)")  # fmt: skip
    p.add_argument(
        "--invented_chats",
        action="store_true",
        help="also supervise each sft task that names records begun with its first call after the lookups "
        "made with an id no one gave, and the server's error (off until measured; docs/your-domain.md)",
    )
    p.add_argument("--swap_chats", type=int, default=3,
                   help="also supervise up to N copies of each sft task's first call with the request's values "
                   "swapped for others the same argument took (0: off; docs/your-domain.md has the A/B)")  # fmt: skip
    _switch(p, "strict_tools",
            on="the policy server holds tool calls to the server's tools (names, argument keys, required "
            "arguments) in every phase; serve the adapter the same way (docs/your-domain.md has the A/B: sheets "
            "validation 0.710 -> 0.736, no call refused for its schema)",
            off="sample tool calls unconstrained (the runs before session 58)")  # fmt: skip
    p.add_argument("--max_turns", type=int, default=8)
    _switch(p, "repeat_guard",
            on="the reference agent adds a note to a repeated call's result when it is the same as before ('answer "
            "from it, or make a different call'), and the supervised chats teach answering after it (not with "
            "--agent: your agent adds no note; graphs/agent.py, docs/your-domain.md)",
            off="no note on repeated results, no repeat chats (the runs before session 63)")  # fmt: skip
    p.add_argument("--max_completion_length", type=int, default=128)
    p.add_argument("--train_dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                   help="what supervise's and GRPO's forwards compute in on CPU (auto: bf16 autocast where the CPU "
                   "has bf16 instructions, fp32 before session 64's supervise; docs/real-model.md)")  # fmt: skip
    p.add_argument("--min_gain", type=float, default=0.0, help="the gate's minimum lower bound")
    p.add_argument("--eval_servers", type=int, default=None,
                   help="policy servers the evaluations play models on side by side, 1 thread each (default: 2 "
                   "with 2 cores or more; 1 halves their memory)")  # fmt: skip
    p.add_argument("--stop_after", choices=PHASES, default=None, help="stop once this phase is done (resume later)")
    p.add_argument("--promote", default=None, help="served name to point at the adapter when the gate passes")
    p.add_argument("--policy_base_url", default=None, help="the endpoint that serves --promote")
    p.add_argument("--no_progress", action="store_true", help="hide the progress bars")
    return p


def _switch(p: argparse.ArgumentParser, name: str, *, on: str, off: str) -> None:
    """``--NAME`` (the default) and ``--no_NAME``."""
    p.add_argument(f"--{name}", action="store_true", default=True, help=f"(the default) {on}")
    p.add_argument(f"--no_{name}", dest=name, action="store_false", help=off)


HEARTBEAT_S = 15.0
"""How often a running phase records its seconds (``attempts.json``): a kill loses at most this much of them."""


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=2))
    tmp.rename(path)


def _attempts(d: Path) -> list[float]:
    """The seconds of the earlier, unfinished attempts at the phase in ``d`` (none: ``[]``)."""
    try:
        return [float(x) for x in json.loads((d / "attempts.json").read_text())]
    except (OSError, ValueError, TypeError):
        return []


class _Heartbeat:
    """Rewrites ``path`` with ``earlier`` and this attempt's seconds so far, every ``HEARTBEAT_S`` while entered and
    once on leaving (a phase that raises is charged too; one killed outright, up to its last beat)."""

    def __init__(self, path: Path, earlier: Sequence[float]) -> None:
        self.path, self.earlier = path, list(earlier)
        self.started = time.perf_counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="adapt-heartbeat", daemon=True)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def _write(self) -> None:
        _write_json(self.path, [*self.earlier, round(self.elapsed(), 1)])

    def _beat(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            self._write()

    def __enter__(self) -> _Heartbeat:
        self.started = time.perf_counter()
        self._write()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self._write()


class Run(EvalServers):
    """One adapt run's directory, budget and phase bookkeeping; its evaluation servers (``EvalServers``)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.output_dir)
        self.started = time.perf_counter()
        super().__init__(getattr(args, "eval_servers", None) or eval_servers())
        self.earlier: dict[str, float] = {}
        """Per phase this run started, the seconds earlier runs spent in it before a kill (``interrupted_s``)."""

    def budget_s(self, phase: str) -> float:
        """Seconds ``phase`` may take: its share (``SHARES``), for GRPO the time left once the gate's is set aside,
        less what earlier runs spent in it before a kill (``interrupted_s``). The other phases are sized by their
        tasks."""
        if phase == "grpo":
            return self.args.minutes * 60 - self.spent_s() - self.gate_s() - self.interrupted_s(phase)
        return max(0.0, self.args.minutes * 60 * SHARES[phase] - self.interrupted_s(phase))

    def interrupted_s(self, phase: str) -> float:
        """Seconds earlier runs spent in ``phase`` without finishing it: its ``attempts.json``, which a running
        phase rewrites every ``HEARTBEAT_S`` with its own seconds after those of the attempts before it. A resumed
        run charges them to the phase (in its budget and its ``phase_s``), so a kill and a rerun take no more of
        ``--minutes`` than one run would."""
        if phase in self.earlier:  # the phase is running: its own attempt is not an earlier one
            return self.earlier[phase]
        return sum(_attempts(self.dir(phase)))

    def spent_s(self) -> float:
        """Seconds the done phases before the held-out one took (their ``done.json``, whose ``phase_s`` holds the
        attempts a kill interrupted too: ``interrupted_s``)."""
        markers = [self.dir(name) / "done.json" for name in PHASES if name != "heldout"]
        return sum(float(json.loads(m.read_text()).get("phase_s", 0.0)) for m in markers if m.exists())

    def gate_s(self) -> float:
        """The gate's predicted seconds: the GRPO adapter's episodes on the validation part at the seconds an
        episode of the supervised adapter took in the validate phase (the starting model's and the supervised
        adapter's rollouts are done by then). Before session 64 the gate ran all three, predicted at the starting
        model's seconds in the rollouts phase: library run 12 set 33 minutes aside and its gate took 23 (6.9 s an
        episode predicted; the adapters answered in fewer calls), so GRPO ran 5 steps where 15 fitted."""
        done = json.loads((self.dir("validate") / "done.json").read_text())
        return float(done["supervised_episode_s"]) * int(done["episodes"])

    def dir(self, phase: str) -> Path:
        return phase_dir(self.out, phase)

    def phase(self, name: str, fn: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
        """``fn(dir)`` unless the phase is done already (its ``done.json`` read back instead)."""
        d = self.dir(name)
        marker = d / "done.json"
        if marker.exists():
            print(f"adapt: {name}: done before, skipped ({marker})", file=sys.stderr)
            return json.loads(marker.read_text())
        d.mkdir(parents=True, exist_ok=True)
        earlier = _attempts(d)
        self.earlier[name] = interrupted = sum(earlier)
        beat = _Heartbeat(d / "attempts.json", earlier)  # this attempt's seconds, for a rerun after a kill
        budget = f" (budget {self.budget_s(name) / 60:.1f} min)" if name in SHARES or name == "grpo" else ""
        print(f"adapt: {name}{budget} …", file=sys.stderr)
        with beat:
            out = fn(d)
        result = {**out, "phase_s": round(beat.elapsed() + interrupted, 1)}
        if earlier:
            result["interrupted_s"] = round(interrupted, 1)
        _write_json(marker, result)
        return result

    def train_keys(self) -> dict[str, Any]:
        """The keys rollouts share with training (``evaluation.grpo_config`` reads them)."""
        a = self.args
        return {"model_name_or_path": a.model_path, "env_id": a.env, "agent": a.agent, "max_turns": a.max_turns,
                "repeat_guard": a.repeat_guard, "max_completion_length": a.max_completion_length, "temperature": 1.0,
                "rollout_concurrency": 16, "level_weights": "", "report_to": [],
                "policy_server_strict_tools": a.strict_tools}  # fmt: skip


def phase_dir(out: Path, phase: str) -> Path:
    """``out/<n>-<phase>``, or the directory a run from before the validate phase (session 64) gave ``phase``
    (``5-grpo``, ``6-gate``, ``7-heldout``) where it exists, so those runs resume and their benchmarks read."""
    found = sorted(out.glob(f"[0-9]-{phase}"))
    return found[0] if found else out / f"{PHASES.index(phase) + 1}-{phase}"


def tasks_file(path: Path) -> list[Any]:
    from langgraph_evolver.types import Task, read_jsonl

    return list(read_jsonl(path, Task))


def _write_tasks(path: Path, tasks: Sequence[Any]) -> None:
    path.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))


def _synthesize(run: Run, d: Path) -> dict[str, Any]:
    from langgraph_evolver.questioning import synthesize_tasks

    a = run.args
    try:
        tasks, report = synthesize_tasks(a.env, a.tasks, seed=a.seed, n_depth=a.n_depth,
                                         max_explorations=a.max_explorations, progress=not a.no_progress)  # fmt: skip
    except EvolverError:
        raise
    except Exception as e:  # a server that dies mid-way surfaces as whatever its client raised
        raise EvolverError(f"exploring {a.env} failed: {type(e).__name__}: {e}. Check that the environment "
                           "starts on its own (`python -m trainers.evaluate --env ... --reference_policy`)."
                           ) from e  # fmt: skip
    if not tasks:
        raise EvolverError(f"self-questioning kept 0 verified tasks of {report.filters.candidates} candidates on "
                           f"{a.env} ({report.explorations} explorations): raise --max_explorations or --n_depth, "
                           f"or give the tools descriptions and ids in their results (filters: "
                           f"{report.filters.removed}; tools never called without an error: "
                           f"{[u['tool'] for u in report.unreached] or 'none'}).")  # fmt: skip
    _write_tasks(d / "tasks.jsonl", tasks)
    return {"tasks_synthesized": len(tasks), "explorations": report.explorations,
            "state_changing": report.state_changing, "multi_intent": report.multi_intent, "named": report.named,
            "filters": report.filters.removed}  # fmt: skip


def _split(run: Run, d: Path) -> dict[str, Any]:
    from .adapt_data import PARTS, split_tasks

    try:
        shares = tuple(float(x) for x in run.args.split.split(","))
    except ValueError:
        shares = ()
    if len(shares) != 3 or any(s < 0 for s in shares) or sum(shares) <= 0:
        raise ConfigError(f"--split {run.args.split!r} must be three shares 'sft,rl,validation', e.g. 0.6,0.2,0.2")
    tasks = tasks_file(run.dir("synthesize") / "tasks.jsonl")
    parts = split_tasks(tasks, shares, seed=run.args.seed)  # type: ignore[arg-type]
    if not parts["rl"] or not parts["validation"]:
        raise EvolverError(f"{len(tasks)} synthesized tasks are too few to split into sft / rl / validation parts: "
                           "raise --tasks (and --max_explorations).")  # fmt: skip
    for name in PARTS:
        _write_tasks(d / f"{name}.jsonl", parts[name])
    return {name: len(parts[name]) for name in PARTS}


def _own_rollouts(run: Run, d: Path) -> dict[str, Any]:
    from langgraph_evolver.types import write_jsonl

    tasks = tasks_file(run.dir("split") / "sft.jsonl")
    if not tasks:
        write_jsonl(d / "trajectories.jsonl", [])
        return {"rollouts": 0, "solved": 0, "probe_only": False}
    run.model(None)  # the server's start is not an episode's time
    started = time.perf_counter()
    trajectories = run.rollouts(tasks[:PROBE], None, k=1, seed=run.args.seed)
    probe_only = len(tasks) > PROBE and not any((t.reward or 0.0) >= 1.0 for t in trajectories)
    if len(tasks) > PROBE and not probe_only:
        trajectories += run.rollouts(tasks[PROBE:], None, k=1, seed=run.args.seed)
    write_jsonl(d / "trajectories.jsonl", trajectories)
    return {"rollouts": len(trajectories), "solved": sum((t.reward or 0.0) >= 1.0 for t in trajectories),
            "probe_only": probe_only,
            "episode_s": round((time.perf_counter() - started) / len(trajectories), 2)}  # fmt: skip


def supervise_phase(run: Run, d: Path) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from langgraph_evolver.environment import environment_factory
    from langgraph_evolver.types import Trajectory, read_jsonl
    from trainers.models import resolve_model

    from .adapt_data import supervised_examples, train_lora_apart

    model_path = resolve_model(run.args.model_path)
    tasks = tasks_file(run.dir("split") / "sft.jsonl")
    own = list(read_jsonl(run.dir("rollouts") / "trajectories.jsonl", Trajectory))
    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    others = [t for part in ("rl", "validation") for t in tasks_file(run.dir("split") / f"{part}.jsonl")]
    examples, counts = supervised_examples(tasks, own, tokenizer, environment_factory(run.args.env),
                                           seed=run.args.seed, with_mistakes=run.args.mistake_chats,
                                           swaps=run.args.swap_chats, others=others,
                                           repeats=run.args.repeat_guard and not run.args.agent,
                                           invented=run.args.invented_chats)  # fmt: skip
    if not examples:
        raise EvolverError(f"none of the {len(tasks)} sft tasks gave a supervised example (their references no "
                           "longer replay): rerun with a fresh --output_dir.")  # fmt: skip
    trained = train_lora_apart(model_path, examples, d / "adapter", seconds=run.budget_s("supervise"), lora=LORA,
                               max_steps=run.args.sft_steps, progress=not run.args.no_progress,
                               dtype=run.args.train_dtype)  # fmt: skip
    return {"sft_examples": len(examples), "from_own_rollouts": counts["own"], "from_references": counts["reference"],
            "from_recoveries": counts["recovery"], "from_inventions": counts["invented"],
            "from_mistakes": counts["mistake"], "from_swaps": counts["swap"],
            "from_repeats": counts["repeat"], "skipped": counts["skipped"],
            **{f"sft_{k}": v for k, v in trained.items()}}  # fmt: skip


def _evaluate(run: Run, tasks: list[Any], candidates: dict[str, Path], d: Path,
              ran: dict[str, list[Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    """The starting model and each candidate on ``tasks``, k samples each, the same seeds; the best candidate
    there (the first on a tie) gated against the starting model. ``after.jsonl`` holds the chosen one's rollouts.
    ``ran``: rollouts of the same tasks and seeds made before (the validate phase's ``before`` and ``supervised``),
    read instead of played again. Each model's rollouts are written to ``d/<name>.jsonl`` as soon as it finishes,
    and a rerun after a kill reads back every model written in full (``adapt_data.played_before``): bikeshop run 1
    (session 73) lost its adapter's finished held-out rollouts while the starting model was still playing."""
    from langgraph_evolver.types import write_jsonl
    from trainers.evaluate import summarize

    from .gate import decide_paired, sample_rewards

    k, seed, given = run.args.k, run.args.seed, ran or {}
    models: dict[str, Path | None] = {"before": None, **candidates}
    ran = {**{n: rows for n in models if (rows := (played_before(d, tasks, k, name=n) or {}).get(n))}, **given}

    def player(name: str, adapter: Path | None) -> Callable[[int], list[Any]]:
        def play(slot: int) -> list[Any]:
            rows = run.rollouts(tasks, adapter, k=k, seed=seed, slot=slot)
            write_jsonl(d / f"{name}.jsonl", rows)  # at once: a rerun after a kill reads it back
            return rows

        return play

    played = {**{n: ran[n] for n in models if ran.get(n)},
              **run.side_by_side({n: player(n, a) for n, a in models.items() if not ran.get(n)})}  # fmt: skip
    for name in models.keys() & given.keys():  # read from another phase's files: this phase's hold them too
        write_jsonl(d / f"{name}.jsonl", played[name])
    before = played["before"]
    scored: dict[str, tuple[float, list[Any]]] = {}
    for name in candidates:
        after = played[name]
        scored[name] = (summarize(after, k)["all"][f"avg@{k}"], after)
    chosen = max(scored, key=lambda name: scored[name][0])
    mean, after = scored[chosen]
    write_jsonl(d / "after.jsonl", after)
    decision = decide_paired(sample_rewards(after), sample_rewards(before), min_gain=run.args.min_gain, seed=seed)
    return {"before": summarize(before, k)["all"][f"avg@{k}"], "after": mean, "decision": decision.to_dict(),
            "chosen": chosen, "adapter": str(candidates[chosen]),
            "candidates": {name: v[0] for name, v in scored.items()}}  # fmt: skip


VALIDATED = ("before", "supervised")  # the validate phase plays the starting model and the supervised adapter


def _validate(run: Run, d: Path) -> dict[str, Any]:
    """The starting model and the supervised adapter on the validation part, each timed per episode (the server's
    start and the adapter's load apart): the gate reads the rollouts back, and ``Run.gate_s`` predicts the GRPO
    adapter's from the supervised one's seconds."""
    from trainers.evaluate import summarize

    tasks = tasks_file(run.dir("split") / "validation.jsonl")
    k, out = run.args.k, {}

    def player(name: str, adapter: Path | None) -> Callable[[int], tuple[list[Any], float]]:
        def play(slot: int) -> tuple[list[Any], float]:
            def rollouts() -> list[Any]:
                run.model(adapter, slot)
                return run.rollouts(tasks, adapter, k=k, seed=run.args.seed, slot=slot)

            return replayed(d, tasks, k, name, rollouts)

        return play

    models = dict(zip(VALIDATED, (None, run.dir("supervise") / "adapter"), strict=True))
    for name, (played, seconds) in run.side_by_side({n: player(n, a) for n, a in models.items()}).items():
        out[name], out[f"{name}_episode_s"] = summarize(played, k)["all"][f"avg@{k}"], seconds
    return {**out, "episodes": len(tasks) * k}


def _gate(run: Run, d: Path) -> dict[str, Any]:
    """Validation chooses the candidate, the supervised adapter on a tie (GRPO from an adapter that solves few
    tasks can drift), and gates it against the starting model; the validate phase's rollouts are read back."""
    from langgraph_evolver.types import Trajectory, read_jsonl

    tasks = tasks_file(run.dir("split") / "validation.jsonl")
    candidates = {"supervised": run.dir("supervise") / "adapter"}
    if (grpo := _grpo_adapter(run)) is not None:  # None: no time was left for GRPO
        candidates["grpo"] = grpo
    v = run.dir("validate")
    ran = {name: list(read_jsonl(v / f"{name}.jsonl", Trajectory)) for name in VALIDATED if (v / "done.json").exists()}
    return _evaluate(run, tasks, candidates, d, ran)


def _heldout(run: Run, d: Path) -> dict[str, Any]:
    """The only place ``--heldout`` is opened."""
    from env_tools.mcp_tasks import load_task_file

    path = Path(run.args.heldout)
    try:
        tasks = load_task_file(path, env=run.args.env)
    except Exception as e:  # noqa: BLE001 - whatever the reader raised, said with the file's name
        raise ConfigError(f"--heldout {path} did not load ({type(e).__name__}: {e}): it must be a JSONL file of "
                          "tasks, one a line: the MCP tasks format (id, instruction, reference, check or answer: "
                          "docs/mcp.md) or Task objects (id, query, reference_solution).") from e  # fmt: skip
    if not tasks:
        raise ConfigError(f"--heldout {path} holds no tasks.")
    return {"tasks": len(tasks), **_evaluate(run, tasks, dict([_chosen(run)]), d)}


def _promote(run: Run, adapter: Path) -> str:
    """Point ``--promote`` at ``adapter`` on ``--policy_base_url``, as the evolve loop promotes."""
    from types import SimpleNamespace

    from .endpoint import ProductionEndpoint

    cfg = SimpleNamespace(served_name=run.args.promote, policy_base_url=run.args.policy_base_url)
    endpoint = ProductionEndpoint(cfg, Path(run.args.model_path), run.out)  # type: ignore[arg-type]
    endpoint.start()
    endpoint.serve(adapter)
    return f"{run.args.policy_base_url} serves {adapter} as {run.args.promote!r}"


def adapt(args: argparse.Namespace) -> dict[str, Any]:
    if args.minutes <= 0:
        raise ConfigError(f"--minutes must be above 0, got {args.minutes}")
    if args.eval_servers is not None and args.eval_servers < 1:
        raise ConfigError(f"--eval_servers must be 1 or more, got {args.eval_servers}")
    if args.heldout and not Path(args.heldout).is_file():  # its name only: the file is read in the last phase
        raise ConfigError(f"--heldout {args.heldout} does not exist.")
    if args.promote and not args.policy_base_url:
        raise ConfigError("--promote NAME needs --policy_base_url (the endpoint that serves NAME).")
    run = Run(args)
    run.out.mkdir(parents=True, exist_ok=True)
    steps: list[tuple[str, Callable[[Path], dict[str, Any]]]] = [
        ("synthesize", lambda d: _synthesize(run, d)),
        ("split", lambda d: _split(run, d)),
        ("rollouts", lambda d: _own_rollouts(run, d)),
        ("supervise", lambda d: supervise_phase(run, d)),
        ("validate", lambda d: _validate(run, d)),
        ("grpo", lambda d: grpo_phase(run, d, LORA)),
        ("gate", lambda d: _gate(run, d)),
    ]
    if args.heldout:
        steps.append(("heldout", lambda d: _heldout(run, d)))
    results: dict[str, dict[str, Any]] = {}
    try:
        for name, fn in steps:
            if name in ("supervise", "grpo"):  # training: the evaluation server's memory and threads back first
                run.stop()
            results[name] = run.phase(name, fn)
            if args.stop_after == name:
                print(f"adapt: stopped after {name} (--stop_after); rerun without it to go on", file=sys.stderr)
                return {"stopped_after": name}
    finally:
        run.stop()
    line = _line(run, results)
    if args.promote and line["promoted"]:
        line["served"] = _promote(run, _chosen(run)[1])
    return line


def _grpo_adapter(run: Run) -> Path | None:
    adapter = json.loads((run.dir("grpo") / "done.json").read_text())["adapter"]
    return Path(adapter) if adapter else None


def _chosen(run: Run) -> tuple[str, Path]:
    """The adapter the gate chose on validation, by name (a gate done before the choice existed: the GRPO one)."""
    gate = json.loads((run.dir("gate") / "done.json").read_text())
    if "adapter" in gate:
        return gate["chosen"], Path(gate["adapter"])
    grpo = _grpo_adapter(run)
    assert grpo is not None, "a gate from before the choice existed had a GRPO adapter"
    return "grpo", grpo


def _line(run: Run, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    gate, held = results["gate"], results.get("heldout")
    decision = (held or {}).get("decision") or {}
    return {
        "heldout_before": held["before"] if held else None,
        "heldout_after": held["after"] if held else None,
        "paired_gain": decision.get("paired_gain") if held else None,
        "lower_bound": decision.get("lower_bound") if held else None,
        "heldout_tasks": held["tasks"] if held else None,
        "tasks_synthesized": results["synthesize"]["tasks_synthesized"],
        "split": {k: results["split"][k] for k in ("sft", "rl", "validation")},
        "sft_examples": results["supervise"]["sft_examples"],
        "sft_from_own_rollouts": results["supervise"]["from_own_rollouts"],
        "sft_recoveries": results["supervise"].get("from_recoveries", 0),  # absent in a supervise done before
        "sft_mistakes": results["supervise"].get("from_mistakes", 0),
        "sft_inventions": results["supervise"].get("from_inventions", 0),
        "sft_swaps": results["supervise"].get("from_swaps", 0),
        "sft_repeats": results["supervise"].get("from_repeats", 0),
        "grpo_steps": results["grpo"]["grpo_steps"],
        "validation_before": gate["before"],
        "validation_after": gate["after"],
        "validation_lower_bound": gate["decision"]["lower_bound"],
        "validation_candidates": gate.get("candidates"),
        "chosen": _chosen(run)[0],
        "promoted": gate["decision"]["promote"],
        "gate_reason": gate["decision"]["reason"],
        "adapter": str(_chosen(run)[1]),
        "wall_s": round(time.perf_counter() - run.started, 1),
        "phases_s": round(sum(r.get("phase_s", 0.0) for r in results.values()), 1),
        "adapt_s": round(sum(r.get("phase_s", 0.0) for name, r in results.items() if name != "heldout"), 1),
        "minutes": run.args.minutes,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        line = adapt(args)
    except EvolverError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(line))
    return 0

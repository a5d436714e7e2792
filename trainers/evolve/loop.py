"""The evolve loop: cycles of collect -> train -> evaluate (paired) -> test figure -> promote-if-it-wins.

Each phase ends with one atomic write of ``state.json`` (``state.State``), so a loop started again on the
same output directory continues the open cycle at the phase it reached; training itself resumes from its
last checkpoint. The incumbent and the candidate are evaluated on the same fixed held-out tasks (the
validation split by default) with the same sampling seeds; the gate (``gate.decide_paired``) promotes only
when the bootstrap lower bound of the paired gain is above ``min_gain``. Production's test figure is measured
apart (``test_split``, seeds of its own), once per production version: choosing on the gate's split biases the
promoted gain there upward, so the test figure is the one to report. Promotion re-points the stable name
(``endpoint``); every promoted adapter is kept under ``adapters/`` for rollbacks, rejected ones only for the
last ``keep_candidates`` cycles.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from langgraph_evolver.errors import EvolverError

from .config import EvolveConfig
from .endpoint import ProductionEndpoint
from .gate import decide_paired, pair_samples, sample_rewards
from .state import State, failpoint

__all__ = ["EvolveLoop"]


class EvolveLoop:
    """One loop over ``cfg.output_dir``; hold ``state.loop_lock`` while it runs (``__main__`` does)."""

    def __init__(self, cfg: EvolveConfig) -> None:
        from trainers.models import resolve_model

        from .evaluation import grpo_config
        from .train import read_train_config

        self.cfg = cfg
        self.out = Path(cfg.output_dir).resolve()
        self.state = State(self.out)
        self.train = read_train_config(cfg)
        self.rollout_cfg = grpo_config(self.train, self.out)
        """The training keys as a ``trainers.grpo`` config: what evaluation rollouts and held-out tasks follow."""
        self.model_path = Path(resolve_model(str(self.train["model_name_or_path"])))
        self.env = self.rollout_cfg.env_id
        self.endpoint = ProductionEndpoint(
            cfg, self.model_path, self.out, strict_tools=bool(self.train.get("policy_server_strict_tools"))
        )
        self._heldout: list[Any] | None = None
        self._test_tasks: list[Any] | None = None

    # -- setup ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start (or reach) the endpoint and make the stable name serve the production adapter."""
        from .train import zero_adapter

        self.endpoint.start()
        if self.state.production is None:
            if self.cfg.init_adapter:
                initial = self._keep_adapter(Path(self.cfg.init_adapter), "v000")
            else:
                initial = zero_adapter(self.train, self.model_path, self.out / "adapters" / "v000")
            self.state.set_production({"version": "v000", "adapter": str(initial.relative_to(self.out)), "cycle": 0},
                                      action="init")  # fmt: skip
            self.state.data.update(served_name=self.cfg.served_name, base_model=str(self.model_path),
                                   policy_base_url=self.cfg.policy_base_url)  # fmt: skip
            self.state.save()
        self.endpoint.serve(self.state.adapter_path(self.state.production))

    def stop(self) -> None:
        self.endpoint.stop()

    def _keep_adapter(self, source: Path, version: str) -> Path:
        """Copy the adapter at ``source`` to ``adapters/<version>`` (once; the copy is atomic)."""
        from langgraph_evolver.errors import ConfigError

        target = self.out / "adapters" / version
        if (target / "adapter_config.json").exists():
            return target
        if not (source / "adapter_config.json").exists():
            raise ConfigError(f"{source} holds no LoRA adapter (no adapter_config.json).")
        tmp = target.with_name(version + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp, ignore=shutil.ignore_patterns("README.md", "*.bin"))
        tmp.rename(target)
        return target

    # -- cycles ---------------------------------------------------------------------------------
    def run(self, cycles: int | None = None) -> list[dict[str, Any]]:
        """Run until ``cycles`` cycles are complete (None: the config's; 0: until stopped); the cycles' lines."""
        target = self.cfg.cycles if cycles is None else cycles
        lines = []
        while True:
            record = self.state.open_cycle()
            if record is None:
                if target and self.state.completed() >= target:
                    return lines
                if lines and self.cfg.interval_s:
                    time.sleep(self.cfg.interval_s)
                record = self.state.new_cycle(incumbent=self.state.production["version"])
                self.state.save()
            lines.append(self.run_cycle(record))

    def consider(self, adapter: Path) -> dict[str, Any]:
        """One cycle that gates an adapter trained elsewhere (no collect, no training)."""
        from langgraph_evolver.errors import ConfigError

        if self.state.open_cycle() is not None:
            raise ConfigError(f"{self.out} has an unfinished cycle: finish it first (run the loop again).")
        if not (adapter / "adapter_config.json").exists():
            raise ConfigError(f"--candidate {adapter} holds no LoRA adapter (no adapter_config.json).")
        record = self.state.new_cycle(incumbent=self.state.production["version"], phase="evaluate",
                                      data={"external_candidate": str(adapter.resolve())},
                                      train={"adapter": str(adapter.resolve()), "steps": 0})  # fmt: skip
        self.state.save()
        return self.run_cycle(record)

    def run_cycle(self, record: dict[str, Any]) -> dict[str, Any]:
        n = record["cycle"]
        cycle_dir = self.out / "cycles" / f"{n:03d}"
        label = f"cycle {n}" + (f"/{self.cfg.cycles}" if self.cfg.cycles else "")
        try:
            if record["phase"] == "collect":
                print(f"{label}: collecting tasks …", file=sys.stderr)
                failpoint("collect")
                from .collect import collect_tasks

                record["data"], watermark = collect_tasks(self.cfg, self.env, self.out / "tasks.sqlite",
                                                          self.state.data["watermark"], cycle_dir, n)  # fmt: skip
                self.state.data["watermark"] = watermark
                self._advance(record, "train")
            if record["phase"] == "train":
                failpoint("train")
                from .train import train_candidate

                store = self.out / "tasks.sqlite"
                record["train"] = train_candidate(self.cfg, self.train, cycle_dir,
                                                  self.state.adapter_path(self.state.production),
                                                  store if record["data"].get("task_store_size") else None)  # fmt: skip
                self._advance(record, "evaluate")
            if record["phase"] == "evaluate":
                failpoint("evaluate")
                self._evaluate(record, cycle_dir, label)
                tested = self.cfg.test_split and not record.get("error")  # a failed evaluation has no candidate
                self._advance(record, "test" if tested else self._after_test(record))
            if record["phase"] == "test":
                failpoint("test")
                self._test(record, label)
                self._advance(record, self._after_test(record))
            if record["phase"] == "promote":
                failpoint("promote")
                self._promote(record)
        except EvolverError as e:  # training or evaluation failed: the incumbent stays, the loop goes on
            record.update(promoted=False, error=str(e).splitlines()[0][:500], reason=f"cycle failed: {e}"[:500])
            self._advance(record, "done")
        return self._finish(record, cycle_dir)

    def _advance(self, record: dict[str, Any], phase: str) -> None:
        record["phase"] = phase
        self.state.save()

    @staticmethod
    def _after_test(record: dict[str, Any]) -> str:
        return "promote" if record["gate"]["promote"] else "done"

    # -- (c) and (d) ----------------------------------------------------------------------------
    def heldout_tasks(self) -> list[Any]:
        """The gate's fixed held-out tasks (``heldout_split``), at least ``min_tasks`` of them."""
        if self._heldout is None:
            from langgraph_evolver.errors import ConfigError

            self._heldout = self._split_tasks("heldout_split", self.cfg.heldout_split, self.cfg.heldout_limit)
            if self.cfg.min_tasks and self.cfg.min_tasks > len(self._heldout):
                raise ConfigError(
                    f"min_tasks {self.cfg.min_tasks} is more than the {len(self._heldout)} held-out "
                    f"tasks of {self.cfg.heldout_split!r}: lower it, or raise heldout_limit."
                )
        return self._heldout

    def _split_tasks(self, key: str, split: str, limit: int | None) -> list[Any]:
        """The first ``limit`` tasks of ``split``; none is a ConfigError naming the key to change."""
        from trainers.training_tasks import load_tasks

        tasks = load_tasks(self.rollout_cfg, (split, limit or None))[0]
        if not tasks:
            from langgraph_evolver.errors import ConfigError

            raise ConfigError(f"Environment {self.env!r} has no tasks in {key} {split!r}: set {key} to a split it "
                              "has (the gate's heldout_split apart from test_split; test_split: null for no test "
                              "figure).")  # fmt: skip
        return tasks

    def _evaluate(self, record: dict[str, Any], cycle_dir: Path, label: str) -> None:
        from trainers.evaluate import too_many_failures

        from .evaluation import evaluate_model

        name = _candidate_name(self.cfg, record["cycle"])
        candidate = Path(record["train"]["adapter"])
        self.endpoint.load_candidate(name, candidate)
        tasks = self.heldout_tasks()
        print(f"{label}: evaluating the candidate and the incumbent ({record['incumbent']}) on {len(tasks)} held-out "
              f"tasks x {self.cfg.heldout_k}, paired seeds …", file=sys.stderr)  # fmt: skip
        results = {}
        for who, model in (("incumbent", self.cfg.served_name), ("candidate", name)):
            tag = f"{who}:{record['incumbent'] if who == 'incumbent' else name}"
            results[who] = evaluate_model(self, tasks, model, cycle_dir / f"eval_{who}", tag=tag,
                                          split=self.cfg.heldout_split, seed=self.cfg.heldout_seed)  # fmt: skip
        record["evaluation"] = {who: r["figures"] for who, r in results.items()}
        share = self.cfg.max_failed_share
        failed = [reason for who, r in results.items()
                  if (reason := too_many_failures(r["figures"], share, f"the {who}'s evaluation"))]  # fmt: skip
        cand, inc = (sample_rewards(results[who]["trajectories"]) for who in ("candidate", "incumbent"))
        gate = decide_paired(cand, inc, confidence=self.cfg.confidence, min_gain=self.cfg.min_gain,
                             resamples=self.cfg.bootstrap_resamples, seed=record["cycle"],
                             min_tasks=self.cfg.min_tasks or len(tasks)).to_dict()  # fmt: skip
        if failed:  # a verdict on the endpoint or the environment, not on the candidate: never promoted
            gate.update(promote=False, reason="; ".join(failed))
            record["error"] = gate["reason"]  # the cycle could not judge its candidate: the run exits 1
        record["gate"] = gate
        record["promoted"], record["reason"] = False, gate["reason"]
        from langgraph_evolver.tracing import langsmith_enabled

        if langsmith_enabled():  # the held-out set as a dataset, each evaluation an experiment on it
            from langgraph_evolver.tracing import write_evaluation_folders

            record["langsmith"] = write_evaluation_folders(
                {f"cycle{record['cycle']:03d}-{who}": cycle_dir / f"eval_{who}" for who in results},
                dataset_name=f"evolve-{self.env}-{self.cfg.heldout_split}", timeout_s=60)  # fmt: skip

    def _test(self, record: dict[str, Any], label: str) -> None:
        """Production's test figure, apart from the gate: each production version is evaluated once on
        ``test_split`` with ``test_seed`` (the incumbent under the stable name, a promoted candidate under its
        own name before the swap). The gate never reads it: it is the unbiased figure of what was promoted."""
        from .evaluation import evaluate_model

        version = f"v{record['cycle']:03d}"
        sides = [("incumbent", record["incumbent"], self.cfg.served_name)]
        if record["gate"]["promote"]:
            sides.append(("candidate", version, _candidate_name(self.cfg, record["cycle"])))
        if self._test_tasks is None:
            self._test_tasks = self._split_tasks("test_split", self.cfg.test_split, self.cfg.test_limit)
        tasks, k = self._test_tasks, self.cfg.heldout_k
        print(f"{label}: production's test figure ({self.cfg.test_split!r}, {len(tasks)} tasks x {k}, its own "
              "seeds) …", file=sys.stderr)  # fmt: skip
        runs = {who: evaluate_model(self, tasks, model, self.out / "test" / v, tag=f"production:{v}",
                                    split=self.cfg.test_split, seed=self.cfg.test_seed)
                for who, v, model in sides}  # fmt: skip
        test = {"split": self.cfg.test_split, "seed": self.cfg.test_seed, "tasks": len(tasks),
                **{f"{who}_avg": r["figures"][f"avg@{k}"] for who, r in runs.items()},
                **{f"{who}_failed_share": r["figures"].get("failed_share") for who, r in runs.items()}}  # fmt: skip
        if "candidate" in runs:  # the promoted candidate's gain on test: paired (same tasks, same test seeds)
            pairing = pair_samples(*(sample_rewards(runs[who]["trajectories"]) for who in ("candidate", "incumbent")))
            diffs = [pairing.candidate[t] - pairing.incumbent[t] for t in pairing.candidate]
            test["gain"] = round(sum(diffs) / len(diffs), 4) if diffs else None
        record["test"] = test

    def _promote(self, record: dict[str, Any]) -> None:
        version = f"v{record['cycle']:03d}"
        kept = self._keep_adapter(Path(record["train"]["adapter"]), version)
        self.endpoint.serve(kept)  # idempotent: a loop killed after this line re-points to the same directory
        entry = {"version": version, "adapter": str(kept.relative_to(self.out)), "cycle": record["cycle"]}
        if (self.state.production or {}).get("version") != version:
            self.state.set_production(entry, action="promote", cycle=record["cycle"])
        record["promoted"] = True
        self._advance(record, "done")

    # -- records --------------------------------------------------------------------------------
    def _finish(self, record: dict[str, Any], cycle_dir: Path) -> dict[str, Any]:
        from .records import cycle_line, plot_lineage

        record.setdefault("finished", time.time())
        self.endpoint.unload(_candidate_name(self.cfg, record["cycle"]))  # promoted or not, the stable name serves
        line = cycle_line(record, self.state.production)
        cycle_dir.mkdir(parents=True, exist_ok=True)
        (cycle_dir / "record.json").write_text(json.dumps(record, indent=2))
        self.state.save()
        self.prune()
        plot_lineage(self.state, self.out / "evolve.png")
        print(json.dumps(line), flush=True)
        return line

    def prune(self) -> None:
        prune_cycles(self.out, self.state.cycles, keep_candidates=self.cfg.keep_candidates)


def prune_cycles(out: Path, cycles: list[dict[str, Any]], *, keep_candidates: int) -> None:
    """Bounded disk: every finished cycle's checkpoints and published training adapters go; rejected
    candidates' final adapters are kept for the last ``keep_candidates`` rejected cycles; promoted ones go
    from the cycle too (their copy lives on in ``adapters/``). An unfinished cycle is left alone."""
    done = [c for c in cycles if c["phase"] == "done"]
    rejected = [c["cycle"] for c in done if not c.get("promoted")]
    keep = set(rejected[-keep_candidates:]) if keep_candidates else set()
    for c in done:
        train_dir = out / "cycles" / f"{c['cycle']:03d}" / "train"
        if not train_dir.exists():
            continue
        for path in [*train_dir.glob("checkpoint-*"), train_dir / "served_adapters"]:
            shutil.rmtree(path, ignore_errors=True)
        if c["cycle"] not in keep:
            shutil.rmtree(train_dir / "final", ignore_errors=True)


def _candidate_name(cfg: EvolveConfig, cycle: int) -> str:
    return f"{cfg.served_name}-c{cycle:03d}"

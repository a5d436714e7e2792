"""The evolve loop (issue 27): the gate, promotion under a stable name, rollback, the lock, a kill between
the gate and the promotion, and one end-to-end cycle from (fake) LangSmith traces through training.

The real parts: the CPU policy server on the committed tiny policy (adapters loaded and swapped through
its runtime LoRA API), the sandbox, ``trainers.grpo`` as the training child, the real ``langsmith.Client``
against the fake LangSmith of the tests. A "degraded" adapter (random LoRA A and B on every projection)
stands in for a bad candidate; the zero adapter (B = 0) is the committed policy itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT, TINY_POLICY
from trainers.evolve.__main__ import main
from trainers.evolve.config import load_config
from trainers.evolve.gate import bootstrap_lower_bound, decide
from trainers.evolve.state import FAILPOINT_ENV, LoopLocked, State, loop_lock

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PROMPTS = ["List the files in /home.", "Read the file notes.txt and tell me what it says.", "What is 2+3?"]


# -- the gate ---------------------------------------------------------------------------------------
def test_the_gate_promotes_a_clear_gain_and_nothing_else():
    inc = {f"t{i}": 0.5 for i in range(30)}
    better = {t: 0.5 + (0.25 if i % 3 else 0.0) for i, t in enumerate(inc)}
    equal, worse = dict(inc), {t: v - 0.1 for t, v in inc.items()}
    noisy = {t: 0.5 + (0.5 if i % 2 else -0.5) for i, t in enumerate(inc)}  # mean gain 0, large spread
    assert decide(better, inc).promote and decide(better, inc).lower_bound > 0.1
    assert not decide(equal, inc).promote and decide(equal, inc).lower_bound == 0.0
    assert not decide(worse, inc).promote
    assert not decide(noisy, inc).promote
    assert not decide(better, inc, min_gain=0.2).promote  # lower bound ~0.13: not above 0.2
    cancels = decide({t: 0.1 + 0.2 for t in inc}, {t: 0.3 for t in inc})  # every difference 5.6e-17, not a gain
    assert cancels.lower_bound > 0.0 and not cancels.promote
    one_side = decide({"t0": 1.0}, {"t1": 0.0})
    assert not one_side.promote and one_side.tasks == 0 and "were paired (need 1)" in one_side.reason


def _rollout(task: int, sample: int, reward: float | None, crash: str | None = None) -> Any:
    from langgraph_evolver.types import Task, Trajectory

    return Trajectory(id=f"t{task:02d}/{sample}", task=Task(id=f"t{task:02d}", env="sandbox", query="q"),
                      reward=reward, rollout_index=sample, finish_reason="error" if crash else "final_answer",
                      errors=(crash,) if crash else ())  # fmt: skip


def _incumbent_reward(task: int, sample: int) -> float:
    return 0.0 if (7 * task + sample) % 5 == 0 else 1.0  # ~0.8, as the tiny policy on the sandbox


def test_a_candidate_that_crashes_on_the_tasks_it_would_lose_is_not_promoted():
    """Issue 38 (5a): 7 of 40 tasks crashed on the candidate's side only (its bad arguments made the tool raise),
    a slightly better candidate on the 33 others. Dropping those tasks for both sides promoted it; paired per
    (task, sample), the crashed samples count against the candidate and it is kept out."""
    from trainers.evaluate import summarize, task_means, too_many_failures
    from trainers.evolve.gate import decide_paired, sample_rewards

    crash = "rollout crashed: ToolException: book_flight() got an unexpected keyword argument 'flight'"
    incumbent = [_rollout(t, i, _incumbent_reward(t, i)) for t in range(40) for i in range(4)]
    candidate = []
    for t in range(40):
        for i in range(4):
            if t >= 33:
                candidate.append(_rollout(t, i, None, crash))
            else:  # the incumbent's answers, one sample better on 3 tasks
                better = t in (1, 11, 21) and _incumbent_reward(t, i) == 0.0
                candidate.append(_rollout(t, i, 1.0 if better else _incumbent_reward(t, i)))
    figures = summarize(candidate, 4)
    assert figures["failed"] == 28 and too_many_failures(figures, 0.2, "the candidate's evaluation") is None
    fooled = decide(task_means(candidate), task_means(incumbent))  # the rule of 46694d8: tasks left out for both
    assert fooled.promote and fooled.tasks == 33 and fooled.paired_gain > 0, fooled

    gate = decide_paired(sample_rewards(candidate), sample_rewards(incumbent), min_tasks=40)
    assert not gate.promote and gate.tasks == 40 and gate.counted_against == 28 and gate.dropped == 0, gate
    assert gate.paired_gain < -0.1 and gate.candidate_mean < gate.incumbent_mean, gate
    assert "not above min_gain" in gate.reason


def test_the_gate_needs_its_configured_tasks_and_credits_no_outage_of_the_incumbent():
    from trainers.evolve.gate import decide_paired, sample_rewards

    outage = "rollout crashed: APIConnectionError: Connection error."
    incumbent = [_rollout(t, i, None if t == 0 else _incumbent_reward(t, i), outage if t == 0 else None)
                 for t in range(40) for i in range(4)]  # fmt: skip
    incumbent[5] = _rollout(1, 1, None, outage)  # one sample of task 1 too
    candidate = [_rollout(t, i, 1.0) for t in range(40) for i in range(4)]
    cand, inc = sample_rewards(candidate), sample_rewards(incumbent)
    short = decide_paired(cand, inc, min_tasks=40)  # task 0 has no pair left: 39 tasks
    assert not short.promote and short.tasks == 39 and short.dropped == 5 and short.counted_against == 0, short
    assert short.reason == "only 39 held-out tasks were paired (need 40)"
    enough = decide_paired(cand, inc, min_tasks=39)
    assert enough.promote and enough.pairs == 155, enough
    # the incumbent's failed samples are dropped, not scored 0 for it: task 1's gain is over its 3 kept pairs
    kept = [_incumbent_reward(1, i) for i in (0, 2, 3)]
    assert enough.to_dict()["min_tasks"] == 39
    assert decide_paired({("t01", 1): 1.0}, {("t01", 1): None}).tasks == 0
    assert decide_paired({("t01", i): 1.0 for i in (0, 2, 3)}, {("t01", i): r for i, r in zip((0, 2, 3), kept,
                         strict=True)}).paired_gain == pytest.approx(1.0 - sum(kept) / 3)  # fmt: skip


def test_the_bootstrap_bound_tightens_with_confidence_and_is_seeded():
    diffs = [0.1 * (i % 5) - 0.1 for i in range(40)]
    lo80, _ = bootstrap_lower_bound(diffs, confidence=0.8)
    lo99, hi99 = bootstrap_lower_bound(diffs, confidence=0.99)
    assert lo99 < lo80 < sum(diffs) / len(diffs) < hi99
    assert bootstrap_lower_bound(diffs, seed=3) == bootstrap_lower_bound(diffs, seed=3)


def test_config_errors_name_the_key_and_the_fix(tmp_path):
    bad = tmp_path / "evolve.yaml"
    bad.write_text("heldout_kk: 2\n")
    with pytest.raises(ValueError, match="heldout_k"):
        load_config(bad)
    with pytest.raises(ValueError, match="confidence"):
        load_config(None, {"confidence": 1.5})
    with pytest.raises(ValueError, match="not both"):
        load_config(None, {"traces_jsonl": "a", "traces_project": "b"})


def test_the_gate_decides_on_validation_and_the_test_figure_has_its_own_seeds(tmp_path):
    """Issue 38 (5b): gating every cycle on test with fixed seeds promoted 9.5% of zero-gain candidates at a mean
    recorded gain of +0.032. The default held-out split is validation; a config naming test still loads, warned."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither the defaults nor the example warn
        default, example = load_config(None), load_config(ROOT / "examples" / "evolve.yaml")
    assert default.heldout_split == example.heldout_split == "validation"
    assert default.test_split == example.test_split == "test"
    assert default.test_seed == default.heldout_seed + 1 and example.test_seed != example.heldout_seed
    old = tmp_path / "old.yaml"
    old.write_text("heldout_split: test\nheldout_seed: 7\n")
    with pytest.warns(UserWarning, match="biased upward"):
        kept = load_config(old)
    assert kept.heldout_split == "test" and kept.test_seed == 8
    with pytest.raises(ValueError, match="test_seed must differ from heldout_seed"):
        load_config(None, {"heldout_seed": 5, "test_seed": 5})
    with pytest.raises(ValueError, match="min_tasks must be >= 1"):
        load_config(None, {"min_tasks": 0})


def test_the_loop_checks_min_tasks_and_serves_the_gate_at_one_thread(tmp_path):
    """Issue 38 (5a, 5e): min_tasks above the held-out tasks is a config error, not a gate that never promotes;
    the loop's own server runs at 1 torch thread, where seeded evaluations repeat exactly."""
    from trainers.evolve.loop import EvolveLoop

    cfg = load_config(ROOT / "examples" / "evolve.yaml", {"output_dir": str(tmp_path), "heldout_limit": 5,
                                                          "min_tasks": 6})  # fmt: skip
    loop = EvolveLoop(cfg)
    with pytest.raises(ValueError, match="min_tasks 6 is more than the 5 held-out tasks of 'validation'"):
        loop.heldout_tasks()
    assert [t.id for t in loop._split_tasks("heldout_split", "validation", 2)] == ["sandbox-train-200000",
                                                                                   "sandbox-train-200001"]  # fmt: skip
    server = loop.endpoint.local_server()
    assert server.threads == 1 and server.allowed_weight_dirs == [tmp_path.resolve()]
    assert server.extra_args == []  # the training config's servers are not strict, nor is production
    strict = EvolveLoop(
        load_config(
            ROOT / "examples" / "evolve.yaml",
            {"output_dir": str(tmp_path), "train": {"policy_server_strict_tools": True}},
        )
    )
    assert strict.endpoint.local_server().extra_args == ["--strict-tools"]


def test_pruning_keeps_promoted_copies_the_last_rejected_and_the_open_cycle(tmp_path):
    from trainers.evolve.loop import prune_cycles

    cycles = [{"cycle": n, "phase": "done", "promoted": n == 2} for n in (1, 2, 3, 4)]
    cycles.append({"cycle": 5, "phase": "train"})  # a loop killed while training it
    for n in range(1, 6):
        for part in ("final", "checkpoint-4", "served_adapters/x"):
            (tmp_path / "cycles" / f"{n:03d}" / "train" / part).mkdir(parents=True)
    prune_cycles(tmp_path, cycles, keep_candidates=1)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("cycles/*/train/*"))
    assert left == ["cycles/004/train/final", "cycles/005/train/checkpoint-4", "cycles/005/train/final",
                    "cycles/005/train/served_adapters"]  # fmt: skip


def test_two_loops_on_one_directory_refuse(tmp_path, capsys):
    with loop_lock(tmp_path):
        with pytest.raises(LoopLocked, match=str(os.getpid())):
            with loop_lock(tmp_path):
                pass
        assert main(["--config", str(ROOT / "examples" / "evolve.yaml"), "--output_dir", str(tmp_path)]) == 2
        assert "Another evolve loop" in capsys.readouterr().err
    with loop_lock(tmp_path):  # released
        pass


# -- promotion, rollback, a kill before the promotion ------------------------------------------------
def _adapter(out: Path, *, degraded: bool) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(7)
    base = AutoModelForCausalLM.from_pretrained(str(TINY_POLICY))
    config = LoraConfig(r=32, lora_alpha=64, target_modules=TARGETS, init_lora_weights=not degraded)
    model = get_peft_model(base, config)
    if degraded:  # far from the committed weights: the policy's tool calls fall apart
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_" in name:
                    p.normal_(0.0, 0.3)
    model.save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def adapters(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("evolve-adapters")
    return {"degraded": _adapter(root / "degraded", degraded=True), "zero": _adapter(root / "zero", degraded=False)}


def _answers(url: str, model: str) -> list[str]:
    out = []
    for prompt in PROMPTS:
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": 24}
        r = httpx.post(f"{url}/chat/completions", timeout=60, json=body)
        assert r.status_code == 200, r.text
        out.append(r.json()["choices"][0]["message"]["content"] or json.dumps(r.json()["choices"][0]["message"]))
    return out


def _flags(out: Path, url: str, **extra: Any) -> list[str]:
    settings = {"config": ROOT / "examples" / "evolve.yaml", "output_dir": out, "policy_base_url": url,
                "served_name": "agent-" + out.name, "heldout_limit": 10, "heldout_k": 2, "questioning_n": 0,
                "bootstrap_resamples": 500, "test_limit": 4, **extra}  # fmt: skip
    return [x for k, v in settings.items() for x in (f"--{k}", str(v))]


def _last_json(text: str) -> dict[str, Any]:
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def test_a_better_candidate_is_promoted_a_worse_one_is_not_and_rollback_restores(tiny_policy_url, adapters,
                                                                                  tmp_path, capsys):  # fmt: skip
    out, name = tmp_path / "loop", "agent-loop"
    flags = _flags(out, tiny_policy_url, init_adapter=adapters["degraded"])
    assert main(["consider", *flags, "--candidate", str(adapters["zero"])]) == 0
    better = _last_json(capsys.readouterr().out)
    assert better["promoted"] and better["lower_bound"] > 0.0 and better["paired_gain"] > 0.3, better
    assert better["production"] == "v001" and better["incumbent"] == "v000"
    committed = _answers(tiny_policy_url, "tiny-policy")
    assert _answers(tiny_policy_url, name) == committed  # the stable name serves the promoted (zero) adapter
    record = State(out).cycles[0]
    assert record["gate"]["min_tasks"] == 10 and record["gate"]["tasks"] == 10  # the configured held-out tasks
    gated = json.loads((out / "cycles" / "001" / "eval_candidate" / "summary.json").read_text())
    assert gated["split"] == "validation" and gated["seed"] == 1234  # the gate never sees test
    tested = {v: json.loads((out / "test" / v / "summary.json").read_text()) for v in ("v000", "v001")}
    assert {(t["split"], t["seed"], t["tasks"]) for t in tested.values()} == {("test", 4321, 4)}  # its own seeds
    assert better["test_avg"] == tested["v001"]["avg@2"] and record["test"]["incumbent_avg"] == tested["v000"]["avg@2"]
    assert better["test_gain"] > 0, better

    assert main(["consider", *flags, "--candidate", str(adapters["degraded"])]) == 0
    worse = _last_json(capsys.readouterr().out)
    assert not worse["promoted"] and worse["paired_gain"] < 0 and worse["production"] == "v001", worse
    assert worse["test_avg"] == better["test_avg"] and "test_gain" not in worse  # production's figure, read back
    assert "not above min_gain" in worse["reason"]
    assert _answers(tiny_policy_url, name) == committed
    assert name + "-c002" not in [m["id"] for m in httpx.get(f"{tiny_policy_url}/models").json()["data"]]

    assert main(["status", "--output_dir", str(out)]) == 0
    table = capsys.readouterr().out
    assert "production: v001" in table and "promote  v000 -> v001" in table

    assert main(["rollback", *flags]) == 0
    assert _last_json(capsys.readouterr().out) == {"production": "v000", "served": True}
    degraded = _answers(tiny_policy_url, name)
    assert degraded != committed
    load = {"lora_name": "degraded-ref", "lora_path": str(adapters["degraded"])}
    httpx.post(f"{tiny_policy_url}/load_lora_adapter", timeout=60, json=load).raise_for_status()
    assert degraded == _answers(tiny_policy_url, "degraded-ref")
    state = State(out)
    assert [e["action"] for e in state.data["events"]] == ["init", "promote", "rollback"]
    assert (out / "evolve.png").stat().st_size > 5000
    assert main(["rollback", *flags]) == 2  # nothing served before v000
    assert "Nothing to roll back to" in capsys.readouterr().err


def test_a_kill_between_the_gate_and_the_promotion_resumes_without_a_double_promotion(tiny_policy_url, adapters,
                                                                                       tmp_path, capsys):  # fmt: skip
    out = tmp_path / "killed"
    flags = _flags(out, tiny_policy_url, init_adapter=adapters["degraded"])
    env = {**os.environ, FAILPOINT_ENV: "promote"}
    command = [sys.executable, "-m", "trainers.evolve", "consider", *flags, "--candidate", str(adapters["zero"])]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    state = State(out)
    assert state.cycles[0]["phase"] == "promote" and state.production["version"] == "v000"
    assert state.cycles[0]["gate"]["promote"]

    assert main(["--cycles", "1", *flags]) == 0  # finishes the open cycle, and only it
    line = _last_json(capsys.readouterr().out)
    assert line["cycle"] == 1 and line["promoted"] and line["production"] == "v001"
    state = State(out)
    assert [e["action"] for e in state.data["events"]] == ["init", "promote"]
    assert len(state.cycles) == 1 and state.cycles[0]["phase"] == "done"
    assert _answers(tiny_policy_url, "agent-killed") == _answers(tiny_policy_url, "tiny-policy")


class Crash(BaseException):
    """A loop dying where a failpoint says (in-process, so the fake LangSmith client stays in place)."""


# -- one end-to-end cycle: LangSmith traces -> tasks -> GRPO from the production adapter -> gate ---
def test_one_cycle_from_langsmith_traces_to_a_gated_candidate(tiny_policy_url, tmp_path, capsys, monkeypatch):
    import langgraph_evolver.tracing as tracing
    import trainers.evolve.loop as loop_module
    from langgraph_evolver.ingest.sources import read_jsonl_traces
    from langgraph_evolver.tracing import JsonlTracer, langsmith, read_feedback, read_runs
    from tests._fake_langsmith import fake_langsmith
    from tests.test_ingest import record_sandbox
    from tests.test_tracing_langsmith import client_for

    recorded = tmp_path / "traces.jsonl"
    with JsonlTracer(recorded) as tracer:
        tasks, _ = record_sandbox([tracer])
    out = tmp_path / "e2e"
    train = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1, "num_generations": 2,
             "max_turns": 5, "level_weights": "", "report_to": [], "use_peft": True, "sync_mode": "lora",
             "learning_rate": 5e-4}  # fmt: skip
    with fake_langsmith() as fake:
        fake.add_runs(read_runs(recorded), project="agent-prod")
        for record in read_feedback(recorded):
            fake.add_feedback(record["run_id"], record["key"], record["score"])
        monkeypatch.setattr(langsmith, "_CLIENT", client_for(fake))
        monkeypatch.setattr(tracing, "langsmith_enabled", lambda: True)  # the loop's experiments; not the child's
        argv = [*_flags(out, tiny_policy_url, traces_project="agent-prod", steps_per_cycle=2, heldout_limit=6,
                        synthetic_ratio=1.0), "--train", json.dumps(train), "--cycles", "1"]  # fmt: skip

        def crash(phase: str) -> None:  # the loop dies as it enters the evaluation: after training
            if phase == "evaluate":
                raise Crash

        monkeypatch.setattr(loop_module, "failpoint", crash)
        with pytest.raises(Crash):
            main(argv)
        assert State(out).cycles[0]["phase"] == "evaluate"
        monkeypatch.undo()
        monkeypatch.setattr(langsmith, "_CLIENT", client_for(fake))
        monkeypatch.setattr(tracing, "langsmith_enabled", lambda: True)
        code = main(argv)  # resumes at the evaluation: no second training, no second ingest
        line = _last_json(capsys.readouterr().out)
        assert code == 0, line
        datasets = [d["name"] for d in fake.datasets.values()]
        experiments = [s["name"] for s in fake.sessions.values()]
    assert line["tasks_ingested"] == 2 and line["train_steps"] == 2
    assert {"paired_gain", "lower_bound", "promoted"} <= set(line) and line["heldout_tasks"] == 6
    state = State(out)
    record = state.cycles[0]
    assert record["phase"] == "done" and record["data"]["traces_new"] == len(list(read_jsonl_traces(recorded)))
    assert record["langsmith"] and set(record["langsmith"]["experiments"]) == {
        "cycle001-incumbent",
        "cycle001-candidate",
    }
    assert "evolve-sandbox-validation" in datasets
    assert {e.split("/")[1] for e in experiments if e.startswith("evolve-sandbox-validation/")} == {
        "cycle001-incumbent",
        "cycle001-candidate",
    }
    config = (out / "cycles" / "001" / "train_config.yaml").read_text()
    assert "init_adapter: " + str(out / "adapters" / "v000") in config and "task_store:" in config
    rows = [json.loads(x) for f in sorted((out / "cycles" / "001" / "train" / "trajectories").glob("*.jsonl"))
            for x in f.read_text().splitlines()]  # fmt: skip
    assert rows and {r["task"]["query"] for r in rows} <= {t.query for t in tasks[:2]}  # trained on the traces
    assert not list((out / "cycles" / "001" / "train").glob("checkpoint-*"))  # pruned
    metrics = [json.loads(m) for m in (out / "cycles" / "001" / "train" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "loss" in m] == [1, 2]  # trained once, before the crash
    assert state.data["watermark"] and len(state.data["watermark"]["ids"]) >= 1

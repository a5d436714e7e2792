"""avg@k / best@k / success / well-formed figures on hand-made trajectories."""

from __future__ import annotations

import io

import pytest

from langgraph_evolver.scoring import well_formed_counts
from langgraph_evolver.types import Action, Step, Task, ToolCall, Trajectory
from trainers.evaluate import paired_gain, print_report, summarize, task_means

CALL = Action(tool_calls=(ToolCall(name="get_balance", arguments={}),))


def traj(task_id: str, level: int, reward: float, steps: list[Step]) -> Trajectory:
    task = Task(id=task_id, query="q", metadata={"level": level, "template": "t"})
    return Trajectory(id=f"{task_id}/{reward}", task=task, steps=tuple(steps), reward=reward)


def test_summary_figures_by_hand():
    good, bad, answer = (
        Step(index=0, action=CALL),
        Step(index=0, action=Action(content="<tool_call>{"), error="x"),
        Step(index=1, action=Action(content="42")),
    )
    trajs = [
        traj("a", 1, 1.0, [good, answer]),
        traj("a", 1, 0.0, [bad, answer]),
        traj("b", 1, 0.5, [good, good, answer]),
        traj("b", 1, 0.5, [good, answer]),
        traj("c", 3, 0.25, [bad, bad, good]),
        traj("c", 3, 0.0, [good]),
    ]
    assert well_formed_counts(trajs) == (6, 9)  # final answers are not call attempts
    out = summarize(trajs, k=2)
    assert out["level1"] == {"avg@2": 0.5, "best@2": 0.75, "success": 0.25, "well_formed_calls": 0.8, "samples": 4}
    assert out["level3"]["avg@2"] == pytest.approx(0.125) and out["level3"]["best@2"] == 0.25
    assert out["level3"]["well_formed_calls"] == pytest.approx(0.5)
    assert out["all"]["best@2"] == pytest.approx((1.0 + 0.5 + 0.25) / 3, abs=1e-4)
    assert out["all"]["success"] == pytest.approx(1 / 6, abs=1e-4)
    assert out["errors"] == 0
    means = task_means(trajs)
    assert means == {"a": 0.5, "b": 0.5, "c": 0.125}
    # paired over the tasks both evaluations saw: diffs +0.5, 0, +0.125 (task "d" only after: ignored)
    gain, se = paired_gain(means, {"a": 1.0, "b": 0.5, "c": 0.25, "d": 1.0})
    assert gain == pytest.approx(0.2083, abs=1e-4) and se == pytest.approx(0.1502, abs=1e-4)
    assert paired_gain(means, {}) == (0.0, 0.0)
    text = io.StringIO()
    print_report(trajs, out, 2, file=text)
    assert "a " in text.getvalue() and "1.00 0.00  best 1.00" in text.getvalue()


def test_config_and_adapter_flags(tmp_path, tiny_policy_url, capsys):
    """`--config` takes a training config's settings (flags win); `--adapter` evaluates a LoRA adapter."""
    import json

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from tests.conftest import TINY_POLICY
    from trainers.evaluate import config_defaults, main

    cfg = tmp_path / "train.yaml"
    cfg.write_text("model_name_or_path: checkpoints/tiny-policy\noutput_dir: runs/x\nmax_turns: 3\neval_k: 2\n"
                   "lora_r: 8\nenv_id: sandbox\n")  # fmt: skip
    assert config_defaults(cfg) == {"model_path": "checkpoints/tiny-policy", "env": "sandbox", "k": 2, "max_turns": 3,
                                    "output_dir": "runs/x/evaluate"}  # fmt: skip
    adapter = tmp_path / "adapter"
    get_peft_model(AutoModelForCausalLM.from_pretrained(str(TINY_POLICY)), LoraConfig(r=2)).save_pretrained(adapter)
    figures = main(["--config", str(cfg), "--base-url", tiny_policy_url, "--adapter", str(adapter), "--limit", "2",
                    "--k", "1", "--output-dir", str(tmp_path / "out"), "--quiet"])  # fmt: skip
    assert figures["model"].startswith("adapter-") and figures["k"] == 1 and figures["all"]["samples"] == 2
    import httpx

    root = tiny_policy_url.removesuffix("/v1")  # the server is shared by the session: leave it as found
    assert httpx.post(f"{root}/v1/unload_lora_adapter", json={"lora_name": figures["model"]}).status_code == 200
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["model"] == figures["model"]
    with pytest.raises(SystemExit):
        main(["--config", str(tmp_path / "missing.yaml")])


def test_failed_rollouts_are_counted_apart_not_scored_zero():
    good, answer = Step(index=0, action=CALL), Step(index=1, action=Action(content="42"))
    outage = "rollout crashed: OpenAIAPIError: Error code: 500 - boom"
    crashed = Trajectory(id="b/x", task=Task(id="b", query="q", metadata={"level": 1}), steps=(), reward=0.0,
                         finish_reason="error", errors=(outage,))  # fmt: skip
    overflow = Trajectory(id="a/o", task=Task(id="a", query="q", metadata={"level": 1}), steps=(good,), reward=None,
                          finish_reason="error", errors=("maximum context length is 64 tokens",))  # fmt: skip
    router_429 = Step(index=1, action=Action(), error="RateLimitError: 429", policy=False)
    trajs = [traj("a", 1, 1.0, [good, router_429, answer]), overflow, traj("b", 1, 0.5, [good, answer]), crashed]
    out = summarize(trajs, k=2)
    # the crash is not a wrong answer: left out of every figure, counted with its error; the context overflow
    # is the policy's own failure and scores 0
    assert out["all"]["samples"] == 3 and out["all"]["avg@2"] == pytest.approx(0.5)
    assert out["failed"] == 1 and out["failed_share"] == 0.25 and "Error code: 500" in out["first_failure"]
    assert task_means(trajs) == {"a": 0.5, "b": 0.5}
    assert well_formed_counts(trajs) == (3, 3)  # the router's failed call is not the policy's malformed call
    text = io.StringIO()
    print_report(trajs, out, 2, file=text)
    assert "0.50 fail" in text.getvalue() and "failed rollouts (not scored" in text.getvalue()


def test_evaluate_exits_non_zero_when_the_endpoint_fails(tmp_path, capsys):
    from tests.conftest import TINY_POLICY
    from trainers.evaluate import main
    from trainers.policy_server import create_app, serve_in_background

    app = create_app(str(TINY_POLICY), served_model_name="tiny-policy", seed=0)

    def broken(rows, model):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    app.state.engine.prefill = broken
    with serve_in_background(app) as url:
        with pytest.raises(SystemExit) as stopped:
            main(["--base-url", f"{url}/v1", "--limit", "2", "--k", "2", "--output-dir", str(tmp_path), "--quiet"])
    assert stopped.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "4 of 4 rollouts of the evaluation failed outside the policy" in err and "illegal memory access" in err
    import json

    summary = json.loads((tmp_path / "summary.json").read_text())  # written all the same, with the failures apart
    assert summary["failed"] == 4 and summary["all"]["samples"] == 0


def test_task_store_evaluates_the_stored_tasks(tmp_path, capsys):
    """`--task_store` evaluates what a self-questioning run stored, not the split; `--limit` cuts it."""
    import json

    from langgraph_evolver.environment import load_environment
    from langgraph_evolver.questioning import TaskStore
    from trainers.evaluate import main

    stored = load_environment("sandbox").list_tasks("train")[3:6]  # not the test split's first tasks
    with TaskStore(tmp_path / "tasks.sqlite") as store:
        store.add_many(stored)
    figures = main(["--reference-policy", "--task-store", str(tmp_path / "tasks.sqlite"), "--limit", "2", "--k", "1",
                    "--output-dir", str(tmp_path / "out"), "--quiet"])  # fmt: skip
    assert figures["tasks"] == 2 and figures["task_store"] == str(tmp_path / "tasks.sqlite")
    rows = [json.loads(line) for line in (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(r["task"]["id"] for r in rows) == sorted(t.id for t in stored[:2])
    assert figures["all"]["avg@1"] == 1.0  # the reference solutions, scored by the environment
    with pytest.raises(SystemExit) as stopped:
        main(["--task_store", str(tmp_path / "missing.sqlite"), "--output-dir", str(tmp_path / "x")])
    assert stopped.value.code == 2 and "does not exist" in capsys.readouterr().err

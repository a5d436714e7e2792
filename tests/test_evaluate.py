"""avg@k / best@k / success / well-formed figures on hand-made trajectories."""

from __future__ import annotations

import io

import pytest

from langgraph_evolver.types import Action, Step, Task, ToolCall, Trajectory
from trainers.evaluate import paired_gain, print_report, summarize, task_means, well_formed_counts

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

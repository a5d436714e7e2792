"""The learning benchmark's figures on hand-made curves and runs (the runs themselves take an hour)."""

from __future__ import annotations

import json

import pytest

from benchmarks import learning


def test_eval_grid_always_ends_at_the_last_step():
    assert learning.eval_grid(30, 10) == [0, 10, 20, 30]
    assert learning.eval_grid(15, 10) == [0, 10, 15]


def test_steps_to_threshold_interpolates_and_says_never():
    xs = [0, 10, 20]
    assert learning.steps_to(xs, [0.5, 0.6, 0.8], 0.7) == pytest.approx(15.0)
    assert learning.steps_to(xs, [0.75, 0.6, 0.8], 0.7) == 0.0
    assert learning.steps_to(xs, [0.5, 0.6, 0.65], 0.7) is None
    assert learning.ratio(5.0, 10.0) == 0.5
    assert learning.ratio(5.0, 0.0) is None and learning.ratio(None, 3.0) is None


def test_auc_is_the_mean_score_over_training_and_above_a_base():
    assert learning.auc([0, 10, 20], [0.5, 0.7, 0.7]) == pytest.approx((6.0 + 7.0) / 20)
    assert learning.auc([0, 10, 20], [0.5, 0.7, 0.7], base=0.5) == pytest.approx((1.0 + 2.0) / 20)


def _run(tmp_path, name: str, rewards: list[float], no_signal: list[float], *, adca: bool):
    run = tmp_path / name
    run.mkdir()
    lines = [{"step": 1, "loss": 0.0}]  # rows without a reward (TRL's other logs) are skipped
    for step, (r, z) in enumerate(zip(rewards, no_signal, strict=True), start=1):
        row = {"step": step, "reward": r, "zero_variance_share": 0.5}
        if adca:
            row["adca/no_signal_share"] = z
        lines.append(row)
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in reversed(lines)))
    return learning.train_curves(run)


def test_paired_training_figures_skip_step_one_and_compare_signal(tmp_path):
    train = {
        "grpo": {0: _run(tmp_path, "g0", [0.1, 0.5, 0.6], [0.5] * 3, adca=False),
                 1: _run(tmp_path, "g1", [0.9, 0.4, 0.4], [0.5] * 3, adca=False)},
        "adca": {0: _run(tmp_path, "a0", [0.9, 0.6, 0.7], [0.3] * 3, adca=True),
                 1: _run(tmp_path, "a1", [0.1, 0.4, 0.6], [0.4] * 3, adca=True)},
    }  # fmt: skip
    assert train["grpo"][0]["reward"] == [0.1, 0.5, 0.6]  # sorted by step
    figs = learning.paired_train_figures(train, [0, 1])
    # seed 0: (0.1 + 0.1) / 2, seed 1: (0 + 0.2) / 2 -- step 1's +-0.8 is left out
    assert figs["adca_train_reward_gain_per_seed"] == pytest.approx([0.1, 0.1])
    assert figs["adca_train_reward_gain"] == pytest.approx(0.1)
    assert figs["adca_train_reward_gain_se"] == pytest.approx(0.0)
    assert figs["grpo_no_signal_share"] == 0.5 and figs["adca_no_signal_share"] == pytest.approx(0.35)


def test_evaluations_are_cached_per_settings(tmp_path, monkeypatch):
    calls = []

    def fake_evaluate(base_url, tasks, checkpoint, model, ev, base_path=None):
        calls.append(model)
        return {"avg": 0.5 + len(calls) / 10}

    class T:
        def __init__(self, id):
            self.id = id

    monkeypatch.setattr(learning, "evaluate", fake_evaluate)
    cache, ev, tasks = tmp_path / "e.json", {"k": 4}, [T("a"), T("b")]
    first = learning.cached_evaluate(cache, True, "u", tasks, None, "m", ev)
    assert learning.cached_evaluate(cache, True, "u", tasks, None, "m", ev) == first and len(calls) == 1
    assert learning.cached_evaluate(cache, False, "u", tasks, None, "m", ev) != first  # no --reuse: evaluate again
    learning.cached_evaluate(cache, True, "u", tasks, None, "m", {"k": 8})  # other settings: evaluate again
    assert len(calls) == 3
    learning.cached_evaluate(cache, True, "u", tasks, None, "m", {"k": 8}, tmp_path)  # another start policy: again
    assert len(calls) == 4


def test_the_start_policy_follows_model_name_or_path_among_the_trainer_flags(tmp_path):
    default, other = tmp_path / "default", tmp_path / "other"
    for d in (default, other):
        d.mkdir()
        (d / "config.json").write_text("{}")
    assert learning.start_policy(["--learning_rate", "1e-3"], default) == default.resolve()
    assert learning.start_policy(["--model_name_or_path", str(other)], default) == other.resolve()
    assert learning.start_policy([f"--model_name_or_path={other}", "--seed", "1"], default) == other.resolve()
    with pytest.raises(SystemExit, match="no config.json"):
        learning.start_policy(["--model_name_or_path", str(tmp_path)], default)


def test_arm_figures_for_every_variant_against_grpo():
    xs = [0, 10, 20]
    curves = {"grpo": {0: [0.5, 0.6, 0.7], 1: [0.5, 0.6, 0.7]},
              "navigating": {0: [0.5, 0.7, 0.8], 1: [0.5, 0.65, 0.76]},
              "questioning": {0: [0.5, 0.5, 0.5], 1: [0.5, 0.5, 0.52]}}  # fmt: skip
    mean = {v: [sum(c[i] for c in cs.values()) / 2 for i in range(3)] for v, cs in curves.items()}
    figs = learning.arm_figures(xs, mean, curves, {"gain": 0.68, "score": 0.63}, "gain")
    assert figs["grpo_steps_to_threshold"] == pytest.approx(18.0)  # 0.6 at 10, 0.7 at 20
    assert figs["navigating_steps_ratio"] == pytest.approx(round(figs["navigating_steps_to_threshold"] / 18.0, 3))
    assert figs["questioning_steps_to_threshold"] is None and figs["questioning_steps_ratio"] is None
    assert figs["navigating_final_gain"] == pytest.approx(0.08) and figs["navigating_final_gain_se"] == pytest.approx(
        0.02
    )
    assert figs["questioning_final_gain"] == pytest.approx(-0.19)
    assert "threshold_score" in figs and "navigating_steps_ratio_score" in figs


def test_arm_flags(tmp_path):
    from types import SimpleNamespace

    from env_tools.sandbox.tasks import seed_tasks
    from langgraph_evolver.questioning import TaskStore

    args = SimpleNamespace(alpha=0.2)
    assert learning.arm_args("grpo", args) == []
    assert json.loads(learning.arm_args("adca", args)[1]) == {"alpha": 0.2, "judge": "reference"}
    assert json.loads(learning.arm_args("navigating", args)[1])["enabled"] is True
    args.out, args.synthetic_n, args.synthetic_per_world = tmp_path, 2, 1
    with TaskStore(tmp_path / "synthetic-2-per1.sqlite") as store:
        store.add_many(seed_tasks("train")[:2])
    assert learning.arm_args("questioning", args)[-2:] == ["--synthetic_ratio", "1.0"]
    assert learning.arm_args("mixed", args) == ["--task_store", str(tmp_path / "synthetic-2-per1.sqlite"),
                                                "--synthetic_ratio", "0.5"]  # fmt: skip
    with pytest.raises(SystemExit, match="unknown variant"):
        learning.arm_args("magic", args)


def test_full_weight_checkpoints_are_found_served_and_restored(tmp_path, tiny_policy_url, monkeypatch):
    """A LoRA-free run's checkpoint is evaluated through /update_weights_from_disk; the base serves again after."""
    import argparse

    import httpx
    import torch
    from transformers import AutoModelForCausalLM

    import trainers.evaluate as trainer_eval
    from langgraph_evolver.environment import load_environment
    from tests.conftest import TINY_POLICY

    ckpt = tmp_path / "grpo-s0" / "checkpoint-2"
    model = AutoModelForCausalLM.from_pretrained(TINY_POLICY)
    with torch.no_grad():
        model.lm_head.weight.mul_(0.5)
    model.save_pretrained(ckpt)
    args = argparse.Namespace(out=tmp_path, steps=2)
    assert learning.checkpoint_dir("grpo", 0, 2, args) == ckpt
    with pytest.raises(SystemExit, match="no checkpoint for step 1"):
        learning.checkpoint_dir("grpo", 0, 1, args)

    def fingerprint() -> str:
        body = {"model": "tiny-policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        return httpx.post(f"{tiny_policy_url}/chat/completions", json=body, timeout=60).json()["system_fingerprint"]

    seen, real = [], trainer_eval.evaluate_endpoint

    async def spy(*a, **kw):
        seen.append(fingerprint())
        return await real(*a, **kw)

    monkeypatch.setattr(trainer_eval, "evaluate_endpoint", spy)
    env = load_environment("sandbox")
    tasks = env.list_tasks("test")[:2]
    env.close()
    ev = {"k": 1, "temperature": 1.0, "max_tokens": 32, "max_turns": 2, "concurrency": 2}
    result = learning.evaluate(tiny_policy_url, tasks, ckpt, "tiny-policy", ev, base_path=TINY_POLICY)
    assert result["samples"] == 2 and 0.0 <= result["avg"] <= 1.0
    assert seen == ["grpo-s0-checkpoint-2"]  # the step's weights answered the evaluation
    assert fingerprint() == "base"  # and the base weights are back
    with pytest.raises(SystemExit, match="needs base_path"):
        learning.evaluate(tiny_policy_url, tasks, ckpt, "tiny-policy", ev)


def test_the_questioning_store_is_named_by_tasks_per_world_and_counts_its_worlds(tmp_path):
    from types import SimpleNamespace

    from env_tools.sandbox.tasks import seed_tasks
    from langgraph_evolver.questioning import TaskStore

    args = SimpleNamespace(out=tmp_path, synthetic_n=3, synthetic_per_world=1)
    with TaskStore(tmp_path / "synthetic-3-per1.sqlite") as store:  # a complete store is reused, not remade
        store.add_many(seed_tasks("train")[:3])
    assert learning.synthetic_store(args) == tmp_path / "synthetic-3-per1.sqlite"
    assert learning.synthetic_worlds(args) == 3  # one seed task per world
    made = learning.synthetic_store(SimpleNamespace(**{**vars(args), "synthetic_per_world": 20}))  # synthesized
    with TaskStore(made) as store:
        assert made.name == "synthetic-3.sqlite" and len(store) == 3


@pytest.mark.parametrize("arms", [("grpo", "adca"), ("grpo", "questioning")])
def test_the_plot_is_drawn_with_and_without_a_paired_arm(tmp_path, arms):
    xs, curves = [0, 10], {v: {0: [0.5, 0.6], 1: [0.5, 0.55]} for v in arms}
    mean = {v: [0.5, 0.575] for v in arms}
    train = {v: {0: {"reward": [0.1, 0.2, 0.3]}, 1: {"reward": [0.2, 0.2]}} for v in arms}
    learning.plot(tmp_path / "l.png", xs, curves, mean, 0.56, 4, "t", train)
    assert (tmp_path / "l.png").stat().st_size > 10_000

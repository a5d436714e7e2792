"""Bad configs stop `python -m trainers.grpo` with one clear line, exit code 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--env_id", "no_such_env"], "Unknown environment 'no_such_env'"),
        (["--model_name_or_path", "/nonexistent/model"], "not a local directory and HF_HUB_OFFLINE=1"),
        (["--policy_base_url", "http://127.0.0.1:9/v1"], "unreachable or not OpenAI-compatible"),
        (["--top_p", "0.9"], "keep top_k=0, top_p=1.0"),
        (["--use_peft", "false", "--sync_mode", "lora"], "set use_peft: true"),
        (["--num_generations", "1"], "at least 2 generations"),
        (["--per_device_train_batch_size", "3", "--gradient_accumulation_steps", "1"], "divisible by num_generations"),
        (["--level_weights", "1:x"], "level_weights='1:x' is not valid"),
        (["--level_weights", "1:0,2:0,3:0"], "at least one > 0"),
        (["--task_split", "nope"], "Unknown split 'nope'"),
        (["--use_peft", "true", "--sync_mode", "full"], "sync_mode=full"),
        (["--navigation", '{"eta": 2}'], "navigation.eta=2 must be in [0, 1]"),
        (["--navigation", '{"mode": "drop"}'], "navigation.mode='drop' must be 'strip'"),
        (["--navigation", '{"topk": 3}'], "navigation has unknown keys ['topk']"),
        (["--context_template", "nope"], "Unknown context template 'nope'"),
        (["--task_store", "/nonexistent/tasks.sqlite"], "task_store=/nonexistent/tasks.sqlite does not exist"),
        (["--synthetic_ratio", "1.5"], "synthetic_ratio=1.5 must be in [0, 1]"),
        (["--context_template", "sliding", "--context_options", '{"window": 0}'], "at least 1 turn"),
        (["--attribution", '{"alfa": 0.1}'], "attribution has unknown keys ['alfa']"),
        (["--attribution", '{"alpha": 1.5}'], "attribution.alpha=1.5 must be in [0, 1]"),
        (["--attribution", '{"process_standardization": "steps"}'], "process_standardization='steps' must be"),
        (["--attribution", '{"judge": "no_such_provider:some-model"}'], "no_such_provider:some-model"),
        (["--agent", "no_such_pkg.agent:build"], "Cannot import 'no_such_pkg.agent' for --agent"),
        (["--agent", "examples.dropin.agent:nope"], "'examples.dropin.agent' has no 'nope' for --agent"),
        (["--agent_input", "noattr"], "must look like 'my_pkg.module:name'"),
    ],
)
def test_bad_config_fails_with_the_intended_message(flags, message, tmp_path, capsys, monkeypatch):
    from trainers.grpo import cli

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        cli(["--config", QUICKSTART, "--output_dir", str(out), *flags])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert message in err, err
    assert err.strip().startswith("error:")
    assert not out.exists(), "nothing may be written for a config that cannot run"


@pytest.mark.parametrize("where", ["flag", "yaml"])
def test_an_unknown_policy_server_dtype_is_refused(where, tmp_path, capsys, monkeypatch):
    from trainers.grpo import cli

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "run"
    config = Path(QUICKSTART)
    flags = ["--policy_server_dtype", "float16"] if where == "flag" else []
    if where == "yaml":
        config = tmp_path / "config.yaml"
        config.write_text(Path(QUICKSTART).read_text() + "\npolicy_server_dtype: float16\n")
    with pytest.raises(SystemExit) as exc:
        cli(["--config", str(config), "--output_dir", str(out), *flags])
    assert exc.value.code == 2
    assert "float16" in (err := capsys.readouterr().err) and "bfloat16" in err, err
    assert not out.exists()


def test_level_weights_repeat_tasks_deterministically():
    from langgraph_evolver.environment import load_environment
    from trainers.config import parse_level_weights
    from trainers.grpo import task_dataset

    tasks = load_environment("sandbox").list_tasks("train")
    weights = parse_level_weights("1:0,2:1,3:2.5")
    ds = task_dataset(tasks, weights)
    by_level = {lvl: sum(t.metadata["level"] == lvl for t in tasks) for lvl in (1, 2, 3)}
    import json

    levels = [json.loads(r)["metadata"]["level"] for r in ds["task"]]
    assert levels.count(1) == 0 and levels.count(2) == by_level[2]
    assert 2 * by_level[3] < levels.count(3) < 3 * by_level[3]
    assert task_dataset(tasks, weights)["task"] == ds["task"]  # same on every rank / run


def test_full_sync_config_needs_vllm_only_for_nccl(tmp_path):
    from langgraph_evolver.errors import ConfigError
    from trainers.config import EvolverGRPOConfig

    common = {"output_dir": str(tmp_path), "report_to": "none", "per_device_train_batch_size": 2,
              "num_generations": 2}  # fmt: skip
    cfg = EvolverGRPOConfig(sync_mode="full", **common)  # disk (the default transport): no vLLM needed
    assert cfg.full_sync_transport == "disk" and not cfg.use_vllm
    with pytest.raises(ConfigError, match="full_sync_transport=nccl uses TRL's vLLM weight transfer"):
        EvolverGRPOConfig(sync_mode="full", full_sync_transport="nccl", **common)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"loss_type": "grpo", "beta": 0.001}, "loss_type=grpo normalizes per sequence"),
        ({"loss_type": "vespo", "beta": 0.0}, "loss_type=vespo weighs each row"),
        ({"importance_sampling_level": "sequence"}, "importance_sampling_level=sequence (GSPO)"),
        ({"off_policy_mask_threshold": 0.5}, "off_policy_mask_threshold drops whole rows"),
    ],
)
def test_loss_types_that_cannot_be_exact_are_refused(tmp_path, overrides, message):
    from langgraph_evolver.errors import ConfigError
    from trainers.config import EvolverGRPOConfig

    common = {"output_dir": str(tmp_path), "report_to": "none", "per_device_train_batch_size": 2,
              "num_generations": 2}  # fmt: skip
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        EvolverGRPOConfig(**common, **overrides)
    if "importance_sampling_level" in overrides or "off_policy_mask_threshold" in overrides:  # one row per call
        EvolverGRPOConfig(**common, **overrides, merge_prefix_transitions=False)
    EvolverGRPOConfig(**common, loss_type="grpo", beta=0.0)  # exact through per-call weights


def test_the_vllm_qwen_example_is_a_valid_config_with_its_commands(tmp_path):
    from trainers.grpo import make_parser

    path = Path(QUICKSTART).parent / "vllm_qwen.yaml"
    header = "".join(line for line in path.read_text().splitlines(keepends=True) if line.startswith("#"))
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 vllm serve Qwen/Qwen2.5-7B-Instruct" in header
    assert "--logprobs-mode processed_logprobs" in header and "--max-lora-rank 64" in header
    assert "accelerate launch" in header and "--config examples/vllm_qwen.yaml" in header
    script, cfg, model_args = make_parser().parse_args_and_config(
        ["--config", str(path), "--output_dir", str(tmp_path), "--bf16", "false"]  # bf16 needs the GPU it names
    )
    assert model_args.model_name_or_path == cfg.policy_model == "Qwen/Qwen2.5-7B-Instruct"
    assert model_args.use_peft and model_args.lora_r == 64 and cfg.sync_mode == "lora"
    assert cfg.importance_correction == "tis" and cfg.max_tokens_per_microbatch == 32768


def test_gain_table_names_the_split_it_evaluated():
    from trainers.run_report import gain_table

    figures = {"eval_before_avg": 0.5, "eval_after_avg": 0.6, "eval_delta_avg": 0.1, "eval_delta_se": 0.02,
               "eval_level3_avg": [0.25, 0.5], "eval_before_success": 0.4, "eval_after_success": 0.45,
               "eval_before_well_formed": 0.9, "eval_after_well_formed": 0.95}  # fmt: skip
    held_out = gain_table(figures, 75, 4)
    assert held_out.splitlines()[0] == "held-out (75 tasks x 4): avg@4 0.500 -> 0.600 (+0.100 ± 0.020)"
    assert "  level3: avg@4 0.250 -> 0.500 (+0.250)" in held_out and "  success: 0.400 -> 0.450 (+0.050)" in held_out
    assert gain_table(figures, 75, 4, split="validation").startswith("validation split (75 tasks x 4)")


def test_a_loss_type_with_no_exactness_test_is_refused(tmp_path, monkeypatch):
    """A loss type TRL adds later is refused until the trainer keeps it exact (and a test shows it)."""
    import trl

    from langgraph_evolver.errors import ConfigError
    from trainers.config import EvolverGRPOConfig
    from trainers.samples import SEQUENCE_NORMALIZED_LOSSES, TOKEN_SUMMED_LOSSES

    common = {"output_dir": str(tmp_path), "report_to": "none", "per_device_train_batch_size": 2,
              "num_generations": 2, "beta": 0.0}  # fmt: skip
    for loss_type in (*TOKEN_SUMMED_LOSSES, *SEQUENCE_NORMALIZED_LOSSES):
        EvolverGRPOConfig(**common, loss_type=loss_type, merge_prefix_transitions=loss_type != "vespo")
    monkeypatch.setattr(trl.GRPOConfig, "__post_init__", lambda self: None)  # as if TRL accepted a new name
    with pytest.raises(ConfigError, match="loss_type='gpg' is not one the trainer keeps exact"):
        EvolverGRPOConfig(**common, loss_type="gpg")


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("learning_rat: 1.0e-4\n", "unknown key `learning_rat` (did you mean `learning_rate`?)"),
        (
            "env: sandbox\n",
            "`env:` is TRL's key for environment variables (a mapping); the environment to train on "
            "is `env_id:` (env_id: sandbox)",
        ),  # fmt: skip
    ],
)
def test_a_config_key_error_names_the_key_and_the_nearest_valid_one(tmp_path, capsys, yaml_text, message):
    from trainers.grpo import cli

    config = tmp_path / "my.yaml"
    config.write_text("model_name_or_path: checkpoints/tiny-policy\n" + yaml_text)
    with pytest.raises(SystemExit) as stopped:
        cli(["--config", str(config), "--output_dir", str(tmp_path / "out")])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err.strip().splitlines()[-1]


def test_evaluate_flags_have_one_spelling_and_the_other_is_accepted_with_a_note(capsys):
    from trainers.evaluate import canonical_flags, make_parser

    argv = ["--agent-input", "m:f", "--reward=m:score", "--base_url", "http://x/v1", "--k", "2"]
    assert canonical_flags(argv, make_parser()) == ["--agent_input", "m:f", "--reward_fn=m:score", "--base_url",
                                                    "http://x/v1", "--k", "2"]  # fmt: skip
    assert "--agent-input -> --agent_input, --reward -> --reward_fn" in capsys.readouterr().err
    args = make_parser().parse_args(canonical_flags(argv, make_parser()))
    assert (args.agent_input, args.reward, args.base_url) == ("m:f", "m:score", "http://x/v1")

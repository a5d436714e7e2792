"""`init_adapter`: GRPO continues from an existing LoRA adapter (the evolve loop's "N steps from the production
adapter") instead of a fresh one, on the tiny policy: the endpoint serves it from the first rollout on, the trainer
agrees with the endpoint about it, the trained adapter moves a little away from it, and a resumed run goes on; an
adapter that cannot be trained from stops the run with one line before anything is written."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.conftest import LORA, TINY_POLICY
from tests.test_grpo_train import QUICKSTART, SMALL, _metrics
from tests.test_lora_sync import _perturb

pytest.importorskip("peft")

TARGETS = ["q_proj", "v_proj", "down_proj"]  # another shape than the quickstart's r=32 on 7 modules


def _adapter(path: Path, *, scale: float = 0.1, dropout: float = 0.0, **other_shape: int) -> dict:
    """A LoRA adapter of the tiny policy (r=4) whose B weights are random, so it answers unlike the base model;
    ``other_shape`` (hidden_size, num_hidden_layers): of another model of the same architecture instead."""
    import torch
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    if not other_shape:
        model = AutoModelForCausalLM.from_pretrained(str(TINY_POLICY))
    else:
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(TINY_POLICY), **other_shape))
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, target_modules=TARGETS))
    _perturb(model, scale)
    model.save_pretrained(str(path))
    return load_file(str(path / "adapter_model.safetensors"))


def _weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path / "adapter_model.safetensors"))


@pytest.mark.timeout(600)
def test_training_starts_from_the_adapter_and_resumes(tmp_path, capsys, caplog):
    import torch

    from langgraph_evolver.types import Trajectory, read_jsonl
    from trainers.grpo import cli

    init = _adapter(tmp_path / "production")
    out = tmp_path / "run"
    flags = ["--config", QUICKSTART, "--output_dir", str(out), *SMALL, "--init_adapter", str(tmp_path / "production"),
             "--eval_after", "false", "--eval_limit", "1", "--eval_k", "2", "--save_steps", "1",
             "--keep_adapter_versions", "2", "--beta", "0.001"]  # fmt: skip
    with caplog.at_level(logging.INFO, logger="trainers.grpo"):
        figures = cli([*flags, "--max_steps", "1"])
    assert figures["steps"] == 1 and figures["final_model"] == "tiny-policy-lora-step1"
    assert any("training the adapter's own LoRA shape (r 4, alpha 8" in r.getMessage() for r in caplog.records)
    # the evaluation before training is the adapter's, under a name of its own
    assert json.loads((out / "eval_before" / "summary.json").read_text())["model"] == "tiny-policy-init-adapter"

    # published before the first rollout, exactly as given; step 1's rollouts sampled from it
    served = _weights(out / "served_adapters" / "tiny-policy-lora-step0")
    assert not (out / "served_adapters" / "tiny-policy-lora-step0" / "ref").exists()  # TRL's frozen copy stays home
    assert served.keys() == init.keys() and all(torch.equal(served[k], init[k]) for k in init)
    first = [Trajectory.from_dict(d) for d in read_jsonl(out / "trajectories" / "step_00000.jsonl")]
    assert {t.steps[0].model for t in first if t.steps} == {"tiny-policy-lora-step0"}
    row = _metrics(out)[0]
    # the trainer computes the served adapter's logprobs (rollouts of the base model: a gap of ~7e-3)
    assert row["policy/logp_gap_mean"] < 1e-3, row
    assert row["grad_norm"] > 0, row

    # one optimizer step (lr 5e-4) moved the adapter a little: far closer to the start than to a fresh adapter (B=0)
    final = _weights(out / "final")
    assert final.keys() == init.keys()
    moved = sum(float((final[k] - init[k]).norm()) for k in init)
    b_norm = sum(float(final[k].norm()) for k in init if "lora_B" in k)
    assert 0 < moved < 0.1 * b_norm, (moved, b_norm)
    assert json.loads((out / "final" / "adapter_config.json").read_text())["r"] == 4
    card = (out / "final" / "README.md").read_text()
    assert "a LoRA adapter (r=4, alpha=8" in card and f"from the adapter `{tmp_path / 'production'}`" in card

    # resumed: the checkpoint's adapter (not the starting one) is published and served for step 2
    figures = cli([*flags, "--max_steps", "2", "--resume_from_checkpoint", "true", "--eval_before", "false"])
    assert figures["steps"] == 2
    rows = _metrics(out)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[1]["policy/logp_gap_mean"] < 1e-3 and rows[1]["policy/staleness_mean"] == 0, rows[1]
    resumed = _weights(out / "served_adapters" / "tiny-policy-lora-step1")
    assert all(torch.equal(resumed[k], final[k]) for k in final)


@pytest.mark.parametrize(
    ("kind", "flags", "message"),
    [
        ("lora", [], "continues training a LoRA adapter: set use_peft: true and sync_mode: lora"),
        ("empty", LORA, "has no adapter_config.json: pass a PEFT LoRA adapter directory"),
        ("bin", LORA, "holds only adapter_model.bin: endpoints load safetensors adapters only; re-save it"),
        ("narrow", LORA, "does not fit model_name_or_path="),
        ("shallow", LORA, "LoRA tensors and the model's LoRA parameters do not pair up"),
    ],
)
def test_an_adapter_that_cannot_be_trained_from_stops_the_run(kind, flags, message, tmp_path, capsys, recwarn):
    from trainers.grpo import cli

    adapter = tmp_path / "adapter"
    if kind in ("lora", "bin"):
        _adapter(adapter)
    elif kind == "narrow":  # another base model: its LoRA matrices have other shapes
        _adapter(adapter, hidden_size=64, intermediate_size=192)
    elif kind == "shallow":  # one with fewer layers: PEFT would leave the other layers fresh and only warn
        _adapter(adapter, num_hidden_layers=2, layer_types=["full_attention"] * 2)
    else:
        adapter.mkdir()
    if kind == "bin":
        (adapter / "adapter_model.safetensors").rename(adapter / "adapter_model.bin")
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        cli(["--config", QUICKSTART, "--output_dir", str(out), *flags, "--init_adapter", str(adapter)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err, err
    assert err.strip().splitlines()[-1].startswith("error:")
    if kind == "narrow":
        assert "size mismatch" in err and "trained on another base model" in err, err
    assert not out.exists(), "nothing may be written for a config that cannot run"
    assert not [w for w in recwarn if "missing adapter keys" in str(w.message)]  # the error says it; no PEFT warning


def test_init_adapter_is_read_from_yaml(tmp_path):
    from trainers.grpo import check_config_keys, make_parser

    config = tmp_path / "c.yaml"
    config.write_text(f"{Path(QUICKSTART).read_text()}\ninit_adapter: {tmp_path / 'production'}\n")
    argv = ["--config", str(config), "--output_dir", str(tmp_path / "run")]
    check_config_keys(argv)  # a known key
    _, cfg, _ = make_parser().parse_args_and_config(argv)
    assert cfg.init_adapter == str(tmp_path / "production")
    _, cfg, _ = make_parser().parse_args_and_config([*argv, "--init_adapter", "elsewhere"])
    assert cfg.init_adapter == "elsewhere"


def _quickstart_without_dropout(tmp_path: Path) -> str:
    config = tmp_path / "c.yaml"
    config.write_text("\n".join(line for line in Path(QUICKSTART).read_text().splitlines()
                                if not line.startswith("lora_dropout:")))  # fmt: skip
    return str(config)


def test_lora_dropout_defaults_to_0_and_a_dropout_above_is_warned_at_config_time(tmp_path, capsys, caplog):
    """Issue 38 (5d): dropout in the trainer's forward passes only made its logprobs noisy against the server's
    (gaps up to 0.11) without a word. TRL's default 0.05 is 0 here; a dropout set above 0 is warned before any
    work (the run below then stops on its unknown split, so nothing trains)."""
    from trainers.config import lora_dropout_warning
    from trainers.grpo import cli, make_parser

    config = _quickstart_without_dropout(tmp_path)
    argv = ["--config", config, "--output_dir", str(tmp_path / "run"), *LORA]
    _, cfg, model_args = make_parser().parse_args_and_config(argv)
    assert model_args.lora_dropout == 0.0 and lora_dropout_warning(cfg, model_args) is None
    _, cfg, model_args = make_parser().parse_args_and_config([*argv, "--lora_dropout", "0.1"])
    assert "lora_dropout=0.1" in lora_dropout_warning(cfg, model_args)
    _, cfg, model_args = make_parser().parse_args_and_config([*argv, "--lora_dropout", "0.1", "--disable_dropout",
                                                              "true"])  # fmt: skip
    assert lora_dropout_warning(cfg, model_args) is None  # TRL zeroes every dropout, LoRA's too
    with caplog.at_level(logging.WARNING, logger="trainers.grpo"), pytest.raises(SystemExit) as exc:
        cli([*argv, "--lora_dropout", "0.1", "--task_split", "nope"])
    assert exc.value.code == 2 and "Unknown split 'nope'" in capsys.readouterr().err
    assert any("noisy against the server's" in r.getMessage() for r in caplog.records), caplog.text


def test_an_init_adapter_trains_without_its_lora_dropout(tmp_path, caplog):
    """An adapter saved with lora_dropout 0.1 (PEFT keeps it in adapter_config.json): loaded as init_adapter, its
    dropout is 0, so two forward passes in train mode agree (as the endpoint, which never drops, would)."""
    import torch

    from trainers.grpo import make_parser
    from trainers.run_checks import init_adapter_model

    _adapter(tmp_path / "production", dropout=0.1)
    assert json.loads((tmp_path / "production" / "adapter_config.json").read_text())["lora_dropout"] == 0.1
    argv = ["--config", QUICKSTART, "--output_dir", str(tmp_path / "run"), *LORA, "--init_adapter",
            str(tmp_path / "production")]  # fmt: skip
    _, cfg, _ = make_parser().parse_args_and_config(argv)
    with caplog.at_level(logging.INFO, logger="trainers.grpo"):
        model = init_adapter_model(TINY_POLICY, cfg)
    assert "its lora_dropout 0.1 set to 0" in caplog.text
    drops = [m for n, m in model.named_modules() if ".lora_dropout." in n and isinstance(m, torch.nn.Dropout)]
    assert drops and all(m.p == 0.0 for m in drops) and model.peft_config["default"].lora_dropout == 0.0
    model.train()
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, model(ids).logits)
    model.save_pretrained(str(tmp_path / "saved"))
    assert json.loads((tmp_path / "saved" / "adapter_config.json").read_text())["lora_dropout"] == 0.0

"""The run's model card: the real base model, adapter or full weights, environment and tasks, the before/after
evaluation and the command, instead of TRL's placeholder ("a fine-tuned version of [None]")."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LORA

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")


def _evals(avg: float) -> dict:
    return {"all": {"avg@4": avg, "best@4": avg + 0.1, "success": avg - 0.1, "well_formed_calls": 0.95,
                    "samples": 300}}  # fmt: skip


def _config(tmp_path, *flags):
    from trainers.grpo import make_parser

    return make_parser().parse_args_and_config(["--config", QUICKSTART, "--output_dir", str(tmp_path / "run"), *flags])


def test_the_card_names_the_base_model_weights_tasks_evaluation_and_command(tmp_path):
    from trainers.model_card import launch_command, write_model_card

    script, cfg, model_args = _config(tmp_path, *LORA)
    command = launch_command(["--config", "examples/quickstart.yaml", "--learning_rate", "5e-4"])
    evals = {"before": _evals(0.797), "after": _evals(0.802)}
    path = write_model_card(tmp_path / "run" / "README.md", cfg=cfg, model_args=model_args,
                            base_model="checkpoints/tiny-policy", step=30, command=command, evals=evals, k=4,
                            train_tasks=120)  # fmt: skip
    card = path.read_text()
    assert card.startswith("---\nbase_model: checkpoints/tiny-policy\nlibrary_name: peft\n")
    assert "[None]" not in card and "time machine" not in card
    assert "a LoRA adapter (r=32, alpha=64" in card and "after 30 optimizer steps" in card
    assert "`sandbox`, split `train`, 120 training tasks, level weights `1:1,2:2,3:3`" in card
    assert "| before (`checkpoints/tiny-policy`) | 0.797 | 0.897 | 0.697 | 0.950 |" in card
    assert "| after (this model) | 0.802 | 0.902 | 0.702 | 0.950 |" in card
    assert "python -m trainers.grpo --config examples/quickstart.yaml --learning_rate 5e-4" in card


def test_full_weights_card_and_a_card_before_evaluation(tmp_path):
    from trainers.model_card import render_model_card

    script, cfg, model_args = _config(tmp_path, "--use_peft", "false", "--sync_mode", "full")
    card = render_model_card(cfg=cfg, model_args=model_args, base_model="Qwen/Qwen2.5-7B-Instruct", step=3,
                             command="python -m trainers.grpo", final=False)  # fmt: skip
    assert "library_name: transformers" in card and "the full fine-tuned weights" in card
    assert "by `full` sync (disk)" in card and "in training after 3 optimizer steps" in card
    assert "Not evaluated yet" in card

"""Shared fixtures: the committed tiny policy served by the real CPU policy server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import mcp.client.stdio  # noqa: F401 - first imported here, its errlog default is the real stderr, not a capsys buffer
import pytest

ROOT = Path(__file__).resolve().parent.parent
TINY_POLICY = ROOT / "checkpoints" / "tiny-policy"
LORA = ["--use_peft", "true", "--sync_mode", "lora", "--learning_rate", "5e-4"]
"""The quickstart trains full weights; tests of the LoRA path (the one for real models) add these flags."""

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_policy_url() -> Iterator[str]:
    """Base URL (``…/v1``) of the policy server on the committed tiny policy, in this process."""
    import torch

    from trainers.policy_server import create_app, serve_in_background

    torch.set_num_threads(1)
    with serve_in_background(create_app(str(TINY_POLICY), served_model_name="tiny-policy", seed=0)) as url:
        yield url + "/v1"

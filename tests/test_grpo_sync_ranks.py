"""Publishing across ranks: a failed publish stops every rank with the reason (no rank is left waiting in
a collective), and saving a LoRA adapter gathers only the trainable parameters.

``EvolverGRPOTrainer._sync_policy`` runs on a stand-in trainer (the attributes it reads), so that two real
gloo processes exercise its collectives in a few seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent


class _Dist:
    """Records what the trainer asks DeepSpeed to gather."""

    def __init__(self) -> None:
        self.gathered: list = []

    def gather_params(self, params):
        from contextlib import nullcontext

        self.gathered.append(list(params))
        return nullcontext()


class _Policy:
    gathers = "trainable"

    def __init__(self, fail_on_rank: int | None, rank: int) -> None:
        self.fail = fail_on_rank == rank
        self.current = "tiny-policy"
        self.last_sync_s = 0.0

    def publish(self, model, step):
        if self.fail:
            raise ConnectionError("policy endpoint http://vllm:8000 refused the connection")
        self.current = f"tiny-policy-lora-step{step}"
        return self.current


def _stand_in(model, policy, *, rank: int = 0, step: int = 1):
    return SimpleNamespace(
        state=SimpleNamespace(global_step=step),
        policy=policy,
        model=model,
        model_wrapped=model,
        _synced_step=0,
        _version_steps={},
        _dist=_Dist(),
        _metrics=defaultdict(lambda: defaultdict(list)),
        accelerator=SimpleNamespace(unwrap_model=lambda m: m, is_main_process=rank == 0, process_index=rank),
    )


def _lora_like_model():
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2), torch.nn.Linear(2, 8))
    for p in model[0].parameters():  # the frozen base
        p.requires_grad_(False)
    return model


def _worker() -> None:
    """One rank of the two-process test (run as a subprocess)."""
    from accelerate import PartialState

    from langgraph_evolver.errors import PolicyEndpointError
    from trainers.grpo_trainer import EvolverGRPOTrainer

    state = PartialState(cpu=True, backend="gloo")
    rank = state.process_index
    trainer = _stand_in(_lora_like_model(), _Policy(fail_on_rank=0, rank=rank), rank=rank)
    try:
        EvolverGRPOTrainer._sync_policy(trainer)
        print(json.dumps({"rank": rank, "raised": None}), flush=True)
    except PolicyEndpointError as e:
        print(json.dumps({"rank": rank, "raised": str(e)}), flush=True)


@pytest.mark.timeout(180)
def test_a_failed_publish_on_rank_0_stops_every_rank_with_the_reason():
    from trainers.serving import free_port

    port = free_port()
    procs = []
    for rank in range(2):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
               "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"}  # fmt: skip
        command = [sys.executable, "-c", "from tests.test_grpo_sync_ranks import _worker; _worker()"]
        procs.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))  # fmt: skip
    deadline = time.monotonic() + 90  # the rank that did not fail used to wait here for the collective's timeout
    results = {}
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            assert lines, err[-2000:]
            results[lines[-1]["rank"]] = lines[-1]["raised"]
    except subprocess.TimeoutExpired:
        pytest.fail("a rank is still waiting after rank 0's publish failed (hung in a collective)")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert set(results) == {0, 1}
    for rank in (0, 1):
        assert results[rank] is not None, f"rank {rank} did not stop"
        assert "failed on rank 0" in results[rank] and "refused the connection" in results[rank]


def test_saving_a_lora_adapter_gathers_only_the_trainable_parameters():
    from accelerate import PartialState

    from trainers.grpo_trainer import EvolverGRPOTrainer

    PartialState(cpu=True)
    model = _lora_like_model()
    trainer = _stand_in(model, _Policy(fail_on_rank=None, rank=0))
    EvolverGRPOTrainer._sync_policy(trainer)
    (gathered,) = trainer._dist.gathered
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert len(gathered) == len(trainable) == 4 and all(a is b for a, b in zip(gathered, trainable, strict=True))
    assert trainer.policy.current == "tiny-policy-lora-step1" and trainer._version_steps == {
        "tiny-policy-lora-step1": 1
    }


def test_a_failed_publish_on_one_process_raises_the_reason():
    from accelerate import PartialState

    from langgraph_evolver.errors import PolicyEndpointError
    from trainers.grpo_trainer import EvolverGRPOTrainer

    PartialState(cpu=True)
    trainer = _stand_in(_lora_like_model(), _Policy(fail_on_rank=0, rank=0))
    with pytest.raises(PolicyEndpointError, match="step 1 .* failed on rank 0: ConnectionError"):
        EvolverGRPOTrainer._sync_policy(trainer)
    assert trainer._synced_step == 0  # not marked as published: the next attempt publishes again

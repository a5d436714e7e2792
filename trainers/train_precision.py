"""The floating-point type the trainer's forward/backward computes in on CPU, and TIS when it differs from the server's.

``train_dtype: bfloat16`` runs every trainer forward that yields logprobs (the loss, TIS's pi_old, the reference)
under ``torch.autocast("cpu", dtype=torch.bfloat16)``: the matmuls run in bf16, the weights, LoRA adapters,
gradients and optimizer state stay fp32 (autocast casts copies per op; the backward follows the forward's
casts). ``auto`` follows the policy server's CPU rule (``trainers.serving.precision.resolve_dtype``): bf16 on a
CPU with ``avx512_bf16``/``amx_bf16`` for a model of 20M+ parameters, fp32 otherwise. Measured on this project's
2-core AVX512-BF16 machine (no AMX), a forward+backward of SmolLM2-135M with LoRA r16 on 2 x 1,024 tokens was
faster under bf16 autocast than in fp32 in each of 3 alternating pairs (docs/real-model.md, "Training
precision"). On CUDA the config's ``bf16`` flag (accelerate's mixed precision) governs, as before.

When the local policy server and the trainer compute in different precisions, their logprobs differ by more
than sampling noise, so ``importance_correction`` left unset turns TIS on (``resolve_importance_correction``);
an explicit ``importance_correction`` wins.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch

from .serving.precision import resolve_dtype

__all__ = [
    "TRAIN_DTYPE_CHOICES",
    "TrainPrecisionMixin",
    "precision_context",
    "resolve_importance_correction",
    "resolve_train_dtype",
]

logger = logging.getLogger(__name__)

TRAIN_DTYPE_CHOICES = ("auto", "float32", "bfloat16")
"""What ``train_dtype`` accepts."""


def resolve_train_dtype(
    name: str, *, num_parameters: int | None = None, cpu_flags: tuple[str, ...] | None = None
) -> torch.dtype:
    """The dtype the trainer's CPU forward computes in; ``auto``: the policy server's rule (``resolve_dtype``)."""
    if name not in TRAIN_DTYPE_CHOICES:
        raise ValueError(f"train_dtype must be one of {', '.join(TRAIN_DTYPE_CHOICES)}; got {name!r}.")
    return resolve_dtype(name, num_parameters=num_parameters, cpu_flags=cpu_flags)


def precision_context(dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """bf16 autocast on CPU for ``dtype`` bfloat16 (put the forward in it, not the backward), else nothing."""
    return torch.autocast("cpu", dtype=torch.bfloat16) if dtype == torch.bfloat16 else contextlib.nullcontext()


def resolve_importance_correction(args: Any, num_parameters: int) -> str:
    """``args.importance_correction``, or, left unset (None): ``tis`` when a local policy server (no
    ``policy_base_url``) computes in another precision than the trainer, ``none`` otherwise."""
    if args.importance_correction is not None:
        return args.importance_correction
    if args.policy_base_url:  # an external endpoint: its precision is unknown here (vLLM in bf16: set tis)
        return "none"
    server = resolve_dtype(args.policy_server_dtype, num_parameters=num_parameters)
    trainer = resolve_train_dtype(args.train_dtype, num_parameters=num_parameters)
    if server == trainer:
        return "none"
    logger.info("importance_correction: tis (the policy server computes in %s, the trainer in %s: their logprobs "
                "differ; set importance_correction: none to train without it)", server, trainer)  # fmt: skip
    return "tis"


class TrainPrecisionMixin:
    """Runs the trainer's logprob forwards under bf16 autocast on CPU when ``train_dtype`` says so, and settles
    ``importance_correction`` from both precisions (call ``_settle_precision`` once the model is built)."""

    args: Any
    accelerator: Any
    model: Any

    def _settle_precision(self) -> None:
        unwrapped = self.accelerator.unwrap_model(self.model)
        num_parameters = sum(p.numel() for p in unwrapped.parameters())
        self._train_dtype = resolve_train_dtype(self.args.train_dtype, num_parameters=num_parameters)
        if self.accelerator.device.type != "cpu":
            self._train_dtype = torch.float32  # CUDA: the bf16 flag (accelerate's mixed precision) governs
        logger.info("trainer forward/backward in %s (train_dtype: %s)", self._train_dtype, self.args.train_dtype)
        self.args.importance_correction = resolve_importance_correction(self.args, num_parameters)

    def _precision_context(self) -> contextlib.AbstractContextManager:
        return precision_context(getattr(self, "_train_dtype", torch.float32))

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
        with self._precision_context():
            return super()._get_per_token_logps_and_entropies(*args, **kwargs)  # type: ignore[misc]

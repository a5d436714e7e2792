"""The floating-point type the policy server computes in: bf16 where the CPU multiplies bf16 natively, else fp32.

A decode step of a real model is matmuls over the weights (and attention over the KV cache). On a CPU with
bf16 dot-product instructions (AMX ``amx_bf16`` or ``avx512_bf16``) oneDNN runs bf16 matmuls 2-3x faster than
fp32 ones from 8 rows up, and half the bytes per weight halve the memory traffic of a 1-row step; without
them, bf16 is emulated and slower than fp32. ``auto`` therefore reads the CPU's flags from ``/proc/cpuinfo``
and picks bf16 only there, and only for models big enough that matmuls are the step
(``AUTO_BF16_MIN_PARAMETERS``): a tiny model's step is Python and small ops, which bf16 does not speed up, and
fp32 keeps its logprobs equal to an fp32 trainer's. See docs/policy-endpoint.md ("Precision").
"""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["AUTO_BF16_MIN_PARAMETERS", "BF16_CPU_FLAGS", "DTYPE_CHOICES", "bf16_cpu_flags", "resolve_dtype"]

DTYPE_CHOICES = ("auto", "float32", "bfloat16")
"""What ``--dtype`` accepts."""
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""``/proc/cpuinfo`` flags of native bf16 dot products (either one makes bf16 matmuls fast)."""
AUTO_BF16_MIN_PARAMETERS = 20_000_000
"""``auto`` keeps fp32 below this many parameters (the tiny policy's 0.93M: its step is overhead, not matmuls)."""


def bf16_cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> tuple[str, ...]:
    """The ``BF16_CPU_FLAGS`` this CPU lists (empty when it has none or ``cpuinfo`` cannot be read)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return ()
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return tuple(f for f in BF16_CPU_FLAGS if f in flags)


def resolve_dtype(
    name: str | torch.dtype, *, num_parameters: int | None = None, cpu_flags: tuple[str, ...] | None = None
) -> torch.dtype:
    """The torch dtype ``name`` stands for; ``auto``: bf16 on a bf16 CPU for a model of ``num_parameters`` or
    more (``AUTO_BF16_MIN_PARAMETERS``; None counts as big enough), fp32 otherwise."""
    if isinstance(name, torch.dtype):
        if name not in _DTYPES.values():
            raise ValueError(f"dtype must be torch.float32 or torch.bfloat16, got {name}.")
        return name
    if name in _DTYPES:
        return _DTYPES[name]
    if name != "auto":
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_CHOICES)}; got {name!r}.")
    flags = bf16_cpu_flags() if cpu_flags is None else cpu_flags
    big = num_parameters is None or num_parameters >= AUTO_BF16_MIN_PARAMETERS
    return torch.bfloat16 if flags and big and torch.backends.mkldnn.is_available() else torch.float32

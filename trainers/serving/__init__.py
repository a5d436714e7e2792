"""The CPU policy server: an OpenAI/vLLM-compatible endpoint over a Hugging Face causal LM.

Modules (each one concept):

- ``engine``: ``PolicyEngine``, the model, its tokenizer and runtime LoRA adapters, stepped one
  token at a time for a batch of rows (prefill, decode, join, select).
- ``sampling``: ``SamplingParams``, ``Completion`` and the temperature / top-p sampler.
- ``scheduler``: ``BatchScheduler``, the worker thread doing continuous batching.
- ``tool_choice``: ``tool_choice`` "required" / named functions by a forced prefix.
- ``protocol``: request bodies and vLLM-shaped responses; ``app``: the FastAPI app; ``cli``: the
  command line (``python -m trainers.policy_server``).
- ``access``: the API key and which weights may be loaded at runtime (``WeightAccess``).
- ``process``: ``PolicyServerProcess`` (the server as a child process), ``check_endpoint``,
  ``runtime_update_flags`` and ``policy_api_key`` (the key a client sends).

Importing this package loads only ``process`` and ``access`` (no torch, no fastapi); the rest is imported where used.
"""

from __future__ import annotations

from .process import PolicyServerProcess, check_endpoint, free_port, policy_api_key, runtime_update_flags

__all__ = ["PolicyServerProcess", "check_endpoint", "free_port", "policy_api_key", "runtime_update_flags"]

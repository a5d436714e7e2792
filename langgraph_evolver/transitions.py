"""What a policy call leaves on its message: the marker on its runs and the ``Transition`` (token ids, logprobs).

Apart from ``chat_model`` (which re-exports these names) so that the capture reads a policy call's
transition without importing the chat model, which reads the running rollout, which holds the capture.
"""

from __future__ import annotations

from langchain_core.messages import BaseMessage

from .types import Transition

__all__ = ["POLICY_MARKER", "model_version", "transition_from_message"]

POLICY_MARKER = "evolver_policy"
"""Metadata key a ``PolicyChatModel`` puts on its runs: the capture trains on calls carrying it."""


def model_version(message: BaseMessage) -> str:
    """The version of the weights that answered: the response's ``system_fingerprint`` (our policy
    server sets it to the adapter name or the weights version that served the call), else the
    model name the endpoint echoed (vLLM sets no fingerprint; the name is the requested one)."""
    meta = message.response_metadata or {}
    return str(meta.get("system_fingerprint") or meta.get("model_name") or "")


def transition_from_message(message: BaseMessage) -> Transition | None:
    """The ``Transition`` recorded on an AI message, or ``None`` if the endpoint sent no ids."""
    meta = message.response_metadata or {}
    prompt_ids, completion_ids = meta.get("prompt_token_ids"), meta.get("token_ids")
    content = (meta.get("logprobs") or {}).get("content")
    if prompt_ids is None or completion_ids is None or content is None:
        return None
    return Transition(
        prompt_ids=tuple(prompt_ids),
        completion_ids=tuple(completion_ids),
        logprobs=tuple(float(e["logprob"]) for e in content),
        model_version=model_version(message),
        finish_reason=meta.get("finish_reason"),
    )

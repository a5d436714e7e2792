"""``PolicyChatModel``: ``ChatOpenAI`` that keeps the exact token ids and logprobs of each call.

vLLM (and our CPU policy server) return ``prompt_token_ids`` and per-choice ``token_ids`` when
asked with ``return_token_ids``; ``langchain-openai`` keeps ``logprobs`` but drops the ids. This
subclass hooks the chat result to keep them in ``response_metadata``, forces non-streaming
calls (LangGraph's message streaming would otherwise switch to streaming and lose the ids), and
turns tool-call arguments that decode to a non-object into ``invalid_tool_calls`` instead of
letting ``AIMessage`` construction raise.

Paired evaluation ("common random numbers"): with ``sample_seed=s`` every request sent inside a
rollout carries ``seed=paired_seed(s, task id, sample index, turn)``, so two policies evaluated
with the same ``s`` draw the same random numbers at sample i of task t, turn j, and the
difference of their scores is far less noisy than that of two independent evaluations.

Example:
    >>> model = PolicyChatModel(base_url="http://127.0.0.1:8000/v1", model="tiny-policy")
    >>> msg = model.bind_tools(tools).invoke(messages)          # doctest: +SKIP
    >>> transition_from_message(msg).completion_ids              # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import os
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.tool import invalid_tool_call
from langchain_core.outputs import ChatResult
from langchain_openai import ChatOpenAI
from pydantic import Field, PrivateAttr, SecretStr

from ._llm import init_model
from .errors import ConfigError
from .rollout import CURRENT
from .transitions import POLICY_MARKER, model_version, transition_from_message

__all__ = [
    "POLICY_API_KEY_ENV",
    "POLICY_MARKER",
    "PolicyChatModel",
    "chat_model_from_spec",
    "model_version",
    "paired_seed",
    "transition_from_message",
]

POLICY_API_KEY_ENV = "EVOLVER_POLICY_API_KEY"
"""The policy endpoint's key: what the policy server requires (its ``--api-key`` default) and what
``PolicyChatModel`` sends when it is given no ``api_key``."""


def paired_seed(seed: int, task_id: str, sample: int, turn: int) -> int:
    """The sampling seed of request ``turn`` (0, 1, ...) of sample ``sample`` of task ``task_id``.

    A stable hash (blake2b of the four parts, not Python's per-process salted ``hash``), so every
    process and every policy derives the same seed; reduced to 0..2**31-1, the range vLLM and the
    OpenAI API accept.

        >>> paired_seed(7, "t1", 0, 0) == paired_seed(7, "t1", 0, 0) != paired_seed(7, "t1", 1, 0)
        True
    """
    parts = json.dumps([int(seed), str(task_id), int(sample), int(turn)]).encode()
    return int.from_bytes(hashlib.blake2b(parts, digest_size=8).digest(), "big") & 0x7FFFFFFF


def _split_bad_tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """Remove tool calls whose arguments decode to something other than an object; return them."""
    calls = message.get("tool_calls") or []
    good: list[dict[str, Any]] = []
    bad: list[dict[str, Any]] = []
    for call in calls:
        raw = (call.get("function") or {}).get("arguments") or "{}"
        try:
            decoded = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError:
            good.append(call)  # langchain already turns undecodable JSON into invalid_tool_calls
            continue
        (good if isinstance(decoded, dict) else bad).append(call)
    if bad:
        message["tool_calls"] = good or None
    return bad


class PolicyChatModel(ChatOpenAI):
    """The policy as an OpenAI-compatible endpoint, with token ids and logprobs kept.

    Defaults differ from ``ChatOpenAI`` only where the RL contract needs it: ``logprobs=True``,
    ``extra_body={"return_token_ids": True}``, ``disable_streaming=True``,
    ``use_responses_api=False``, ``temperature=1.0``, ``api_key=$EVOLVER_POLICY_API_KEY`` (``"EMPTY"``
    when unset; never ``$OPENAI_API_KEY``, which belongs to another endpoint). Its runs carry
    ``metadata={"evolver_policy": True}``, which is how the capture tells the policy's calls from
    other models' (pass ``metadata={"evolver_policy": False}`` for one that must not be trained).

    ``sample_seed`` pairs evaluations: see ``_get_request_payload`` and ``paired_seed``.
    """

    _loop_clients: dict[Any, Any] = PrivateAttr(default_factory=dict)
    context_template: Any = Field(default=None, exclude=True)
    """A context template applied to every prompt before it is sent (``langgraph_evolver.context``)."""
    sample_seed: int | None = None
    """Seed each request sent inside a rollout with ``paired_seed(sample_seed, task id, sample, turn)``
    (``None``: no per-request seed; outside a rollout it is ignored)."""

    def __init__(self, **kwargs: Any) -> None:
        extra_body = {"return_token_ids": True, **(kwargs.pop("extra_body", None) or {})}
        kwargs.setdefault("logprobs", True)
        kwargs.setdefault("disable_streaming", True)
        kwargs.setdefault("use_responses_api", False)
        kwargs.setdefault("temperature", 1.0)
        if kwargs.get("api_key") is None and kwargs.get("openai_api_key") is None:
            kwargs.pop("openai_api_key", None)
            kwargs["api_key"] = os.environ.get(POLICY_API_KEY_ENV) or "EMPTY"
        kwargs["metadata"] = {POLICY_MARKER: True, **(kwargs.get("metadata") or {})}
        super().__init__(extra_body=extra_body, **kwargs)

    def _use_client_of_running_loop(self) -> None:
        """Point the async client at one bound to the running event loop.

        ``langchain-openai`` shares one cached async HTTP client per URL, bound to the first
        event loop that used it; a second ``asyncio.run`` (a trainer collecting rollouts every
        step) would then fail with "Event loop is closed". Each loop gets its own client here.
        """
        if self.http_async_client is not None:  # the caller manages its own client
            return
        loop = asyncio.get_running_loop()
        # Pooled connections point back at their loop, so weak keys would never drop: forget the
        # clients of closed loops explicitly (their sockets close when collected).
        for old in [old for old in self._loop_clients if old.is_closed()]:
            del self._loop_clients[old]
        root = self._loop_clients.get(loop)
        if root is None:
            import openai

            key = self.openai_api_key
            params: dict[str, Any] = {
                "api_key": key.get_secret_value() if isinstance(key, SecretStr) else key,
                "organization": self.openai_organization,
                "base_url": self.openai_api_base,
                "timeout": self.request_timeout,
                "default_headers": self.default_headers,
                "default_query": self.default_query,
            }
            if self.max_retries is not None:
                params["max_retries"] = self.max_retries
            root = openai.AsyncOpenAI(**params)
            self._loop_clients[loop] = root
        self.root_async_client = root
        self.async_client = root.chat.completions

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop; call it before that loop ends.

        A client left open is closed when it is garbage collected, as a task on whatever loop runs
        then, and that fails with "Event loop is closed" noise when its own loop is gone.
        """
        root = self._loop_clients.pop(asyncio.get_running_loop(), None)
        if root is not None:
            await root.close()
            if self.root_async_client is root:
                self.root_async_client = self.async_client = None

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self._use_client_of_running_loop()
        if self.context_template is not None:
            messages = list(self.context_template(messages))
        return await super()._agenerate(messages, *args, **kwargs)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        if self.context_template is not None:
            messages = list(self.context_template(messages))
        return super()._generate(messages, *args, **kwargs)

    def _get_request_payload(self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any) -> dict:
        """The request, with the paired seed when ``sample_seed`` is set and a rollout is running.

        The turn is the rollout's count of requests sent (``Rollout.policy_requests``), not the
        number of AI messages in the prompt: a context template may drop or compress earlier turns,
        a tool may call the policy on a prompt of its own, and an agent may build its prompts from
        its own state rather than the message history, all of which would repeat a turn number.
        A seed given per call (``bind(seed=...)``, ``invoke(..., seed=...)``) wins; the ``seed``
        field (or ``model_kwargs["seed"]``) is replaced.
        """
        payload = super()._get_request_payload(input_, stop=stop, **kwargs)
        rollout = CURRENT.get()
        if rollout is None:
            return payload
        turn = rollout.policy_requests
        rollout.policy_requests += 1  # every request counts, seeded or not: the turn is the rollout's
        if self.sample_seed is not None and "seed" not in kwargs:
            payload["seed"] = paired_seed(self.sample_seed, rollout.task.id, rollout.sample, turn)
        return payload

    def _create_chat_result(self, response: Any, generation_info: dict | None = None) -> ChatResult:
        if isinstance(response, dict):
            data = copy.deepcopy(response)
        elif hasattr(response, "model_dump"):
            data = response.model_dump(exclude={"choices": {"__all__": {"message": {"parsed"}}}}, warnings=False)
        else:
            return super()._create_chat_result(response, generation_info)
        bad_calls = [_split_bad_tool_calls(c.get("message") or {}) for c in data.get("choices") or []]
        result = super()._create_chat_result(data, generation_info)
        prompt_ids = data.get("prompt_token_ids")
        for gen, choice, bad in zip(result.generations, data.get("choices") or [], bad_calls, strict=False):
            message = gen.message
            message.response_metadata["prompt_token_ids"] = prompt_ids
            message.response_metadata["token_ids"] = choice.get("token_ids")
            # the weights that actually answered (our server: the adapter's or the disk version); vLLM sends none
            message.response_metadata["system_fingerprint"] = data.get("system_fingerprint")
            if bad and isinstance(message, AIMessage):
                message.invalid_tool_calls = list(message.invalid_tool_calls) + [
                    invalid_tool_call(
                        name=c["function"].get("name"),
                        args=c["function"].get("arguments"),
                        id=c.get("id"),
                        error="arguments must be a JSON object",
                    )
                    for c in bad
                ]
        return result


def chat_model_from_spec(spec: str, *, base_url: str | None = None, api_key: str | None = None) -> Any:
    """A chat model from a CLI spec: ``policy:<name>`` (``PolicyChatModel``) or an ``init_chat_model`` string.

    What the questioning command's ``--model`` and an MCP environment's ``judge=`` read (``questioning.__main__``
    names it ``chat_model``).
    """
    key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    if spec.startswith("policy:"):
        if not base_url:
            raise ConfigError(f"{spec!r} needs --base-url (the policy endpoint, e.g. http://127.0.0.1:8000/v1).")
        # no --api-key: PolicyChatModel sends $EVOLVER_POLICY_API_KEY, the policy server's key
        return PolicyChatModel(base_url=base_url, model=spec.split(":", 1)[1], api_key=api_key, max_tokens=256)
    extra: dict[str, Any] = {"base_url": base_url, "api_key": key} if base_url else {}
    return init_model(spec, role="chat", accepted="Use 'schema'/'offline', 'policy:<name>' or a string such as "
                      "'openai:gpt-4.1-mini'.", **extra)  # fmt: skip

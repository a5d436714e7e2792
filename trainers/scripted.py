"""``TokenizedScriptedModel``: a scripted policy whose calls carry the token ids a policy endpoint would return.

For tests and benchmarks of the training path (merging, stripping, boosting, templates) without a
model's noise. It lives in ``trainers/`` because it renders prompts with the CPU policy server's
own chat-format normalization.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

__all__ = ["TokenizedScriptedModel"]


class TokenizedScriptedModel(BaseChatModel):
    """A scripted policy whose calls carry token ids, as a policy endpoint's would.

    ``respond(messages) -> AIMessage`` decides each answer; the prompt ids are the chat template
    of ``tokenizer`` applied to the messages and tools exactly as the CPU policy server applies it,
    and the completion ids are what the template adds for the answer. Logprobs are 0. For tests and
    benchmarks of the training path without a model's noise (``metadata={"evolver_policy": True}``
    makes the capture train on it).
    """

    tokenizer: Any
    respond: Any
    context_template: Any = None
    """Applied to every prompt before it is answered, as ``PolicyChatModel`` applies it."""

    @property
    def _llm_type(self) -> str:
        return "tokenized-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        from langchain_core.utils.function_calling import convert_to_openai_tool

        return self.bind(tools=[convert_to_openai_tool(t) for t in tools])

    def _render(self, messages: list[BaseMessage], tools: Any, generation_prompt: bool) -> list[int]:
        from langchain_openai.chat_models.base import _convert_message_to_dict

        from .chat_format import normalize_messages  # the server's own normalization

        dicts = normalize_messages([_convert_message_to_dict(m) for m in messages])
        text = self.tokenizer.apply_chat_template(dicts, tools=tools, add_generation_prompt=generation_prompt,
                                                  tokenize=False)  # fmt: skip
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, tools: Any = None,
                  **kw: Any) -> ChatResult:  # fmt: skip
        if self.context_template is not None:
            messages = list(self.context_template(messages))
        ai = self.respond(messages)
        prompt = self._render(messages, tools, True)
        full = self._render([*messages, ai], tools, False)
        completion = full[len(prompt) :] if full[: len(prompt)] == prompt else full[-8:]
        ai.response_metadata.update(prompt_token_ids=prompt, token_ids=completion, model_name="scripted",
                                    logprobs={"content": [{"logprob": 0.0} for _ in completion]})  # fmt: skip
        return ChatResult(generations=[ChatGeneration(message=ai)])

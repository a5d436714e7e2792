"""Each token id's text, decoded alone and cached, shared by the responses' logprob entries
(``protocol``) and strict tool calls (``strict_tools``)."""

from __future__ import annotations

from typing import Any

__all__ = ["TokenTexts"]


class TokenTexts:
    """Each id's text (decoded alone, cached: the vocabulary is fixed) and, built on first need, the ids by first
    character. One per engine: the logprob entries of the responses and strict tool calls read the same texts."""

    def __init__(self, tokenizer: Any, vocab_size: int | None = None, eos: frozenset[int] = frozenset()) -> None:
        self._tokenizer = tokenizer
        self.eos = eos
        """The ids that end a reply."""
        self._size = len(tokenizer) if vocab_size is None else vocab_size
        self._text: dict[int, str] = {}
        self._by_first: dict[str, list[int]] | None = None

    def __call__(self, token_id: int, as_id: bool = False) -> str:
        """The id's text (``as_id``: vLLM's ``token_id:N`` form of ``return_tokens_as_token_ids``)."""
        if as_id:
            return f"token_id:{token_id}"
        text = self._text.get(token_id)
        if text is None:
            text = self._tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
            self._text[token_id] = text
        return text

    def starting_with(self, chars: set[str]) -> list[int]:
        if self._by_first is None:
            by_first: dict[str, list[int]] = {}
            for i in range(min(self._size, len(self._tokenizer))):
                text = self(i)
                if text:
                    by_first.setdefault(text[0], []).append(i)
            self._by_first = by_first
        return [i for c in chars for i in self._by_first.get(c, ())]

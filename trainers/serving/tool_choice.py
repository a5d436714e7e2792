"""``tool_choice`` "required" and named functions for the CPU policy server, by a forced prefix.

vLLM serves these with grammar-constrained decoding. This server has no grammar engine, so it
forces the start of a tool call instead: the prompt is extended with the text that the model's
own chat template writes before a tool call's name ("required") or before its arguments (a named
function), and the model samples the rest. The prefix comes from rendering the request's
messages plus an assistant turn with one tool call, so it is whatever the template writes (the
tiny template's ``<tool_call>{"name": "X", "arguments": `` and Qwen's ``<tool_call>\\n{...``
alike) and there is no second copy of the format to keep in sync.

The prefix ends on a token boundary of that rendered call: ``"arguments": {"q"`` tokenizes as
``":`` ``␣{"`` ``q``..., so forcing the trailing space as a token of its own would show the model a
split it never saw in training. The forced ids are therefore the longest common token prefix of
the exact-text prompt and of the rendered calls (one per tool for "required"), backed off to the
exact text when that would lose part of the forced name.

The forced ids are not sampled: they belong to ``prompt_token_ids`` (so ``prompt_token_ids +
token_ids`` is exactly what the model saw, and no logprob is reported for them), while the text
that is parsed into ``tool_calls`` is the forced text followed by the completion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .errors import GenerationError

__all__ = ["ForcedToolCall", "ToolChoice", "force_tool_call", "resolve_tool_choice"]

_ARGUMENTS_SENTINEL = "forced_arguments_sentinel"
"""Key of the placeholder arguments rendered to find where a call's arguments start."""

_NAMED_USAGE = '{"type": "function", "function": {"name": "my_function"}}'


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolChoice:
    """A validated ``tool_choice``."""

    mode: Literal["auto", "none", "required", "named"]
    name: str | None = None
    """The function that must be called (``mode == "named"`` only)."""

    @property
    def forced(self) -> bool:
        """Whether the reply must start with a tool call (a prefix is appended to the prompt)."""
        return self.mode in ("required", "named")


@dataclass(frozen=True, slots=True, kw_only=True)
class ForcedToolCall:
    """The tokens appended to a prompt to force a tool call, and their text."""

    token_ids: list[int]
    """The whole prompt: the templated messages followed by the forced tokens."""
    text: str
    """The text of the forced tokens alone; the completion continues it."""


def resolve_tool_choice(tool_choice: str | dict[str, Any] | None, tool_names: list[str]) -> ToolChoice:
    """Validate a request's ``tool_choice`` against its tools (``GenerationError``, HTTP 400).

    ``None`` and ``"auto"`` mean auto (also without tools, as before); ``"required"`` and
    ``{"type": "function", "function": {"name": ...}}`` need ``tools`` and, for a name, one of them.
    """
    if tool_choice is None or tool_choice == "auto":
        return ToolChoice(mode="auto")
    if tool_choice == "none":
        return ToolChoice(mode="none")
    if tool_choice == "required":
        if not tool_names:
            raise GenerationError("tool_choice='required' needs `tools`: send the tools the model must choose from.")
        return ToolChoice(mode="required")
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        if tool_choice.get("type", "function") != "function" or not isinstance(function, dict):
            raise GenerationError(f"tool_choice={tool_choice!r} is not supported. Correct usage: `{_NAMED_USAGE}`.")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise GenerationError(
                f"Invalid `name` in `function` in `tool_choice`: {name!r}. Correct usage: `{_NAMED_USAGE}`."
            )
        if not tool_names:
            raise GenerationError(f"tool_choice names the function {name!r} but the request has no `tools`.")
        if name not in tool_names:
            raise GenerationError(
                f"The tool {name!r} specified in `tool_choice` does not match any of the specified `tools`; "
                f"available tools: {', '.join(tool_names)}."
            )
        return ToolChoice(mode="named", name=name)
    raise GenerationError(
        f"tool_choice={tool_choice!r} is not supported; use 'auto', 'none', 'required' or `{_NAMED_USAGE}`."
    )


def force_tool_call(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    prompt: str,
    prompt_ids: list[int],
    choice: ToolChoice,
) -> ForcedToolCall:
    """The prompt ids of ``prompt`` (templated ``messages`` with the generation prompt) plus the
    forced start of a tool call for ``choice`` ("required" or named), and the forced text.

    Raises ``GenerationError`` when the chat template does not write assistant tool calls in a
    way the prefix can be taken from (its rendered call must contain the name, then the
    arguments as a JSON object).
    """
    assert choice.forced
    names = [choice.name] if choice.name is not None else list(dict.fromkeys(_tool_names(tools)))
    renders = [_render_call(tokenizer, messages, tools, prompt, name) for name in names]
    # The exact text to force: up to the name ("required") or up to the arguments (named).
    first_suffix, name_at, arguments_at = renders[0]
    cut = first_suffix[:arguments_at] if choice.name is not None else first_suffix[:name_at]
    exact_ids = _encode(tokenizer, prompt + cut)
    ids = exact_ids
    for suffix, _, _ in renders:
        ids = _common_prefix(ids, _encode(tokenizer, prompt + suffix))
    text = _decode_after(tokenizer, ids, prompt_ids)
    # Back off to the exact text if the common prefix reaches back into the templated prompt, does not round-trip to
    # a prefix of the cut, or (named) stops before the name is closed: the model could otherwise call another tool.
    named_end = name_at + len(choice.name) + 1 if choice.name is not None else 0
    if text is None or not cut.startswith(text) or len(text) < named_end:
        ids = exact_ids
        text = _decode_after(tokenizer, ids, prompt_ids)
        if text is None:  # the generation prompt and the prefix merge into one token: use the text as it comes
            text = cut
    return ForcedToolCall(token_ids=ids, text=text)


# -- helpers -------------------------------------------------------------------------------------
def _tool_names(tools: list[dict[str, Any]]) -> list[str]:
    return [(t.get("function") or t).get("name", "") for t in tools]


def _render_call(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]], prompt: str, name: str
) -> tuple[str, int, int]:
    """The template's text after ``prompt`` for an assistant turn calling ``name``, with the
    offsets in it of the name and of the arguments object."""
    call = {"id": "call_0", "type": "function", "function": {"name": name, "arguments": {_ARGUMENTS_SENTINEL: 0}}}
    turn = {"role": "assistant", "content": "", "tool_calls": [call]}
    try:
        rendered = tokenizer.apply_chat_template([*messages, turn], tools=tools, tokenize=False)
    except Exception as e:
        raise GenerationError(
            f"tool_choice needs the chat template to render an assistant tool call, and it failed: "
            f"{type(e).__name__}: {e}"
        ) from e
    if rendered.startswith(prompt):
        suffix = rendered[len(prompt) :]
        name_at = suffix.find(name)
        sentinel_at = suffix.find(_ARGUMENTS_SENTINEL, name_at + len(name)) if name_at >= 0 else -1
        arguments_at = suffix.rfind("{", name_at + len(name), sentinel_at) if sentinel_at >= 0 else -1
        if arguments_at >= 0:
            return suffix, name_at, arguments_at
    raise GenerationError(
        "tool_choice 'required' or a named function is served by forcing the start of a tool call, taken from "
        "the chat template; this model's template does not render an assistant tool call as the generation "
        "prompt followed by the name and then the arguments object. Use tool_choice 'auto' with this model."
    )


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def _decode_after(tokenizer: Any, ids: list[int], prompt_ids: list[int]) -> str | None:
    """The text of ``ids`` past ``prompt_ids``, or None if ``ids`` does not extend ``prompt_ids``."""
    if len(ids) < len(prompt_ids) or ids[: len(prompt_ids)] != prompt_ids:
        return None
    return tokenizer.decode(ids[len(prompt_ids) :], skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _common_prefix(a: list[int], b: list[int]) -> list[int]:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]

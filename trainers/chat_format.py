"""The tiny policy's chat template and the Hermes/Qwen ``<tool_call>`` parser.

The template is ChatML with tools listed compactly in the system turn (``name(arg, ...)``, one
per line: a ~1M-parameter model cannot use long JSON schemas, and every token costs CPU time)
and tool calls written as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` exactly
like Qwen2.5's template, so the same parser serves the tiny model and real Qwen checkpoints.

The parser follows vLLM's hermes parser contract: every ``<tool_call>`` block must decode, or
the whole raw text comes back as content with no tool calls.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CALL_CLOSE",
    "CALL_OPEN",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "SPECIAL_TOKENS",
    "TINY_CHAT_TEMPLATE",
    "ParsedOutput",
    "message_text",
    "normalize_messages",
    "parse_tool_calls",
]

PAD_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
"""The tags around a tool call's JSON: what the templates write, the parser reads and strict decoding follows."""
SPECIAL_TOKENS = [PAD_TOKEN, "<|im_start|>", EOS_TOKEN, CALL_OPEN, CALL_CLOSE]

# All literal text sits in {{ '...' }} expressions so the template source can be indented freely.
TINY_CHAT_TEMPLATE = (
    "{%- set ns = namespace(start=0) -%}"
    "{%- if messages and messages[0].role == 'system' -%}"
    "{{ '<|im_start|>system\\n' + messages[0].content }}"
    "{%- set ns.start = 1 -%}"
    "{%- if tools -%}{{ '\\n' }}{%- endif -%}"
    "{%- elif tools -%}{{ '<|im_start|>system\\n' }}"
    "{%- endif -%}"
    "{%- if tools -%}{{ 'Tools:' }}"
    "{%- for tool in tools -%}"
    "{%- set fn = tool.function if tool.function is defined else tool -%}"
    "{{ '\\n' + fn.name + '(' }}"
    "{%- for p in fn.parameters.properties -%}{{ p }}{%- if not loop.last -%}{{ ', ' }}{%- endif -%}{%- endfor -%}"
    "{{ ')' }}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{%- if ns.start == 1 or tools -%}{{ '<|im_end|>\\n' }}{%- endif -%}"
    "{%- for message in messages[ns.start:] -%}"
    "{%- if message.role == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- if message.content -%}{{ message.content }}{%- endif -%}"
    "{%- for tc in (message.tool_calls or []) -%}"
    "{%- set f = tc.function if tc.function is defined else tc -%}"
    '{{ \'<tool_call>{"name": "\' + f.name + \'", "arguments": \' }}'
    "{%- if f.arguments is string -%}{{ f.arguments }}{%- else -%}{{ f.arguments | tojson }}{%- endif -%}"
    "{{ '}</tool_call>' }}"
    "{%- endfor -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

_BLOCK = re.compile(rf"{CALL_OPEN}(.*?){CALL_CLOSE}|{CALL_OPEN}(.*)\Z", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    content: str | None
    """Text before the first tool call (or the whole raw text when parsing failed)."""
    tool_calls: list[dict[str, Any]]
    """OpenAI-format tool calls: ``{"id", "type": "function", "function": {"name", "arguments"}}``."""
    parse_error: str | None = None
    """Why the ``<tool_call>`` blocks could not be parsed, when they could not."""


def _call(obj: Any) -> dict[str, Any] | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    return {
        "id": f"chatcmpl-tool-{uuid.uuid4().hex[:16]}",
        "type": "function",
        "function": {"name": obj["name"], "arguments": json.dumps(obj.get("arguments", {}), ensure_ascii=False)},
    }


def parse_tool_calls(text: str) -> ParsedOutput:
    """Split a completion into content and OpenAI-format tool calls (hermes contract).

    A block holds one call (``{"name": ..., "arguments": {...}}``, Hermes/Qwen) or a JSON list of
    them (``[{...}, {...}]``, SmolLM2's function-calling form); an empty list is no call.
    """
    start = text.find(CALL_OPEN)
    if start < 0:
        return ParsedOutput(content=text, tool_calls=[])
    calls = []
    for match in _BLOCK.finditer(text):
        body = (match.group(1) if match.group(1) is not None else match.group(2) or "").strip()
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as e:
            return ParsedOutput(content=text, tool_calls=[], parse_error=f"tool call is not valid JSON ({e.msg})")
        parsed = [_call(o) for o in (obj if isinstance(obj, list) else [obj])]
        if None in parsed:
            return ParsedOutput(
                content=text, tool_calls=[], parse_error='tool call needs {"name": str, "arguments": {}}'
            )
        calls += [c for c in parsed if c is not None]
    if not calls:  # only empty lists: the model says it calls nothing; its text is the answer
        return ParsedOutput(content=_BLOCK.sub("", text).strip() or None, tool_calls=[])
    content = text[:start] or None
    return ParsedOutput(content=content, tool_calls=calls)


def message_text(content: Any) -> str:
    """A message's content as text: a string as it is, OpenAI content parts' texts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Make OpenAI request messages template-ready: string content, decoded tool arguments.

    Arguments that decode to a JSON object are passed as objects (rendered with ``tojson``, the
    same bytes the model was trained on); anything else is kept as the raw string.
    """
    out = []
    for m in messages:
        msg = {"role": m.get("role", "user"), "content": message_text(m.get("content"))}
        if m.get("tool_calls"):
            calls = []
            for tc in m["tool_calls"]:
                fn = tc.get("function", tc)
                args = fn.get("arguments", {})
                if isinstance(args, str):
                    try:
                        decoded = json.loads(args)
                        args = decoded if isinstance(decoded, dict) else args
                    except json.JSONDecodeError:
                        pass
                calls.append(
                    {
                        "id": tc.get("id", ""),
                        "type": "function",
                        "function": {"name": fn.get("name", ""), "arguments": args},
                    }
                )
            msg["tool_calls"] = calls
        if m.get("tool_call_id"):
            msg["tool_call_id"] = m["tool_call_id"]
        out.append(msg)
    return out

"""Chat templates that show a real model its tools, and the check that a template does.

A checkpoint's own template may ignore ``tools`` (SmolLM2-Instruct's does): served as is, every
prompt holds only the system line and the question, and the model can only guess. These are the
formats a small instruct model may have seen, each a complete ChatML template whose tool calls
``trainers.chat_format.parse_tool_calls`` reads back:

- ``compact``: the tiny policy's template: ``name(arg, ...)`` per tool, calls as
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. The fewest prompt tokens.
- ``compact_doc``: ``compact`` with each tool's first description line and argument types, one line
  per tool: ``book(patient: str, slot_id: str, note?: str) - Book a slot.`` (``?`` marks an optional
  argument, an enum shows its values as ``"a"|"b"``, a union its members as ``str|float``); calls as in
  ``compact``, so the parsers are the same. About twice the prompt tokens of ``compact``
  (``benchmarks/template_cost.py``), and a model can read what an unseen tool takes and does.
- ``hermes``: Qwen2.5's layout: JSON schemas in ``<tools>``, one ``<tool_call>`` block per call,
  tool results in a user turn inside ``<tool_response>``.
- ``list``: SmolLM2's function-calling prompt: JSON schemas in ``<tools>``, all calls of a turn in
  one ``<tool_call>[{...}, ...]</tool_call>`` list.

``benchmarks/tool_templates.py`` measures how often the model writes a valid call zero-shot with
each; ``trainers.models fetch`` installs the one chosen by that figure (docs/real-model.md).
``check_renders_tools`` is what the policy server and the trainer run before serving a template.
"""

from __future__ import annotations

from typing import Any

from .chat_format import TINY_CHAT_TEMPLATE

__all__ = ["TEMPLATES", "TemplateDropsTools", "check_renders_tools"]

# A user turn or a tool turn; tool results carry their content as is.
_PLAIN_TURN = "{{ '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}"


def _json_tools_template(*, intro: str, outro: str, calls: str, tool_turn: str = "") -> str:
    """A ChatML template whose system turn holds ``intro``, the tools' JSON schemas one per line and
    ``outro`` (Jinja expressions); an assistant turn is its content then ``calls``; ``tool_turn`` is an
    ``elif`` branch for other roles, before the plain turn every other message gets."""
    return (
        "{%- set ns = namespace(start=0) -%}"
        "{%- if tools -%}"
        "{{ '<|im_start|>system\\n' }}"
        "{%- if messages and messages[0].role == 'system' -%}{{ messages[0].content + '\\n\\n' }}"
        "{%- set ns.start = 1 -%}"
        "{%- endif -%}" + intro + "{%- for tool in tools -%}{{ '\\n' + (tool | tojson) }}{%- endfor -%}" + outro +
        "{%- elif messages and messages[0].role == 'system' -%}"
        "{{ '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- set ns.start = 1 -%}"
        "{%- endif -%}"
        "{%- for message in messages[ns.start:] -%}"
        "{%- if message.role == 'assistant' -%}"
        "{{ '<|im_start|>assistant\\n' }}{%- if message.content -%}{{ message.content }}{%- endif -%}"
        + calls + "{{ '<|im_end|>\\n' }}" + tool_turn + "{%- else -%}" + _PLAIN_TURN + "{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
    )  # fmt: skip


# A call's arguments: a JSON string as is, an object as JSON.
_ARGUMENTS = "{%- if f.arguments is string -%}{{ f.arguments }}{%- else -%}{{ f.arguments | tojson }}{%- endif -%}"

_HERMES = _json_tools_template(
    intro="{{ '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}"
    "{{ 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}",
    outro="{{ '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within '"
    ' + \'<tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": \''
    " + '<args-json-object>}\\n</tool_call><|im_end|>\\n' }}",
    calls="{%- for tc in (message.tool_calls or []) -%}"
    "{%- set f = tc.function if tc.function is defined else tc -%}"
    "{%- if message.content or not loop.first -%}{{ '\\n' }}{%- endif -%}"
    '{{ \'<tool_call>\\n{"name": "\' + f.name + \'", "arguments": \' }}' + _ARGUMENTS + "{{ '}\\n</tool_call>' }}"
    "{%- endfor -%}",
    tool_turn="{%- elif message.role == 'tool' -%}"
    "{%- if loop.first or messages[ns.start + loop.index0 - 1].role != 'tool' -%}{{ '<|im_start|>user' }}{%- endif -%}"
    "{{ '\\n<tool_response>\\n' + (message.content or '') + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[ns.start + loop.index0 + 1].role != 'tool' -%}{{ '<|im_end|>\\n' }}{%- endif -%}",
)

_LIST = _json_tools_template(
    intro="{{ 'You are an expert in composing functions. You are given a question and a set of possible functions. '"
    " + 'Based on the question, you will need to make one or more function/tool calls to achieve the purpose. '"
    " + 'When the question is answered, reply in plain text without a tool call.\\n\\n'"
    " + 'You have access to the following tools:\\n<tools>' }}",
    outro="{{ '\\n</tools>\\n\\nThe output MUST strictly adhere to the following format, and NO other text MUST be '"
    ' + \'included.\\n<tool_call>[\\n{"name": "func_name1", "arguments": {"argument1": "value1", \''
    ' + \'"argument2": "value2"}},\\n... (more tool calls as required)\\n]</tool_call><|im_end|>\\n\' }}',
    calls="{%- if message.tool_calls -%}{{ '<tool_call>[' }}"
    "{%- for tc in message.tool_calls -%}"
    "{%- set f = tc.function if tc.function is defined else tc -%}"
    '{{ \'{"name": "\' + f.name + \'", "arguments": \' }}' + _ARGUMENTS + "{{ '}' }}"
    "{%- if not loop.last -%}{{ ', ' }}{%- endif -%}"
    "{%- endfor -%}"
    "{{ ']</tool_call>' }}{%- endif -%}",
)

# A JSON-schema type in ``compact_doc``: an enum as its values, ``list[str]``, a union (``anyOf``, ``X | None``
# in Python) as its non-null members joined by ``|``, ``any`` when the schema names no type.
_DOC_TYPE_MACRO = (
    "{%- macro evolver_doc_type(s) -%}"
    "{%- set types = {'string': 'str', 'integer': 'int', 'number': 'float', 'boolean': 'bool', 'array': 'list',"
    " 'object': 'dict', 'null': 'None'} -%}"
    "{%- if s.enum -%}{%- for e in s.enum -%}{{ e | tojson }}{%- if not loop.last -%}{{ '|' }}{%- endif -%}"
    "{%- endfor -%}"
    "{%- elif s.anyOf -%}{%- set members = s.anyOf | rejectattr('type', 'equalto', 'null') | list -%}"
    "{%- for m in members -%}{{ evolver_doc_type(m) }}{%- if not loop.last -%}{{ '|' }}{%- endif -%}{%- endfor -%}"
    "{%- elif s.type == 'array' and s['items'] is mapping and s['items'].type is string -%}"
    "{{ 'list[' + (types[s['items'].type] if s['items'].type in types else s['items'].type) + ']' }}"
    "{%- elif s.type is string -%}{{ types[s.type] if s.type in types else s.type }}"
    "{%- else -%}{{ 'any' }}{%- endif -%}"
    "{%- endmacro -%}"
)
# One argument in ``compact_doc``: ``name: type``, ``name?: type`` when optional.
_DOC_ARGUMENT = (
    "{{ p }}{%- if p not in (fn.parameters.required or []) -%}{{ '?' }}{%- endif -%}{{ ': ' }}"
    "{{ evolver_doc_type(fn.parameters.properties[p]) }}"
)
_COMPACT_ARGUMENTS = "{%- for p in fn.parameters.properties -%}{{ p }}"
_DOC_ARGUMENTS = "{%- for p in fn.parameters.properties -%}" + _DOC_ARGUMENT
_DOC_LINE_END = (
    "{{ ')' }}{%- set doc = ((fn.description or '').strip().split('\\n') | first).strip() -%}"
    "{%- if doc -%}{{ ' - ' + doc }}{%- endif -%}"
)


def _compact_doc_template() -> str:
    """``compact`` with typed arguments and each tool's first description line (module docstring)."""
    tools_part, rest = TINY_CHAT_TEMPLATE.split("{%- if ns.start == 1 or tools -%}", 1)
    if _COMPACT_ARGUMENTS not in tools_part or tools_part.count("{{ ')' }}") != 1:
        raise AssertionError("the compact template's tool line changed: update _compact_doc_template")
    tools_part = tools_part.replace(_COMPACT_ARGUMENTS, _DOC_ARGUMENTS).replace("{{ ')' }}", _DOC_LINE_END)
    return _DOC_TYPE_MACRO + tools_part + "{%- if ns.start == 1 or tools -%}" + rest


TEMPLATES: dict[str, str] = {"compact": TINY_CHAT_TEMPLATE, "compact_doc": _compact_doc_template(), "hermes": _HERMES,
                             "list": _LIST}  # fmt: skip
"""Tool-calling chat templates by name (module docstring)."""

_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "evolver_probe_lookup",
        "description": "Probe tool.",
        "parameters": {"type": "object", "properties": {"evolver_probe_key": {"type": "string"}}},
    },
}


class TemplateDropsTools(ValueError):
    """The chat template renders a prompt without the tools it was given."""


def check_renders_tools(tokenizer: Any, *, where: str) -> None:
    """Raise ``TemplateDropsTools`` unless ``tokenizer``'s chat template shows a tool's name and its
    parameters when given one (SmolLM2-Instruct's own template silently drops them)."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return  # no template at all: the server refuses chat requests with its own message
    messages = [{"role": "system", "content": "You help."}, {"role": "user", "content": "Look it up."}]
    rendered = tokenizer.apply_chat_template(messages, tools=[_PROBE_TOOL], add_generation_prompt=True, tokenize=False)
    if "evolver_probe_lookup" not in rendered or "evolver_probe_key" not in rendered:
        raise TemplateDropsTools(
            f"{where}: the chat template drops the tools it is given (a prompt rendered with one tool does not "
            "name it), so the model could never call them. Install a template that renders tools: "
            "`python -m trainers.models template <checkpoint> --name compact` (docs/real-model.md), or pass "
            "--allow-template-without-tools to serve it anyway."
        )

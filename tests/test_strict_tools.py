"""Strict tool calls (``trainers.serving.strict_tools``): the scanner's rules, the logits mask, and the policy
server holding the committed tiny policy's calls to tools it was never trained on."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import torch

from tests.test_policy_server_tool_choice import MESSAGES, TOOLS
from trainers.serving.strict_tools import CallScanner, Invalid, TokenTexts, ToolGrammar, constrain_logits

SHEETS = [
    {"type": "function", "function": {"name": "get_cell", "parameters": {
        "type": "object", "properties": {"sheet": {"type": "string"}, "cell": {"type": "string"}},
        "required": ["sheet", "cell"]}}},
    {"type": "function", "function": {"name": "list_sheets", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "note", "parameters": {"type": "object", "additionalProperties": True}}},
]  # fmt: skip
GRAMMAR = ToolGrammar.from_tools(SHEETS)


def broken(text: str) -> str | None:
    """Why ``text`` breaks a rule (None: it keeps them)."""
    try:
        CallScanner.start(GRAMMAR).fed(text)
    except Invalid as e:
        return str(e)
    return None


@pytest.mark.parametrize("text", [
    "What is in C4? I will look.",
    '<tool_call>{"name": "get_cell", "arguments": {"sheet": "Budget", "cell": "C4"}}</tool_call>',
    '<tool_call>\n{"name": "list_sheets", "arguments": {}}\n</tool_call> and then <tool_call>{"name": "get_',
    '<tool_call>[{"name": "list_sheets", "arguments": {}}, {"name": "get_cell", "arguments": {"cell": "A1", '
    '"sheet": "x"}}]</tool_call>',
    '<tool_call>{"name": "get_cell", "arguments": {"sheet": "a \\" } , \\"x", "cell": [1, {"any": {"key": 2}}]}}',
    '<tool_call>{"name": "note", "arguments": {"anything": 1, "goes": true}}</tool_call>',
    '<tool_call>{"arguments": {"whatever": 1}, "name": "get_cell"}</tool_call>',  # arguments first: keys unknown
])  # fmt: skip
def test_calls_that_keep_the_rules(text: str) -> None:
    assert broken(text) is None


@pytest.mark.parametrize(("text", "why"), [
    ('<tool_call>{"name": "sum"', "starts no allowed name"),
    ('<tool_call>{"name": "get_"', "no tool 'get_'"),
    ('<tool_call>{"name": "get_cell", "arguments": {"value": 1', "starts no allowed key"),
    ('<tool_call>{"name": "get_cell", "arguments": {"sheet": "B"}}', "required ['cell']"),
    ('<tool_call>{"name": "get_cell"}', "without the arguments it requires"),
    ('<tool_call>{"name": "get_cell", "arguments": ["B", "C4"]', "must be an object"),
    ('<tool_call>{"parameters"', "starts no allowed key"),
    ('<tool_call>{"name": "list_sheets", "arguments": {"sheet": "B"', "no key is left"),
    ('<tool_call>{"name": "list_sheets", "arguments": {}, ', "no key is left"),
    ('<tool_call>{"name": "list_sheets", "arguments": {}} Done.', "ends with </tool_call>"),
    ('<tool_call>{"arguments": {}}', "without its name"),
])  # fmt: skip
def test_calls_that_break_them(text: str, why: str) -> None:
    assert why in (broken(text) or "")


def test_what_may_come_next() -> None:
    start = CallScanner.start(GRAMMAR)
    assert not start.sensitive and not start.fed("<tool_").active
    name = start.fed('<tool_call>{"name": "get_')
    assert name.sensitive and name.continuations() == ('cell"',)
    key = start.fed('<tool_call>{"name": "get_cell", "arguments": {"sheet": "B", "c')
    assert key.sensitive and key.continuations() == ('ell"',)
    value = start.fed('<tool_call>{"name": "get_cell", "arguments": {"sheet": "B')
    assert not value.sensitive and value.continuations() == ()
    end = start.fed('<tool_call>{"name": "list_sheets", "arguments": {}}</tool')
    assert end.sensitive and end.continuations() == ("_call>",)
    assert not end.fed("_call>").active
    # a forced prefix (tool_choice) is where the scanner starts
    assert CallScanner.start(ToolGrammar.from_tools(SHEETS, prefix='<tool_call>{"name": "')).string == "name"


class _Vocab:
    """A tokenizer of whole strings, enough for ``TokenTexts``."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    def __len__(self) -> int:
        return len(self.pieces)

    def decode(self, ids: list[int], **_: Any) -> str:
        return "".join(self.pieces[i] for i in ids)


PIECES = ["get", "_cell", '"', '",', "sum", " ", "list", "_sheets", "B", "}}", "</tool_call>", "<|im_end|>", '"sheet',
          '"value', "x\"}", "Done"]  # fmt: skip
EOS = 11


def masked(text: str, logits: list[float] | None = None) -> set[str]:
    """The pieces ``constrain_logits`` masks after ``text``."""
    row = torch.tensor(logits or [0.0] * len(PIECES))
    texts = TokenTexts(_Vocab(PIECES), len(PIECES), frozenset({EOS}))
    constrain_logits(row, CallScanner.start(GRAMMAR).fed(text), texts)
    return {PIECES[i] for i in range(len(PIECES)) if row[i] == float("-inf")}


def test_the_mask_keeps_only_what_fits_where_a_name_or_key_goes() -> None:
    assert masked("Let me see") == set()  # free text: nothing masked
    assert set(PIECES) - masked('<tool_call>{"name": "') == {"get", "list"}
    assert set(PIECES) - masked('<tool_call>{"name": "get') == {"_cell"}
    assert set(PIECES) - masked('<tool_call>{"name": "get_cell", "arguments": {') == {'"', " ", '"sheet'}
    # inside a value only what would break the call is masked: the end of the reply inside a call, closing the
    # value and then the arguments without "cell", or then going on without a comma
    inside = masked('<tool_call>{"name": "get_cell", "arguments": {"sheet": "')
    assert inside == {"<|im_end|>", 'x"}', '"sheet', '"value'}
    after = masked('<tool_call>{"name": "get_cell", "arguments": {"sheet": "B"')
    assert {"}}", '"value', "<|im_end|>"} <= after and " " not in after
    # after the call: its end tag or the end of the reply
    assert set(PIECES) - masked('<tool_call>{"name": "list_sheets", "arguments": {}}') == {" ", "</tool_call>",
                                                                                         "<|im_end|>"}  # fmt: skip


def test_where_no_likely_token_fits_the_vocabulary_is_searched(monkeypatch: pytest.MonkeyPatch) -> None:
    import trainers.serving.strict_tools as strict

    monkeypatch.setattr(strict, "CANDIDATES", 2)
    likely = [10.0 if p in ("sum", "Done") else 0.0 for p in PIECES]  # the two most likely both break the name
    assert set(PIECES) - masked('<tool_call>{"name": "', likely) == {"get", "list"}


def strict_tools(renames: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for tool in TOOLS:
        fn = dict(tool["function"])
        fn["name"], fn["strict"] = renames.get(fn["name"], fn["name"]), True
        out.append({"type": "function", "function": fn})
    return out


def calls(url: str, tools: list[dict[str, Any]], strict: bool) -> list[tuple[str, dict[str, Any]]]:
    sent = tools if strict else [{"type": "function", "function": {k: v for k, v in t["function"].items()
                                                                   if k != "strict"}} for t in tools]  # fmt: skip
    body = {"messages": MESSAGES, "tools": sent, "max_tokens": 48, "n": 6, "temperature": 1.0, "seed": 11}
    r = httpx.post(f"{url}/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    out = []
    for choice in r.json()["choices"]:
        for call in choice["message"]["tool_calls"] or ():
            out.append((call["function"]["name"], json.loads(call["function"]["arguments"])))
    return out


def test_the_server_holds_a_strict_request_to_its_tools(tiny_policy_url: str) -> None:
    # The tiny policy learnt these tools as search_contacts etc.; renamed, it still writes the old names...
    renamed = strict_tools({"search_contacts": "find_person", "get_contact": "read_person"})
    loose = calls(tiny_policy_url, renamed, strict=False)
    assert loose and all(name not in {"find_person", "read_person"} for name, _ in loose)
    # ...and with "strict": true every call it makes is one of them, with their argument names.
    held = calls(tiny_policy_url, renamed, strict=True)
    names = {t["function"]["name"]: t["function"]["parameters"] for t in renamed}
    assert held
    for name, arguments in held:
        assert name in names
        assert set(arguments) <= set(names[name]["properties"]) and set(names[name]["required"]) <= set(arguments)


def test_adapt_passes_strict_tools_to_every_server(tmp_path) -> None:
    from trainers.evolve.adapt import Run, make_parser
    from trainers.evolve.evaluation import grpo_config

    base = ["--env", "sandbox", "--minutes", "1", "--output_dir", str(tmp_path)]
    assert not make_parser().parse_args([*base, "--no_strict_tools"]).strict_tools
    run = Run(make_parser().parse_args(base))  # on by default
    assert grpo_config(run.train_keys(), tmp_path).policy_server_strict_tools  # the GRPO child's server


LIBRARY = [
    {"type": "function", "function": {"name": "list_loans", "parameters": {"type": "object", "properties": {
        "member_id": {"type": "string"}}, "required": ["member_id"]}}},
    {"type": "function", "function": {"name": "pay_fine", "parameters": {"type": "object", "properties": {
        "member_id": {"type": "string"}, "amount": {"type": "number"}, "method": {"enum": ["cash", "card"]},
        "note": {"type": "string"}, "loanId": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        "required": ["member_id"]}}},
]  # fmt: skip
CONTEXT = 'How many books does Dev Patel have out?\n{"member_id": "M4", "name": "Dev Patel"}'


def held(text: str, context: str | None = CONTEXT) -> str | None:
    try:
        CallScanner.start(ToolGrammar.from_tools(LIBRARY, context=context)).fed(text)
    except Invalid as e:
        return str(e)
    return None


def test_ids_are_copied_from_the_conversation_and_listed_values_kept() -> None:
    call = '<tool_call>{"name": "pay_fine", "arguments": {"member_id": '
    assert held(f'{call}"M4", "note": "726", "amount": 726}}}}</tool_call>') is None  # only ids are held
    assert "no id '7'" in (held(f'{call}"726"') or "")  # an id nobody showed
    assert held(f'{call}"726"', context=None) is None  # without a context (per-request strict) ids are free
    assert held(f'{call}"Dev Patel"') is None  # a piece of the request: the server's error will say what to do
    assert "empty" in (held(f'{call}""') or "")
    assert "starts with a space" in (held(f'{call}" M4"') or "")  # no record's id has a space around it
    assert "ends with a space" in (held(f'{call}"Dev "') or "")
    assert "no id 'L'" in (held(f'{call}"M4", "loanId": "L') or "")  # camelCase, a union with string
    assert held(f'{call}"M4", "method": "card"}}}}') is None
    assert "not one of" in (held(f'{call}"M4", "method": "car"') or "")
    assert "starts no allowed" in (held(f'{call}"M4", "method": "cheque"') or "")
    # where an id goes, only what the conversation has after the text so far may come
    scanner = CallScanner.start(ToolGrammar.from_tools(LIBRARY, context=CONTEXT)).fed(f'{call}"M')
    assert scanner.sensitive and scanner.continuations() == ('"', "4")
    enum = scanner.fed('4", "method": "ca')
    assert enum.sensitive and enum.continuations() == ('sh"', 'rd"')


def test_the_server_grounds_ids_only_with_grounded_ids() -> None:
    from trainers.serving.app import _tool_grammar
    from trainers.serving.protocol import ChatCompletionRequest
    from trainers.serving.tool_choice import ToolChoice

    messages = [{"role": "system", "content": "ids look like Z9"}, {"role": "user", "content": "Dev Patel"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "function": {
                    "name": "find_member", "arguments": '{"name": "Dev Patel"}'}}]},
                {"role": "tool", "tool_call_id": "1",
                 "content": [{"type": "text", "text": '{"member_id": "M4"}'}]}]  # fmt: skip
    body = ChatCompletionRequest(messages=messages, tools=LIBRARY)
    auto = ToolChoice(mode="auto")
    grammar = _tool_grammar(body, auto, None, True, grounded=True)
    assert grammar is not None and grammar.context == 'Dev Patel\n{"member_id": "M4"}'  # user and tool texts
    assert _tool_grammar(body, auto, None, True).context is None  # without --grounded-ids
    strict_one = [dict(LIBRARY[0], function={**LIBRARY[0]["function"], "strict": True}), LIBRARY[1]]
    per_request = _tool_grammar(ChatCompletionRequest(messages=messages, tools=strict_one), auto, None, False)
    assert per_request is not None and per_request.context is None  # "strict": true is the schema alone
    from trainers.serving.cli import make_parser

    args = make_parser().parse_args(["--model", "m", "--strict-tools", "--grounded-ids"])
    assert args.strict_tools and args.grounded_ids and not make_parser().parse_args(["--model", "m"]).grounded_ids

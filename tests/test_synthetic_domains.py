"""Generated tool domains for the warm start (issue 43): deterministic, varied, solved by real calls,
rendered with the real tokenizer so the loss falls on the reference calls and not on the mistakes; the
warm start's --synthetic-share and --exclude-apps; the compact_doc template."""

from __future__ import annotations

import collections
import json
import re

import pytest

from trainers.synthetic_domains import make_domain, synthetic_chat, synthetic_chats, synthetic_count, without_apps
from trainers.warm_start import make_parser

ID_LIKE = re.compile(r"_(id|ref)$|Id$|Ref$")


def _calls(messages: list[dict]) -> list[tuple[dict, str, int]]:
    """(function, observation, weight) of each call in a chat."""
    out = []
    for i, m in enumerate(messages):
        if m.get("tool_calls"):
            out.append((m["tool_calls"][0]["function"], messages[i + 1]["content"], m.get("weight", 1)))
    return out


def test_a_seed_gives_the_same_domain_and_chat_and_seeds_differ():
    assert make_domain(7).tools == make_domain(7).tools
    assert synthetic_chat(7, mistake_rate=0.5) == synthetic_chat(7, mistake_rate=0.5)
    names = {tuple(sorted(t["function"]["name"] for t in make_domain(s).tools)) for s in range(100)}
    assert len(names) > 80  # the model must read the tool list: it is rarely the same twice


def test_domains_vary_names_layouts_errors_and_tasks():
    chats = synthetic_chats(400, mistake_rate=0.5)
    domains = [make_domain(s) for s in range(400)]
    tool_names = [t["function"]["name"] for d in domains for t in d.tools]
    assert any("_" in n for n in tool_names) and any(re.search("[a-z][A-Z]", n) for n in tool_names)
    assert {d.list_layout for d in domains} == {"json", "blocks"}
    assert {d.error_style for d in domains} == {"plain", "tool", "json"}
    assert len({d.date_format[0] for d in domains}) == 3
    enums = [p for d in domains for t in d.tools for p in t["function"]["parameters"]["properties"].values()]
    assert any("enum" in p for p in enums)
    params = [t["function"]["parameters"] for d in domains for t in d.tools]
    assert any(set(p["properties"]) - set(p["required"]) for p in params)  # optional arguments
    counts = collections.Counter(sum(w for _, _, w in _calls(m)) for m, _ in chats)
    assert set(counts) == {1, 2, 3, 4}, counts
    observations = [obs for m, _ in chats for _, obs, _ in _calls(m)]
    assert any(o.startswith("[{") for o in observations)  # a list of objects
    assert any(o.startswith('["') or o.startswith("[]") for o in observations)  # a bare list of ids
    assert any('"details": {' in o for o in observations)  # a nested object
    assert any(o.startswith("{") and "\n{" in o for o in observations)  # one object per line, as MCP lists arrive


def test_reference_calls_succeed_mistakes_fail_out_of_the_loss_and_ids_are_copied():
    mistakes = copied = 0
    for messages, tools in synthetic_chats(300, seed=1000, mistake_rate=0.5):
        names = {t["function"]["name"] for t in tools}
        seen = messages[1]["content"]
        for fn, obs, weight in _calls(messages):
            assert fn["name"] in names
            is_error = obs.startswith(("Error", '{"error"'))
            assert is_error == (weight == 0), (fn, obs)
            mistakes += weight == 0
            if weight:
                for key, value in fn["arguments"].items():
                    if ID_LIKE.search(key):  # every id a reference call uses was read from an earlier observation
                        assert json.dumps(value) in seen or str(value) in seen, (key, value, seen)
                        copied += 1
            seen += "\n" + obs
        assert messages[-1]["role"] == "assistant" and messages[-1]["content"]
    assert 100 < mistakes < 200 and copied > 300


def test_the_loss_covers_reference_calls_and_not_the_mistake_with_the_real_tokenizer():
    from transformers import AutoTokenizer

    from trainers.models import fetch
    from trainers.tiny import encode_example
    from trainers.tool_templates import TEMPLATES

    tok = AutoTokenizer.from_pretrained(fetch("smollm2-135m-instruct", log=lambda *_: None))
    tok.chat_template = TEMPLATES["compact_doc"]
    seed = next(s for s in range(100) if any(w == 0 for _, _, w in _calls(synthetic_chat(s, mistake_rate=1)[0])))
    messages, tools = synthetic_chat(seed, mistake_rate=1)
    ids, labels = encode_example(tok, messages, tools)
    prompt = tok.decode(ids)
    trained = tok.decode([t for t in labels if t != -100])
    for tool in tools:  # the prompt shows every tool's first description line
        assert tool["function"]["description"].split("\n")[0] in prompt
    (wrong,) = [fn for fn, _, w in _calls(messages) if w == 0]
    right = [fn for fn, _, w in _calls(messages) if w]
    assert json.dumps(wrong["arguments"]) not in trained and json.dumps(wrong["arguments"]) in prompt
    for fn in right:
        assert json.dumps({"name": fn["name"], "arguments": fn["arguments"]}) in trained
    assert messages[-1]["content"] in trained and messages[1]["content"] not in trained


def test_the_warm_start_mixes_generated_chats_and_leaves_apps_out():
    from trainers.synthetic_domains import supervised_chats

    base = ["--model", "m", "--out", "o", "--examples", "60"]
    plain = supervised_chats(make_parser().parse_args(base))
    mixed = supervised_chats(make_parser().parse_args([*base, "--synthetic-share", "0.5"]))
    sandbox_tools = {t["function"]["name"] for _, tools in plain for t in tools}
    generated = [c for c in mixed if not {t["function"]["name"] for t in c[1]} <= sandbox_tools]
    assert abs(len(generated) / len(mixed) - 0.5) < 0.05 and len(mixed) >= 0.8 * len(plain)
    left_out = supervised_chats(make_parser().parse_args([*base, "--exclude-apps", "calendar,flights"]))
    from env_tools.sandbox.apps import APPS

    hidden = set(APPS["calendar"]) | set(APPS["flights"])
    assert any({t["function"]["name"] for t in tools} & hidden for _, tools in plain)
    assert left_out and not any({t["function"]["name"] for t in tools} & hidden for _, tools in left_out)


def test_bad_shares_and_unknown_apps_say_what_to_fix():
    assert synthetic_count(100, 0.0) == 0 and synthetic_count(100, 0.75) == 300
    with pytest.raises(SystemExit, match=r"--synthetic-share must be in \[0, 1\)"):
        synthetic_count(100, 1.0)
    with pytest.raises(SystemExit, match="no sandbox app calender; the apps are calendar"):
        without_apps([object()], ["calender"])


def test_compact_doc_shows_types_enums_optional_arguments_and_descriptions():
    from transformers.utils.chat_template_utils import render_jinja_template

    from trainers.tool_templates import TEMPLATES

    tools = [{"type": "function", "function": {
        "name": "book", "description": "Book a free slot; returns the booking.\nMore detail here.",
        "parameters": {"type": "object", "properties": {
            "patient": {"type": "string"}, "slot_id": {"type": "string"}, "seats": {"type": "integer"},
            "kind": {"type": "string", "enum": ["new", "follow-up"]}}, "required": ["patient", "slot_id"]}}},
        {"type": "function", "function": {"name": "list_doctors", "parameters": {"type": "object", "properties": {}}}},
    ]  # fmt: skip
    (text,), _ = render_jinja_template(conversations=[[{"role": "user", "content": "hi"}]], tools=tools,
                                       chat_template=TEMPLATES["compact_doc"], add_generation_prompt=True)  # fmt: skip
    lines = text.split("Tools:\n")[1].split("<|im_end|>")[0].split("\n")
    assert lines == [
        'book(patient: str, slot_id: str, seats?: int, kind?: "new"|"follow-up")'
        " - Book a free slot; returns the booking.",
        "list_doctors()",
    ]


def test_the_template_cost_benchmark_counts_both_templates_on_the_sandbox_and_a_real_mcp_server(capsys):
    import sys
    from pathlib import Path

    from benchmarks.template_cost import main

    clinic = Path(__file__).resolve().parent.parent / "examples" / "mcp_servers" / "clinic.py"
    spec = f"mcp:{sys.executable} {clinic}"
    result = main(["--tasks", "4", "--env", spec])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
    for where in ("sandbox", spec):
        figures = result[where]
        assert figures["compact_doc"] > figures["compact"] > 20 and figures["extra_tokens"] > 0
    assert result[spec]["tools"] == 5  # the clinic's five tools, as the agent gets them


def test_leave_app_out_splits_the_test_tasks_by_the_apps_left_out():
    from benchmarks.leave_app_out import split_by_apps
    from env_tools.sandbox import generate_tasks
    from env_tools.sandbox.apps import APPS

    tasks = generate_tasks("test", 60)
    unseen, seen = split_by_apps(tasks, ["calendar"])
    assert unseen and seen and len(unseen) + len(seen) == len(tasks)
    assert all("calendar" in t.metadata["apps"] or any(c.name in APPS["calendar"] for c in t.reference_solution)
               for t in unseen)  # fmt: skip
    assert not any("calendar" in t.metadata["apps"] for t in seen)


def test_compact_doc_shows_unions_optional_enums_and_typed_lists_as_mcp_servers_declare_them():
    from transformers.utils.chat_template_utils import render_jinja_template

    from trainers.tool_templates import TEMPLATES

    props = {"status": {"anyOf": [{"enum": ["created", "held"], "type": "string"}, {"type": "null"}]},
             "value": {"anyOf": [{"type": "string"}, {"type": "number"}]},
             "tags": {"type": "array", "items": {"type": "string"}}}  # fmt: skip
    tools = [{"type": "function", "function": {"name": "f", "description": "F.",
                                               "parameters": {"type": "object", "properties": props,
                                                              "required": ["value"]}}}]  # fmt: skip
    (text,), _ = render_jinja_template(conversations=[[{"role": "user", "content": "hi"}]], tools=tools,
                                       chat_template=TEMPLATES["compact_doc"])  # fmt: skip
    assert 'f(status?: "created"|"held", value: str|float, tags?: list[str]) - F.' in text

"""The tool templates a real model is served with: they show the tools, their calls parse back, and a
template that drops the tools is refused by the server and the trainer."""

from __future__ import annotations

import json

import pytest

from trainers.chat_format import normalize_messages, parse_tool_calls
from trainers.tool_templates import TEMPLATES, TemplateDropsTools, check_renders_tools

TOOLS = [
    {"type": "function", "function": {"name": "search_contacts", "description": "Find contacts.",
                                      "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "send_message", "description": "Send a message.",
                                      "parameters": {"type": "object", "properties": {"contact_id": {"type": "string"},
                                                                                      "text": {"type": "string"}}}}},
]  # fmt: skip
CALLS = [("search_contacts", {"query": "Pia"}), ("send_message", {"contact_id": "c1", "text": 'Hi, "you" é'})]
CHAT = [
    {"role": "system", "content": "Use the tools."},
    {"role": "user", "content": "Tell Pia hi."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, (n, a) in enumerate(CALLS)]},
    {"role": "tool", "tool_call_id": "call_0", "content": '[{"id": "c1"}]'},
    {"role": "tool", "tool_call_id": "call_1", "content": "sent"},
    {"role": "assistant", "content": "Done."},
]  # fmt: skip


def _render(template: str, messages: list[dict], **kw) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(conversations=[normalize_messages(messages)], tools=TOOLS,
                                        chat_template=template, **kw)  # fmt: skip
    return rendered[0]


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_calls_round_trip_and_every_tool_and_result_is_shown(name):
    text = _render(TEMPLATES[name], CHAT)
    for tool in ("search_contacts", "send_message", "contact_id"):
        assert tool in text, (name, tool)
    assert '[{"id": "c1"}]' in text and "sent" in text
    first_turn = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    parsed = parse_tool_calls(first_turn)
    assert parsed.parse_error is None
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls] == CALLS
    # the prompt for a turn is a prefix of the whole chat (what the warm start's loss mask relies on)
    assert text.startswith(_render(TEMPLATES[name], CHAT[:5], add_generation_prompt=True))


def test_the_list_form_holds_several_calls_and_an_empty_list_is_no_call():
    parsed = parse_tool_calls(
        '<tool_call>[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]</tool_call>'
    )
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["a", "b"] and parsed.parse_error is None
    assert json.loads(parsed.tool_calls[0]["function"]["arguments"]) == {"x": 1}
    empty = parse_tool_calls("Nothing to call.<tool_call>[]</tool_call>")
    assert empty.tool_calls == [] and empty.parse_error is None and empty.content == "Nothing to call."
    bad = parse_tool_calls('<tool_call>[{"name": "a"}, 3]</tool_call>')
    assert bad.tool_calls == [] and "needs" in (bad.parse_error or "")


def test_a_template_that_drops_the_tools_is_refused():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained("checkpoints/tiny-policy")
    check_renders_tools(tokenizer, where="here")  # the tiny template lists its tools
    # SmolLM2-Instruct's own template: ChatML that ignores `tools`
    tokenizer.chat_template = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
                               "message['content'] + '<|im_end|>\n'}}{% endfor %}"
                               "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")  # fmt: skip
    with pytest.raises(TemplateDropsTools, match="drops the tools"):
        check_renders_tools(tokenizer, where="policy server --model x")


def test_server_and_trainer_refuse_a_checkpoint_whose_template_drops_tools(tmp_path, capsys):
    import shutil

    from trainers.grpo import cli
    from trainers.serving.cli import main as serve

    ckpt = tmp_path / "no-tools"
    shutil.copytree("checkpoints/tiny-policy", ckpt)
    (ckpt / "chat_template.jinja").unlink(missing_ok=True)
    cfg = json.loads((ckpt / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\n' }}{% endfor %}"
    (ckpt / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(SystemExit, match="drops the tools.*--allow-template-without-tools"):
        serve(["--model", str(ckpt), "--port", "1"])
    with pytest.raises(SystemExit) as stopped:
        cli(["--config", "examples/quickstart.yaml", "--model_name_or_path", str(ckpt), "--output_dir",
             str(tmp_path / "run"), "--max_steps", "1"])  # fmt: skip
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert stopped.value.code == 2 and "drops the tools" in last and "allow_template_without_tools: true" in last
    assert not (tmp_path / "run").exists()  # refused before anything was started or written

"""The tiny policy's bootstrap: tokenizer, chat template, loss masks, recovery data, CLI."""

from __future__ import annotations

import json
import random

import pytest

from env_tools.sandbox import generate_tasks, seed_tasks
from env_tools.sandbox.world import CITIES, FIRST_NAMES
from trainers.chat_format import EOS_TOKEN, TINY_CHAT_TEMPLATE, normalize_messages, parse_tool_calls
from trainers.tiny import build_model, build_tiny_tokenizer, encode_example, reference_conversation


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer(300)


def test_digits_are_single_tokens_and_names_are_not_merged_whole(tokenizer):
    assert tokenizer.tokenize("555-204") == ["5", "5", "5", "-", "2", "0", "4"]
    for name in FIRST_NAMES + CITIES:
        if len(name) > 2:
            assert len(tokenizer.tokenize(name)) >= 2, name
            assert len(tokenizer.tokenize(" " + name)) >= 2, name


def test_template_lists_tools_compactly_and_renders_calls_like_qwen(tokenizer):
    task = next(t for t in seed_tasks("train") if t.metadata["template"] == "message_contact")
    messages, tools = reference_conversation(task)
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    assert "\nTools:\nsearch_contacts(query)\n" in text
    assert "send_message(contact_id, text)" in text
    call = task.reference_solution[1]
    assert f'<tool_call>{{"name": "send_message", "arguments": {json.dumps(call.arguments)}}}</tool_call>' in text
    assert text.count("<|im_start|>assistant\n") == len(task.reference_solution) + 1
    assert tokenizer.chat_template == TINY_CHAT_TEMPLATE
    # OpenAI-style requests (arguments as JSON strings) render to the same bytes
    openai_style = json.loads(json.dumps(messages))
    for m in openai_style:
        for tc in m.get("tool_calls") or []:
            tc["function"]["arguments"] = json.dumps(tc["function"]["arguments"])
    again = tokenizer.apply_chat_template(normalize_messages(openai_style), tools=tools, tokenize=False)
    assert again == text


def test_loss_mask_covers_assistant_turns_only(tokenizer):
    task = next(t for t in seed_tasks("train") if t.metadata["template"] == "contact_city")
    ids, labels = encode_example(tokenizer, *reference_conversation(task))
    target = tokenizer.decode([i for i, lab in zip(ids, labels, strict=True) if lab != -100])
    expected = (
        "".join(
            f'<tool_call>{{"name": "{c.name}", "arguments": {json.dumps(c.arguments)}}}</tool_call>{EOS_TOKEN}'
            for c in task.reference_solution
        )
        + f"{task.metadata['answer']}{EOS_TOKEN}"
    )
    assert target == expected


def test_recovery_examples_show_the_error_but_train_only_the_fix(tokenizer):
    rng = random.Random(3)
    found = 0
    for task in generate_tasks("train", 60):
        messages, tools = reference_conversation(task, rng=rng, mistake_rate=1.0)
        mistakes = [i for i, m in enumerate(messages) if m.get("weight") == 0]
        assert len(mistakes) == 1
        after = messages[mistakes[0] + 1]
        assert after["content"].startswith("Error:")
        ids, labels = encode_example(tokenizer, messages, tools)
        target = tokenizer.decode([i for i, lab in zip(ids, labels, strict=True) if lab != -100])
        clean_ids, clean_labels = encode_example(tokenizer, *reference_conversation(task))
        clean = tokenizer.decode([i for i, lab in zip(clean_ids, clean_labels, strict=True) if lab != -100])
        assert target == clean  # the mistake is in the prompt, never in the targets
        if messages[mistakes[0]]["content"]:
            assert parse_tool_calls(messages[mistakes[0]]["content"]).parse_error is not None
        found += 1
    assert found == 60


def test_model_is_a_small_qwen2(tokenizer):
    model = build_model(tokenizer)
    assert model.config.model_type == "qwen2"
    assert 0.5e6 < sum(p.numel() for p in model.parameters()) < 2e6
    assert model.config.tie_word_embeddings


@pytest.mark.slow
def test_warm_start_cli_writes_a_loadable_checkpoint(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainers.tiny import main

    out = tmp_path / "tiny"
    main(["--out", str(out), "--minutes", "0.1", "--examples", "150", "--eval-tasks", "3", "--eval-every", "0.05",
          "--threads", "1", "--hidden", "64", "--layers", "2"])  # fmt: skip
    summary = json.loads((out / "warm_start_summary.json").read_text())
    assert summary["steps"] > 0 and summary["chosen_step"] is not None
    history = [json.loads(line) for line in (out / "warm_start_history.jsonl").read_text().splitlines()]
    assert {"success_l1", "parse_rate", "step"} <= set(history[-1])
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert tok.chat_template == TINY_CHAT_TEMPLATE
    assert model.config.hidden_size == 64

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


class _BagOfWords:
    """Deterministic embeddings for a pool without MiniLM: each word hashed to one of 64 buckets."""

    def _vector(self, text: str) -> list[float]:
        import hashlib
        import re

        vector = [0.0] * 64
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1.0
        norm = sum(v * v for v in vector) ** 0.5 or 1.0
        return [v / norm for v in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def _navigator(top_k: int = 2):
    from langgraph_evolver.experience import FaissExperiencePool, Navigator
    from langgraph_evolver.experience.types import Experience

    pool = FaissExperiencePool(_BagOfWords())
    pool.add([
        Experience(when_to_use="the request asks for a contact's city", content="Call search_contacts first."),
        Experience(when_to_use="the request asks to message a contact", content="Use contact_id from the search."),
        Experience(when_to_use="the request asks about the weather", content="Look up the city, then forecast."),
    ])  # fmt: skip
    return Navigator(pool, top_k=top_k)


def test_experience_rate_chats_hold_the_rollout_block_outside_the_loss(tokenizer):
    from langchain_core.messages import SystemMessage

    from env_tools.sandbox import SandboxEnvironment
    from langgraph_evolver.experience.navigate import BLOCK_HEADER, BLOCK_SEPARATOR, inject_experience
    from trainers.tiny import guided_conversation

    task = next(t for t in seed_tasks("train") if t.metadata["template"] == "contact_city")
    navigator = _navigator()
    messages, tools, block = guided_conversation(task, navigator)
    plain, _ = reference_conversation(task)
    # the block the Navigator retrieves for this task at rollout time, injected by inject_experience
    obs = SandboxEnvironment().reset(task)
    at_rollout = navigator.block_for(task, obs)
    assert block == at_rollout and len(block.ids) == 2
    injected = inject_experience([SystemMessage(obs.messages[0]["content"])], at_rollout)[0].content
    assert messages[0] == {**plain[0], "content": injected}
    assert messages[0]["content"] == plain[0]["content"] + BLOCK_SEPARATOR + block.text
    assert block.text.startswith(BLOCK_HEADER) and messages[1:] == plain[1:]
    # rendered in the system turn, before the user's request; the loss covers the same tokens as without it
    text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    assert text.index(block.text) < text.index("<|im_start|>user")
    ids, labels = encode_example(tokenizer, messages, tools)
    plain_ids, plain_labels = encode_example(tokenizer, plain, tools)
    target = [i for i, lab in zip(ids, labels, strict=True) if lab != -100]
    assert target == [i for i, lab in zip(plain_ids, plain_labels, strict=True) if lab != -100]
    block_len = len(ids) - len(plain_ids)
    start = next(i for i, (a, b) in enumerate(zip(ids, plain_ids, strict=False)) if a != b)
    assert block_len > 20 and all(lab == -100 for lab in labels[start : start + block_len])
    assert tokenizer.decode(ids[start : start + block_len]) in BLOCK_SEPARATOR + block.text + "\n"


def test_experience_block_is_trimmed_to_fit_the_context(tokenizer):
    from trainers.tiny import _render, guided_conversation

    task = next(t for t in seed_tasks("train") if t.metadata["template"] == "contact_city")
    navigator = _navigator(top_k=3)
    full, tools, block = guided_conversation(task, navigator)
    plain, _ = reference_conversation(task)
    n_full = len(tokenizer(_render(full, tools), add_special_tokens=False).input_ids)
    n_plain = len(tokenizer(_render(plain, tools), add_special_tokens=False).input_ids)
    assert len(block.ids) == 3
    messages, _, trimmed = guided_conversation(task, navigator, max_tokens=n_full - 1, tokenizer=tokenizer)
    assert 1 <= len(trimmed.ids) < 3 and trimmed.ids == block.ids[: len(trimmed.ids)]
    assert len(tokenizer(_render(messages, tools), add_special_tokens=False).input_ids) <= n_full - 1
    messages, _, none = guided_conversation(task, navigator, max_tokens=n_plain, tokenizer=tokenizer)
    assert none is None and messages == plain


def test_experience_rate_cli_keeps_the_init_tokenizer(tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    import trainers.tiny as tiny

    monkeypatch.setattr(tiny, "build_tiny_tokenizer", lambda *a, **k: pytest.fail("retrained the tokenizer"))
    monkeypatch.setattr(tiny, "experience_navigator", lambda pool_dir, top_k: _navigator(top_k))
    evaluated = []  # (split of the tasks, guided): the rollouts themselves are the slow part, stubbed here

    def evaluate(model, tokenizer, tasks, *, temperature, navigator=None):
        evaluated.append((tasks[0].id, navigator is not None))
        return {"success": 0.5, "parse_rate": 1.0}

    monkeypatch.setattr(tiny, "evaluate_in_process", evaluate)
    out = tmp_path / "navigate"
    tiny.main(["--init-from", str(tiny.DEFAULT_CHECKPOINT), "--out", str(out), "--minutes", "0.01", "--examples", "16",
               "--experience-rate", "1", "--experience-pool", "unused", "--eval-split", "validation",
               "--eval-tasks", "1", "--eval-every", "100", "--keep", "last", "--threads", "1"])  # fmt: skip
    summary = json.loads((out / "warm_start_summary.json").read_text())
    assert summary["experience_rate"] == 1 and summary["experience_top_k"] == 3
    history = json.loads((out / "warm_start_history.jsonl").read_text().splitlines()[-1])
    assert history["eval_split"] == "validation" and history["guided_success"] == 0.5
    assert evaluated == [("sandbox-train-200000", False), ("sandbox-train-200000", True)]
    assert (
        AutoTokenizer.from_pretrained(out).get_vocab()
        == AutoTokenizer.from_pretrained(tiny.DEFAULT_CHECKPOINT).get_vocab()
    )


def test_task_store_tasks_join_the_supervised_chats_and_held_out_ones_are_refused(tmp_path, tokenizer):
    import dataclasses

    from env_tools.sandbox import SandboxEnvironment
    from langgraph_evolver.questioning import TaskStore, exploration_task, explore, synthesize
    from trainers.tiny import store_tasks

    world = exploration_task(generate_tasks("train", 1, start=100_000)[0], env="sandbox", seed=0)
    synthetic = synthesize(explore(SandboxEnvironment(), world, n_breadth=3, n_depth=8, seed=0), max_tasks=4, seed=0)
    assert synthetic
    with TaskStore(tmp_path / "tasks.sqlite") as store:
        store.add_many(synthetic)
    tasks = store_tasks(tmp_path / "tasks.sqlite")
    assert sorted(t.id for t in tasks) == sorted(t.id for t in synthetic)
    messages, tools = reference_conversation(tasks[0])
    assert messages[1]["content"] == tasks[0].query  # the synthetic phrasing, solved by its reference
    calls = [m["tool_calls"][0]["function"]["name"] for m in messages if m.get("tool_calls")]
    assert calls == [c.name for c in tasks[0].reference_solution]
    ids, labels = encode_example(tokenizer, messages, tools)
    assert any(x != -100 for x in labels)

    held_out = generate_tasks("test", 1)[0]
    with TaskStore(tmp_path / "leak.sqlite") as store:
        store.add_many([dataclasses.replace(synthetic[0], id="synthetic-x", query=held_out.query)])
    with pytest.raises(SystemExit, match="held-out"):
        store_tasks(tmp_path / "leak.sqlite")
    with TaskStore(tmp_path / "world.sqlite") as store:  # a new task, but set in a held-out world
        store.add_many([dataclasses.replace(synthetic[0], id="synthetic-y", env_params=held_out.env_params)])
    with pytest.raises(SystemExit, match="held-out"):
        store_tasks(tmp_path / "world.sqlite")
    with pytest.raises(SystemExit, match="no such file"):
        store_tasks(tmp_path / "missing.sqlite")

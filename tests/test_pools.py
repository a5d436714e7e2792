"""The sandbox's disjoint pools (sft, rl, validation, test) and the overlap checks that guard them (issue 42)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from env_tools.sandbox import SandboxEnvironment, seed_tasks
from env_tools.sandbox.pools import POOLS, pool_tasks, signature, split_tasks
from langgraph_evolver.errors import ConfigError
from tests.conftest import LORA
from trainers.pools import (
    check_disjoint,
    check_grpo_tasks,
    load_spec,
    main,
    new_recipe,
    old_recipe,
    overlap,
    read_supervised,
    record_supervised,
)

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")


def test_the_pools_share_no_id_and_no_signature_at_their_full_size():
    pools = {name: pool_tasks(name, pool.capacity if name != "sft" else 6000) for name, pool in POOLS.items()}
    for name, tasks in pools.items():
        assert len(tasks) == (POOLS[name].capacity if name != "sft" else 6000)
    names = list(pools)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not {t.id for t in pools[a]} & {t.id for t in pools[b]}, (a, b)
            assert not {signature(t) for t in pools[a]} & {signature(t) for t in pools[b]}, (a, b)
    # the generator does repeat signatures across worlds: without the dedupe they would meet
    assert {signature(t) for t in split_tasks("train:3000")} & {signature(t) for t in pools["test"]}


def test_a_size_is_a_prefix_of_the_same_pool_and_test_keeps_the_seed_tasks():
    assert [t.id for t in pool_tasks("rl", 40)] == [t.id for t in pool_tasks("rl", 200)[:40]]
    assert [t.id for t in split_tasks("test")] == [t.id for t in seed_tasks("test")]
    assert len(split_tasks("test:150")) == 150 and len(split_tasks("validation")) == 75
    assert [t.id for t in SandboxEnvironment().list_tasks("rl:5")] == [t.id for t in pool_tasks("rl", 5)]


@pytest.mark.parametrize(("split", "message"), [("rl:x", "NAME:N"), ("nope", "Unknown split 'nope'"),
                                                ("test:151", "at most 150")])  # fmt: skip
def test_a_bad_split_says_what_to_write(split, message):
    with pytest.raises(Exception, match=message):
        SandboxEnvironment().list_tasks(split)


def test_the_old_recipe_overlaps_as_the_issue_says_and_the_pools_do_not():
    assert old_recipe() == {"rl_tasks_supervised": 90, "rl_tasks": 120, "heldout_repeating_sft": 12,
                            "heldout_tasks": 40}  # fmt: skip
    figures = new_recipe(examples=3000, rl=600, test=75)
    assert figures["rl_tasks_supervised"] == 0 and figures["heldout_repeating_sft"] == 0
    assert figures["heldout_tasks"] == 75 and figures["rl_tasks"] > 400


def test_check_disjoint_names_the_first_overlapping_task_and_both_pools():
    train, test = split_tasks("train:30"), split_tasks("test:10")
    with pytest.raises(ConfigError) as e:
        check_disjoint({"sft": train, "test": test})
    first = overlap(train, test)["first"]
    assert f"first {first['task']}" in str(e.value) and "the sft tasks and the test tasks" in str(e.value)
    check_disjoint({"sft": pool_tasks("sft", 300), "rl": pool_tasks("rl", 300), "test": split_tasks("test")})


def test_grpo_refuses_rl_tasks_the_warm_start_supervised_and_warns_on_the_legacy_split(tmp_path):
    rl, test = pool_tasks("rl", 20), split_tasks("test")
    assert check_grpo_tasks("rl", rl, "test", test, None) is None
    record_supervised(tmp_path, [*pool_tasks("sft", 10), rl[3]], split="sft:10")
    assert read_supervised(tmp_path)["tasks"] == 11
    with pytest.raises(ConfigError, match=f"first {rl[3].id}"):
        check_grpo_tasks("rl", rl, "test", test, str(tmp_path))
    warning = check_grpo_tasks("train", split_tasks("train"), "test", test, None)
    assert warning and "legacy split" in warning


def test_the_overlap_command_reads_pools_and_task_files(tmp_path, capsys):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in split_tasks("test:5")))
    assert main(["overlap", str(path), "sandbox:test:75"]) == 0
    found = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert found["by_id"] == 5 and found["by_signature"] == 5
    assert main(["overlap", "sandbox:sft:500", "sandbox:validation"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["either"] == 0
    assert main(["overlap", str(tmp_path / "missing.jsonl"), "sandbox:rl"]) == 2
    assert "neither sandbox:NAME" in capsys.readouterr().err


def test_the_overlap_command_reads_mcp_task_files_and_counts_the_same_calls_in_other_words(tmp_path, capsys):
    """A hand-written MCP task and a synthesized Task row asking for the same reads in other words share
    neither an id nor a signature, only their reference calls (``by_calls``), which ``check_disjoint`` allows."""
    calls = [
        {"name": "find_member", "arguments": {"name": "Ben Osei"}},
        {"name": "get_member", "arguments": {"member_id": "M2"}},
    ]
    mine = tmp_path / "mine.jsonl"
    mine.write_text(
        json.dumps(
            {"id": "lib-3", "instruction": "How much does Ben Osei owe in fines?", "reference": calls, "answer": "2.5"}
        )
        + "\n"
        + json.dumps({"id": "lib-4", "instruction": "Who wrote Beloved?"})
        + "\n"
    )
    synth = tmp_path / "synth.jsonl"
    rows = [
        {"id": "s1", "query": "What is the fine of Ben Osei?", "env": "mcp", "reference_solution": calls},
        {"id": "s2", "query": "Who wrote Beloved?", "env": "mcp", "reference_solution": calls[:1]},
    ]
    synth.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["overlap", str(mine), str(synth)]) == 0
    found = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (found["a"], found["by_id"], found["by_signature"], found["by_calls"]) == (2, 0, 0, 1)
    assert overlap(load_spec(str(synth)), load_spec(str(mine)))["by_calls"] == 1  # s2's one lookup is not lib-3's two
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    assert main(["overlap", str(bad), str(synth)]) == 2
    assert "not JSON" in capsys.readouterr().err


def test_trainers_grpo_refuses_to_train_on_its_held_out_pool(tmp_path, capsys, monkeypatch):
    from trainers.grpo import cli

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit) as exc:
        cli(["--config", QUICKSTART, "--output_dir", str(tmp_path / "run"), "--task_split", "rl:40",
             "--eval_split", "rl:10"])  # fmt: skip
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "the rl:40 (training) tasks and the rl:10 (held-out) tasks overlap" in err, err
    assert not (tmp_path / "run").exists()


def test_resume_auto_starts_fresh_without_a_checkpoint_and_resumes_with_one(tmp_path):
    from trainers.grpo import resume_checkpoint

    assert resume_checkpoint(tmp_path, "auto") is None
    (tmp_path / "checkpoint-3").mkdir()
    (tmp_path / "checkpoint-3" / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    assert resume_checkpoint(tmp_path, "auto") == tmp_path / "checkpoint-3"


def test_a_warm_start_records_its_sft_tasks_and_grpo_refuses_to_train_on_them(tmp_path, capsys, monkeypatch):
    from trainers.grpo import cli
    from trainers.warm_start import main as warm_start

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ws = tmp_path / "warm"
    warm_start(["--model", str(ROOT / "checkpoints" / "tiny-policy"), "--out", str(ws), "--minutes", "0.01",
                "--examples", "30", "--eval-tasks", "2", "--eval-every", "100", "--no-eval-at-start", "--threads", "1",
                "--keep", "last"])  # fmt: skip
    record = read_supervised(ws)
    assert record["split"] == "sft:30" and set(record["ids"]) <= {t.id for t in pool_tasks("sft", 30)}
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        cli(["--config", QUICKSTART, "--output_dir", str(tmp_path / "run"), *LORA, "--init_adapter", str(ws),
             "--task_split", "sft:40", "--eval_split", "test:3"])  # fmt: skip
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "of the 40 sft:40 tasks were supervised by the warm start" in err, err
    assert check_grpo_tasks("rl:40", pool_tasks("rl", 40), "test:3", split_tasks("test:3"), str(ws)) is None


def test_tasks_without_reference_solutions_are_compared_by_query():
    """A user's own tasks often carry no reference calls: their signature is the query alone (no crash)."""
    from env_tools.sandbox.pools import signature
    from langgraph_evolver.types import Task

    a = Task(id="a", query="Give resident 0 a permit.", reference_solution=None)
    b = Task(id="b", query="Give resident 0 a permit.", reference_solution=None)
    c = Task(id="c", query="Give resident 1 a permit.", reference_solution=None)
    assert signature(a) == signature(b) != signature(c)

"""`benchmarks/adapt_diagnose.py`: where an adapt run's episodes go wrong, read from its recorded rollouts."""

from __future__ import annotations

import json

from langgraph_evolver.types import Trajectory, write_jsonl


def test_adapt_diagnose_reads_first_calls_copies_and_spaces(tmp_path, capsys):
    """``benchmarks/adapt_diagnose.py`` explains a run's figure from its recorded episodes: the first call's
    tool against the reference's, whether its text values came from the request, and values copied with a space."""
    from benchmarks.adapt_diagnose import main
    from langgraph_evolver.types import Action, Step, Task, ToolCall

    def episode(query: str, *calls: ToolCall, reward: float) -> Trajectory:
        task = Task(id=query, query=query, env="x", reference_solution=(ToolCall(name="get_cell", arguments={}),))
        steps = [Step(index=i, action=Action(tool_calls=(c,))) for i, c in enumerate(calls)]
        return Trajectory(id=f"{query}/{len(calls)}", task=task, steps=steps, reward=reward)

    heldout = tmp_path / "run" / "7-heldout"
    heldout.mkdir(parents=True)
    asked = "What is in C4 of the Budget sheet?"
    write_jsonl(heldout / "after.jsonl", [
        episode(asked, ToolCall(name="get_cell", arguments={"sheet": "Budget"}), reward=1),
        episode(asked, ToolCall(name="get_cell", arguments={"sheet": "Inventory"}),
                ToolCall(name="get_cell", arguments={"sheet": " Budget"}), reward=0),
        episode("Delete row 6.", ToolCall(name="delete_row", arguments={"row": 6}), reward=0)])  # fmt: skip
    figures = main([str(tmp_path / "run")])["files"]["run/7-heldout/after.jsonl"]
    assert figures["first_call_right"] == round(2 / 3, 3) and figures["reward"] == round(1 / 3, 3)
    assert figures["copied"] == 0.5 and figures["spaced"] == round(1 / 3, 3)  # Budget copied, Inventory not
    assert figures["first_tools"] == {"get_cell -> get_cell": 2, "get_cell -> delete_row": 1}
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["files"].keys() == {"run/7-heldout/after.jsonl"}


def test_the_supervise_ab_moves_rl_tasks_into_sft(tmp_path):
    """``adapt_supervise_ab.py --more_sft N`` emulates a larger sft share: the run's first N rl tasks join sft,
    validation is untouched, and a marker (which `main` checks) keeps a rerun from moving N more."""
    from benchmarks.adapt_supervise_ab import _move_rl_to_sft

    split = tmp_path / "2-split"
    split.mkdir()
    (split / "sft.jsonl").write_text('{"id": "s1"}\n')
    (split / "rl.jsonl").write_text("".join(f'{{"id": "r{i}"}}\n' for i in range(5)))
    _move_rl_to_sft(split, 3)
    ids = {part: [json.loads(x)["id"] for x in (split / f"{part}.jsonl").read_text().splitlines()]
           for part in ("sft", "rl")}  # fmt: skip
    assert ids == {"sft": ["s1", "r0", "r1", "r2"], "rl": ["r3", "r4"]}
    assert (split / "more_sft").read_text() == "3\n"


def test_the_unchosen_adapters_replay_names_the_missing_adapter(tmp_path, capsys):
    """``adapt_heldout_unchosen.py`` plays the adapter validation did not choose: the supervised one when GRPO's
    was chosen, found in the run's own directories (a run from before the validate phase too), and a run without
    it is one clear error, before any server starts."""
    import pytest

    from benchmarks.adapt_heldout_unchosen import main

    run = tmp_path / "run"
    (run / "6-gate").mkdir(parents=True)
    (run / "6-gate" / "done.json").write_text(json.dumps({"chosen": "grpo", "adapter": "x"}))
    argv = ["--run", str(run), "--out", str(tmp_path / "out"), "--env", "sandbox", "--model_path", "m",
            "--heldout", "h.jsonl"]  # fmt: skip
    with pytest.raises(SystemExit):
        main(argv)
    assert f"no supervised adapter to play ({run / '4-supervise' / 'adapter'})" in capsys.readouterr().err


def test_the_scaled_adapter_is_a_copy_whose_update_is_scaled(tmp_path):
    """``adapt_scale.py`` serves ``W + s * BA`` by scaling ``lora_alpha`` (and any per-module alpha) in a copy under
    its output folder (the policy server loads weights from there only); the run's adapter is not touched, and a
    scale of 0 or less is refused."""
    import pytest

    from benchmarks.adapt_scale import scaled_adapter

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    config = {"r": 16, "lora_alpha": 32, "alpha_pattern": {"q_proj": 8}}
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    (adapter / "adapter_model.safetensors").write_bytes(b"weights")
    out = scaled_adapter(adapter, 0.5, tmp_path / "out")
    scaled = json.loads((out / "adapter_config.json").read_text())
    assert out.parent == tmp_path / "out" and (out / "adapter_model.safetensors").read_bytes() == b"weights"
    assert scaled["lora_alpha"] == 16 and scaled["alpha_pattern"] == {"q_proj": 4} and scaled["r"] == 16
    assert json.loads((adapter / "adapter_config.json").read_text()) == config
    with pytest.raises(SystemExit):
        scaled_adapter(adapter, 0.0, tmp_path / "out")

"""``python -m trainers.evolve adapt`` (issue 43, item 3): one command from a new environment to an adapter.

Real parts: a FastMCP server from ``examples/mcp_servers/`` over stdio, self-questioning on it, the committed
tiny policy served by the CPU policy server, a LoRA trained on it, ``trainers.grpo`` as a child process, the
evolve loop's paired gate. The budget is tiny (a few tasks, one GRPO step): what is checked is the plumbing,
the JSON line, the resumability and that ``--heldout`` is read in the last phase only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import sys
from pathlib import Path

import pytest
import yaml

from langgraph_evolver.environment import environment_factory
from langgraph_evolver.types import Task, ToolCall
from trainers.evolve import adapt_data
from trainers.evolve.__main__ import main
from trainers.evolve.adapt_data import PARTS, family, mistake_chat, mistakes, recovery_chat, signature, split_tasks

ROOT = Path(__file__).resolve().parent.parent
ROOMS = f"mcp:python {ROOT / 'examples' / 'mcp_servers' / 'rooms_plain.py'}"

TRAINING_PHASES = ("synthesize", "split", "rollouts", "supervise", "validate", "grpo", "gate")
"""Every phase before the held-out one: none of them may open the --heldout file."""

HELDOUT = [  # written by hand for rooms_plain.py, in the MCP tasks format a user writes (docs/mcp.md)
    {"id": "held-reserve", "instruction": "Reserve Cirrus at 10 for Ann.",
     "reference": [{"name": "reserve", "arguments": {"room": "Cirrus", "hour": 10, "host": "Ann"}}],
     "check": [{"name": "my_reservations", "arguments": {"host": "Ann"}}]},
    {"id": "held-release", "instruction": "Mia no longer needs reservation R-1: give it back.",
     "reference": [{"name": "release", "arguments": {"reservation_id": "R-1"}}],
     "check": [{"name": "my_reservations", "arguments": {"host": "Mia"}}]},
]  # fmt: skip


def _task(tid: str, query: str, *calls: str, x: int = 1) -> Task:
    return Task(id=tid, query=query, reference_solution=tuple(ToolCall(name=c, arguments={"x": x}) for c in calls))


def test_the_split_keeps_one_signature_in_one_part():
    tasks = [_task(f"t{i}", f"do thing {i}", "a", "b", x=i) for i in range(12)]
    tasks += [_task("twin", "DO  thing 3", "a", "b", x=3), _task("t0", "a repeated id", "c")]  # t3's twin; t0 again
    parts = split_tasks(tasks, (0.4, 0.4, 0.2), seed=0)
    where = {t.id: name for name in PARTS for t in parts[name]}
    assert where["twin"] == where["t3"] and signature(tasks[3]) == signature(tasks[12])
    ids = [t.id for name in PARTS for t in parts[name]]
    assert len(ids) == len(set(ids)) == 13  # the repeated id kept once
    sigs = {name: {signature(t) for t in parts[name]} for name in PARTS}
    assert not sigs["sft"] & sigs["rl"] and not sigs["sft"] & sigs["validation"]
    assert not sigs["rl"] & sigs["validation"]
    assert all(parts[name] for name in PARTS)
    assert split_tasks(tasks, (0.4, 0.4, 0.2), seed=0) == parts  # seeded


def test_a_task_asked_by_name_stays_in_the_part_of_the_same_task_asked_by_id():
    """Self-questioning writes "lend book B103 to member M1" and "lend 'Song of Solomon' to 'Ada Novak'" (its
    lookups first, then the same borrow): one family, so the gate never scores one the model was taught the
    other of."""
    borrow = ToolCall(name="borrow", arguments={"member_id": "M1", "book_id": "B103"})
    by_id = Task(id="by-id", query="Lend book B103 to member M1.", reference_solution=(borrow,))
    lookups = (ToolCall(name="find_member", arguments={"name": "Ada Novak"}),
               ToolCall(name="search_books", arguments={"query": "Song of Solomon"}))  # fmt: skip
    by_name = Task(id="by-name", query="Lend 'Song of Solomon' to 'Ada Novak'.", reference_solution=(*lookups, borrow),
                   metadata={"resolves": [[0, "M1"], [1, "B103"]]})  # fmt: skip
    assert family(by_id) == family(by_name) and signature(by_id) != signature(by_name)
    others = [_task(f"t{i}", f"do thing {i}", "a", x=i) for i in range(12)]
    for seed in range(5):
        parts = split_tasks([by_id, *others, by_name], (0.4, 0.4, 0.2), seed=seed)
        where = {t.id: name for name in PARTS for t in parts[name]}
        assert where["by-id"] == where["by-name"], (seed, where)


def test_tasks_that_are_only_lookups_are_not_one_family():
    """A fact question answered by the search itself ("What is the author of Beloved?": search_books) is all
    lookups; without its calls every such task would share the empty family and land in one part."""
    facts = [Task(id=f"f{i}", query=f"What is the author of book {i}?", metadata={"resolves": [[0, f"B{i}"]]},
                  reference_solution=(ToolCall(name="search_books", arguments={"query": f"book {i}"}),))
             for i in range(12)]  # fmt: skip
    assert len({family(t) for t in facts}) == 12
    parts = split_tasks(facts, (0.4, 0.4, 0.2), seed=0)
    assert all(parts[name] for name in PARTS)


def _argv(out: Path, heldout: Path, *extra: str) -> list[str]:
    return ["adapt", "--env", ROOMS, "--model_path", str(ROOT / "checkpoints" / "tiny-policy"), "--minutes", "30",
            "--output_dir", str(out), "--heldout", str(heldout), "--tasks", "6", "--max_explorations", "2",
            "--n_depth", "8", "--k", "1", "--num_generations", "2", "--batch_size", "4", "--grpo_steps", "1",
            "--sft_steps", "2", "--max_turns", "3", "--no_progress", *extra]  # fmt: skip


def _last_json(text: str) -> dict:
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


@pytest.mark.slow
def test_adapt_end_to_end_resumes_and_reads_the_heldout_file_last(tmp_path, capsys):
    out, heldout = tmp_path / "adapt", tmp_path / "heldout.jsonl"
    heldout.write_text("this is not JSON: any phase that read it before the last one would fail\n")
    assert main(_argv(out, heldout, "--stop_after", "synthesize")) == 0
    first = capsys.readouterr()
    assert "stopped after synthesize" in first.err and not (out / "2-split").exists()
    tasks_file = out / "1-synthesize" / "tasks.jsonl"
    stamp = tasks_file.stat().st_mtime_ns

    assert main(_argv(out, heldout)) == 2  # the unreadable file fails at the held-out phase, after the gate
    err = capsys.readouterr().err
    assert "synthesize: done before, skipped" in err and f"--heldout {heldout} did not load" in err
    assert all((out / f"{i}-{p}" / "done.json").exists() for i, p in enumerate(TRAINING_PHASES, 1))
    assert not (out / "8-heldout" / "done.json").exists() and tasks_file.stat().st_mtime_ns == stamp

    heldout.write_text("".join(json.dumps(row) + "\n" for row in HELDOUT))
    assert main(_argv(out, heldout)) == 0
    captured = capsys.readouterr()
    for phase in TRAINING_PHASES:
        assert f"{phase}: done before, skipped" in captured.err
    line = _last_json(captured.out)
    assert all(isinstance(line[key], float) for key in ("heldout_before", "heldout_after", "paired_gain",
                                                         "lower_bound"))  # fmt: skip
    assert 0.0 <= line["heldout_before"] <= 1.0 and 0.0 <= line["heldout_after"] <= 1.0
    assert line["lower_bound"] <= line["paired_gain"] + 1e-9
    assert line["heldout_tasks"] == 2 and isinstance(line["wall_s"], float) and line["phases_s"] > line["wall_s"]
    held_s = json.loads((out / "8-heldout" / "done.json").read_text())["phase_s"]
    assert line["adapt_s"] == pytest.approx(line["phases_s"] - held_s, abs=0.2) and line["minutes"] == 30
    assert isinstance(line["tasks_synthesized"], int) and line["tasks_synthesized"] >= 3
    assert line["sft_examples"] >= 1 and line["grpo_steps"] == 1 and isinstance(line["promoted"], bool)
    assert sum(line["split"].values()) == line["tasks_synthesized"]
    # validation chose the candidate among the supervised and the GRPO adapter, and the held-out phase ran it
    candidates = line["validation_candidates"]
    assert set(candidates) == {"supervised", "grpo"} and line["validation_after"] == max(candidates.values())
    assert candidates[line["chosen"]] == line["validation_after"]
    expected = out / "4-supervise" / "adapter" if line["chosen"] == "supervised" else out / "6-grpo" / "train"
    assert Path(line["adapter"]).is_relative_to(expected)
    assert (out / "7-gate" / "supervised.jsonl").exists() and (out / "7-gate" / "grpo.jsonl").exists()
    # the gate read the validate phase's rollouts back rather than playing them again
    validated = json.loads((out / "5-validate" / "done.json").read_text())
    assert validated["episodes"] == line["split"]["validation"] * 1 and validated["supervised_episode_s"] > 0  # --k 1
    assert (out / "7-gate" / "before.jsonl").read_text() == (out / "5-validate" / "before.jsonl").read_text()
    assert candidates["supervised"] == validated["supervised"] and line["validation_before"] == validated["before"]
    assert json.loads((out / "8-heldout" / "done.json").read_text())["adapter"] == line["adapter"]
    grpo_config = yaml.safe_load((out / "6-grpo" / "train_config.yaml").read_text())
    assert grpo_config["policy_server_threads"] == min(2, os.cpu_count() or 1)  # the evaluations' server keeps 1
    # the evaluations played their two models side by side, each on a 1-thread server of its own
    assert (out / "server-2.log").exists() == ((os.cpu_count() or 1) >= 2)
    # the held-out tasks are in no training or selection input, and the GRPO child never saw them
    trained = "".join((out / "2-split" / f"{p}.jsonl").read_text() for p in PARTS)
    trained += "".join(f.read_text() for f in (out / "6-grpo" / "train" / "trajectories").glob("*.jsonl"))
    assert not any(row["id"] in trained or row["instruction"] in trained for row in HELDOUT)
    held = [json.loads(x) for x in (out / "8-heldout" / "after.jsonl").read_text().splitlines()]
    assert {r["task"]["id"] for r in held} == {"held-reserve", "held-release"}


def test_a_dead_server_is_one_clear_error(tmp_path, capsys):
    dead = tmp_path / "dead.py"
    dead.write_text("import sys\nsys.exit(3)\n")
    heldout = tmp_path / "h.jsonl"
    heldout.write_text("")
    argv = _argv(tmp_path / "out", heldout)
    argv[argv.index(ROOMS)] = f"mcp:python {dead}"
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "exited with status 3" in err and "Traceback" not in err


BAD_FLAGS = [(["--minutes", "0"], "--minutes must be above 0"),
             (["--promote", "agent"], "--promote NAME needs --policy_base_url"),
             (["--eval_servers", "0"], "--eval_servers must be 1 or more")]  # fmt: skip


@pytest.mark.parametrize("flags, message", BAD_FLAGS)
def test_bad_flags_are_refused_before_any_work(tmp_path, capsys, flags, message):
    heldout = tmp_path / "h.jsonl"
    heldout.write_text("")
    assert main(_argv(tmp_path / "out", heldout, *flags)) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "out" / "1-synthesize").exists()


def test_zero_verified_tasks_says_what_to_raise(tmp_path, capsys):
    server = tmp_path / "broken.py"
    server.write_text('from mcp.server.fastmcp import FastMCP\nmcp = FastMCP("broken")\n\n\n@mcp.tool()\n'
                      'def lookup(item_id: str) -> dict:\n    """Look an item up."""\n'
                      '    raise ValueError("the catalogue is offline")\n\n\nmcp.run()\n')  # fmt: skip
    heldout = tmp_path / "h.jsonl"
    heldout.write_text("")
    argv = _argv(tmp_path / "out", heldout)
    argv[argv.index(ROOMS)] = f"mcp:python {server}"
    argv[argv.index("--max_explorations") + 1] = "1"
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "kept 0 verified tasks" in err and "raise --max_explorations" in err


def test_promote_points_the_served_name_at_the_adapter_as_the_evolve_loop_does(tiny_policy_url, tmp_path):
    from types import SimpleNamespace

    import httpx

    from trainers.evolve.adapt import _promote
    from trainers.evolve.train import zero_adapter

    adapter = zero_adapter({}, ROOT / "checkpoints" / "tiny-policy", tmp_path / "adapter")
    args = SimpleNamespace(promote="my-agent", policy_base_url=tiny_policy_url, model_path="checkpoints/tiny-policy")
    said = _promote(SimpleNamespace(args=args, out=tmp_path), adapter)
    assert "'my-agent'" in said
    assert "my-agent" in [m["id"] for m in httpx.get(f"{tiny_policy_url}/models", timeout=30).json()["data"]]


def test_a_killed_grpo_phase_continues_from_its_newest_complete_checkpoint(tmp_path):
    from trainers.evolve.adapt_grpo import newest_adapter

    train = tmp_path / "train"
    assert newest_adapter(train) is None
    for step, complete in ((1, True), (2, True), (3, False)):  # checkpoint-3: killed while saving
        ckpt = train / f"checkpoint-{step}"
        ckpt.mkdir(parents=True)
        (ckpt / "adapter_config.json").write_text("{}")
        if complete:
            (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    assert newest_adapter(train) == (train / "checkpoint-2", 2)
    (train / "final").mkdir()
    (train / "final" / "adapter_config.json").write_text("{}")
    assert newest_adapter(train) == (train / "final", None)  # every step ran


def test_the_help_says_how_the_budget_is_split(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["adapt", "--help"])
    assert exit_.value.code == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "synthesize 20%, supervise 20% at most" in said and "GRPO the rest less the gate's predicted time" in said


def _budget_run(tmp_path: Path, *, minutes: float, rollouts: int, validation: int, phase_s: dict[str, float]):
    """A ``Run`` over a directory whose phases are done with these ``phase_s`` (no server, no model)."""
    from trainers.evolve.adapt import Run, make_parser

    run = Run(make_parser().parse_args(["--env", ROOMS, "--minutes", str(minutes), "--output_dir", str(tmp_path)]))
    for name, seconds in phase_s.items():
        run.dir(name).mkdir(parents=True, exist_ok=True)
        extra = {"rollouts": rollouts} if name == "rollouts" else {}
        (run.dir(name) / "done.json").write_text(json.dumps({**extra, "phase_s": seconds}))
    run.dir("split").mkdir(parents=True, exist_ok=True)
    tasks = [_task(f"v{i}", f"validate {i}", "a", x=i) for i in range(validation)]
    (run.dir("split") / "validation.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))
    return run


def test_grpo_gets_the_minutes_left_once_the_gates_predicted_time_is_set_aside(tmp_path):
    """sheets run 3 took 86 minutes on --minutes 60: its gate alone took 19 (3 x 84 episodes) against a 6-minute
    share. Library run 12 set 33 minutes aside for its gate (the starting model's 6.9 s an episode) and used 23.
    Now the validate phase plays the starting model and the supervised adapter before GRPO, and the gate is left
    with the GRPO adapter's episodes, predicted at the supervised adapter's measured seconds."""
    done = {"synthesize": 100.0, "split": 0.0, "rollouts": 80.0, "supervise": 120.0}
    run = _budget_run(tmp_path / "a", minutes=10, rollouts=16, validation=3, phase_s=done)  # a done.json of before
    assert run.spent_s() == 300.0
    assert run.budget_s("supervise") == 120.0
    run.dir("validate").mkdir()
    validated = {"before": 0.1, "before_episode_s": 7.0, "supervised": 0.4, "supervised_episode_s": 4.0,
                 "episodes": 12, "phase_s": 150.0}  # fmt: skip
    (run.dir("validate") / "done.json").write_text(json.dumps(validated))
    assert run.spent_s() == 450.0
    assert run.gate_s() == 4.0 * 3 * 4  # the supervised adapter's 4 s an episode, 3 tasks, k 4
    assert run.budget_s("grpo") == 600 - 450 - 48
    (run.dir("heldout")).mkdir()
    (run.dir("heldout") / "done.json").write_text(json.dumps({"phase_s": 999.0}))  # the yardstick comes on top
    assert run.spent_s() == 450.0
    assert [run.dir(p).name for p in ("validate", "grpo", "gate")] == ["5-validate", "6-grpo", "7-gate"]


def test_a_run_from_before_the_validate_phase_keeps_its_directories(tmp_path):
    """Runs before session 64 numbered grpo, gate and heldout 5-7: their benchmarks and resumes still find them."""
    run = _budget_run(tmp_path, minutes=10, rollouts=16, validation=3, phase_s={})
    for name in ("5-grpo", "6-gate", "7-heldout"):
        (tmp_path / name).mkdir()
    assert [run.dir(p).name for p in ("grpo", "gate", "heldout")] == ["5-grpo", "6-gate", "7-heldout"]
    assert run.dir("validate").name == "5-validate" and run.dir("supervise").name == "4-supervise"


def test_a_resumed_run_charges_the_time_a_kill_interrupted(tmp_path, monkeypatch):
    """A phase records its seconds while it runs (``attempts.json``); a rerun after a kill charges them to that
    phase: its budget shrinks by them and its ``phase_s`` holds them, so --minutes bounds the kill and the rerun."""
    import time

    from trainers.evolve import adapt

    monkeypatch.setattr(adapt, "HEARTBEAT_S", 0.02)
    run = _budget_run(tmp_path, minutes=10, rollouts=16, validation=3, phase_s={})
    seen: dict[str, float] = {}

    def killed(d: Path) -> dict[str, float]:
        time.sleep(0.1)  # beats recorded while it runs
        seen["beat"] = json.loads((d / "attempts.json").read_text())[-1]
        raise KeyboardInterrupt  # the kill

    with pytest.raises(KeyboardInterrupt):
        run.phase("supervise", killed)
    assert seen["beat"] >= 0.04
    (run.dir("supervise") / "attempts.json").write_text(json.dumps([30.0]))  # as a kill after 30 s leaves it
    rerun = _budget_run(tmp_path, minutes=10, rollouts=16, validation=3, phase_s={})
    assert rerun.interrupted_s("supervise") == 30.0 and rerun.budget_s("supervise") == 120.0 - 30.0

    def supervised(d: Path) -> dict[str, float]:
        seen["budget"] = rerun.budget_s("supervise")
        return {"examples": 1}

    done = rerun.phase("supervise", supervised)
    assert seen["budget"] == 90.0 and done["interrupted_s"] == 30.0 and 30.0 <= done["phase_s"] < 31.0
    assert rerun.spent_s() == done["phase_s"]


def test_with_no_time_left_grpo_is_skipped_and_the_gate_weighs_the_supervised_adapter_alone(tmp_path):
    from langgraph_evolver.types import Trajectory
    from trainers.evolve import adapt
    from trainers.evolve.adapt_grpo import MIN_GRPO_S, grpo_phase

    done = {"synthesize": 300.0, "split": 0.0, "rollouts": 80.0, "supervise": 200.0}
    run = _budget_run(tmp_path, minutes=10, rollouts=16, validation=3, phase_s=done)
    run.dir("validate").mkdir()  # the validate phase timed the supervised adapter at 5 s an episode
    (run.dir("validate") / "done.json").write_text(json.dumps({"supervised_episode_s": 5.0, "episodes": 12}))
    assert run.budget_s("grpo") < MIN_GRPO_S
    run.dir("grpo").mkdir()
    result = grpo_phase(run, run.dir("grpo"), {})
    assert result["adapter"] is None and result["grpo_steps"] == 0 and "raise --minutes" in result["skipped"]
    assert not (run.dir("grpo") / "train").exists()  # no child was started
    (run.dir("grpo") / "done.json").write_text(json.dumps(result))
    ckpt = run.dir("grpo") / "train" / "checkpoint-2"  # an earlier run's checkpoint is kept, not retrained
    ckpt.mkdir(parents=True)
    (ckpt / "adapter_config.json").write_text("{}")
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    assert grpo_phase(run, run.dir("grpo"), {})["adapter"] == str(ckpt)

    served: set[object] = set()

    def rollouts(tasks, adapter, *, k, seed, slot=0):
        served.add(adapter)
        return [Trajectory(id=f"{t.id}/{i}", task=t, reward=1.0 if adapter else 0.0, rollout_index=i)
                for t in tasks for i in range(k)]  # fmt: skip

    run.rollouts = rollouts  # type: ignore[method-assign]
    run.model = lambda adapter, slot=0: "policy"  # type: ignore[method-assign]
    (run.dir("validate") / "done.json").write_text(json.dumps(adapt._validate(run, run.dir("validate"))))
    assert served == {None, run.dir("supervise") / "adapter"}
    run.dir("gate").mkdir()
    served.clear()
    gate = adapt._gate(run, run.dir("gate"))
    assert not served  # read back from the validate phase, not played
    assert gate["candidates"] == {"supervised": 1.0} and gate["before"] == 0.0
    assert gate["chosen"] == "supervised" and gate["decision"]["promote"]


@pytest.mark.parametrize("solved_at, expected", [(None, 16), (3, 20), (18, 16)])
def test_own_rollouts_stop_after_a_probe_that_solves_nothing(tmp_path, solved_at, expected):
    """The starting model solved 1 of 159 sft tasks in four runs: 16 unsolved ones end the phase."""
    from langgraph_evolver.types import Trajectory
    from trainers.evolve import adapt

    run = _budget_run(tmp_path, minutes=10, rollouts=0, validation=1, phase_s={})
    tasks = [_task(f"s{i}", f"sft {i}", "a", x=i) for i in range(20)]
    (run.dir("split") / "sft.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))

    def rollouts(chunk, adapter, *, k, seed):
        return [Trajectory(id=t.id, task=t, reward=1.0 if t.id == f"s{solved_at}" else 0.0) for t in chunk]

    run.rollouts = rollouts  # type: ignore[method-assign]
    run.model = lambda adapter: "policy"  # type: ignore[method-assign]
    run.dir("rollouts").mkdir()
    result = adapt._own_rollouts(run, run.dir("rollouts"))
    assert result["rollouts"] == expected and result["probe_only"] == (expected == 16)
    assert isinstance(result["episode_s"], float)  # what the gate's time is predicted from
    assert len((run.dir("rollouts") / "trajectories.jsonl").read_text().splitlines()) == expected


SEARCH = f"mcp:{sys.executable} {ROOT / 'tests' / 'mcp_search_server.py'}"


def test_a_task_naming_a_record_is_also_taught_as_the_recovery_from_its_name_passed_as_the_id():
    """The adapted model wrote ``reserve(member_id="Dev Patel")`` for "reserve ... for Dev Patel": the chat that
    begins with that call and the server's real error (out of the loss), then the lookup and the call, teaches
    the way back. A wrong call the server accepts is no mistake to recover from; a task naming no record has
    none."""
    lookup = ToolCall(name="search_people", arguments={"query": "Grace Hopper"})
    send = ToolCall(name="send_message", arguments={"person_id": "P8", "text": "hi"})
    task = Task(id="named", query="Send 'hi' to 'Grace Hopper'.", env=SEARCH, reference_solution=(lookup, send),
                metadata={"resolves": [[0, "P8"]]})  # fmt: skip
    accepted = dataclasses.replace(task, reference_solution=(lookup, ToolCall(name="search_people",
                                                                              arguments={"query": "P8"})))  # fmt: skip
    env = environment_factory(SEARCH)(task)
    try:
        messages, tools = recovery_chat(env, task)
        assert recovery_chat(env, dataclasses.replace(task, metadata={})) is None  # names no record
        assert recovery_chat(env, accepted) is None  # search_people("Grace Hopper") does not fail
    finally:
        env.close()
    turns = [m for m in messages if m["role"] != "system"][1:]  # after the request
    calls = [(m["tool_calls"][0]["function"], m.get("weight", 1)) for m in turns if m.get("tool_calls")]
    assert calls == [({"name": "send_message", "arguments": {"person_id": "Grace Hopper", "text": "hi"}}, 0),
                     ({"name": "search_people", "arguments": {"query": "Grace Hopper"}}, 1),
                     ({"name": "send_message", "arguments": {"person_id": "P8", "text": "hi"}}, 1)]  # fmt: skip
    results = [m["content"] for m in turns if m["role"] == "tool"]
    assert "no person 'Grace Hopper'" in results[0] and "P8" in results[1]
    assert turns[-1]["content"].startswith("Done") and turns[-1]["content"] == adapt_data.confirmation(results[-1])
    assert tools  # the server's tools, as the agent sees them


def test_a_task_naming_a_record_is_also_taught_as_the_recovery_from_an_id_made_up():
    """Shelter run 2's adapter opened "What breed is Rocky?" with ``getAnimal(animalId=13)``, an id no one gave,
    and repeated it after the error. With ``invented`` the chat that begins with the first call after the lookups,
    its looked-up id replaced by one of its shape, and the server's real error (out of the loss), then the
    reference, teaches the way back; a task naming no record has none."""
    from trainers.evolve.adapt_data import invented_chat

    lookup = ToolCall(name="search_people", arguments={"query": "Grace Hopper"})
    send = ToolCall(name="send_message", arguments={"person_id": "P8", "text": "hi"})
    task = Task(id="named", query="Send 'hi' to 'Grace Hopper'.", env=SEARCH, reference_solution=(lookup, send),
                metadata={"resolves": [[0, "P8"]]})  # fmt: skip
    env = environment_factory(SEARCH)(task)
    try:
        messages, _ = invented_chat(env, task, random.Random(0))
        assert invented_chat(env, dataclasses.replace(task, metadata={}), random.Random(0)) is None
    finally:
        env.close()
    turns = [m for m in messages if m["role"] != "system"][1:]
    calls = [(m["tool_calls"][0]["function"], m.get("weight", 1)) for m in turns if m.get("tool_calls")]
    wrong = calls[0][0]["arguments"]["person_id"]
    assert re.fullmatch(r"P\d", wrong) and wrong != "P8" and calls[0][1] == 0, calls
    assert calls[1:] == [({"name": "search_people", "arguments": {"query": "Grace Hopper"}}, 1),
                         ({"name": "send_message", "arguments": {"person_id": "P8", "text": "hi"}}, 1)]  # fmt: skip
    assert "no person" in [m["content"] for m in turns if m["role"] == "tool"][0]


def test_a_task_is_also_taught_as_the_answer_after_a_repeat_of_its_last_call():
    """Adapted models repeated a read until the turn limit; the agent's ``repeat_guard`` notes a repeated call's
    unchanged result, and the chat that repeats the reference's last call (out of the loss), shows its result
    with the guard's exact note and then answers teaches what comes after it. A task without calls has none."""
    from graphs.agent import with_repeat_note
    from trainers.evolve.adapt_data import repeat_chat

    lookup = ToolCall(name="search_people", arguments={"query": "Grace Hopper"})
    task = Task(id="r", query="What is Grace Hopper's id?", env=SEARCH, reference_solution=(lookup,),
                metadata={"answer": "P8"})  # fmt: skip
    env = environment_factory(SEARCH)(task)
    try:
        messages, tools = repeat_chat(env, task)
        assert repeat_chat(env, dataclasses.replace(task, reference_solution=())) is None
    finally:
        env.close()
    turns = [m for m in messages if m["role"] != "system"][1:]  # after the request
    calls = [(m["tool_calls"][0]["function"]["name"], m.get("weight", 1)) for m in turns if m.get("tool_calls")]
    assert calls == [("search_people", 1), ("search_people", 0)]  # the repeat is out of the loss
    results = [m["content"] for m in turns if m["role"] == "tool"]
    assert "P8" in results[0] and results[1] == with_repeat_note(results[0], "search_people")
    assert turns[-1] == {"role": "assistant", "content": "P8"} and tools


def test_every_task_is_also_taught_as_the_way_back_from_a_mistake():
    """Supervised on clean references only, the adapted sheets model answered right after its first error in 38
    of 88 held-out episodes (a made-up tool, a value left out). Each sft task is also taught begun with such a
    mistake of its first call, whatever the server: a required argument left out, or a tool the server lacks
    named from the call's first word and a word of the request; the server's real error follows (out of the
    loss), then the reference."""
    send = ToolCall(name="send_message", arguments={"person_id": "P8", "text": "hi"})
    task = Task(id="m", query="Send hi to P8 for the meeting.", env=SEARCH, reference_solution=(send,))
    env = environment_factory(SEARCH)(task)
    try:
        tools = list(env.reset(task).tools)
        wrong = mistakes(task, tools, random.Random(0))
        chats = [mistake_chat(env, task, random.Random(seed)) for seed in range(8)]
    finally:
        env.close()
    assert [c.name for c in wrong] == ["send_message", "send_meeting"]
    assert len(wrong[0].arguments) == 1 and set(wrong[0].arguments) < {"person_id", "text"}
    assert wrong[1].arguments == send.arguments
    assert mistakes(dataclasses.replace(task, reference_solution=()), tools, random.Random(0)) == []
    firsts = set()
    for messages, _ in chats:  # type: ignore[misc]
        turns = [m for m in messages if m["role"] != "system"][1:]
        calls = [(m["tool_calls"][0]["function"], m.get("weight", 1)) for m in turns if m.get("tool_calls")]
        results = [m["content"] for m in turns if m["role"] == "tool"]
        assert calls[0][1] == 0 and calls[1:] == [({"name": "send_message", "arguments": send.arguments}, 1)]
        assert results[0].startswith("Error") and not results[1].startswith("Error") and turns[-1]["content"]
        firsts.add(calls[0][0]["name"])
    assert firsts == {"send_message", "send_meeting"}  # both kinds drawn
    assert "unknown tool 'send_meeting'" in " ".join(m["content"] for c in chats for m in c[0] if m["role"] == "tool")


def test_a_task_s_first_call_is_also_taught_with_the_request_s_values_swapped():
    """The adapted library model opened 69 of 88 held-out episodes with ``search_books``, member names included:
    its first call had been taught on 38 requests. Each sft task's first call is also taught with the values the
    request quotes swapped for others the same argument took in the sft references, in the request and the call;
    the chat ends at that call (the rest depends on results nobody replayed). An id the request labels ("P8
    (Grace Hopper)") is not swapped, nor a request already made (``avoid``)."""
    from transformers import AutoTokenizer

    from trainers.evolve.adapt_data import first_call_chat, supervised_examples, swap_values, swapped_tasks
    from trainers.tiny import encode_example

    def ask(tid: str, query: str, *calls: ToolCall) -> Task:
        return Task(id=tid, query=query, env=SEARCH, reference_solution=calls)

    find = [ToolCall(name="search_people", arguments={"query": n}) for n in ("Grace Hopper", "Alan Turing", "Ada")]
    dues = ToolCall(name="get_person", arguments={"person_id": "P8"})
    tasks = [ask("a", "What are Grace Hopper's dues?", find[0], dues),
             ask("b", "Find Alan Turing.", find[1]), ask("c", "Look up Ada.", find[2]),
             ask("d", "Invite P8 (Grace Hopper).", ToolCall(name="invite", arguments={"person_id": "P8"})),
             ask("e", "Invite P9.", ToolCall(name="invite", arguments={"person_id": "P9"}))]  # fmt: skip
    values = swap_values(tasks)
    assert values[("search_people", "query")] == ["Grace Hopper", "Alan Turing", "Ada"]
    made = swapped_tasks(tasks[0], values, random.Random(0), 5)
    assert sorted(t.query for t in made) == ["What are Ada's dues?", "What are Alan Turing's dues?"]  # two others
    for t in made:
        name = t.query.removeprefix("What are ").removesuffix("'s dues?")
        assert t.reference_solution == (ToolCall(name="search_people", arguments={"query": name}),)
    assert swapped_tasks(tasks[3], values, random.Random(0), 5) == []  # the labelled id stays
    assert [t.query for t in swapped_tasks(tasks[4], values, random.Random(0), 5)] == ["Invite P8."]
    assert swapped_tasks(tasks[4], values, random.Random(0), 5, avoid={"invite p8."}) == []
    assert swapped_tasks(tasks[1], values, random.Random(0), 0) == []

    env = environment_factory(SEARCH)(made[0])
    try:
        messages, tools = first_call_chat(env, made[0])
    finally:
        env.close()
    assert [m["role"] for m in messages][-2:] == ["user", "assistant"] and messages[-2]["content"] == made[0].query
    first = made[0].reference_solution[0]
    assert messages[-1]["tool_calls"][0]["function"] == {"name": first.name, "arguments": first.arguments}
    tokenizer = AutoTokenizer.from_pretrained(str(ROOT / "checkpoints" / "tiny-policy"))
    ids, labels = encode_example(tokenizer, messages, tools)
    taught = tokenizer.decode([t for t, lab in zip(ids, labels, strict=True) if lab != -100])
    assert "search_people" in taught and made[0].reference_solution[0].arguments["query"] in taught
    assert made[0].query not in taught  # the request is context, not loss

    examples, counts = supervised_examples(tasks, [], tokenizer, environment_factory(SEARCH), swaps=1)
    assert counts["swap"] == 4 and counts["reference"] == 5  # a, b, c by name, e by id; d labelled
    assert len(examples) == counts["reference"] + counts["recovery"] + counts["swap"]

    def refusing_swaps(task: Task):  # a server that will not start a swapped request: the references still teach
        env = environment_factory(SEARCH)(task)
        reset = env.reset

        def checked(t: Task):
            if "-swap" in t.id:
                raise RuntimeError("no such request")
            return reset(t)

        env.reset = checked
        return env

    _, refused = supervised_examples(tasks, [], tokenizer, refusing_swaps, swaps=1)
    assert (refused["reference"], refused["swap"], refused["skipped"]) == (5, 0, 4)


def test_grpo_is_stopped_as_the_last_step_that_fits_begins():
    """Library run 9 (session 60): a 974 s budget, steps of about 80 s after a 150 s first one, ran 152 s over.
    The SIGTERM now comes as the last step that fits begins, so the phase ends inside its budget, and a slow step
    seen once keeps the estimate slow."""
    from trainers.evolve.adapt_grpo import last_step

    ends, now = [], 150.0
    while True:
        ends.append(now)
        if last_step(0.0, ends, deadline=974.0):
            break
        now += 80.0
    assert ends[-1] + 80.0 <= 974.0 < ends[-1] + 160.0  # the step begun now ends in time; one more would not
    assert not last_step(0.0, [150.0, 230.0, 310.0], deadline=974.0)  # 310 + 2 * 80 fits
    assert last_step(0.0, [150.0, 230.0, 500.0], deadline=974.0)  # a 270 s step: 500 + 2 * 270 does not
    assert last_step(0.0, [150.0, 230.0, 500.0, 560.0], deadline=974.0)  # the slowest step stays the estimate


def test_the_gate_s_share_grows_with_the_policy_s_episodes(tmp_path):
    """Library run 14 (session 65): GRPO's episodes went from 3.1 turns to 4.7, the gate took 386 s of the 245
    predicted at the supervised adapter's seconds, and ``adapt_s`` ended at 3,650 of 3,600. GRPO's deadline now
    moves back by the predicted gate times the growth of ``rollout/turns_mean``."""
    import json

    from trainers.evolve.adapt_grpo import _turns_logged, episode_growth

    turns = [3.0, 2.875, 3.375, 2.625, 3.625, 4.25, 2.875, 3.0, 3.5, 2.75, 4.5, 3.875, 5.0, 3.875, 3.75, 3.375,
             6.375, 4.625, 5.125]  # fmt: skip
    lines = [json.dumps({"step": i + 1, "rollout/turns_mean": t}) for i, t in enumerate(turns)]
    (tmp_path / "metrics.jsonl").write_text("\n".join([*lines, '{"step": 19, "train_runtime": 1198.1}', "{bad", ""]))
    assert _turns_logged(tmp_path) == turns  # the summary line and a torn one are skipped
    assert _turns_logged(tmp_path / "absent") == []
    growth = episode_growth(turns)
    assert 1.4 < growth < 1.6 and abs(245 * growth - 386) < 40  # the run's gate, predicted within 10%
    assert episode_growth(turns[:3]) == 1.0  # nothing to compare yet
    assert episode_growth([4.0] * 3 + [1.0] * 5) == 0.5 and episode_growth([1.0] * 3 + [9.0] * 5) == 3.0  # bounded


def test_a_killed_heldout_phase_reads_back_the_starting_model_s_rollouts_it_wrote_in_full(tmp_path):
    """The held-out phase plays the starting model, then the adapter; killed between them, the rerun reads the
    starting model's rollouts back (the same tasks and seeds give the same rollouts) unless they are not all there
    (a file cut short by the kill, another task file): then they are played again."""
    from langgraph_evolver.types import Task, Trajectory, write_jsonl
    from trainers.evolve.adapt_data import played_before

    tasks = [Task(id=f"t{i}", query=f"q{i}") for i in range(3)]
    rows = [Trajectory(id=f"{t.id}-{s}", task=t, reward=0.5, rollout_index=s) for t in tasks for s in range(2)]
    assert played_before(tmp_path, tasks, 2) is None  # nothing written yet
    write_jsonl(tmp_path / "before.jsonl", rows)
    back = played_before(tmp_path, tasks, 2)
    assert back is not None and [r.id for r in back["before"]] == [r.id for r in rows]
    assert played_before(tmp_path, tasks, 3) is None  # not k of each
    assert played_before(tmp_path, [*tasks, Task(id="t9", query="q9")], 2) is None  # another task file
    text = (tmp_path / "before.jsonl").read_text()
    (tmp_path / "before.jsonl").write_text(text[: len(text) // 2])  # cut short mid-line
    assert played_before(tmp_path, tasks, 2) is None


def test_a_killed_evaluation_keeps_each_model_it_finished_and_plays_only_the_rest(tmp_path):
    """Each model's rollouts are written as soon as it finishes; a rerun after a kill plays only the models not
    written in full (bikeshop run 1, session 73, lost its adapter's finished held-out rollouts while the slow
    starting model was still playing)."""
    from types import SimpleNamespace

    from langgraph_evolver.types import Task, Trajectory, read_jsonl
    from trainers.evolve.adapt import _evaluate

    tasks = [Task(id=f"t{i}", query=f"q{i}") for i in range(3)]
    played: list[str] = []

    class Killed(Exception):
        pass

    class FakeRun:  # what _evaluate uses of adapt.Run: the adapter plays first, then the starting model is killed
        args = SimpleNamespace(k=2, seed=0, min_gain=0.0)

        def __init__(self, kill: bool) -> None:
            self.kill = kill

        def side_by_side(self, plays):
            return {name: plays[name](0) for name in sorted(plays, reverse=True)}  # "supervised" before "before"

        def rollouts(self, tasks, adapter, *, k, seed, slot=0):
            name = "before" if adapter is None else "supervised"
            if name == "before" and self.kill:
                raise Killed
            played.append(name)
            reward = 0.0 if adapter is None else 1.0
            return [Trajectory(id=f"{name}-{t.id}-{s}", task=t, reward=reward, rollout_index=s)
                    for t in tasks for s in range(k)]  # fmt: skip

    candidates = {"supervised": tmp_path / "adapter"}
    with pytest.raises(Killed):
        _evaluate(FakeRun(kill=True), tasks, candidates, tmp_path)
    assert played == ["supervised"] and len(list(read_jsonl(tmp_path / "supervised.jsonl", Trajectory))) == 6
    result = _evaluate(FakeRun(kill=False), tasks, candidates, tmp_path)
    assert played == ["supervised", "before"]  # the adapter was read back, not played again
    assert result["before"] == 0.0 and result["after"] == 1.0 and result["chosen"] == "supervised"
    assert (tmp_path / "after.jsonl").read_text() == (tmp_path / "supervised.jsonl").read_text()


def test_a_restarted_server_loads_the_adapters_again_and_rollouts_that_all_failed_are_an_error(tmp_path):
    """GRPO stops the evaluations' server and the gate starts a new one: the adapters the first one held are not
    in the second, so their names are forgotten (session 67: the held-out phase asked for the supervised adapter
    by its old name, and all 96 episodes crashed with a 404). Rollouts of which more than ``max_failed_rollout_share``
    failed outside the policy are an error that says why, never an avg@k of 0.0; fewer are left out of the figures."""
    from types import SimpleNamespace

    import trainers.training_tasks
    from langgraph_evolver.errors import PolicyEndpointError
    from langgraph_evolver.types import Task, Trajectory
    from trainers.evolve.adapt import Run, make_parser

    run = Run(make_parser().parse_args(["--env", ROOMS, "--minutes", "1", "--output_dir", str(tmp_path)]))
    stopped = []
    run.servers = [SimpleNamespace(stop=lambda: stopped.append(0)), SimpleNamespace(stop=lambda: stopped.append(1))]
    run.names = [{"/runs/a/4-supervise/adapter": "adapter-71d9cd"}, {"/runs/a/4-supervise/adapter": "adapter-9c"}]
    run.stop()
    assert stopped == [0, 1] and run.servers == [None, None] and run.names == [{}, {}]

    task = Task(id="t", query="q")
    crashed = Trajectory(id="a", task=task, finish_reason="error", errors=("rollout crashed: 404 adapter-71d9cd",))
    fine = Trajectory(id="b", task=task, reward=1.0)
    played: list[list[Trajectory]] = []

    async def rollouts(tasks, **kw):
        return played.pop()

    run.servers, run.names = [SimpleNamespace(base_url="http://x")], [{"/a": "adapter-71d9cd"}]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trainers.training_tasks, "evaluation_rollouts", rollouts)
        played.append([crashed, fine, fine])  # 1 of 3 failed: within the default share (0.5), left to the figures
        assert run.rollouts([task], Path("/a"), k=3, seed=0) == [crashed, fine, fine]
        played.append([crashed, crashed, fine])
        with pytest.raises(PolicyEndpointError, match="2 of 3 rollouts of 'adapter-71d9cd' failed.*404"):
            run.rollouts([task], Path("/a"), k=3, seed=0)


def test_a_killed_validate_phase_plays_again_only_the_model_it_had_not_finished(tmp_path):
    """The validate phase plays the starting model, then the supervised adapter; killed between them (budget run
    1, session 69: the OOM killer), the rerun reads back the model whose rollouts and seconds an episode it wrote,
    and plays the other."""
    from types import SimpleNamespace

    from langgraph_evolver.types import Task, Trajectory, write_jsonl
    from trainers.evolve import adapt

    run = SimpleNamespace(args=SimpleNamespace(k=2, seed=7), played=[], servers=[None, None])
    run.side_by_side = lambda plays: adapt.Run.side_by_side(run, plays)  # the two models on two servers at once
    tasks = [Task(id=f"t{i}", query=f"q{i}") for i in range(3)]
    split, d = tmp_path / "2-split", tmp_path / "5-validate"
    split.mkdir()
    d.mkdir()
    write_jsonl(split / "validation.jsonl", tasks)
    run.dir = lambda phase: {"split": split, "supervise": tmp_path / "4-supervise"}[phase]
    run.model = lambda adapter, slot=0: None

    def rollouts(tasks, adapter, k, seed, slot=0):
        run.played.append(adapter)
        return [Trajectory(id=f"{t.id}-{s}", task=t, reward=1.0 if adapter else 0.5, rollout_index=s)
                for t in tasks for s in range(k)]  # fmt: skip

    run.rollouts = rollouts
    write_jsonl(d / "before.jsonl", rollouts(tasks, None, 2, 7))
    run.played.clear()
    (d / "episode_s.json").write_text(json.dumps({"before": 9.5}))
    out = adapt._validate(run, d)
    assert run.played == [tmp_path / "4-supervise" / "adapter"]  # the starting model was read back
    assert out["before"] == 0.5 and out["supervised"] == 1.0 and out["before_episode_s"] == 9.5
    assert json.loads((d / "episode_s.json").read_text()).keys() == {"before", "supervised"}
    run.played.clear()
    assert adapt._validate(run, d) == out and run.played == []  # both read back
    (d / "episode_s.json").unlink()  # rollouts without their seconds (a phase from before session 69): played again
    adapt._validate(run, d)
    assert sorted(map(str, run.played)) == sorted(map(str, [None, tmp_path / "4-supervise" / "adapter"]))


@pytest.mark.slow
def test_the_supervised_adapter_is_trained_in_a_child_process_whose_memory_goes_with_it(tmp_path):
    """``train_lora_apart`` trains in a spawned child (the adapt process kept 16 GB after training in-process) and
    gives back its figures and the saved adapter; a child that dies is a clear error, not a hang."""
    import signal

    from langgraph_evolver.errors import EvolverError
    from trainers.evolve.adapt_data import train_lora_apart

    examples = [([5, 6, 7, 8, 9, 10], [-100, -100, 7, 8, 9, 10])] * 4
    lora = {"lora_r": 4, "lora_alpha": 8, "lora_target_modules": ["q_proj", "v_proj"]}
    tiny = ROOT / "checkpoints" / "tiny-policy"
    figures = train_lora_apart(tiny, examples, tmp_path / "a", seconds=60, lora=lora, max_steps=3, progress=False,
                               dtype="float32")  # fmt: skip
    assert figures["steps"] == 3 and figures["dtype"] == "float32" and 0 < figures["loss"] < 100
    assert (tmp_path / "a" / "adapter_model.safetensors").is_file() and not (tmp_path / "a.tmp").exists()
    with pytest.raises(EvolverError, match="training process died.*run the same command again"):
        train_lora_apart(tiny, examples, tmp_path / "c", seconds=60, lora=lora, max_steps=3, progress=False,
                         dtype=_KillSelf(signal.SIGKILL))  # fmt: skip


class _KillSelf(str):
    """A ``dtype`` that kills the process that reads it (a child the OOM killer takes, as it took budget run 1)."""

    def __new__(cls, sig: int) -> _KillSelf:
        made = super().__new__(cls, "auto")
        made.sig = sig
        return made

    def __reduce__(self):
        return (_kill_on_load, (self.sig,))


def _kill_on_load(sig: int) -> str:
    os.kill(os.getpid(), sig)
    return "auto"


def test_two_models_are_played_side_by_side_each_on_a_server_of_its_own(tmp_path):
    """Each evaluation server computes on 1 thread, so the validate and held-out phases play
    their two models at once, one a server: a barrier both must reach proves they run together (played one after
    the other, the first would wait alone and time out). A third model waits for a free server; one core plays
    them in turn on one server. The held-out phase writes the starting model's rollouts as soon as they are done,
    for a rerun after a kill to read back."""
    import threading

    from langgraph_evolver.types import Task, Trajectory
    from trainers.evolve import adapt

    run = adapt.Run(adapt.make_parser().parse_args(["--env", ROOMS, "--minutes", "1", "--output_dir", str(tmp_path)]))
    run.servers, run.names = [None, None], [{}, {}]
    together = threading.Barrier(2, timeout=10)
    slots: dict[str, int] = {}

    def play(name: str, wait: bool):
        def go(slot: int) -> str:
            slots[name] = slot
            if wait:
                together.wait()  # raises BrokenBarrierError if the other never comes
            return name

        return go

    assert run.side_by_side({"before": play("before", True), "supervised": play("supervised", True)}) == {
        "before": "before", "supervised": "supervised"}  # fmt: skip
    assert sorted(slots.values()) == [0, 1]
    slots.clear()
    three = run.side_by_side({n: play(n, False) for n in ("before", "supervised", "grpo")})
    assert three == {"before": "before", "supervised": "supervised", "grpo": "grpo"} and slots["grpo"] == 0
    run = adapt.Run(adapt.make_parser().parse_args(["--env", ROOMS, "--minutes", "1", "--output_dir", str(tmp_path),
                                                    "--eval_servers", "1"]))  # fmt: skip
    assert run.servers == [None]
    slots.clear()
    assert run.side_by_side({n: play(n, False) for n in ("before", "after")}) == {"before": "before", "after": "after"}
    assert set(slots.values()) == {0}

    tasks = [Task(id="t0", query="q0")]
    run.servers, run.names = [None, None], [{}, {}]

    def rollouts(tasks, adapter, *, k, seed, slot=0):
        if adapter is not None:  # the adapter's rollouts end after the starting model's were written
            for _ in range(100):
                if (tmp_path / "before.jsonl").exists():
                    break
                threading.Event().wait(0.05)
            assert (tmp_path / "before.jsonl").exists(), "the starting model's rollouts were not written at once"
        return [Trajectory(id=f"{t.id}/{i}", task=t, reward=1.0 if adapter else 0.0, rollout_index=i)
                for t in tasks for i in range(k)]  # fmt: skip

    run.rollouts = rollouts  # type: ignore[method-assign]
    out = adapt._evaluate(run, tasks, {"grpo": tmp_path / "adapter"}, tmp_path)
    assert out["before"] == 0.0 and out["after"] == 1.0 and out["chosen"] == "grpo"

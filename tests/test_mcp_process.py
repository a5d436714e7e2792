"""A stdio MCP server's life and its errors (issue 38, items 2, 4 and 6), against the real FastMCP server
tests/mcp_booking_server.py: no server outlives its run, killed or not; a server that cannot start says why, once,
before any rollout; a bare ``python`` is this interpreter; FastMCP's INFO logs are quiet unless asked; a tool's
long result is cut with a note; a failing ``check`` call is a mismatch; and the errors of ``trainers.evaluate``
name what to do."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from env_tools._mcp_process import ServerStderr, cap_output
from env_tools.mcp import McpEnvironment
from langgraph_evolver.environment import load_environment
from langgraph_evolver.errors import ConfigError, EnvironmentFailure
from langgraph_evolver.types import Action, Task, ToolCall
from trainers.evaluate import main

ROOT = Path(__file__).resolve().parents[1]
SERVER = Path(__file__).with_name("mcp_booking_server.py")
STDIO = f"mcp:{sys.executable} {SERVER}"
TASK = Task(id="t", query="Book B4 for Ann.", metadata={"answer": "ok"})
BOOK_B4 = {"id": "b4", "instruction": "Book B4 for Ann.",
           "reference": [{"name": "book", "arguments": {"booking_id": "B4", "guest": "Ann"}}]}  # fmt: skip


def call(env: McpEnvironment, name: str, **arguments: object):
    return env.step(Action(tool_calls=(ToolCall(name=name, arguments=arguments),))).observations[0]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    """The pids of ``pids`` still alive after up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def tasks_file(path: Path, *rows: dict) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# -- item 4: no server outlives its run --------------------------------------------------------------------------


def test_a_server_that_never_answers_initialize_is_killed_when_its_start_fails(tmp_path):
    """The close path cancels the task that holds the session, so the process goes at once, not at exit."""
    stuck = tmp_path / "stuck.py"
    stuck.write_text("import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    env = load_environment(f"mcp:{sys.executable} {stuck} {tmp_path / 'pid'}#startup_timeout=1")
    started = time.perf_counter()
    with pytest.raises(EnvironmentFailure, match=r"did not start within 1 s \(it never answered MCP's initialize"):
        env.reset(TASK)
    assert time.perf_counter() - started < 8  # it waited 10 s more before, and left the process running
    pid = int((tmp_path / "pid").read_text())
    assert wait_gone([pid], 3) == [], "the server that never answered initialize is still running"
    env.close()


def test_no_server_survives_a_sigkilled_evaluate(tmp_path):
    """SIGKILL of `python -m trainers.evaluate` while both rollouts' servers are blocked in a tool: they die too."""
    pids = tmp_path / "pids"
    pids.mkdir()
    tasks = tasks_file(tmp_path / "tasks.jsonl", {"id": "stuck", "instruction": "Wait.", "split": "test",
                                                  "reference": [{"name": "block"}]})  # fmt: skip
    env = f"mcp:{sys.executable} {SERVER} --pid-dir {pids}#tasks={tasks}&timeout=600"
    proc = subprocess.Popen([sys.executable, "-m", "trainers.evaluate", "--env", env, "--reference_policy", "--k", "2",
                             "--quiet", "--output_dir", str(tmp_path / "out")], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while len(list(pids.glob("*.blocked"))) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(list(pids.glob("*.blocked"))) == 2, proc.stderr.read().decode()[-2000:] if proc.poll() else ""
        servers = [int(p.stem) for p in pids.glob("*.blocked")]
        supervisors = [parent(p) for p in servers if parent(p) != proc.pid]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        left = wait_gone(servers + supervisors, 5)
        for pid in left:  # never leave them behind, even when the test fails
            os.kill(pid, signal.SIGKILL)
        assert left == [], "MCP servers outlived the SIGKILLed evaluate"
        assert len(supervisors) == 2  # each server ran under its supervisor
        preflight = [int(p.name) for p in pids.iterdir() if p.name.isdigit() and int(p.name) not in servers]
        assert len(preflight) == 1 and not alive(preflight[0])  # the server started once before the rollouts
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()


# -- item 6: errors that say their cause -------------------------------------------------------------------------


def test_a_server_that_fails_to_start_is_one_error_with_its_exit_status_before_any_rollout(tmp_path, capsys):
    broken = tmp_path / "broken.py"
    broken.write_text("import sys\nprint('loading the bookings', file=sys.stderr)\nimport no_such_module_xyz\n")
    tasks = tasks_file(tmp_path / "tasks.jsonl", {**BOOK_B4, "split": "test"})
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as stopped:
        main(["--env", f"mcp:{sys.executable} {broken}#tasks={tasks}", "--reference_policy", "--k", "4", "--quiet",
              "--output_dir", str(out)])  # fmt: skip
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "exited with status 1 before it finished starting (MCP initialize)" in err, err
    assert "| loading the bookings" in err and "| ModuleNotFoundError: No module named 'no_such_module_xyz'" in err
    assert err.count("no_such_module_xyz'") == 1 and "ExceptionGroup" not in err  # once, not once per rollout
    assert not (out / "trajectories.jsonl").exists()  # no rollout ran


def test_grpo_checks_the_server_once_before_it_loads_a_model_or_runs_a_rollout(tmp_path, capsys):
    """``trainers.grpo`` starts the environment once before training, as ``trainers.evaluate`` does: a broken
    server is one exit-2 error naming its cause, not a message per rollout of every step."""
    from trainers.grpo import cli

    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_xyz\n")
    tasks = tasks_file(tmp_path / "tasks.jsonl", *({**BOOK_B4, "id": f"b{i}"} for i in range(8)))
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as stopped:
        cli(["--config", str(ROOT / "examples" / "quickstart.yaml"), "--env_id",
             f"mcp:{sys.executable} {broken}#tasks={tasks}", "--max_steps", "1", "--eval_before", "false",
             "--eval_after", "false", "--output_dir", str(out)])  # fmt: skip
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "exited with status 1 before it finished starting (MCP initialize)" in err, err
    assert err.count("no_such_module_xyz'") == 1 and "ExceptionGroup" not in err
    assert "starting the policy server" not in err and "rollouts for training step" not in err  # before both
    assert not (out / "policy_server.log").exists()


def test_a_bare_python_is_this_interpreter_not_the_first_on_path(tmp_path, monkeypatch, caplog):
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'the wrong python' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    env = load_environment(f"mcp:python {SERVER}#reset_tool=")
    env.reset(TASK)
    assert call(env, "interpreter").content == sys.executable
    env.close()
    assert f"'python' runs as this interpreter, {sys.executable} (sys.executable)" in caplog.text


def test_fastmcp_info_logs_are_quiet_unless_asked(monkeypatch, capfd):
    def one_call() -> str:
        env = load_environment(STDIO)
        env.reset(TASK)
        assert call(env, "book", booking_id="B1", guest="Ann").content == "booked B1 for Ann"
        env.close()
        return capfd.readouterr().err

    monkeypatch.delenv("EVOLVER_MCP_LOG_LEVEL", raising=False)
    monkeypatch.delenv("FASTMCP_LOG_LEVEL", raising=False)
    assert "Processing request of type" not in one_call()
    monkeypatch.setenv("EVOLVER_MCP_LOG_LEVEL", "INFO")  # what trainers.evaluate --verbose sets
    verbose = one_call()
    assert "INFO     Processing request of type" in verbose and "CallToolRequest" in verbose


async def test_the_quiet_filter_drops_info_records_and_keeps_the_rest(monkeypatch):
    monkeypatch.delenv("EVOLVER_MCP_LOG_LEVEL", raising=False)
    monkeypatch.delenv("FASTMCP_LOG_LEVEL", raising=False)
    echo = io.StringIO()
    stderr = ServerStderr(echo=echo)
    stderr.echo_from_now()
    stderr.errlog.write("[11/26/26 17:17:11] INFO     Processing request of type            server.py:733\n"
                        "                             ListToolsRequest\n"
                        "                    INFO     Processing request of type            server.py:733\n"
                        "                             CallToolRequest\n"
                        "Processing request of type CallToolRequest\n"  # the SDK's line without rich
                        "[11/26/26 17:17:12] WARNING  the cache is cold                     app.py:9\n"
                        "Traceback (most recent call last):\n"
                        "  File \"srv.py\", line 3, in <module>\n"
                        "my own line\n")  # fmt: skip
    stderr.started()
    assert await stderr.wait_closed(5)
    assert echo.getvalue().splitlines() == [
        "[11/26/26 17:17:12] WARNING  the cache is cold                     app.py:9",
        "Traceback (most recent call last):",
        '  File "srv.py", line 3, in <module>',
        "my own line",
    ]


def test_a_check_call_that_raises_is_a_mismatch_not_an_environment_failure(tmp_path):
    """`get_booking(B4)` when the agent never booked fails on the episode's server: the check does not match."""
    row = {**BOOK_B4, "check": [{"name": "get_booking", "arguments": {"booking_id": "B4"}}]}
    env = McpEnvironment({"transport": "stdio", "command": sys.executable, "args": [str(SERVER)]},
                         tasks=tasks_file(tmp_path / "tasks.jsonl", row))  # fmt: skip
    task = env.list_tasks("train")[0]
    env.reset(task)
    env.step(Action(content="I could not book it."))
    assert env.evaluate() == 0.0
    assert env.last_evaluation["matched"] == 0 and "no booking B4" in env.last_evaluation["failed_checks"][0]
    env.reset(task)  # the agent that books scores 1.0
    call(env, "book", booking_id="B4", guest="Ann")
    env.step(Action(content="Booked."))
    assert env.evaluate() == 1.0 and "failed_checks" not in env.last_evaluation
    env.close()


def test_the_requested_split_without_tasks_names_the_splits_found_and_the_flag(tmp_path, capsys):
    tasks = tasks_file(tmp_path / "tasks.jsonl", BOOK_B4, {**BOOK_B4, "id": "b5"})  # no "split": train
    with pytest.raises(SystemExit) as stopped:
        main(["--env", f"{STDIO}#tasks={tasks}", "--reference_policy", "--output_dir", str(tmp_path / "out")])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "no tasks in split 'test'; its tasks are in 'train' (2 tasks). Choose one with --split train" in err
    assert "an MCP task without \"split\" is in 'train'" in err


def test_a_misspelt_prefix_suggests_the_nearest_one():
    with pytest.raises(ConfigError, match=r"Did you mean 'mcp:python srv.py' \(the 'mcp:' prefix\)"):
        load_environment("mpc:python srv.py")
    with pytest.raises(ConfigError, match="Did you mean 'sandbox'"):
        load_environment("sandbx")


def test_reference_policy_exits_non_zero_when_not_ok(tmp_path, capsys):
    """A task nothing can score (no checker, check calls or answer) scores 0.0: the plumbing check is NOT OK."""
    tasks = tasks_file(tmp_path / "tasks.jsonl", {"id": "b4", "instruction": "Book B4 for Ann.", "split": "test",
                                                  "reference": BOOK_B4["reference"]})  # fmt: skip
    with pytest.raises(SystemExit) as stopped:
        main(["--env", f"{STDIO}#tasks={tasks}", "--reference_policy", "--k", "1", "--quiet",
              "--output_dir", str(tmp_path / "out")])  # fmt: skip
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert "NOT OK" in err and "error: the --reference_policy check is NOT OK" in err


# -- item 2: a tool's long result is cut, with a note ------------------------------------------------------------


def test_cap_output_keeps_whole_characters_and_says_what_it_dropped():
    assert cap_output("short", 10) == "short" and cap_output("x" * 50, None) == "x" * 50
    cut = cap_output("é" * 10, 5)  # 20 bytes; 5 bytes end inside the third é
    assert cut.startswith("éé\n[output cut: 16 of 20 bytes dropped")


def test_a_long_tool_result_reaches_the_agent_cut_with_a_note(tmp_path):
    env = load_environment(STDIO)
    env.reset(TASK)
    obs = call(env, "big", n=100_000)
    assert obs.content.startswith("x" * 65_536 + "\n[output cut: 34,464 of 100,000 bytes dropped")
    assert len(obs.content) < 65_536 + 200
    assert len(env.state.call("big", n=100_000)) == 100_000  # a checker reads the whole result
    env.close()
    env = load_environment(f"{STDIO}#max_output_bytes=1000")
    env.reset(TASK)
    assert "[output cut: 4,000 of 5,000 bytes dropped" in call(env, "big", n=5000).content
    assert call(env, "big", n=1000).content == "x" * 1000
    env.close()
    with pytest.raises(ConfigError, match="max_output_bytes .* whole number of bytes"):
        load_environment(f"{STDIO}#max_output_bytes=lots")
    with pytest.raises(ConfigError, match="max_output_bytes must be a positive number"):
        McpEnvironment({"transport": "stdio", "command": sys.executable, "args": [str(SERVER)]}, max_output_bytes=0)


def test_the_trajectories_file_keeps_the_cut_result(tmp_path, capsys):
    read = {"name": "big", "arguments": {"n": 2_000_000}}
    tasks = tasks_file(tmp_path / "tasks.jsonl", {"id": "big", "instruction": "Read it.", "split": "test",
                                                  "answer": "Done", "reference": [read]})  # fmt: skip
    main(["--env", f"{STDIO}#tasks={tasks}", "--reference_policy", "--k", "1", "--quiet",
          "--output_dir", str(tmp_path / "out")])  # fmt: skip
    written = (tmp_path / "out" / "trajectories.jsonl").read_text()
    assert len(written) < 200_000 and "[output cut: 1,934,464 of 2,000,000 bytes dropped" in written

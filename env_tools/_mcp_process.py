"""A stdio MCP server's process: started under a supervisor that dies with us, its stderr kept for error messages.

``env_tools/mcp.py`` opens every stdio session through ``stdio_session``. Three things it adds over opening the
session with ``langchain-mcp-adapters`` alone, each for a failure a user met:

- **No server outlives its run.** The server runs under a small supervisor (``SUPERVISOR``, this interpreter with
  ``-I -S``): the supervisor asks the kernel for SIGHUP when the thread that started it dies
  (``PR_SET_PDEATHSIG``, as ``trainers/evolve/train.py`` does for its trainer), and answers it by killing its whole
  process group, the server and anything the server started; the server itself gets SIGKILL if the supervisor
  dies. So a run killed with SIGKILL, or one that exits while a server is stuck in ``initialize``, leaves no server
  behind (Linux; elsewhere the supervisor only reports the exit status).
- **A server that fails to start says why.** Its stderr comes through a pipe: its last ``STDERR_LINES`` are
  kept and the supervisor adds the server's exit status, so the startup error (``_Connection._startup_failure``
  in ``env_tools/mcp.py``) says "exited with status 1" and shows the ``ImportError`` instead of an
  ``ExceptionGroup``. Lines are passed on to our stderr once the server has started (what it wrote while
  starting, then each line), so a failed start shows its traceback once, in the error.
- **FastMCP's INFO logs stay quiet** unless asked (they were 96% of a run's output): below ``INFO`` in
  ``EVOLVER_MCP_LOG_LEVEL`` (default ``WARNING``; ``trainers.evaluate --verbose`` sets ``INFO``) the server's
  INFO and DEBUG log records are not passed on. The MCP SDK's ``FastMCP`` always configures ``INFO`` (its
  ``log_level`` argument beats ``FASTMCP_LOG_LEVEL``), so they are recognized by their form: a record of its
  ``RichHandler`` (``[time] INFO     message``, its wrapped lines indented below it) or, without ``rich``, its
  bare ``Processing request of type ...`` line. The standalone ``fastmcp`` package reads ``FASTMCP_LOG_LEVEL``,
  which the server gets too (unless the connection's ``env`` sets it).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any

__all__ = ["STDERR_LINES", "SUPERVISOR", "ServerStderr", "cap_output", "server_log_level", "stdio_session"]

STDERR_LINES = 20
"""How many of a server's last stderr lines an error message shows."""
_QUIET_RECORD = re.compile(r"^\s*(\[[^\]]*\]\s*)?(DEBUG|INFO)\s{2,}\S|^Processing request of type \w+\s*$")
"""The first line of a FastMCP INFO or DEBUG log record (``RichHandler``'s layout, or the SDK's bare line)."""
_MARK = "evolver-mcp-supervisor:"
"""What the supervisor's own stderr lines start with (its pid, then the server's exit status); never passed on."""

SUPERVISOR = f"""
import ctypes, os, signal, sys
MARK = {_MARK!r}
def pdeathsig(sig):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass
def kill_group(*_):
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGHUP, kill_group)
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a close's SIGTERM goes to the group: the server ends, then we do
pdeathsig(signal.SIGHUP)
if os.getppid() != int(sys.argv[1]):
    kill_group()
os.write(2, f"{{MARK}} pid {{os.getpid()}}\\n".encode())
me, argv = os.getpid(), sys.argv[2:]
child = os.fork()
if child == 0:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    pdeathsig(signal.SIGKILL)
    if os.getppid() != me:
        os._exit(1)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        os.write(2, f"cannot run {{argv[0]!r}}: {{e}}\\n".encode())
        os._exit(127)
status = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
os.write(2, f"{{MARK}} exit {{status}}\\n".encode())
sys.exit(status if status >= 0 else 128 - status)
"""
"""The supervisor's code: ``python -I -S -c SUPERVISOR <our pid> <command> <args...>``."""


def server_log_level(env: Mapping[str, str] | None = None) -> str:
    """The log level a FastMCP server is started with: ``EVOLVER_MCP_LOG_LEVEL``, else ``FASTMCP_LOG_LEVEL``, else
    ``WARNING`` (its INFO line per request was most of a run's output)."""
    env = os.environ if env is None else env
    return (env.get("EVOLVER_MCP_LOG_LEVEL") or env.get("FASTMCP_LOG_LEVEL") or "WARNING").upper()


def cap_output(text: str, limit: int | None) -> str:
    """``text`` cut to its first ``limit`` bytes (UTF-8), with a note saying how many bytes were dropped."""
    if limit is None:
        return text
    data = text.encode("utf-8", errors="surrogatepass")
    if len(data) <= limit:
        return text
    kept = data[:limit].decode("utf-8", errors="ignore")  # never half a character
    dropped = len(data) - len(kept.encode("utf-8", errors="surrogatepass"))
    return (f"{kept}\n[output cut: {dropped:,} of {len(data):,} bytes dropped; the MCP environment keeps the first "
            f"{limit:,} bytes of a tool's result (max_output_bytes)]")  # fmt: skip


class ServerStderr:
    """One server's stderr, read on the event loop: lines passed on to ours, the last ones kept, the exit status.

    ``errlog`` is the pipe's write end for ``stdio_client``; ``started`` closes our copy once the process has it,
    so the pipe ends (``closed``) when the server and its supervisor are gone.
    """

    def __init__(self, *, keep: int = STDERR_LINES, echo: Any = None) -> None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        self.errlog = os.fdopen(write_fd, "w")
        self.lines: deque[str] = deque(maxlen=keep)
        self.pid: int | None = None
        """The supervisor's pid (its process group's id)."""
        self.exit_status: int | None = None
        """The server's exit status (negative: killed by that signal), once it exited."""
        self.closed = asyncio.Event()
        self._echo = echo
        self._quiet = server_log_level() not in ("INFO", "DEBUG")
        self._in_quiet_record = False
        self._held: list[str] | None = []
        """Lines written while the server starts: passed on once it has started (``echo_from_now``), else only
        shown in the startup error, so a failed start prints its traceback once."""
        self._fd = read_fd
        self._partial = b""
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(read_fd, self._readable)

    def started(self) -> None:
        """The process holds the write end now: drop ours."""
        if not self.errlog.closed:
            self.errlog.close()

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._finish()
            return
        *lines, self._partial = (self._partial + data).split(b"\n")
        for line in lines:
            self._line(line.decode("utf-8", errors="replace"))

    def _line(self, line: str) -> None:
        head, mark, tail = line.partition(_MARK)
        if mark:
            kind, _, value = tail.strip().partition(" ")
            with suppress(ValueError):
                if kind == "pid":
                    self.pid = int(value)
                elif kind == "exit":
                    self.exit_status = int(value)
            if not head:
                return
            line = head
        if self._quiet and self._quiet_line(line):
            return
        self.lines.append(line)
        if self._held is not None:
            if len(self._held) < 1000:
                self._held.append(line)
            return
        self._write([line])

    def _quiet_line(self, line: str) -> bool:
        """Whether ``line`` belongs to an INFO/DEBUG log record (its first line, or an indented one under it)."""
        if _QUIET_RECORD.match(line):
            self._in_quiet_record = True
        elif not (self._in_quiet_record and line[:1].isspace()):
            self._in_quiet_record = False
        return self._in_quiet_record

    def echo_from_now(self) -> None:
        """The server started: pass on what it wrote while starting, and every line from now on."""
        held, self._held = self._held or [], None
        self._write(held)

    def _write(self, lines: list[str]) -> None:
        if not lines:
            return
        echo = self._echo or sys.stderr
        with suppress(Exception):  # a closed or odd stderr never stops the server's session
            echo.write("".join(line + "\n" for line in lines))
            echo.flush()

    def _finish(self) -> None:
        if self._partial:
            self._line(self._partial.decode("utf-8", errors="replace"))
            self._partial = b""
        with suppress(Exception):
            self._loop.remove_reader(self._fd)
        with suppress(OSError):
            os.close(self._fd)
        self.started()
        self.closed.set()

    async def wait_closed(self, timeout: float) -> bool:
        """Wait until the server's stderr ended (it exited); whether it did within ``timeout`` seconds."""
        with suppress(TimeoutError):
            await asyncio.wait_for(self.closed.wait(), timeout)
        return self.closed.is_set()

    def kill(self) -> None:
        """SIGKILL the supervisor's process group (the server and its children): the last resort of a close."""
        if self.pid is not None and not self.closed.is_set():
            with suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)

    def describe(self) -> str:
        """``exited with status 1`` / ``was killed by SIGKILL`` / ``is still running``."""
        status = self.exit_status
        if status is None:
            return "is still running" if not self.closed.is_set() else "exited (status unknown)"
        if status < 0:
            with suppress(ValueError):
                return f"was killed by {signal.Signals(-status).name}"
            return f"was killed by signal {-status}"
        return f"exited with status {status}"

    def tail(self) -> str:
        """The last stderr lines, indented, or a note that there were none."""
        lines = [line for line in self.lines if line.strip()]
        if not lines:
            return "  (it wrote nothing to stderr)"
        return "\n".join(f"  | {line}" for line in lines)


@asynccontextmanager
async def stdio_session(connection: Mapping[str, Any], stderr: ServerStderr) -> AsyncIterator[Any]:
    """An initialized ``ClientSession`` with the stdio server of ``connection``, run under the supervisor."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = {"FASTMCP_LOG_LEVEL": server_log_level(), **(connection.get("env") or {})}
    argv = [connection["command"], *connection.get("args", [])]
    if os.name == "posix":  # fork, process groups and (on Linux) the parent-death signal
        argv = [sys.executable, "-I", "-S", "-c", SUPERVISOR, str(os.getpid()), *argv]
    params = StdioServerParameters(
        command=argv[0],
        args=argv[1:],
        env=env,
        cwd=connection.get("cwd"),
        encoding=connection.get("encoding", "utf-8"),
        encoding_error_handler=connection.get("encoding_error_handler", "strict"),
    )
    try:
        async with stdio_client(params, errlog=stderr.errlog) as (read, write):
            stderr.started()
            async with ClientSession(read, write, **(connection.get("session_kwargs") or {})) as session:
                await session.initialize()
                yield session
    finally:
        stderr.started()

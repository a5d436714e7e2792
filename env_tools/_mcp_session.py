"""One MCP session, and the background event loop every session of this process runs on.

Apart from ``mcp.py`` (the environment) so each stays under 600 lines: this is the transport side
(open a session on a stdio or HTTP server, call a tool with a timeout, close it without leaving a
process behind), ``mcp.py`` what an episode does with it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, ToolException

from env_tools._mcp_process import ServerStderr, stdio_session
from env_tools.tool_adapters import _render_content
from langgraph_evolver.errors import EnvironmentFailure
from langgraph_evolver.tool_results import render_result

_CLOSE_WAIT_S = 10.0

# -- the background loop ------------------------------------------------------------------------------------------

_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _loop() -> asyncio.AbstractEventLoop:
    """One event loop thread holds every MCP session of the process: a session's streams are bound to the
    loop that opened it, while rollouts call tools from their own loops (or none)."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="mcp-sessions", daemon=True).start()
            _LOOP = loop
        return _LOOP


def _submit(coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
    return asyncio.run_coroutine_threadsafe(coro, _loop())


def _wait(coro: Coroutine[Any, Any, Any]) -> Any:
    return _submit(coro).result()


async def _await(coro: Coroutine[Any, Any, Any]) -> Any:
    return await asyncio.wrap_future(_submit(coro))


# -- one MCP session ----------------------------------------------------------------------------------------------


class _Connection:
    """One open MCP session, held by a task on the background loop from ``open`` to ``close``."""

    def __init__(self, connection: dict[str, Any], *, label: str, timeout: float, startup_timeout: float) -> None:
        self.connection = connection
        self.label = label
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        self.tools: dict[str, BaseTool] = {}
        self.dead: str | None = None
        self.stderr: ServerStderr | None = None
        """A stdio server's stderr, exit status and pid (``env_tools/_mcp_process.py``)."""
        self._stop: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None

    async def open(self) -> None:
        """Start the session (on the background loop); ``EnvironmentFailure`` when it does not come up."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ready = ready
        self._stop = asyncio.Event()
        self._holder = asyncio.create_task(self._hold(ready))
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.startup_timeout)
        except TimeoutError:
            await self.close()
            raise EnvironmentFailure(await self._startup_failure(None)) from None
        except Exception as e:
            await self.close()
            raise EnvironmentFailure(await self._startup_failure(e)) from e

    async def _startup_failure(self, error: Exception | None) -> str:
        """Why the server did not come up: a stdio server's exit status and last stderr lines, not the
        ``ExceptionGroup`` the transport raises when the process is gone."""
        what = (f"did not start within {self.startup_timeout:g} s" if error is None
                else f"could not be reached ({_leaf(error)})")  # fmt: skip
        if self.stderr is None:
            hint = ("Check that the command runs on its own, or raise startup_timeout." if error is None
                    else "Check the command line or URL (mcp:<command> or mcp:http://host:port/mcp).")  # fmt: skip
            return f"The MCP server {self.label} {what}. {hint}"
        await self.stderr.wait_closed(2.0)
        if error is None:  # its exit status is our kill's
            what += " (it never answered MCP's initialize, and was stopped)"
        elif self.stderr.exit_status is not None:
            what = f"{self.stderr.describe()} before it finished starting (MCP initialize)"
        return (f"The MCP server {self.label} {what}. Its last stderr lines:\n{self.stderr.tail()}\nRun the "
                "command on its own to see it fail, or raise startup_timeout if it is only slow.")  # fmt: skip

    def _session(self) -> Any:
        """The session's context: a stdio server under its supervisor (``stdio_session``), else the adapters'."""
        if self.connection.get("transport") == "stdio":
            self.stderr = ServerStderr()
            return stdio_session(self.connection, self.stderr)
        from langchain_mcp_adapters.client import MultiServerMCPClient

        return MultiServerMCPClient({"server": self.connection}).session("server")  # type: ignore[dict-item]

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        from langchain_mcp_adapters.tools import load_mcp_tools

        try:
            async with self._session() as session:
                tools = await load_mcp_tools(session)
                self.tools = {t.name: t for t in tools}
                if self.stderr is not None:
                    self.stderr.echo_from_now()
                ready.set_result(None)
                assert self._stop is not None
                await self._stop.wait()
        except BaseException as e:  # the session ended: record why, wake ``open`` if it still waits
            if not ready.done():
                if isinstance(e, Exception):
                    ready.set_exception(e)
                else:  # cancelled by ``close``: nobody waits for it any more
                    ready.cancel()
            self.dead = self.dead or f"{type(e).__name__}: {e}"
            if not isinstance(e, Exception):
                raise
        finally:
            self.dead = self.dead or "closed"

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """The text of a tool's result; ``ToolException`` (an error observation) for any failure."""
        from mcp.shared.exceptions import McpError
        from mcp.types import CONNECTION_CLOSED

        if self.dead is not None:
            raise ToolException(f"the MCP server {self.label} is gone ({self.dead}); no further call can run")
        tool = self.tools.get(name)
        if tool is None:
            raise ToolException(f"the MCP server has no tool {name!r}")
        call = {"type": "tool_call", "name": name, "args": dict(arguments), "id": "mcp"}
        try:
            output = await asyncio.wait_for(tool.ainvoke(call), self.timeout)
        except TimeoutError:
            raise ToolException(
                f"{name} did not answer within {self.timeout:g} s (the MCP call timed out); try other arguments "
                "or another tool"
            ) from None
        except McpError as e:
            if e.error.code == CONNECTION_CLOSED:
                self.dead = f"connection closed during {name}"
                raise ToolException(f"the MCP server {self.label} died during {name}: {e.error.message}") from None
            raise ToolException(f"{name} failed with MCP error {e.error.code}: {e.error.message}") from None
        except ToolException:
            raise
        except Exception as e:  # a closed stream, a dead process, an HTTP error
            if self._holder is not None and self._holder.done():
                self.dead = self.dead or f"{type(e).__name__}: {e}"
                raise ToolException(f"the MCP server {self.label} is gone ({self.dead})") from None
            raise ToolException(f"{name} failed with {type(e).__name__}: {e}") from None
        if isinstance(output, ToolMessage):
            text = _render_content(output.content)
            if output.status == "error":  # an ``isError`` result
                raise ToolException(text or f"{name} failed")
            artifact = output.artifact if isinstance(output.artifact, dict) else {}
            return render_result(text, artifact.get("structured_content"))  # structuredContent the text lacks
        return _render_content(output)

    async def close(self) -> None:
        """End the session: let it close on its own (a stdio server gets EOF, then SIGTERM), cancel the task that
        holds it when it does not (a server stuck in ``initialize`` never would), and SIGKILL a stdio server's
        process group that is still there."""
        if self._stop is not None:
            self._stop.set()
        holder = self._holder
        if holder is not None and not holder.done():
            opened = self._ready is not None and self._ready.done() and not self._ready.cancelled()
            if opened and self._ready.exception() is None:  # type: ignore[union-attr]
                await asyncio.wait({holder}, timeout=_CLOSE_WAIT_S)
            if not holder.done():
                holder.cancel()
                await asyncio.wait({holder}, timeout=_CLOSE_WAIT_S)
        if self.stderr is not None and not await self.stderr.wait_closed(1.0):
            self.stderr.kill()
            await self.stderr.wait_closed(1.0)
        self.dead = self.dead or "closed"


def _leaf(error: BaseException) -> str:
    """The first real error inside (nested) exception groups: what the transport's ``TaskGroup`` hides."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"


_SHARED: dict[str, _Connection] = {}
_SHARED_LOCK: asyncio.Lock | None = None


async def _shared_connection(key: str, make: Any) -> _Connection:
    global _SHARED_LOCK
    if _SHARED_LOCK is None:
        _SHARED_LOCK = asyncio.Lock()
    async with _SHARED_LOCK:
        conn = _SHARED.get(key)
        if conn is None or conn.dead is not None:
            conn = make()
            await conn.open()
            _SHARED[key] = conn
        return conn

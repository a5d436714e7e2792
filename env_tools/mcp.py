"""Any MCP server as an environment: ``load_environment("mcp:python my_server.py")``.

``McpEnvironment`` is a ``ToolsEnvironment`` (``env_tools/langchain_tools.py``) whose tools are the
server's, loaded with ``langchain-mcp-adapters`` (``load_mcp_tools`` on a session kept open for the
instance's life), so error observations, async tools and checkers behave as for any LangChain tools.

Names (every ``--env`` accepts them; ``langgraph_evolver.environment`` maps the ``mcp:`` prefix here):

- ``mcp:<command line>``: a stdio server, e.g. ``mcp:python my_server.py --db x`` (split like a shell);
- ``mcp:http://host:port/mcp``: a streamable-HTTP server;
- either + ``#key=value&...``: options for commands that pass no keyword arguments, e.g.
  ``mcp:python srv.py#tasks=tasks.jsonl&timeout=10``. Keys: ``tasks``, ``timeout``, ``startup_timeout``,
  ``isolation``, ``reset_tool``, ``checker``, ``judge``, ``judge_base_url``, ``snapshot_tools``, ``max_output_bytes``.

A bare ``python`` / ``python3`` runs as this interpreter (``sys.executable``, said once on stderr). A stdio server
runs under a supervisor that dies with this process (``env_tools/_mcp_process.py``): no server outlives its run,
killed or not; one that cannot start is reported with its exit status and last stderr lines.

Isolation (docs/mcp.md): ``isolation="session"`` (default) opens one MCP session per instance: one
server process per instance over stdio, one MCP session id per instance over HTTP (isolated when the
server keeps its state per session). When the server has a tool named ``reset_tool`` (``"reset"``), it is
hidden from the agent and called on every ``reset`` with the task's ``env_params`` (its initial state);
a later episode of the same instance reuses the session, otherwise a fresh session is opened.
``isolation="shared"``: stateless servers; one connection per server per process, shared by every instance.

Every call has a ``timeout`` (seconds): a tool that does not answer, an ``isError`` result, a protocol
error or a server that died becomes an error observation (``Error: ...``); a server that cannot start,
or dies before the checker can read its state, raises ``EnvironmentFailure``. A result longer than
``max_output_bytes`` (64 KiB) reaches the agent cut, with a note of how many bytes were dropped.

Tasks: ``tasks="tasks.jsonl"`` (``load_mcp_tasks``). Scoring, per task: its ``checker``
(``module:function``, called as ``checker(task, state, final_answer, calls)``; ``state.call(name, **args)``
reads the server), else its ``check`` calls (read-only tool calls whose results must equal those of the
task's ``reference`` replayed on a fresh session; the score is the fraction that match, a check call that fails
on the episode's server being a mismatch), else its
``answer`` (the final answer must contain it), else the ``judge`` when one is given, else 0.0 with a warning in
``last_evaluation``.

Judged scoring (``judge="openai:gpt-4.1-mini"``, ``#judge=policy:<name>&judge_base_url=...``, a chat model, or an
object with ``areward(task, state, trajectory)``): the reference-aware judge
(``langgraph_evolver.questioning.judge.ReferenceAwareJudge``) reads the task, its reference, the tool calls the
episode made with their results and the final answer. ``last_evaluation`` says so (``{"scored_by": "judge",
"judge": <model>, ...}``). A judge that gives no verdict raises ``EnvironmentFailure`` (the rollout's reward is
``None`` with that error, never a silent 0.0); its ``last_evaluation`` keeps the judge's error.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import numbers
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool

from env_tools._checks import answer_matches
from env_tools._mcp_process import cap_output
from env_tools._mcp_session import _await, _Connection, _shared_connection, _wait
from env_tools._replay_memo import ReplayMemo, replay_key
from env_tools.langchain_tools import ToolsEnvironment
from env_tools.mcp_tasks import load_mcp_tasks, parse_mcp_spec, task_calls
from langgraph_evolver._llm import model_id, run_sync
from langgraph_evolver.errors import ConfigError, EnvironmentFailure
from langgraph_evolver.loading import load_object
from langgraph_evolver.questioning.judge import ReferenceAwareJudge
from langgraph_evolver.types import Action, Step, StepResult, Task, ToolCall, Trajectory

_READ_PREFIXES = frozenset({"list", "get", "search", "count", "show", "read", "find"})

__all__ = ["REPLAYS", "McpEnvironment", "McpState", "load_mcp_tasks", "mcp_environment", "parse_mcp_spec"]

logger = logging.getLogger(__name__)

Isolation = Literal["session", "shared"]
_MAX_OUTPUT_BYTES = 65_536
"""A tool result's default cap in the agent's observation (``max_output_bytes``): an 8 MB result once went whole
into an observation and the trajectories file."""
REPLAYS = ReplayMemo()
"""Every MCP environment's reference replays in this process (``env_tools._replay_memo``)."""


# -- the state a checker sees -------------------------------------------------------------------------------------


@dataclass(eq=False)
class McpState:
    """The episode's server, as a checker sees it: ``state.call("list_todos", status="all")`` -> the result text.

    ``close`` is a no-op: the environment owns the session (``owned`` marks a throwaway session of a replay).
    """

    connection: _Connection
    owned: bool = False
    """Closed with the state (a reference replay's own session)."""
    hidden: frozenset[str] = field(default_factory=frozenset)

    def call(self, name: str, /, **arguments: Any) -> str:
        """Call a tool and return its text; ``EnvironmentFailure`` when it fails (read calls of a checker)."""
        try:
            return _wait(self.connection.call(name, arguments))
        except ToolException as e:
            raise EnvironmentFailure(f"Checking the episode's end state: {name} failed: {e}") from e

    async def acall(self, name: str, /, **arguments: Any) -> str:
        try:
            return await _await(self.connection.call(name, arguments))
        except ToolException as e:
            raise EnvironmentFailure(f"Checking the episode's end state: {name} failed: {e}") from e

    def close(self) -> None:
        if self.owned:
            _wait(self.connection.close())


# -- the environment ----------------------------------------------------------------------------------------------


class McpEnvironment(ToolsEnvironment):
    """An MCP server's tools + tasks + scoring, as an ``Environment``.

    Args:
        connection: a langchain-mcp-adapters connection dict (``{"transport": "stdio", "command": ...,
            "args": [...]}`` or ``{"transport": "streamable_http", "url": ...}``).
        tasks: a JSONL path (``load_mcp_tasks``), or tasks as ``ToolsEnvironment`` takes them.
        timeout: seconds each tool call may take before it is an error observation.
        startup_timeout: seconds to start the server and list its tools.
        isolation: ``"session"`` (one session, so one stdio process, per instance) or ``"shared"``
            (stateless servers: one connection per process).
        reset_tool: the tool the server declares for resetting its state (hidden from the agent); ``None``: none.
        checker: a default ``checker(task, state, final_answer, calls)`` (or ``module:function``) for tasks
            without their own.
        judge: scores the tasks that have no checker, ``check`` calls or ``answer``: a model spec
            (``"openai:gpt-4.1-mini"``, ``"policy:<name>"`` with ``judge_base_url``), a LangChain chat model
            (both wrapped in ``ReferenceAwareJudge``), or an object with ``areward(task, state, trajectory)``.
        judge_base_url: the OpenAI-compatible endpoint of a ``judge`` given as a spec (needed for ``policy:``).
        snapshot_tools: the read tools whose answers are the server's state (``state_snapshot``); a list or
            comma-separated names; ``None``: the argument-free ``list_*`` / ``get_*`` / ... tools.
        max_output_bytes: a tool result longer than this (UTF-8 bytes) reaches the agent cut, with a note saying
            how much was dropped (64 KiB; ``None``: no cap). Check calls and snapshots read the whole result.
        name: the environment name tasks are labelled with.
        options: ``ToolsEnvironment``'s other keyword arguments (``system_prompt``, ``profile``).
    """

    def __init__(
        self,
        connection: Mapping[str, Any],
        *,
        tasks: str | Path | Mapping[str, list[Task]] | list[Task] | None = None,
        timeout: float = 30.0,
        startup_timeout: float = 30.0,
        isolation: Isolation = "session",
        reset_tool: str | None = "reset",
        checker: Any = None,
        judge: Any = None,
        judge_base_url: str | None = None,
        snapshot_tools: list[str] | str | None = None,
        max_output_bytes: int | None = _MAX_OUTPUT_BYTES,
        name: str = "mcp",
        **options: Any,
    ) -> None:
        if isolation not in ("session", "shared"):
            raise ConfigError(f"isolation must be 'session' or 'shared', got {isolation!r}.")
        if float(timeout) <= 0 or float(startup_timeout) <= 0:
            raise ConfigError("timeout and startup_timeout must be positive numbers of seconds.")
        if max_output_bytes is not None and (isinstance(max_output_bytes, bool) or int(max_output_bytes) < 1):
            raise ConfigError(f"max_output_bytes must be a positive number of bytes (or None: no cap), got "
                              f"{max_output_bytes!r}.")  # fmt: skip
        self.max_output_bytes = None if max_output_bytes is None else int(max_output_bytes)
        if isinstance(tasks, str | Path):
            tasks = load_mcp_tasks(tasks, env=name)
        self.connection = dict(connection)
        self.timeout = float(timeout)
        self.startup_timeout = float(startup_timeout)
        self.isolation = isolation
        self.reset_tool = reset_tool
        if isinstance(snapshot_tools, str):
            snapshot_tools = [t.strip() for t in snapshot_tools.split(",") if t.strip()]
        self.snapshot_tools = snapshot_tools
        self.name = name
        self._default_checker = load_object(checker, what="checker") if isinstance(checker, str) else checker
        self._judge, self.judge_id = _make_judge(judge, base_url=judge_base_url)
        self._steps: list[Step] = []
        """The episode as the environment saw it (each action and its observations): what the judge reads."""
        self._conn: _Connection | None = None
        self._prepared: McpState | None = None
        self.last_evaluation: dict[str, Any] | None = None
        super().__init__(self._factory, tasks=tasks, checker=self._score, **options)

    @property
    def label(self) -> str:
        c = self.connection
        return c.get("url") or shlex.join([c.get("command", "?"), *c.get("args", [])])

    def _new_connection(self) -> _Connection:
        return _Connection(self.connection, label=self.label, timeout=self.timeout,
                           startup_timeout=self.startup_timeout)  # fmt: skip

    # -- sessions --------------------------------------------------------------------------------------------

    async def _start(self, task: Task, *, fresh: bool) -> McpState:
        """A session seeded for ``task``: this instance's (``fresh=False``) or a throwaway one (a replay)."""
        if self.isolation == "shared":
            if task.env_params or task.metadata.get("setup"):
                raise EnvironmentFailure(
                    f"Task {task.id!r} sets an initial state, but isolation='shared' is for stateless servers "
                    "(every rollout shares one session). Use isolation='session'."
                )
            return McpState(await _shared_connection(json.dumps(self.connection, sort_keys=True, default=str),
                                                     self._new_connection))  # fmt: skip
        conn = None if fresh else self._conn
        resettable = conn is not None and conn.dead is None and self.reset_tool in conn.tools
        if not resettable:
            if conn is not None:
                await conn.close()
            conn = self._new_connection()
            await conn.open()
            if not fresh:
                self._conn = conn
        assert conn is not None
        state = McpState(conn, owned=fresh, hidden=frozenset(name for name in conn.tools if name == self.reset_tool))
        try:
            if self.reset_tool in conn.tools:
                await conn.call(self.reset_tool, dict(task.env_params))
            elif task.env_params:
                raise EnvironmentFailure(
                    f"Task {task.id!r} gives an initial state {sorted(task.env_params)}, but the server has no "
                    f"{self.reset_tool!r} tool to apply it: add one, or seed the task with 'setup' calls."
                )
            for call in task_calls(task.metadata.get("setup") or [], f"task {task.id!r} 'setup'"):
                await conn.call(call.name, _arguments(call))
        except ToolException as e:
            if fresh:
                await conn.close()
            raise EnvironmentFailure(f"Preparing the MCP server for task {task.id!r} failed: {e}") from e
        except BaseException:
            if fresh:
                await conn.close()
            raise
        return state

    def _factory(self, task: Task) -> tuple[McpState, list[BaseTool]]:
        state = self._prepared or _wait(self._start(task, fresh=True))
        self._prepared = None
        return state, [self._forwarder(state, tool, limit=self.max_output_bytes)
                       for name, tool in state.connection.tools.items() if name not in state.hidden]  # fmt: skip

    @staticmethod
    def _forwarder(state: McpState, tool: BaseTool, *, limit: int | None = None) -> BaseTool:
        """The agent's tool: the server's schema as it is, each call run on the background loop, its result (or
        error text) cut to ``limit`` bytes with a note (``_capped``)."""
        conn, name = state.connection, tool.name

        def run(**arguments: Any) -> str:
            return _capped(lambda: _wait(conn.call(name, arguments)), limit)

        async def arun(**arguments: Any) -> str:
            try:
                return cap_output(await _await(conn.call(name, arguments)), limit)
            except ToolException as e:
                raise ToolException(cap_output(str(e), limit)) from None

        return StructuredTool(name=name, description=tool.description, args_schema=tool.args_schema,
                              func=run, coroutine=arun, metadata=tool.metadata)  # fmt: skip

    def _build_tools(self, task: Task) -> tuple[Any, dict[str, BaseTool], dict[str, dict[str, Any]]]:
        state, tools, schemas = super()._build_tools(task)
        for name, tool in tools.items():  # the server's input schema, unchanged (LangChain drops titles)
            schema = tool.args_schema if isinstance(tool.args_schema, dict) else None
            if schema is not None:
                schemas[name] = {"type": "function", "function": {
                    **convert_to_openai_tool(tool)["function"], "parameters": dict(schema)}}  # fmt: skip
        return state, tools, schemas

    # -- the episode -----------------------------------------------------------------------------------------

    def reset(self, task: Task):  # type: ignore[no-untyped-def]
        self.last_evaluation = None
        self._steps = []
        if self._prepared is None:
            self._prepared = _wait(self._start(task, fresh=False))
        try:
            return super().reset(task)
        finally:
            self._prepared = None

    async def areset(self, task: Task):  # type: ignore[no-untyped-def]
        self.last_evaluation = None
        self._steps = []
        self._prepared = await _await(self._start(task, fresh=False))
        return self.reset(task)

    def step(self, action: Action) -> StepResult:
        was_done = self.done
        result = super().step(action)
        self._record(action, result, was_done)
        return result

    async def astep(self, action: Action) -> StepResult:
        was_done = self.done
        result = await super().astep(action)
        self._record(action, result, was_done)
        return result

    def _record(self, action: Action, result: StepResult, was_done: bool) -> None:
        if not was_done:
            self._steps.append(Step(index=len(self._steps), action=action, observations=result.observations))

    def _judged(self, task: Task) -> bool:
        """Whether ``task`` is scored by the judge: one is given and the task has no other way to be scored."""
        if self._judge is None or self._default_checker is not None:
            return False
        if task.source in ("synthetic", "trace") and task.reference_solution:  # scored by replay
            return False
        return not any(key in task.metadata for key in ("checker", "check", "answer"))

    async def _ajudge(self, task: Task) -> float:
        """The judge's reward for the episode; ``EnvironmentFailure`` (recorded in ``last_evaluation``) when it
        gives none, so the rollout has no reward rather than a made-up 0.0."""
        trajectory = Trajectory(id=f"{task.id}/judged", task=task, steps=tuple(self._steps))
        marking: dict[str, Any] = {"scored_by": "judge", "judge": self.judge_id}
        judge = self._judge
        try:
            if isinstance(judge, ReferenceAwareJudge):
                verdict = await judge.ascore(task, trajectory)
                if verdict.error is not None:
                    raise RuntimeError(verdict.error)
                reward = verdict.reward
                marking.update(score=verdict.score, achieved=verdict.achieved, reason=verdict.reason)
            else:
                scored = judge.areward(task, self.state, trajectory)
                reward = await scored if inspect.isawaitable(scored) else scored
                if not isinstance(reward, numbers.Real) or not 0.0 <= float(reward) <= 1.0:
                    raise ValueError(f"it returned {reward!r}, not a number in [0, 1]")
        except Exception as e:
            self.last_evaluation = {**marking, "error": f"{type(e).__name__}: {e}"}
            raise EnvironmentFailure(
                f"The judge {self.judge_id} gave no score for task {task.id!r} ({type(e).__name__}: {e}). Check that "
                "the judge model is reachable and answers ACHIEVED/SCORE (judge=...), or give the task a checker, "
                "'check' calls or an 'answer' (docs/mcp.md)."
            ) from e
        self.last_evaluation = {**marking, "reward": float(reward)}
        return float(reward)

    def evaluate(self) -> float:
        task = self.task
        if task is not None and self._judged(task):
            return run_sync(self._ajudge(task))
        return super().evaluate()

    def _score(self, task: Task, state: McpState, final_answer: str | None, calls: list[ToolCall]) -> float:
        own = task.metadata.get("checker")
        checker = load_object(self._own_checker(task, own), what="checker") if isinstance(own, str) else (
            self._default_checker)  # fmt: skip
        if checker is not None:
            return checker(task, state, final_answer, calls)
        if task.metadata.get("check"):
            return _wait(self._check_score(task, state))
        if "answer" in task.metadata:
            return 1.0 if answer_matches(final_answer, str(task.metadata["answer"])) else 0.0
        warning = (f"task {task.id!r} has no checker, no 'check' calls and no 'answer', so it scores 0.0; give it "
                   "one in the tasks file, or give the environment a judge= (docs/mcp.md)")  # fmt: skip
        logger.warning("MCP environment %s: %s", self.label, warning)
        self.last_evaluation = {"score": 0.0, "warning": warning}
        return 0.0

    def _own_checker(self, task: Task, name: str) -> str:
        """``name`` when one of this environment's own tasks (its tasks file) names that checker; code named by a
        task from anywhere else (an HTTP client of ``env_tools.server``, a synthesized task) is never imported."""
        if any(t.metadata.get("checker") == name for tasks in self._tasks.values() for t in tasks):
            return name
        raise EnvironmentFailure(f"Task {task.id!r} names the checker {name!r}, which no task of this environment's "
                                 "own tasks names: only the checkers of the environment's tasks file run, never code "
                                 "a task from elsewhere names. Put the task in the tasks file (tasks=...), or give "
                                 "it 'check' calls or an 'answer' instead.")  # fmt: skip

    async def _check_score(self, task: Task, state: McpState) -> float:
        """The fraction of ``check`` calls whose results equal those after replaying the reference."""
        checks = task_calls(task.metadata["check"], f"task {task.id!r} 'check'")
        read = [await _read_episode(state, c) for c in checks]
        got, failed = [value for value, _ in read], [error for _, error in read if error is not None]
        key = self._replay_key(task, [[c.name, c.arguments] for c in checks])
        want = await REPLAYS.aget_or_run(key, lambda: self._replay_checks(task, checks))
        matches = [a is not _CHECK_FAILED and _normal(a) == _normal(b) for a, b in zip(got, want, strict=True)]
        self.last_evaluation = {"checks": len(checks), "matched": sum(matches),
                                **({"failed_checks": failed} if failed else {})}  # fmt: skip
        return sum(matches) / len(matches)

    async def _replay_checks(self, task: Task, checks: list[ToolCall]) -> list[str]:
        """What ``checks`` read on a fresh session once ``task``'s reference has run there."""
        twin = await self._start(task, fresh=True)
        try:
            for call in task.reference_solution or ():
                try:
                    await twin.connection.call(call.name, _arguments(call))
                except ToolException as e:
                    raise EnvironmentFailure(f"The reference of task {task.id!r} failed on replay: {e}") from e
            return [await _read(twin, c) for c in checks]
        finally:
            await twin.connection.close()

    def _replay_key(self, task: Task, *reads: Any) -> str:
        """What a replay of ``task`` found depends on: the server, the task's initial state and setup calls, its
        reference and the reads after it (``REPLAYS``)."""
        meta = task.metadata
        return replay_key(self.label, self.isolation, self.reset_tool, self.snapshot_tools, task.env_params,
                          meta.get("setup"), meta.get("snapshot_calls"), *reads,
                          [[c.name, c.arguments] for c in task.reference_solution or ()])  # fmt: skip

    async def aevaluate(self) -> float:
        task, state = self.task, self.state
        if task is not None and self._judged(task):
            return await self._ajudge(task)
        if task is not None and isinstance(state, McpState) and self._default_checker is None:
            by_checks = bool(task.metadata.get("check")) and "checker" not in task.metadata
            if by_checks and task.source not in ("synthetic", "trace"):  # off this loop: the replay starts a server
                return await _await(self._check_score(task, state))
        return await asyncio.to_thread(self.evaluate)

    # -- the end ---------------------------------------------------------------------------------------------

    def close(self) -> None:
        super().close()
        conn, self._conn = self._conn, None
        if conn is not None:
            _wait(conn.close())

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        super().close()
        if conn is not None:
            await _await(conn.close())

    def _reference_fingerprints(self, task: Task) -> tuple[str, str]:
        """The replay's fresh-world states, remembered per process (``REPLAYS``): one server start per task, not
        one per episode."""
        key = self._replay_key(task, "fingerprints")
        return REPLAYS.get_or_run(key, lambda: super(McpEnvironment, self)._reference_fingerprints(task))

    def _replay_twin(self) -> McpEnvironment:
        """A fresh session (stdio: a fresh server process) of the same server, to replay a reference in."""
        return McpEnvironment(self.connection, timeout=self.timeout, startup_timeout=self.startup_timeout,
                              isolation=self.isolation, reset_tool=self.reset_tool,
                              snapshot_tools=self.snapshot_tools, max_output_bytes=self.max_output_bytes,
                              name=self.name)  # fmt: skip

    def preflight(self) -> None:
        """Start the server once and stop it; ``EnvironmentFailure`` (its exit status, its last stderr lines) when it
        does not come up. What a command calls before its rollouts, so a broken server is one error, not one per
        rollout (``trainers.evaluate``)."""
        conn = self._new_connection()
        try:
            _wait(conn.open())
        finally:
            _wait(conn.close())

    supports_task_setup = True
    """Tasks' ``metadata["setup"]`` calls build their initial state, and ``metadata["snapshot_calls"]`` (read calls
    with arguments, as self-questioning records them) join ``state_snapshot``."""

    def state_snapshot(self) -> dict[str, Any]:
        """The server's state as its read tools show it: what each of ``snapshot_tools`` answers now, then what
        the task's ``snapshot_calls`` (reads with arguments: ``get_booking(B1)``) answer.

        ``state_fingerprint`` (``reference_scoring``: self-questioning's filter, and the reference replay that
        scores synthesized tasks) compares these: the server's state is not in this process. The default tools are
        the server's visible tools that take no required argument and whose names read (``list_*``, ``get_*``,
        ``search_*``, ``count_*``, ``show_*``, ``read_*``, ``find_*``); ``snapshot_tools`` names them instead.
        """
        state = self.state
        if not isinstance(state, McpState):
            return {}
        tools = state.connection.tools
        names = self.snapshot_tools if self.snapshot_tools is not None else [
            name for name, tool in tools.items()
            if name not in state.hidden and name.split("_", 1)[0].lower() in _READ_PREFIXES
            and not ((tool.args_schema if isinstance(tool.args_schema, dict) else {}).get("required"))]  # fmt: skip
        calls = [(name, {}) for name in sorted(names)]
        probes = (self.task.metadata.get("snapshot_calls") if self.task is not None else None) or []
        calls += [(c["name"], dict(c.get("arguments") or {})) for c in probes if c.get("name") in tools]
        snapshot: dict[str, Any] = {}
        for name, arguments in calls:
            key = name if not arguments else f"{name} {json.dumps(arguments, sort_keys=True)}"
            try:
                snapshot[key] = _normal(_wait(state.connection.call(name, arguments)))
            except Exception as e:  # a read that fails is part of the state as seen (the server died, say)
                snapshot[key] = f"error: {type(e).__name__}: {e}"
        return snapshot

    def profile(self) -> dict[str, Any]:
        """The declared profile plus the server's operations (from a throwaway session before a reset)."""
        if self._schemas:
            return super().profile()
        conn = self._new_connection()
        _wait(conn.open())
        try:
            ops = {name: {"description": tool.description,
                          "arguments": sorted((tool.args_schema or {}).get("properties") or ()),  # type: ignore[union-attr]
                          "required": list((tool.args_schema or {}).get("required") or ())}  # type: ignore[union-attr]
                   for name, tool in conn.tools.items() if name != self.reset_tool}  # fmt: skip
        finally:
            _wait(conn.close())
        return {**self._declared_profile, "operations": ops}


def _capped(call: Any, limit: int | None) -> str:
    try:
        return cap_output(call(), limit)
    except ToolException as e:
        raise ToolException(cap_output(str(e), limit)) from None


async def _read(state: McpState, call: ToolCall) -> str:
    try:
        return await state.connection.call(call.name, _arguments(call))
    except ToolException as e:
        raise EnvironmentFailure(f"A check call {call.name} failed: {e}") from e


async def _read_episode(state: McpState, call: ToolCall) -> tuple[Any, str | None]:
    """A check call on the episode's server: ``(its result, None)``, or ``(a value no result equals, the error)``
    when the call fails while the server lives (``get_booking(B4)`` when the agent never booked: a mismatch, not a
    broken environment); ``EnvironmentFailure`` when the server is gone."""
    try:
        return await state.connection.call(call.name, _arguments(call)), None
    except ToolException as e:
        if state.connection.dead is not None:
            raise EnvironmentFailure(f"A check call {call.name} failed: {e}") from e
        return _CHECK_FAILED, f"{call.name}: {e}"


_CHECK_FAILED = object()


def _arguments(call: ToolCall) -> dict[str, Any]:
    return dict(call.arguments) if isinstance(call.arguments, dict) else {}


def _normal(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text.strip()


def _make_judge(judge: Any, *, base_url: str | None) -> tuple[Any, str | None]:
    """``(the judge, its id for last_evaluation)`` from ``McpEnvironment(judge=...)``."""
    if judge is None or judge == "":
        return None, None
    if isinstance(judge, str):
        from langgraph_evolver.chat_model import chat_model_from_spec

        if judge.startswith("policy:") and not base_url:
            raise ConfigError(f"judge={judge!r} needs judge_base_url (the policy endpoint, e.g. "
                              "#judge=policy:tiny&judge_base_url=http://127.0.0.1:8000/v1).")  # fmt: skip
        return ReferenceAwareJudge(chat_model_from_spec(judge, base_url=base_url)), judge
    if hasattr(judge, "areward"):
        return judge, str(getattr(judge, "name", None) or type(judge).__name__)
    if hasattr(judge, "ainvoke"):
        return ReferenceAwareJudge(judge), model_id(judge)
    raise ConfigError(f"judge must be a model spec (e.g. 'openai:gpt-4.1-mini'), a chat model or an object with "
                      f"areward(task, state, trajectory), got {type(judge).__name__}.")  # fmt: skip


def mcp_environment(name: str, **kwargs: Any) -> McpEnvironment:
    """The ``mcp:`` prefix factory: ``name`` is the whole ``mcp:...`` spec; ``kwargs`` override its ``#`` options."""
    connection, options = parse_mcp_spec(name)
    merged: dict[str, Any] = {**options, **kwargs}
    if isinstance(merged.get("max_output_bytes"), str):
        try:
            merged["max_output_bytes"] = int(merged["max_output_bytes"])
        except ValueError:
            raise ConfigError(f"max_output_bytes in {name!r} must be a whole number of bytes, got "
                              f"{merged['max_output_bytes']!r}.") from None  # fmt: skip
    for key in ("timeout", "startup_timeout"):
        if isinstance(merged.get(key), str):
            try:
                merged[key] = float(merged[key])
            except ValueError:
                raise ConfigError(f"{key} in {name!r} must be a number of seconds, got {merged[key]!r}.") from None
    if merged.get("reset_tool") == "":
        merged["reset_tool"] = None
    return McpEnvironment(connection, name=name, **merged)

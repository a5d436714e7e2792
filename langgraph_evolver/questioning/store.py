"""``TaskStore``: synthesized tasks with their provenance in one SQLite file (stdlib only).

Each row is a task (its JSON), plus where it came from: the exploration trajectory, the
synthesizer, the filters it passed and any scores (feasibility replay, judge). Export to JSONL
gives ``Task.to_dict`` lines that ``langgraph_evolver.types.read_jsonl(path, Task)`` reads back.

Example:
    >>> from langgraph_evolver.types import Task
    >>> with TaskStore(":memory:") as store:
    ...     _ = store.add(Task(id="synthetic-1", query="List the todos.", source="synthetic"), synthesizer="demo")
    ...     [t.id for t in store.list()], store.provenance("synthetic-1")["synthesizer"]
    (['synthetic-1'], 'demo')
"""

from __future__ import annotations

import builtins
import json
import random
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from langgraph_evolver.errors import ConfigError
from langgraph_evolver.types import Task

__all__ = ["TaskStore", "stored_tasks"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    source TEXT NOT NULL,
    env TEXT NOT NULL,
    task TEXT NOT NULL,
    exploration_id TEXT,
    synthesizer TEXT,
    filters TEXT NOT NULL,
    scores TEXT NOT NULL,
    created REAL NOT NULL
)
"""


class TaskStore:
    """Tasks with provenance in SQLite.

    Args:
        path: the database file (created with its parent folder), or ``":memory:"``.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db: sqlite3.Connection | None = sqlite3.connect(self.path)
        self._db.execute(_SCHEMA)
        self._db.commit()

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError(f"TaskStore {self.path!r} is closed; open a new TaskStore(path).")
        return self._db

    def add(
        self,
        task: Task,
        *,
        exploration_id: str | None = None,
        synthesizer: str | None = None,
        filters: Sequence[str] | None = None,
        scores: Mapping[str, Any] | None = None,
    ) -> bool:
        """Store ``task``; provenance defaults to its metadata. False if the id is already there."""
        meta = task.metadata
        feasibility = meta.get("feasibility") or {}
        row = (
            task.id,
            len(self),
            task.source,
            task.env,
            json.dumps(task.to_dict(), ensure_ascii=False, default=str),
            exploration_id if exploration_id is not None else meta.get("exploration_id"),
            synthesizer if synthesizer is not None else meta.get("synthesizer"),
            json.dumps(list(filters if filters is not None else meta.get("filters") or [])),
            json.dumps(dict(scores if scores is not None else {"feasibility": feasibility.get("score")}), default=str),
            time.time(),
        )
        cur = self.db.execute("INSERT OR IGNORE INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
        self.db.commit()
        return cur.rowcount == 1

    def add_many(self, tasks: Iterable[Task], **provenance: Any) -> int:
        """Store several tasks; returns how many were new."""
        return sum(self.add(t, **provenance) for t in tasks)

    def add_many_counted(self, tasks: Iterable[Task], **provenance: Any) -> tuple[int, dict[str, int]]:
        """Store several tasks; returns how many were new and why the others were not stored.

        The one reason is ``duplicate``: the store (or an earlier task of ``tasks``) holds the id,
        which hashes the world and the reference, so it is the same task.
        """
        added, dropped = 0, 0
        for task in tasks:
            if self.add(task, **provenance):
                added += 1
            else:
                dropped += 1
        return added, ({"duplicate": dropped} if dropped else {})

    def __len__(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])

    def __contains__(self, task_id: object) -> bool:
        return self.db.execute("SELECT 1 FROM tasks WHERE id = ?", (task_id,)).fetchone() is not None

    def get(self, task_id: str) -> Task:
        row = self.db.execute("SELECT task FROM tasks WHERE id = ?", (task_id,)).fetchone()
        if row is None:
            raise KeyError(f"No task {task_id!r} in {self.path}")
        return Task.from_dict(json.loads(row[0]))

    def list(self, *, source: str | None = None, limit: int | None = None) -> builtins.list[Task]:
        """Tasks in insertion order, optionally of one ``source``."""
        sql, args = "SELECT task FROM tasks", list[Any]()
        if source is not None:
            sql, args = sql + " WHERE source = ?", [source]
        sql += " ORDER BY seq"
        if limit is not None:
            sql, args = sql + " LIMIT ?", [*args, limit]
        return [Task.from_dict(json.loads(r[0])) for r in self.db.execute(sql, args)]

    def sample(self, n: int, *, seed: int = 0, source: str | None = None) -> builtins.list[Task]:
        """``n`` tasks drawn without replacement (all of them when fewer), reproducibly."""
        tasks = self.list(source=source)
        return random.Random(seed).sample(tasks, min(n, len(tasks)))

    def provenance(self, task_id: str) -> dict[str, Any]:
        """Where ``task_id`` came from: exploration, synthesizer, filters passed, scores."""
        row = self.db.execute(
            "SELECT exploration_id, synthesizer, filters, scores, created FROM tasks WHERE id = ?", (task_id,)
        ).fetchone()
        if row is None:
            raise KeyError(f"No task {task_id!r} in {self.path}")
        return {
            "exploration_id": row[0],
            "synthesizer": row[1],
            "filters": json.loads(row[2]),
            "scores": json.loads(row[3]),
            "created": row[4],
        }

    def export_jsonl(self, path: str | Path) -> int:
        """Write every task as a ``Task.to_dict`` JSON line; returns the count."""
        from langgraph_evolver.types import write_jsonl

        return write_jsonl(path, self.list())

    def close(self) -> None:
        """Close the database. Idempotent."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> TaskStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stored_tasks(path: str | Path, *, label: str, make_hint: str) -> list[Task]:
    """Every task of the ``TaskStore`` at ``path``; a ``ConfigError`` when there is no store or it is empty.

    ``label`` names the option in the messages (``--task_store x.sqlite``, ``task_store=x.sqlite``), ``make_hint``
    says how to make a store (the questioning command).
    """
    if not Path(path).is_file():
        raise ConfigError(f"{label} does not exist; make one with {make_hint}.")
    with TaskStore(path) as store:
        tasks = store.list()
    if not tasks:
        raise ConfigError(f"{label} holds no tasks.")
    return tasks

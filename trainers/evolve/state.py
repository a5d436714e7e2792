"""The loop's durable state: one JSON file written atomically, one lock per output directory.

``state.json`` holds the production lineage (which adapter the stable name serves, the ones it served
before, every promote / rollback event), the trace watermark and one record per cycle with the phase it
reached. A phase's result and the move to the next phase are one atomic write, so a loop killed anywhere
resumes at the phase it was in and never does a finished one twice; the promotion itself is made
idempotent (re-pointing the stable name at the same directory changes nothing), so a kill between the
swap and its record cannot promote twice.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langgraph_evolver.errors import EvolverError

__all__ = ["FAILPOINT_ENV", "PHASES", "LoopLocked", "State", "failpoint", "loop_lock"]

PHASES = ("collect", "train", "evaluate", "test", "promote", "done")
"""The phases of a cycle, in order (``test`` only with a ``test_split``, ``promote`` only by a candidate the gate
passed)."""

FAILPOINT_ENV = "EVOLVER_EVOLVE_FAILPOINT"
"""A phase name: the loop kills itself (SIGKILL) as it enters that phase. For crash tests."""


class LoopLocked(EvolverError):
    """Another evolve loop holds the output directory."""


def failpoint(phase: str) -> None:
    """SIGKILL this process when ``$EVOLVER_EVOLVE_FAILPOINT`` names ``phase`` (tests of crash and resume)."""
    if os.environ.get(FAILPOINT_ENV) == phase:
        os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def loop_lock(output_dir: str | Path) -> Iterator[Path]:
    """Hold ``output_dir/evolve.lock`` (an OS file lock, released even when the process is killed)."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "evolve.lock"
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise LoopLocked(f"Another evolve loop (pid {holder}) is running on {out}: stop it first, or give this "
                         "one another --output_dir.") from None  # fmt: skip
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield path
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


class State:
    """``output_dir/state.json``: read on start, written atomically after every phase."""

    def __init__(self, output_dir: str | Path) -> None:
        self.dir = Path(output_dir)
        self.path = self.dir / "state.json"
        self.data: dict[str, Any] = {"version": 1, "production": None, "history": [], "events": [], "cycles": [],
                                     "watermark": None}  # fmt: skip
        if self.path.exists():
            try:
                self.data.update(json.loads(self.path.read_text()))
            except (OSError, ValueError) as e:
                raise EvolverError(f"{self.path} cannot be read ({e}); restore it from {self.path}.bak, or start "
                                   "in a new output_dir.") from None  # fmt: skip

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        with tmp.open("w") as f:
            json.dump(self.data, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        if self.path.exists():
            os.replace(self.path, self.path.with_suffix(".json.bak"))
        os.replace(tmp, self.path)

    # -- lineage --------------------------------------------------------------------------------
    @property
    def production(self) -> dict[str, Any] | None:
        """``{"version", "adapter" (relative to output_dir), "cycle"}`` of what the stable name serves."""
        return self.data["production"]

    def adapter_path(self, entry: dict[str, Any]) -> Path:
        return (self.dir / entry["adapter"]).resolve()

    def set_production(self, entry: dict[str, Any], *, action: str, cycle: int | None = None,
                       push: bool = True) -> None:  # fmt: skip
        """Record that the stable name now serves ``entry`` (not saved: the caller saves with its phase)."""
        before = self.data["production"]
        if before is not None and push:
            self.data["history"].append(before)
        self.data["production"] = entry
        self.data["events"].append({"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "action": action,
                                    "from": before["version"] if before else None, "to": entry["version"],
                                    "cycle": cycle})  # fmt: skip

    # -- cycles ---------------------------------------------------------------------------------
    @property
    def cycles(self) -> list[dict[str, Any]]:
        return self.data["cycles"]

    def completed(self) -> int:
        return sum(1 for c in self.cycles if c["phase"] == "done")

    def open_cycle(self) -> dict[str, Any] | None:
        """The cycle a killed loop left unfinished, if any."""
        return next((c for c in self.cycles if c["phase"] != "done"), None)

    def new_cycle(self, **fields: Any) -> dict[str, Any]:
        record = {"cycle": len(self.cycles) + 1, "phase": "collect", "started": time.time(), **fields}
        self.cycles.append(record)
        return record

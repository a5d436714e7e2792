"""Stopping and resuming a GRPO run: its checkpoints, the signal handler and what a stopped run prints.

``trainers.grpo`` installs ``StopHandler``; the evolve loop (``trainers.evolve.train``) reads ``checkpoint_step`` to
know whether a cycle's training can resume.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langgraph_evolver.errors import ConfigError

__all__ = ["Interrupted", "StopHandler", "checkpoint_step", "resume_checkpoint", "resume_command",
           "stopped_message"]  # fmt: skip

logger = logging.getLogger("trainers.grpo")


def checkpoint_step(path: Path) -> int | None:
    """The step of a complete checkpoint (its ``trainer_state.json``, written last, reads), else None."""
    try:
        return int(json.loads((path / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def resume_checkpoint(output_dir: str | Path, value: Any, *, remove_incomplete: bool = False) -> Path | None:
    """The checkpoint ``resume_from_checkpoint`` names, or None to start from scratch.

    ``true`` (``last``, ``latest``) is the newest *complete* ``checkpoint-N`` of ``output_dir`` (``auto``: that, or None
    without one, so one command starts a run and resumes it after a kill): a run killed
    while saving leaves one without ``trainer_state.json``, which TRL would pick and then fail on (those are
    removed when ``remove_incomplete``: their step is redone). A path must be a complete checkpoint.
    """
    if value is None or value is False or (isinstance(value, str) and value.lower() in ("false", "none", "")):
        return None
    auto = isinstance(value, str) and value.lower() == "auto"  # the newest complete one if any, else a fresh start
    if auto or value is True or (isinstance(value, str) and value.lower() in ("true", "last", "latest")):
        found = sorted(((int(p.name.split("-")[1]), p) for p in Path(output_dir).glob("checkpoint-*")
                        if p.is_dir() and p.name.split("-")[1].isdigit()), reverse=True)  # fmt: skip
        for _, path in found:
            if checkpoint_step(path) is not None:
                return path
            if remove_incomplete:
                logger.warning("removing %s: a run stopped while saving it (no trainer_state.json)", path)
                shutil.rmtree(path, ignore_errors=True)
        if auto:
            return None
        raise ConfigError(f"resume_from_checkpoint={value} but {output_dir} holds no complete checkpoint-N: start "
                          "without it, or pass the output_dir of the run to resume.")  # fmt: skip
    path = Path(value)
    if checkpoint_step(path) is None:
        raise ConfigError(f"resume_from_checkpoint={value} is not a complete checkpoint (no readable "
                          "trainer_state.json): pass a checkpoint-N directory, or true for the newest complete "
                          "one.")  # fmt: skip
    return path


def resume_command(argv: list[str] | None = None) -> str:
    """The command line of this run with ``--resume_from_checkpoint true`` (in place of any it had)."""
    from .model_card import launch_command

    args, out = list(sys.argv[1:] if argv is None else argv), []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a == "--resume_from_checkpoint":
            skip = True
        elif not a.startswith("--resume_from_checkpoint="):
            out.append(a)
    return launch_command([*out, "--resume_from_checkpoint", "true"])


class Interrupted(BaseException):  # noqa: N818 - like KeyboardInterrupt, which it stands in for
    """A stop asked by a signal: after the step that finished (``finished``), or at once (the step dropped)."""

    def __init__(self, signum: int, *, finished: bool = False) -> None:
        super().__init__(signum)
        self.signum = signum
        self.finished = finished


class StopHandler:
    """SIGTERM / SIGINT: the first one during training lets the current step end (``StopOnRequest``); a second
    one, or one outside training, raises ``Interrupted`` at once. Installed by ``cli``; ``main`` wires it."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.callback: Any = None

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopHandler]:
        """This handler for SIGTERM and SIGINT inside the block (main thread only), the previous ones after it."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.signal(sig, self) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def __call__(self, signum: int, frame: Any) -> None:
        if self.signum is None and self.callback is not None and self.callback.active:
            self.signum = signum
            print(f"\n{signal.Signals(signum).name}: finishing this step and saving its checkpoint, then stopping "
                  "(send it again to stop now and drop the step)", file=sys.stderr, flush=True)  # fmt: skip
            return
        raise Interrupted(signum)


def stopped_message(e: Interrupted, output_dir: str | Path, argv: list[str] | None = None) -> str:
    """What a stopped run prints: which step ended or was dropped, and the command that resumes (last line)."""
    name = signal.Signals(e.signum).name
    try:
        last = resume_checkpoint(output_dir, True)
    except ConfigError:
        last = None
    if last is None:
        from .model_card import launch_command

        return f"stopped by {name} before a checkpoint was saved; start again with: {launch_command(argv)}"
    step = checkpoint_step(last)
    if e.finished:
        head = f"stopped by {name} after step {step}, saved in {last}"
    else:
        head = f"stopped by {name}; what came after {last} (step {step}) was dropped"
    return f"{head}\nresume with: {resume_command(argv)}"

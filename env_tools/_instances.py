"""The live-instance table of the environment service: limits, idle expiry, per-instance locks.

``InstanceTable`` holds the environment instances that ``env_tools.server`` hands out by id. It caps
how many may live at once (429 beyond), closes instances idle longer than the timeout (their id
then answers 404 "expired"), and gives each instance its own lock so calls to one instance are
serialized while different instances run concurrently. ``ServiceError`` and ``error_body`` are the
service's one error type and error shape.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from langgraph_evolver.environment import Environment

__all__ = ["InstanceTable", "ServiceError", "error_body"]

logger = logging.getLogger("env_tools.server")  # the service's logger, as before the split


class ServiceError(Exception):
    """An error answer: HTTP status, message (what happened and how to fix it) and error type."""

    def __init__(self, status_code: int, message: str, type: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status_code, self.message, self.type, self.headers = status_code, message, type, headers


def error_body(message: str, type: str) -> dict[str, Any]:
    """The one error shape every endpoint answers with."""
    return {"error": {"message": message, "type": type}}


@dataclass(eq=False)
class _Instance:
    env: Environment
    task_id: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Serializes calls to this instance; held while the environment runs."""
    last_used: float = field(default_factory=time.monotonic)
    closed: bool = False


class InstanceTable:
    """Live instances by id, with a size limit and idle expiry. Thread-safe.

    The table lock guards the dict and is never held while an environment runs; each instance's
    own lock serializes the calls to that instance.
    """

    _REMEMBER_GONE = 10_000  # ids of released/expired instances kept for precise 404 messages

    def __init__(self, *, max_instances: int, idle_timeout_s: float) -> None:
        self.max_instances = max_instances
        self.idle_timeout_s = idle_timeout_s
        self._lock = threading.Lock()
        self._live: dict[str, _Instance] = {}
        self._pending = 0
        self._gone: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._live)

    def _forget_locked(self, instance_id: str, reason: str) -> _Instance | None:
        inst = self._live.pop(instance_id, None)
        if inst is not None:
            self._gone[instance_id] = reason
            while len(self._gone) > self._REMEMBER_GONE:
                self._gone.popitem(last=False)
        return inst

    def _pop_expired_locked(self, now: float) -> list[_Instance]:
        idle = [
            iid
            for iid, inst in self._live.items()
            if now - inst.last_used > self.idle_timeout_s and not inst.lock.locked()
        ]
        return [inst for iid in idle if (inst := self._forget_locked(iid, "expired")) is not None]

    @staticmethod
    def _close(inst: _Instance) -> None:
        with inst.lock:  # waits for a call in flight on this instance
            if inst.closed:
                return
            inst.closed = True
            try:
                inst.env.close()
            except Exception:
                logger.exception("closing an environment instance failed")

    def _not_found(self, instance_id: str) -> ServiceError:
        with self._lock:
            reason = self._gone.get(instance_id)
        create = "Create a new instance with POST /instances (RemoteEnvironment.reset(task))."
        if reason == "expired":
            message = (
                f"Instance {instance_id!r} expired: it was idle for more than {self.idle_timeout_s:g} s and the "
                f"service released it. {create} If rollouts pause longer, start the service with a larger "
                "--idle-timeout."
            )
        elif reason == "released":
            message = f"Instance {instance_id!r} was already released (DELETE). {create}"
        else:
            message = (
                f"Unknown instance {instance_id!r}: it expired or never existed (a restarted service forgets "
                f"its instances). {create}"
            )
        return ServiceError(404, message, "instance_not_found")

    @contextmanager
    def reservation(self) -> Iterator[None]:
        """Hold one of the ``max_instances`` slots while an instance is being built."""
        expired: list[_Instance] = []
        with self._lock:
            live = len(self._live) + self._pending
            if live >= self.max_instances:  # free idle slots first; below the limit the sweep does it, so a
                expired = self._pop_expired_locked(time.monotonic())  # create costs the same at any table size
                live -= len(expired)
            if live < self.max_instances:
                self._pending += 1
        for inst in expired:
            self._close(inst)
        if live >= self.max_instances:
            raise ServiceError(
                429,
                f"The service already holds {live} live instances, its limit (--max-instances "
                f"{self.max_instances}). Release finished instances with DELETE /instances/{{id}} "
                "(RemoteEnvironment.close()), run fewer rollouts at once, or restart the service with a larger "
                "--max-instances.",
                "too_many_instances",
                headers={"Retry-After": "1"},
            )
        try:
            yield
        finally:
            with self._lock:
                self._pending -= 1

    def add(self, env: Environment, task_id: str) -> str:
        instance_id = uuid.uuid4().hex
        with self._lock:
            self._live[instance_id] = _Instance(env=env, task_id=task_id)
        return instance_id

    @contextmanager
    def use(self, instance_id: str) -> Iterator[_Instance]:
        """Look up a live instance and hold its lock; 404 when it is unknown, released or expired."""
        now = time.monotonic()
        expired = None
        with self._lock:
            inst = self._live.get(instance_id)
            if inst is not None and now - inst.last_used > self.idle_timeout_s and not inst.lock.locked():
                expired, inst = self._forget_locked(instance_id, "expired"), None
            elif inst is not None:
                inst.last_used = now  # keeps the sweep away while this call waits for the lock
        if expired is not None:
            self._close(expired)
        if inst is None:
            raise self._not_found(instance_id)
        with inst.lock:
            if inst.closed:  # released while this call waited
                raise self._not_found(instance_id)
            try:
                yield inst
            finally:
                inst.last_used = time.monotonic()

    def release(self, instance_id: str) -> None:
        with self._lock:
            inst = self._forget_locked(instance_id, "released")
        if inst is None:
            raise self._not_found(instance_id)
        self._close(inst)

    def sweep(self) -> int:
        """Close every instance idle longer than the timeout; returns how many."""
        with self._lock:
            expired = self._pop_expired_locked(time.monotonic())
        for inst in expired:
            self._close(inst)
        return len(expired)

    def close_all(self) -> None:
        with self._lock:
            every = [inst for iid in list(self._live) if (inst := self._forget_locked(iid, "released"))]
        for inst in every:
            self._close(inst)

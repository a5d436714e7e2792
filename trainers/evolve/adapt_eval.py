"""The evaluation servers of an ``adapt`` run (``adapt.Run`` is one): CPU policy servers of the starting model
that load the adapters, each computing on 1 thread (``endpoint.SERVER_THREADS``), and two models' evaluations
played side by side, a server each (``eval_servers``): the validate phase 1.28x as fast on garage run 1's split
(docs/your-domain.md#side-by-side)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from langgraph_evolver.errors import PolicyEndpointError

from .evaluation import grpo_config

__all__ = ["EvalServers", "eval_servers"]

_T = TypeVar("_T")


def eval_servers() -> int:
    """Evaluation servers an adapt run plays models on side by side: 2 where there are 2 cores or more. Each
    server computes on 1 thread (``endpoint.SERVER_THREADS``), so one model at a time left
    the second core idle through the validate and held-out phases, about a third of a 60-minute budget (budget
    run 2's validate phase: 1,209 s of 3,415)."""
    import os

    return 2 if (os.cpu_count() or 1) >= 2 else 1


class EvalServers:
    """The servers of a run with ``args`` (``model_path``, ``strict_tools``) and ``out``, its ``train_keys()``."""

    args: argparse.Namespace
    out: Path

    def __init__(self, n: int) -> None:
        self.servers: list[Any] = [None] * n
        """The evaluations' policy servers, one a model played side by side, started as needed."""
        self.names: list[dict[str, str]] = [{} for _ in self.servers]
        """Per server, the served names of the adapters it loaded."""
        self.server_args: list[str] = []
        """More flags for the policy servers this run starts (a benchmark's A/B: ``--grounded-ids``)."""

    def train_keys(self) -> dict[str, Any]:
        """The keys rollouts share with training (``adapt.Run`` has them)."""
        raise NotImplementedError

    def model(self, adapter: Path | None, slot: int = 0) -> str:
        """The served name of the starting model (``adapter`` None) or of ``adapter`` (loaded once) on the
        evaluation server ``slot`` (started here the first time)."""
        from trainers.evaluate import serve_adapter
        from trainers.models import resolve_model
        from trainers.serving import PolicyServerProcess

        from .endpoint import SERVER_THREADS

        if self.servers[slot] is None:
            log = self.out / ("server.log" if slot == 0 else f"server-{slot + 1}.log")
            server = PolicyServerProcess(resolve_model(self.args.model_path), log_path=log,
                                         allowed_weight_dirs=[self.out], threads=SERVER_THREADS,
                                         extra_args=["--strict-tools"] * self.args.strict_tools
                                         + self.server_args)  # fmt: skip
            server.start()
            self.servers[slot] = server
        if adapter is None:
            return self.servers[slot].model_name
        key = str(adapter.resolve())
        if key not in self.names[slot]:
            self.names[slot][key] = serve_adapter(self.servers[slot].base_url, key)
        return self.names[slot][key]

    def rollouts(self, tasks: list[Any], adapter: Path | None, *, k: int, seed: int | None, slot: int = 0
                 ) -> list[Any]:  # fmt: skip
        from trainers.evaluate import summarize, too_many_failures
        from trainers.training_tasks import evaluation_rollouts

        cfg, model = grpo_config(self.train_keys(), self.out), self.model(adapter, slot)  # it starts the server
        rows = asyncio.run(evaluation_rollouts(tasks, base_url=self.servers[slot].base_url, model=model, k=k,
                                               cfg=cfg, seed=seed))  # fmt: skip
        if reason := too_many_failures(summarize(rows, k), cfg.max_failed_rollout_share, repr(model)):
            raise PolicyEndpointError(reason)  # session 67: 96 of 96 crashed with a 404 and read as 0.000
        return rows

    def side_by_side(self, plays: dict[str, Callable[[int], _T]]) -> dict[str, _T]:
        """Each of ``plays`` (``play(slot)``: one model's rollouts on evaluation server ``slot``) run, as many at
        once as there are servers (``eval_servers``), each on a server of its own: one model's episodes are
        batched together as they would be alone, never with another model's."""
        from concurrent.futures import ThreadPoolExecutor

        names = list(plays)
        if len(self.servers) < 2 or len(names) < 2:
            return {name: plays[name](0) for name in names}
        out: dict[str, _T] = {}
        with ThreadPoolExecutor(max_workers=len(self.servers), thread_name_prefix="adapt-eval") as pool:
            for start in range(0, len(names), len(self.servers)):
                batch = names[start : start + len(self.servers)]
                futures = {name: pool.submit(plays[name], slot) for slot, name in enumerate(batch)}
                out.update({name: future.result() for name, future in futures.items()})
        return out

    def stop(self) -> None:
        for slot, server in enumerate(self.servers):
            if server is not None:
                server.stop()
                self.servers[slot], self.names[slot] = None, {}  # a new server holds none of this one's adapters

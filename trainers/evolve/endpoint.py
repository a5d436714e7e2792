"""The production endpoint of an evolve loop: a stable model name over the promoted LoRA adapter.

Users' agents call ``served_name`` (e.g. ``agent``) on an OpenAI-compatible endpoint. The loop talks to it
only through the runtime LoRA API that vLLM and our CPU policy server share, in the order that leaves no
request unanswered (``trainers.sync.swap_adapter``):

1. a candidate is loaded under its own versioned name (``agent-c003``): it proves it loads, and the
   held-out evaluation calls it there while production keeps answering under ``agent``;
2. promotion re-loads ``agent`` from the candidate's directory in place (``load_inplace``): the CPU server
   swaps between two batches (a failed load keeps the old adapter), vLLM replaces the adapter's weights;
3. the previous adapter's directory stays on disk (``adapters/vNNN``), so a rollback is the same call.

Without ``policy_base_url`` the loop starts the CPU policy server on the training config's model, at one torch
thread (``SERVER_THREADS``: what makes seeded evaluations exact), strict where the training config's servers are
(``policy_server_strict_tools``), and keeps it up for as long as it runs (it stops
with the loop: a real deployment points the loop at its own long-lived server).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from .config import EvolveConfig

__all__ = ["SERVER_THREADS", "ProductionEndpoint"]

SERVER_THREADS = 1
"""Torch threads of the loop's own CPU server, named here rather than left to the server's default: at 2, 2 of 48
seeded rollouts diverged from a repeat (a multi-threaded matmul sums in another order, a near-tie token flips).
One thread does not make a run repeat another either: the server batches continuously, so which requests share a
batch depends on when they come, and between two runs of garage's validation 34 of 72 episodes kept every token,
all 72 their reward (session 72, docs/your-domain.md#side-by-side). The gate's pairing rests on the seeds (each
task and sample has its own in both models' evaluations) and a killed phase reads its files back, not on exact
repeats."""

logger = logging.getLogger(__name__)


class ProductionEndpoint:
    """The endpoint that serves ``cfg.served_name``; ``start`` connects to it (or starts the local one)."""

    def __init__(self, cfg: EvolveConfig, model_path: Path, output_dir: Path, *, strict_tools: bool = False) -> None:
        from trainers.serving.process import policy_api_key

        self.cfg = cfg
        self.model_path = model_path
        self.output_dir = output_dir
        self.name = cfg.served_name
        self.base_url = cfg.policy_base_url or ""
        self.api_key = policy_api_key()
        self.server: Any = None
        self.strict_tools = strict_tools
        """The local server holds tool calls to the tools (``--strict-tools``), as the training config's servers do."""
        self._warned = False

    @property
    def external(self) -> bool:
        return bool(self.cfg.policy_base_url)

    def start(self) -> ProductionEndpoint:
        from trainers.serving import check_endpoint

        if self.external:
            check_endpoint(self.base_url, None)
            return self
        self.server = self.local_server()
        print(f"starting the production policy server on {self.model_path} …", file=sys.stderr)
        self.server.start()
        self.base_url = self.server.base_url
        return self

    def local_server(self) -> Any:
        """The CPU policy server the loop starts without ``policy_base_url`` (not started), at ``SERVER_THREADS``."""
        from trainers.serving import PolicyServerProcess

        return PolicyServerProcess(self.model_path, log_path=self.output_dir / "production_server.log",
                                   allowed_weight_dirs=[self.output_dir], threads=SERVER_THREADS,
                                   extra_args=["--strict-tools"] * self.strict_tools)  # fmt: skip

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def serve(self, adapter: Path) -> None:
        """Point the stable name at ``adapter`` (in place when it is served already; idempotent)."""
        from trainers.sync import swap_adapter

        swap_adapter(self.base_url, self.name, adapter, api_key=self.api_key)  # loads the name when it is new
        self._reset_prefix_cache()

    def _reset_prefix_cache(self) -> None:
        """vLLM keys cached prompt blocks by adapter name and id, which an in-place reload keeps: without a
        reset, requests could reuse blocks computed with the old adapter. ``/reset_prefix_cache`` exists when
        vLLM runs with ``VLLM_SERVER_DEV_MODE=1``; our server drops the name's blocks itself (no such route)."""
        import httpx

        root = self.base_url.rstrip("/").removesuffix("/v1")
        try:
            r = httpx.post(f"{root}/reset_prefix_cache", headers={"Authorization": f"Bearer {self.api_key}"},
                           timeout=30)  # fmt: skip
        except httpx.HTTPError:
            return
        if r.status_code == 404 and self.external and not self._warned and not self._ours(root):
            self._warned = True
            logger.warning("%s has no /reset_prefix_cache: on vLLM start it with VLLM_SERVER_DEV_MODE=1 or "
                           "--no-enable-prefix-caching, or cached prompts may use the previous adapter's blocks "
                           "(docs/evolve.md)", root)  # fmt: skip

    def _ours(self, root: str) -> bool:
        import httpx

        try:
            cards = httpx.get(f"{root}/v1/models", headers={"Authorization": f"Bearer {self.api_key}"}, timeout=30)
            return cards.json()["data"][0].get("owned_by") == "langgraph-evolver"
        except (httpx.HTTPError, ValueError, KeyError, IndexError):
            return False

    def load_candidate(self, name: str, adapter: Path) -> str:
        from trainers.sync import load_adapter

        return load_adapter(self.base_url, adapter, name, api_key=self.api_key)

    def unload(self, name: str) -> None:
        from trainers.sync import unload_adapter

        try:
            unload_adapter(self.base_url, name, api_key=self.api_key)
        except Exception as e:  # the endpoint may be gone: an unloaded candidate is only memory
            logger.warning("could not unload %s from %s: %s", name, self.base_url, e)

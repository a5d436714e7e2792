"""The CPU policy server's entry point: ``python -m trainers.policy_server --model DIR``.

The server lives in ``trainers.serving`` (engine, scheduler, app, ...); this module keeps the
documented command and the ``from trainers.policy_server import create_app`` imports working.
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    # Before torch loads OpenMP: idle OpenMP threads sleep instead of spinning. The server shares its
    # cores with the rollout client (and a trainer); spinning threads on busy cores made every
    # parallel region wait for a descheduled peer: 25x slower rollouts with 2 threads on a loaded
    # 2-core machine, no slower with 1 (benchmarks/serving.py, docs/policy-endpoint.md).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from langgraph_evolver._serving import serve_in_background  # noqa: E402

from .serving.app import create_app  # noqa: E402
from .serving.cli import main, make_parser  # noqa: E402
from .serving.protocol import build_choice  # noqa: E402

__all__ = ["build_choice", "create_app", "main", "make_parser", "serve_in_background"]

if __name__ == "__main__":
    main()

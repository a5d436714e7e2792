"""The CPU policy server's entry point: ``python -m trainers.policy_server --model DIR``.

The server lives in ``trainers.serving`` (engine, scheduler, app, ...); this module keeps the
documented command and the ``from trainers.policy_server import create_app`` imports working.
"""

from __future__ import annotations

from langgraph_evolver._serving import serve_in_background

from .serving.app import create_app
from .serving.cli import main, make_parser
from .serving.protocol import build_choice

__all__ = ["build_choice", "create_app", "main", "make_parser", "serve_in_background"]

if __name__ == "__main__":
    main()

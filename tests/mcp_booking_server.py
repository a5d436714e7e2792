"""A small FastMCP server for tests/test_mcp_process.py: what a new user writes (FastMCP's default INFO logging).

Bookings live in the process (one stdio process per session). ``get_booking`` raises for an id never booked (a
``check`` call that fails is a mismatch), ``big`` answers ``n`` bytes (the output cap), ``interpreter`` names the
Python running the server, and ``block`` never returns and blocks the server's event loop, as a sync tool stuck
in I/O does. With ``--pid-dir DIR`` the server writes ``DIR/<pid>`` when it starts and ``DIR/<pid>.blocked`` when
``block`` is called.

    python tests/mcp_booking_server.py [--pid-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from mcp.server.fastmcp import FastMCP

server = FastMCP("bookings")
_BOOKINGS: dict[str, str] = {}
_PID_DIR: Path | None = None


@server.tool()
def book(booking_id: str, guest: str) -> str:
    """Book ``booking_id`` for ``guest``."""
    _BOOKINGS[booking_id] = guest
    return f"booked {booking_id} for {guest}"


@server.tool()
def get_booking(booking_id: str) -> str:
    """The guest of ``booking_id``; an error when it was never booked."""
    if booking_id not in _BOOKINGS:
        raise ValueError(f"no booking {booking_id}")
    return _BOOKINGS[booking_id]


@server.tool()
def big(n: int) -> str:
    """``n`` bytes of text."""
    return "x" * n


@server.tool()
def interpreter() -> str:
    """The Python running this server."""
    return sys.executable


@server.tool()
def block() -> str:
    """Never return, blocking the server (a sync tool stuck in I/O)."""
    if _PID_DIR is not None:
        (_PID_DIR / f"{os.getpid()}.blocked").write_text("")
    time.sleep(3600)
    return "unreachable"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pid-dir", type=Path)
    args = parser.parse_args()
    if args.pid_dir is not None:
        _PID_DIR = args.pid_dir
        (args.pid_dir / str(os.getpid())).write_text("")
    server.run()

"""Meeting rooms as an MCP server with plain ``dict`` and bare ``list`` results (FastMCP, stdio).

Style under test: ``list[str]`` and ``list[dict]`` returned as they are (several content blocks),
untyped ``dict`` results (no ``structuredContent``), nested lists in a dict; errors are exceptions.

Run:
    python examples/mcp_servers/rooms_plain.py
"""

from __future__ import annotations

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("rooms")

ROOMS = {"Aurora": 8, "Borealis": 4, "Cirrus": 12}
RESERVATIONS: dict[str, dict] = {"R-1": {"reservation_id": "R-1", "room": "Aurora", "hour": 9, "host": "Mia"}}


@mcp.tool()
def list_rooms() -> list[str]:
    """The names of the meeting rooms."""
    return list(ROOMS)


@mcp.tool()
def room_schedule(room: str) -> dict:
    """A room's seats and its reservations today (hours 8 to 18)."""
    if room not in ROOMS:
        raise ValueError(f"no room called {room}")
    booked = [r for r in RESERVATIONS.values() if r["room"] == room]
    return {"room": room, "seats": ROOMS[room], "reservations": booked}


@mcp.tool()
def reserve(room: str, hour: int, host: str) -> dict:
    """Reserve a room for one hour today (8 to 18) in a host's name."""
    if room not in ROOMS or not 8 <= hour <= 18:
        raise ValueError("pick a listed room and an hour from 8 to 18")
    if any(r["room"] == room and r["hour"] == hour for r in RESERVATIONS.values()):
        raise ValueError(f"{room} is taken at {hour}")
    reservation_id = f"R-{len(RESERVATIONS) + 1}"
    RESERVATIONS[reservation_id] = {"reservation_id": reservation_id, "room": room, "hour": hour, "host": host}
    return RESERVATIONS[reservation_id]


@mcp.tool()
def my_reservations(host: str) -> list[dict]:
    """The reservations held in a host's name."""
    return [r for r in RESERVATIONS.values() if r["host"] == host]


@mcp.tool()
def release(reservation_id: str) -> dict:
    """Give a reserved room back."""
    reservation = RESERVATIONS.pop(reservation_id, None)
    if reservation is None:
        raise ValueError(f"no reservation {reservation_id}")
    return {"released": reservation_id, "room": reservation["room"]}


if __name__ == "__main__":
    mcp.run()

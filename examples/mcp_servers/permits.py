"""A residential parking-permit office as an MCP server (FastMCP, stdio), written as a user would.

Zones have a monthly fee and a cap on permits; a resident applies for a permit for a plate in a zone,
renews it or has it revoked. The office opens with no permits issued. State lives in the process: one
server process, one office.

Run:
    python examples/mcp_servers/permits.py
"""

from __future__ import annotations

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("permits")

ZONES = {
    "north": {"fee": 12.5, "cap": 3, "streets": ["Elm St", "Oak Ave"]},
    "harbour": {"fee": 20.0, "cap": 2, "streets": ["Quay Rd"]},
    "old town": {"fee": 15.0, "cap": 4, "streets": ["Market Sq", "Mill Lane"]},
}
PERMITS: dict[int, dict] = {}
_next_id = [1]


@mcp.tool()
def list_zones() -> list[str]:
    """List the parking zones residents can apply for."""
    return list(ZONES)


@mcp.tool()
def zone_info(zone: str) -> dict:
    """Fee per month, permit cap, streets and permits in use for one zone."""
    if zone not in ZONES:
        raise ValueError(f"unknown zone {zone!r}; see list_zones")
    used = sum(1 for p in PERMITS.values() if p["zone"] == zone and p["status"] == "active")
    return {"zone": zone, **ZONES[zone], "in_use": used}


@mcp.tool()
def apply_permit(plate: str, zone: str, months: int) -> dict:
    """Apply for a resident parking permit for a car plate in a zone, for 1 to 12 months."""
    if zone not in ZONES:
        raise ValueError(f"unknown zone {zone!r}")
    if not 1 <= months <= 12:
        raise ValueError("months must be between 1 and 12")
    used = sum(1 for p in PERMITS.values() if p["zone"] == zone and p["status"] == "active")
    if used >= ZONES[zone]["cap"]:
        raise ValueError(f"zone {zone} is full")
    permit = {"permit_id": _next_id[0], "plate": plate, "zone": zone, "months": months, "status": "active"}
    PERMITS[permit["permit_id"]] = permit
    _next_id[0] += 1
    return {**permit, "fee_due": ZONES[zone]["fee"] * months}


@mcp.tool()
def list_permits(zone: str | None = None) -> list[dict]:
    """List the permits issued, optionally only those of one zone."""
    return [p for p in PERMITS.values() if zone is None or p["zone"] == zone]


@mcp.tool()
def renew_permit(permit_id: int, months: int) -> dict:
    """Extend an active permit by some months."""
    permit = PERMITS.get(permit_id)
    if permit is None or permit["status"] != "active":
        raise ValueError(f"no active permit {permit_id}")
    permit["months"] += months
    return permit


@mcp.tool()
def revoke_permit(permit_id: int) -> str:
    """Revoke a permit, e.g. when the resident moves away."""
    permit = PERMITS.get(permit_id)
    if permit is None:
        raise ValueError(f"no permit {permit_id}")
    permit["status"] = "revoked"
    return f"permit {permit_id} revoked"


if __name__ == "__main__":
    mcp.run()

"""A FastMCP server whose write needs two records that agree (tests/test_questioning_mcp_servers.py).

``assign_desk(person_id, desk_id)`` works only for a person who is active and a desk in that person's office; its
errors say which ("P2 is on_leave; only an active person gets a desk", "desk D-OSL-1 is in Oslo, not in Lima,
where Bo Berg works"). An explorer that fills each argument on its own seldom draws a matching pair; one that reads
the value the error names (``list_people(status="active")``, ``list_desks(office="Lima")``) and tries again does.

Run: python tests/mcp_desks_server.py   # stdio
"""

from __future__ import annotations

from typing import Literal

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("desks")
PEOPLE = {
    "P1": {"name": "Ann Dale", "office": "Oslo", "status": "on_leave"},
    "P2": {"name": "Bo Berg", "office": "Lima", "status": "on_leave"},
    "P3": {"name": "Cy Tran", "office": "Lima", "status": "active"},
    "P4": {"name": "Di Ng", "office": "Oslo", "status": "on_leave"},
    "P5": {"name": "Ed Moss", "office": "Lima", "status": "on_leave"},
}
DESKS = {"D-OSL-1": "Oslo", "D-OSL-2": "Oslo", "D-OSL-3": "Oslo", "D-LIM-1": "Lima"}
ASSIGNED: dict[str, str] = {}


@mcp.tool()
def list_people(status: Literal["active", "on_leave"] | None = None) -> list[dict]:
    """Staff, optionally only those with a status."""
    return [{"person_id": k, **p} for k, p in PEOPLE.items() if status is None or p["status"] == status]


@mcp.tool()
def list_desks(office: str) -> list[dict]:
    """The desks of an office and who sits at each."""
    if office not in set(DESKS.values()):
        raise ValueError(f"no office {office!r}")
    return [{"desk_id": d, "office": o, "person_id": ASSIGNED.get(d)} for d, o in DESKS.items() if o == office]


@mcp.tool()
def assign_desk(person_id: str, desk_id: str) -> dict:
    """Give a person a desk."""
    if person_id not in PEOPLE or desk_id not in DESKS:
        raise ValueError(f"unknown person {person_id!r} or desk {desk_id!r}")
    person = PEOPLE[person_id]
    if person["status"] != "active":
        raise ValueError(f"{person_id} is {person['status']}; only an active person gets a desk")
    if DESKS[desk_id] != person["office"]:
        office, name = person["office"], person["name"]
        raise ValueError(f"desk {desk_id} is in {DESKS[desk_id]}, not in {office}, where {name} works")
    ASSIGNED[desk_id] = person_id
    return {"desk_id": desk_id, "person_id": person_id}


if __name__ == "__main__":
    mcp.run()

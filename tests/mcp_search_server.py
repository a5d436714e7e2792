"""A FastMCP server whose ids come only from a text search (tests/test_questioning_mcp_servers.py).

``search_people(query)`` keeps the people whose name contains ``query``; no tool lists them. An explorer
that fills ``query`` with made-up text ("query 42") finds nobody, so no id, so neither ``get_person`` nor
``send_message`` is ever called without an error. ``set_status`` takes only the statuses its error lists.
``invite`` fails while a person owes dues, and its error says how much and which tool pays them.

Run: python tests/mcp_search_server.py   # stdio
"""

from __future__ import annotations

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("people")
PEOPLE = {"P7": "Ada Lovelace", "P8": "Grace Hopper", "P9": "Alan Turing"}
SENT: list[dict] = []
DUES = {"P7": 2.5, "P8": 3.5, "P9": 1.25}


@mcp.tool()
def search_people(query: str) -> list[dict]:
    """People whose name contains the text (case-insensitive)."""
    return [{"person_id": pid, "name": name} for pid, name in PEOPLE.items() if query.lower() in name.lower()]


@mcp.tool()
def get_person(person_id: str) -> dict:
    """One person's name and the messages sent to them."""
    if person_id not in PEOPLE:
        raise ValueError(f"no person {person_id!r}; search_people finds ids")
    return {"person_id": person_id, "name": PEOPLE[person_id], "messages": [m for m in SENT if m["to"] == person_id]}


@mcp.tool()
def send_message(person_id: str, text: str) -> dict:
    """Send a message to a person."""
    if person_id not in PEOPLE:
        raise ValueError(f"no person {person_id!r}; search_people finds ids")
    SENT.append({"to": person_id, "text": text})
    return {"sent": len(SENT), "to": person_id}


@mcp.tool()
def set_status(person_id: str, status: str) -> dict:
    """Set a person's status."""
    if person_id not in PEOPLE:
        raise ValueError(f"no person {person_id!r}; search_people finds ids")
    if status not in ("away", "busy", "free"):
        raise ValueError(f"unknown status {status!r}; statuses: away, busy, free")
    return {"person_id": person_id, "status": status}


@mcp.tool()
def pay_dues(person_id: str, amount: float) -> dict:
    """Pay a person's dues in full (the exact amount owed)."""
    if person_id not in PEOPLE:
        raise ValueError(f"no person {person_id!r}; search_people finds ids")
    if amount != DUES[person_id]:
        raise ValueError(f"{PEOPLE[person_id]} owes {DUES[person_id]:.2f}, not {amount}")
    DUES[person_id] = 0.0
    return {"person_id": person_id, "owed": 0.0}


@mcp.tool()
def invite(person_id: str) -> dict:
    """Invite a person to the club."""
    if person_id not in PEOPLE:
        raise ValueError(f"no person {person_id!r}; search_people finds ids")
    if DUES[person_id]:
        raise ValueError(f"{PEOPLE[person_id]} owes {DUES[person_id]:.2f} in dues; pay_dues first")
    return {"person_id": person_id, "invited": True}


if __name__ == "__main__":
    mcp.run()

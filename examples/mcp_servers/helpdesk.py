"""A customer-support help desk as an MCP server (FastMCP, stdio): customers, tickets, agents, comments.

Style under test, unlike the other servers here: integer ids (ticket 101, customer 3), enum arguments
(``priority``, ``status``), optional filters, a nested result (a ticket with its customer, its assignee and its
comments as a list of objects), and errors raised as exceptions that name what the server takes ("agents: sam,
alex, kim"). A ticket is ``open`` or ``pending`` until it is closed with a resolution; a closed ticket can be
reopened. Fixed data, so every run gives the same answers; ``reset`` restores the opening state (hidden from the
agent by the evaluation harness). The held-out tasks beside it (``helpdesk_tasks.jsonl``) were written by hand
before any model was run on this server: never train on them.

Run:
    python examples/mcp_servers/helpdesk.py
"""

from __future__ import annotations

import copy
from typing import Literal

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("helpdesk")

Priority = Literal["low", "normal", "high", "urgent"]
Status = Literal["open", "pending", "closed"]

CUSTOMERS = {
    1: {"name": "Maria Lopez", "company": "Acme Foods", "email": "maria.lopez@acmefoods.example", "plan": "business"},
    2: {"name": "Tom Berg", "company": "Berg & Sons", "email": "tom@bergsons.example", "plan": "starter"},
    3: {"name": "Priya Shah", "company": "Acme Foods", "email": "priya.shah@acmefoods.example", "plan": "business"},
    4: {"name": "Lukas Meyer", "company": "Nordlicht GmbH", "email": "l.meyer@nordlicht.example", "plan": "enterprise"},
    5: {"name": "Grace Okafor", "company": "Okafor Design", "email": "grace@okafor.example", "plan": "starter"},
}  # fmt: skip
AGENTS = {
    "sam": {"name": "Sam Ortiz", "team": "billing"},
    "alex": {"name": "Alex Chen", "team": "technical"},
    "kim": {"name": "Kim Novak", "team": "accounts"},
}
OPENING = {
    101: {"customer_id": 1, "subject": "Refund for a double charge", "status": "open", "priority": "high",
          "assignee": "sam", "resolution": None,
          "comments": [{"author": "Maria Lopez", "text": "I was charged twice for the March invoice."}]},
    102: {"customer_id": 2, "subject": "Cannot log in after password reset", "status": "open", "priority": "normal",
          "assignee": None, "resolution": None, "comments": []},
    103: {"customer_id": 1, "subject": "Wrong billing address on invoices", "status": "pending", "priority": "low",
          "assignee": "kim", "resolution": None,
          "comments": [{"author": "Kim Novak", "text": "Asked Maria for the new address."}]},
    104: {"customer_id": 3, "subject": "CSV export times out", "status": "open", "priority": "urgent",
          "assignee": "alex", "resolution": None,
          "comments": [{"author": "Priya Shah", "text": "Exports over 10,000 rows never finish."},
                       {"author": "Alex Chen", "text": "Reproduced; looking at the query."}]},
    105: {"customer_id": 4, "subject": "Close our old sandbox account", "status": "closed", "priority": "low",
          "assignee": "kim", "resolution": "Sandbox account deleted", "comments": []},
    106: {"customer_id": 5, "subject": "Add a second admin user", "status": "open", "priority": "normal",
          "assignee": None, "resolution": None, "comments": []},
    107: {"customer_id": 3, "subject": "Dark mode for the dashboard", "status": "closed", "priority": "low",
          "assignee": "alex", "resolution": "Added to the roadmap", "comments": []},
}  # fmt: skip
TICKETS: dict = copy.deepcopy(OPENING)


def _customer(customer_id: int) -> dict:
    if customer_id not in CUSTOMERS:
        raise ValueError(f"no customer with id {customer_id}; find_customers searches them by name or company")
    return CUSTOMERS[customer_id]


def _ticket(ticket_id: int) -> dict:
    if ticket_id not in TICKETS:
        raise ValueError(f"no ticket {ticket_id}; list_tickets shows the tickets")
    return TICKETS[ticket_id]


def _summary(ticket_id: int) -> dict:
    t = TICKETS[ticket_id]
    return {"ticket_id": ticket_id, "subject": t["subject"], "status": t["status"], "priority": t["priority"]}


@mcp.tool()
def reset() -> str:
    """Restore the opening state."""
    TICKETS.clear()
    TICKETS.update(copy.deepcopy(OPENING))
    return "reset"


@mcp.tool()
def find_customers(query: str) -> list[dict]:
    """Customers whose name or company contains the text (case-insensitive)."""
    q = query.lower()
    return [{"customer_id": cid, "name": c["name"], "company": c["company"]}
            for cid, c in CUSTOMERS.items() if q in c["name"].lower() or q in c["company"].lower()]  # fmt: skip


@mcp.tool()
def get_customer(customer_id: int) -> dict:
    """A customer's details: company, email, plan and how many tickets they have open."""
    c = _customer(customer_id)
    still_open = sum(t["customer_id"] == customer_id and t["status"] != "closed" for t in TICKETS.values())
    return {"customer_id": customer_id, **c, "open_tickets": still_open}


@mcp.tool()
def list_tickets(customer_id: int | None = None, status: Status | None = None) -> list[dict]:
    """Tickets, optionally only one customer's or only those with a status."""
    if customer_id is not None:
        _customer(customer_id)
    return [_summary(tid) for tid, t in TICKETS.items()
            if customer_id in (None, t["customer_id"]) and status in (None, t["status"])]  # fmt: skip


@mcp.tool()
def get_ticket(ticket_id: int) -> dict:
    """A ticket in full: its customer, status, priority, assignee, resolution and comments."""
    t = _ticket(ticket_id)
    customer = {"customer_id": t["customer_id"], "name": CUSTOMERS[t["customer_id"]]["name"]}
    assignee = {"agent": t["assignee"], "name": AGENTS[t["assignee"]]["name"]} if t["assignee"] else None
    return {"ticket_id": ticket_id, "subject": t["subject"], "status": t["status"], "priority": t["priority"],
            "customer": customer, "assignee": assignee, "resolution": t["resolution"],
            "comments": list(t["comments"])}  # fmt: skip


@mcp.tool()
def open_ticket(customer_id: int, subject: str, priority: Priority = "normal") -> dict:
    """Open a new ticket for a customer; it starts unassigned."""
    _customer(customer_id)
    ticket_id = max(TICKETS) + 1
    TICKETS[ticket_id] = {"customer_id": customer_id, "subject": subject, "status": "open", "priority": priority,
                          "assignee": None, "resolution": None, "comments": []}  # fmt: skip
    return _summary(ticket_id)


@mcp.tool()
def add_comment(ticket_id: int, text: str) -> dict:
    """Add a comment to a ticket (written by the support team)."""
    t = _ticket(ticket_id)
    t["comments"].append({"author": "support", "text": text})
    return {"ticket_id": ticket_id, "comments": len(t["comments"])}


@mcp.tool()
def set_priority(ticket_id: int, priority: Priority) -> dict:
    """Change a ticket's priority."""
    t = _ticket(ticket_id)
    if t["status"] == "closed":
        raise ValueError(f"ticket {ticket_id} is closed; reopen_ticket it first")
    t["priority"] = priority
    return _summary(ticket_id)


@mcp.tool()
def list_agents() -> list[dict]:
    """The support agents, with their team and how many open tickets each has."""
    return [{"agent": a, "name": info["name"], "team": info["team"],
             "open_tickets": sum(t["assignee"] == a and t["status"] != "closed" for t in TICKETS.values())}
            for a, info in AGENTS.items()]  # fmt: skip


@mcp.tool()
def assign_ticket(ticket_id: int, agent: str) -> dict:
    """Assign a ticket to a support agent (by their agent name, e.g. sam)."""
    t = _ticket(ticket_id)
    if agent not in AGENTS:
        raise ValueError(f"unknown agent {agent!r}; agents: {', '.join(AGENTS)}")
    if t["status"] == "closed":
        raise ValueError(f"ticket {ticket_id} is closed; reopen_ticket it first")
    t["assignee"] = agent
    return {"ticket_id": ticket_id, "assignee": agent}


@mcp.tool()
def set_status(ticket_id: int, status: Literal["open", "pending"]) -> dict:
    """Mark a ticket open or pending (waiting on the customer); close_ticket closes it."""
    t = _ticket(ticket_id)
    if t["status"] == "closed":
        raise ValueError(f"ticket {ticket_id} is closed; reopen_ticket it first")
    t["status"] = status
    return _summary(ticket_id)


@mcp.tool()
def close_ticket(ticket_id: int, resolution: str) -> dict:
    """Close a ticket with a short note of how it was resolved."""
    t = _ticket(ticket_id)
    if t["status"] == "closed":
        raise ValueError(f"ticket {ticket_id} is already closed")
    t["status"], t["resolution"] = "closed", resolution
    return {**_summary(ticket_id), "resolution": resolution}


@mcp.tool()
def reopen_ticket(ticket_id: int) -> dict:
    """Reopen a closed ticket; its resolution is cleared."""
    t = _ticket(ticket_id)
    if t["status"] != "closed":
        raise ValueError(f"ticket {ticket_id} is not closed (it is {t['status']})")
    t["status"], t["resolution"] = "open", None
    return _summary(ticket_id)


if __name__ == "__main__":
    mcp.run()

"""A lending library as an MCP server (FastMCP, stdio): books, members, loans, reservations and fines.

A member borrows an available copy for 14 days (at most 3 loans, none while owing a fine), renews a
loan once unless someone reserved the book, and returns it (0.50 a day late). A book with no copy
left can be reserved. The calendar is fixed (today is 2026-03-02) so every run gives the same answers;
``reset`` restores the opening state (hidden from the agent by the evaluation harness). The held-out
tasks beside it (``library_tasks.jsonl``) were written by hand: never train on them.

Run:
    python examples/mcp_servers/library.py
"""

from __future__ import annotations

import copy
import datetime as dt

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("library")

TODAY = dt.date(2026, 3, 2)
OPENING = {
    "books": {
        "B100": {"title": "The Left Hand of Darkness", "author": "Ursula K. Le Guin", "year": 1969, "copies": 2},
        "B101": {"title": "A Wizard of Earthsea", "author": "Ursula K. Le Guin", "year": 1968, "copies": 1},
        "B102": {"title": "Beloved", "author": "Toni Morrison", "year": 1987, "copies": 1},
        "B103": {"title": "Song of Solomon", "author": "Toni Morrison", "year": 1977, "copies": 2},
        "B104": {"title": "The Remains of the Day", "author": "Kazuo Ishiguro", "year": 1989, "copies": 1},
        "B105": {"title": "Never Let Me Go", "author": "Kazuo Ishiguro", "year": 2005, "copies": 3},
        "B106": {"title": "Middlemarch", "author": "George Eliot", "year": 1871, "copies": 1},
    },
    "members": {
        "M1": {"name": "Ada Novak", "fine": 0.0},
        "M2": {"name": "Ben Osei", "fine": 2.5},
        "M3": {"name": "Chloe Martin", "fine": 0.0},
        "M4": {"name": "Dev Patel", "fine": 0.0},
    },
    "loans": {
        "L1": {"member_id": "M3", "book_id": "B102", "due": "2026-03-09", "renewals": 0, "returned": False},
        "L2": {"member_id": "M4", "book_id": "B106", "due": "2026-02-20", "renewals": 1, "returned": False},
        "L3": {"member_id": "M4", "book_id": "B104", "due": "2026-03-12", "renewals": 0, "returned": False},
        "L4": {"member_id": "M4", "book_id": "B100", "due": "2026-03-14", "renewals": 0, "returned": False},
    },
    "reservations": [{"member_id": "M1", "book_id": "B104"}],
}
STATE: dict = copy.deepcopy(OPENING)


def _book(book_id: str) -> dict:
    if book_id not in STATE["books"]:
        raise ValueError(f"no book {book_id!r}; search_books finds ids")
    return STATE["books"][book_id]


def _member(member_id: str) -> dict:
    if member_id not in STATE["members"]:
        raise ValueError(f"no member {member_id!r}; find_member finds ids")
    return STATE["members"][member_id]


def _open_loans(**match: str) -> list[tuple[str, dict]]:
    return [(lid, loan) for lid, loan in STATE["loans"].items()
            if not loan["returned"] and all(loan[k] == v for k, v in match.items())]  # fmt: skip


def _available(book_id: str) -> int:
    return _book(book_id)["copies"] - len(_open_loans(book_id=book_id))


def _loan_view(loan_id: str) -> dict:
    loan = STATE["loans"][loan_id]
    return {"loan_id": loan_id, "book_id": loan["book_id"], "title": STATE["books"][loan["book_id"]]["title"],
            "member_id": loan["member_id"], "due": loan["due"], "renewals": loan["renewals"],
            "returned": loan["returned"]}  # fmt: skip


@mcp.tool()
def reset() -> str:
    """Restore the library's opening state."""
    STATE.clear()
    STATE.update(copy.deepcopy(OPENING))
    return "reset"


@mcp.tool()
def search_books(query: str) -> list[dict]:
    """Books whose title or author contains the text, with how many copies are on the shelf."""
    q = query.lower()
    return [{"book_id": bid, "title": b["title"], "author": b["author"], "available": _available(bid)}
            for bid, b in STATE["books"].items() if q in b["title"].lower() or q in b["author"].lower()]  # fmt: skip


@mcp.tool()
def get_book(book_id: str) -> dict:
    """One book: title, author, year, copies owned and on the shelf, and how many reservations wait."""
    b = _book(book_id)
    waiting = sum(r["book_id"] == book_id for r in STATE["reservations"])
    return {"book_id": book_id, **b, "available": _available(book_id), "reservations": waiting}


@mcp.tool()
def find_member(name: str) -> list[dict]:
    """Members whose name contains the text."""
    return [{"member_id": mid, "name": m["name"]} for mid, m in STATE["members"].items()
            if name.lower() in m["name"].lower()]  # fmt: skip


@mcp.tool()
def get_member(member_id: str) -> dict:
    """A member's name, fine owed and open loans."""
    m = _member(member_id)
    return {"member_id": member_id, "name": m["name"], "fine": m["fine"],
            "loans": [_loan_view(lid) for lid, _ in _open_loans(member_id=member_id)]}  # fmt: skip


@mcp.tool()
def list_loans(member_id: str) -> list[dict]:
    """A member's open loans with their due dates."""
    _member(member_id)
    return [_loan_view(lid) for lid, _ in _open_loans(member_id=member_id)]


@mcp.tool()
def borrow(member_id: str, book_id: str) -> dict:
    """Lend a copy of a book to a member for 14 days; returns the loan."""
    m = _member(member_id)
    if m["fine"] > 0:
        raise ValueError(f"{m['name']} owes a fine of {m['fine']:.2f}; pay_fine first")
    if len(_open_loans(member_id=member_id)) >= 3:
        raise ValueError(f"{m['name']} already has 3 loans; return one first")
    if _available(book_id) <= 0:
        raise ValueError(f"no copy of {book_id} is on the shelf; reserve it instead")
    loan_id = f"L{len(STATE['loans']) + 1}"
    due = (TODAY + dt.timedelta(days=14)).isoformat()
    STATE["loans"][loan_id] = {"member_id": member_id, "book_id": book_id, "due": due, "renewals": 0,
                               "returned": False}  # fmt: skip
    STATE["reservations"] = [r for r in STATE["reservations"]
                             if not (r["member_id"] == member_id and r["book_id"] == book_id)]  # fmt: skip
    return _loan_view(loan_id)


@mcp.tool()
def renew(loan_id: str) -> dict:
    """Extend a loan by 14 days from its due date; once only, and not while someone reserved the book."""
    loan = STATE["loans"].get(loan_id)
    if loan is None or loan["returned"]:
        raise ValueError(f"no open loan {loan_id!r}")
    if loan["renewals"] >= 1:
        raise ValueError(f"loan {loan_id} was already renewed once")
    if any(r["book_id"] == loan["book_id"] for r in STATE["reservations"]):
        raise ValueError(f"{loan['book_id']} is reserved by another member; it cannot be renewed")
    loan["due"] = (dt.date.fromisoformat(loan["due"]) + dt.timedelta(days=14)).isoformat()
    loan["renewals"] += 1
    return _loan_view(loan_id)


@mcp.tool()
def return_book(loan_id: str) -> dict:
    """Return a loan; a late return adds 0.50 per day late to the member's fine."""
    loan = STATE["loans"].get(loan_id)
    if loan is None or loan["returned"]:
        raise ValueError(f"no open loan {loan_id!r}")
    loan["returned"] = True
    late = max(0, (TODAY - dt.date.fromisoformat(loan["due"])).days)
    STATE["members"][loan["member_id"]]["fine"] += 0.5 * late
    return {**_loan_view(loan_id), "days_late": late, "fine_added": 0.5 * late}


@mcp.tool()
def reserve(member_id: str, book_id: str) -> dict:
    """Join the waiting list for a book with no copy on the shelf."""
    _member(member_id)
    if _available(book_id) > 0:
        raise ValueError(f"{book_id} has a copy on the shelf; borrow it instead")
    if {"member_id": member_id, "book_id": book_id} in STATE["reservations"]:
        raise ValueError(f"{member_id} already reserved {book_id}")
    STATE["reservations"].append({"member_id": member_id, "book_id": book_id})
    return {"member_id": member_id, "book_id": book_id,
            "position": sum(r["book_id"] == book_id for r in STATE["reservations"])}  # fmt: skip


@mcp.tool()
def pay_fine(member_id: str, amount: float) -> dict:
    """Pay some or all of a member's fine; returns what is still owed."""
    m = _member(member_id)
    if amount <= 0 or amount > m["fine"]:
        raise ValueError(f"amount must be between 0 and the fine owed ({m['fine']:.2f}), got {amount}")
    m["fine"] = round(m["fine"] - amount, 2)
    return {"member_id": member_id, "fine": m["fine"]}


if __name__ == "__main__":
    mcp.run()

"""A household budget as an MCP server (FastMCP, stdio): accounts, transactions, payees and monthly budgets.

Style under test, unlike the other servers here: string ids with a prefix ("chk-main", "sav-holiday",
"tx-0412"), money as plain numbers (negative for money going out), ISO dates and ``YYYY-MM`` months, a category
enum, optional filters that combine (``list_transactions(account_id=None, category=None, month=None)``), tools
that return bare lists of dicts or nested dicts (an account with its latest transactions, a payee with its
charges, a month's budget per category), and errors raised as ``ValueError`` that say what the server accepts
("accounts: chk-main, sav-holiday, ..."). Money moves only by ``transfer``: never from the credit card, never more
than the balance, never more than the card owes. Fixed data, so every run gives the same answers; ``reset``
restores the opening state (hidden from the agent by the evaluation harness). The held-out tasks beside it
(``budget_tasks.jsonl``) were written by hand before any model was run on this server: never train on them.

Run:
    python examples/mcp_servers/budget.py
"""

from __future__ import annotations

import copy
import re
from typing import Literal, get_args

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("budget")

Category = Literal["groceries", "dining", "transport", "utilities", "rent", "entertainment", "health", "shopping",
                   "income", "transfer"]  # fmt: skip
CATEGORIES = get_args(Category)
UNBUDGETED = ("income", "transfer")  # money in and money moved between accounts is not spending
TODAY = "2026-11-20"

PAYEES = {
    "Brightside Ltd": "income", "Oakwood Lettings": "rent", "City Transit": "transport", "FreshMart": "groceries",
    "Northwind Energy": "utilities", "Starlight Cinema": "entertainment", "Blue Bottle Coffee": "dining",
    "Greenleaf Pharmacy": "health",
}  # fmt: skip
OPENING_ACCOUNTS = {
    "chk-main": {"name": "Main checking", "type": "checking", "balance": 2430.55},
    "sav-holiday": {"name": "Holiday savings", "type": "savings", "balance": 850.00},
    "sav-rainy": {"name": "Rainy-day fund", "type": "savings", "balance": 4200.00},
    "cc-visa": {"name": "Visa card", "type": "credit", "balance": -396.70},
}  # fmt: skip
_ROWS = [  # id, date, account, payee, description, amount, category
    ("tx-0401", "2026-10-01", "chk-main", "Brightside Ltd",     "October salary",         3200.00, "income"),
    ("tx-0402", "2026-10-02", "chk-main", "Oakwood Lettings",   "October rent",          -1150.00, "rent"),
    ("tx-0403", "2026-10-03", "chk-main", "City Transit",       "Monthly pass",            -55.00, "transport"),
    ("tx-0404", "2026-10-05", "cc-visa",  "FreshMart",          "Weekly shop",             -86.40, "groceries"),
    ("tx-0405", "2026-10-14", "chk-main", "Northwind Energy",   "Electricity, October",    -64.25, "utilities"),
    ("tx-0406", "2026-10-18", "cc-visa",  "Starlight Cinema",   "Two tickets",             -24.00, "entertainment"),
    ("tx-0407", "2026-10-22", "cc-visa",  "FreshMart",          "Weekly shop",             -92.15, "groceries"),
    ("tx-0408", "2026-11-01", "chk-main", "Brightside Ltd",     "November salary",        3200.00, "income"),
    ("tx-0409", "2026-11-02", "chk-main", "Oakwood Lettings",   "November rent",         -1150.00, "rent"),
    ("tx-0410", "2026-11-02", "chk-main", "City Transit",       "Monthly pass",            -55.00, "transport"),
    ("tx-0411", "2026-11-03", "cc-visa",  "Blue Bottle Coffee", "Latte and a pastry",       -9.40, "groceries"),
    ("tx-0412", "2026-11-06", "cc-visa",  "FreshMart",          "Weekly shop",             -78.90, "groceries"),
    ("tx-0413", "2026-11-09", "cc-visa",  "Greenleaf Pharmacy", "Cold medicine",           -12.35, "health"),
    ("tx-0414", "2026-11-12", "chk-main", "Northwind Energy",   "Electricity, November",   -71.60, "utilities"),
    ("tx-0415", "2026-11-14", "cc-visa",  "Blue Bottle Coffee", "Coffee with Sam",         -11.20, "dining"),
    ("tx-0416", "2026-11-15", "cc-visa",  "Starlight Cinema",   "Film night",              -18.00, "entertainment"),
    ("tx-0417", "2026-11-18", "cc-visa",  "FreshMart",          "Weekly shop",             -64.30, "groceries"),
    ("tx-0418", "2026-11-19", "chk-main", "City Transit",       "Train to Bristol",        -38.40, "transport"),
]  # fmt: skip
OPENING_TRANSACTIONS = {
    tid: {"transaction_id": tid, "date": date, "account_id": acc, "payee": payee, "description": desc,
          "amount": amount, "category": cat, "note": None}
    for tid, date, acc, payee, desc, amount, cat in _ROWS
}  # fmt: skip
OPENING_BUDGETS = {"groceries": 250.00, "dining": 40.00, "entertainment": 50.00, "transport": 80.00}

ACCOUNTS: dict = copy.deepcopy(OPENING_ACCOUNTS)
TRANSACTIONS: dict = copy.deepcopy(OPENING_TRANSACTIONS)
BUDGETS: dict = copy.deepcopy(OPENING_BUDGETS)


def _account(account_id: str) -> dict:
    if account_id not in ACCOUNTS:
        raise ValueError(f"no account {account_id!r}; accounts: {', '.join(ACCOUNTS)}")
    return ACCOUNTS[account_id]


def _transaction(transaction_id: str) -> dict:
    if transaction_id not in TRANSACTIONS:
        raise ValueError(f"no transaction {transaction_id!r}; ids look like tx-0412, list_transactions shows them")
    return TRANSACTIONS[transaction_id]


def _category(category: str) -> str:
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}; categories: {', '.join(CATEGORIES)}")
    return category


def _month(month: str) -> str:
    if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", month):
        raise ValueError(f"month must be written YYYY-MM, e.g. 2026-11; got {month!r}")
    return month


def _money(amount: float) -> float:
    amount = float(amount)
    if amount <= 0 or round(amount, 2) != amount:
        raise ValueError(f"an amount must be above 0 with at most two decimals, e.g. 120.50; got {amount}")
    return amount


def _newest_first() -> list[dict]:
    return sorted(TRANSACTIONS.values(), key=lambda t: (t["date"], t["transaction_id"]), reverse=True)


@mcp.tool()
def reset() -> str:
    """Restore the opening state."""
    for live, opening in (
        (ACCOUNTS, OPENING_ACCOUNTS),
        (TRANSACTIONS, OPENING_TRANSACTIONS),
        (BUDGETS, OPENING_BUDGETS),
    ):
        live.clear()
        live.update(copy.deepcopy(opening))
    return "reset"


@mcp.tool()
def list_accounts() -> list[dict]:
    """All accounts with their balance (a credit card's negative balance is what is owed on it)."""
    return [{"account_id": aid, **a} for aid, a in ACCOUNTS.items()]


@mcp.tool()
def get_account(account_id: str) -> dict:
    """One account (e.g. chk-main) with its balance and its three latest transactions, newest first."""
    a = _account(account_id)
    recent = [dict(t) for t in _newest_first() if t["account_id"] == account_id][:3]
    return {"account_id": account_id, **a, "recent_transactions": recent}


@mcp.tool()
def list_transactions(account_id: str | None = None, category: Category | None = None,
                      month: str | None = None) -> list[dict]:  # fmt: skip
    """Transactions, oldest first; optionally only one account's, one category's or one month's (YYYY-MM)."""
    if account_id is not None:
        _account(account_id)
    if category is not None:
        _category(category)
    if month is not None:
        _month(month)
    return [dict(t) for t in reversed(_newest_first())
            if account_id in (None, t["account_id"]) and category in (None, t["category"])
            and (month is None or t["date"].startswith(month))]  # fmt: skip


@mcp.tool()
def get_transaction(transaction_id: str) -> dict:
    """One transaction (e.g. tx-0412) with its account, payee, amount, category and note."""
    t = _transaction(transaction_id)
    return {**t, "account": {"account_id": t["account_id"], "name": ACCOUNTS[t["account_id"]]["name"]}}


@mcp.tool()
def find_payee(text: str) -> list[dict]:
    """Payees (shops, employer, landlord, bills) whose name contains the text, each with its usual category and its
    transactions."""
    q = text.lower().strip()
    return [{"payee": name, "usual_category": usual,
             "transactions": [{k: t[k] for k in ("transaction_id", "date", "account_id", "amount", "category")}
                              for t in reversed(_newest_first()) if t["payee"] == name]}
            for name, usual in PAYEES.items() if q in name.lower()]  # fmt: skip


@mcp.tool()
def categorize(transaction_id: str, category: Category) -> dict:
    """Put a transaction in another category."""
    t = _transaction(transaction_id)
    t["category"] = _category(category)
    return dict(t)


@mcp.tool()
def add_note(transaction_id: str, note: str) -> dict:
    """Write a note on a transaction (replacing any note it had)."""
    t = _transaction(transaction_id)
    t["note"] = note or None
    return dict(t)


@mcp.tool()
def transfer(from_account: str, to_account: str, amount: float, note: str = "") -> dict:
    """Move money between your own accounts (paying the credit card is a transfer to it); dated today."""
    src, dst, amount = _account(from_account), _account(to_account), _money(amount)
    if from_account == to_account:
        raise ValueError("from_account and to_account must be two different accounts")
    if src["type"] == "credit":
        spendable = [aid for aid, a in ACCOUNTS.items() if a["type"] != "credit"]
        raise ValueError(f"{from_account} is a credit card; transfers come from {', '.join(spendable)}")
    if amount > src["balance"]:
        raise ValueError(f"{from_account} holds {src['balance']:.2f}; cannot transfer {amount:.2f}")
    if dst["type"] == "credit" and amount > -dst["balance"]:
        raise ValueError(f"{to_account} owes {-dst['balance']:.2f}; cannot pay it {amount:.2f}")
    src["balance"] = round(src["balance"] - amount, 2)
    dst["balance"] = round(dst["balance"] + amount, 2)
    ids = []
    for aid, other, sign, word in ((from_account, dst, -1, "to"), (to_account, src, 1, "from")):
        tid = f"tx-{int(max(TRANSACTIONS)[3:]) + 1:04d}"
        TRANSACTIONS[tid] = {"transaction_id": tid, "date": TODAY, "account_id": aid, "payee": other["name"],
                             "description": f"Transfer {word} {other['name']}", "amount": sign * amount,
                             "category": "transfer", "note": note or None}  # fmt: skip
        ids.append(tid)
    return {"amount": amount, "date": TODAY, "transaction_ids": ids,
            "from": {"account_id": from_account, "balance": src["balance"]},
            "to": {"account_id": to_account, "balance": dst["balance"]}}  # fmt: skip


@mcp.tool()
def set_budget(category: Category, monthly_limit: float) -> dict:
    """Set how much a spending category may use each month."""
    if _category(category) in UNBUDGETED:
        budgetable = [c for c in CATEGORIES if c not in UNBUDGETED]
        raise ValueError(f"{category} cannot have a budget; budgets take: {', '.join(budgetable)}")
    previous, BUDGETS[category] = BUDGETS.get(category), _money(monthly_limit)
    return {"category": category, "monthly_limit": BUDGETS[category], "previous_limit": previous}


@mcp.tool()
def budget_status(month: str) -> dict:
    """A month's (YYYY-MM) spending per budgeted category (limit, spent, left, over) and in unbudgeted categories."""
    _month(month)
    spent: dict[str, float] = {}
    for t in TRANSACTIONS.values():
        if t["date"].startswith(month) and t["category"] not in UNBUDGETED:
            spent[t["category"]] = round(spent.get(t["category"], 0.0) - t["amount"], 2)
    budgeted = [{"category": c, "limit": limit, "spent": spent.get(c, 0.0), "left": round(limit - spent.get(c, 0.0), 2),
                 "over": spent.get(c, 0.0) > limit} for c, limit in BUDGETS.items()]  # fmt: skip
    unbudgeted = [{"category": c, "spent": s} for c, s in sorted(spent.items()) if c not in BUDGETS]
    return {"month": month, "budgets": budgeted, "unbudgeted": unbudgeted, "total_spent": round(sum(spent.values()), 2)}


if __name__ == "__main__":
    mcp.run()

"""A car repair garage as an MCP server (FastMCP, stdio): customers, their vehicles, work orders, mechanics, parts.

Style under test, unlike the other servers here: short hex-like string ids ("cu_4e1", "wo_3fa2"), a vehicle keyed by
its plate number (written any way: "ZEN 604", "zen-604" and "ZEN604" are the same car), part numbers
("BP-2041") as the part's key, money as integer cents ("price_cents": 4850, never dollars), results nested two
deep (a work order with its vehicle, the vehicle with its owner), and the tools that change a work order
(``assign_mechanic``, ``add_part``, ``log_hours``, ``set_status``) answering with one plain-text line instead of
JSON. Mechanics are known by first name (Dave, Lena, Raj, Tomas; any case). A work order is ``open``,
``in_progress``, ``waiting_parts`` or ``done``; a done one takes no more parts, hours or mechanic until its status
is set back. Parts come out of stock when added to a work order, never more than the stock holds. Labour is billed
at 9500 cents an hour. Fixed data, so every run gives the same answers; ``reset`` restores the opening state
(hidden from the agent by the evaluation harness). The held-out tasks beside it (``garage_tasks.jsonl``) were
written by hand before any model was run on this server: never train on them.

Run:
    python examples/mcp_servers/garage.py
"""

from __future__ import annotations

import copy
import re
from typing import Literal, get_args

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("garage")

Status = Literal["open", "in_progress", "waiting_parts", "done"]
STATUSES = get_args(Status)
TODAY = "2026-03-20"
LABOUR_RATE_CENTS = 9500  # per hour
MECHANICS = ("Dave", "Lena", "Raj", "Tomas")

CUSTOMERS = {
    "cu_4e1": {"name": "Maria Santos", "phone": "555-0142"},
    "cu_7b3": {"name": "Jim Parker", "phone": "555-0198"},
    "cu_2c9": {"name": "Aisha Khan", "phone": "555-0163"},
    "cu_9a0": {"name": "Bob Whitman", "phone": "555-0127"},
    "cu_5d6": {"name": "Chen Wei", "phone": "555-0185"},
    "cu_8f2": {"name": "Sofia Rossi", "phone": "555-0176"},
    "cu_3e7": {"name": "Greg Miller", "phone": "555-0111"},
    "cu_6a4": {"name": "Nora Lind", "phone": "555-0150"},
}
_VEHICLES = [  # plate, owner, make, model, year, mileage
    ("KRT482", "cu_4e1", "Toyota",     "Corolla",   2016,  98410),
    ("MSN907", "cu_4e1", "Honda",      "CR-V",      2019,  41200),
    ("BDX215", "cu_7b3", "Ford",       "F-150",     2012, 156870),
    ("JPK883", "cu_7b3", "Honda",      "Civic",     2010, 187300),
    ("LPG330", "cu_2c9", "Subaru",     "Outback",   2018,  72050),
    ("VWT118", "cu_9a0", "Volkswagen", "Golf",      2014, 121300),
    ("ZEN604", "cu_5d6", "Toyota",     "Prius",     2020,  38900),
    ("RSO771", "cu_8f2", "Fiat",       "500",       2017,  54600),
    ("GMT509", "cu_3e7", "Chevrolet",  "Silverado", 2015, 133020),
    ("NRL246", "cu_6a4", "Mazda",      "CX-5",      2021,  22480),
]  # fmt: skip
VEHICLES = {plate: {"owner": owner, "make": make, "model": model, "year": year, "mileage": mileage}
            for plate, owner, make, model, year, mileage in _VEHICLES}  # fmt: skip
OPENING_PARTS = {
    "BP-2041": {"name": "Front brake pads", "in_stock": 6, "price_cents": 4850},
    "BP-2042": {"name": "Rear brake pads", "in_stock": 4, "price_cents": 4275},
    "BR-3100": {"name": "Brake rotor", "in_stock": 2, "price_cents": 6990},
    "OF-0110": {"name": "Oil filter", "in_stock": 14, "price_cents": 899},
    "AF-0220": {"name": "Engine air filter", "in_stock": 9, "price_cents": 1650},
    "CF-0222": {"name": "Cabin air filter", "in_stock": 5, "price_cents": 1899},
    "SP-0408": {"name": "Spark plug", "in_stock": 24, "price_cents": 725},
    "WB-1500": {"name": "Wiper blade", "in_stock": 10, "price_cents": 1299},
    "BT-7000": {"name": "Car battery 12V", "in_stock": 3, "price_cents": 15900},
    "SB-0915": {"name": "Serpentine belt", "in_stock": 2, "price_cents": 3450},
    "TH-0630": {"name": "Thermostat", "in_stock": 0, "price_cents": 2899},
    "HL-0055": {"name": "Headlight bulb H11", "in_stock": 7, "price_cents": 1150},
    "EO-5W30": {"name": "Motor oil 5W-30, 5 qt", "in_stock": 8, "price_cents": 3299},
}  # fmt: skip
_ORDERS = [  # id, plate, opened, complaint, status, mechanic, labour hours, parts {part number: quantity}
    ("wo_3fa2", "KRT482", "2026-03-02", "Squealing from the front brakes",         "done",          "Dave",  1.5,
     {"BP-2041": 1}),
    ("wo_7a13", "ZEN604", "2026-03-05", "Oil change",                              "done",          "Tomas", 0.75,
     {"OF-0110": 1, "EO-5W30": 1}),
    ("wo_41c7", "BDX215", "2026-03-09", "Check engine light on and a rough idle",  "in_progress",   "Raj",   2.0,
     {"SP-0408": 8}),
    ("wo_5b09", "LPG330", "2026-03-11", "Runs hot in traffic; needs a new thermostat", "waiting_parts", "Lena", 1.0,
     {}),
    ("wo_9e60", "GMT509", "2026-03-12", "Belt squeals on cold starts",             "in_progress",   "Dave",  1.25,
     {"SB-0915": 1}),
    ("wo_b7d8", "JPK883", "2026-03-14", "Driver-side headlight out",               "in_progress",   "Raj",   0.5,
     {}),
    ("wo_62de", "VWT118", "2026-03-16", "Battery dead most mornings",              "open",          None,    0.0,
     {}),
    ("wo_8c4f", "RSO771", "2026-03-17", "Wipers smear the windscreen",             "open",          "Tomas", 0.0,
     {}),
    ("wo_a1b5", "MSN907", "2026-03-18", "Musty smell from the vents",              "open",          None,    0.0,
     {}),
    ("wo_c2e4", "NRL246", "2026-03-19", "Grinding noise when turning",             "open",          "Lena",  0.0,
     {}),
]  # fmt: skip
OPENING_ORDERS = {
    wid: {"plate": plate, "opened": opened, "complaint": complaint, "status": status, "mechanic": mechanic,
          "labour_hours": hours, "parts": dict(parts)}
    for wid, plate, opened, complaint, status, mechanic, hours, parts in _ORDERS
}  # fmt: skip

PARTS: dict = copy.deepcopy(OPENING_PARTS)
ORDERS: dict = copy.deepcopy(OPENING_ORDERS)


def _customer(customer_id: str) -> dict:
    if customer_id not in CUSTOMERS:
        raise ValueError(f"no customer {customer_id!r}; ids look like cu_4e1, find_customers searches them by name")
    return CUSTOMERS[customer_id]


def _plate(plate: str) -> str:
    key = re.sub(r"[\s-]", "", str(plate)).upper()
    if key not in VEHICLES:
        raise ValueError(f"no vehicle with plate {plate!r}; plates on file: {', '.join(VEHICLES)}")
    return key


def _order(work_order_id: str) -> dict:
    if work_order_id not in ORDERS:
        raise ValueError(f"no work order {work_order_id!r}; ids look like wo_3fa2, list_work_orders shows them")
    return ORDERS[work_order_id]


def _open_order(work_order_id: str) -> dict:
    w = _order(work_order_id)
    if w["status"] == "done":
        raise ValueError(f"{work_order_id} is done; set_status it back to in_progress first")
    return w


def _mechanic(mechanic: str) -> str:
    for name in MECHANICS:
        if name.lower() == str(mechanic).strip().lower():
            return name
    raise ValueError(f"unknown mechanic {mechanic!r}; mechanics: {', '.join(MECHANICS)}")


def _part(part_number: str) -> str:
    key = str(part_number).strip().upper()
    if key not in PARTS:
        raise ValueError(f"no part number {part_number!r}; part numbers look like BP-2041, search_parts finds them")
    return key


def _label(plate: str) -> str:
    v = VEHICLES[plate]
    return f"{v['year']} {v['make']} {v['model']}"


def _vehicle(plate: str, owner: bool = True) -> dict:
    v = VEHICLES[plate]
    out = {"plate": plate, "make": v["make"], "model": v["model"], "year": v["year"], "mileage": v["mileage"]}
    if owner:
        out["owner"] = {"customer_id": v["owner"], **CUSTOMERS[v["owner"]]}
    return out


def _full(work_order_id: str) -> dict:
    w = ORDERS[work_order_id]
    lines = [{"part_number": pn, "name": PARTS[pn]["name"], "quantity": q, "unit_price_cents": PARTS[pn]["price_cents"],
              "line_cents": q * PARTS[pn]["price_cents"]} for pn, q in w["parts"].items()]  # fmt: skip
    parts_cents = sum(line["line_cents"] for line in lines)
    labour_cents = round(w["labour_hours"] * LABOUR_RATE_CENTS)
    return {"work_order_id": work_order_id, "opened": w["opened"], "complaint": w["complaint"], "status": w["status"],
            "mechanic": w["mechanic"], "labour_hours": w["labour_hours"], "vehicle": _vehicle(w["plate"]),
            "parts": lines, "parts_cents": parts_cents, "labour_cents": labour_cents,
            "total_cents": parts_cents + labour_cents}  # fmt: skip


@mcp.tool()
def reset() -> str:
    """Restore the opening state."""
    for live, opening in ((PARTS, OPENING_PARTS), (ORDERS, OPENING_ORDERS)):
        live.clear()
        live.update(copy.deepcopy(opening))
    return "reset"


@mcp.tool()
def find_customers(text: str) -> list[dict]:
    """Customers whose name or phone number contains the text (case-insensitive), with their customer_id."""
    q = text.strip().lower()
    return [{"customer_id": cid, **c} for cid, c in CUSTOMERS.items()
            if q in c["name"].lower() or q in c["phone"]]  # fmt: skip


@mcp.tool()
def get_customer(customer_id: str) -> dict:
    """A customer (e.g. cu_4e1) with their phone number and their vehicles (plate, make, model, year, mileage)."""
    c = _customer(customer_id)
    vehicles = [_vehicle(plate, owner=False) for plate, v in VEHICLES.items() if v["owner"] == customer_id]
    return {"customer_id": customer_id, **c, "vehicles": vehicles}


@mcp.tool()
def get_vehicle(plate: str) -> dict:
    """A vehicle by its plate number (spaces and dashes ignored) with its owner and its work orders, oldest first."""
    key = _plate(plate)
    orders = [{"work_order_id": wid, "opened": w["opened"], "complaint": w["complaint"], "status": w["status"],
               "mechanic": w["mechanic"]} for wid, w in ORDERS.items() if w["plate"] == key]  # fmt: skip
    return {**_vehicle(key), "work_orders": orders}


@mcp.tool()
def list_work_orders(status: Status | None = None, mechanic: str | None = None,
                     plate: str | None = None) -> list[dict]:  # fmt: skip
    """Work orders, oldest first, as short rows (no complaint, parts or hours: get_work_order has those);
    optionally only those with a status, one mechanic's (first name) or one vehicle's (plate)."""
    if status is not None and status not in STATUSES:
        raise ValueError(f"unknown status {status!r}; statuses: {', '.join(STATUSES)}")
    name = _mechanic(mechanic) if mechanic is not None else None
    key = _plate(plate) if plate is not None else None
    return [{"work_order_id": wid, "opened": w["opened"], "plate": w["plate"], "vehicle": _label(w["plate"]),
             "status": w["status"], "mechanic": w["mechanic"]}
            for wid, w in ORDERS.items() if status in (None, w["status"]) and name in (None, w["mechanic"])
            and key in (None, w["plate"])]  # fmt: skip


@mcp.tool()
def get_work_order(work_order_id: str) -> dict:
    """A work order (e.g. wo_3fa2) in full: complaint, status, mechanic, labour hours, its vehicle with the owner,
    the parts used, and what it comes to in cents (parts, labour at 9500 cents an hour, total)."""
    _order(work_order_id)
    return _full(work_order_id)


@mcp.tool()
def open_work_order(plate: str, complaint: str, mechanic: str | None = None) -> dict:
    """Open a new work order for a vehicle (by plate), dated today, with what the customer says is wrong;
    optionally assigned straight away to a mechanic (first name)."""
    key = _plate(plate)
    name = _mechanic(mechanic) if mechanic is not None else None
    if not complaint.strip():
        raise ValueError("complaint must say what is wrong with the vehicle, e.g. 'Brakes squeal'")
    work_order_id = f"wo_{int(max(ORDERS)[3:], 16) + 0x0A3B:04x}"
    ORDERS[work_order_id] = {"plate": key, "opened": TODAY, "complaint": complaint.strip(), "status": "open",
                             "mechanic": name, "labour_hours": 0.0, "parts": {}}  # fmt: skip
    return _full(work_order_id)


@mcp.tool()
def assign_mechanic(work_order_id: str, mechanic: str) -> str:
    """Give a work order to a mechanic (by first name: Dave, Lena, Raj or Tomas); answers with one line."""
    w = _open_order(work_order_id)
    previous, w["mechanic"] = w["mechanic"], _mechanic(mechanic)
    before = f" (was {previous})" if previous else ""
    return f"{work_order_id} ({_label(w['plate'])}, {w['plate']}) is now assigned to {w['mechanic']}{before}."


@mcp.tool()
def add_part(work_order_id: str, part_number: str, quantity: int = 1) -> str:
    """Put parts from stock on a work order (by part number, e.g. BP-2041); stock goes down by the quantity.
    Answers with one line."""
    w = _open_order(work_order_id)
    pn = _part(part_number)
    p = PARTS[pn]
    if int(quantity) != quantity or quantity < 1:
        raise ValueError(f"quantity must be a whole number of at least 1; got {quantity}")
    if quantity > p["in_stock"]:
        raise ValueError(f"only {p['in_stock']} x {p['name']} ({pn}) in stock, cannot add {quantity}; "
                         "set the work order to waiting_parts until they arrive")  # fmt: skip
    p["in_stock"] -= quantity
    w["parts"][pn] = w["parts"].get(pn, 0) + quantity
    return (f"Added {quantity} x {p['name']} ({pn}) at {p['price_cents']} cents each to {work_order_id}; "
            f"{p['in_stock']} left in stock.")  # fmt: skip


@mcp.tool()
def log_hours(work_order_id: str, hours: float) -> str:
    """Add labour hours (in quarter hours, e.g. 1.5) to a work order; answers with one line."""
    w = _open_order(work_order_id)
    hours = float(hours)
    if hours <= 0 or (hours * 4) != int(hours * 4):
        raise ValueError(f"hours must be above 0 in quarter hours, e.g. 0.75 or 2; got {hours}")
    w["labour_hours"] += hours
    return f"Logged {hours:g} h on {work_order_id}; {w['labour_hours']:g} h in all."


@mcp.tool()
def set_status(work_order_id: str, status: Status) -> str:
    """Move a work order to open, in_progress, waiting_parts or done; answers with one line."""
    w = _order(work_order_id)
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}; statuses: {', '.join(STATUSES)}")
    previous, w["status"] = w["status"], status
    return f"{work_order_id} ({_label(w['plate'])}, {w['plate']}): {previous} -> {status}."


@mcp.tool()
def search_parts(text: str) -> list[dict]:
    """Parts whose name or part number contains the text (case-insensitive), with stock and price in cents."""
    q = text.strip().lower()
    return [{"part_number": pn, **p} for pn, p in PARTS.items() if q in p["name"].lower() or q in pn.lower()]


if __name__ == "__main__":
    mcp.run()

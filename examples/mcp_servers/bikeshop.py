"""A community bike co-op as an MCP server (FastMCP, stdio): members, the co-op's hire bikes and members' own bikes,
hires, repair tickets with their parts and labour, and the shop's stock of parts.

Style under test, unlike the other servers here: tool names read noun first (``member_lookup``, ``bike_find``,
``rental_start``, ``ticket_add_part``), ids of mixed shapes (member ``M-0042``, hire bike ``BK-14``, hire
``RT-0412``, repair ticket ``R2026-031``, stock SKUs written as slugs like ``tube-700x25``), members' own bikes known
only by their frame number (``RL7H30091``) while co-op bikes answer to their short code too (``bk14``, ``BK 14`` and
``BK-14`` are the same bike), one lookup that takes anything identifying a member (id, email, phone or name) and
refuses an ambiguous one with the candidates, searches that match every word of the text, bare JSON lists
(``bike_find``, ``stock_find``), nested results (a member's card with their hires and tickets, a ticket with its
bike, owner, parts and labour lines), and writes that answer with one plain-text line (``rental_end``,
``ticket_add_part``, ``ticket_add_labour``, ``ticket_update``). Money is integer pence (``price_p``, ``total_p``),
except the check-in line, which says pounds. Labour is logged in minutes and billed at 3000 pence an hour. Domain
rules raised as ``ValueError``: only a current member with no overdue hire may hire, only an available co-op bike
can be hired, concession members hire at half the day rate, a hired bike must be checked in before it gets a ticket,
a bike has at most one ticket that isn't closed, a closed ticket takes no parts, labour or mechanic until reopened,
parts come out of stock and never more than the stock holds. Fixed data (today is 2026-06-12), so every run gives
the same answers; ``reset`` restores the opening state (hidden from the agent by the evaluation harness). The
held-out tasks beside it (``bikeshop_tasks.jsonl``) were written by hand before any model was run on this server:
never train on them.

Run:
    python examples/mcp_servers/bikeshop.py
"""

from __future__ import annotations

import copy
import datetime as dt
import re

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("bikeshop")

TODAY = "2026-06-12"
LABOUR_P_PER_HOUR = 3000
MECHANICS = ("Kwame", "Elif", "Ruth", "Dmitri")
TICKET_STATUSES = ("open", "waiting_parts", "ready", "closed")
BIKE_STATUSES = ("available", "hired", "in_repair", "with_owner", "retired")
MAX_HIRE_DAYS = 14

_MEMBERS = [  # id, name, email, phone, tier, joined, membership expires
    ("M-0007", "Maya Okonkwo",    "maya.okonkwo@posteo.net",     "07700 900112", "standard",   "2023-04-02",
     "2027-04-01"),
    ("M-0012", "Tom Baxter",      "tbaxter@gmail.com",           "07700 900245", "standard",   "2023-09-14",
     "2026-11-30"),
    ("M-0018", "Priya Raman",     "p.raman@live.co.uk",          "07700 900319", "concession", "2024-10-01",
     "2026-09-30"),
    ("M-0023", "Sam Oduya",       "sam.oduya@outlook.com",       "07700 900388", "volunteer",  "2024-02-01",
     "2027-01-31"),
    ("M-0031", "Samira Haddad",   "samira.h@protonmail.com",     "07700 900471", "concession", "2025-10-16",
     "2026-10-15"),
    ("M-0042", "Jonas Weber",     "jonas.weber@gmx.de",          "07700 900503", "standard",   "2025-09-01",
     "2026-08-31"),
    ("M-0048", "Lucy Fairbanks",  "lucyfairbanks@icloud.com",    "07700 900617", "standard",   "2025-03-01",
     "2027-02-28"),
    ("M-0055", "Ade Balogun",     "ade.balogun@yahoo.co.uk",     "07700 900734", "household",  "2025-01-01",
     "2026-12-31"),
    ("M-0061", "Hannah Kowalski", "hannah.kowalski@gmail.com",   "07700 900856", "standard",   "2025-08-01",
     "2026-07-31"),
    ("M-0064", "Oliver Chen",     "oliver.chen@fastmail.com",    "07700 900921", "standard",   "2025-05-01",
     "2026-04-30"),
    ("M-0070", "Grace O'Neill",   "grace.oneill@btinternet.com", "07700 900967", "household",  "2026-04-01",
     "2027-03-31"),
]  # fmt: skip
MEMBERS = {mid: {"name": name, "email": email, "phone": phone, "tier": tier, "joined": joined, "expires": expires}
           for mid, name, email, phone, tier, joined, expires in _MEMBERS}  # fmt: skip

_FLEET = [  # code, frame number, nickname, make, model, colour, kind, day rate in pence, retired
    ("BK-03", "UA2219C0337", "Big Bertha",   "Urban Arrow",  "Family",           "green",  "cargo",   3500, False),
    ("BK-05", "RLP88120451", "Marge",        "Raleigh",      "Pioneer",          "red",    "hybrid",  1200, False),
    ("BK-09", "DWG0716624",  None,           "Dawes",        "Galaxy",           "maroon", "touring", 1500, False),
    ("BK-11", "PSB5509182",  "Penny",        "Pashley",      "Britannia",        "cream",  "city",    1200, False),
    ("BK-14", "BRC2103378",  "Bluebell",     "Brompton",     "C Line Explore",   "blue",   "folding", 1800, False),
    ("BK-17", "BRC2104415",  None,           "Brompton",     "C Line Explore",   "black",  "folding", 1800, False),
    ("BK-21", "RMT3300718",  "Sparky",       "Raleigh",      "Motus Grand Tour", "grey",   "e-bike",  3000, False),
    ("BK-22", "WTU412G0930", None,           "Trek",         "FX 2",             "silver", "hybrid",  1200, False),
    ("BK-26", "FRG52K1187",  None,           "Frog",         "52",               "orange", "kids",     600, False),
    ("BK-30", "CB9906221",   "Old Faithful", "Claud Butler", "Explorer",         "black",  "hybrid",  1000, True),
]  # fmt: skip
_OWN_BIKES = [  # frame number, owner, nickname, make, model, colour, kind
    ("WTU204C1182Q", "M-0012", None,    "Specialized", "Allez",           "white",  "road"),
    ("GS19K004471",  "M-0018", None,    "Giant",       "Escape 3",        "black",  "hybrid"),
    ("SNB0817733",   "M-0023", None,    "Genesis",     "Croix de Fer 20", "green",  "touring"),
    ("CU23A88410",   "M-0042", None,    "Cube",        "Attain",          "silver", "road"),
    ("TR5F02219K",   "M-0048", None,    "Trek",        "Marlin 5",        "red",    "mountain"),
    ("CB61A55120",   "M-0055", None,    "Carrera",     "Vengeance",       "grey",   "mountain"),
    ("RL7H30091",    "M-0061", "Dolly", "Raleigh",     "Caprice",         "blue",   "city"),
    ("RB22X07741",   "M-0070", None,    "Ridgeback",   "Speed",           "yellow", "hybrid"),
]  # fmt: skip
BIKES = {  # keyed by code for co-op bikes, by frame number for members' own
    **{code: {"frame_number": frame, "owner": None, "nickname": nick, "make": make, "model": model, "colour": colour,
              "kind": kind, "day_rate_p": rate, "retired": retired}
       for code, frame, nick, make, model, colour, kind, rate, retired in _FLEET},
    **{frame: {"frame_number": frame, "owner": owner, "nickname": nick, "make": make, "model": model,
               "colour": colour, "kind": kind, "day_rate_p": None, "retired": False}
       for frame, owner, nick, make, model, colour, kind in _OWN_BIKES},
}  # fmt: skip

OPENING_STOCK = {
    "tube-700x25":      {"name": "Inner tube 700x25c, Presta valve",          "in_stock": 12, "price_p": 650},
    "tube-700x35":      {"name": "Inner tube 700x35c, Schrader valve",        "in_stock": 8,  "price_p": 650},
    "tube-275x2":       {"name": "Inner tube 27.5x1.9-2.35, Schrader valve",  "in_stock": 5,  "price_p": 700},
    "tube-16-brompton": {"name": "Inner tube 16x1-3/8 (Brompton)",            "in_stock": 4,  "price_p": 700},
    "tyre-700x25":      {"name": "Tyre 700x25c Continental Grand Prix",       "in_stock": 4,  "price_p": 3800},
    "tyre-brompton":    {"name": "Tyre Schwalbe Marathon 16x1.35 (Brompton)", "in_stock": 3,  "price_p": 3200},
    "chain-8sp":        {"name": "Chain 8-speed, KMC Z8",                     "in_stock": 6,  "price_p": 1400},
    "chain-11sp":       {"name": "Chain 11-speed, Shimano HG601",             "in_stock": 2,  "price_p": 3200},
    "cassette-8sp":     {"name": "Cassette 8-speed 11-32",                    "in_stock": 0,  "price_p": 2200},
    "pads-vbrake":      {"name": "Brake pads, V-brake (pair)",                "in_stock": 15, "price_p": 450},
    "pads-disc-resin":  {"name": "Disc brake pads, resin (pair)",             "in_stock": 7,  "price_p": 1100},
    "cable-brake":      {"name": "Brake cable, inner",                        "in_stock": 20, "price_p": 300},
    "cable-gear":       {"name": "Gear cable, inner",                         "in_stock": 18, "price_p": 300},
    "bar-tape":         {"name": "Bar tape, black cork",                      "in_stock": 4,  "price_p": 1500},
    "grips-lockon":     {"name": "Lock-on grips",                             "in_stock": 5,  "price_p": 1300},
    "light-front":      {"name": "Front light, USB rechargeable",             "in_stock": 6,  "price_p": 2400},
    "light-rear":       {"name": "Rear light, USB rechargeable",              "in_stock": 9,  "price_p": 1800},
}  # fmt: skip

_RENTALS = [  # id, bike, member, out, due, returned
    ("RT-0401", "BK-26", "M-0070", "2026-05-16", "2026-05-17", "2026-05-17"),
    ("RT-0403", "BK-11", "M-0012", "2026-05-19", "2026-05-20", "2026-05-20"),
    ("RT-0405", "BK-03", "M-0055", "2026-05-23", "2026-05-25", "2026-05-25"),
    ("RT-0409", "BK-17", "M-0012", "2026-05-26", "2026-05-27", "2026-05-27"),
    ("RT-0412", "BK-14", "M-0007", "2026-06-02", "2026-06-04", "2026-06-04"),
    ("RT-0414", "BK-21", "M-0018", "2026-06-03", "2026-06-04", "2026-06-05"),
    ("RT-0416", "BK-05", "M-0007", "2026-06-06", "2026-06-07", "2026-06-07"),
    ("RT-0418", "BK-09", "M-0023", "2026-06-09", "2026-06-16", None),
    ("RT-0419", "BK-14", "M-0031", "2026-06-10", "2026-06-11", None),
    ("RT-0420", "BK-11", "M-0061", "2026-06-11", "2026-06-13", None),
    ("RT-0421", "BK-21", "M-0048", "2026-06-12", "2026-06-14", None),
]  # fmt: skip


def _day_rate(bike: str, member_id: str) -> int:
    rate = BIKES[bike]["day_rate_p"]
    return rate // 2 if MEMBERS[member_id]["tier"] == "concession" else rate


OPENING_RENTALS = {
    rid: {"bike": bike, "member": member, "out": out, "due": due, "returned": returned,
          "day_rate_p": _day_rate(bike, member)}
    for rid, bike, member, out, due, returned in _RENTALS
}  # fmt: skip

_TICKETS = [  # id, bike, opened, status, mechanic, problem, parts {sku: quantity}, labour [(mechanic, minutes, date)]
    ("R2026-024", "BK-17",        "2026-05-28", "closed",        "Elif",
     "Rear tyre worn through to the casing", {"tyre-brompton": 1, "tube-16-brompton": 1}, [("Elif", 40, "2026-05-28")]),
    ("R2026-027", "WTU204C1182Q", "2026-06-02", "closed",        "Kwame",
     "Gears skip under load", {"chain-11sp": 1}, [("Kwame", 45, "2026-06-02")]),
    ("R2026-028", "CB61A55120",   "2026-06-04", "ready",         "Dmitri",
     "Front wheel buckled after hitting a kerb, and a flat", {"tube-275x2": 1}, [("Dmitri", 50, "2026-06-05")]),
    ("R2026-029", "GS19K004471",  "2026-06-05", "ready",         "Ruth",
     "Front brake rubs and squeaks", {"pads-vbrake": 1, "cable-brake": 1}, [("Ruth", 30, "2026-06-06")]),
    ("R2026-030", "BK-22",        "2026-06-08", "open",          "Dmitri",
     "Rear puncture", {}, []),
    ("R2026-031", "SNB0817733",   "2026-06-09", "waiting_parts", "Kwame",
     "Chain and cassette worn, skipping in the top gears", {"chain-8sp": 1}, [("Kwame", 20, "2026-06-09")]),
    ("R2026-032", "RL7H30091",    "2026-06-10", "open",          "Elif",
     "Pre-summer service: brakes, gears, wheels", {}, [("Elif", 60, "2026-06-10")]),
    ("R2026-033", "TR5F02219K",   "2026-06-11", "open",          None,
     "Rear disc brake squeals", {}, []),
    ("R2026-034", "BK-03",        "2026-06-11", "open",          None,
     "Front light not working", {}, []),
]  # fmt: skip
OPENING_TICKETS = {
    tid: {"bike": bike, "opened": opened, "problem": problem, "status": status, "mechanic": mechanic,
          "parts": dict(parts), "labour": [{"mechanic": m, "minutes": n, "date": d} for m, n, d in labour]}
    for tid, bike, opened, status, mechanic, problem, parts, labour in _TICKETS
}  # fmt: skip

STOCK: dict = copy.deepcopy(OPENING_STOCK)
RENTALS: dict = copy.deepcopy(OPENING_RENTALS)
TICKETS: dict = copy.deepcopy(OPENING_TICKETS)


# -- lookups -------------------------------------------------------------------------------------------------------


def _member_id(member_id: str) -> str:
    m = re.fullmatch(r"M-?0*(\d{1,4})", str(member_id).strip().upper())
    key = f"M-{int(m.group(1)):04d}" if m else None
    if key not in MEMBERS:
        raise ValueError(f"no member {member_id!r}; member ids look like M-0042, member_lookup finds one by name, "
                         "email or phone")  # fmt: skip
    return key


def _bike(bike: str) -> str:
    raw = re.sub(r"[\s-]", "", str(bike)).upper()
    m = re.fullmatch(r"BK0*(\d{1,3})", raw)
    if m and f"BK-{int(m.group(1)):02d}" in BIKES:
        return f"BK-{int(m.group(1)):02d}"
    for key, b in BIKES.items():
        if b["frame_number"] == raw:
            return key
    raise ValueError(f"no bike {bike!r}; give a co-op bike's code (like BK-14) or a frame number (like RL7H30091); "
                     "bike_find searches by nickname, make, model or colour")  # fmt: skip


def _ticket_id(ticket_id: str) -> str:
    m = re.fullmatch(r"R?(\d{4})-?0*(\d{1,3})", re.sub(r"\s", "", str(ticket_id)).upper())
    key = f"R{m.group(1)}-{int(m.group(2)):03d}" if m else None
    if key not in TICKETS:
        raise ValueError(f"no repair ticket {ticket_id!r}; ticket ids look like R2026-031, member_lookup lists a "
                         "member's tickets and bike_find a bike's")  # fmt: skip
    return key


def _live_ticket(ticket_id: str) -> tuple[str, dict]:
    key = _ticket_id(ticket_id)
    t = TICKETS[key]
    if t["status"] == "closed":
        raise ValueError(f"{key} is closed; reopen it first with ticket_update(status='open')")
    return key, t


def _mechanic(mechanic: str) -> str:
    for name in MECHANICS:
        if name.lower() == str(mechanic).strip().lower():
            return name
    raise ValueError(f"unknown mechanic {mechanic!r}; the co-op's mechanics are {', '.join(MECHANICS)}")


def _sku(sku: str) -> str:
    key = str(sku).strip().lower()
    if key not in STOCK:
        raise ValueError(f"no SKU {sku!r}; SKUs look like tube-700x25 or pads-vbrake, stock_find searches by name")
    return key


# -- shapes --------------------------------------------------------------------------------------------------------


def _words(text: str | None) -> list[str]:
    return str(text or "").lower().split()


def _current_rental(bike: str) -> str | None:
    return next((rid for rid, r in RENTALS.items() if r["bike"] == bike and r["returned"] is None), None)


def _open_ticket(bike: str) -> str | None:
    return next((tid for tid, t in TICKETS.items() if t["bike"] == bike and t["status"] != "closed"), None)


def _bike_status(bike: str) -> str:
    b = BIKES[bike]
    if b["retired"]:
        return "retired"
    if _current_rental(bike):
        return "hired"
    if _open_ticket(bike):
        return "in_repair"
    return "with_owner" if b["owner"] else "available"


def _bike_brief(bike: str) -> dict:
    b = BIKES[bike]
    code = None if b["owner"] else bike
    return {"code": code, "frame_number": b["frame_number"], "nickname": b["nickname"], "make": b["make"],
            "model": b["model"], "colour": b["colour"]}  # fmt: skip


def _label(bike: str) -> str:
    b = BIKES[bike]
    name = f"{b['colour']} {b['make']} {b['model']}"
    return f"{b['nickname']}, {name}" if b["nickname"] else name


def _who(member_id: str) -> dict:
    return {"member_id": member_id, "name": MEMBERS[member_id]["name"]}


def _days(start: str, end: str) -> int:
    return max(1, (dt.date.fromisoformat(end) - dt.date.fromisoformat(start)).days)


def _rental_state(r: dict) -> str:
    if r["returned"] is not None:
        return "returned"
    return "overdue" if r["due"] < TODAY else "out"


def _bike_row(bike: str) -> dict:
    b = BIKES[bike]
    hires = [rid for rid, r in RENTALS.items() if r["bike"] == bike]
    last = None
    if hires:
        r = RENTALS[hires[-1]]
        last = {"rental_id": hires[-1], **_who(r["member"]), "out": r["out"], "due": r["due"],
                "returned": r["returned"]}  # fmt: skip
    open_tid = _open_ticket(bike)
    repair = None
    if open_tid:
        t = TICKETS[open_tid]
        repair = {"ticket_id": open_tid, "status": t["status"], "mechanic": t["mechanic"]}
    return {**_bike_brief(bike), "kind": b["kind"], "owner": _who(b["owner"]) if b["owner"] else "co-op",
            "status": _bike_status(bike), "day_rate_p": b["day_rate_p"], "last_hire": last, "open_ticket": repair,
            "tickets": [tid for tid, t in TICKETS.items() if t["bike"] == bike]}  # fmt: skip


def _ticket_full(ticket_id: str) -> dict:
    t = TICKETS[ticket_id]
    b = BIKES[t["bike"]]
    owner = {**_who(b["owner"]), "email": MEMBERS[b["owner"]]["email"]} if b["owner"] else "co-op"
    parts = [{"sku": sku, "name": STOCK[sku]["name"], "quantity": q, "unit_p": STOCK[sku]["price_p"],
              "line_p": q * STOCK[sku]["price_p"]} for sku, q in t["parts"].items()]  # fmt: skip
    labour = [{**line, "line_p": line["minutes"] * LABOUR_P_PER_HOUR // 60} for line in t["labour"]]
    parts_p = sum(p["line_p"] for p in parts)
    labour_p = sum(line["line_p"] for line in labour)
    return {"ticket_id": ticket_id, "opened": t["opened"], "problem": t["problem"], "status": t["status"],
            "mechanic": t["mechanic"], "bike": {**_bike_brief(t["bike"]), "owner": owner}, "parts": parts,
            "labour": labour, "parts_p": parts_p, "labour_p": labour_p, "total_p": parts_p + labour_p,
            "billed_to": MEMBERS[b["owner"]]["name"] if b["owner"] else "co-op"}  # fmt: skip


def _card(member_id: str) -> dict:
    m = MEMBERS[member_id]
    bikes = [{"frame_number": b["frame_number"], "nickname": b["nickname"], "make": b["make"], "model": b["model"],
              "colour": b["colour"], "kind": b["kind"], "status": _bike_status(key)}
             for key, b in BIKES.items() if b["owner"] == member_id]  # fmt: skip
    hires = [{"rental_id": rid, "bike": _bike_brief(r["bike"]), "out": r["out"], "due": r["due"],
              "returned": r["returned"], "state": _rental_state(r), "day_rate_p": r["day_rate_p"],
              "charge_p": r["day_rate_p"] * _days(r["out"], r["returned"]) if r["returned"] else None}
             for rid, r in RENTALS.items() if r["member"] == member_id]  # fmt: skip
    own = {key for key, b in BIKES.items() if b["owner"] == member_id}
    tickets = [{"ticket_id": tid, "frame_number": BIKES[t["bike"]]["frame_number"], "opened": t["opened"],
                "problem": t["problem"], "status": t["status"]}
               for tid, t in TICKETS.items() if t["bike"] in own]  # fmt: skip
    return {"member_id": member_id, "name": m["name"], "email": m["email"], "phone": m["phone"], "tier": m["tier"],
            "joined": m["joined"], "expires": m["expires"], "membership_current": m["expires"] >= TODAY,
            "bikes": bikes, "hires": hires, "tickets": tickets}  # fmt: skip


# -- tools ---------------------------------------------------------------------------------------------------------


@mcp.tool()
def reset() -> str:
    """Restore the opening state."""
    for live, opening in ((STOCK, OPENING_STOCK), (RENTALS, OPENING_RENTALS), (TICKETS, OPENING_TICKETS)):
        live.clear()
        live.update(copy.deepcopy(opening))
    return "reset"


@mcp.tool()
def member_lookup(who: str) -> dict:
    """A member's card, found by member id (M-0042), email, phone number, or name (all or part of it; it must match
    exactly one member). The card has their membership (tier, expiry, whether it is current), the bikes of their own
    we have on record, every hire they have made (oldest first, with the bike, dates and charge in pence) and the
    repair tickets on their own bikes."""
    q = str(who).strip()
    if not q:
        raise ValueError("say who: a member id like M-0042, an email, a phone number or a name")
    if re.fullmatch(r"[Mm]-?\d{1,4}", q):
        return _card(_member_id(q))
    digits = re.sub(r"\D", "", q)
    hits = [mid for mid, m in MEMBERS.items()
            if m["email"] == q.lower() or (len(digits) >= 6 and digits in re.sub(r"\D", "", m["phone"]))
            or ("@" not in q and all(w in m["name"].lower() for w in _words(q)))]  # fmt: skip
    if not hits:
        raise ValueError(f"no member matches {who!r}; try a member id like M-0042, an email, a phone number or part "
                         "of the name")  # fmt: skip
    if len(hits) > 1:
        names = ", ".join(f"{MEMBERS[mid]['name']} ({mid})" for mid in hits)
        raise ValueError(f"{who!r} matches {len(hits)} members: {names}; give more of the name or the member id")
    return _card(hits[0])


@mcp.tool()
def bike_find(text: str = "", status: str | None = None) -> list[dict]:
    """Search every bike we know: the co-op's hire bikes (short code like BK-14) and members' own bikes (known by
    frame number). Every word of the text must match the code, frame number, nickname, make, model, colour or kind
    (cargo, folding, e-bike, kids, ...); empty text lists them all. Optional status: available, hired, in_repair,
    with_owner or retired. Each bike comes with its owner ("co-op" or the member), its day rate in pence (hire
    bikes), its most recent hire, its open repair ticket and the ids of all its tickets."""
    if status is not None and status not in BIKE_STATUSES:
        raise ValueError(f"unknown status {status!r}; statuses: {', '.join(BIKE_STATUSES)}")
    words = _words(text)
    rows = []
    for key, b in BIKES.items():
        hay = " ".join(str(v) for v in (key, b["frame_number"], b["nickname"], b["make"], b["model"], b["colour"],
                                        b["kind"])).lower()  # fmt: skip
        squashed = hay.replace("-", "")
        if all(w in hay or w.replace("-", "") in squashed for w in words) and status in (None, _bike_status(key)):
            rows.append(_bike_row(key))
    return rows


@mcp.tool()
def stock_find(text: str = "") -> list[dict]:
    """Parts and accessories in the shop whose SKU or name contains every word of the text (empty text lists
    everything), with how many are in stock and the price in pence."""
    words = _words(text)
    return [{"sku": sku, **p} for sku, p in STOCK.items() if all(w in f"{sku} {p['name']}".lower() for w in words)]


@mcp.tool()
def ticket_show(ticket_id: str) -> dict:
    """A repair ticket (like R2026-031) in full: problem, status, mechanic, the bike and its owner, the parts used
    and the labour logged, and what it comes to in pence (parts, labour at 3000p an hour, total)."""
    return _ticket_full(_ticket_id(ticket_id))


@mcp.tool()
def rental_start(bike: str, member_id: str, days: int = 1) -> dict:
    """Hire out a co-op bike (code like BK-14, or its frame number) to a member (member id like M-0042) from today
    for 1 to 14 days. The member's membership must be current and they must have no overdue hire; concession
    members pay half the day rate. Returns the new hire."""
    key, mid = _bike(bike), _member_id(member_id)
    b, m = BIKES[key], MEMBERS[mid]
    if b["owner"]:
        raise ValueError(f"{b['frame_number']} is {MEMBERS[b['owner']]['name']}'s own bike; only co-op bikes "
                         "(codes like BK-14) can be hired")  # fmt: skip
    if int(days) != days or not 1 <= days <= MAX_HIRE_DAYS:
        raise ValueError(f"days must be a whole number from 1 to {MAX_HIRE_DAYS}; got {days}")
    state = _bike_status(key)
    if state == "hired":
        r = RENTALS[_current_rental(key)]
        raise ValueError(f"{key} ({_label(key)}) is out with {MEMBERS[r['member']]['name']} until {r['due']}; "
                         "bike_find(status='available') lists the bikes free now")  # fmt: skip
    if state != "available":
        raise ValueError(f"{key} ({_label(key)}) is {state}; bike_find(status='available') lists the bikes free now")
    if m["expires"] < TODAY:
        raise ValueError(f"{m['name']}'s membership ran out on {m['expires']}; it must be renewed before they hire")
    overdue = [rid for rid, r in RENTALS.items() if r["member"] == mid and _rental_state(r) == "overdue"]
    if overdue:
        r = RENTALS[overdue[0]]
        raise ValueError(f"{m['name']} has an overdue hire ({overdue[0]}, {r['bike']}, due {r['due']}); check it "
                         "in with rental_end first")  # fmt: skip
    rental_id = f"RT-{max(int(rid[3:]) for rid in RENTALS) + 1:04d}"
    due = (dt.date.fromisoformat(TODAY) + dt.timedelta(days=int(days))).isoformat()
    RENTALS[rental_id] = {"bike": key, "member": mid, "out": TODAY, "due": due, "returned": None,
                          "day_rate_p": _day_rate(key, mid)}  # fmt: skip
    rate = RENTALS[rental_id]["day_rate_p"]
    return {"rental_id": rental_id, "bike": _bike_brief(key), "member": {**_who(mid), "tier": m["tier"]},
            "out": TODAY, "due": due, "day_rate_p": rate, "estimate_p": rate * int(days)}  # fmt: skip


@mcp.tool()
def rental_end(bike: str) -> str:
    """Check a hired bike back in today (by code like BK-14, or frame number). Every day it was out is charged
    (at least one) at the hire's day rate. Replies with one line: who had it, whether it came back late, and the
    charge."""
    key = _bike(bike)
    rid = _current_rental(key)
    if rid is None:
        raise ValueError(f"{key} ({_label(key)}) is not out on hire; bike_find(status='hired') lists the bikes "
                         "that are")  # fmt: skip
    r = RENTALS[rid]
    r["returned"] = TODAY
    days = _days(r["out"], TODAY)
    late = (dt.date.fromisoformat(TODAY) - dt.date.fromisoformat(r["due"])).days
    when = f"{late} day{'s' * (late != 1)} late" if late > 0 else "on time"
    charge = days * r["day_rate_p"]
    who = f"{MEMBERS[r['member']]['name']} ({r['member']})"
    return (f"{key} ({_label(key)}) checked in from {who}, {when}: {days} day{'s' * (days != 1)} at "
            f"£{r['day_rate_p'] / 100:.2f} = £{charge / 100:.2f} for {rid}.")  # fmt: skip


@mcp.tool()
def ticket_open(bike: str, problem: str, mechanic: str | None = None) -> dict:
    """Open a repair ticket, dated today, for a co-op bike (code like BK-14) or a member's own bike (frame number),
    saying what is wrong; optionally give it straight to a mechanic (Kwame, Elif, Ruth or Dmitri). A hired bike
    must be checked in (rental_end) first, and a bike has at most one ticket that isn't closed. Returns the ticket."""
    key = _bike(bike)
    name = _mechanic(mechanic) if mechanic is not None else None
    if not str(problem).strip():
        raise ValueError("problem must say what is wrong, e.g. 'Rear brake rubbing'")
    if BIKES[key]["retired"]:
        raise ValueError(f"{key} ({_label(key)}) is retired from the fleet")
    rid = _current_rental(key)
    if rid:
        raise ValueError(f"{key} is out on hire ({rid}, {MEMBERS[RENTALS[rid]['member']]['name']}); check it in with "
                         "rental_end before opening a ticket")  # fmt: skip
    existing = _open_ticket(key)
    if existing:
        raise ValueError(f"{key if not BIKES[key]['owner'] else BIKES[key]['frame_number']} already has ticket "
                         f"{existing} ({TICKETS[existing]['status']}); add to that one instead")  # fmt: skip
    ticket_id = f"R2026-{max(int(t[6:]) for t in TICKETS) + 1:03d}"
    TICKETS[ticket_id] = {"bike": key, "opened": TODAY, "problem": str(problem).strip(), "status": "open",
                          "mechanic": name, "parts": {}, "labour": []}  # fmt: skip
    return _ticket_full(ticket_id)


@mcp.tool()
def ticket_add_part(ticket_id: str, sku: str, quantity: int = 1) -> str:
    """Use parts from stock on a repair ticket (SKU like pads-vbrake, see stock_find); the stock goes down by the
    quantity. Replies with one line."""
    key, t = _live_ticket(ticket_id)
    s = _sku(sku)
    p = STOCK[s]
    if int(quantity) != quantity or quantity < 1:
        raise ValueError(f"quantity must be a whole number of at least 1; got {quantity}")
    if quantity > p["in_stock"]:
        raise ValueError(f"only {p['in_stock']} x {p['name']} ({s}) in stock, cannot use {quantity}; set the ticket "
                         "to waiting_parts with ticket_update until more arrive")  # fmt: skip
    p["in_stock"] -= quantity
    t["parts"][s] = t["parts"].get(s, 0) + quantity
    return f"{key}: added {quantity} x {p['name']} ({s}, {p['price_p']}p each); {p['in_stock']} left in stock."


@mcp.tool()
def ticket_add_labour(ticket_id: str, minutes: int, mechanic: str) -> str:
    """Log a mechanic's time on a repair ticket, in whole minutes (1 to 480), billed at 3000p an hour; a ticket with
    no mechanic yet is given to them. Replies with one line."""
    key, t = _live_ticket(ticket_id)
    name = _mechanic(mechanic)
    if int(minutes) != minutes or not 1 <= minutes <= 480:
        raise ValueError(f"minutes must be a whole number from 1 to 480 (1.5 hours is 90); got {minutes}")
    t["labour"].append({"mechanic": name, "minutes": int(minutes), "date": TODAY})
    if t["mechanic"] is None:
        t["mechanic"] = name
    total = sum(line["minutes"] for line in t["labour"])
    return f"{key}: logged {int(minutes)} min for {name}; {total} min of labour on the ticket in all."


@mcp.tool()
def ticket_update(ticket_id: str, status: str | None = None, mechanic: str | None = None) -> str:
    """Change a repair ticket's status and/or hand it to another mechanic (Kwame, Elif, Ruth or Dmitri). Statuses:
    open, waiting_parts, ready (fixed, waiting to be collected) and closed (collected and paid). Replies with one
    line."""
    key = _ticket_id(ticket_id)
    t = TICKETS[key]
    if status is None and mechanic is None:
        raise ValueError("give a status, a mechanic or both")
    if status is not None and status not in TICKET_STATUSES:
        raise ValueError(f"unknown status {status!r}; statuses: {', '.join(TICKET_STATUSES)}")
    name = _mechanic(mechanic) if mechanic is not None else None
    if name is not None and t["status"] == "closed" and status in (None, "closed"):
        raise ValueError(f"{key} is closed; reopen it (status='open') to change the mechanic")
    changes = []
    if status is not None and status != t["status"]:
        if status != "closed":
            other = _open_ticket(t["bike"])
            if other not in (None, key):
                raise ValueError(f"the bike already has ticket {other} open; close that one first")
        changes.append(f"{t['status']} -> {status}")
        t["status"] = status
    if name is not None and name != t["mechanic"]:
        changes.append(f"mechanic {t['mechanic'] or 'none'} -> {name}")
        t["mechanic"] = name
    what = "; ".join(changes) or "no change"
    return f"{key} ({_label(t['bike'])}): {what}."


if __name__ == "__main__":
    mcp.run()

"""A parcel carrier as an MCP server (FastMCP, stdio): quotes, shipments, tracking and depots.

A shipment is created (status ``created``), may be cancelled or re-addressed until it is picked up
(``in_transit``), and a parcel in transit can be held at a depot in its destination city for collection.
Tracking shows the scan history as nested objects. Fixed data, so every run gives the same answers;
``reset`` restores the opening state (hidden from the agent by the evaluation harness). The held-out
tasks beside it (``shipping_tasks.jsonl``) were written by hand: never train on them.

Run:
    python examples/mcp_servers/shipping.py
"""

from __future__ import annotations

import copy
from typing import Literal

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("shipping")

RATES = {"standard": (4.0, 1.5, 5), "express": (9.0, 3.0, 2)}  # base, per kg, days
ZONES = {"FR": 1.0, "DE": 1.0, "ES": 1.2, "IT": 1.2, "US": 2.5, "JP": 3.0}
DEPOTS = [
    {"depot_id": "DP-LYO-1", "city": "Lyon", "country": "FR", "opens": "08:00", "closes": "19:00"},
    {"depot_id": "DP-LYO-2", "city": "Lyon", "country": "FR", "opens": "10:00", "closes": "22:00"},
    {"depot_id": "DP-BER-1", "city": "Berlin", "country": "DE", "opens": "07:00", "closes": "20:00"},
    {"depot_id": "DP-MAD-1", "city": "Madrid", "country": "ES", "opens": "09:00", "closes": "18:00"},
]
OPENING = {
    "TRK1001": {"recipient": "Hana Sato", "city": "Lyon", "country": "FR", "weight_kg": 2.0, "service": "standard",
                "status": "in_transit", "held_at": None,
                "events": [{"at": "2026-03-01 09:12", "place": "Paris hub", "event": "picked up"},
                           {"at": "2026-03-01 21:40", "place": "Lyon hub", "event": "arrived"}]},
    "TRK1002": {"recipient": "Marco Bianchi", "city": "Madrid", "country": "ES", "weight_kg": 0.5,
                "service": "express", "status": "delivered", "held_at": None,
                "events": [{"at": "2026-02-27 08:00", "place": "Paris hub", "event": "picked up"},
                           {"at": "2026-02-28 15:30", "place": "Madrid", "event": "delivered"}]},
    "TRK1003": {"recipient": "Jonas Weber", "city": "Berlin", "country": "DE", "weight_kg": 6.0,
                "service": "standard", "status": "created", "held_at": None, "events": []},
    "TRK1004": {"recipient": "Hana Sato", "city": "Lyon", "country": "FR", "weight_kg": 1.0, "service": "express",
                "status": "created", "held_at": None, "events": []},
    "TRK1005": {"recipient": "Lea Fischer", "city": "Berlin", "country": "DE", "weight_kg": 3.5,
                "service": "express", "status": "in_transit", "held_at": None,
                "events": [{"at": "2026-03-02 06:45", "place": "Paris hub", "event": "picked up"}]},
}  # fmt: skip
SHIPMENTS: dict = copy.deepcopy(OPENING)


def _shipment(tracking_number: str) -> dict:
    if tracking_number not in SHIPMENTS:
        raise ValueError(f"unknown tracking number {tracking_number!r}")
    return SHIPMENTS[tracking_number]


def _price(weight_kg: float, country: str, service: str) -> float:
    if country not in ZONES:
        raise ValueError(f"no service to {country!r}; countries: {', '.join(ZONES)}")
    if not 0 < weight_kg <= 30:
        raise ValueError(f"weight_kg must be above 0 and at most 30, got {weight_kg}")
    base, per_kg, _ = RATES[service]
    return round((base + per_kg * weight_kg) * ZONES[country], 2)


@mcp.tool()
def reset() -> str:
    """Restore the opening state."""
    SHIPMENTS.clear()
    SHIPMENTS.update(copy.deepcopy(OPENING))
    return "reset"


@mcp.tool()
def quote(weight_kg: float, country: str, service: Literal["standard", "express"] = "standard") -> dict:
    """Price and delivery days for a parcel to a country (two-letter code)."""
    return {"price_eur": _price(weight_kg, country, service), "days": RATES[service][2], "service": service}


@mcp.tool()
def list_shipments(status: Literal["created", "in_transit", "delivered", "held", "cancelled"] | None = None,
                   recipient: str | None = None) -> list[dict]:  # fmt: skip
    """Shipments, optionally only those with a status or for a recipient."""
    wanted = [(t, s) for t, s in SHIPMENTS.items() if status is None or s["status"] == status]
    return [{"tracking_number": t, "recipient": s["recipient"], "city": s["city"], "status": s["status"]}
            for t, s in wanted if recipient is None or s["recipient"] == recipient]  # fmt: skip


@mcp.tool()
def track(tracking_number: str) -> dict:
    """A shipment's status, destination and scan history."""
    s = _shipment(tracking_number)
    return {"tracking_number": tracking_number, "status": s["status"], "service": s["service"],
            "weight_kg": s["weight_kg"],
            "destination": {"recipient": s["recipient"], "city": s["city"], "country": s["country"]},
            "held_at": s["held_at"], "events": s["events"]}  # fmt: skip


@mcp.tool()
def create_shipment(recipient: str, city: str, country: str, weight_kg: float,
                    service: Literal["standard", "express"] = "standard") -> dict:  # fmt: skip
    """Create a shipment; returns its tracking number and price."""
    price = _price(weight_kg, country, service)
    number = f"TRK{1001 + len(SHIPMENTS)}"
    SHIPMENTS[number] = {"recipient": recipient, "city": city, "country": country, "weight_kg": weight_kg,
                         "service": service, "status": "created", "held_at": None, "events": []}  # fmt: skip
    return {"tracking_number": number, "price_eur": price, "status": "created"}


@mcp.tool()
def change_address(tracking_number: str, city: str, country: str) -> dict:
    """Send a shipment that has not been picked up yet to another city."""
    s = _shipment(tracking_number)
    if s["status"] != "created":
        raise ValueError(f"{tracking_number} is {s['status']}; only a shipment not yet picked up can be re-addressed")
    _price(s["weight_kg"], country, s["service"])
    s["city"], s["country"] = city, country
    return track(tracking_number)


@mcp.tool()
def cancel_shipment(tracking_number: str) -> dict:
    """Cancel a shipment that has not been picked up yet."""
    s = _shipment(tracking_number)
    if s["status"] != "created":
        raise ValueError(f"{tracking_number} is {s['status']}; only a shipment not yet picked up can be cancelled")
    s["status"] = "cancelled"
    return {"tracking_number": tracking_number, "status": "cancelled"}


@mcp.tool()
def list_depots(city: str) -> list[dict]:
    """Pick-up depots in a city with their opening hours."""
    return [d for d in DEPOTS if d["city"].lower() == city.lower()]


@mcp.tool()
def hold_at_depot(tracking_number: str, depot_id: str) -> dict:
    """Hold a parcel in transit at a depot of its destination city for the recipient to collect."""
    s = _shipment(tracking_number)
    depot = next((d for d in DEPOTS if d["depot_id"] == depot_id), None)
    if depot is None:
        raise ValueError(f"no depot {depot_id!r}; list_depots gives ids")
    if s["status"] != "in_transit":
        raise ValueError(f"{tracking_number} is {s['status']}; only a parcel in transit can be held")
    if depot["city"] != s["city"]:
        raise ValueError(f"depot {depot_id} is in {depot['city']}, not in {s['city']}, where the parcel goes")
    s["status"], s["held_at"] = "held", depot_id
    return track(tracking_number)


if __name__ == "__main__":
    mcp.run()

"""A small clinic's appointment book as an MCP server (FastMCP, stdio), written as a user would.

Doctors see patients in 30-minute slots on the next seven days; a patient books a free slot, and a
booking can be looked up or cancelled (its slot is free again). State lives in the process.

Run:
    python examples/mcp_servers/clinic.py
"""

from __future__ import annotations

import datetime as dt

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("clinic")

DOCTORS = [
    {"id": "D1", "name": "Dr Ana Ruiz", "specialty": "general practice", "hours": ["09:00", "09:30", "10:00"]},
    {"id": "D2", "name": "Dr Omar Haddad", "specialty": "dermatology", "hours": ["14:00", "14:30"]},
    {"id": "D3", "name": "Dr Lena Park", "specialty": "paediatrics", "hours": ["11:00", "11:30", "16:00"]},
]
BOOKINGS: dict[str, dict] = {}


def _days() -> list[str]:
    today = dt.date.today()
    return [(today + dt.timedelta(days=n)).isoformat() for n in range(1, 8)]


def _slot_id(doctor_id: str, date: str, hour: str) -> str:
    return f"{doctor_id}-{date.replace('-', '')}-{hour.replace(':', '')}"


def _taken() -> set[str]:
    return {b["slot_id"] for b in BOOKINGS.values() if b["status"] == "booked"}


@mcp.tool()
def list_doctors() -> list[dict]:
    """List the clinic's doctors with their specialty."""
    return [{"id": d["id"], "name": d["name"], "specialty": d["specialty"]} for d in DOCTORS]


@mcp.tool()
def find_slots(doctor_id: str, date: str) -> list[dict]:
    """Free appointment slots of a doctor on a date (YYYY-MM-DD, within the next 7 days)."""
    doctor = next((d for d in DOCTORS if d["id"] == doctor_id), None)
    if doctor is None:
        raise ValueError(f"no doctor {doctor_id!r}")
    try:
        dt.date.fromisoformat(date)
    except ValueError:
        raise ValueError(f"date must be YYYY-MM-DD, got {date!r}") from None
    if date not in _days():
        return []
    taken = _taken()
    slots = [
        {"slot_id": _slot_id(doctor_id, date, h), "doctor_id": doctor_id, "date": date, "time": h}
        for h in doctor["hours"]
    ]
    return [s for s in slots if s["slot_id"] not in taken]


@mcp.tool()
def book(patient: str, slot_id: str) -> dict:
    """Book a free slot for a patient; returns the booking."""
    doctor_id, _, rest = slot_id.partition("-")
    doctor = next((d for d in DOCTORS if d["id"] == doctor_id), None)
    day, _, hour = rest.partition("-")
    valid = {_slot_id(doctor_id, d, h) for d in _days() for h in (doctor or {}).get("hours", [])}
    if slot_id not in valid:
        raise ValueError(f"no slot {slot_id!r}")
    if slot_id in _taken():
        raise ValueError(f"slot {slot_id} is already booked")
    booking_id = f"B{len(BOOKINGS) + 1}"
    BOOKINGS[booking_id] = {
        "booking_id": booking_id,
        "patient": patient,
        "slot_id": slot_id,
        "doctor": doctor["name"],
        "date": f"{day[:4]}-{day[4:6]}-{day[6:]}",
        "time": f"{hour[:2]}:{hour[2:]}",
        "status": "booked",
    }
    return BOOKINGS[booking_id]


@mcp.tool()
def cancel(booking_id: str) -> dict:
    """Cancel a booking; its slot becomes free again."""
    booking = BOOKINGS.get(booking_id)
    if booking is None:
        raise ValueError(f"no booking {booking_id!r}")
    booking["status"] = "cancelled"
    return booking


@mcp.tool()
def get_booking(booking_id: str) -> dict:
    """Look up a booking by its id."""
    if booking_id not in BOOKINGS:
        raise ValueError(f"no booking {booking_id!r}")
    return BOOKINGS[booking_id]


if __name__ == "__main__":
    mcp.run()

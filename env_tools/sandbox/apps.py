"""The sandbox's apps and their tool APIs.

Each tool is a plain function ``fn(world, **arguments) -> JSON-able`` registered with its app,
a docstring (the tool description) and JSON-schema arguments. A tool signals a user-facing
failure (not found, insufficient funds, ...) by raising ``ToolError``; the environment turns
it into an error observation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .world import World

__all__ = ["APPS", "TOOLS", "ToolError", "ToolSpec", "tool_schema"]


class ToolError(Exception):
    """A failure the agent should see and can react to."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    app: str
    fn: Callable[..., Any]
    params: dict[str, tuple[str, str]]
    """argument name -> (JSON type, description); all arguments are required."""
    description: str
    writes: bool


TOOLS: dict[str, ToolSpec] = {}
APPS: dict[str, list[str]] = {}


def tool(app: str, *, writes: bool = False, **params: tuple[str, str]) -> Callable:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        doc = (fn.__doc__ or "").strip()
        TOOLS[fn.__name__] = ToolSpec(fn.__name__, app, fn, params, doc, writes)
        APPS.setdefault(app, []).append(fn.__name__)
        return fn

    return register


def tool_schema(name: str) -> dict[str, Any]:
    """The OpenAI function-tool schema of one tool."""
    spec = TOOLS[name]
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": t, "description": d} for k, (t, d) in spec.params.items()},
                "required": list(spec.params),
            },
        },
    }


def _contact(world: World, contact_id: str) -> dict[str, Any]:
    contact = world.contacts.get(contact_id)
    if contact is None:
        raise ToolError(f"no contact with id {contact_id!r}; use search_contacts to find ids")
    return contact


def _amount(amount: int) -> int:
    if amount <= 0:
        raise ToolError("amount must be a positive integer")
    return amount


# -- contacts -------------------------------------------------------------------------------
@tool("contacts", query=("string", "Name or part of a name"))
def search_contacts(world: World, query: str) -> list[dict[str, Any]]:
    """Find contacts whose name contains the query. Returns id, name and phone."""
    q = query.strip().lower()
    found = [c for c in world.contacts.values() if q and q in c["name"].lower()]
    for c in found:
        world.viewed.add(f"contact:{c['id']}")
    return [{"id": c["id"], "name": c["name"], "phone": c["phone"]} for c in found]


@tool("contacts", contact_id=("string", "Contact id, e.g. c42"))
def get_contact(world: World, contact_id: str) -> dict[str, Any]:
    """Get all details of a contact: name, phone, city and email."""
    contact = _contact(world, contact_id)
    world.viewed.add(f"contact_details:{contact_id}")
    return dict(contact)


@tool("contacts", writes=True, name=("string", "Full name"), phone=("string", "Phone number"))
def add_contact(world: World, name: str, phone: str) -> dict[str, Any]:
    """Save a new contact."""
    if not name.strip():
        raise ToolError("name must not be empty")
    cid = world.new_id("c")
    world.contacts[cid] = {"id": cid, "name": name.strip(), "phone": phone.strip(), "city": "", "email": ""}
    return {"id": cid}


@tool("contacts", writes=True, contact_id=("string", "Contact id"))
def delete_contact(world: World, contact_id: str) -> dict[str, Any]:
    """Delete a contact."""
    _contact(world, contact_id)
    del world.contacts[contact_id]
    return {"deleted": contact_id}


# -- messaging ------------------------------------------------------------------------------
@tool("messaging", writes=True, contact_id=("string", "Recipient contact id"), text=("string", "Message text"))
def send_message(world: World, contact_id: str, text: str) -> dict[str, Any]:
    """Send a text message to a contact."""
    _contact(world, contact_id)
    if not text.strip():
        raise ToolError("text must not be empty")
    mid = world.new_id("m")
    world.messages[mid] = {"id": mid, "contact_id": contact_id, "text": text.strip(), "direction": "out"}
    return {"id": mid}


@tool("messaging", contact_id=("string", "Contact id"))
def list_messages(world: World, contact_id: str) -> list[dict[str, Any]]:
    """List the messages exchanged with a contact."""
    _contact(world, contact_id)
    world.viewed.add(f"messages:{contact_id}")
    return [
        {"id": m["id"], "text": m["text"], "direction": m["direction"]}
        for m in world.messages.values()
        if m["contact_id"] == contact_id
    ]


@tool("messaging", writes=True, message_id=("string", "Message id"))
def delete_message(world: World, message_id: str) -> dict[str, Any]:
    """Delete a message."""
    if message_id not in world.messages:
        raise ToolError(f"no message with id {message_id!r}")
    del world.messages[message_id]
    return {"deleted": message_id}


# -- calendar -------------------------------------------------------------------------------
@tool("calendar", date=("string", "Date, e.g. May 3"))
def list_events(world: World, date: str) -> list[dict[str, Any]]:
    """List the calendar events on a date."""
    world.viewed.add(f"events:{date.strip()}")
    return [
        {"id": e["id"], "title": e["title"], "time": e["time"]}
        for e in sorted(world.events.values(), key=lambda e: e["time"])
        if e["date"] == date.strip()
    ]


@tool(
    "calendar",
    writes=True,
    title=("string", "Event title"),
    date=("string", "Date, e.g. May 3"),
    time=("string", "Time, e.g. 09:00"),
)
def create_event(world: World, title: str, date: str, time: str) -> dict[str, Any]:
    """Create a calendar event."""
    if not title.strip():
        raise ToolError("title must not be empty")
    eid = world.new_id("e")
    world.events[eid] = {"id": eid, "title": title.strip(), "date": date.strip(), "time": time.strip()}
    return {"id": eid}


@tool("calendar", writes=True, event_id=("string", "Event id"))
def cancel_event(world: World, event_id: str) -> dict[str, Any]:
    """Cancel (delete) a calendar event."""
    if event_id not in world.events:
        raise ToolError(f"no event with id {event_id!r}; use list_events to find ids")
    del world.events[event_id]
    return {"cancelled": event_id}


@tool("calendar", writes=True, event_id=("string", "Event id"), date=("string", "New date"))
def move_event(world: World, event_id: str, date: str) -> dict[str, Any]:
    """Move an event to another date, keeping its time."""
    if event_id not in world.events:
        raise ToolError(f"no event with id {event_id!r}; use list_events to find ids")
    world.events[event_id]["date"] = date.strip()
    return {"id": event_id, "date": date.strip()}


# -- flights --------------------------------------------------------------------------------
@tool(
    "flights",
    origin=("string", "Departure city"),
    destination=("string", "Arrival city"),
    date=("string", "Date, e.g. May 3"),
)
def search_flights(world: World, origin: str, destination: str, date: str) -> list[dict[str, Any]]:
    """Search flights on a route and date. Returns id, price and departure time."""
    world.viewed.add(f"flights:{origin.strip()}-{destination.strip()}-{date.strip()}")
    found = world.flights_on(origin.strip(), destination.strip(), date.strip())
    return [{"id": f["id"], "price": f["price"], "depart": f["depart"]} for f in found]


@tool("flights", flight_id=("string", "Flight id, e.g. FL17"))
def get_flight(world: World, flight_id: str) -> dict[str, Any]:
    """Get all details of a flight."""
    flight = world.flights.get(flight_id)
    if flight is None:
        raise ToolError(f"no flight with id {flight_id!r}; use search_flights to find ids")
    world.viewed.add(f"flight:{flight_id}")
    return dict(flight)


@tool("flights", writes=True, flight_id=("string", "Flight id"))
def book_flight(world: World, flight_id: str) -> dict[str, Any]:
    """Book a flight and pay for it from the wallet. Fails if the balance is too low."""
    flight = world.flights.get(flight_id)
    if flight is None:
        raise ToolError(f"no flight with id {flight_id!r}; use search_flights to find ids")
    if world.balance < flight["price"]:
        raise ToolError(f"insufficient funds: balance {world.balance}, price {flight['price']}")
    world.balance -= flight["price"]
    bid = world.new_id("b")
    world.bookings[bid] = {"id": bid, "flight_id": flight_id, "price": flight["price"]}
    tid = world.new_id("t")
    world.transactions[tid] = {"id": tid, "kind": "flight", "contact_id": "", "amount": flight["price"]}
    return {"booking_id": bid, "balance": world.balance}


@tool("flights")
def list_bookings(world: World) -> list[dict[str, Any]]:
    """List my flight bookings with destination, date and price."""
    world.viewed.add("bookings")
    out = []
    for b in world.bookings.values():
        f = world.flights[b["flight_id"]]
        out.append(
            {
                "id": b["id"],
                "flight_id": f["id"],
                "destination": f["destination"],
                "date": f["date"],
                "price": b["price"],
            }
        )
    return out


@tool("flights", writes=True, booking_id=("string", "Booking id"))
def cancel_booking(world: World, booking_id: str) -> dict[str, Any]:
    """Cancel a booking; its price is refunded to the wallet."""
    booking = world.bookings.pop(booking_id, None)
    if booking is None:
        raise ToolError(f"no booking with id {booking_id!r}; use list_bookings to find ids")
    world.balance += booking["price"]
    tid = world.new_id("t")
    world.transactions[tid] = {"id": tid, "kind": "refund", "contact_id": "", "amount": booking["price"]}
    return {"refunded": booking["price"], "balance": world.balance}


# -- payments -------------------------------------------------------------------------------
@tool("payments")
def get_balance(world: World) -> dict[str, Any]:
    """Get the wallet balance in dollars."""
    world.viewed.add("balance")
    return {"balance": world.balance}


@tool("payments", writes=True, contact_id=("string", "Contact id"), amount=("integer", "Dollars"))
def pay(world: World, contact_id: str, amount: int) -> dict[str, Any]:
    """Send money to a contact from the wallet. Fails if the balance is too low."""
    _contact(world, contact_id)
    amount = _amount(amount)
    if world.balance < amount:
        raise ToolError(f"insufficient funds: balance {world.balance}, amount {amount}")
    world.balance -= amount
    tid = world.new_id("t")
    world.transactions[tid] = {"id": tid, "kind": "payment", "contact_id": contact_id, "amount": amount}
    return {"transaction_id": tid, "balance": world.balance}


@tool("payments", writes=True, contact_id=("string", "Contact id"), amount=("integer", "Dollars"))
def request_money(world: World, contact_id: str, amount: int) -> dict[str, Any]:
    """Ask a contact to send you money."""
    _contact(world, contact_id)
    amount = _amount(amount)
    tid = world.new_id("t")
    world.transactions[tid] = {"id": tid, "kind": "request", "contact_id": contact_id, "amount": amount}
    return {"transaction_id": tid}


@tool("payments")
def list_transactions(world: World) -> list[dict[str, Any]]:
    """List past wallet transactions."""
    world.viewed.add("transactions")
    return [dict(t) for t in world.transactions.values()]


# -- profile --------------------------------------------------------------------------------
@tool("profile")
def get_profile(world: World) -> dict[str, Any]:
    """Get my profile: name and home city."""
    world.viewed.add("profile")
    return dict(world.owner)

"""The sandbox's environment profile: entities, their attributes and the operations on them.

Self-questioning explores an environment from this profile; here it is declared once, next to
the apps, and the operations are checked against the registered tools by a test.
"""

from __future__ import annotations

from typing import Any

from .apps import APPS, TOOLS

ENTITIES: dict[str, dict[str, Any]] = {
    "contact": {
        "attributes": ["id", "name", "phone", "city", "email"],
        "operations": ["search_contacts", "get_contact", "add_contact", "delete_contact"],
    },
    "message": {
        "attributes": ["id", "contact_id", "text", "direction"],
        "operations": ["send_message", "list_messages", "delete_message"],
    },
    "event": {
        "attributes": ["id", "title", "date", "time"],
        "operations": ["list_events", "create_event", "cancel_event", "move_event"],
    },
    "flight": {
        "attributes": ["id", "origin", "destination", "date", "price", "airline", "depart"],
        "operations": ["search_flights", "get_flight", "book_flight"],
    },
    "booking": {
        "attributes": ["id", "flight_id", "price"],
        "operations": ["list_bookings", "cancel_booking"],
    },
    "wallet": {
        "attributes": ["balance", "transactions"],
        "operations": ["get_balance", "pay", "request_money", "list_transactions"],
    },
    "profile": {"attributes": ["name", "home_city"], "operations": ["get_profile"]},
}


def environment_profile() -> dict[str, Any]:
    """A JSON-able profile: ``{"apps", "entities", "operations"}``."""
    operations = {
        name: {
            "app": spec.app,
            "description": spec.description,
            "arguments": sorted(spec.params),
            "writes": spec.writes,
        }
        for name, spec in TOOLS.items()
    }
    return {"apps": {app: list(tools) for app, tools in APPS.items()}, "entities": ENTITIES, "operations": operations}

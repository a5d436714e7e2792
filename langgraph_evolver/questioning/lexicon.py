"""Plausible free text for a write's argument that nothing seen can fill: what people would type.

The explorer used to fill such an argument with its own name and a number (``subject 39``, ``resolution 87``,
``name 67``), so a synthesized request read "close ticket 103 with resolution resolution 87" and a model learned
to copy a two-token label, where people write "close ticket 103: 'Reset link resent'". A value is drawn here by
what the argument's name says it holds (a person, a place, a title, a short note, a column label, an e-mail, ...),
from small pools of everyday English written for no server in particular; an argument whose kind is not known
(``sku``, ``token``) keeps the old label. A value already seen in the environment or already used by this
exploration is not drawn again (a create tool refuses a name that exists), so a pool that runs out falls back
to the label too.
"""

from __future__ import annotations

import random
from collections.abc import Collection

from .profile import snake

__all__ = ["plausible_text"]

_PEOPLE = ("Lily Park", "Omar Said", "Nina Brooks", "Leo Martins", "Ava Costa", "Sam Rivera", "Mia Jensen",
           "Noah Klein", "Zoe Adler", "Ivan Petrov")  # fmt: skip
_KINDS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    # (words an argument's name ends with, values)
    (("email", "mail"), tuple(f"{p.lower().replace(' ', '.')}@example.com" for p in _PEOPLE)),
    (("phone", "mobile", "tel", "telephone"), ("+1 555 0142", "+44 20 7946 0321", "+33 1 84 88 21 07", "555-0199")),
    (("url", "link", "website", "homepage"), ("https://example.com/docs", "https://example.org/report",
                                              "https://example.net/form")),  # fmt: skip
    (("person", "patient", "customer", "client", "guest", "recipient", "owner", "author", "contact", "attendee",
      "passenger", "driver", "student", "employee", "requester", "sender", "buyer", "tenant", "visitor",
      "fullname", "full_name", "person_name", "customer_name", "guest_name", "contact_name", "user_name"), _PEOPLE),
    (("city", "town", "origin", "destination", "location", "place", "venue"),
     ("Porto", "Lyon", "Oslo", "Austin", "Kyoto", "Dublin", "Turin", "Quebec")),
    (("address", "street"), ("12 Rose Lane", "4 Harbour Road", "88 Mill Street", "7 Park Avenue", "31 Elm Court")),
    (("color", "colour"), ("blue", "green", "red", "yellow", "black", "white")),
    (("text", "comment", "note", "notes", "message", "body", "description", "resolution", "reason", "content",
      "details", "summary", "feedback", "reply", "answer", "remark", "memo", "instructions"),
     ("Called the customer back", "Waiting for the new part", "Fixed in the latest update", "Moved to next week",
      "Sent the invoice again", "Checked and confirmed", "Needs a second review", "Customer will reply by Friday",
      "Left a voicemail", "Replaced the cable")),
    (("problem", "issue", "fault", "symptom", "complaint", "defect"),
     ("Makes a grinding noise", "Stopped working this morning", "Needs a general check-up", "Slow leak",
      "Loose handle", "Squeaks when in use", "Warning light came on", "Cracked casing")),
    (("header", "headers", "column", "columns", "field", "fields", "category", "categories", "tag", "tags",
      "label", "labels", "department", "team"),
     ("Notes", "Total", "Owner", "Due date", "Region", "Cost", "Priority", "Supplier", "Travel", "Marketing")),
    (("name", "title", "subject", "topic", "heading", "caption", "project", "event", "item", "product", "headline"),
     ("Quarterly report", "Team offsite", "Spring sale", "Kitchen supplies", "Office move", "Product launch",
      "Training day", "Printer paper", "Garden tools", "Winter coats")),
    (("value", "values", "amount_text"), ("42", "18.5", "Done", "Paid", "120", "Pending", "7", "Approved")),
)  # fmt: skip


def _pool(arg: str) -> tuple[str, ...]:
    """The values for ``arg`` by the last word of its name (``home_city`` -> a city; ``customer_email`` -> an
    e-mail), else by the whole name (``full_name``); empty when its kind is not known."""
    name = snake(arg).lower()
    last = name.replace("-", "_").rsplit("_", 1)[-1]
    for words, values in _KINDS:
        if name in words or last in words:
            return values
    return ()


def plausible_text(arg: str, rng: random.Random, taken: Collection[str] = ()) -> str | None:
    """A value people would give ``arg``, not in ``taken`` (values seen or already used), or None when its kind
    is not known or its pool is spent.

    Example:
        >>> rng = random.Random(0)
        >>> plausible_text("patient", rng) in _PEOPLE, plausible_text("resolution", rng) is not None
        (True, True)
        >>> plausible_text("headers", rng, taken={*_KINDS[9][1][:-1]})
        'Marketing'
        >>> plausible_text("sku", rng) is None
        True
    """
    values = [v for v in _pool(arg) if v not in taken]
    return rng.choice(values) if values else None

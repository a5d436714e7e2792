"""The sandbox world: a seeded population of contacts, messages, events, flights and money.

Everything is generated from one integer seed (plus a few explicit overrides a task may pin,
such as the wallet balance), so a task's world is rebuilt exactly on every reset. Entity names
come from small fixed pools: held-out tasks are new *combinations* of known names with fresh
ids, numbers and prices, never unseen names. Ids are short (``c42``, ``FL17``) so that a small
model can copy them out of tool observations.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

FIRST_NAMES = (
    "Ava", "Ben", "Cleo", "Dan", "Eve", "Finn", "Gus", "Hana", "Ivy", "Jay",
    "Kai", "Lea", "Max", "Nia", "Omar", "Pia", "Raj", "Sam", "Tia", "Zoe",
)  # fmt: skip
CITIES = ("Paris", "Rome", "Oslo", "Lima", "Cairo", "Tokyo", "Delhi", "Quito", "Accra", "Seoul")
EVENT_TITLES = (
    "Dentist", "Gym", "Lunch", "Yoga", "Review", "Piano", "Dinner", "Haircut", "Standup", "Soccer",
)  # fmt: skip
DATES = tuple(f"May {d}" for d in range(1, 10))
TIMES = tuple(f"{h:02d}:00" for h in range(8, 19))
MESSAGE_TEXTS = (
    "running late", "see you soon", "call me", "thanks", "happy birthday", "on my way",
    "good luck", "see you at lunch",
)  # fmt: skip
AIRLINES = ("Aero", "Sky", "Jet")

N_CONTACTS = 6
N_EVENTS = 6
N_DESTINATIONS = 3
N_FLIGHT_DATES = 2
N_FLIGHTS_PER_ROUTE = 3
N_BOOKINGS = 2
N_INBOX = 4

COLLECTIONS = ("contacts", "messages", "events", "flights", "bookings", "transactions")


def _unique_ids(rng: random.Random, prefix: str, n: int, low: int = 10, high: int = 99) -> list[str]:
    return [f"{prefix}{k}" for k in rng.sample(range(low, high + 1), n)]


@dataclass(slots=True)
class World:
    """The mutable state of one sandbox instance."""

    owner: dict[str, Any]
    balance: int
    contacts: dict[str, dict[str, Any]]
    messages: dict[str, dict[str, Any]]
    events: dict[str, dict[str, Any]]
    flights: dict[str, dict[str, Any]]
    bookings: dict[str, dict[str, Any]]
    transactions: dict[str, dict[str, Any]]
    viewed: set[str] = field(default_factory=set)
    """Resources the agent has looked at (``contact:c42``, ``balance``, ...): the audit log."""
    answer: str | None = None
    """The agent's final text answer, once given."""
    next_id: int = 100
    """New records get ids from 100 up, so they never collide with generated ones (10-99)."""

    @classmethod
    def generate(cls, seed: int, *, balance: int | None = None) -> World:
        rng = random.Random(seed)
        home = rng.choice(CITIES)
        owner = {"name": "Me", "home_city": home}
        names = rng.sample(FIRST_NAMES, N_CONTACTS)
        contacts = {}
        for cid, name in zip(_unique_ids(rng, "c", N_CONTACTS), names, strict=True):
            contacts[cid] = {
                "id": cid,
                "name": name,
                "phone": f"555-{rng.randint(100, 999)}",
                "city": rng.choice(CITIES),
                "email": f"{name.lower()}@mail.com",
            }
        cids = list(contacts)
        messages = {}
        for mid in _unique_ids(rng, "m", N_INBOX):
            messages[mid] = {
                "id": mid,
                "contact_id": rng.choice(cids),
                "text": rng.choice(MESSAGE_TEXTS),
                "direction": "in",
            }
        events = {}
        titles = rng.sample(EVENT_TITLES, N_EVENTS)
        for eid, title in zip(_unique_ids(rng, "e", N_EVENTS), titles, strict=True):
            events[eid] = {"id": eid, "title": title, "date": rng.choice(DATES), "time": rng.choice(TIMES)}
        flights = {}
        destinations = rng.sample([c for c in CITIES if c != home], N_DESTINATIONS)
        fids = iter(_unique_ids(rng, "FL", N_DESTINATIONS * N_FLIGHT_DATES * N_FLIGHTS_PER_ROUTE))
        for dest in destinations:
            for date in rng.sample(DATES, N_FLIGHT_DATES):
                prices = rng.sample(range(120, 900, 10), N_FLIGHTS_PER_ROUTE)
                for price in prices:
                    fid = next(fids)
                    flights[fid] = {
                        "id": fid,
                        "origin": home,
                        "destination": dest,
                        "date": date,
                        "price": price,
                        "airline": rng.choice(AIRLINES),
                        "depart": rng.choice(TIMES),
                    }
        bookings = {}
        booked = rng.sample(list(flights), N_BOOKINGS)
        for bid, fid in zip(_unique_ids(rng, "b", N_BOOKINGS), booked, strict=True):
            bookings[bid] = {"id": bid, "flight_id": fid, "price": flights[fid]["price"]}
        transactions = {}
        for tid in _unique_ids(rng, "t", 3):
            transactions[tid] = {
                "id": tid,
                "kind": rng.choice(("payment", "request")),
                "contact_id": rng.choice(cids),
                "amount": rng.randrange(10, 200, 5),
            }
        if balance is None:
            balance = rng.randrange(200, 1500, 10)
        return cls(
            owner=owner,
            balance=balance,
            contacts=contacts,
            messages=messages,
            events=events,
            flights=flights,
            bookings=bookings,
            transactions=transactions,
        )

    def new_id(self, prefix: str) -> str:
        self.next_id += 1
        return f"{prefix}{self.next_id}"

    def clone(self) -> World:
        """An independent copy. Records hold only scalars (``test_sandbox`` checks), so copying each
        record dict is a full copy, about 10x faster than ``copy.deepcopy`` (a reset clones twice)."""
        records = {name: {rid: dict(r) for rid, r in getattr(self, name).items()} for name in COLLECTIONS}
        return World(owner=dict(self.owner), balance=self.balance, viewed=set(self.viewed), answer=self.answer,
                     next_id=self.next_id, **records)  # fmt: skip

    # -- queries used by the task generators --------------------------------------------------
    def contact_by_name(self, name: str) -> dict[str, Any] | None:
        return next((c for c in self.contacts.values() if c["name"] == name), None)

    def routes(self) -> list[tuple[str, str, str]]:
        """(origin, destination, date) of every route with flights, in a stable order."""
        seen: dict[tuple[str, str, str], None] = {}
        for f in self.flights.values():
            seen[(f["origin"], f["destination"], f["date"])] = None
        return list(seen)

    def flights_on(self, origin: str, destination: str, date: str) -> list[dict[str, Any]]:
        return [
            f
            for f in self.flights.values()
            if f["origin"] == origin and f["destination"] == destination and f["date"] == date
        ]


def _content(record: dict[str, Any]) -> tuple:
    return tuple(sorted((k, v) for k, v in record.items() if k != "id"))


def diff_worlds(before: World, after: World) -> set[tuple]:
    """The set of changes from ``before`` to ``after``, comparable across instances.

    Added records are compared by content (their new ids depend on call order), removed and
    modified records by id; the balance is one more field.
    """
    changes: set[tuple] = set()
    for name in COLLECTIONS:
        old, new = getattr(before, name), getattr(after, name)
        for rid in old.keys() - new.keys():
            changes.add(("removed", name, rid))
        for rid in new.keys() - old.keys():
            changes.add(("added", name, _content(new[rid])))
        for rid in old.keys() & new.keys():
            for key, value in new[rid].items():
                if old[rid].get(key) != value:
                    changes.add(("modified", name, rid, key, value))
    if before.balance != after.balance:
        changes.add(("modified", "wallet", "balance", after.balance))
    return changes

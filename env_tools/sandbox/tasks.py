"""Task generators for the sandbox: 15 templates over 3 difficulty levels.

Level 1: one lookup or one action, arguments copied from the request.
Level 2: two calls, the second needs an id copied out of the first observation, or a decision
(pick the cheapest).
Level 3: four calls with a precondition or a branch (check the balance before booking or
paying, book then tell someone the flight id, cancel then pay the refund on).

``generate_tasks(split, n)`` is an endless, deterministic stream per split: the train and test
streams draw worlds from disjoint seed ranges, so held-out tasks are new combinations of the
same names, cities and titles with fresh ids and numbers. ``seed_tasks(split)`` is the fixed
prefix used as the seed task set (180 train, 75 test). The ``validation`` split is carved from the
training stream far past anything trained on (75 tasks from index 200,000, ids
``sandbox-train-2000xx``): choose settings on it, never on ``test``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from langgraph_evolver.types import Task, ToolCall

from .world import DATES, EVENT_TITLES, FIRST_NAMES, MESSAGE_TEXTS, TIMES, World

__all__ = ["LEVELS", "SPLIT_SIZES", "TEMPLATES", "VALIDATION_START", "generate_tasks", "seed_tasks"]

SPLIT_BASE_SEED = {"train": 0, "test": 50_000_000}
SPLIT_SIZES = {"train": 180, "validation": 75, "test": 75}
VALIDATION_START = 200_000
"""The validation split: training-stream tasks from this index on (the warm start and RL use far fewer)."""
CANT_COME = "I can't come"
PAY_LATER = "pay you later"

Spec = tuple[dict[str, Any], str, list[ToolCall], str | None, list[str]]
"""(env_params overrides, query, reference calls, expected answer, apps shown)."""


def _call(tool_name: str, /, **arguments: Any) -> ToolCall:
    return ToolCall(name=tool_name, arguments=arguments)


def _route(rng: random.Random, world: World) -> tuple[str, str, str, dict[str, Any]]:
    origin, dest, date = rng.choice(world.routes())
    cheapest = min(world.flights_on(origin, dest, date), key=lambda f: f["price"])
    return origin, dest, date, cheapest


def contact_phone(rng: random.Random, world: World) -> Spec:
    c = rng.choice(list(world.contacts.values()))
    return (
        {},
        f"What is {c['name']}'s phone number?",
        [_call("search_contacts", query=c["name"])],
        c["phone"],
        ["contacts"],
    )


def wallet_balance(rng: random.Random, world: World) -> Spec:
    return {}, "How much money is in my wallet?", [_call("get_balance")], str(world.balance), ["payments"]


def create_event(rng: random.Random, world: World) -> Spec:
    title, date, time = rng.choice(EVENT_TITLES), rng.choice(DATES), rng.choice(TIMES)
    query = f"Add {title} to my calendar on {date} at {time}."
    return {}, query, [_call("create_event", title=title, date=date, time=time)], None, ["calendar"]


def add_contact(rng: random.Random, world: World) -> Spec:
    known = {c["name"] for c in world.contacts.values()}
    name = rng.choice([n for n in FIRST_NAMES if n not in known])
    phone = f"555-{rng.randint(100, 999)}"
    query = f"Save {name} as a contact with phone {phone}."
    return {}, query, [_call("add_contact", name=name, phone=phone)], None, ["contacts"]


def count_events(rng: random.Random, world: World) -> Spec:
    busy = sorted({e["date"] for e in world.events.values()})
    date = rng.choice(busy) if rng.random() < 0.7 else rng.choice(DATES)
    count = sum(e["date"] == date for e in world.events.values())
    return {}, f"How many events do I have on {date}?", [_call("list_events", date=date)], str(count), ["calendar"]


def message_contact(rng: random.Random, world: World) -> Spec:
    c, text = rng.choice(list(world.contacts.values())), rng.choice(MESSAGE_TEXTS)
    calls = [_call("search_contacts", query=c["name"]), _call("send_message", contact_id=c["id"], text=text)]
    return {}, f"Send {c['name']} the message: {text}", calls, None, ["contacts", "messaging"]


def cancel_event(rng: random.Random, world: World) -> Spec:
    e = rng.choice(list(world.events.values()))
    calls = [_call("list_events", date=e["date"]), _call("cancel_event", event_id=e["id"])]
    return {}, f"Cancel my {e['title']} on {e['date']}.", calls, None, ["calendar"]


def cheapest_flight(rng: random.Random, world: World) -> Spec:
    o, d, date, cheapest = _route(rng, world)
    query = f"How much is the cheapest flight from {o} to {d} on {date}?"
    calls = [_call("search_flights", origin=o, destination=d, date=date)]
    return {}, query, calls, str(cheapest["price"]), ["flights"]


def pay_contact(rng: random.Random, world: World) -> Spec:
    c, amount = rng.choice(list(world.contacts.values())), rng.randrange(10, 150, 5)
    calls = [_call("search_contacts", query=c["name"]), _call("pay", contact_id=c["id"], amount=amount)]
    return {}, f"Pay {c['name']} {amount} dollars.", calls, None, ["contacts", "payments"]


def contact_city(rng: random.Random, world: World) -> Spec:
    c = rng.choice(list(world.contacts.values()))
    calls = [_call("search_contacts", query=c["name"]), _call("get_contact", contact_id=c["id"])]
    return {}, f"Which city does {c['name']} live in?", calls, c["city"], ["contacts"]


def book_if_affordable(rng: random.Random, world: World) -> Spec:
    o, d, date, cheapest = _route(rng, world)
    c = rng.choice(list(world.contacts.values()))
    affordable = rng.random() < 0.5
    price = cheapest["price"]
    balance = price + rng.randrange(0, 300, 10) if affordable else max(0, price - rng.randrange(10, 110, 10))
    query = (
        f"Book the cheapest flight from {o} to {d} on {date} if I can afford it; "
        f"otherwise send {c['name']} the message: {CANT_COME}"
    )
    calls = [_call("get_balance"), _call("search_flights", origin=o, destination=d, date=date)]
    if affordable:
        calls.append(_call("book_flight", flight_id=cheapest["id"]))
    else:
        calls += [_call("search_contacts", query=c["name"]), _call("send_message", contact_id=c["id"], text=CANT_COME)]
    return {"balance": balance}, query, calls, None, ["payments", "flights", "contacts", "messaging"]


def book_and_tell(rng: random.Random, world: World) -> Spec:
    o, d, date, cheapest = _route(rng, world)
    c = rng.choice(list(world.contacts.values()))
    query = f"Book the cheapest flight from {o} to {d} on {date} and send {c['name']} its flight id."
    calls = [
        _call("search_flights", origin=o, destination=d, date=date),
        _call("book_flight", flight_id=cheapest["id"]),
        _call("search_contacts", query=c["name"]),
        _call("send_message", contact_id=c["id"], text=cheapest["id"]),
    ]
    balance = cheapest["price"] + rng.randrange(100, 600, 10)
    return {"balance": balance}, query, calls, None, ["flights", "contacts", "messaging"]


def refund_and_pay(rng: random.Random, world: World) -> Spec:
    b = rng.choice(list(world.bookings.values()))
    f = world.flights[b["flight_id"]]
    c = rng.choice(list(world.contacts.values()))
    query = f"Cancel my {f['date']} booking to {f['destination']} and pay {c['name']} the refunded amount."
    calls = [
        _call("list_bookings"),
        _call("cancel_booking", booking_id=b["id"]),
        _call("search_contacts", query=c["name"]),
        _call("pay", contact_id=c["id"], amount=b["price"]),
    ]
    return {}, query, calls, None, ["flights", "contacts", "payments"]


def move_and_tell(rng: random.Random, world: World) -> Spec:
    e = rng.choice(list(world.events.values()))
    new_date = rng.choice([d for d in DATES if d != e["date"]])
    c = rng.choice(list(world.contacts.values()))
    text = f"moved to {new_date}"
    query = f"Move my {e['title']} from {e['date']} to {new_date} and send {c['name']} the message: {text}"
    calls = [
        _call("list_events", date=e["date"]),
        _call("move_event", event_id=e["id"], date=new_date),
        _call("search_contacts", query=c["name"]),
        _call("send_message", contact_id=c["id"], text=text),
    ]
    return {}, query, calls, None, ["calendar", "contacts", "messaging"]


def pay_or_defer(rng: random.Random, world: World) -> Spec:
    c, amount = rng.choice(list(world.contacts.values())), rng.randrange(100, 600, 10)
    affordable = rng.random() < 0.5
    balance = amount + rng.randrange(0, 300, 10) if affordable else amount - rng.randrange(10, 100, 10)
    query = (
        f"Pay {c['name']} {amount} dollars if my balance covers it; if not, send {c['name']} the message: {PAY_LATER}"
    )
    calls = [_call("get_balance"), _call("search_contacts", query=c["name"])]
    if affordable:
        calls.append(_call("pay", contact_id=c["id"], amount=amount))
    else:
        calls.append(_call("send_message", contact_id=c["id"], text=PAY_LATER))
    return {"balance": balance}, query, calls, None, ["payments", "contacts", "messaging"]


TEMPLATES: dict[str, tuple[int, Callable[[random.Random, World], Spec]]] = {
    "contact_phone": (1, contact_phone),
    "wallet_balance": (1, wallet_balance),
    "create_event": (1, create_event),
    "add_contact": (1, add_contact),
    "count_events": (1, count_events),
    "message_contact": (2, message_contact),
    "cancel_event": (2, cancel_event),
    "cheapest_flight": (2, cheapest_flight),
    "pay_contact": (2, pay_contact),
    "contact_city": (2, contact_city),
    "book_if_affordable": (3, book_if_affordable),
    "book_and_tell": (3, book_and_tell),
    "refund_and_pay": (3, refund_and_pay),
    "move_and_tell": (3, move_and_tell),
    "pay_or_defer": (3, pay_or_defer),
}
LEVELS = (1, 2, 3)


def make_task(split: str, index: int, template: str | None = None) -> Task:
    """The ``index``-th task of ``split`` (deterministic)."""
    if split not in SPLIT_BASE_SEED:
        raise ValueError(f"unknown split {split!r}; use one of {sorted(SPLIT_BASE_SEED)}")
    names = list(TEMPLATES)
    template = template or names[index % len(names)]
    level, build = TEMPLATES[template]
    seed = SPLIT_BASE_SEED[split] + index
    rng = random.Random(f"{seed}:{template}")
    world = World.generate(seed)
    overrides, query, calls, answer, apps = build(rng, world)
    return Task(
        id=f"sandbox-{split}-{index:05d}",
        query=query,
        env="sandbox",
        env_params={"seed": seed, **overrides},
        reference_solution=tuple(calls),
        source="seed",
        metadata={"level": level, "template": template, "answer": answer, "apps": apps, "split": split},
    )


def generate_tasks(split: str, n: int, *, start: int = 0) -> list[Task]:
    """``n`` tasks of ``split`` starting at ``start``, cycling through the templates."""
    if split == "validation":
        return [make_task("train", i) for i in range(VALIDATION_START + start, VALIDATION_START + start + n)]
    return [make_task(split, i) for i in range(start, start + n)]


def seed_tasks(split: str) -> list[Task]:
    """The fixed seed task set of a split."""
    return generate_tasks(split, SPLIT_SIZES[split])

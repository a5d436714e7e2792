"""Self-questioning on a booking domain whose write tools need ids that only a read tool reveals.

``get_customer`` is the only way to learn a booking's id (``BK-...``, never guessable from the
schema), the write tools take nested arguments (a list of passenger objects, a baggage object,
an optional reason), and the flight codes come back under ``code`` inside ``flights``. The schema
explorer must read the ids out of the results and use them, so tasks that change state appear.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from langchain_core.tools import ToolException, tool
from pydantic import BaseModel

from env_tools.langchain_tools import ToolsEnvironment, register_tools_environment
from langgraph_evolver.questioning import TaskStore, check_feasibility, exploration_task, explore, synthesize_tasks
from langgraph_evolver.types import Task
from tests.test_experience_pool import HashEmbeddings

ROOT = Path(__file__).resolve().parents[1]
CITIES = ("Lisbon", "Oslo", "Quito", "Nairobi")


@dataclass
class Agency:
    customers: dict[str, dict] = field(default_factory=dict)
    bookings: dict[str, dict] = field(default_factory=dict)
    flights: dict[str, dict] = field(default_factory=dict)


def _code(rng: random.Random, prefix: str) -> str:
    return prefix + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(5))


def make_agency(seed: int) -> Agency:
    rng = random.Random(seed)
    agency = Agency()
    for city in CITIES:
        code = _code(rng, "FL")
        agency.flights[code] = {"code": code, "destination": city, "seats_left": rng.randint(2, 9)}
    for name in rng.sample(["Ana Ruiz", "Bo Chen", "Cy Okafor", "Dee Lund"], 3):
        cid = _code(rng, "cu-")
        agency.customers[cid] = {"name": name, "email": name.split()[0].lower() + "@mail.test"}
        for _ in range(rng.randint(1, 2)):
            bid = _code(rng, "BK-")
            agency.bookings[bid] = {"customer_id": cid, "flight_code": rng.choice(list(agency.flights)),
                                    "passengers": [name], "bags": 0, "status": "confirmed"}  # fmt: skip
    return agency


class Passenger(BaseModel):
    first_name: str
    last_name: str


class Baggage(BaseModel):
    count: int
    kind: Literal["cabin", "checked"]


def agency_tools(task: Task) -> tuple[Agency, list]:
    agency = make_agency(int(task.env_params.get("seed", 0)))

    def booking(booking_id: str) -> dict:
        if booking_id not in agency.bookings:
            raise ToolException(f"no booking {booking_id!r}")
        return agency.bookings[booking_id]

    @tool
    def list_customers() -> list[dict]:
        """The agency's customers: their customer ids and names."""
        return [{"customer_id": cid, "name": c["name"]} for cid, c in agency.customers.items()]

    @tool
    def get_customer(customer_id: str) -> dict:
        """A customer's details and their reservations (each with its id)."""
        if customer_id not in agency.customers:
            raise ToolException(f"no customer {customer_id!r}")
        mine = [{"id": bid, "flight_code": b["flight_code"], "status": b["status"]}
                for bid, b in agency.bookings.items() if b["customer_id"] == customer_id]  # fmt: skip
        return {**agency.customers[customer_id], "reservations": mine}

    @tool
    def search_flights(destination: Literal["Lisbon", "Oslo", "Quito", "Nairobi"]) -> dict:
        """Flights to a destination, with their codes and seats left."""
        return {"flights": [f for f in agency.flights.values() if f["destination"] == destination]}

    @tool
    def book_flight(customer_id: str, flight_code: str, passengers: list[Passenger]) -> dict:
        """Book a flight for a customer's passengers."""
        if customer_id not in agency.customers or flight_code not in agency.flights:
            raise ToolException("unknown customer or flight")
        bid = f"BK-N{len(agency.bookings)}"
        names = [f"{p.first_name} {p.last_name}" for p in passengers]
        agency.bookings[bid] = {"customer_id": customer_id, "flight_code": flight_code, "passengers": names,
                                "bags": 0, "status": "confirmed"}  # fmt: skip
        return {"booking": {"id": bid}}

    @tool
    def add_baggage(booking_id: str, baggage: Baggage) -> str:
        """Add bags to a booking."""
        booking(booking_id)["bags"] += baggage.count
        return "ok"

    @tool
    def cancel_reservation(booking_id: str, reason: str | None = None) -> str:
        """Cancel a booking."""
        b = booking(booking_id)
        if b["status"] == "cancelled":
            raise ToolException("already cancelled")
        b["status"] = "cancelled"
        return "cancelled"

    @tool
    def change_flight(booking_id: str, new_flight_code: str) -> str:
        """Move a booking to another flight."""
        if new_flight_code not in agency.flights:
            raise ToolException(f"no flight {new_flight_code!r}")
        booking(booking_id)["flight_code"] = new_flight_code
        return "changed"

    tools = [list_customers, get_customer, search_flights, book_flight, add_baggage, cancel_reservation, change_flight]
    return agency, tools


TRAIN = [Task(id=f"agency-{i}", env="agency", query=f"Help customer {i}.", env_params={"seed": i}) for i in range(6)]


def agency_environment(**_: object) -> ToolsEnvironment:
    return ToolsEnvironment(agency_tools, tasks={"train": TRAIN, "test": []}, checker=lambda *_: 1.0)


def register_agency_environment() -> None:
    """``--setup tests/test_questioning_ids.py:register_agency_environment`` for the CLI."""
    register_tools_environment("agency", agency_tools, tasks={"train": TRAIN, "test": []}, checker=lambda *_: 1.0)


def agency_factory(task: Task) -> ToolsEnvironment:
    return agency_environment()


def test_explorer_reads_ids_out_of_results_and_fills_nested_arguments():
    task = exploration_task(TRAIN[1], env="agency", seed=3)
    a = explore(agency_factory(task), task, seed=3)
    assert a == explore(agency_factory(task), task, seed=3)  # deterministic for a seed
    world = make_agency(1)
    calls = [(s.action.tool_calls[0], s.observations[0]) for s in a.steps]
    written = [(c, o) for c, o in calls if c.name in ("add_baggage", "cancel_reservation", "change_flight")]
    ok = [c for c, o in written if not o.is_error]
    assert ok, [(c.name, c.arguments, o.content) for c, o in written]
    assert all(c.arguments["booking_id"] in world.bookings or c.arguments["booking_id"].startswith("BK-N") for c in ok)
    nested = [c for c, o in calls if c.name in ("add_baggage", "book_flight") and not o.is_error]
    assert nested and all(isinstance(c.arguments.get("baggage", c.arguments.get("passengers")), dict | list)
                          for c in nested)  # fmt: skip


def test_pipeline_keeps_state_changing_tasks_and_reports_their_share():
    tasks, report = synthesize_tasks(
        "agency", 12, env_factory=agency_factory, embeddings=HashEmbeddings(), progress=False, max_explorations=12
    )
    assert report.kept == len(tasks) == 12
    changing = [t for t in tasks if t.metadata["feasibility"]["state_changed"]]
    assert changing and report.state_changing == round(len(changing) / len(tasks), 3) > 0
    assert report.named == round(sum("resolves" in t.metadata for t in tasks) / len(tasks), 3)
    writes = {"book_flight", "add_baggage", "cancel_reservation", "change_flight"}
    assert any(c.name in writes for t in changing for c in t.reference_solution)
    for task in changing[:3]:  # a fresh instance replays each to a changed state
        reason, info = check_feasibility(task, agency_factory)
        assert reason is None and info["state_changed"], (task.query, reason)


def test_the_pipeline_skips_what_the_store_already_holds(tmp_path):
    options = {"env_factory": agency_factory, "embeddings": HashEmbeddings(), "progress": False}
    first, _ = synthesize_tasks("agency", 6, **options)
    with TaskStore(tmp_path / "t.sqlite") as store:
        store.add_many(first)
        again, report = synthesize_tasks("agency", 6, store=store, **options)
        assert report.kept == 6 and not {t.id for t in again} & {t.id for t in first}
        assert report.filters.reasons.get("duplicate of stored", 0) >= 1
        assert store.add_many(again) == 6 and len(store) == 12


def _cli(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "langgraph_evolver.questioning", "--no-progress", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-1500:] + out.stderr[-1500:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_cli_summary_matches_the_store_run_after_run(tmp_path):
    setup = ["--setup", f"{ROOT / 'tests' / 'test_questioning_ids.py'}:register_agency_environment"]
    args = [*setup, "--env", "agency", "--n", "5", "--out", str(tmp_path / "a.sqlite")]
    first = _cli(*args)
    assert first["kept"] == first["stored"] == 5 and first["dropped_at_store"] == {}
    assert first["state_changing"] > 0
    second = _cli(*args)  # the same seed again: it must find 5 tasks the store does not hold yet
    assert second["kept"] == second["stored"] == 5 and second["in_store"] == 10
    assert second["filters"]["reasons"].get("duplicate of stored", 0) >= 1
    with TaskStore(tmp_path / "a.sqlite") as store:
        assert len(store) == 10

"""An animal shelter as an MCP server (FastMCP, stdio): animals and their kennels, vaccinations, holds, fosters,
the people who apply to adopt, and adoption applications.

Style under test, unlike the other servers here: written the way a web developer would write a small JSON API.
Integer ids (animal 1042, person 204, application 5008), camelCase argument and field names (``animalId``,
``applicantEmail``, ``intakeDate``), a person looked up by email (``getPerson(email)``) while applications refer
to the applicant by integer ``applicantId``, bare ``list[dict]`` results (``searchAnimals``, ``searchPeople``,
``listApplications``, ``recordVaccination``), a search with optional filters and a ``limit`` (default 10),
ISO date strings, free-text ``str`` filters checked by hand (no enums in the schema) and domain rules raised as
``ValueError``: an adopted animal takes no application, hold, vaccination or kennel move; an animal on hold for
one person cannot be adopted by another; approving an application marks the animal adopted, frees its kennel and
rejects the other pending applications for it; a kennel holds one animal of its block's species (D dogs, C cats,
S rabbits). Fixed data, so every run gives the same answers; ``reset`` restores the opening state (hidden from
the agent by the evaluation harness). The held-out tasks beside it (``shelter_tasks.jsonl``) were written by hand
before any model was run on this server: never train on them.

Run:
    python examples/mcp_servers/shelter.py
"""

from __future__ import annotations

import copy
import datetime as dt

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("shelter")

TODAY = "2026-05-14"
SPECIES = ("dog", "cat", "rabbit")
STATUSES = ("available", "on_hold", "adopted", "in_foster")
APP_STATUSES = ("pending", "approved", "rejected")
VACCINES = {"dog": ("rabies", "DHPP", "bordetella", "leptospirosis"), "cat": ("rabies", "FVRCP", "FeLV"),
            "rabbit": ("RHDV2", "myxomatosis")}  # fmt: skip
KENNELS = {"D": "dog", "C": "cat", "S": "rabbit"}
KENNEL_IDS = [f"D{i}" for i in range(1, 9)] + [f"C{i}" for i in range(1, 7)] + [f"S{i}" for i in range(1, 4)]

PEOPLE = {  # personId: name, email, phone, approved foster home
    201: {"name": "Hannah Brooks", "email": "hannah.brooks@gmail.com", "phone": "555-0301", "fosterHome": False},
    202: {"name": "Marcus Lee", "email": "marcus.lee@outlook.com", "phone": "555-0302", "fosterHome": False},
    203: {"name": "Priya Nair", "email": "priya.nair@yahoo.com", "phone": "555-0303", "fosterHome": True},
    204: {"name": "Tom Okafor", "email": "tokafor@gmail.com", "phone": "555-0304", "fosterHome": False},
    205: {"name": "Elena Garcia", "email": "elena.garcia@protonmail.com", "phone": "555-0305", "fosterHome": False},
    206: {"name": "Sam Whitfield", "email": "sam.whitfield@gmail.com", "phone": "555-0306", "fosterHome": True},
    207: {"name": "Julia Novak", "email": "jnovak@fastmail.com", "phone": "555-0307", "fosterHome": False},
    208: {"name": "Derek Chang", "email": "derek.chang@gmail.com", "phone": "555-0308", "fosterHome": False},
}  # fmt: skip
_ANIMALS = [  # id, name, species, breed, sex, age, intake, status, kennel, person (hold/foster/adopter), date
    (1029, "Coco",    "cat",    "Persian",              "F", 6, "2026-01-14", "adopted",   None, 205, "2026-02-27"),
    (1030, "Buster",  "dog",    "Cocker Spaniel",       "M", 4, "2026-01-19", "adopted",   None, 203, "2026-03-01"),
    (1031, "Biscuit", "dog",    "Beagle mix",           "M", 3, "2026-02-10", "available", "D1", None, None),
    (1032, "Luna",    "cat",    "Domestic Shorthair",   "F", 2, "2026-02-18", "available", "C1", None, None),
    (1033, "Max",     "dog",    "German Shepherd",      "M", 6, "2026-02-14", "on_hold",   "D2", 202, "2026-05-17"),
    (1034, "Pepper",  "rabbit", "Holland Lop",          "F", 1, "2026-03-05", "available", "S1", None, None),
    (1035, "Shadow",  "cat",    "Bombay",               "M", 4, "2026-03-09", "adopted",   None, 207, "2026-04-05"),
    (1036, "Daisy",   "dog",    "Labrador Retriever",   "F", 1, "2026-03-12", "available", "D3", None, None),
    (1037, "Milo",    "cat",    "Maine Coon",           "M", 5, "2026-03-15", "in_foster", None, 203, None),
    (1038, "Rosie",   "dog",    "Pit Bull Terrier mix", "F", 4, "2026-03-20", "available", "D4", None, None),
    (1039, "Oliver",  "cat",    "Siamese",              "M", 8, "2026-03-28", "available", "C2", None, None),
    (1040, "Bella",   "dog",    "Border Collie",        "F", 2, "2026-04-02", "adopted",   None, 208, "2026-04-25"),
    (1041, "Clover",  "rabbit", "Netherland Dwarf",     "M", 2, "2026-04-06", "available", "S2", None, None),
    (1042, "Ziggy",   "cat",    "Domestic Shorthair",   "M", 1, "2026-04-11", "available", "C3", None, None),
    (1043, "Duke",    "dog",    "Boxer",                "M", 7, "2026-04-15", "available", "D5", None, None),
    (1044, "Willow",  "cat",    "Ragdoll",              "F", 3, "2026-04-20", "on_hold",   "C4", 206, "2026-05-16"),
    (1045, "Hazel",   "dog",    "Dachshund",            "F", 9, "2026-04-28", "in_foster", None, 206, None),
    (1046, "Nala",    "cat",    "Tortoiseshell",        "F", 2, "2026-05-02", "available", "C5", None, None),
    (1047, "Rocky",   "dog",    "Husky mix",            "M", 5, "2026-05-06", "available", "D6", None, None),
    (1048, "Luna",    "dog",    "Shiba Inu",            "F", 3, "2026-05-09", "available", "D7", None, None),
]  # fmt: skip
_SHOTS = {  # animalId: "vaccine date, ..."
    1029: "FVRCP 2026-01-15, rabies 2026-01-15",
    1030: "DHPP 2026-01-20, rabies 2026-01-20",
    1031: "DHPP 2026-02-11, bordetella 2026-02-11, rabies 2026-02-11",
    1032: "FVRCP 2026-02-19, rabies 2026-02-19",
    1033: "DHPP 2026-02-15, bordetella 2026-02-15, rabies 2026-02-15, leptospirosis 2026-03-14",
    1034: "RHDV2 2026-03-06",
    1035: "FVRCP 2026-03-10, rabies 2026-03-10, FeLV 2026-03-24",
    1036: "DHPP 2026-03-13, bordetella 2026-03-13",
    1037: "FVRCP 2026-03-16, rabies 2026-03-16",
    1038: "DHPP 2026-03-21, rabies 2026-03-21",
    1039: "FVRCP 2026-03-29, FeLV 2026-03-29, rabies 2026-03-29",
    1040: "DHPP 2026-04-03, rabies 2026-04-03",
    1041: "RHDV2 2026-04-07, myxomatosis 2026-04-07",
    1042: "FVRCP 2026-04-12",
    1043: "DHPP 2026-04-16, rabies 2026-04-16, leptospirosis 2026-04-30",
    1044: "FVRCP 2026-04-21, rabies 2026-05-05",
    1045: "DHPP 2026-04-29",
    1046: "FVRCP 2026-05-03",
    1047: "DHPP 2026-05-07",
    1048: "DHPP 2026-05-10, rabies 2026-05-10",
}  # fmt: skip
OPENING_ANIMALS = {
    aid: {"name": name, "species": species, "breed": breed, "sex": sex, "ageYears": age, "intakeDate": intake,
          "status": status, "kennel": kennel,
          "holdFor": person if status == "on_hold" else None, "holdUntil": date if status == "on_hold" else None,
          "fosterId": person if status == "in_foster" else None,
          "adopterId": person if status == "adopted" else None, "adoptedOn": date if status == "adopted" else None,
          "vaccinations": [{"vaccine": shot.split()[0], "date": shot.split()[1]} for shot in _SHOTS[aid].split(", ")]}
    for aid, name, species, breed, sex, age, intake, status, kennel, person, date in _ANIMALS
}  # fmt: skip
_APPS = [  # id, animal, applicant, submitted, status, decided, reason
    (5001, 1029, 205, "2026-02-20", "approved", "2026-02-27", None),
    (5002, 1030, 203, "2026-02-24", "approved", "2026-03-01", None),
    (5003, 1035, 207, "2026-03-30", "approved", "2026-04-05", None),
    (5004, 1040, 208, "2026-04-10", "approved", "2026-04-25", None),
    (5005, 1040, 204, "2026-04-12", "rejected", "2026-04-25", "Bella was adopted by another applicant"),
    (5006, 1047, 208, "2026-05-07", "rejected", "2026-05-09", "Landlord does not allow large dogs"),
    (5007, 1033, 202, "2026-05-08", "pending",  None, None),
    (5008, 1036, 201, "2026-05-10", "pending",  None, None),
    (5009, 1039, 204, "2026-05-11", "pending",  None, None),
    (5010, 1036, 205, "2026-05-12", "pending",  None, None),
    (5011, 1044, 201, "2026-05-13", "pending",  None, None),
]  # fmt: skip
OPENING_APPLICATIONS = {
    app_id: {"animalId": animal, "applicantId": person, "submittedOn": submitted, "status": status,
             "decidedOn": decided, "reason": reason, "notes": ""}
    for app_id, animal, person, submitted, status, decided, reason in _APPS
}  # fmt: skip

ANIMALS: dict = copy.deepcopy(OPENING_ANIMALS)
APPLICATIONS: dict = copy.deepcopy(OPENING_APPLICATIONS)


def _animal(animal_id: int) -> dict:
    if animal_id not in ANIMALS:
        raise ValueError(f"Animal {animal_id} not found. Use searchAnimals to find an animal's id.")
    return ANIMALS[animal_id]


def _person_id(email: str) -> int:
    key = str(email).strip().lower()
    for pid, p in PEOPLE.items():
        if p["email"] == key:
            return pid
    raise ValueError(f"No person with email {email!r}. Use searchPeople to look someone up by name.")


def _who(pid: int | None) -> dict | None:
    return None if pid is None else {"personId": pid, "name": PEOPLE[pid]["name"], "email": PEOPLE[pid]["email"]}


def _row(aid: int) -> dict:
    a = ANIMALS[aid]
    return {"animalId": aid, "name": a["name"], "species": a["species"], "breed": a["breed"],
            "ageYears": a["ageYears"], "status": a["status"], "kennel": a["kennel"]}  # fmt: skip


def _app_row(app_id: int) -> dict:
    a = APPLICATIONS[app_id]
    return {"applicationId": app_id, "animalId": a["animalId"], "applicantId": a["applicantId"],
            "status": a["status"], "submittedOn": a["submittedOn"], "decidedOn": a["decidedOn"]}  # fmt: skip


def _not_adopted(aid: int, what: str) -> dict:
    a = _animal(aid)
    if a["status"] == "adopted":
        raise ValueError(f"{a['name']} ({aid}) was already adopted on {a['adoptedOn']}; cannot {what}.")
    return a


@mcp.tool()
def reset() -> str:
    """Restore the opening state."""
    for live, opening in ((ANIMALS, OPENING_ANIMALS), (APPLICATIONS, OPENING_APPLICATIONS)):
        live.clear()
        live.update(copy.deepcopy(opening))
    return "reset"


@mcp.tool()
def searchAnimals(query: str | None = None, species: str | None = None, status: str | None = None,
                  limit: int = 10) -> list[dict]:  # fmt: skip
    """Search animals by name or breed. Optional filters: species (dog, cat, rabbit) and status
    (available, on_hold, adopted, in_foster). Returns at most `limit` results."""
    if species is not None and species.lower() not in SPECIES:
        raise ValueError(f"Unknown species {species!r}. Valid: {', '.join(SPECIES)}.")
    if status is not None and status.lower() not in STATUSES:
        raise ValueError(f"Unknown status {status!r}. Valid: {', '.join(STATUSES)}.")
    if limit < 1 or limit > 50:
        raise ValueError("limit must be between 1 and 50.")
    q = (query or "").strip().lower()
    hits = [aid for aid, a in ANIMALS.items() if (q in a["name"].lower() or q in a["breed"].lower())
            and (species is None or a["species"] == species.lower())
            and (status is None or a["status"] == status.lower())]  # fmt: skip
    return [_row(aid) for aid in hits[:limit]]


@mcp.tool()
def getAnimal(animalId: int) -> dict:
    """Full record for one animal, including vaccinations and any hold, foster or adoption."""
    a = _animal(animalId)
    hold = {**_who(a["holdFor"]), "until": a["holdUntil"]} if a["holdFor"] else None
    adoption = {**_who(a["adopterId"]), "date": a["adoptedOn"]} if a["adopterId"] else None
    return {**_row(animalId), "sex": a["sex"], "intakeDate": a["intakeDate"], "hold": hold,
            "foster": _who(a["fosterId"]), "adoption": adoption,
            "vaccinations": copy.deepcopy(a["vaccinations"])}  # fmt: skip


@mcp.tool()
def searchPeople(query: str = "") -> list[dict]:
    """Find people (adopters, applicants, fosters) by name or email. An empty query returns everyone."""
    q = query.strip().lower()
    return [{"personId": pid, "name": p["name"], "email": p["email"]} for pid, p in PEOPLE.items()
            if q in p["name"].lower() or q in p["email"]]  # fmt: skip


@mcp.tool()
def getPerson(email: str) -> dict:
    """Look up a person by email: contact details, their applications, holds and foster animals."""
    pid = _person_id(email)
    apps = [{"applicationId": app_id, "animalId": a["animalId"], "animalName": ANIMALS[a["animalId"]]["name"],
             "status": a["status"], "submittedOn": a["submittedOn"]}
            for app_id, a in APPLICATIONS.items() if a["applicantId"] == pid]  # fmt: skip
    holds = [{"animalId": aid, "animalName": a["name"], "until": a["holdUntil"]}
             for aid, a in ANIMALS.items() if a["holdFor"] == pid]  # fmt: skip
    fostering = [{"animalId": aid, "animalName": a["name"], "species": a["species"]}
                 for aid, a in ANIMALS.items() if a["fosterId"] == pid]  # fmt: skip
    return {"personId": pid, **PEOPLE[pid], "applications": apps, "holds": holds, "fostering": fostering}


@mcp.tool()
def listApplications(animalId: int | None = None, status: str | None = None) -> list[dict]:
    """Adoption applications, oldest first. Filter by animalId and/or status (pending, approved, rejected)."""
    if animalId is not None:
        _animal(animalId)
    if status is not None and status.lower() not in APP_STATUSES:
        raise ValueError(f"Unknown status {status!r}. Valid: {', '.join(APP_STATUSES)}.")
    return [_app_row(app_id) for app_id, a in APPLICATIONS.items()
            if animalId in (None, a["animalId"]) and (status is None or a["status"] == status.lower())]  # fmt: skip


@mcp.tool()
def submitApplication(animalId: int, applicantEmail: str, notes: str = "") -> dict:
    """Submit an adoption application for an animal on behalf of a person (by email)."""
    a = _not_adopted(animalId, "take new applications")
    pid = _person_id(applicantEmail)
    for app_id, app in APPLICATIONS.items():
        if app["animalId"] == animalId and app["applicantId"] == pid and app["status"] == "pending":
            raise ValueError(f"{PEOPLE[pid]['name']} already has a pending application ({app_id}) for {a['name']}.")
    app_id = max(APPLICATIONS) + 1
    APPLICATIONS[app_id] = {"animalId": animalId, "applicantId": pid, "submittedOn": TODAY, "status": "pending",
                            "decidedOn": None, "reason": None, "notes": notes}  # fmt: skip
    return {**_app_row(app_id), "notes": notes}


@mcp.tool()
def reviewApplication(applicationId: int, decision: str, reason: str | None = None) -> dict:
    """Approve or reject a pending application. decision: "approved" or "rejected" (a reason is required to
    reject). Approving marks the animal adopted and rejects the other pending applications for it."""
    if applicationId not in APPLICATIONS:
        raise ValueError(f"Application {applicationId} not found.")
    app = APPLICATIONS[applicationId]
    if app["status"] != "pending":
        raise ValueError(f"Application {applicationId} is already {app['status']}.")
    if decision not in ("approved", "rejected"):
        raise ValueError('decision must be "approved" or "rejected".')
    aid, pid = app["animalId"], app["applicantId"]
    a = ANIMALS[aid]
    if decision == "rejected":
        if not (reason or "").strip():
            raise ValueError("A reason is required to reject an application.")
        app.update(status="rejected", decidedOn=TODAY, reason=reason.strip())
        return {**_app_row(applicationId), "reason": app["reason"]}
    _not_adopted(aid, "approve this application")
    if a["holdFor"] not in (None, pid):
        raise ValueError(f"{a['name']} ({aid}) is on hold for {PEOPLE[a['holdFor']]['name']} until "
                         f"{a['holdUntil']}; only their application can be approved.")  # fmt: skip
    app.update(status="approved", decidedOn=TODAY)
    a.update(status="adopted", kennel=None, holdFor=None, holdUntil=None, fosterId=None, adopterId=pid,
             adoptedOn=TODAY)  # fmt: skip
    for other in APPLICATIONS.values():
        if other["animalId"] == aid and other["status"] == "pending":
            other.update(status="rejected", decidedOn=TODAY, reason=f"{a['name']} was adopted by another applicant")
    return {**_app_row(applicationId), "animalStatus": a["status"]}


@mcp.tool()
def placeHold(animalId: int, applicantEmail: str, days: int = 3) -> dict:
    """Put an available animal on hold for a person (by email) for a number of days (1-14)."""
    a = _not_adopted(animalId, "place a hold")
    pid = _person_id(applicantEmail)
    if a["status"] != "available":
        raise ValueError(f"{a['name']} ({animalId}) is {a['status']}; only available animals can be put on hold.")
    if days < 1 or days > 14:
        raise ValueError("days must be between 1 and 14.")
    until = (dt.date.fromisoformat(TODAY) + dt.timedelta(days=days)).isoformat()
    a.update(status="on_hold", holdFor=pid, holdUntil=until)
    return {**_row(animalId), "hold": {**_who(pid), "until": until}}


@mcp.tool()
def recordVaccination(animalId: int, vaccine: str, date: str | None = None) -> list[dict]:
    """Record a vaccination (date as YYYY-MM-DD, defaults to today). Returns the animal's vaccinations."""
    a = _not_adopted(animalId, "record vaccinations (the adopter's vet keeps the records now)")
    valid = VACCINES[a["species"]]
    name = next((v for v in valid if v.lower() == str(vaccine).strip().lower()), None)
    if name is None:
        raise ValueError(f"{vaccine!r} is not a {a['species']} vaccine. Valid: {', '.join(valid)}.")
    when = TODAY if date is None else str(date).strip()
    try:
        dt.date.fromisoformat(when)
    except ValueError:
        raise ValueError(f"date must be YYYY-MM-DD, got {date!r}.") from None
    if when > TODAY or when < a["intakeDate"]:
        raise ValueError(f"date must be between the intake date {a['intakeDate']} and today {TODAY}.")
    if {"vaccine": name, "date": when} in a["vaccinations"]:
        raise ValueError(f"{name} on {when} is already recorded for {a['name']}.")
    a["vaccinations"].append({"vaccine": name, "date": when})
    a["vaccinations"].sort(key=lambda v: (v["date"], v["vaccine"].lower()))
    return copy.deepcopy(a["vaccinations"])


@mcp.tool()
def moveKennel(animalId: int, kennel: str) -> dict:
    """Move an animal in the shelter to another (empty) kennel, e.g. "D8"."""
    a = _not_adopted(animalId, "move kennels")
    if a["kennel"] is None:
        raise ValueError(f"{a['name']} ({animalId}) is {a['status']} and not in a kennel.")
    to = str(kennel).strip().upper()
    if to not in KENNEL_IDS:
        raise ValueError(f"No kennel {kennel!r}. Kennels: D1-D8 (dogs), C1-C6 (cats), S1-S3 (rabbits).")
    if KENNELS[to[0]] != a["species"]:
        raise ValueError(f"Kennel {to} is for {KENNELS[to[0]]}s; {a['name']} is a {a['species']}.")
    taken = {x["kennel"]: x["name"] for x in ANIMALS.values() if x["kennel"]}
    if to in taken:
        free = [k for k in KENNEL_IDS if k[0] == to[0] and k not in taken]
        raise ValueError(f"Kennel {to} is occupied by {taken[to]}. Free {a['species']} kennels: "
                         f"{', '.join(free) or 'none'}.")  # fmt: skip
    previous, a["kennel"] = a["kennel"], to
    return {"animalId": animalId, "name": a["name"], "from": previous, "to": to}


if __name__ == "__main__":
    mcp.run()

"""The library as an environment: tasks, a checker with partial credit, fresh state per rollout.

This is the training glue, kept apart from the agent: ``library_environment()`` is a
``ToolsEnvironment`` over the author's own ``make_tools`` (``examples/dropin/library.py``), with a
new ``Library`` per episode (seeded by the task), so concurrent rollouts never share books.
It is registered as ``"library"`` when this module is imported; ``--env
examples.dropin.env:library_environment`` (``env_id`` in a training config) imports it.

The checker gives partial credit, so a weak policy still gets graded rewards (and GRPO groups
have variance): 0.7 for the goal (the loan made or returned, or the right answer), 0.3 split
over the reference calls the agent made with the right tool name.
"""

from __future__ import annotations

import random
from typing import Any

from env_tools.langchain_tools import ToolsEnvironment, register_tools_environment
from examples.dropin.library import MEMBERS, TITLES, Library, make_tools
from langgraph_evolver.types import Task, ToolCall

__all__ = ["TASKS", "check", "library_environment", "library_tools"]


def library_tools(task: Task) -> tuple[Library, list]:
    library = Library.sample(seed=int(task.env_params.get("seed", 0)))
    return library, make_tools(library)


def _tasks(split: str, n: int, offset: int) -> list[Task]:
    rng = random.Random(f"library-{split}")
    out = []
    for i in range(n):
        seed = offset + i
        library = Library.sample(seed)
        member_id, name = rng.choice(MEMBERS)
        kind = ["lend", "loans", "return"][i % 3]
        book_id, title, _ = rng.choice(TITLES)
        held = library.loans_of(member_id)
        if kind == "return" and not held:
            kind = "lend"
        if kind == "lend":
            while (member_id, book_id) in library.loans or library.copies[book_id] < 1:
                book_id, title, _ = rng.choice(TITLES)
            query = f"Please lend {title} to {name}."
            ref = [ToolCall(name="find_member", arguments={"name": name}),
                   ToolCall(name="search_books", arguments={"query": title}),
                   ToolCall(name="lend_book", arguments={"member_id": member_id, "book_id": book_id})]  # fmt: skip
            meta: dict[str, Any] = {"kind": kind, "member": member_id, "book": book_id}
        elif kind == "return":
            book_id = held[0]
            title = next(t for b, t, _ in TITLES if b == book_id)
            query = f"{name} brought back {title}. Record the return."
            ref = [ToolCall(name="find_member", arguments={"name": name}),
                   ToolCall(name="search_books", arguments={"query": title}),
                   ToolCall(name="return_book", arguments={"member_id": member_id, "book_id": book_id})]  # fmt: skip
            meta = {"kind": kind, "member": member_id, "book": book_id}
        else:
            titles = [t for b, t, _ in TITLES if b in held]
            query = f"Which books does {name} have on loan?"
            ref = [ToolCall(name="find_member", arguments={"name": name}),
                   ToolCall(name="list_loans", arguments={"member_id": member_id})]  # fmt: skip
            meta = {"kind": kind, "member": member_id, "answer": ", ".join(titles) if titles else "none"}
        out.append(Task(id=f"library-{split}-{i:03d}", env="library", query=query, env_params={"seed": seed},
                        reference_solution=tuple(ref), metadata=meta))  # fmt: skip
    return out


TASKS = {"train": _tasks("train", 48, 0), "test": _tasks("test", 24, 1000)}


def check(task: Task, library: Library, final_answer: str | None, calls: list[ToolCall]) -> float:
    """0.7 for the goal, plus 0.3 split over the reference calls made with the right tool name."""
    meta = task.metadata
    if meta["kind"] == "lend":
        goal = (meta["member"], meta["book"]) in library.loans
    elif meta["kind"] == "return":
        goal = (meta["member"], meta["book"]) not in library.loans
    else:
        expected = [t.strip().lower() for t in meta["answer"].split(",")]
        goal = final_answer is not None and all(t in final_answer.lower() for t in expected)
    reference = [c.name for c in task.reference_solution or ()]
    used = {c.name for c in calls}
    return 0.7 * goal + 0.3 * sum(name in used for name in reference) / len(reference)


def library_environment(**options: Any) -> ToolsEnvironment:
    """A fresh library environment (``load_environment("library")`` does the same once registered)."""
    return ToolsEnvironment(library_tools, tasks=TASKS, checker=check, **options)


register_tools_environment("library", library_tools, tasks=TASKS, checker=check)

"""A small lending library: the domain of the drop-in example, written the way an app author would.

Nothing here knows about langgraph-evolver: a ``Library`` (books, members, loans) and the
LangChain ``@tool`` functions an agent uses on it. ``make_tools(library)`` returns tools that close
over one library, so every call to it gets tools acting on that library only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from langchain_core.tools import BaseTool, ToolException, tool

TITLES = [
    ("b1", "Dune", "Frank Herbert"),
    ("b2", "Emma", "Jane Austen"),
    ("b3", "Ulysses", "James Joyce"),
    ("b4", "Beloved", "Toni Morrison"),
    ("b5", "Hamlet", "William Shakespeare"),
    ("b6", "Solaris", "Stanislaw Lem"),
    ("b7", "Persuasion", "Jane Austen"),
    ("b8", "Dracula", "Bram Stoker"),
]
MEMBERS = [("m1", "Ana"), ("m2", "Bo"), ("m3", "Cy"), ("m4", "Dee"), ("m5", "Eli"), ("m6", "Fay")]


@dataclass
class Library:
    """Books with a number of copies, members, and who has which book."""

    copies: dict[str, int] = field(default_factory=dict)
    loans: set[tuple[str, str]] = field(default_factory=set)
    """(member id, book id) pairs."""

    @classmethod
    def sample(cls, seed: int = 0) -> Library:
        """A library whose copies and existing loans depend on ``seed``."""
        rng = random.Random(seed)
        lib = cls(copies={book_id: rng.randint(1, 2) for book_id, _, _ in TITLES})
        for member_id, _ in rng.sample(MEMBERS, 3):
            book_id = rng.choice(TITLES)[0]
            if lib.copies[book_id] > 0:
                lib.copies[book_id] -= 1
                lib.loans.add((member_id, book_id))
        return lib

    def loans_of(self, member_id: str) -> list[str]:
        return sorted(b for m, b in self.loans if m == member_id)


def _book(book_id: str) -> dict[str, str]:
    for bid, title, author in TITLES:
        if bid == book_id:
            return {"id": bid, "title": title, "author": author}
    raise ToolException(f"no book with id {book_id!r}; find ids with search_books")


def _member(member_id: str) -> str:
    for mid, name in MEMBERS:
        if mid == member_id:
            return name
    raise ToolException(f"no member with id {member_id!r}; find ids with find_member")


def make_tools(library: Library) -> list[BaseTool]:
    """The agent's tools, acting on ``library``."""

    @tool
    def search_books(query: str) -> list[dict]:
        """Find books whose title or author contains the query; returns ids, titles and copies left."""
        q = query.lower()
        return [{"id": b, "title": t, "author": a, "copies_left": library.copies[b]}
                for b, t, a in TITLES if q in t.lower() or q in a.lower()]  # fmt: skip

    @tool
    def find_member(name: str) -> dict:
        """Look up a member by name; returns the member id."""
        for mid, member in MEMBERS:
            if member.lower() == name.strip().lower():
                return {"id": mid, "name": member}
        raise ToolException(f"no member named {name!r}")

    @tool
    def list_loans(member_id: str) -> list[dict]:
        """The books a member has borrowed."""
        _member(member_id)
        return [_book(b) for b in library.loans_of(member_id)]

    @tool
    def lend_book(member_id: str, book_id: str) -> str:
        """Lend a book to a member (needs a copy left)."""
        _member(member_id), _book(book_id)
        if (member_id, book_id) in library.loans:
            raise ToolException(f"{member_id} already has {book_id}")
        if library.copies[book_id] < 1:
            raise ToolException(f"no copy of {book_id} left")
        library.copies[book_id] -= 1
        library.loans.add((member_id, book_id))
        return "lent"

    @tool
    def return_book(member_id: str, book_id: str) -> str:
        """Record that a member returned a book."""
        if (member_id, book_id) not in library.loans:
            raise ToolException(f"{member_id} has not borrowed {book_id}")
        library.loans.discard((member_id, book_id))
        library.copies[book_id] += 1
        return "returned"

    return [search_books, find_member, list_loans, lend_book, return_book]

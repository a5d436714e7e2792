"""A notebook as an MCP server whose tools answer in plain text (FastMCP, stdio).

Style under test: every result is a sentence or a few lines of text ("note n3 saved"), never JSON,
and a bad call raises an exception.

Run:
    python examples/mcp_servers/notes_text.py
"""

from __future__ import annotations

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("notes")

NOTES: dict[str, dict] = {"n1": {"title": "Groceries", "body": "milk, eggs", "pinned": False}}


@mcp.tool()
def add_note(title: str, body: str) -> str:
    """Write a new note with a title and a body."""
    note_id = f"n{len(NOTES) + 1}"
    NOTES[note_id] = {"title": title, "body": body, "pinned": False}
    return f"note {note_id} saved"


@mcp.tool()
def list_notes() -> str:
    """One line per note: its id, title and whether it is pinned."""
    return "\n".join(f"{i}: {n['title']}" + (" (pinned)" if n["pinned"] else "") for i, n in NOTES.items())


@mcp.tool()
def read_note(note_id: str) -> str:
    """The title and body of a note."""
    if note_id not in NOTES:
        raise KeyError(f"there is no note {note_id}")
    note = NOTES[note_id]
    return f"{note['title']}: {note['body']}"


@mcp.tool()
def pin_note(note_id: str) -> str:
    """Pin a note to the top of the notebook."""
    if note_id not in NOTES:
        raise KeyError(f"there is no note {note_id}")
    NOTES[note_id]["pinned"] = True
    return f"note {note_id} pinned"


@mcp.tool()
def delete_note(note_id: str) -> str:
    """Throw a note away."""
    if NOTES.pop(note_id, None) is None:
        raise KeyError(f"there is no note {note_id}")
    return f"note {note_id} deleted"


if __name__ == "__main__":
    mcp.run()

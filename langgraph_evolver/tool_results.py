"""Read a tool's result the way MCP servers send it, into data the explorer and the answer check use.

An observation is text, but ordinary servers put data in it in several shapes (issue 39): one JSON
document (a ``dict`` or a pydantic model), several documents one after another (a FastMCP tool
returning ``list[dict]`` sends one content block per item, joined by newlines), one line per scalar
(``list[str]``: ``"north\\nharbour"``), and prose that names a record (``"permit 3 revoked"``,
``"note n2 saved"``, ``"n1: Groceries"``). ``read_result`` turns each into plain data: a document
as it is, several documents or lines as a list, prose as ``{"<noun>_id": value, ...}`` for the
records it names (plus ``key: value`` pairs), so ids and values come out of all of them.

``render_result`` is the other half, for environments that get the MCP ``structuredContent`` beside
the text: when the structured data holds values the text does not show, they are appended as one
JSON document (the agent must see what a task's answer is checked against; the explorer reads it).

In the core (not under ``questioning/``, which re-exports it as ``questioning.results``) because
``env_tools/mcp.py`` renders results with it too.

Example:
    >>> read_result('{"id": 1}\\n{"id": 2}')
    [{'id': 1}, {'id': 2}]
    >>> read_result("north\\nold town")
    ['north', 'old town']
    >>> read_result("permit 3 revoked")
    {'permit_id': 3}
    >>> render_result("Order placed.", {"order_id": 501, "status": "placed"})
    'Order placed.\\n{"order_id": 501, "status": "placed"}'
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["holds_token", "leaves", "read_result", "render_result", "text_records"]

_DECODER = json.JSONDecoder()
_MAX_LINE = 200
"""A longer line is prose, not one value of a list."""
_RECORD = re.compile(
    r"\b([A-Za-z][A-Za-z_]{1,30})\s*(?:#|no\.?\s*|number\s+|id\s*[:=]?\s*)?\s*([A-Za-z]{0,6}[-_]?\d[\w-]*)(?![\w-])"
)
"""``permit 3``, ``booking #B12``, ``order no. 7``, ``note id n2``: a noun, then a token with a digit."""
_ID_TOKEN = re.compile(r"[A-Za-z]{0,6}[-_]?\d[\w-]*")
_PAIR = re.compile(r"^\s*([A-Za-z][\w .-]{0,30}?)\s*[:=]\s*(\S.*?)\s*$")
"""``status: active``, ``n1: Groceries``: one ``key: value`` line."""
_STOP = frozenset({"at", "on", "in", "for", "of", "to", "by", "from", "with", "and", "or", "the", "a", "an", "is",
                   "was", "are", "until", "after", "before", "since", "than", "under", "over", "per", "every",
                   "each"})  # fmt: skip


def _scalar(token: str) -> Any:
    """``"3"`` -> ``3``; other tokens as they are (ids like ``B12`` stay strings)."""
    return int(token) if re.fullmatch(r"-?\d{1,15}", token) else token


def text_records(text: str) -> dict[str, Any]:
    """The records a line of prose names, as ``{"<noun>_id": value}``, and its ``key: value`` pair.

    Example:
        >>> text_records("Booking B7 confirmed for slot 12")
        {'booking_id': 'B7', 'slot_id': 12}
        >>> text_records("n1: Groceries (pinned)")
        {'id': 'n1', 'value': 'Groceries (pinned)'}
    """
    out: dict[str, Any] = {}
    pair = _PAIR.match(text)
    if pair and "\n" not in text:
        key, value = pair.group(1).strip(), _scalar(pair.group(2))
        if _ID_TOKEN.fullmatch(key):  # "n1: Groceries": a record's id, then what it is
            out.update(id=_scalar(key), value=value)
        else:
            out[key.lower().replace(" ", "_")] = value
    for noun, token in _RECORD.findall(text):
        noun = noun.lower()
        if noun in _STOP or noun in ("id", "no", "number"):
            continue
        out.setdefault(f"{noun}_id", _scalar(token))
    return out


def holds_token(text: str, value: Any) -> bool:
    """Whether ``value`` occurs in ``text`` as a whole token: not inside a longer id or word (``M1`` is not in
    ``M12`` nor in ``EM1-x``).

    Example:
        >>> holds_token('{"member_id": "M12"}', "M1"), holds_token("lent to M1.", "M1")
        (False, True)
    """
    return re.search(rf"(?<![\w-]){re.escape(str(value))}(?![\w-])", text) is not None


def _documents(text: str) -> list[Any] | None:
    """Every JSON document in ``text`` when it is only documents one after another, else ``None``."""
    docs, i, n = [], 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        try:
            doc, i = _DECODER.raw_decode(text, i)
        except ValueError:
            return None
        docs.append(doc)
    return docs or None


def read_result(text: str) -> Any:
    """The data in one tool result (see the module docstring); ``None`` for an empty result.

    The first shape that reads the whole text wins: one JSON document; several documents (a list);
    several short lines (a list of the lines, each read as a line: a ``key: value`` line becomes a
    pair, an id-naming line its records and its text); one line of prose (its records, or the text).
    """
    stripped = (text or "").strip()
    if not stripped:
        return None
    docs = _documents(stripped)
    if docs is not None:
        return docs[0] if len(docs) == 1 else docs
    lines = [line.strip() for line in stripped.splitlines() if line.strip()]
    if len(lines) > 1 and all(len(line) <= _MAX_LINE for line in lines):
        return [_line(line) for line in lines]
    return text_records(stripped) or stripped


def _line(line: str) -> Any:
    docs = _documents(line)
    if docs is not None and len(docs) == 1:
        return docs[0]
    records = text_records(line)
    return {"text": line, **records} if records else line


def leaves(value: Any) -> Iterator[Any]:
    """The scalars of parsed data, depth first (``None`` and booleans left out)."""
    if isinstance(value, Mapping):
        for v in value.values():
            yield from leaves(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from leaves(v)
    elif value is not None and not isinstance(value, bool):
        yield value


def _unwrap(structured: Any) -> Any:
    """FastMCP wraps a result that is not an object as ``{"result": ...}``: the data is inside."""
    if isinstance(structured, Mapping) and set(structured) == {"result"}:
        return structured["result"]
    return structured


def render_result(text: str, structured: Any) -> str:
    """``text`` with the MCP ``structuredContent`` appended as JSON when it holds values the text does not show.

    The text stays first and unchanged (it is what the server wrote for people and models); nothing is added
    when every scalar of the structured data already appears in it (FastMCP repeats the data as text). Rows are
    the exception: FastMCP sends a list of lists (a spreadsheet range, SQL rows) as one text block a cell, so
    the text does not say where a row ends; such a result is shown as the structured data's JSON instead.
    """
    data = _unwrap(structured)
    if data is None or data == {} or data == []:
        return text
    if isinstance(data, list) and any(isinstance(v, list) for v in data) and read_result(text) != data:
        return json.dumps(data, ensure_ascii=False, default=str)
    shown = (text or "").lower()
    missing = [v for v in leaves(data) if str(v).strip() and str(v).lower() not in shown]
    if not missing:
        return text
    dumped = json.dumps(data, ensure_ascii=False, default=str)
    return f"{text}\n{dumped}" if text and text.strip() else dumped

"""A small spreadsheet as an MCP server (FastMCP, stdio): sheets of rows addressed in A1 notation.

Row 1 of a sheet holds its column headers. Cells are read one at a time or as a range (a bare list of
rows), found by their text (a bare list of cell references), written, appended to and deleted by row;
a column can be summed. Fixed data, so every run gives the same answers; ``reset`` restores the
opening sheets (hidden from the agent by the evaluation harness). The held-out tasks beside it
(``sheets_tasks.jsonl``) were written by hand: never train on them.

Run:
    python examples/mcp_servers/sheets.py
"""

from __future__ import annotations

import copy
import re

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("sheets")

OPENING: dict[str, list[list]] = {
    "Budget": [
        ["Item", "Category", "Amount", "Paid"],
        ["Rent", "housing", 1200, "yes"],
        ["Groceries", "food", 340.5, "yes"],
        ["Internet", "utilities", 45, "no"],
        ["Electricity", "utilities", 80, "no"],
        ["Dinner out", "food", 62, "yes"],
    ],
    "Inventory": [
        ["SKU", "Name", "Qty", "Location"],
        ["SKU-11", "Stapler", 14, "Shelf A"],
        ["SKU-12", "Paper A4", 250, "Shelf B"],
        ["SKU-13", "Toner", 3, "Cage"],
        ["SKU-14", "Pens (box)", 40, "Shelf A"],
    ],
}
SHEETS: dict[str, list[list]] = copy.deepcopy(OPENING)
_CELL = re.compile(r"^([A-Z])([1-9][0-9]*)$")


def _sheet(name: str) -> list[list]:
    if name not in SHEETS:
        raise ValueError(f"no sheet {name!r}; sheets: {', '.join(SHEETS)}")
    return SHEETS[name]


def _cell(ref: str) -> tuple[int, int]:
    """(row index, column index), both from 0, of an A1 reference."""
    m = _CELL.match(ref.strip().upper())
    if m is None:
        raise ValueError(f"cell must be a column letter and a row number like B3, got {ref!r}")
    return int(m.group(2)) - 1, ord(m.group(1)) - ord("A")


def _ref(row: int, col: int) -> str:
    return f"{chr(ord('A') + col)}{row + 1}"


def _value(rows: list[list], row: int, col: int) -> str | float | None:
    return rows[row][col] if row < len(rows) and col < len(rows[row]) else None


@mcp.tool()
def reset() -> str:
    """Restore the opening sheets."""
    SHEETS.clear()
    SHEETS.update(copy.deepcopy(OPENING))
    return "reset"


@mcp.tool()
def list_sheets() -> list[dict]:
    """Every sheet with its column headers and number of rows (the header row included)."""
    return [{"sheet": name, "headers": rows[0], "rows": len(rows)} for name, rows in SHEETS.items()]


@mcp.tool()
def read_range(sheet: str, cells: str) -> list[list]:
    """The values of a rectangular range such as A1:D3, row by row (empty cells are null)."""
    rows = _sheet(sheet)
    first, _, last = cells.partition(":")
    (r0, c0), (r1, c1) = _cell(first), _cell(last or first)
    if r1 < r0 or c1 < c0:
        raise ValueError(f"range must go from its top-left to its bottom-right cell, got {cells!r}")
    return [[_value(rows, r, c) for c in range(c0, c1 + 1)] for r in range(r0, r1 + 1)]


@mcp.tool()
def get_cell(sheet: str, cell: str) -> dict:
    """One cell's value, with its column's header."""
    rows = _sheet(sheet)
    r, c = _cell(cell)
    return {"cell": cell.upper(), "value": _value(rows, r, c), "column": _value(rows, 0, c)}


@mcp.tool()
def find_cells(sheet: str, text: str) -> list[str]:
    """References of the cells whose text contains the given text (case-insensitive)."""
    rows, needle = _sheet(sheet), text.lower()
    return [_ref(r, c) for r, row in enumerate(rows) for c, v in enumerate(row) if needle in str(v).lower()]


@mcp.tool()
def set_cell(sheet: str, cell: str, value: str | float) -> dict:
    """Write a value into a cell of an existing row (append_row adds rows)."""
    rows = _sheet(sheet)
    r, c = _cell(cell)
    if r == 0:
        raise ValueError("row 1 holds the headers; write data from row 2")
    if r >= len(rows) or c >= len(rows[0]):
        raise ValueError(
            f"{cell} is outside the sheet ({len(rows)} rows, columns A-{chr(ord('A') + len(rows[0]) - 1)})"
        )
    rows[r][c] = value
    return {"cell": cell.upper(), "value": value}


@mcp.tool()
def append_row(sheet: str, values: list[str | float]) -> dict:
    """Add a row after the last one; one value per column."""
    rows = _sheet(sheet)
    if len(values) != len(rows[0]):
        raise ValueError(f"{sheet} has {len(rows[0])} columns ({', '.join(rows[0])}), got {len(values)} values")
    rows.append(list(values))
    return {"sheet": sheet, "row": len(rows)}


@mcp.tool()
def delete_row(sheet: str, row: int) -> dict:
    """Delete a data row by its number (2 or more); the rows below move up."""
    rows = _sheet(sheet)
    if not 2 <= row <= len(rows):
        raise ValueError(f"row must be between 2 and {len(rows)}, got {row}")
    removed = rows.pop(row - 1)
    return {"sheet": sheet, "deleted": removed}


@mcp.tool()
def column_sum(sheet: str, column: str) -> dict:
    """The sum of a column's numbers (by letter, e.g. C), with how many numbers were added."""
    rows = _sheet(sheet)
    _, c = _cell(f"{column}1")
    numbers = [row[c] for row in rows[1:] if c < len(row) and isinstance(row[c], int | float)]
    return {"column": column.upper(), "header": _value(rows, 0, c), "sum": sum(numbers), "count": len(numbers)}


@mcp.tool()
def add_sheet(name: str, headers: list[str]) -> dict:
    """Create an empty sheet with these column headers."""
    if name in SHEETS:
        raise ValueError(f"sheet {name!r} already exists")
    if not headers:
        raise ValueError("give at least one column header")
    SHEETS[name] = [list(headers)]
    return {"sheet": name, "headers": headers, "rows": 1}


if __name__ == "__main__":
    mcp.run()

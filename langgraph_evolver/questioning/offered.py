"""What a tool's description or an error message offers as values: the lists and examples it names
(``suggested_values``) and the numbers it allows (``numbers_named``). The schema explorer fills arguments with
them (``questioning/explore.py``)."""

from __future__ import annotations

import re

__all__ = ["numbers_named", "suggested_values"]

_EXAMPLE = re.compile(r"\b(?:such as|e\.g\.,?|for example|like)\s+'?([A-Za-z0-9][\w:./-]*)")
_LISTED = re.compile(
    r"(?:\b[A-Za-z][a-z ]{1,30}:|\bone of:?|\bmust be:?|\bvalid (?:values|options)(?: are)?:?)\s*\[?"
    r"((?:'?[\w./-]+'?\s*,\s*)+'?[\w./-]+'?)"
)
_QUOTED = re.compile(r"""(["'])([\w./ -]{1,40})\1""")
_ALTERNATIVES = re.compile(
    r"""\b(?:must be|one of|either|expected|allowed|valid (?:values|options)(?: are)?)\s*:?\s*"""
    r"""((?:(["'])[\w./ -]{1,40}\2\s*(?:,\s*(?:or\s+)?|or\s+))+(["'])[\w./ -]{1,40}\3)""",
    re.IGNORECASE,
)
"""Quoted alternatives: 'decision must be "approved" or "rejected"' (session 72, a shelter server's error)."""


def suggested_values(text: str) -> list[str]:
    """The values a message or a description offers: a list it names ("countries: FR, DE, ES", "one of
    'low', 'high'") and examples ("like B3", "such as A1:D3", "e.g. 2026-05-01"), in order.

    Example:
        >>> suggested_values("no service to 'country 15'; countries: FR, DE, ES")
        ['FR', 'DE', 'ES']
        >>> suggested_values("cell must be a column letter and a row number like B3, got 'Amount'")
        ['B3']
        >>> suggested_values("Unknown species 'a'. Valid: dog, cat, rabbit."), suggested_values(
        ...     'decision must be "approved" or "rejected".')
        (['dog', 'cat', 'rabbit'], ['approved', 'rejected'])
    """
    out = [v.strip().strip("'").rstrip(".") for m in _LISTED.finditer(text) for v in m.group(1).split(",")]
    out += [q.group(2) for m in _ALTERNATIVES.finditer(text) for q in _QUOTED.finditer(m.group(1))]
    out += [m.group(1).rstrip(".") for m in _EXAMPLE.finditer(text)]
    return list(dict.fromkeys(v for v in out if v))


def numbers_named(text: str, *, ranges_only: bool = False) -> list[int]:
    """The numbers a text allows: every value of a range it names ("8 to 18", "1-12", "between 2 and 5"), else the
    numbers it names (not for an error message: "cannot order 38" names the number that failed); ``[]`` when
    none."""
    ranges = re.findall(r"\b(\d{1,6})\s*(?:to|-|–|and|through)\s*(\d{1,6})\b", text)
    values = [v for lo, hi in ranges if 0 <= int(hi) - int(lo) <= 1000 for v in range(int(lo), int(hi) + 1)]
    if values or ranges_only:
        return values
    return [int(x) for x in re.findall(r"(?<![\w.-])\d{1,6}(?![\w.-])", text)]

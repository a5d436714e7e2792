"""Answer checks shared by the built-in environments."""

from __future__ import annotations

import re

__all__ = ["answer_matches"]

_NORMALIZE = re.compile(r"[\s$,]+")


def answer_matches(answer: str | None, expected: str) -> bool:
    """Whether ``answer`` contains ``expected`` as a whole token, ignoring case, ``$``, commas and spacing.

    Example:
        >>> answer_matches("You have $42.50 left.", "42.50")
        True
        >>> answer_matches("Room 142 is free.", "42")
        False
    """
    if answer is None:
        return False
    text = _NORMALIZE.sub(" ", answer.lower()).strip()
    want = _NORMALIZE.sub(" ", expected.lower()).strip()
    return re.search(rf"(?<![\w-]){re.escape(want)}(?![\w-])", text) is not None

"""Paths that work from any directory: the checkpoints shipped with the project (``checkpoints/tiny-policy``)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["PROJECT_ROOT", "resolve_packaged"]

PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The checkout (or installed tree) that holds ``checkpoints/``."""


def resolve_packaged(path: str | Path) -> Path:
    """``path`` as given when it exists from here; else, for a relative path, the project's own copy
    (``checkpoints/tiny-policy`` from any directory); else ``path`` unchanged (the caller says it is missing)."""
    given = Path(path).expanduser()
    if given.exists() or given.is_absolute():
        return given
    packaged = PROJECT_ROOT / given
    return packaged if packaged.exists() else given

"""Text for a person: the engine's `plain` and `usd` (`engine_events.readers.plain`, one module
for both halves' views), a count with its noun, and a path as a person may read it.

A book id, a stream id, a unit or a detail may hold anything a hostile journal or directory name
put there: every human view (`show` without `--json`) prints such text through `plain`. The JSON
views print the exact values (JSON escapes control characters itself).
"""

from __future__ import annotations

import os

from engine_events.readers.plain import plain, usd

__all__ = ["counted", "display_path", "plain", "usd"]


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """A count and its noun, singular for one: `1 root`, `2 roots`, `0 problems` (`plural` when
    an `s` does not make it: `line hashes`, `book directories`)."""
    if number == 1:
        return f"{number} {noun}"
    return f"{number} {plural or noun + 's'}"


def display_path(path: str | os.PathLike[str]) -> str:
    """A path as a person may read it: bytes that are not UTF-8 as `\\xNN`, controls escaped."""
    return plain(os.fsencode(path).decode("utf-8", "backslashreplace"))

"""Text from a journal or a directory name, made safe to print for a person.

A book id, a stream id, a unit or a detail may hold anything a hostile journal or directory name
put there: terminal escape sequences, other control characters, bidirectional overrides that make
a line read differently from what it holds. Every human view (`show` without `--json`) prints such
text through `plain`, which replaces each of those characters with a visible `\\xNN`/`\\uNNNN`
escape. The JSON views print the exact values (JSON escapes control characters itself).
"""

from __future__ import annotations

import os
import re

_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ufeff]"
)
"""C0 and C1 controls, DEL, and the characters that change the direction or flow of text."""


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def plain(text: str, max_chars: int | None = None) -> str:
    """`text` with every control and direction character shown as an escape, cut to `max_chars`
    (with an ellipsis) when given."""
    safe = _UNSAFE.sub(_escaped, text)
    if max_chars is not None and len(safe) > max_chars:
        return safe[: max(0, max_chars - 1)] + "…"
    return safe


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """A count and its noun, singular for one: `1 root`, `2 roots`, `0 problems` (`plural` when
    an `s` does not make it: `line hashes`, `book directories`)."""
    if number == 1:
        return f"{number} {noun}"
    return f"{number} {plural or noun + 's'}"


MICRO_USD_PER_USD = 1_000_000


def usd(micro_usd: int) -> str:
    """Micro-USD as dollars for a person: `$1,234.25`, `$0.000001` (integer arithmetic only: no
    micro-USD is rounded away). Every text view shows money so; JSON keeps the integer. The
    engine's `watch` and `status` show it the same (a copy: the halves never import each other)."""
    dollars, micros = divmod(micro_usd, MICRO_USD_PER_USD)
    fraction = f"{micros:06d}".rstrip("0").ljust(2, "0")
    return f"${dollars:,}.{fraction}"


def display_path(path: str | os.PathLike[str]) -> str:
    """A path as a person may read it: bytes that are not UTF-8 as `\\xNN`, controls escaped."""
    return plain(os.fsencode(path).decode("utf-8", "backslashreplace"))

"""Text from a journal (or from a database fed by one, or a directory name), made safe to show to
a person; and money in dollars for a person. Both halves' human views use this module: the
engine's `watch`, `status`, `verify` and the demo, the platform's `show` and its other commands.

A journal is written by another process and may hold anything a JSON string can: terminal escape
sequences that clear the screen or retitle the window, C1 controls that some terminals obey as
escapes, bidi overrides that make a name read backwards, characters no terminal shows. Every such
character becomes a visible escape (`\\x1b`, `\\u202e`): the operator sees what the text holds,
and the terminal obeys none of it. Views hand the result to `rich` as `Text`, never as markup.
The JSON views print the exact values (JSON escapes control characters itself).

It imports nothing but the grammar (for the unit of money): the platform imports it on every path.
"""

from __future__ import annotations

import re

from ..grammar import MICRO_USD_PER_USD

ELLIPSIS = "\N{HORIZONTAL ELLIPSIS}"

_UNSAFE = re.compile(
    "["
    "\x00-\x1f"  # C0, newline and tab included: one value stays on one line of a view
    "\x7f-\x9f"  # DEL and C1 (U+009B is a one-character CSI on some terminals)
    "\u061c\u200e\u200f"  # bidi marks
    "\u2028\u2029"  # line and paragraph separators
    "\u202a-\u202e"  # bidi embeddings and overrides
    "\u2066-\u2069"  # bidi isolates
    "\ufeff"  # a byte-order mark: shown nowhere, and it joins what it stands between
    "\ud800-\udfff"  # lone surrogates (a name that is not UTF-8): no terminal encoding writes them
    "]"
)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def plain(text: str, max_chars: int | None = None) -> str:
    """`text` with every control, bidi control, byte-order mark and lone surrogate shown as an
    escape (`\\xNN`, `\\uNNNN`).

    With `max_chars`, a longer result is cut to `max_chars` characters, the last being an
    ellipsis, so that one hostile value cannot make a view slow or push everything else off the
    screen.
    """
    if max_chars is not None and len(text) > 4 * max_chars:
        text = text[: 4 * max_chars]  # past what can be shown: never escaped, however long
    safe = _UNSAFE.sub(_escaped, text)
    if max_chars is not None and len(safe) > max_chars:
        return safe[: max(0, max_chars - 1)] + ELLIPSIS if max_chars > 0 else ""
    return safe


def usd(micro_usd: int) -> str:
    """Micro-USD as dollars for a person: `$1,234.25`, `$0.000001` (integer arithmetic only: no
    micro-USD is rounded away). Every text view shows money so; JSON keeps the integer."""
    dollars, micros = divmod(micro_usd, MICRO_USD_PER_USD)
    fraction = f"{micros:06d}".rstrip("0").ljust(2, "0")
    return f"${dollars:,}.{fraction}"

"""Text from a journal (or from a database fed by one), made safe to show to a person.

A journal is written by another process and may hold anything a JSON string can: terminal escape
sequences that clear the screen or retitle the window, C1 controls that some terminals obey as
escapes, bidi overrides that make a name read backwards. Human views pass every such string
through `plain` and hand the result to `rich` as `Text`, never as markup.

This module depends on the standard library only, so that a reader which cannot import
`engine_events` can carry a verbatim copy.
"""

from __future__ import annotations

import re

REPLACEMENT = "\N{REPLACEMENT CHARACTER}"
"""What an unsafe character becomes: visible, one column wide, and never itself a control."""
ELLIPSIS = "\N{HORIZONTAL ELLIPSIS}"

_UNSAFE = re.compile(
    "["
    "\x00-\x1f"  # C0, newline and tab included: one value stays on one line of a view
    "\x7f-\x9f"  # DEL and C1 (U+009B is a one-character CSI on some terminals)
    "\u061c\u200e\u200f"  # bidi marks
    "\u2028\u2029"  # line and paragraph separators
    "\u202a-\u202e"  # bidi embeddings and overrides
    "\u2066-\u2069"  # bidi isolates
    "\ud800-\udfff"  # lone surrogates: no terminal encoding can write them
    "]"
)


def plain(text: str, max_chars: int | None = None) -> str:
    """`text` with every control, bidi control and lone surrogate replaced by U+FFFD.

    With `max_chars`, a longer text is cut to `max_chars` characters, the last being an ellipsis,
    so that one hostile value cannot make a view slow or push everything else off the screen.
    """
    if max_chars is not None and len(text) > max_chars:
        text = text[: max_chars - 1] + ELLIPSIS if max_chars > 0 else ""
    return _UNSAFE.sub(REPLACEMENT, text)

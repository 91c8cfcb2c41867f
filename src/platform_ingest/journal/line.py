"""One decoded line of a journal, as every lane of the decoder returns it."""

from __future__ import annotations

from typing import Any

import msgspec


class Line(msgspec.Struct, frozen=True, gc=False):
    """One decoded line. `data` is the line's `data` object as parsed (unknown fields kept).

    A struct rather than a named tuple so that a line whose skeleton is remembered is parsed
    straight into it (`parse_as_line`), its four members typed on the way. Not tracked by the
    cycle collector: a decoded line refers to nothing that could refer back to it."""

    seq: int
    type: str
    time: str
    data: dict[str, Any]


parse_as_line = msgspec.json.Decoder(Line).decode
"""Parse a line into a `Line`, refusing with a `ValueError` (`msgspec.DecodeError`) a value that is
not JSON or whose members are not of their types. Only used on a line whose skeleton is remembered:
its keys, their order and their types are already proven by it (a leading zero, which is not
JSON, is what it can still find)."""

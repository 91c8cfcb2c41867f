"""Where a pass may start reading a journal: a value only, so that the decisions may hold one
without importing the reader (which opens files); `reader.verify_hint` checks one against the
file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class Hint:
    """Where a pass may start: just past a line of `line_bytes` bytes hashing to `sha256`."""

    offset: int
    line_bytes: int
    sha256: bytes | None
    file: str | None

    NONE: ClassVar[Hint]
    """No hint: read from byte 0."""

    @classmethod
    def start(cls) -> Hint:
        return cls.NONE


Hint.NONE = Hint(0, 0, None, None)

"""The exit codes of an engine process (docs/reference/exit-codes.md): what a process tells the platform by ending."""

from __future__ import annotations

import enum

REFUSAL_BAND = range(10, 20)
"""Codes 10 to 19 are refusals; an unknown code inside the band is still a refusal."""


class ExitCode(enum.IntEnum):
    CLEAN = 0
    INFRA = 1
    COMPLETED_WITH_FLAGS = 2
    BANK_STOP = 3
    CEILING = 4
    GRACEFUL_STOP = 5
    CONFIG_INVALID = 10
    SOURCE_UNREADABLE = 11
    PROJECT_LOCKED = 12
    SCHEMA_MISMATCH = 13
    DECISIONS_REJECTED = 14
    WRITE_INCOMPLETE = 15
    BOOK_INCOMPLETE = 16

    @property
    def is_refusal(self) -> bool:
        return self.value in REFUSAL_BAND

    @property
    def outcome(self) -> str:
        """The `finished.outcome` string for this code: its lower-case name."""
        return self.name.lower()

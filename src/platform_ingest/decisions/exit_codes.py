"""The platform's own mirror of the engine's exit codes (docs/reference/exit-codes.md) and how a run reads each one.

This is a copy on purpose: the platform does not import the engine's package (they are deployed
apart). The shared vector file `tests/vectors/exit_codes.json` and `tests/test_copies_agree.py`
keep the two tables in step.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .states import PauseReason, RunOutcome, RunState

REFUSAL_BAND = range(10, 20)
"""Codes 10 to 19 are refusals; an unknown code inside the band is still a refusal."""


class ExitCode(enum.IntEnum):
    """The named exit codes of an engine process."""

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


@dataclass(frozen=True)
class ExitReading:
    """What a run becomes when its engine ends with a code.

    `state` is the run state (`completed`, `failed`, `paused`, `refused`); `outcome` is set for a
    completed run, `reason` for a paused one, `refusal` (the class) for a refused one.
    """

    state: RunState
    outcome: RunOutcome | None = None
    reason: PauseReason | None = None
    refusal: str | None = None


_PAUSE_REASONS: dict[ExitCode, PauseReason] = {
    ExitCode.BANK_STOP: "bank_stop",
    ExitCode.CEILING: "ceiling",
    ExitCode.GRACEFUL_STOP: "stop",
}


def code_name(code: int) -> str | None:
    """The lower-case name of a named code (`finished.outcome` uses it), else None."""
    try:
        return ExitCode(code).name.lower()
    except ValueError:
        return None


def read_exit_code(code: int) -> ExitReading:
    """Read an engine exit code the way docs/reference/exit-codes.md says a platform must."""
    if code == ExitCode.CLEAN:
        return ExitReading("completed", outcome="completed")
    if code == ExitCode.COMPLETED_WITH_FLAGS:
        return ExitReading("completed", outcome="completed_with_flags")
    if code in _PAUSE_REASONS:
        return ExitReading("paused", reason=_PAUSE_REASONS[ExitCode(code)])
    if code in REFUSAL_BAND:
        return ExitReading("refused", refusal=code_name(code) or f"refusal_{code}")
    return ExitReading("failed")

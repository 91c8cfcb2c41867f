"""How a run reads each of the engine's exit codes (docs/reference/exit-codes.md): the codes
themselves are the engine's (`engine_events._exit_codes`), one table for both halves, which the
shared vector file `tests/vectors/exit_codes.json` pins.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_events._exit_codes import REFUSAL_BAND, ExitCode

from .states import PauseReason, RunOutcome, RunState

__all__ = ["REFUSAL_BAND", "ExitCode", "ExitReading", "code_name", "read_exit_code"]


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

"""The run state machine: what each event does to a run, mirroring the exit codes of docs/reference/exit-codes.md.

A run is `running`, `paused` (reason `ceiling`, `bank_stop` or `stop`), `completed` (outcome
`completed` or `completed_with_flags`), `failed` or `refused`. Only the run's latest stream moves
its state (a late line of an earlier stream never pauses a run that a newer stream is driving);
money and progress are taken from every stream: committed spend is the greatest cumulative value
seen (freshness only, never enforcement), progress is the latest full snapshot.

The progress snapshot keeps the stream's order of its phases. A jsonb object does not (it orders
its keys by length, then bytes: `edit` before `draft`), so the `progress` column holds a jsonb
array of `[phase, {"done", "total"}]` pairs in stream order (`progress_json`), read back into
an ordered dict (`progress_from_jsonb`, which also reads the object an older version wrote).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NewType

import orjson

from .exit_codes import read_exit_code
from .states import (
    ENDED_RUN_STATES,
    PauseReason,
    RunOutcome,
    RunState,
    StopKind,
)

FailReason = Literal["abandoned", "no_finished"]
"""Why a run `failed` without an exit code saying so (an operator, or repair)."""
SignalReason = NewType("SignalReason", str)
"""`signal_<n>`: the launcher reported that signal `n` ended the process (`signal_reason`)."""
RunReason = PauseReason | FailReason | SignalReason
"""A run's `reason`."""

StateEffectKind = Literal[
    "hello",
    "ceiling",
    "bank_stop",
    "finished",
    "exited",
    "abandoned",
    "unsupported_version",
    "stopped_without_finished",
]


def signal_reason(signal_number: int) -> SignalReason:
    return SignalReason(f"signal_{signal_number}")


def progress_json(progress: dict[str, Any]) -> str:
    """The `progress` column's value as JSON text (the statement casts it to jsonb, so that the
    decisions need no driver's adapter): `[phase, counts]` pairs in the snapshot's (stream)
    order."""
    return orjson.dumps([[phase, counts] for phase, counts in progress.items()]).decode()


def progress_from_jsonb(value: Any) -> dict[str, Any]:
    """The snapshot the `progress` column holds, its phases in stream order (an object written
    before the order was kept comes back in jsonb's order)."""
    if isinstance(value, list):
        return {phase: counts for phase, counts in value}
    return dict(value or {})


@dataclass(frozen=True, slots=True)
class StateEffect:
    """An event that moves a run's state: hello, ceiling, bank_stop or finished."""

    kind: StateEffectKind
    shortfall_micro_usd: int | None = None
    exit_code: int | None = None
    stop: StopKind | None = None
    refusal: str | None = None


@dataclass
class RunView:
    """One run as a pass sees it. `run_id` is None until the run is inserted."""

    book_id: str
    run_id: int | None = None
    state: RunState = "running"
    reason: RunReason | None = None
    stop: StopKind | None = None
    refusal: str | None = None
    outcome: RunOutcome | None = None
    exit_code: int | None = None
    committed_micro_usd: int = 0
    shortfall_micro_usd: int | None = None
    settled_micro_usd: int | None = None
    progress: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> RunView:
        return cls(
            book_id=row["book_id"],
            run_id=row["run_id"],
            state=row["state"],
            reason=row["reason"],
            stop=row["stop"],
            refusal=row["refusal"],
            outcome=row["outcome"],
            exit_code=row["exit_code"],
            committed_micro_usd=row["committed_micro_usd"],
            shortfall_micro_usd=row["shortfall_micro_usd"],
            settled_micro_usd=row["settled_micro_usd"],
            progress=progress_from_jsonb(row["progress"]),
        )

    @property
    def ended(self) -> bool:
        return self.state in ENDED_RUN_STATES

    def copy(self) -> RunView:
        clone = RunView(**{name: getattr(self, name) for name in self.__dataclass_fields__})
        clone.progress = dict(self.progress)
        return clone

    def spend(self, committed_micro_usd: int) -> None:
        """Cumulative committed spend: the greatest value seen wins, so a duplicate is harmless."""
        self.committed_micro_usd = max(self.committed_micro_usd, committed_micro_usd)

    def apply_state(self, effect: StateEffect) -> None:
        """Move the run's state for one event of its latest stream."""
        if effect.kind == "hello":
            self.state = "running"
            self.reason = self.stop = self.refusal = self.outcome = None
            self.exit_code = None
            self.shortfall_micro_usd = None
        elif effect.kind == "ceiling":
            self.state, self.reason, self.stop = "paused", "ceiling", None
            if effect.shortfall_micro_usd is not None:
                self.shortfall_micro_usd = effect.shortfall_micro_usd
        elif effect.kind == "bank_stop":
            self.state, self.reason, self.stop = "paused", "bank_stop", None
        elif effect.kind == "finished":
            if effect.exit_code is None:
                raise ValueError("a finished effect carries its exit code")
            reading = read_exit_code(effect.exit_code)
            self.state = reading.state
            self.outcome = reading.outcome
            self.reason = reading.reason
            self.refusal = (
                (effect.refusal or reading.refusal) if reading.state == "refused" else None
            )
            self.exit_code = effect.exit_code
            self.stop = effect.stop
        elif effect.kind == "exited":
            # The launcher's report of a process that wrote no `finished`: the exit code table's reading (docs/reference/exit-codes.md) of its
            # exit status, or `failed` for a signal (a negative status, as subprocess reports).
            if effect.exit_code is None:
                raise ValueError("an exited effect carries its exit status")
            self.exit_code, self.stop = effect.exit_code, None
            if effect.exit_code < 0:
                self.state, self.outcome, self.refusal = "failed", None, None
                self.reason = signal_reason(-effect.exit_code)
            else:
                reading = read_exit_code(effect.exit_code)
                self.state, self.outcome = reading.state, reading.outcome
                self.reason = reading.reason
                self.refusal = reading.refusal if reading.state == "refused" else None
        elif effect.kind == "abandoned":
            # An operator gave up on the run's stream (`abandon`): it ends here, failed.
            self.state, self.reason, self.outcome, self.stop = "failed", "abandoned", None, None
        elif effect.kind == "unsupported_version":
            # Its stream cannot be read by this platform: not live, not ended either (an upgraded
            # platform reads the stream again and the run goes on from it).
            self.state, self.reason, self.stop = "paused", "unsupported_version", None
        elif effect.kind == "stopped_without_finished":
            # Repair: the engine stopped and wrote no `finished` (a crash or a kill).
            self.state, self.reason, self.outcome = "failed", "no_finished", None
        else:
            raise ValueError(f"unknown state effect {effect.kind!r}")


@dataclass
class RunChanges:
    """What one batch does to one run, folded onto the locked row at commit time."""

    committed_micro_usd: int | None = None
    progress: dict[str, Any] | None = None
    state_effects: list[StateEffect] = field(default_factory=list)

    def fold_onto(self, run: RunView) -> None:
        if self.committed_micro_usd is not None:
            run.spend(self.committed_micro_usd)
        if self.progress is not None:
            run.progress = self.progress
        for effect in self.state_effects:
            run.apply_state(effect)

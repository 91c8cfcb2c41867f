"""The vocabulary of stream versions 1.3 and 1.4: one frozen dataclass per event type.

Each event validates its fields when it is built, so a bad value fails in the host's code, at the
call that made it, and never reaches the outbox. `data()` gives the `data` object of the line with
its keys in the documented order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from ._exit_codes import ExitCode
from ._money import require_micro_usd
from .errors import EventError, StreamVersionNotSupported
from .grammar import (
    IDENTIFIER_BYTES_MAX,
    INTEGER_MAX,
    STREAM_VERSION_PATTERN,
    TEXT_BYTES_MAX,
)

STREAM_VERSION = "1.3"
"""The stream version the emitter writes unless the host picks another of `STREAM_VERSIONS`."""
STREAM_VERSIONS = ("1.3", "1.4")
"""The stream versions the emitter can write. 1.4 adds one optional field, `hello.pid`."""
PID_SINCE = (1, 4)
"""The first stream version whose `hello` may carry `pid`."""
PID_MAX = INTEGER_MAX

StopKind = Literal["soft", "hard"]


def require_storable_str(value: str, name: str, limit_bytes: int) -> str:
    """Refuse a string no reader may accept: over `limit_bytes` of UTF-8, a U+0000, or a lone
    surrogate (which has no UTF-8 form). Postgres text and jsonb cannot hold U+0000."""
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise EventError(f"{name} is not valid Unicode (a lone surrogate)") from error
    if size > limit_bytes:
        raise EventError(f"{name} is {size} bytes of UTF-8, over the limit of {limit_bytes}")
    if "\x00" in value:
        raise EventError(f"{name} contains U+0000, which no reader can store")
    return value


def _require_str(
    value: object,
    name: str,
    *,
    allow_empty: bool = False,
    limit_bytes: int = IDENTIFIER_BYTES_MAX,
) -> str:
    if not isinstance(value, str):
        raise EventError(f"{name} must be a string, got {type(value).__name__}")
    if not allow_empty and not value:
        raise EventError(f"{name} must not be empty")
    return require_storable_str(value, name, limit_bytes)


def require_writable_stream_version(version: object) -> str:
    """Refuse a stream version the emitter does not write (`StreamVersionNotSupported`)."""
    if not isinstance(version, str) or version not in STREAM_VERSIONS:
        raise StreamVersionNotSupported(version, STREAM_VERSIONS)
    return version


def stream_version_tuple(version: str) -> tuple[int, int]:
    """`(MAJOR, MINOR)` of a stream version; `EventError` when it is not one."""
    match = STREAM_VERSION_PATTERN.fullmatch(version)
    if match is None:
        raise EventError(f"stream_version must be MAJOR.MINOR, got {version!r}")
    return int(match.group(1)), int(match.group(2))


def _require_count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INTEGER_MAX:
        raise EventError(f"{name} must be a non-negative 64-bit integer, got {value!r}")
    return value


class Event:
    """Base of the event types; `type` is the line's `type` field."""

    type: ClassVar[str]

    def data(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class Hello(Event):
    """First line of every stream, always seq 1. The emitter writes it; hosts do not.

    `pid` (since 1.4, optional) is the id of the process that writes the stream, as that process
    sees it (`os.getpid()`): what ties a stream to the exit status its launcher collects."""

    type: ClassVar[str] = "hello"
    engine_run_id: str
    book_id: str
    chunker_version: str
    stream_version: str = STREAM_VERSION
    pid: int | None = None

    def __post_init__(self) -> None:
        _require_str(self.engine_run_id, "engine_run_id")
        _require_str(self.book_id, "book_id")
        _require_str(self.chunker_version, "chunker_version", allow_empty=True)
        _require_str(self.stream_version, "stream_version")
        version = stream_version_tuple(self.stream_version)
        if self.pid is not None:
            if isinstance(self.pid, bool) or not isinstance(self.pid, int):
                raise EventError(f"pid must be an integer, got {type(self.pid).__name__}")
            if not 1 <= self.pid <= PID_MAX:
                raise EventError(f"pid must be from 1 to 2**63 - 1, got {self.pid}")
            if version < PID_SINCE:
                raise EventError(
                    f"pid is a field of stream 1.4; this hello is of stream {self.stream_version}"
                )

    def data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "stream_version": self.stream_version,
            "engine_run_id": self.engine_run_id,
            "book_id": self.book_id,
            "chunker_version": self.chunker_version,
        }
        if self.pid is not None:
            data["pid"] = self.pid
        return data


@dataclass(frozen=True)
class PhaseCount:
    done: int
    total: int

    def __post_init__(self) -> None:
        _require_count(self.done, "done")
        _require_count(self.total, "total")
        if self.done > self.total:
            raise EventError(f"done ({self.done}) must not exceed total ({self.total})")


@dataclass(frozen=True)
class Progress(Event):
    """A full snapshot of the per-phase counters; the latest one wins."""

    type: ClassVar[str] = "progress"
    phases: Mapping[str, PhaseCount]

    def __post_init__(self) -> None:
        for name, count in self.phases.items():
            _require_str(name, "phase name")
            if not isinstance(count, PhaseCount):
                raise EventError(f"phase {name!r} must be a PhaseCount")

    def data(self) -> dict[str, Any]:
        return {
            "phases": {
                name: {"done": count.done, "total": count.total}
                for name, count in self.phases.items()
            }
        }


@dataclass(frozen=True)
class UnitDone(Event):
    """A unit (chapter) was produced; the platform records it once."""

    type: ClassVar[str] = "unit_done"
    unit: str
    index: int

    def __post_init__(self) -> None:
        _require_str(self.unit, "unit")
        _require_count(self.index, "index")

    def data(self) -> dict[str, Any]:
        return {"unit": self.unit, "index": self.index}


@dataclass(frozen=True)
class BankStop(Event):
    """The engine stopped on a bank signature (exit 3)."""

    type: ClassVar[str] = "bank_stop"
    signature: str

    def __post_init__(self) -> None:
        _require_str(self.signature, "signature", limit_bytes=TEXT_BYTES_MAX)

    def data(self) -> dict[str, Any]:
        return {"signature": self.signature}


@dataclass(frozen=True)
class Ceiling(Event):
    """Stopped by the book's money ceiling: resumable, not a failure.

    `shortfall_micro_usd` is the engine's pre-call estimate of what is missing.
    """

    type: ClassVar[str] = "ceiling"
    shortfall_micro_usd: int
    halted: bool = True
    scope: Literal["book"] = "book"

    def __post_init__(self) -> None:
        require_micro_usd(self.shortfall_micro_usd, "shortfall_micro_usd")
        if not isinstance(self.halted, bool):
            raise EventError("halted must be a bool")
        if self.scope != "book":
            raise EventError(f"scope must be 'book', got {self.scope!r}")

    def data(self) -> dict[str, Any]:
        return {
            "halted": self.halted,
            "scope": self.scope,
            "shortfall_micro_usd": self.shortfall_micro_usd,
        }


@dataclass(frozen=True)
class Spend(Event):
    """CUMULATIVE committed spend of the book's ledger (never a delta): duplicates are harmless.

    Freshness only: building enforcement on this event is forbidden, because the stream is
    at-least-once and a crash truncates it.
    """

    type: ClassVar[str] = "spend"
    committed_micro_usd: int

    def __post_init__(self) -> None:
        require_micro_usd(self.committed_micro_usd, "committed_micro_usd")

    def data(self) -> dict[str, Any]:
        return {"committed_micro_usd": self.committed_micro_usd}


@dataclass(frozen=True)
class Finished(Event):
    """The last line of a stream that ended on purpose, built from its exit code: its `outcome`
    is the code's lower-case name (`ExitCode.outcome`), so the two cannot disagree."""

    type: ClassVar[str] = "finished"
    exit_code: ExitCode
    units_done: int
    units_total: int
    committed_micro_usd: int
    stop: StopKind | None = None
    refusal: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.exit_code, ExitCode):
            raise EventError(f"exit_code must be an ExitCode, got {self.exit_code!r}")
        _require_count(self.units_done, "units_done")
        _require_count(self.units_total, "units_total")
        require_micro_usd(self.committed_micro_usd, "committed_micro_usd")
        if self.stop not in (None, "soft", "hard"):
            raise EventError(f"stop must be null, 'soft' or 'hard', got {self.stop!r}")
        if self.refusal is not None:
            _require_str(self.refusal, "refusal")

    @property
    def outcome(self) -> str:
        return self.exit_code.outcome

    def data(self) -> dict[str, Any]:
        return {
            "outcome": self.exit_code.outcome,
            "exit_code": int(self.exit_code),
            "stop": self.stop,
            "refusal": self.refusal,
            "volume": {"units_done": self.units_done, "units_total": self.units_total},
            "money": {"committed_micro_usd": self.committed_micro_usd},
        }

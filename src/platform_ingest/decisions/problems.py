"""A problem of a journal, as the record kept of it: its kind, its seq and byte offset, its evidence.

What the rules, the replay of a compacted range and the scrub find in a journal is state: recorded
on its attempt (or on its book), stored in Postgres and shown by `show`, never raised. Each finding
is built here, with the detail Postgres keeps and `show` prints. A line the decoder refuses is the
one problem that is raised first (`LineRefused`, caught by whoever reads the line) and becomes a
record with `ProblemRecord.of`.

The kinds (`ProblemKind`) and the attempt state each one puts a stream in
(`views.state_for_problem`) are listed in docs/platform/states.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import LineRefused, ProblemKind

COMPACTED_RANGE_DETAIL = "seqs 1.."
"""How the detail of a problem of a whole compacted range begins: the mark by which a recorded
conflict is known to name no single line (`skip` refuses it: a skip passes one line)."""


@dataclass(frozen=True, slots=True)
class ProblemRecord:
    """The evidence kept for a problem (`show` prints kind, seq, offset, detail): `seq` is None
    when the line has none, `offset` the byte where the offending line starts (None when no line
    can be named). Messages never hold money amounts."""

    kind: ProblemKind
    seq: int | None
    offset: int | None
    detail: str

    @classmethod
    def of(cls, refused: LineRefused) -> ProblemRecord:
        """The record of a refusal of the decoder (or of Postgres's, `database_refused`)."""
        return cls(refused.kind, refused.seq, refused.offset, refused.detail)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ProblemRecord | None:
        if row["error_kind"] is None:
            return None
        return cls(row["error_kind"], row["error_seq"], row["error_offset"], row["error_detail"])

    def as_json(self) -> dict[str, Any]:
        """As `show --json` prints it: {"kind", "seq", "offset", "detail"}."""
        return {"kind": self.kind, "seq": self.seq, "offset": self.offset, "detail": self.detail}

    def names_compacted_range(self, compacted_seq: int) -> bool:
        """True when this is a conflict of the attempt's compacted range (seqs 1..compacted_seq),
        not of one line: which line changed is no longer known."""
        return (
            self.kind == "payload_conflict"
            and compacted_seq > 0
            and self.seq == compacted_seq
            and self.detail.startswith(f"{COMPACTED_RANGE_DETAIL}{compacted_seq} ")
        )


def problem_json(row: dict[str, Any]) -> dict[str, Any] | None:
    """A row's problem as `show --json` prints it: null, or `ProblemRecord.as_json`."""
    record = ProblemRecord.from_row(row)
    return None if record is None else record.as_json()


# --- found from the cursor: kind "gap", "payload_conflict", "book_mismatch", "foreign_stream_ahead"


def sequence_gap(*, expected_seq: int, seq: int, offset: int) -> ProblemRecord:
    """A line skips seqs: lines were lost, nothing after the hole is applied."""
    return ProblemRecord("gap", seq, offset, f"expected seq {expected_seq}, found seq {seq}")


def payload_conflict(
    *, seq: int, offset: int, applied_sha256: str, line_sha256: str
) -> ProblemRecord:
    """A line repeats an applied seq with other bytes. Quarantined, never retried."""
    return ProblemRecord(
        "payload_conflict",
        seq,
        offset,
        f"seq {seq} was applied with sha256 {applied_sha256}; this line has sha256 {line_sha256}",
    )


def compacted_conflict(
    *, last_seq: int, offset: int, applied_sha256: str, read_sha256: str
) -> ProblemRecord:
    """Lines of a compacted range, read again, do not hash to the digest kept for it: some line of
    seqs 1..`last_seq` changed, which one is no longer known (its own hash was compacted away)."""
    return ProblemRecord(
        "payload_conflict",
        last_seq,
        offset,
        f"{COMPACTED_RANGE_DETAIL}{last_seq} were compacted to the digest {applied_sha256}; the "
        f"lines read again hash to {read_sha256} (a line of them changed; which one is no longer "
        "known)",
    )


def compacted_range_broken(
    *, last_seq: int, missing_seq: int, offset: int, applied_sha256: str
) -> ProblemRecord:
    """A scrub of the journal that holds a compacted range did not find one of its seqs as it was
    applied (missing, out of order, unreadable): a line changed or was cut away. No single line
    can be skipped (its detail begins as a `compacted_conflict`'s)."""
    return ProblemRecord(
        "payload_conflict",
        last_seq,
        offset,
        f"{COMPACTED_RANGE_DETAIL}{last_seq} were compacted to the digest {applied_sha256}; the "
        f"journal no longer holds seq {missing_seq} of them as it was applied (found at byte "
        f"{offset}; a line of them changed or was cut away)",
    )


def applied_line_missing(*, seq: int, applied_sha256: str, read_to: int) -> ProblemRecord:
    """A scrub read the whole journal and met no line of an applied seq with the bytes applied
    there: it changed past recognition or was cut away. No line is named (`offset` None), so none
    can be skipped: the journal put back and `release`, or `abandon`."""
    return ProblemRecord(
        "payload_conflict",
        seq,
        None,
        f"seq {seq} was applied with sha256 {applied_sha256}; the journal holds no line of seq "
        f"{seq} with those bytes before byte {read_to} (it changed, or was cut away)",
    )


def book_mismatch(*, offset: int) -> ProblemRecord:
    """A hello names another book than the one this directory is registered for."""
    return ProblemRecord(
        "book_mismatch",
        1,
        offset,
        "the hello's book_id is not the book this directory is registered for",
    )


def foreign_stream_ahead(*, offset: int, engine_run_id: str) -> ProblemRecord:
    """A hello of a stream not named for this book, after our own lines: the pass stops on it."""
    return ProblemRecord(
        "foreign_stream_ahead",
        1,
        offset,
        f"stream {engine_run_id} is not named for this book; waiting for it to be named",
    )


# --- found from the line's place in the file: kind "malformed", as a line no reader may accept


def line_before_hello(*, seq: int | None, offset: int, refused: str | None) -> ProblemRecord:
    """A line before any hello in the file (`refused`: the decoder's detail, when it refused the
    line too): it belongs to no stream, and is kept on the book."""
    detail = "a line before any hello" if refused is None else f"a line before any hello: {refused}"
    return ProblemRecord("malformed", seq, offset, detail)


def line_outside_stream(*, seq: int | None, offset: int, refused: str) -> ProblemRecord:
    """A line that cannot be read, after a finished stream and before the next hello: it belongs
    to no stream we can name, and a finished stream is never changed by it."""
    return ProblemRecord("malformed", seq, offset, f"a line after a finished stream: {refused}")


def line_after_finished(*, seq: int, finished_seq: int, offset: int) -> ProblemRecord:
    """A new seq of a stream after its `finished`, which is the last line of a stream: applying
    it would reopen a completed run (a `ceiling` pausing it, a `spend` adding money)."""
    return ProblemRecord(
        "malformed",
        seq,
        offset,
        f"seq {seq} comes after the stream's finished (seq {finished_seq})",
    )

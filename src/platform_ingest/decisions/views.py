"""The cursor of an attempt, and what a pass knows of a book, as loaded from Postgres.

An attempt's cursor is `(engine_run_id, last_seq)` plus what recognises an applied line again:
`last_line_sha256` here and one sha256 per applied seq in `line_hashes`. Its `hint` (offset just
past the last applied line, that line's length and hash, and the file identity) only says where
reading may start. `committed_last_seq` is the value Postgres holds: the compare-and-set of the
next commit expects it.

Attempt states: `pending` (named, nothing applied), `active`, `parked` (a foreign hello ahead),
`finished`, `stalled` (a gap), `quarantined` (payload_conflict, malformed, book_mismatch,
database_refused), `refused` (unsupported_version), `superseded` (a later stream began before this
one finished), `exited` (the launcher reported the process's exit status, no `finished` yet),
`disowned` (an operator said the stream is not ours), `abandoned` (an operator gave it up).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from ..errors import BookProblemKind, LineRefused, ProblemKind, StreamProblem
from ..journal.reader import Hint
from .runs import RunView

Mode = Literal["auto", "named"]
"""Whose streams a pass follows: every stream of the book (`auto`), or the streams named for it."""

AttemptState = Literal[
    "pending",
    "active",
    "parked",
    "finished",
    "stalled",
    "quarantined",
    "refused",
    "superseded",
    "exited",
    "disowned",
    "abandoned",
]
ATTEMPT_STATES: tuple[AttemptState, ...] = get_args(AttemptState)
FOLLOWED_STATES: frozenset[AttemptState] = frozenset(
    {"active", "parked", "finished", "superseded", "exited"}
)
"""A stream in one of these states is still read: new seqs applied, duplicates compared."""
STOPPED_STATES: frozenset[AttemptState] = frozenset(
    {"stalled", "quarantined", "refused", "disowned", "abandoned"}
)
"""Nothing more of a stream in one of these states is read (until an operator releases it, for
the first three; never, for a stream disowned or abandoned)."""
LIVE_STATES: frozenset[AttemptState] = frozenset({"active", "parked"})
"""States whose hint is a place a pass must start from."""
RELEASABLE_STATES: frozenset[AttemptState] = frozenset({"quarantined", "stalled", "refused"})
AWAITING_STATES: frozenset[AttemptState] = frozenset({"pending", "active", "parked"})
"""States of an attempt that waits for more lines of its journal: one of them with its journal
gone is the book's `journal_missing` (a `pending` one only once the journal was read)."""


def awaits_lines(states: Iterable[AttemptState], *, journal_read: bool) -> bool:
    """Whether a book whose attempts are in these states waits for lines of its journal: an
    attempt `active` or `parked`, or `pending` once the journal was read (a line of the book
    applied, or passed; a `pending` attempt of a book whose engine has not written yet has no
    journal to miss). Such a book with its journal gone has the problem `journal_missing`."""
    return any(
        state in AWAITING_STATES and (state != "pending" or journal_read) for state in states
    )


PASS_PROBLEM_KINDS: tuple[BookProblemKind, ...] = (
    "journal_missing",
    "journal_unreadable",
    "journal_not_regular",
    "journal_outside_roots",
    "database_refused",
    "database_timeout",
)
"""Book problems a pass finds, and clears itself once a pass over the book goes through."""
BOOK_PATH_CONFLICT: BookProblemKind = "book_path_conflict"
"""A book problem found while registering: a second directory with the book's name."""

_STATE_OF_PROBLEM: dict[ProblemKind, AttemptState] = {
    "gap": "stalled",
    "unsupported_version": "refused",
    "foreign_stream_ahead": "parked",
}


def state_for_problem(kind: ProblemKind) -> AttemptState:
    """The attempt state a stream problem puts it in."""
    return _STATE_OF_PROBLEM.get(kind, "quarantined")


@dataclass(frozen=True, slots=True)
class PassProblem:
    """A problem a pass met: on a stream (`engine_run_id`), or on the book as a whole (None)."""

    engine_run_id: str | None
    kind: ProblemKind

    def __str__(self) -> str:
        """As `sweep --json` prints it: `"<engine_run_id>: <kind>"` or `"(book): <kind>"`."""
        where = "(book)" if self.engine_run_id is None else self.engine_run_id
        return f"{where}: {self.kind}"


@dataclass(frozen=True, slots=True)
class ProblemRecord:
    """The evidence kept for a stream problem (`show` prints kind, seq, offset, detail)."""

    kind: ProblemKind
    seq: int | None
    offset: int | None
    detail: str

    @classmethod
    def of(cls, problem: StreamProblem | LineRefused) -> ProblemRecord:
        return cls(problem.kind, problem.seq, problem.offset, problem.detail)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ProblemRecord | None:
        if row["error_kind"] is None:
            return None
        return cls(row["error_kind"], row["error_seq"], row["error_offset"], row["error_detail"])

    def as_params(self) -> tuple[ProblemKind, int | None, int | None, str]:
        return (self.kind, self.seq, self.offset, self.detail)

    def as_json(self) -> dict[str, Any]:
        """As `show --json` prints it: {"kind", "seq", "offset", "detail"}."""
        return {"kind": self.kind, "seq": self.seq, "offset": self.offset, "detail": self.detail}


def problem_json(row: dict[str, Any]) -> dict[str, Any] | None:
    """A row's problem as `show --json` prints it: null, or `ProblemRecord.as_json`."""
    record = ProblemRecord.from_row(row)
    return None if record is None else record.as_json()


def compacted_digest(line_hashes: Iterable[bytes]) -> bytes:
    """The digest a compacted range keeps: the sha256 of its lines' sha256s, in seq order from 1
    (a re-read builds the same one line by line, `hashlib.sha256().update`)."""
    digest = hashlib.sha256()
    for line_hash in line_hashes:
        digest.update(line_hash)
    return digest.digest()


NO_PROBLEM_PARAMS: tuple[None, None, None, None] = (None, None, None, None)


@dataclass(eq=False)
class AttemptView:
    """One attempt as a pass sees it. `attempt_id` is None until the attempt is inserted.

    The hint is kept as plain fields (it moves with every applied line); its line is always the
    last applied one, so its hash is `last_line_sha256`. `sealed_last_seq` is `last_seq` as of the
    last batch handed to the writer: the value the next batch's compare-and-set expects.
    """

    engine_run_id: str
    run: RunView
    attempt_id: int | None = None
    state: AttemptState = "pending"
    last_seq: int = 0
    sealed_last_seq: int = 0
    last_line_sha256: bytes | None = None
    hint_offset: int = 0
    hint_line_bytes: int = 0
    hint_file: str | None = None
    stream_index: int | None = None
    stream_version: str | None = None
    chunker_version: str | None = None
    error: ProblemRecord | None = None
    last_line_time: str | None = None
    drives_run: bool = False
    """True for the run's latest stream: only it moves the run's state."""
    applied_in_batch: bool = False
    exit_status: int | None = None
    """What the launcher reported (`exited`): without a `finished`, the run takes its reading."""
    has_skips: bool = False
    skips: dict[bytes, int] | None = None
    """sha256 -> seq of the lines an operator skipped (`skip`); loaded only when `has_skips`."""
    compacted_seq: int = 0
    compacted_sha256: bytes | None = None
    """Seqs 1..compacted_seq have no hash of their own any more: theirs, in seq order, hash to
    this digest (`compacted_digest`)."""

    @classmethod
    def from_row(cls, row: dict[str, Any], run: RunView) -> AttemptView:
        return cls(
            engine_run_id=row["engine_run_id"],
            run=run,
            attempt_id=row["attempt_id"],
            state=row["state"],
            last_seq=row["last_seq"],
            sealed_last_seq=row["last_seq"],
            last_line_sha256=row["last_line_sha256"],
            hint_offset=row["hint_offset"],
            hint_line_bytes=row["hint_line_bytes"],
            hint_file=row["hint_file"],
            stream_index=row["stream_index"],
            stream_version=row["stream_version"],
            chunker_version=row["chunker_version"],
            error=ProblemRecord.from_row(row),
            last_line_time=row["last_line_time"],
            exit_status=row["exit_status"],
            has_skips=row["has_skips"],
            compacted_seq=row["compacted_seq"],
            compacted_sha256=row["compacted_sha256"],
        )

    @property
    def hint(self) -> Hint:
        return Hint(self.hint_offset, self.hint_line_bytes, self.last_line_sha256, self.hint_file)

    def forget_hint(self) -> None:
        self.hint_offset, self.hint_line_bytes, self.hint_file = 0, 0, None

    def seal(self) -> tuple[Any, ...]:
        """Parameters of `statements.ATTEMPT_ADVANCE` up to (not including) `attempt_id` and the
        expected `last_seq`, taken now; the attempt's sealed seq moves on to its `last_seq`."""
        error = self.error.as_params() if self.error is not None else NO_PROBLEM_PARAMS
        values = (
            self.state,
            self.last_seq,
            self.last_line_sha256,
            self.hint_offset,
            self.hint_line_bytes,
            self.hint_file,
            self.stream_index,
            self.stream_version,
            self.chunker_version,
            *error,
            self.last_line_time,
            self.applied_in_batch,
        )
        self.applied_in_batch = False
        return values


@dataclass(eq=False)
class BookView:
    """A registered book: its directory, the book-level scan hint, a problem before any hello."""

    book_id: str
    path: str
    scan: Hint
    scan_stream: str | None
    scan_mode: Mode | None
    scan_epoch: int
    error: ProblemRecord | None
    problem_kinds: tuple[BookProblemKind, ...] = ()
    """The kinds of the book's standing problems (`book_problems`): a journal that is not a
    regular file, a swapped directory, a value Postgres refused, a same-named directory."""
    starts_from_zero: bool = False
    """Every foreign hello since byte 0 of the journal has its start in `stream_starts`."""
    starts_recorded: int = 0

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> BookView:
        return cls(
            book_id=row["book_id"],
            path=row["path"],
            scan=Hint(
                row["scan_offset"], row["scan_line_bytes"], row["scan_sha256"], row["scan_file"]
            ),
            scan_stream=row["scan_stream"],
            scan_mode=row["scan_mode"],
            scan_epoch=row["scan_epoch"],
            error=ProblemRecord.from_row(row),
            problem_kinds=tuple(row["problem_kinds"] or ()),
            starts_from_zero=row["starts_from_zero"],
            starts_recorded=row["starts_recorded"],
        )

    def scan_params(self) -> tuple[Any, ...]:
        """Parameters of `statements.BOOK_SCAN_ADVANCE`, in order (the epoch check comes last)."""
        error = self.error.as_params() if self.error is not None else NO_PROBLEM_PARAMS
        return (
            self.scan.offset,
            self.scan.line_bytes,
            self.scan.sha256,
            self.scan.file,
            self.scan_stream,
            self.scan_mode,
            *error,
            self.starts_from_zero,
            self.book_id,
            self.scan_epoch,
        )

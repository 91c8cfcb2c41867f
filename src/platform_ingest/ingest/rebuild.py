"""`platform-ingest rebuild`: a projection caught up from the journals still on disk.

A projection's own cursor per attempt (`projection_tracking`) says which seqs it was given. A
rebuild gives it, attempt by attempt, the lines past that cursor up to the platform's cursor, read
again from the book's journal, and nothing of the platform's own effects is applied again.

A projection that raises stops the rebuild (`ProjectionFailed`), with nothing of its batch
committed. Each batch is one transaction, in the apply transaction's lock order:

1. the attempt's row, for share: its cursor as committed (a live batch of it waits);
2. the projection's registry row, for share: still the version being rebuilt;
3. the projection's tracking row, for update (created at 0 the first time);
4. the events past the tracking cursor, at most `batch_events`, up to the platform's cursor; the
   projection's `apply`, the check that no platform table was written; the tracking cursor moves.

So the seam with a live worker is exact: a live batch gives the projection an attempt's events
only when the tracking cursor equals the attempt's cursor before the batch, and both lock the
attempt row first and the tracking row last. Whichever commits first, each seq is given once. A
crash between batches leaves the tracking cursor equal to what the projection's tables hold: the
next rebuild goes on from there.

A line is given only when its bytes are the ones the platform applied at its seq: compared with
`line_hashes` above the attempt's compacted range, and, for a compacted range, by its digest over
every line of the range before any of them is given. Lines an operator skipped are passed with no
event. What cannot be replayed is reported per stream with its seqs and why: the journal is gone
or unreadable, the lines are no longer in it (rotated, truncated), the lines found do not match
what was applied, or the stream's run was pruned.

A projection registered at another version is first brought to this one, in one transaction: its
`reset(session)` empties its tables, its tracking is forgotten, and the registry takes the new
version. Live workers of the old version are then given nothing; those of the new version follow
new streams at once and the rest as the rebuild catches up.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._defaults import REBUILD_BATCH_EVENTS_MAX as BATCH_EVENTS_MAX
from ..decisions.views import BookView, compacted_digest
from ..errors import (
    CursorMoved,
    JournalMissing,
    JournalUnreadable,
    MalformedLine,
    ProjectionInvalid,
)
from ..journal.line import Line
from ..journal.reader import Journal, open_journal
from ..journal.sections import section_lines
from ..projections import Event, Projection, ProjectionSession, check_projections
from ..store import statements
from ..store.db import Database, Row
from .books import book_ref, load_book
from .projection_step import apply_verified

logger = logging.getLogger("platform_ingest")

HASH_WINDOW_SEQS = 4_096

UnreplayableReason = Literal[
    "journal_missing", "journal_unreadable", "lines_missing", "lines_differ", "pruned"
]
RebuildHook = Callable[[str, int], None]
"""Called with (engine_run_id, tracking seq) after each rebuild transaction commits (tests stop a
rebuild there, as a crash would)."""


@dataclass(frozen=True)
class Unreplayable:
    """Seqs `first_seq`..`last_seq` of a stream that the rebuild could not give the projection."""

    book_id: str
    engine_run_id: str
    first_seq: int
    last_seq: int
    reason: UnreplayableReason
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {
            "book_id": self.book_id,
            "engine_run_id": self.engine_run_id,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "reason": self.reason,
            "detail": self.detail,
        }


@dataclass
class RebuildReport:
    projection: str
    version: int
    reset_from: int | None = None
    """The version the projection's tables held before this rebuild reset them, if it did."""
    books: int = 0
    streams_caught_up: int = 0
    events_given: int = 0
    cannot_replay: list[Unreplayable] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "projection": self.projection,
            "version": self.version,
            "reset_from": self.reset_from,
            "books": self.books,
            "streams_caught_up": self.streams_caught_up,
            "events_given": self.events_given,
            "cannot_replay": [each.as_json() for each in self.cannot_replay],
        }


RebuildProgress = Callable[[RebuildReport], None]
"""Shown the report as it grows, for a person's view of a long rebuild (`rebuild`)."""


def rebuild(
    db: Database,
    projection: Projection,
    book_ids: Sequence[str] | None = None,
    *,
    batch_events: int = BATCH_EVENTS_MAX,
    hook: RebuildHook | None = None,
    progress: RebuildProgress | None = None,
) -> RebuildReport:
    """Catch `projection` up on the given books (every registered book when None). `progress` is
    shown the report as it grows: when a book is begun, and after each commit."""
    if batch_events < 1:
        raise ValueError("batch_events must be at least 1")
    (projection,) = check_projections([projection])
    report = RebuildReport(projection.name, projection.version)
    report.reset_from = _bring_to_version(db, projection)
    run = _Rebuild(db, projection, report, batch_events, hook, progress)
    for book_id in _book_ids(db) if book_ids is None else book_ids:
        report.books += 1
        if progress is not None:
            progress(report)
        run.book(load_book(db, book_id))
    db.execute(statements.PROJECTION_REBUILT, (projection.name,))
    return report


def _book_ids(db: Database) -> Iterator[str]:
    after = ""
    while True:
        page = db.fetch_all(statements.BOOKS_PAGE, (after, 500))
        yield from (row["book_id"] for row in page)
        if len(page) < 500:
            return
        after = page[-1]["book_id"]


def _bring_to_version(db: Database, projection: Projection) -> int | None:
    """Register the projection, or reset it when Postgres holds another version of its data;
    returns the version reset from, if any. Runs its `setup` in the same transaction."""
    with db.transaction():
        db.execute(statements.PROJECTION_REGISTER, (projection.name, projection.version))
        row = db.fetch_one(statements.PROJECTION_LOCK_FOR_REBUILD, (projection.name,))
        registered = None if row is None else int(row["version"])
        session = ProjectionSession(db.connection, projection.name)
        reset_from = None
        if registered != projection.version:
            reset = getattr(projection, "reset", None)
            if not callable(reset):
                raise ProjectionInvalid(
                    f"projection {projection.name}: Postgres holds version {registered} of its "
                    f"data and this is version {projection.version}; it needs a reset() method "
                    "that empties its tables before a rebuild"
                )
            reset(session)
            db.execute(statements.PROJECTION_TRACKING_FORGET, (projection.name,))
            db.execute(statements.PROJECTION_VERSION_SET, (projection.version, projection.name))
            reset_from = registered
            logger.warning(
                "projection %s: version %s reset for version %d",
                projection.name,
                registered,
                projection.version,
            )
        projection.setup(session)
    return reset_from


class _StreamLines:
    """One stream's lines in its journal, in seq order from 1, each the line the platform applied
    at its seq (see the module docstring); `take` hands them out batch by batch."""

    def __init__(self, db: Database, journal: Journal, attempt: Row) -> None:
        self.db = db
        self.attempt = attempt
        self.attempt_id: int = attempt["attempt_id"]
        self.engine_run_id: str = attempt["engine_run_id"]
        self.compacted_seq: int = attempt["compacted_seq"]
        self.stream_version: str | None = attempt["stream_version"]
        start = max(0, (attempt["stream_index"] or 1) - 1)
        self.journal = journal
        self.start = start
        self.lines = self._own_lines(start)
        self.next_seq = 1
        self.hashes: dict[int, bytes] = {}
        self.skips = {
            seq: bytes(sha256)
            for _, seq, sha256 in db.fetch_tuples(
                statements.LINE_SKIPS_OF_ATTEMPTS, ([self.attempt_id],)
            )
        }
        self.problem: tuple[UnreplayableReason, str] | None = None

    def _own_lines(self, start: int) -> Iterator[tuple[int | None, bytes, Line | None]]:
        """(seq, raw, decoded line) of each line in this stream's sections, from `start`; a
        line that does not decode comes as (None, raw, None): an operator may have skipped it."""
        own, version = self.engine_run_id, self.stream_version
        for found in section_lines(
            self.journal.lines(start), version_of=lambda stream: version if stream == own else None
        ):
            if found.stream == own and not isinstance(found.raw, MalformedLine):
                yield (None if found.line is None else found.line.seq), found.raw, found.line

    def verify_compacted(self) -> bool:
        """The first line of each seq 1..compacted_seq, in this stream's sections, hash to the
        attempt's compacted digest (read once, before any of the range is given)."""
        digests: list[bytes] = []
        for seq, raw, _ in self._own_lines(self.start):
            digest = hashlib.sha256(raw).digest()
            if seq == len(digests) + 1 or digest == self.skips.get(len(digests) + 1):
                digests.append(digest)
                if len(digests) == self.compacted_seq:
                    break
        if len(digests) < self.compacted_seq:
            self.problem = (
                "lines_missing",
                f"the journal holds seqs 1..{len(digests)} of the compacted 1..{self.compacted_seq}",
            )
            return False
        if compacted_digest(digests) != bytes(self.attempt["compacted_sha256"] or b""):
            self.problem = (
                "lines_differ",
                f"the journal's seqs 1..{self.compacted_seq} are not the compacted range applied",
            )
            return False
        return True

    def _applied_sha256(self, seq: int) -> bytes | None:
        found = self.hashes.get(seq)
        if found is None:
            rows = self.db.fetch_tuples(
                statements.LINE_HASHES_WINDOW, (self.attempt_id, seq, seq + HASH_WINDOW_SEQS)
            )
            self.hashes = {row_seq: bytes(value) for row_seq, value in rows}
            found = self.hashes.get(seq)
        return found

    def take(self, after_seq: int, to_seq: int, limit: int) -> tuple[list[Line], int]:
        """The lines of seqs after `after_seq` up to `to_seq` (at most `limit` events), and the
        last seq they cover (skipped lines included); fewer when the journal ends first."""
        lines: list[Line] = []
        covered = after_seq
        self.next_seq = max(self.next_seq, after_seq + 1)
        while covered < to_seq and len(lines) < limit:
            found: tuple[int, bytes, Line | None] | None = None
            skipped = self.skips.get(self.next_seq)
            for seq, raw, line in self.lines:
                if seq is None and skipped is None:
                    continue
                if seq is not None and seq != self.next_seq:
                    continue
                digest = hashlib.sha256(raw).digest()
                if digest == skipped:
                    found = (self.next_seq, digest, None)  # passed with no event
                    break
                if seq is None or line is None:
                    continue
                if seq > self.compacted_seq and digest != self._applied_sha256(seq):
                    continue  # a line of this seq the platform did not apply
                found = (seq, digest, line)
                break
            if found is None:
                self.problem = (
                    "lines_missing",
                    f"no line of seq {self.next_seq} with the applied bytes is left in the journal",
                )
                break
            seq, digest, line = found
            if line is not None:
                lines.append(line)
            covered = seq
            self.next_seq = seq + 1
            self.hashes.pop(seq, None)
        return lines, covered


@dataclass
class _Rebuild:
    """One rebuild's settings and report, book after book."""

    db: Database
    projection: Projection
    report: RebuildReport
    batch_events: int
    hook: RebuildHook | None
    progress: RebuildProgress | None

    def book(self, book: BookView) -> None:
        """Every stream of the book behind the projection's tracking, caught up."""
        db, projection, report = self.db, self.projection, self.report
        for engine_run_id, last_seq, tracked in db.fetch_tuples(
            statements.PRUNED_STREAMS_FOR_REBUILD, (projection.name, book.book_id)
        ):
            if tracked < last_seq:
                report.cannot_replay.append(
                    Unreplayable(
                        book.book_id,
                        engine_run_id,
                        tracked + 1,
                        last_seq,
                        "pruned",
                        "the stream's run was pruned: its lines are never applied again",
                    )
                )
        attempts = db.fetch_all(statements.ATTEMPTS_OF_BOOK, (book.book_id,))
        if not attempts:
            return
        tracked_of = dict(
            db.fetch_tuples(
                statements.PROJECTION_TRACKING_OF_ATTEMPTS,
                (projection.name, [row["attempt_id"] for row in attempts]),
            )
        )
        behind = [row for row in attempts if tracked_of.get(row["attempt_id"], 0) < row["last_seq"]]
        if not behind:
            return
        kind: Literal["journal_missing", "journal_unreadable"] = "journal_missing"
        try:
            journal = open_journal(book.path)
        except JournalMissing as error:
            journal, why = None, str(error)
        except JournalUnreadable as error:
            journal, why = None, f"the journal could not be opened: {error}"
            kind = "journal_unreadable"
        else:
            why = "there is no journal at the book's path"
        if journal is None:
            for row in behind:
                report.cannot_replay.append(
                    Unreplayable(
                        book.book_id,
                        row["engine_run_id"],
                        tracked_of.get(row["attempt_id"], 0) + 1,
                        row["last_seq"],
                        kind,
                        why,
                    )
                )
            return
        with journal:
            for row in behind:
                self.catch_up(book, row, journal)

    def catch_up(self, book: BookView, attempt: Row, journal: Journal) -> None:
        """Give the projection the attempt's lines past its tracking cursor (module docstring)."""
        db, projection, report = self.db, self.projection, self.report
        stream = _StreamLines(db, journal, attempt)
        engine_run_id, attempt_id = attempt["engine_run_id"], attempt["attempt_id"]
        verified_compacted = False
        while True:
            with db.transaction():
                row = db.fetch_one(statements.ATTEMPT_CURSOR_SHARE, (attempt_id,))
                versions = dict(db.fetch_tuples(statements.PROJECTIONS_LOCK, ([projection.name],)))
                if row is None or versions.get(projection.name) != projection.version:
                    return  # pruned, or reset by another rebuild meanwhile
                platform_seq = int(row["last_seq"])
                db.execute(statements.PROJECTION_TRACKING_START, (projection.name, attempt_id))
                locked = db.fetch_one(
                    statements.PROJECTION_TRACKING_ONE_LOCK, (projection.name, attempt_id)
                )
                tracked = 0 if locked is None else int(locked["last_seq"])
                if tracked >= platform_seq:
                    report.streams_caught_up += 1
                    return
                if tracked < stream.compacted_seq and not verified_compacted:
                    verified_compacted = stream.verify_compacted()
                    if not verified_compacted:
                        self.cannot(book, engine_run_id, (tracked, platform_seq), stream)
                        return
                lines, covered = stream.take(tracked, platform_seq, self.batch_events)
                if covered == tracked:
                    self.cannot(book, engine_run_id, (tracked, platform_seq), stream)
                    return
                events = [
                    Event(
                        book.book_id,
                        attempt["run_id"],
                        attempt_id,
                        engine_run_id,
                        line.seq,
                        line.type,
                        line.time,
                        line.data,
                    )
                    for line in lines
                ]
                if events:
                    apply_verified(db, projection, events, attempt_id, engine_run_id)
                moved = db.execute(
                    statements.PROJECTION_TRACKING_ADVANCE,
                    (covered, projection.name, attempt_id, tracked),
                )
                if moved != 1:
                    raise CursorMoved(f"the tracking of {projection.name} moved under the rebuild")
            report.events_given += len(events)
            if self.progress is not None:
                self.progress(report)
            if self.hook is not None:
                self.hook(engine_run_id, covered)

    def cannot(
        self, book: BookView, engine_run_id: str, seqs: tuple[int, int], stream: _StreamLines
    ) -> None:
        """Seqs after `seqs[0]` up to `seqs[1]` of the stream cannot be given: say why."""
        report = self.report
        tracked, platform_seq = seqs
        reason, detail = stream.problem or ("lines_missing", "the journal ends before the cursor")
        report.cannot_replay.append(
            Unreplayable(book.book_id, engine_run_id, tracked + 1, platform_seq, reason, detail)
        )
        logger.warning(
            "rebuild of %s: book %s stream %s seqs %d..%d cannot be replayed (%s)",
            report.projection,
            book_ref(book.book_id),
            engine_run_id,
            tracked + 1,
            platform_seq,
            reason,
        )

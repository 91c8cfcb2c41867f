"""The scrub: a book's applied lines read again from its journal and compared with what was applied.

A pass reads only past its cursor, so a line changed in place after it was applied (same size, same
file) would never be looked at again. The scrub reads the journal from byte 0 to its size when the
scrub began, gives each line to the stream of the latest hello above it that names one
(`journal.sections`), and compares every line of an applied seq (a seq at most the attempt's
`last_seq` when the scrub began) with what the platform kept of it (docs/platform/cursor.md):

- a seq with its own hash (`line_hashes`): the line's sha256 must be that hash, or the one of a
  line an operator skipped at that seq;
- a compacted range (seqs 1..compacted_seq): its lines, met in seq order, build the digest again,
  which must be the one kept; a repeat of a seq of the latest 4,096 is compared with that copy.

An attempt whose last applied line was read in this very file (its hint names the file) must show
every applied seq in it: its first hello at the offset where a pass first read it (the attempt's
place in the book), and each seq first met in seq order. A seq that is missing, met out of order,
or whose place an unreadable line takes (just past the stream's last line met) is a mismatch too.
An attempt whose lines were read in another file (the journal was replaced since) has only the
lines found compared; what could not be is counted `unverified`.

Each mismatch is recorded on its attempt as the pass records a conflict (`payload_conflict`, the
attempt quarantined, with both hashes as evidence), on an attempt that has no problem standing
(active, exited, finished, superseded); the cursor and the applied effects are not touched. The
remedies are those of any `payload_conflict` (docs/platform/states.md).

A scrub is made of steps (`BookScrub.step`), each under the book's advisory lock, as a pass holds
it: a step never runs beside a pass, and between two steps passes go on. A change of the book
between two steps that the scrub cannot follow (an operator's remedy or a compaction, which bump
the book's epoch; a stream pruned; the journal replaced or cut shorter) starts the scrub over. It
reads the file as a pass does, in bounded memory. `scrub_books` is the `scrub` command's;
`BackgroundScrub` is the worker's, at a bounded rate (`--scrub-bytes-per-s`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .._plain import plain
from ..decisions.problems import (
    ProblemRecord,
    applied_line_missing,
    compacted_conflict,
    compacted_range_broken,
    payload_conflict,
)
from ..decisions.replay import REPLAY_WINDOW_SEQS
from ..decisions.views import AttemptState
from ..errors import (
    DatabaseUnavailable,
    IngestError,
    JournalUnreadable,
    LineRefused,
    MalformedLine,
    NotFound,
    UnsupportedVersion,
)
from ..ingest.apply import problem_params
from ..ingest.books import book_lock_key, book_ref, load_book
from ..journal.line import Line
from ..journal.reader import Journal, open_journal
from ..journal.sections import read_line, stream_started
from ..store import statements
from ..store.db import Database, Row

logger = logging.getLogger("platform_ingest")

STEP_BYTES_MAX = 1024 * 1024
"""The most bytes of lines one step reads (a longer line is read whole): how long the book's lock
is held at once, and how long the worker's loop goes without looking at what else is due."""
HASH_WINDOW_SEQS = 4096
"""How many applied line hashes one lookup fetches (lines come in seq order)."""
RECORDABLE_STATES: frozenset[AttemptState] = frozenset(
    {"active", "exited", "finished", "superseded"}
)
"""The states with no problem standing, whose attempt a mismatch quarantines. Another state keeps
what it stands for (a problem an operator is looking at, an abandon): the mismatch is reported."""
STEP_COST_BYTES_MIN = 64 * 1024
"""What one step of the background scrub costs its token bucket at least, however few bytes it
read: a step's fixed work (the book's lock, its rows loaded, its journal opened: some five round
trips) is worth reading about this much. Without it, a worker of thousands of small books would
scrub thousands of them a second on its 1 MiB/s and spend its loop on their fixed costs."""
BUCKET_S = 5.0
"""The background scrub's token bucket holds at most this many seconds of its rate: a loop that
turned late (a long pass) catches up that much, no more."""
BUSY_WAIT_S = 0.05
"""`scrub_books`: the wait before the book's lock is tried again while a pass holds it."""

Outcome = Literal["clean", "mismatch", "busy", "unread"]


@dataclass
class Mismatch:
    """An applied line the journal no longer holds as it was applied."""

    engine_run_id: str
    problem: ProblemRecord
    recorded: bool = False
    """True when this scrub quarantined the attempt with it."""
    state: AttemptState | None = None
    """The attempt's state after the scrub."""

    def as_json(self) -> dict[str, Any]:
        return {
            "engine_run_id": self.engine_run_id,
            **self.problem.as_json(),
            "recorded": self.recorded,
            "state": self.state,
        }


@dataclass
class ScrubReport:
    """What one scrub of one book found (docs/reference/json-output.md, "scrub")."""

    book_id: str
    path: str
    outcome: Outcome = "clean"
    reason: str | None = None
    """Why the book was not read (`unread`, `busy`), else None."""
    bytes_read: int = 0
    lines_read: int = 0
    lines_compared: int = 0
    ranges_compared: int = 0
    """Compacted ranges whose digest was built again and compared."""
    unverified: int = 0
    """Lines of an applied seq that could not be compared (their range not read whole, in order)."""
    streams: int = 0
    """Attempts with applied lines, compared."""
    restarts: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "book_id": self.book_id,
            "path": self.path,
            "outcome": self.outcome,
            "reason": self.reason,
            "bytes_read": self.bytes_read,
            "lines_read": self.lines_read,
            "lines_compared": self.lines_compared,
            "compacted_ranges_compared": self.ranges_compared,
            "unverified_lines": self.unverified,
            "streams": self.streams,
            "restarts": self.restarts,
            "mismatches": [mismatch.as_json() for mismatch in self.mismatches],
        }


class _Stream:
    """One attempt's applied lines as the scrub meets them."""

    def __init__(self, row: Row, identity: str, skips: dict[bytes, int]) -> None:
        self.attempt_id: int = row["attempt_id"]
        self.engine_run_id: str = row["engine_run_id"]
        self.state: AttemptState = row["state"]
        self.last_seq: int = row["last_seq"]
        """As when the scrub began: a seq applied since is the next passes' to read."""
        self.compacted_seq: int = row["compacted_seq"]
        self.compacted_sha256: bytes | None = row["compacted_sha256"]
        self.stream_version: str | None = row["stream_version"]
        self.skips = skips
        """sha256 -> seq of the lines an operator skipped."""
        self.strict = row["hint_file"] == identity and row["hint_offset"] > 0
        """Its last applied line was read in this file: every applied seq must be in it, each
        first met in seq order."""
        self.hello_at: int | None = (
            row["stream_index"] - 1 if self.strict and row["stream_index"] else None
        )
        """Where its first hello was read (the stream's place in the book): in this file, for a
        strict stream, the hello must still be there."""
        self.next_seq = 1
        """The least seq not met yet (every seq before it was met, in order)."""
        self.expected_at = 0
        """Where the line of `next_seq` may begin: just past the stream's last line met."""
        self.digest: Any = hashlib.sha256()
        self.recent: dict[int, bytes] = {}
        """seq -> sha256 of the latest `REPLAY_WINDOW_SEQS` seqs of the compacted range met."""
        self.range_in_order = True
        self.done = False
        """A mismatch was found: nothing more of it is compared."""


class BookScrub:
    """One scrub of one book, made of steps; `done` once the journal was read to its end (or the
    book could not be read: `report.outcome` says so)."""

    def __init__(self, db: Database, book_id: str) -> None:
        self.db = db
        self.book_id = book_id
        self.ref = book_ref(book_id)
        self.report = ScrubReport(book_id, "")
        self.done = False
        self._started = False
        self._epoch = -1
        self._identity = ""
        self._end = 0
        self._offset = 0
        self._streams: dict[str, _Stream] = {}
        self._section: _Stream | None = None
        self._signature: dict[str, tuple[int, int, bool]] = {}
        self._window: tuple[int, int, dict[int, bytes]] = (-1, 0, {})
        """The kept hashes fetched last: (attempt id, first seq, seq -> sha256): one window for
        the whole book, whatever its number of streams."""
        self._hellos: dict[int, _Stream] = {}
        """The strict streams by the offset of their first hello."""
        self._new: list[Mismatch] = []
        """The mismatches found in the step going on, recorded at its end."""

    # --- steps ----------------------------------------------------------------------------------

    def step(self, budget_bytes: int) -> int | None:
        """Read about `budget_bytes` more of the journal (whole lines, at least one) under the
        book's lock; return the bytes read, or None when a pass holds the lock (nothing done)."""
        key = book_lock_key(self.book_id)
        row = self.db.fetch_one(statements.BOOK_LOCK, (key,))
        if row is None or not row["pg_try_advisory_lock"]:
            return None
        try:
            return self._locked_step(max(1, budget_bytes))
        finally:
            if self.db.is_open:  # a lost session released its advisory locks with it
                self.db.execute(statements.BOOK_UNLOCK, (key,))

    def _locked_step(self, budget_bytes: int) -> int:
        book = load_book(self.db, self.book_id)
        self.report.path = book.path
        rows = self.db.fetch_all(statements.ATTEMPTS_OF_BOOK, (self.book_id,))
        try:
            journal = open_journal(book.path)
        except JournalUnreadable as error:  # JournalMissing is one
            journal = None
            why = f"the journal cannot be read: {error}"
        else:
            why = "the book has no journal"
        if journal is None:
            applied = any(r["last_seq"] > 0 and r["state"] in RECORDABLE_STATES for r in rows)
            return self._unread(why) if applied else self._nothing_to_compare()
        with journal:
            if self._started and not self._still_follows(book.scan_epoch, rows, journal):
                self.report.restarts += 1
                self._started = False
            if not self._started:
                self._begin(book.scan_epoch, rows, journal)
            try:
                return self._read(journal, budget_bytes)
            except IngestError:
                raise  # DatabaseUnavailable is a ConnectionError, hence an OSError: not the file's
            except OSError as error:
                return self._unread(f"the journal could not be read: {error.strerror}")

    def _nothing_to_compare(self) -> int:
        self.report.streams = 0
        self.done = True
        return 0

    def _unread(self, reason: str) -> int:
        self.report.outcome, self.report.reason = "unread", reason
        self.done = True
        return 0

    def _still_follows(self, epoch: int, rows: list[Row], journal: Journal) -> bool:
        """Whether what the scrub began with still holds: nothing it compares with changed."""
        if epoch != self._epoch or journal.identity != self._identity:
            return False
        if journal.size() < self._end:
            return False  # cut shorter: what was read may be gone
        now = {row["engine_run_id"]: row for row in rows}
        for engine_run_id, signature in self._signature.items():
            row = now.get(engine_run_id)
            if (
                row is None
                or (
                    row["attempt_id"],
                    row["compacted_seq"],
                    bool(row["has_skips"]),
                )
                != signature
            ):
                return False
            stream = self._streams[engine_run_id]
            stream.state = row["state"]
            if stream.state not in RECORDABLE_STATES:
                stream.done = True  # a pass stopped it meanwhile: its problem stands
        return True

    def _begin(self, epoch: int, rows: list[Row], journal: Journal) -> None:
        """Start (again) from byte 0, with the attempts as they are now."""
        self._started = True
        self._epoch, self._identity = epoch, journal.identity
        self._end, self._offset = journal.size(), 0
        skips: dict[int, dict[bytes, int]] = {}
        with_skips = [row["attempt_id"] for row in rows if row["has_skips"]]
        if with_skips:
            for attempt_id, seq, sha256 in self.db.fetch_tuples(
                statements.LINE_SKIPS_OF_ATTEMPTS, (with_skips,)
            ):
                skips.setdefault(attempt_id, {})[bytes(sha256)] = seq
        self._streams = {
            row["engine_run_id"]: _Stream(row, journal.identity, skips.get(row["attempt_id"], {}))
            for row in rows
            if row["last_seq"] > 0 and row["state"] in RECORDABLE_STATES
        }
        self._signature = {
            engine_run_id: (stream.attempt_id, stream.compacted_seq, bool(stream.skips))
            for engine_run_id, stream in self._streams.items()
        }
        self._section = None
        self._window = (-1, 0, {})
        self._hellos = {
            stream.hello_at: stream
            for stream in self._streams.values()
            if stream.hello_at is not None
        }
        before = self.report
        self.report = ScrubReport(
            self.book_id,
            before.path,
            outcome=before.outcome,
            restarts=before.restarts,
            streams=len(self._streams),
            mismatches=before.mismatches,
        )
        for mismatch in before.mismatches:  # found already: not compared again
            stream = self._streams.get(mismatch.engine_run_id)
            if stream is not None:
                stream.done = True

    def _read(self, journal: Journal, budget_bytes: int) -> int:
        report, end, start = self.report, self._end, self._offset
        self._new = []
        for offset, raw in journal.lines(start):
            if offset >= end:
                break
            if isinstance(raw, MalformedLine):
                if raw.line_sha256 is None:
                    self._offset = end  # no end yet: the last line, which no pass applied
                    break
                size, digest = raw.size_bytes, raw.line_sha256
                self._line(offset, size, digest, None)
            else:
                size = len(raw)
                self._line(offset, size, hashlib.sha256(raw).digest(), raw)
            report.lines_read += 1
            self._offset = offset + size
            if self._offset - start >= budget_bytes:
                break
        else:
            self._offset = end
        if self._offset >= end:
            self._offset = end
            self._finish()
        read = self._offset - start
        report.bytes_read += read
        self._record()
        return read

    # --- lines -------------------------------------------------------------------------------

    def _line(self, offset: int, size: int, digest: bytes, raw: bytes | None) -> None:
        line, refused = self._decode(raw)
        judged = line if line is not None else refused
        started = None if judged is None else stream_started(judged)
        if started is not None:  # a hello that names its stream, read or refused, starts it
            self._section = self._streams.get(started)
        seq_read: int | None = None
        if isinstance(refused, UnsupportedVersion):
            seq_read = 1  # a hello of a major not read here
        elif refused is not None:
            seq_read = refused.seq
        owner = self._hellos.get(offset)
        if owner is not None and not owner.done and owner is not self._section:
            self._mismatch(owner, 1, offset, digest)  # its first hello is gone from its place
        stream = self._section
        if stream is None or stream.done:
            return
        skipped = stream.skips.get(digest)
        if skipped is not None:
            self._met(stream, skipped, offset, size, digest, skipped=True)
        elif line is not None:
            self._met(stream, line.seq, offset, size, digest, skipped=False)
        elif seq_read is not None and 1 <= seq_read <= stream.last_seq:
            # An applied line was read whole: a line of its seq that cannot be is not it.
            self._mismatch(stream, seq_read, offset, digest)
        else:
            self._unreadable(stream, offset, digest)

    def _decode(self, raw: bytes | None) -> tuple[Line | None, LineRefused | None]:
        """The line read as a line of the stream it lies in, or None and its refusal (None: a
        line over the bound, never gathered)."""
        if raw is None:
            return None, None
        stream = self._section
        try:
            return read_line(raw, lambda: None if stream is None else stream.stream_version), None
        except LineRefused as refused:
            return None, refused

    def _unreadable(self, stream: _Stream, offset: int, digest: bytes) -> None:
        """A line of no readable seq (or of the seq due, and unreadable) in a stream's part of the
        file. Where the stream's next applied seq is due it stands in that line's place."""
        if not stream.strict or stream.next_seq > stream.last_seq or offset != stream.expected_at:
            return  # not in an applied line's place: a later check finds what is missing
        self._mismatch(stream, stream.next_seq, offset, digest)

    def _met(
        self,
        stream: _Stream,
        seq: int,
        offset: int,
        size: int,
        digest: bytes,
        *,
        skipped: bool,
    ) -> None:
        """A line of `seq` (or a skipped line of that seq) in the stream's part of the file."""
        if seq > stream.last_seq:
            if (
                stream.strict
                and stream.next_seq <= stream.last_seq
                and offset == stream.expected_at
            ):
                self._mismatch(stream, stream.next_seq, offset, digest)
            return  # else past what was applied: the passes judge it
        report = self.report
        if seq == stream.next_seq == 1 and stream.hello_at not in (None, offset):
            self._mismatch(stream, 1, offset, digest)  # its first hello is not where it was
            return
        if seq > stream.next_seq:
            if stream.strict:
                self._mismatch(stream, stream.next_seq, offset, digest)
                return
            if seq <= stream.compacted_seq:
                stream.range_in_order = False
                report.unverified += 1
                return
        elif seq <= stream.compacted_seq:
            if seq < stream.next_seq:  # a repeat
                seen = stream.recent.get(seq)
                if seen is None:
                    report.unverified += 1
                elif seen != digest and not skipped:
                    self._found(stream, _conflict(seq, offset, seen, digest))
                    return
                else:
                    report.lines_compared += 1
                stream.expected_at = offset + size
                return
            self._in_range(stream, seq, offset, size, digest)
            return
        if not skipped:
            applied = self._applied(stream, seq)
            if applied is None:
                report.unverified += 1
                return
            if applied != digest:
                self._found(stream, _conflict(seq, offset, applied, digest))
                return
        report.lines_compared += 1
        stream.expected_at = offset + size
        if seq == stream.next_seq:
            stream.next_seq += 1

    def _in_range(
        self,
        stream: _Stream,
        seq: int,
        offset: int,
        size: int,
        digest: bytes,
    ) -> None:
        """The next seq of the compacted range, in order: it builds the digest."""
        stream.digest.update(digest)
        stream.recent[seq] = digest
        stream.recent.pop(seq - REPLAY_WINDOW_SEQS, None)
        stream.next_seq += 1
        stream.expected_at = offset + size
        self.report.lines_compared += 1
        if seq < stream.compacted_seq:
            return
        stream.recent.clear()
        if not stream.range_in_order:
            return
        self.report.ranges_compared += 1
        read = stream.digest.digest()
        if read != stream.compacted_sha256:
            kept = stream.compacted_sha256
            problem = compacted_conflict(
                last_seq=stream.compacted_seq,
                offset=offset,
                applied_sha256=kept.hex() if kept is not None else "(none)",
                read_sha256=read.hex(),
            )
            self._found(stream, problem)

    def _mismatch(self, stream: _Stream, seq: int, offset: int, digest: bytes) -> None:
        """The applied `seq` is not where it must be: the line at `offset` stands there."""
        if seq <= stream.compacted_seq:
            kept = stream.compacted_sha256
            problem = compacted_range_broken(
                last_seq=stream.compacted_seq,
                missing_seq=seq,
                offset=offset,
                applied_sha256=kept.hex() if kept is not None else "(none)",
            )
        else:
            applied = self._applied(stream, seq)
            problem = _conflict(seq, offset, applied, digest)
        self._found(stream, problem)

    def _finish(self) -> None:
        """The journal was read to its end: what a stream never showed is missing."""
        for stream in self._streams.values():
            if stream.done or stream.next_seq > stream.last_seq:
                continue
            if not stream.strict:
                self.report.unverified += stream.last_seq - stream.next_seq + 1
                continue
            seq = stream.next_seq
            problem: ProblemRecord
            if seq <= stream.compacted_seq:
                kept = stream.compacted_sha256
                problem = compacted_range_broken(
                    last_seq=stream.compacted_seq,
                    missing_seq=seq,
                    offset=self._end,
                    applied_sha256=kept.hex() if kept is not None else "(none)",
                )
            else:
                applied = self._applied(stream, seq)
                problem = applied_line_missing(
                    seq=seq,
                    applied_sha256=applied.hex() if applied is not None else "(none recorded)",
                    read_to=self._end,
                )
            self._found(stream, problem)
        self.done = True

    def _found(self, stream: _Stream, problem: ProblemRecord) -> None:
        stream.done = True
        self._new.append(Mismatch(stream.engine_run_id, problem, state=stream.state))

    def _applied(self, stream: _Stream, seq: int) -> bytes | None:
        """The hash applied at the stream's `seq` (past its compacted range), a window at a time."""
        window = self._window
        if window[0] != stream.attempt_id or not window[1] <= seq < window[1] + HASH_WINDOW_SEQS:
            rows = self.db.fetch_tuples(
                statements.LINE_HASHES_WINDOW, (stream.attempt_id, seq, seq + HASH_WINDOW_SEQS)
            )
            window = self._window = (stream.attempt_id, seq, {n: bytes(v) for n, v in rows})
        return window[2].get(seq)

    # --- what was found --------------------------------------------------------------------------

    def _record(self) -> None:
        """Quarantine each attempt a mismatch was found on, if nothing stands on it already (in
        the step's lock, the attempt's state compared as it is set)."""
        report = self.report
        for mismatch in self._new:
            report.mismatches.append(mismatch)
            report.outcome = "mismatch"
            stream = self._streams[mismatch.engine_run_id]
            record = mismatch.problem
            if stream.state in RECORDABLE_STATES:
                recorded = self.db.execute(
                    statements.ATTEMPT_QUARANTINE,
                    {
                        **problem_params(record),
                        "attempt_id": stream.attempt_id,
                        "state": stream.state,
                    },
                )
                if recorded:
                    mismatch.recorded, mismatch.state = True, "quarantined"
                    stream.state = "quarantined"
            logger.warning(
                "scrub of %s: stream %s: %s at seq %s, byte %s -> %s",
                self.ref,
                plain(mismatch.engine_run_id),
                record.kind,
                record.seq,
                record.offset,
                "quarantined" if mismatch.recorded else f"not recorded (it is {stream.state})",
            )


def _conflict(seq: int, offset: int, applied: bytes | None, digest: bytes) -> ProblemRecord:
    return payload_conflict(
        seq=seq,
        offset=offset,
        applied_sha256=applied.hex() if applied is not None else "(none recorded)",
        line_sha256=digest.hex(),
    )


# --- on demand ------------------------------------------------------------------------------------


def scrub_book(
    db: Database,
    book_id: str,
    *,
    busy_wait_s: float = 30.0,
    step_bytes: int = STEP_BYTES_MAX,
    sleep: Callable[[float], None] = time.sleep,
) -> ScrubReport:
    """Scrub one registered book whole, step after step, letting passes in between; `busy` when
    a pass held the book's lock for `busy_wait_s` in a row."""
    scrub = BookScrub(db, book_id)
    waited_s = 0.0
    while not scrub.done:
        if scrub.step(step_bytes) is not None:
            waited_s = 0.0
            continue
        if waited_s >= busy_wait_s:
            scrub.report.outcome = "busy"
            scrub.report.reason = f"a pass held the book's lock for {busy_wait_s:g} s"
            break
        sleep(BUSY_WAIT_S)
        waited_s += BUSY_WAIT_S
    if not scrub.report.path:
        with contextlib.suppress(NotFound):
            scrub.report.path = load_book(db, book_id).path
    return scrub.report


def scrub_books(db: Database, book_ids: Sequence[str], **options: Any) -> list[ScrubReport]:
    return [scrub_book(db, book_id, **options) for book_id in book_ids]


# --- in the worker, at a bounded rate -------------------------------------------------------------


class ScrubCounters(Protocol):
    """Where the background scrub counts what it did (the worker's metrics)."""

    def scrubbed(self, bytes_read: int, mismatches: int) -> None: ...


class BackgroundScrub:
    """The worker's scrub of its books, one after the other, at most `bytes_per_s` on average (a
    token bucket that holds at most `BUCKET_S` seconds' worth); 0 turns it off.

    `step` is called once a turn of the worker's loop: it reads while it has tokens and nothing
    else is due (`should_yield`), a step of at most `STEP_BYTES_MAX` at a time, so it never holds
    up a pass for longer than one step. A book a pass holds is left for the next turn.
    """

    def __init__(
        self,
        db: Database,
        *,
        bytes_per_s: float,
        counters: ScrubCounters | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if bytes_per_s < 0:
            raise ValueError("bytes_per_s must be 0 (off) or more")
        self.db = db
        self.bytes_per_s = bytes_per_s
        self.counters = counters
        self.clock = clock
        self.tokens = 0.0
        self._filled_at = clock()
        self._current: BookScrub | None = None
        self._round: list[str] = []
        """The books of this round still to scrub, the next one last: the worker's books in id
        order when the round began (asked once a round, not once a book: thousands of them)."""
        self.finished: list[ScrubReport] = []
        """The reports of the latest scrubs finished (the last 16), newest last."""

    def step(self, book_ids: Callable[[], Sequence[str]], should_yield: Callable[[], bool]) -> None:
        """Scrub as far as the tokens go; `book_ids` gives the worker's books (asked once a
        round, when the round before it is done)."""
        if self.bytes_per_s <= 0:
            return
        now = self.clock()
        self.tokens = min(
            BUCKET_S * self.bytes_per_s, self.tokens + (now - self._filled_at) * self.bytes_per_s
        )
        self._filled_at = now
        left: set[str] = set()
        """The books left this turn: found busy, or scrubbed to their end already."""
        # A step waits for tokens worth its fixed cost (or the whole bucket, at a rate so low the
        # bucket never holds that much), so a book's step reads that many bytes when it has them.
        step_tokens = min(STEP_COST_BYTES_MIN, BUCKET_S * self.bytes_per_s)
        while self.tokens >= step_tokens and not should_yield():
            scrub = self._current or self._next(book_ids, left)
            if scrub is None:
                return
            self._current = scrub
            left.add(scrub.book_id)
            mismatches_before = len(scrub.report.mismatches)
            try:
                read = scrub.step(int(min(self.tokens, STEP_BYTES_MAX)))
            except DatabaseUnavailable:
                raise  # Postgres is away: the worker's loop waits for it
            except (IngestError, OSError) as error:
                logger.info(
                    "scrub of %s left for a later round: %s", scrub.ref, type(error).__name__
                )
                self._current = None
                continue
            if read is None:  # a pass holds it: another book meanwhile
                self._current = None
                continue
            self.tokens -= max(read, STEP_COST_BYTES_MIN)
            if self.counters is not None:
                self.counters.scrubbed(read, len(scrub.report.mismatches) - mismatches_before)
            if scrub.done:
                self._ended(scrub)

    def _next(self, book_ids: Callable[[], Sequence[str]], left: set[str]) -> BookScrub | None:
        """The next book of the round (in id order), not left already this turn; a new round
        once this one is done."""
        if not self._round:
            self._round = sorted(book_ids(), reverse=True)
        while self._round:
            book_id = self._round.pop()
            if book_id not in left:
                return BookScrub(self.db, book_id)
        return None

    def _ended(self, scrub: BookScrub) -> None:
        self._current = None
        report = scrub.report
        self.finished = [*self.finished[-15:], report]

"""One pass over one book: read the journal's complete lines from a verified hint, decide what each
line does by its stream's cursor, and commit the effects with the cursors in bounded batches.

For each line of a stream the pass follows (SPEC § 6):

- `seq <= last_seq`: a duplicate, skipped when its bytes hash to what was applied at that seq
  (ANY earlier seq: `line_hashes`), else `payload_conflict`;
- `seq == last_seq + 1`: applied (`_apply.commit_sealed` writes it with the cursor);
- `seq > last_seq + 1`: `gap`, the attempt stalls;
- a line that does not decode quarantines its stream (`malformed`), a hello of another major
  refuses it (`unsupported_version`), a hello of another book quarantines it (`book_mismatch`).

Whose stream: in *auto* mode every new hello starts an attempt (of the book's current run, or of a
new run when that one has ended). In *named* mode only streams named for the book (`name`) are
ours: a foreign stream is skipped while no attempt of ours is active, and STOPS the pass once one
is (`foreign_stream_ahead`: the attempt is parked, the scan hint stays on the foreign hello). A
line before any hello is recorded on the book (`books.error_*`), and the pass goes on.

Where reading starts: the least of the book's scan hint and the hints of its active and parked
attempts; if any of them fails verification, from byte 0 (nothing is applied twice: the cursor
decides). A pass whose commit finds a cursor moved by another pass, or loses its connection, reads
its state again from Postgres and starts over (bounded); that is how a worker survives a restart.

The per-line decisions live in `_rules.StreamRules`; this module reads, batches and commits.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from . import _sql
from ._apply import BATCH_LINES_MAX, Batch, CommitHook, Writer, seal
from ._books import (
    book_lock_key,
    book_ref,
    load_book,
    recheck_path_conflicts,
    register_book,
)
from ._cursor import (
    BOOK_PATH_CONFLICT,
    FOLLOWED_STATES,
    LIVE_STATES,
    PASS_PROBLEM_KINDS,
    AttemptView,
    BookView,
    PassProblem,
)
from ._db import Database
from ._decode import Line, decode_line, reads_major
from ._journal import Hint, Journal, open_journal
from ._rules import StreamRules
from ._runs import RunView
from .errors import (
    BookProblemKind,
    CursorMoved,
    DatabaseTimeout,
    DatabaseUnavailable,
    DataRefused,
    IngestError,
    JournalUnreadable,
    LineRefused,
    LineTooLong,
)

logger = logging.getLogger("platform_ingest")

Mode = Literal["auto", "named"]

RESTARTS_AFTER_CONTENTION_MAX = 64
"""How many times one pass starts over because another pass moved a cursor first (each time, the
other pass made progress) before it gives the book up."""
RESTARTS_AFTER_FAILURE_MAX = 8
"""How many times one pass reconnects and starts over after a lost connection or a timeout."""
DATA_REFUSALS_MAX = 16
"""How many refusals of Postgres (each isolated to its line) one pass works through."""


@dataclass
class PassReport:
    """What one pass did. `lines_applied` counts every line the pass committed, across its
    restarts; the other counts cover its last (successful) start."""

    book_id: str
    lines_read: int = 0
    lines_applied: int = 0
    duplicates: int = 0
    bytes_read: int = 0
    start_offset: int = 0
    hint_discarded: bool = False
    parked: bool = False
    busy: bool = False
    restarts: int = 0
    problems: list[PassProblem] = field(default_factory=list)


class BookPass:
    """A pass over one registered book; `run()` may be called again for the next pass."""

    def __init__(
        self,
        db: Database,
        book_id: str,
        *,
        mode: Mode = "named",
        batch_lines_max: int = BATCH_LINES_MAX,
        book_lock: bool = True,
        commit_hook: CommitHook | None = None,
    ) -> None:
        if batch_lines_max < 1:
            raise ValueError("batch_lines_max must be at least 1")
        self.db = db
        self.book_id = book_id
        self.mode: Mode = mode
        self.batch_lines_max = batch_lines_max
        self.book_lock = book_lock
        self.commit_hook = commit_hook
        self.ref = book_ref(book_id)
        self.lines_committed = 0
        self.isolating = False
        """True while the pass commits one line a transaction, to find the line Postgres refused."""

    def run(self) -> PassReport:
        """One pass; starts over (bounded) after contention or a lost connection.

        When Postgres refuses a batch's values (`DataRefused`: a value it cannot store), the pass
        starts over committing one line a transaction; the line refused again quarantines its
        stream (`database_refused`, with its seq and offset), and the pass goes on at full batch
        size. The other streams of the book, and every other book, go on.
        """
        restarts = contention = failures = refusals = 0
        self.lines_committed = 0
        self.isolating = False
        while True:
            try:
                report = self._locked_pass()
            except DataRefused as error:
                refusals += 1
                if refusals > DATA_REFUSALS_MAX:
                    raise
                if self.isolating:
                    self._refused(error)
                    self.isolating = False
                else:
                    logger.warning(
                        "pass over %s: Postgres refused a batch (SQLSTATE %s); finding its line",
                        self.ref,
                        error.sqlstate or "client",
                    )
                    self.isolating = True
            except CursorMoved as error:
                logger.info("pass over %s: cursor moved by another pass (%s)", self.ref, error)
                contention += 1
                if contention > RESTARTS_AFTER_CONTENTION_MAX:
                    raise
            except (DatabaseUnavailable, DatabaseTimeout) as error:
                logger.warning("pass over %s: %s; reconnecting", self.ref, type(error).__name__)
                failures += 1
                if failures > RESTARTS_AFTER_FAILURE_MAX:
                    raise
                self.db.reconnect()
            else:
                report.restarts = restarts
                report.lines_applied = self.lines_committed
                return report
            restarts += 1

    def _refused(self, error: DataRefused) -> None:
        """Quarantine the stream of the line Postgres refused; a refusal no stream can carry (no
        line named, or a stream not yet in Postgres) is a problem of the whole book, raised."""
        stream, seq, offset = error.evidence or (None, None, None)
        detail = str(error)
        if stream is not None:
            with self.db.transaction():
                row = self.db.fetch_one(_sql.ATTEMPT_BY_STREAM_LOCK, (self.book_id, stream))
                if row is not None and row["state"] in FOLLOWED_STATES:
                    self.db.execute(
                        _sql.ATTEMPT_QUARANTINE,
                        ("database_refused", seq, offset, detail, row["attempt_id"], row["state"]),
                    )
                    logger.warning(
                        "book %s stream %s: database_refused at seq %s, byte %s -> quarantined",
                        self.ref,
                        stream,
                        seq,
                        offset,
                    )
                    return
        where = "" if offset is None else f" (the line at byte {offset}, seq {seq})"
        self.db.execute(
            _sql.BOOK_PROBLEM_SET, (self.book_id, "database_refused", detail + where, None)
        )
        raise error

    def _locked_pass(self) -> PassReport:
        if not self.book_lock:
            return _Pass(self).run()
        key = book_lock_key(self.book_id)
        row = self.db.fetch_one(_sql.BOOK_LOCK, (key,))
        if row is None or not row["pg_try_advisory_lock"]:
            return PassReport(self.book_id, busy=True)
        try:
            return _Pass(self).run()
        finally:
            if self.db.is_open:  # a lost session released its advisory locks with it
                self.db.execute(_sql.BOOK_UNLOCK, (key,))


class _Pass(StreamRules):
    """The state of one start of a pass (thrown away when it must start over)."""

    def __init__(self, owner: BookPass) -> None:
        self.owner = owner
        self.db = owner.db
        self.mode = owner.mode
        self.ref = owner.ref
        self.book: BookView = load_book(self.db, owner.book_id)
        self.report = PassReport(owner.book_id)
        self.runs: list[RunView] = [
            RunView.from_row(row) for row in self.db.fetch_all(_sql.RUNS_OF_BOOK, (owner.book_id,))
        ]
        runs_by_id = {run.run_id: run for run in self.runs}
        self.attempts: dict[str, AttemptView] = {}
        for row in self.db.fetch_all(_sql.ATTEMPTS_OF_BOOK, (owner.book_id,)):
            attempt = AttemptView.from_row(row, runs_by_id[row["run_id"]])
            self.attempts[attempt.engine_run_id] = attempt
        latest: dict[int, AttemptView] = {}
        for attempt in self.attempts.values():
            if attempt.stream_index is None:
                continue
            key = id(attempt.run)
            if key not in latest or (latest[key].stream_index or 0) < attempt.stream_index:
                latest[key] = attempt
        for attempt in latest.values():
            attempt.drives_run = True
        self._load_skips()
        self.batch = Batch()
        self.revived = self._revive_refused()
        self.section: str | None = None
        self.section_attempt: AttemptView | None = None
        self.stopped = False
        self.identity = ""
        self.hash_cache: dict[int, dict[int, bytes]] = {}
        self.batch_hashes: dict[tuple[int, int], bytes] = {}
        self.sealed_hashes: dict[tuple[int, int], bytes] = {}
        self.problems: list[PassProblem] = []
        self.duplicates = 0
        self.parked = False
        self.drain = self._drain
        self.writer = Writer(self.db, owner.book_id, owner.commit_hook)

    def _load_skips(self) -> None:
        """The lines operators skipped, for the few attempts that have any."""
        with_skips = {a.attempt_id: a for a in self.attempts.values() if a.has_skips}
        if not with_skips:
            return
        for attempt in with_skips.values():
            attempt.skips = {}
        rows = self.db.fetch_tuples(_sql.LINE_SKIPS_OF_ATTEMPTS, (sorted(with_skips),))
        for attempt_id, seq, sha256 in rows:
            skips = with_skips[attempt_id].skips
            assert skips is not None
            skips[bytes(sha256)] = seq

    def _revive_refused(self) -> bool:
        """Streams refused for a major this platform now reads go back to `pending`: the pass
        reads the journal from byte 0 and applies them like any new stream."""
        revived = False
        for attempt in self.attempts.values():
            if attempt.state != "refused" or attempt.stream_version is None:
                continue
            if reads_major(attempt.stream_version):
                attempt.state, attempt.error = "pending", None
                attempt.forget_hint()
                self.batch.touch(attempt)
                revived = True
                logger.info(
                    "book %s stream %s: its major is read now; reading it again",
                    self.ref,
                    attempt.engine_run_id,
                )
        return revived

    # --- the pass ---------------------------------------------------------------------------

    def run(self) -> PassReport:
        try:
            self._run()
        finally:
            self.writer.close()
        report = self.report
        report.problems, report.duplicates, report.parked = (
            self.problems,
            self.duplicates,
            self.parked,
        )
        return report

    def _run(self) -> None:
        try:
            opened = open_journal(self.book.path)
        except JournalUnreadable as error:
            self._book_problem_found(error.kind, str(error))
            raise
        scan_before = (self.book.scan, self.book.scan_stream, self.book.scan_mode)
        if opened is not None:
            try:
                with opened as journal:
                    self.identity = journal.identity
                    start, self.section = self._start(journal)
                    self.section_attempt = (
                        None if self.section is None else self.attempts.get(self.section)
                    )
                    self.report.start_offset = start
                    self._read(journal, start)
                    self.report.bytes_read = journal.bytes_read
            except IngestError:
                raise  # DatabaseUnavailable is a ConnectionError, hence an OSError: not the journal's
            except OSError as error:
                problem = JournalUnreadable(f"the journal could not be read: {error.strerror}")
                self._book_problem_found(problem.kind, str(problem))
                raise problem from error
        if (self.book.scan, self.book.scan_stream, self.book.scan_mode) != scan_before:
            self.batch.book_changed = True
        self._flush()
        self._drain()
        self._book_problems_cleared()
        if self.report.lines_applied or self.problems:
            logger.info(
                "pass over %s: %d lines read, %d applied, %d duplicates, %d problems",
                self.ref,
                self.report.lines_read,
                self.report.lines_applied,
                self.duplicates,
                len(self.problems),
            )

    def _book_problem_found(self, kind: BookProblemKind, detail: str) -> None:
        """Record a problem that stops the whole book (shown by `show`), once per kind."""
        self.db.execute(_sql.BOOK_PROBLEM_SET, (self.book.book_id, kind, detail, None))
        if kind not in self.book.problem_kinds:
            self.problems.append(PassProblem(None, kind))

    def _book_problems_cleared(self) -> None:
        """The pass went through: the book problems a pass finds are gone."""
        gone = [kind for kind in self.book.problem_kinds if kind in PASS_PROBLEM_KINDS]
        if gone:
            self.db.execute(_sql.BOOK_PROBLEMS_CLEAR, (self.book.book_id, gone))
        if BOOK_PATH_CONFLICT in self.book.problem_kinds:
            recheck_path_conflicts(self.db, self.book)

    def _start(self, journal: Journal) -> tuple[int, str | None]:
        """The verified place to start reading, and the stream whose section it lies in.

        Candidates: the book's scan hint (when it was made in this mode) and the hint of each
        active or parked attempt. If any fails verification, every failed attempt hint is reset
        and reading starts at byte 0.
        """
        book = self.book
        if self.revived:
            return 0, None
        candidates: list[tuple[Hint, str | None]] = []
        if book.scan_mode == self.mode:
            candidates.append((book.scan, book.scan_stream))
        else:
            candidates.append((Hint.start(), None))
        live = [a for a in self.attempts.values() if a.state in LIVE_STATES and a.hint_offset]
        candidates.extend((attempt.hint, attempt.engine_run_id) for attempt in live)
        distinct = {hint for hint, _ in candidates}  # the book's and an attempt's often agree
        failed = {hint for hint in distinct if not journal.verify_hint(hint)}
        if failed:
            self.report.hint_discarded = True
            logger.info("pass over %s: a hint failed verification; reading from byte 0", self.ref)
            for attempt in live:
                if attempt.hint in failed:
                    attempt.forget_hint()
                    self.batch.touch(attempt)
            return 0, None
        hint, stream = min(candidates, key=lambda candidate: candidate[0].offset)
        if hint.offset == 0:
            return 0, None
        return hint.offset, stream

    def _read(self, journal: Journal, start: int) -> None:
        """Every complete line from `start`, in order; the book's scan hint follows the last
        line processed (set on the book only when a batch is sealed, and at the end)."""
        book = self.book
        book.scan_mode = self.mode
        if start == 0:
            book.scan, book.scan_stream = Hint.start(), None
        elif book.scan.offset != start:
            # Starting behind the book's scan hint: it moves back to where reading starts.
            for attempt in self.attempts.values():
                if attempt.hint_offset == start and attempt.state in LIVE_STATES:
                    book.scan, book.scan_stream = attempt.hint, attempt.engine_run_id
                    break
        identity = self.identity
        sha256 = hashlib.sha256
        report = self.report
        batch_lines_max = 1 if self.owner.isolating else self.owner.batch_lines_max
        scan_end = -1
        scan_size = 0
        scan_digest = b""
        for offset, raw in journal.lines(start):
            line: Line | None = None
            problem: LineRefused | None = None
            if type(raw) is not bytes:
                assert isinstance(raw, LineTooLong)  # the reader yields nothing else
                problem = raw
                size = raw.size_bytes
                if raw.line_sha256 is None:  # no newline yet: report, do not consume
                    self._refused(problem, offset, b"", 0)
                    break
                digest = raw.line_sha256
            else:
                size = len(raw)
                digest = sha256(raw).digest()
                try:
                    line = decode_line(raw)
                except LineRefused as error:
                    problem = error
                    error.offset = offset
            report.lines_read += 1
            followed = self.section_attempt
            if (
                followed is not None
                and followed.skips is not None
                and followed.state in FOLLOWED_STATES
                and (line is None or line.type != "hello")
                and self._skip(followed, digest, offset, size)
            ):
                pass  # a line an operator skipped: the cursor passes it, with no effect
            elif (
                line is not None
                and followed is not None
                and line.type != "hello"
                and followed.state in FOLLOWED_STATES
            ):
                if line.seq == followed.last_seq + 1:
                    self._apply(followed, line, digest, offset, size)
                else:
                    self._stream_line(followed, line, digest, offset, size)
            elif line is not None:
                self._other_line(line, digest, offset, size)
            elif problem is not None:
                self._refused(problem, offset, digest, size)
            if self.stopped:
                break
            scan_end, scan_size, scan_digest = offset + size, size, digest
            batch = self.batch
            batch.lines += 1
            batch.last_line = (
                self.section,
                line.seq if line is not None else (problem.seq if problem else None),
                offset,
            )
            if batch.lines >= batch_lines_max:
                book.scan = Hint(scan_end, scan_size, scan_digest, identity)
                book.scan_stream = self.section
                batch.book_changed = True
                self._flush()
        if scan_end >= 0:
            book.scan = Hint(scan_end, scan_size, scan_digest, identity)
            book.scan_stream = self.section

    def _flush(self) -> None:
        """Seal the batch and hand it to the writer (which first finishes the one before)."""
        batch = self.batch
        if batch.empty:
            batch.lines = 0
            return
        sealed = seal(batch, self.book)
        self._drain()
        self.writer.submit(sealed)
        self.sealed_hashes = self.batch_hashes
        self.batch_hashes = {}
        self.batch = Batch()

    def _drain(self) -> None:
        """Wait until every sealed batch is committed (or raise why it was not)."""
        before = self.writer.lines_committed
        self.writer.drain()
        committed = self.writer.lines_committed - before
        self.report.lines_applied += committed
        self.owner.lines_committed += committed
        self.sealed_hashes = {}


def sweep_book(
    db: Database,
    book_dir: str | Path,
    *,
    mode: Mode = "named",
    roots: Sequence[Path] = (),
    batch_lines_max: int = BATCH_LINES_MAX,
) -> PassReport:
    """Register the book directory if needed (refused outside `roots`) and make one pass over it."""
    book = register_book(db, book_dir, roots)
    return BookPass(db, book.book_id, mode=mode, batch_lines_max=batch_lines_max).run()

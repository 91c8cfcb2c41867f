"""One pass over one book: read the journal's complete lines from a verified hint, decide what each
line does by its stream's cursor, and commit the effects with the cursors in bounded batches.

For each line of a stream the pass follows (docs/platform/cursor.md, "Reading"):

- `seq <= last_seq`: a duplicate, skipped when its bytes hash to what was applied at that seq
  (ANY earlier seq: `line_hashes`), else `payload_conflict`;
- `seq == last_seq + 1`: applied (`apply.commit_sealed` writes it with the cursor);
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

The per-line decisions are `rules.StreamRules`, a pure core; this module reads the journal, loads
the state the rules decide over, answers their hash lookups, and commits what they decide.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Protocol

from .._plain import counted, plain
from ..decisions.batch import BatchHashes
from ..decisions.book_state import BookState
from ..decisions.problems import ProblemRecord
from ..decisions.rules import StreamRules
from ..decisions.runs import RunView
from ..decisions.views import (
    BOOK_PATH_CONFLICT,
    FOLLOWED_STATES,
    LIVE_STATES,
    PASS_PROBLEM_KINDS,
    AttemptView,
    BookView,
    Mode,
    PassProblem,
    awaits_lines,
)
from ..errors import (
    BookProblemKind,
    CursorMoved,
    DatabaseRefusesWrites,
    DatabaseTimeout,
    DatabaseUnavailable,
    DataRefused,
    IngestError,
    JournalMissing,
    JournalUnreadable,
    ProjectionFailed,
)
from ..journal.hint import Hint
from ..journal.reader import Journal, open_journal
from ..projections import Projection, check_projections
from ..store import statements
from ..store.db import Database, Params, Row
from ..store.statement import Statement
from .apply import (
    BATCH_BYTES_MAX,
    BATCH_LINES_MAX,
    CommitHook,
    SealedBatch,
    Writer,
    problem_params,
    seal,
)
from .books import (
    book_lock_key,
    book_ref,
    load_book,
    recheck_path_conflicts,
    register_book,
)
from .projection_step import install

logger = logging.getLogger("platform_ingest")

__all__ = [
    "BookPass",
    "Mode",
    "NewsTooLong",
    "PassReport",
    "decide_in_group",
    "load_state",
    "load_states",
    "state_queries",
    "states_of",
    "sweep_book",
]

HASH_WINDOW_SEQS = 4096
"""How many applied line hashes one duplicate lookup fetches (re-reads come in runs)."""

RESTARTS_AFTER_CONTENTION_MAX = 64
"""How many times one pass starts over because another pass moved a cursor first (each time, the
other pass made progress) before it gives the book up."""
RESTARTS_AFTER_FAILURE_MAX = 8
"""How many times one pass reconnects and starts over after a lost connection."""
RESTARTS_AFTER_CONFLICT_MAX = 2
"""How many times one pass starts over, at once, after Postgres broke a deadlock or a
serialization conflict of its transaction (`CONFLICT_STATES`): one more is the book's problem."""
CONFLICT_STATES = frozenset({"40P01", "40001"})
"""deadlock_detected, serialization_failure: ended at once, and likely to go through when tried
again. A statement or lock timeout or a transaction left idle too long (57014, 55P03, 25P03) took
its whole bound and would likely take it again: the first is the book's problem
(`database_timeout`), shown by `show` and passed again later, while the worker goes on with every
other book."""
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
    unverified_duplicates: int = 0
    """Duplicates of a compacted range that could not be compared (docs/platform/cursor.md)."""
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
        batch_bytes_max: int = BATCH_BYTES_MAX,
        book_lock: bool = True,
        commit_hook: CommitHook | None = None,
        projections: Sequence[Projection] = (),
    ) -> None:
        if batch_lines_max < 1:
            raise ValueError("batch_lines_max must be at least 1")
        if batch_bytes_max < 1:
            raise ValueError("batch_bytes_max must be at least 1")
        self.db = db
        self.book_id = book_id
        self.mode: Mode = mode
        self.batch_lines_max = batch_lines_max
        self.batch_bytes_max = batch_bytes_max
        self.book_lock = book_lock
        self.commit_hook = commit_hook
        self.projections = check_projections(projections)
        self.lines_committed = 0
        self.isolating = False
        """True while the pass commits one line a transaction, to find the line Postgres refused."""
        self.reconnected_after_s: list[float] = []
        """For each time the last `run()` lost its connection and made it again: how long that
        took. The session was new each time: what Postgres tied to the old one (a worker's
        membership, advisory locks) had ended with it."""

    @cached_property
    def ref(self) -> str:
        """The book's reference in logs (`book_ref`), made when a log first needs it: a book's
        part in a group of hundreds is most often logged by nothing."""
        return book_ref(self.book_id)

    def run(self) -> PassReport:
        """One pass; starts over (bounded) after contention, a lost connection, a deadlock or a
        serialization conflict. A server that takes no writes (`DatabaseRefusesWrites`: disk full,
        read-only) is raised at once, recorded nowhere: it is no book's problem. A bounded wait that ran out (a statement or lock timeout) is
        recorded on the book (`database_timeout`) and raised: the book's problem, not the
        worker's.

        When Postgres refuses a batch's values (`DataRefused`: a value it cannot store), the pass
        starts over committing one line a transaction; the line refused again quarantines its
        stream (`database_refused`, with its seq and offset), and the pass goes on at full batch
        size. The other streams of the book, and every other book, go on.
        """
        restarts = contention = failures = conflicts = refusals = 0
        self.lines_committed = 0
        self.isolating = False
        self.reconnected_after_s = []
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
            except ProjectionFailed as error:
                self._projection_failed(error)
                raise
            except DatabaseTimeout as error:
                conflicts += 1
                if error.sqlstate not in CONFLICT_STATES or conflicts > RESTARTS_AFTER_CONFLICT_MAX:
                    self._timed_out(error)
                    raise
                logger.warning(
                    "pass over %s: Postgres ended its transaction (SQLSTATE %s); starting over",
                    self.ref,
                    error.sqlstate,
                )
                if not self.db.is_open:
                    self.db.reconnect()
            except DatabaseRefusesWrites:
                # The server answers and writes nothing (disk full, read-only): no book's fault,
                # and connecting again at once meets the same refusal. The caller waits (the
                # worker) or stops (a sweep); the next pass goes on from the cursor.
                raise
            except DatabaseUnavailable as error:
                logger.warning("pass over %s: %s; reconnecting", self.ref, type(error).__name__)
                failures += 1
                if failures > RESTARTS_AFTER_FAILURE_MAX:
                    raise
                lost_at = time.monotonic()
                self.db.reconnect()
                self.reconnected_after_s.append(time.monotonic() - lost_at)
            else:
                report.restarts = restarts
                report.lines_applied = self.lines_committed
                return report
            restarts += 1

    def _projection_failed(self, error: ProjectionFailed) -> None:
        """Record on its stream that a projection failed (the batch was rolled back): `show`
        prints it on the stream's attempt (on the book while the attempt is not in Postgres yet),
        and the commit that next moves the attempt clears it."""
        logger.warning(
            "pass over %s: projection %s failed on stream %s at seq %s; the batch was rolled "
            "back and the book is tried again later",
            self.ref,
            error.projection,
            error.engine_run_id,
            error.seq,
        )
        if error.engine_run_id is not None:
            self.db.execute(
                statements.PROJECTION_FAILURE_SET,
                (self.book_id, error.engine_run_id, error.projection, error.seq, error.detail),
            )

    def _timed_out(self, error: DatabaseTimeout) -> None:
        """A bounded wait ran out on this book's work: record it on the book
        (`database_timeout`, with the SQLSTATE and Postgres's words), on a new connection when
        the timeout ended the session (an idle transaction's does; a statement's or a lock's
        leaves it, with the worker's membership on it). A pass that goes through clears it."""
        logger.warning(
            "pass over %s: a bounded wait ran out (SQLSTATE %s); recorded on the book",
            self.ref,
            error.sqlstate,
        )
        if not self.db.is_open:
            self.db.reconnect()
        self.db.execute(
            statements.BOOK_PROBLEM_SET, (self.book_id, "database_timeout", str(error), None)
        )

    def _refused(self, error: DataRefused) -> None:
        """Quarantine the stream of the line Postgres refused; a refusal no stream can carry (no
        line named, or a stream not yet in Postgres) is a problem of the whole book, raised."""
        stream, seq, offset = error.evidence or (None, None, None)
        detail = str(error)
        if stream is not None:
            with self.db.transaction():
                row = self.db.fetch_one(statements.ATTEMPT_BY_STREAM_LOCK, (self.book_id, stream))
                if row is not None and row["state"] in FOLLOWED_STATES:
                    self.db.execute(
                        statements.ATTEMPT_QUARANTINE,
                        {
                            **problem_params(
                                ProblemRecord("database_refused", seq, offset, detail)
                            ),
                            "attempt_id": row["attempt_id"],
                            "state": row["state"],
                        },
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
            statements.BOOK_PROBLEM_SET, (self.book_id, "database_refused", detail + where, None)
        )
        raise error

    def _locked_pass(self) -> PassReport:
        if not self.book_lock:
            return _Pass(self).run()
        key = book_lock_key(self.book_id)
        row = self.db.fetch_one(statements.BOOK_LOCK, (key,))
        if row is None or not row["pg_try_advisory_lock"]:
            return PassReport(self.book_id, busy=True)
        try:
            return _Pass(self).run()
        finally:
            if self.db.is_open:  # a lost session released its advisory locks with it
                self.db.execute(statements.BOOK_UNLOCK, (key,))


class NewsTooLong(Exception):
    """A book's news is longer than a group's part may be (`news_bytes_max`): the book gets a
    pass of its own, whose writer commits batch after batch (`ingest.group_pass`)."""


class BatchWriter(Protocol):
    """What a pass hands its sealed batches to: `apply.Writer` (commits each on its own thread),
    or a group's collector (`ingest.group_pass`), which keeps the one batch of a book's part."""

    lines_committed: int

    def submit(self, sealed: SealedBatch) -> None: ...

    def drain(self) -> None: ...

    def close(self) -> None: ...


def load_state(db: Database, book_id: str) -> BookState:
    """One book, its runs and their attempts, as Postgres holds them now."""
    runs = [RunView.from_row(row) for row in db.fetch_all(statements.RUNS_OF_BOOK, (book_id,))]
    runs_by_id = {run.run_id: run for run in runs}
    return BookState.of(
        load_book(db, book_id),
        runs,
        (
            AttemptView.from_row(row, runs_by_id[row["run_id"]])
            for row in db.fetch_all(statements.ATTEMPTS_OF_BOOK, (book_id,))
        ),
    )


class _Pass:
    """One start of a pass: the state loaded from Postgres, the rules over it, and the writer
    (thrown away when the pass must start over). It is the rules' `History`.

    A group (`ingest.group_pass`) gives the state it loaded for many books at once, a writer that
    keeps the batch for the group's transaction, and the most bytes of news it takes."""

    def __init__(
        self,
        owner: BookPass,
        *,
        state: BookState | None = None,
        writer: BatchWriter | None = None,
        news_bytes_max: int | None = None,
    ) -> None:
        self.owner = owner
        self.db = owner.db
        self.report = PassReport(owner.book_id)
        self.news_bytes_max = news_bytes_max
        self.state = load_state(self.db, owner.book_id) if state is None else state
        self.book = self.state.book
        self._load_skips()
        # The rules see this pass as their `History` through a weak reference: a strong one
        # would make the two a cycle, and every pass's objects garbage only the cycle collector
        # frees (in groups of 500 books, its collections took about a tenth of a line's CPU).
        history = weakref.proxy(self)
        self.rules = StreamRules(
            self.state, owner.mode, history, keep_applied=bool(owner.projections)
        )
        self.revived = self.rules.revive_refused()
        for attempt in self.revived:
            logger.info(
                "book %s stream %s: its major is read now; reading it again",
                self.ref,
                attempt.engine_run_id,
            )
        self.found: list[PassProblem] = []
        """Problems of the whole book the pass itself found (the journal could not be read)."""
        self.problems_logged = 0
        self.hash_cache: dict[int, dict[int, bytes]] = {}
        self.pruned: frozenset[str] | None = None
        """The book's pruned streams, loaded the first time a hello of an unknown one is met."""
        self.sealed_hashes: BatchHashes | None = None
        """The hashes of the batch sealed last, until it is committed (then Postgres has them)."""
        self.writer: BatchWriter = (
            Writer(self.db, owner.book_id, owner.commit_hook, owner.projections)
            if writer is None
            else writer
        )

    @property
    def ref(self) -> str:
        return self.owner.ref

    def _load_skips(self) -> None:
        """The lines operators skipped, for the few attempts that have any."""
        attempts = self.state.attempts.values()
        with_skips = {a.attempt_id: a for a in attempts if a.has_skips}
        if not with_skips:
            return
        for attempt in with_skips.values():
            attempt.skips = {}
        rows = self.db.fetch_tuples(statements.LINE_SKIPS_OF_ATTEMPTS, (sorted(with_skips),))
        for attempt_id, seq, sha256 in rows:
            skips = with_skips[attempt_id].skips
            assert skips is not None
            skips[bytes(sha256)] = seq

    def was_pruned(self, engine_run_id: str) -> bool:
        """`History`: one query a pass at most, however many unknown hellos the journal holds
        (a hostile one may hold a million)."""
        if self.pruned is None:
            rows = self.db.fetch_tuples(statements.PRUNED_STREAMS_OF_BOOK, (self.book.book_id,))
            self.pruned = frozenset(engine_run_id for (engine_run_id,) in rows)
        return engine_run_id in self.pruned

    def applied_sha256(self, attempt: AttemptView, seq: int) -> bytes | None:
        """`History`: from the batch sealed last, else from Postgres (a window of seqs at a
        time, cached for the pass)."""
        sealed = self.sealed_hashes
        found = None if sealed is None else sealed.get(attempt, seq)
        if found is not None:
            return found
        self._drain()  # what was sealed is in Postgres now, and the connection is free
        if attempt.attempt_id is None:
            return None
        cache = self.hash_cache.get(attempt.attempt_id)
        if cache is None or seq not in cache:
            rows = self.db.fetch_tuples(
                statements.LINE_HASHES_WINDOW, (attempt.attempt_id, seq, seq + HASH_WINDOW_SEQS)
            )
            cache = {row_seq: bytes(value) for row_seq, value in rows}
            self.hash_cache[attempt.attempt_id] = cache
        return cache.get(seq)

    # --- the pass ---------------------------------------------------------------------------

    def run(self) -> PassReport:
        try:
            self._run()
        finally:
            self.writer.close()
        rules, report = self.rules, self.report
        report.lines_read = rules.lines_read
        report.problems = self.found + rules.problems
        report.duplicates, report.parked = rules.duplicates, rules.parked
        report.unverified_duplicates = rules.unverified_duplicates
        return report

    def _run(self) -> None:
        book = self.book
        try:
            opened = open_journal(book.path)
        except JournalMissing as error:
            if self._awaits_lines(directory_gone=True):
                self._book_problem_found(error.kind, str(error))
                raise
            opened = None  # nothing awaits its lines: a finished book cleaned away
        except JournalUnreadable as error:
            self._book_problem_found(error.kind, str(error))
            raise
        if opened is None and self._awaits_lines(directory_gone=False):
            missing = JournalMissing("the journal is gone while an attempt awaits its lines")
            self._book_problem_found(missing.kind, str(missing))
            raise missing
        scan_before = (book.scan, book.scan_stream, book.scan_mode)
        if opened is not None:
            try:
                with opened as journal:
                    self.rules.identity = journal.identity
                    start, section = self._start(journal)
                    if self.news_bytes_max is not None and (
                        journal.size_at_open - start > self.news_bytes_max
                    ):
                        raise NewsTooLong(self.ref)
                    self.rules.enter(section, start=start)
                    self.report.start_offset = start
                    self._read(journal, start)
                    self.report.bytes_read = journal.bytes_read
            except IngestError:
                raise  # DatabaseUnavailable is a ConnectionError, hence an OSError: not the journal's
            except OSError as error:
                problem = JournalUnreadable(f"the journal could not be read: {error.strerror}")
                self._book_problem_found(problem.kind, str(problem))
                raise problem from error
        if (book.scan, book.scan_stream, book.scan_mode) != scan_before:
            self.rules.batch.book_changed = True
        self._flush()
        self._drain()
        self._book_problems_cleared()
        problems = len(self.found) + len(self.rules.problems)
        if self.news_bytes_max is None and (self.report.lines_applied or problems):
            logger.info(
                "pass over %s: %s read, %d applied, %s, %s",
                self.ref,
                counted(self.rules.lines_read, "line"),
                self.report.lines_applied,
                counted(self.rules.duplicates, "duplicate"),
                counted(problems, "problem"),
            )

    def _awaits_lines(self, *, directory_gone: bool) -> bool:
        """Whether an attempt of the book waits for lines of its gone journal (`awaits_lines`;
        a directory gone took a journal with it)."""
        attempts = self.state.attempts.values()
        return awaits_lines(
            (attempt.state for attempt in attempts),
            journal_read=directory_gone
            or self.book.scan.file is not None
            or any(attempt.last_seq > 0 for attempt in attempts),
        )

    def _book_problem_found(self, kind: BookProblemKind, detail: str) -> None:
        """Record a problem that stops the whole book (shown by `show`), once per kind."""
        self.db.execute(statements.BOOK_PROBLEM_SET, (self.book.book_id, kind, detail, None))
        if kind not in self.book.problem_kinds:
            self.found.append(PassProblem(None, kind))

    def _book_problems_cleared(self) -> None:
        """The pass went through: the book problems a pass finds are gone."""
        gone = [kind for kind in self.book.problem_kinds if kind in PASS_PROBLEM_KINDS]
        if gone:
            self.db.execute(statements.BOOK_PROBLEMS_CLEAR, (self.book.book_id, gone))
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
        if book.scan_mode == self.owner.mode:
            candidates.append((book.scan, book.scan_stream))
        else:
            candidates.append((Hint.start(), None))
        live = [a for a in self.state.attempts.values() if a.state in LIVE_STATES and a.hint_offset]
        candidates.extend((attempt.hint, attempt.engine_run_id) for attempt in live)
        distinct = {hint for hint, _ in candidates}  # the book's and an attempt's often agree
        # One hint (the common case): its check reads the news with its line, in one read.
        ahead = len(distinct) == 1
        failed = {hint for hint in distinct if not journal.verify_hint(hint, read_ahead=ahead)}
        if failed:
            self.report.hint_discarded = True
            logger.info("pass over %s: a hint failed verification; reading from byte 0", self.ref)
            for attempt in live:
                if attempt.hint in failed:
                    attempt.forget_hint()
                    self.rules.batch.touch(attempt)
            return 0, None
        hint, stream = min(candidates, key=lambda candidate: candidate[0].offset)
        if hint.offset == 0:
            return 0, None
        return hint.offset, stream

    def _read(self, journal: Journal, start: int) -> None:
        """Every complete line from `start`, in order, to the rules; the book's scan hint follows
        the last line decided (set on the book only when a batch is sealed, and at the end).

        A batch is sealed when it holds `batch_lines_max` lines or `batch_bytes_max` bytes of
        lines, whichever comes first (a single longer line makes a batch of its own). The bytes
        are the decided lines' sizes: what the batch holds grows with them (a progress line's
        phases are held until the batch is sealed); an over-long line the reader skipped is
        held by nobody and counts nothing."""
        book, rules = self.book, self.rules
        book.scan_mode = self.owner.mode
        if start == 0:
            book.scan, book.scan_stream = Hint.start(), None
        elif book.scan.offset != start:
            # Starting behind the book's scan hint: it moves back to where reading starts.
            for attempt in self.state.attempts.values():
                if attempt.hint_offset == start and attempt.state in LIVE_STATES:
                    book.scan, book.scan_stream = attempt.hint, attempt.engine_run_id
                    break
        batch_lines_max = 1 if self.owner.isolating else self.owner.batch_lines_max
        batch_bytes_max = self.owner.batch_bytes_max
        batch_bytes = 0
        take = rules.take
        for offset, raw in journal.lines(start):
            if not take(offset, raw):
                break
            if type(raw) is bytes:
                batch_bytes += len(raw)
            if batch_bytes >= batch_bytes_max or rules.batch.lines >= batch_lines_max:
                self._move_scan_hint()
                rules.batch.book_changed = True
                self._flush()
                batch_bytes = 0
        else:
            rules.read_to_end()
        self._move_scan_hint()

    def _move_scan_hint(self) -> None:
        hint, section = self.rules.scan_hint()
        if hint is not None:
            self.book.scan, self.book.scan_stream = hint, section

    def _flush(self) -> None:
        """Seal the batch and hand it to the writer (which first finishes the one before)."""
        self._log_problems()
        batch = self.rules.batch
        if batch.empty:
            batch.lines = 0
            return
        sealed = seal(batch, self.book)
        self._drain()
        self.writer.submit(sealed)
        _, self.sealed_hashes = self.rules.take_batch()

    def _log_problems(self) -> None:
        """One warning for each stream problem the rules recorded since the last batch."""
        problems = self.rules.problems
        for problem in problems[self.problems_logged :]:
            attempt = (
                None
                if problem.engine_run_id is None
                else self.state.attempts.get(problem.engine_run_id)
            )
            record = self.book.error if attempt is None else attempt.error
            known = [] if record is None else [("seq", record.seq), ("byte", record.offset)]
            where = ", ".join(f"{name} {value}" for name, value in known if value is not None)
            logger.warning(
                "book %s %s: %s at %s -> %s",
                self.ref,
                # A line of no stream: before any hello, or unreadable after a finished stream.
                "(a line of no stream)"
                if problem.engine_run_id is None
                else f"stream {plain(problem.engine_run_id)}",
                problem.kind,
                where or "an unknown place",
                "recorded on the book" if attempt is None else attempt.state,
            )
        self.problems_logged = len(problems)

    def _drain(self) -> None:
        """Wait until every sealed batch is committed (or raise why it was not)."""
        before = self.writer.lines_committed
        self.writer.drain()
        committed = self.writer.lines_committed - before
        self.report.lines_applied += committed
        self.owner.lines_committed += committed
        self.sealed_hashes = None


class _GroupPart:
    """The writer of a book's part in a group: it keeps the one batch the part may seal, for the
    group's transaction to write (`group_commit`); a second batch means the news is too long."""

    lines_committed = 0

    def __init__(self) -> None:
        self.sealed: SealedBatch | None = None

    def submit(self, sealed: SealedBatch) -> None:
        if self.sealed is not None:
            raise NewsTooLong("more than one batch")
        self.sealed = sealed

    def drain(self) -> None:
        """Nothing is in flight: the group writes the batch."""

    def close(self) -> None:
        """Nothing runs on a thread."""


def load_states(db: Database, book_ids: Sequence[str]) -> dict[str, BookState]:
    """`load_state` of many books, three statements for them all in one round trip; a book not
    registered (any more) is absent."""
    return states_of(book_ids, *db.fetch_together(state_queries(book_ids)))


def state_queries(book_ids: Sequence[str]) -> list[tuple[Statement, Params]]:
    """The statements `states_of` reads the books' state from: their runs, attempts, books."""
    ids = list(book_ids)
    return [
        (statements.RUNS_OF_BOOKS, (ids,)),
        (statements.ATTEMPTS_OF_BOOKS, (ids,)),
        (statements.BOOKS_SELECT, (ids,)),
    ]


def states_of(
    book_ids: Sequence[str], run_rows: list[Row], attempt_rows: list[Row], book_rows: list[Row]
) -> dict[str, BookState]:
    """The books' states from the rows of `state_queries`."""
    runs: dict[str, list[RunView]] = {book_id: [] for book_id in book_ids}
    runs_by_id: dict[int | None, RunView] = {}
    for row in run_rows:
        run = RunView.from_row(row)
        runs[row["book_id"]].append(run)
        runs_by_id[run.run_id] = run
    attempts: dict[str, list[AttemptView]] = {book_id: [] for book_id in book_ids}
    for row in attempt_rows:
        attempts[row["book_id"]].append(AttemptView.from_row(row, runs_by_id[row["run_id"]]))
    return {
        row["book_id"]: BookState.of(
            BookView.from_row(row), runs[row["book_id"]], attempts[row["book_id"]]
        )
        for row in book_rows
    }


def decide_in_group(
    db: Database,
    state: BookState,
    *,
    mode: Mode,
    projections: Sequence[Projection],
    news_bytes_max: int,
) -> tuple[PassReport, SealedBatch | None]:
    """One book's part of a group (`ingest.group_pass`), inside the group's transaction: the
    journal read from the book's verified hint and its lines decided by the same rules as a pass,
    over `state` as the group loaded it; the batch is returned, not written. Raises `NewsTooLong`
    when the news exceed `news_bytes_max` or one batch, and what a pass raises when the journal
    cannot be read (its problem recorded as a pass records it)."""
    owner = BookPass(db, state.book.book_id, mode=mode, book_lock=False, projections=projections)
    part = _GroupPart()
    report = _Pass(owner, state=state, writer=part, news_bytes_max=news_bytes_max).run()
    return report, part.sealed


def sweep_book(
    db: Database,
    book_dir: str | Path,
    *,
    mode: Mode = "named",
    roots: Sequence[Path] = (),
    batch_lines_max: int = BATCH_LINES_MAX,
    batch_bytes_max: int = BATCH_BYTES_MAX,
    projections: Sequence[Projection] = (),
) -> PassReport:
    """Register the book directory if needed (refused outside `roots`) and make one pass over it,
    giving each applied line to `projections` in its transaction (their tables are set up first:
    `projection_step.install`)."""
    installed = check_projections(projections)
    if installed:
        install(db, installed)
    book = register_book(db, book_dir, roots)
    return BookPass(
        db,
        book.book_id,
        mode=mode,
        batch_lines_max=batch_lines_max,
        batch_bytes_max=batch_bytes_max,
        projections=installed,
    ).run()

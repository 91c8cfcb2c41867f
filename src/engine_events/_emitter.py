"""The emitter: the host's events stored in its own transaction, then projected to the journal.

    emitter = Emitter.open(conn, book_dir, chunker_version="c1")   # lock, recover, hello
    with emitter.transaction():                                    # BEGIN IMMEDIATE ... COMMIT
        conn.execute("INSERT INTO checkpoint ...")                 # the host's own rows
        emitter.emit(Spend(committed_micro_usd=1_250_000))         # the event, same transaction
    # after COMMIT the transaction() block has projected the new lines (write + fsync)
    emitter.close()

With `Emitter.open(..., retention=timedelta(days=7))` the emitter also deletes the outbox rows it no
longer needs once they are that old (`_prune`): at start, at most every `prune_interval_s` after a
flush, and at close, a bounded batch at a time. `emitter.prune()` does one batch when the host says.

An event exists iff the checkpoint committed: `emit` runs inside the host's transaction, which
allocates the seq and stores the exact line bytes, and is rolled back with it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import orjson

from . import _outbox, _prune, _sql
from ._events import (
    PID_SINCE,
    STREAM_VERSION,
    Event,
    Hello,
    require_writable_stream_version,
    stream_version_tuple,
)
from ._file_mode import DEFAULT_FILE_MODE, require_file_mode
from ._journal_file import JournalFile, JournalIO, OsJournalIO
from ._line import now_time
from ._lock import BookLock
from ._projection import Projector
from ._prune import PRUNE_ROWS_MAX, PruneResult, require_retention
from ._schema import migrate, require_durable
from ._sqlite import translated
from ._status_file import write_status_file
from .errors import (
    BookDatabaseError,
    EngineEventsError,
    EventError,
    JournalWriteError,
    NotInTransaction,
    StreamFinished,
)

JournalErrorPolicy = Literal["degrade", "fail"]

STATUS_INTERVAL_S = 1.0
"""`status.json` is rewritten at most this often while events flow (and always at close)."""

log = logging.getLogger("engine_events")


class Emitter:
    """The engine side of the seam for one process (one stream). Build it with `Emitter.open`."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        book_dir: Path,
        lock: BookLock,
        journal: JournalFile,
        *,
        on_journal_error: JournalErrorPolicy,
        stream_version: str = STREAM_VERSION,
        retention: dt.timedelta | None = None,
        prune_interval_s: float = 60.0,
        file_mode: int = DEFAULT_FILE_MODE,
    ) -> None:
        self._conn = conn
        self._file_mode = file_mode
        self.stream_version = stream_version
        self.book_dir = book_dir
        self._lock = lock
        self._journal = journal
        self._projector = Projector(conn, journal)
        self._policy: JournalErrorPolicy = on_journal_error
        self._status_written_at = 0.0
        self._retention = retention
        """Outbox rows older than this may be pruned (None: the emitter never prunes by itself)."""
        self._prune_interval_s = prune_interval_s
        self._prune_due_at = 0.0
        """When the next automatic prune may run (`time.monotonic()`); 0: at the first flush."""
        self._degraded = False
        self._earlier_streams_pending = False
        self._stream_no = 0
        self._last_seq = 0
        self._finished_seq: int | None = None
        """The seq of a `finished` this process stored, until the outbox shows it rolled back."""
        self._latest_progress: dict[str, Any] | None = None
        self.engine_run_id = ""
        self.book_id = ""

    # -- life ----------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        conn: sqlite3.Connection,
        book_dir: Path | str,
        *,
        book_id: str | None = None,
        chunker_version: str = "",
        engine_run_id: str | None = None,
        on_journal_error: JournalErrorPolicy = "degrade",
        lock: BookLock | None = None,
        stream_version: str = STREAM_VERSION,
        retention: dt.timedelta | None = None,
        prune_interval_s: float = 60.0,
        file_mode: int = DEFAULT_FILE_MODE,
    ) -> Emitter:
        """Take the book lock, recover, and start a new stream with its `hello` (seq 1).

        Recovery runs in the order of the contract: (1) a torn tail is cut back to the last `\\n`,
        (2) committed rows of earlier streams that were not projected are appended, byte-identical,
        (3) the new stream's hello is committed and projected.

        `stream_version` is the version the stream is written in, one of `STREAM_VERSIONS`:
        "1.3" (the default) or "1.4", whose hello also carries the process's `pid`. Any other is
        refused with `StreamVersionNotSupported` (exit 10) before the book is touched.

        `retention` turns pruning on: outbox rows older than it (a `datetime.timedelta`), already
        durable in the journal, of streams that are finished or of earlier processes, are deleted
        a bounded batch at a time — once the new stream has started, then at most every
        `prune_interval_s` seconds after a flush (at once again while batches come back full),
        and at close. None (the default) keeps every row. Anything but a `timedelta` of zero or
        more is refused with `RetentionInvalid` (exit 10) before the book is touched.

        `file_mode` is the mode of the files the emitter creates in the book (the journal, the
        lock, status.json), less the process's umask: by default 0o640 (the owner reads and
        writes, its group reads, others nothing). One that takes the owner's read or write away,
        or holds more than read and write bits, is refused with `FileModeInvalid` (exit 10)
        before the book is touched. A file already there keeps its mode.
        """
        return cls._open(
            conn,
            book_dir,
            OsJournalIO(),
            book_id=book_id,
            chunker_version=chunker_version,
            engine_run_id=engine_run_id,
            on_journal_error=on_journal_error,
            lock=lock,
            stream_version=stream_version,
            retention=retention,
            prune_interval_s=prune_interval_s,
            file_mode=file_mode,
        )

    @classmethod
    def _open(
        cls,
        conn: sqlite3.Connection,
        book_dir: Path | str,
        io: JournalIO,
        *,
        book_id: str | None = None,
        chunker_version: str = "",
        engine_run_id: str | None = None,
        on_journal_error: JournalErrorPolicy = "degrade",
        lock: BookLock | None = None,
        stream_version: str = STREAM_VERSION,
        retention: dt.timedelta | None = None,
        prune_interval_s: float = 60.0,
        file_mode: int = DEFAULT_FILE_MODE,
    ) -> Emitter:
        """`open` with the journal's system calls going through `io`: the fault seam, reached by
        `engine_events.testing.open_emitter` (and the reference engine run under faults)."""
        require_writable_stream_version(stream_version)
        require_file_mode(file_mode)
        if retention is not None:
            require_retention(retention)
        if on_journal_error not in ("degrade", "fail"):
            raise ValueError(
                f"on_journal_error must be 'degrade' or 'fail', not {on_journal_error!r}"
            )
        book_path = Path(book_dir)
        owned_lock = lock is None
        held = BookLock(book_path, file_mode=file_mode) if lock is None else lock
        journal = JournalFile(book_path, io, file_mode=file_mode)
        try:
            require_durable(conn)
            migrate(conn)
            emitter = cls(
                conn,
                book_path,
                held,
                journal,
                on_journal_error=on_journal_error,
                stream_version=stream_version,
                retention=retention,
                prune_interval_s=prune_interval_s,
                file_mode=file_mode,
            )
            emitter._degraded = emitter._journal_state() == "degraded"
            emitter._recover()
            emitter._begin_stream(
                engine_run_id or str(uuid.uuid4()), book_id or book_path.name, chunker_version
            )
        except BaseException:
            journal.close()  # a failed start must not leave the journal's descriptor open
            if owned_lock:
                held.close()
            raise
        return emitter

    def close(self) -> None:
        """Project what is left, record the watermark durably, write status.json, prune (with a
        retention: the stream's own rows too once it is finished), drop the lock."""
        try:
            if self._lock.held:
                self._project()
                self._projector.record_watermarks()
                self._write_status(force=True)
                self._prune_when_due(force=True)
        finally:
            self._journal.close()
            self._lock.close()

    def __enter__(self) -> Emitter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- events --------------------------------------------------------------------------------

    def emit(self, event: Event) -> int:
        """Store `event` as the stream's next line, inside the host's open transaction.

        Returns its seq. Raises `NotInTransaction` outside a transaction, `EventError` for an event
        that cannot be a line (a `hello`, a line over 1 MiB), `StreamFinished` once the stream's
        `finished` is stored (committed, or earlier in the open transaction): it is the stream's
        last line. Nothing is written to the file here.
        """
        if isinstance(event, Hello):
            raise EventError("the emitter writes the hello itself, at the start of the stream")
        return self._store(event)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """`BEGIN IMMEDIATE` on the host's connection; COMMIT on success, then project the lines.

        An exception rolls the transaction back (a failed rollback is logged, not raised over the
        first error) and nothing of it reaches the journal.
        """
        if self._conn.in_transaction:
            raise EngineEventsError("a transaction is already open on the host's connection")
        with translated():
            self._conn.execute(_sql.BEGIN_IMMEDIATE)
        try:
            yield self._conn  # the host's own statements: its errors are its own, untranslated
        except BaseException:
            self._rollback_quietly()
            raise
        try:
            with translated():
                self._conn.commit()  # durable: the connection is WAL + synchronous=FULL
        except BookDatabaseError:
            # Not committed (SQLITE_BUSY, SQLITE_FULL, ...): nothing of it may reach the journal.
            self._rollback_quietly()
            raise
        self.flush()

    def _rollback_quietly(self) -> None:
        """Roll back after a first error; a failed rollback is logged, never raised over it."""
        try:
            with translated():
                self._conn.rollback()
        except BookDatabaseError as rollback_error:
            log.error("rollback failed after an error in the transaction: %s", rollback_error)

    def flush(self) -> None:
        """Project the committed rows not yet in the journal. Call it after every commit.

        With the `degrade` policy a failing disk leaves the rows in the outbox, records
        `journal: degraded` and returns; the next flush tries again. With `fail` it raises
        `JournalWriteError` (the rows stay committed; the next start projects them). With a
        retention, a prune follows when one is due.
        """
        self._project()
        self._prune_when_due()

    def prune(
        self, retention: dt.timedelta | None = None, *, max_rows: int = PRUNE_ROWS_MAX
    ) -> PruneResult:
        """Delete one batch of the outbox rows the engine no longer needs: rows durable in the
        journal (up to their stream's recorded watermark), of streams that are finished or of
        earlier processes, older than `retention` by the time on their line — the emitter's own
        retention when None, or, when it has none, zero: every row that may go.

        Runs in the host's open transaction when there is one (and commits or rolls back with
        it), else in one of its own. At most `max_rows` rows (and about 8 MiB of lines) go, so
        the write lock is never held long; `limit_reached` in the result says to call again.
        `status --json` reports exactly the same after it. Raises `RetentionInvalid` for a
        retention that is not a `timedelta` of zero or more.
        """
        if retention is None:
            retention = self._retention if self._retention is not None else dt.timedelta(0)
        if not self._lock.held:
            raise EngineEventsError("prune() after close(): the book is no longer this emitter's")
        return _prune.prune(
            self._conn, retention=retention, live_stream_no=self._stream_no, rows_max=max_rows
        )

    def _project(self) -> None:
        """Project what is committed (see `flush`), without pruning."""
        if self._conn.in_transaction:
            raise EngineEventsError("flush() runs after COMMIT, never inside a transaction")
        try:
            if not self._journal.is_open:
                self._journal.open()
            if self._earlier_streams_pending:
                self._projector.recover()
                self._projector.record_watermarks()
                self._earlier_streams_pending = False
            self._projector.project_stream(self._stream_no)
        except OSError as error:
            self._on_journal_error(error)
            return
        if self._degraded:
            self._set_journal_state("ok")
            log.warning("journal: writable again; the outbox backlog is projected")
        self._write_status(force=False)

    # -- state for people ----------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        return self._last_seq

    @property
    def journal_degraded(self) -> bool:
        return self._degraded

    # -- internals -----------------------------------------------------------------------------

    def _recover(self) -> None:
        try:
            self._journal.open()  # cuts the torn tail: step (1)
            self._projector.recover()  # step (2)
        except OSError as error:
            self._earlier_streams_pending = True
            self._on_journal_error(error)
        else:
            self._projector.record_watermarks()

    @translated()
    def _begin_stream(self, engine_run_id: str, book_id: str, chunker_version: str) -> None:
        writes_pid = stream_version_tuple(self.stream_version) >= PID_SINCE
        hello = Hello(
            engine_run_id=engine_run_id,
            book_id=book_id,
            chunker_version=chunker_version,
            stream_version=self.stream_version,
            pid=os.getpid() if writes_pid else None,
        )
        self._conn.execute(_sql.BEGIN_IMMEDIATE)
        try:
            if self._conn.execute(
                _sql.STREAM_BY_RUN_ID, {"engine_run_id": engine_run_id}
            ).fetchone():
                raise EventError("this engine_run_id already names a stream of this book")
            cursor = self._conn.execute(
                _sql.STREAM_INSERT, {"engine_run_id": engine_run_id, "book_id": book_id}
            )
            self._stream_no = int(cursor.lastrowid or 0)
            self._store(hello)
            # The stream's summary row exists from its first line: one write per process.
            _outbox.refresh_summary(self._conn, self._stream_no)
        except BaseException:
            self._conn.rollback()
            raise
        self._conn.commit()
        self.engine_run_id = engine_run_id
        self.book_id = book_id
        self.flush()  # step (3)

    def _store(self, event: Event) -> int:
        if not self._conn.in_transaction:
            raise NotInTransaction(
                f"emit({event.type}) outside a transaction: an event must be committed together "
                "with the checkpoint it describes"
            )
        if self._finished_seq is not None:
            self._refuse_after_finished()
        projected = self._projector.projected.get(self._stream_no, 0)
        # The row this process stored last is, unless a rollback took it away, the stream's last:
        # `store` checks that in the insert itself and reads the last row only when it is not.
        seq, _ = _outbox.store(
            self._conn, self._stream_no, event, projected, after_seq=self._last_seq
        )
        self._last_seq = seq
        if event.type == "finished":
            self._finished_seq = seq
        if event.type == "progress":
            self._latest_progress = event.data()["phases"]
        return seq

    def _refuse_after_finished(self) -> None:
        """Raise `StreamFinished` if the outbox holds this stream's `finished`.

        Memory only says that a `finished` was stored once; whether it still is, the host's
        transaction decides (a rollback, the emitter's or the host's own, takes it away). The last
        outbox row of the stream, read inside the open transaction, carries the seq of the
        stream's latest `finished` (its summary row does, once a prune took every row), so only
        this check costs a read, and only after a `finished`.
        """
        finished_seq = _outbox.finished_seq(self._conn, self._stream_no)
        if finished_seq is not None:
            raise StreamFinished(finished_seq)
        self._finished_seq = None

    def _on_journal_error(self, error: OSError) -> None:
        if self._policy == "fail":
            raise JournalWriteError(
                error.errno, f"cannot write the journal: {error.strerror}", str(self._journal.path)
            ) from error
        if not self._degraded:
            log.error(
                "journal: cannot write (errno %s, %s); degrading: events stay in the outbox and "
                "are projected when the journal is writable again",
                error.errno,
                os.strerror(error.errno) if error.errno else error,
            )
            self._set_journal_state("degraded")

    @translated()
    def _journal_state(self) -> str:
        row = self._conn.execute(_sql.JOURNAL_STATE_GET).fetchone()
        return "ok" if row is None else str(row[0])

    @translated()
    def _set_journal_state(self, state: str) -> None:
        self._conn.execute(_sql.BEGIN_IMMEDIATE)
        try:
            self._conn.execute(_sql.JOURNAL_STATE_SET, {"state": state})
        except BaseException:
            self._conn.rollback()
            raise
        self._conn.commit()
        self._degraded = state == "degraded"

    def _prune_when_due(self, *, force: bool = False) -> None:
        """With a retention, one prune in a transaction of its own when it is due (`force`: now).
        Housekeeping after the host's commit succeeded: a database error is logged, never raised
        over that commit, and the prune tried again an interval later."""
        if self._retention is None:
            return
        now = time.monotonic()
        if not force and now < self._prune_due_at:
            return
        try:
            result = self.prune()
        except BookDatabaseError as error:
            log.warning("outbox: rows not pruned this time (%s); trying again later", error)
            self._prune_due_at = now + self._prune_interval_s
            return
        # A full batch leaves more to do: the next flush goes on with it.
        self._prune_due_at = now if result.limit_reached else now + self._prune_interval_s

    def _write_status(self, *, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._status_written_at < STATUS_INTERVAL_S:
            return
        self._status_written_at = now
        snapshot = {
            "engine_run_id": self.engine_run_id,
            "pid": os.getpid(),
            "last_seq": self._last_seq,
            "projected_seq": self._projector.projected.get(self._stream_no, 0),
            "journal": "degraded" if self._degraded else "ok",
            "progress": self._latest_progress,
            "updated_at": now_time(),
        }
        try:
            write_status_file(
                self.book_dir, orjson.dumps(snapshot, option=orjson.OPT_INDENT_2), self._file_mode
            )
        except OSError as error:  # cosmetic: never let it stop the engine
            log.warning("status.json not written (errno %s)", error.errno)

"""The fault seams of `engine_events.testing`: the journal's system calls and the COMMITs.

`FaultyIO` is a `JournalIO` (given to an emitter by `open_emitter`) that can fail writes with an errno (ENOSPC, EIO, ...) — first writing
part of the data, as a full disk does — and can kill the process with SIGKILL at a named point of the
projection:

    before_write   after the SQLite commit, before the line is written
    mid_write      after part of the line was written
    before_fsync   after the write, before fsync
    after_fsync    after fsync, before the watermark is recorded

and, outside the projection, at `before_directory_fsync` (the journal was just opened, its
directory not yet fsynced). The system calls themselves go to `inner` (the real ones by default; a
`PowerCutIO` records them for the power-cut model).

With `in_process=True` a crash raises `SimulatedCrash` (a BaseException: nothing in the library
catches it) instead, and `abandon(emitter)` then does what the kernel does for a dead process: it
closes the journal and releases the lock without flushing anything. A model test can so crash and
restart an engine thousands of times in one process.

`FaultyConnection` is the host's SQLite connection inside a simulated world (`world`): it tells the
world of every COMMIT that returned, so that the process can die right there (`AFTER_COMMIT`). On
its own (`sqlite3.connect(..., factory=FaultyConnection)`) it can also kill the process in the middle
of a prune (`MID_PRUNE`): a batch of the outbox's rows deleted, its transaction not committed.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path
from typing import Any, Protocol

from .. import _sql
from .._emitter import Emitter
from .._journal_file import JournalIO, OsJournalIO

CRASH_POINTS = ("before_write", "mid_write", "before_fsync", "after_fsync")
"""The points of the projection where `FaultyIO` can crash the process."""
BEFORE_DIRECTORY_FSYNC = "before_directory_fsync"
"""Where `FaultyIO` can also crash: the journal was just opened (or created), its directory not yet
fsynced. Not a point of the projection, so not in `CRASH_POINTS`."""
_ALL_CRASH_POINTS = (*CRASH_POINTS, BEFORE_DIRECTORY_FSYNC)
AFTER_COMMIT = "after_commit"
"""The crash point of `EngineWorld.crash_after_commit`: right after a SQLite COMMIT returned."""
MID_PRUNE = "mid_prune"
"""The crash point of `FaultyConnection.crash_next`: a prune has just deleted a stream's oldest rows,
in a transaction that is not committed."""


class SimulatedCrash(BaseException):
    """The process died here (in-process crash simulation). `point` says where."""

    @property
    def point(self) -> str:
        return str(self.args[0]) if self.args else "unknown"


class CommitObserver(Protocol):
    """What a `FaultyConnection` reports its COMMITs to (an `EngineWorld`)."""

    def _committed(self, conn: sqlite3.Connection) -> None: ...


def open_emitter(
    conn: sqlite3.Connection, book_dir: Path | str, io: JournalIO, **options: Any
) -> Emitter:
    """`Emitter.open(conn, book_dir, **options)` with the journal's system calls going through `io`
    (a `FaultyIO`, a `PowerCutIO`): the one way to put an emitter on a failing disk or crash it at a
    named point, kept out of `Emitter.open`'s own signature, which production code calls."""
    return Emitter._open(conn, book_dir, io, **options)


def abandon(emitter: Emitter) -> None:
    """What the kernel does when the engine process dies: descriptors closed, the flock released,
    the host's uncommitted transaction discarded. Nothing is flushed or recorded."""
    emitter._journal.close()
    emitter._lock.close()
    if emitter._conn.in_transaction:
        emitter._conn.rollback()


class FaultyIO(OsJournalIO):
    """The real system calls, with faults switched on and off by the test."""

    def __init__(
        self,
        *,
        crash_at: str | None = None,
        crash_on: int = 1,
        fail_errno: int | None = None,
        fail_after_writes: int = 0,
        in_process: bool = False,
        inner: JournalIO | None = None,
    ) -> None:
        if crash_at is not None and crash_at not in _ALL_CRASH_POINTS:
            raise ValueError(
                f"unknown crash point {crash_at!r}; known: {', '.join(_ALL_CRASH_POINTS)}"
            )
        self._inner = inner or OsJournalIO()
        self._opened_fd: int | None = None
        self.crash_at = crash_at
        self._crash_countdown = crash_on
        self._in_process = in_process
        self.fail_errno: int | None = None
        """While set, writes (after a partial one) and fsyncs fail with this errno."""
        self._pending_errno = fail_errno
        self._writes_before_failing = fail_after_writes
        self.failures = 0
        self._partial_written = False

    def write(self, fd: int, data: memoryview) -> int:
        self._maybe_crash("before_write")
        if self._pending_errno is not None:
            if self._writes_before_failing <= 0:
                self.fail_errno, self._pending_errno = self._pending_errno, None
            self._writes_before_failing -= 1
        if self.fail_errno is not None:
            if not self._partial_written and len(data) > 1:
                self._partial_written = True
                return self._inner.write(fd, data[: len(data) // 2])
            self._partial_written = False
            self.failures += 1
            raise OSError(self.fail_errno, os.strerror(self.fail_errno))
        if self.crash_at == "mid_write" and len(data) > 1 and self._due():
            self._inner.write(fd, data[: len(data) // 2])
            self._die("mid_write")
        return self._inner.write(fd, data)

    def fsync(self, fd: int) -> None:
        self._maybe_crash("before_fsync")
        if self.fail_errno is not None:
            self.failures += 1
            raise OSError(self.fail_errno, os.strerror(self.fail_errno))
        self._inner.fsync(fd)
        self._maybe_crash("after_fsync")

    def open(self, path: Path, flags: int, mode: int) -> int:
        self._opened_fd = self._inner.open(path, flags, mode)
        return self._opened_fd

    def ftruncate(self, fd: int, length: int) -> None:
        self._inner.ftruncate(fd, length)

    def fsync_directory(self, path: Path) -> None:
        if self.crash_at == BEFORE_DIRECTORY_FSYNC and self._due():
            if self._in_process and self._opened_fd is not None:
                # The journal does not own the descriptor yet: close it as the kernel would.
                os.close(self._opened_fd)
                self._opened_fd = None
            self._die(BEFORE_DIRECTORY_FSYNC)
        self._inner.fsync_directory(path)

    def crash_next(self, point: str, count: int = 1) -> None:
        """Crash the `count`-th time from now that the projection reaches `point` (or the
        journal's open reaches `BEFORE_DIRECTORY_FSYNC`)."""
        if point not in _ALL_CRASH_POINTS:
            raise ValueError(f"unknown crash point {point!r}")
        if count < 1:
            raise ValueError("count must be >= 1")
        self.crash_at, self._crash_countdown = point, count

    def fail_after(self, code: int | None, writes: int = 0) -> None:
        """After `writes` more good writes, writes and fsyncs fail with `code` (None: heal now)."""
        self.fail_errno = None
        self._partial_written = False
        self._pending_errno = code
        self._writes_before_failing = writes

    def _maybe_crash(self, point: str) -> None:
        if self.crash_at == point and self._due():
            self._die(point)

    def _due(self) -> bool:
        self._crash_countdown -= 1
        return self._crash_countdown == 0

    def _die(self, point: str) -> None:
        self.crash_at = None  # the next process starts healthy
        _die(point, in_process=self._in_process)


def _die(point: str, *, in_process: bool) -> None:
    """The process dies at `point`: `SimulatedCrash` in process, else a real SIGKILL."""
    if in_process:
        raise SimulatedCrash(point)
    os.kill(os.getpid(), signal.SIGKILL)


class FaultyConnection(sqlite3.Connection):
    """The host's SQLite connection inside an `EngineWorld`.

    Every COMMIT is counted by SQLite's trace callback (`EngineWorld.commits`); a commit made
    through `commit()` or `execute("COMMIT")` is also reported to the world once it returned, so
    that the world can make the process die right there. (A `with conn:` block commits in C,
    unseen by the override: hosts inside the world commit through `Emitter.transaction`.)
    """

    world: CommitObserver | None = None
    _prune_crash_countdown = 0
    _prune_crash_in_process = True

    def crash_next(self, point: str, count: int = 1, *, in_process: bool = True) -> None:
        """Die the `count`-th time from now this connection reaches `point` (`MID_PRUNE`): with
        `SimulatedCrash` (`in_process`), or a real SIGKILL."""
        if point != MID_PRUNE:
            raise ValueError(f"unknown crash point {point!r}; known: {MID_PRUNE}")
        if count < 1:
            raise ValueError("count must be >= 1")
        self._prune_crash_countdown = count
        self._prune_crash_in_process = in_process

    def disarm(self) -> None:
        """No crash of this connection is pending any more."""
        self._prune_crash_countdown = 0

    def commit(self) -> None:
        super().commit()
        if self.world is not None:
            self.world._committed(self)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        cursor = super().execute(sql, parameters)
        if self.world is not None and _is_commit(sql):
            self.world._committed(self)
        if sql == _sql.OUTBOX_PRUNE and self._prune_crash_countdown > 0:
            self._prune_crash_countdown -= 1
            if self._prune_crash_countdown == 0:
                _die(MID_PRUNE, in_process=self._prune_crash_in_process)
        return cursor


def _is_commit(statement: str) -> bool:
    words = statement.strip().rstrip(";").split()
    return bool(words) and words[0].upper() in ("COMMIT", "END")

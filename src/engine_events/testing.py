"""Fault injection for hosts' and our own tests: one seam, the journal's system calls.

`FaultyIO` is a `JournalIO` that can fail writes with an errno (ENOSPC, EIO, ...) — first writing
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

`EngineWorld` is a simulated world for a host's own checkpoint code: a book directory with a real
SQLite database and a real journal file, in which engine processes start, run the host's steps,
crash — right after any SQLite COMMIT, or at any point of the projection — exit, restart and are
repaired, with the disk failing and healing, all through the same seam. The host's code runs
unchanged: it gets the world's connection and the emitter, as it would get its own in production.

    world = EngineWorld(book_dir, setup=create_my_tables)
    world.crash_after_commit(3)                   # the process dies right after its 3rd COMMIT
    outcome = world.run(my_engine_main)           # my_engine_main(conn, emitter) -> exit code
    if outcome.crashed_at is not None:
        world.repair()                            # or: world.run(my_engine_main) again
    world.check_journal(complete=True)            # every committed row is in the file, once
    world.close()

Power cuts (`engine_events._power_cut`, re-exported here): `EngineWorld(book, recorder=PowerCutIO())`
records every system call of the journal and a snapshot of the database after every COMMIT;
`crash_states` enumerates what the disk may hold after a power cut at every point of that
recording, and `materialize` lays one out for an engine to restart on. `live` plays a scripted life
of the reference engine in a world.

`python -m engine_events.testing BOOK_DIR [--crash-at POINT:N] [--fail-with ERRNO:N] [options]` runs
the reference engine with such an IO: the crash and fault tests use it on real processes.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import signal
import sqlite3
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import orjson

from . import _outbox, _sql
from ._demo import DemoOptions, StopRequests, _create_host_schema, _Engine, run_demo
from ._emitter import Emitter, JournalErrorPolicy
from ._exit_codes import ExitCode
from ._journal_file import JOURNAL_FILE_NAME, JournalIO, OsJournalIO
from ._lock import BookLock
from ._power_cut import PAGE_BYTES, CrashState, Op, PowerCutIO, Tears, crash_states, materialize
from ._schema import DATABASE_FILE_NAME, require_known_version
from ._status import read_status, repair
from .errors import EngineEventsError

__all__ = [
    "AFTER_COMMIT",
    "BEFORE_DIRECTORY_FSYNC",
    "CRASH_POINTS",
    "PAGE_BYTES",
    "CrashState",
    "EngineWorld",
    "FaultyConnection",
    "FaultyIO",
    "Host",
    "InvariantViolated",
    "JournalCheck",
    "LifeStep",
    "Op",
    "Outcome",
    "PowerCutIO",
    "SimulatedCrash",
    "Tears",
    "abandon",
    "crash_states",
    "live",
    "main",
    "materialize",
    "reference_engine",
]

CRASH_POINTS = ("before_write", "mid_write", "before_fsync", "after_fsync")
"""The points of the projection where `FaultyIO` can crash the process."""
BEFORE_DIRECTORY_FSYNC = "before_directory_fsync"
"""Where `FaultyIO` can also crash: the journal was just opened (or created), its directory not yet
fsynced. Not a point of the projection, so not in `CRASH_POINTS`."""
_ALL_CRASH_POINTS = (*CRASH_POINTS, BEFORE_DIRECTORY_FSYNC)
AFTER_COMMIT = "after_commit"
"""The crash point of `EngineWorld.crash_after_commit`: right after a SQLite COMMIT returned."""

T = TypeVar("T")
Host = Callable[[sqlite3.Connection, Emitter], int]
"""A host's main: runs the engine's steps on the connection and the emitter, returns an exit code."""


class SimulatedCrash(BaseException):
    """The process died here (in-process crash simulation). `point` says where."""

    @property
    def point(self) -> str:
        return str(self.args[0]) if self.args else "unknown"


class InvariantViolated(AssertionError):
    """The journal and the outbox disagree: something committed was lost, doubled or changed."""


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
        if self._in_process:
            self.crash_at = None  # the next process starts healthy
            raise SimulatedCrash(point)
        os.kill(os.getpid(), signal.SIGKILL)


class FaultyConnection(sqlite3.Connection):
    """The host's SQLite connection inside an `EngineWorld`.

    Every COMMIT is counted by SQLite's trace callback (`EngineWorld.commits`); a commit made
    through `commit()` or `execute("COMMIT")` is also reported to the world once it returned, so
    that the world can make the process die right there. (A `with conn:` block commits in C,
    unseen by the override: hosts inside the world commit through `Emitter.transaction`.)
    """

    world: EngineWorld | None = None

    def commit(self) -> None:
        super().commit()
        if self.world is not None:
            self.world._committed(self)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        cursor = super().execute(sql, parameters)
        if self.world is not None and _is_commit(sql):
            self.world._committed(self)
        return cursor


def _is_commit(statement: str) -> bool:
    words = statement.strip().rstrip(";").split()
    return bool(words) and words[0].upper() in ("COMMIT", "END")


@dataclass(frozen=True)
class Outcome:
    """How one engine process of the world ended: an exit code, or a crash at a point."""

    exit_code: int | None
    crashed_at: str | None
    engine_run_id: str | None


@dataclass
class JournalCheck:
    """What `EngineWorld.check_journal` found: the distinct lines in file order, and repeats."""

    keys: list[tuple[str, int]] = field(default_factory=list)
    duplicates: int = 0
    torn_tail_bytes: int = 0


class EngineWorld:
    """A book directory in which simulated engine processes live and die (see the module doc).

    One process at a time, as the book lock allows. Every fault goes through the world's seam:
    `io` (a `FaultyIO`: the journal's system calls, crashes at projection points, ENOSPC/EIO) and
    the connection's COMMITs (`crash_after_commit`). A crash raises `SimulatedCrash` inside the
    host's code; the world then does what the kernel does for a dead process — the journal's
    descriptor and the lock are closed, the SQLite connection is closed with its open transaction
    discarded — and counts it in `crashes` by point.

    With a `recorder` (a `PowerCutIO`) under the faults, every system call of the journal and a
    snapshot of the database after every COMMIT are recorded, for the power-cut model.
    """

    def __init__(
        self,
        book_dir: Path | str,
        *,
        setup: Callable[[sqlite3.Connection], None] | None = None,
        database_name: str = DATABASE_FILE_NAME,
        book_id: str | None = None,
        chunker_version: str = "",
        on_journal_error: JournalErrorPolicy = "degrade",
        recorder: PowerCutIO | None = None,
    ) -> None:
        self.book_dir = Path(book_dir)
        self.book_dir.mkdir(parents=True, exist_ok=True)
        self.database = self.book_dir / database_name
        self.setup = setup
        self.book_id = book_id
        self.chunker_version = chunker_version
        self.on_journal_error: JournalErrorPolicy = on_journal_error
        self.recorder = recorder
        self.io = FaultyIO(in_process=True, inner=recorder)
        self.commits = 0
        """COMMITs SQLite executed, over every process of this world (its trace callback)."""
        self.commits_returned = 0
        """COMMITs that returned to the code that made them (equals `commits` unless one failed)."""
        self.crashes: Counter[str] = Counter()
        self.processes = 0
        self.conn: FaultyConnection | None = None
        self.emitter: Emitter | None = None
        self._lock: BookLock | None = None
        self._commit_countdown = 0

    # -- faults --------------------------------------------------------------------------------

    def crash_after_commit(self, count: int = 1) -> None:
        """The process dies right after the `count`-th COMMIT from now returns (0: never)."""
        if count < 0:
            raise ValueError("count must be >= 0")
        self._commit_countdown = count

    def crash_at(self, point: str) -> None:
        """The process dies the next time it reaches `point` (`AFTER_COMMIT` or a projection
        point of `CRASH_POINTS`)."""
        if point == AFTER_COMMIT:
            self.crash_after_commit(1)
        else:
            self.io.crash_next(point)

    def disarm(self) -> None:
        """No crash is pending any more."""
        self._commit_countdown = 0
        self.io.crash_at = None

    def disk_fails(self, code: int) -> None:
        """From now on writes (after a partial one) and fsyncs of the journal fail with `code`."""
        self.io.fail_errno = code

    def disk_heals(self) -> None:
        self.io.fail_after(None)

    # -- processes -----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.emitter is not None

    def start(
        self,
        engine_run_id: str | None = None,
        *,
        on_journal_error: JournalErrorPolicy | None = None,
    ) -> Emitter:
        """A new engine process: connect, lock, the host's `setup`, then `Emitter.open` (recovery
        and the new stream's hello). Raises `SimulatedCrash` when it died while starting, and the
        emitter's errors (the process exits) — in both cases nothing is left running."""
        if self.running:
            raise RuntimeError("an engine process is already running in this world")
        self.processes += 1
        self.conn = self._connect()
        try:
            self._lock = BookLock(self.book_dir)
            if self.setup is not None:
                self.setup(self.conn)
            self.emitter = Emitter.open(
                self.conn,
                self.book_dir,
                book_id=self.book_id,
                chunker_version=self.chunker_version,
                engine_run_id=engine_run_id,
                on_journal_error=on_journal_error or self.on_journal_error,
                lock=self._lock,
                io=self.io,
            )
        except SimulatedCrash as crash:
            self._bury(crash.point)
            raise
        except BaseException:
            self._bury(None)
            raise
        return self.emitter

    def step(self, action: Callable[[sqlite3.Connection, Emitter], T]) -> T:
        """Run `action(conn, emitter)` in the live process. A crash inside it buries the process
        and propagates; so does an emitter error (with the `fail` policy the host exits)."""
        if self.conn is None or self.emitter is None:
            raise RuntimeError("no engine process is running in this world")
        try:
            return action(self.conn, self.emitter)
        except SimulatedCrash as crash:
            self._bury(crash.point)
            raise
        except EngineEventsError:
            with contextlib.suppress(EngineEventsError, OSError):
                self.exit()  # the host exits: what is left is projected, or stays in the outbox
            raise

    def exit(self) -> None:
        """The process ends on purpose: the emitter projects what is left, records its watermark
        and drops the lock (a crash inside that propagates, the process buried)."""
        emitter = self.emitter
        if emitter is None:
            return
        try:
            emitter.close()
        except SimulatedCrash as crash:
            self._bury(crash.point)
            raise
        except (EngineEventsError, OSError):
            self._bury(None)  # the host exits 1; the rows stay in the outbox
            raise
        self._bury(None)

    def crash(self, point: str = "between_steps") -> None:
        """The process dies now (SIGKILL between two steps)."""
        if self.emitter is None:
            raise RuntimeError("no engine process is running in this world")
        self._bury(point)

    def run(self, host: Host, engine_run_id: str | None = None) -> Outcome:
        """One whole engine process: start, the host's main, exit. Never raises for a crash or an
        emitter error: both are outcomes (exit code None, or the error's exit code)."""
        try:
            emitter = self.start(engine_run_id)
            run_id = emitter.engine_run_id
            code = self.step(host)
            self.exit()
        except SimulatedCrash as crash:
            return Outcome(None, crash.point, engine_run_id)
        except EngineEventsError as error:
            return Outcome(int(error.exit_code), None, engine_run_id)
        return Outcome(code, None, run_id)

    def repair(self) -> dict[str, Any]:
        """`engine-events status BOOK_DIR --json --repair` over the stopped run, as a process of
        this world (its faults apply). Returns the status report; raises `SimulatedCrash` (the
        repair process died) or `OSError` (the disk refused)."""
        if self.running:
            raise RuntimeError("repair runs over a stopped engine")
        self.processes += 1
        self.conn = self._connect()
        try:
            self._lock = BookLock(self.book_dir)
            repair(self.conn, self.book_dir, io=self.io)
            report = read_status(self.conn)
        except SimulatedCrash as crash:
            self._bury(crash.point)
            raise
        except BaseException:
            self._bury(None)
            raise
        self._bury(None)
        return report

    def status(self) -> dict[str, Any]:
        """`engine-events status BOOK_DIR --json` (no repair) over the stopped run."""
        if self.running:
            raise RuntimeError("status reads a stopped engine's book")
        with BookLock(self.book_dir):
            conn = sqlite3.connect(self.database, isolation_level=None)
            try:
                return read_status(conn)
            finally:
                conn.close()

    def close(self) -> None:
        """Tear the world down (a live process is buried, not closed)."""
        if self.conn is not None:
            self._bury(None)

    # -- what is true --------------------------------------------------------------------------

    def committed(self) -> list[tuple[str, int, bytes]]:
        """Every committed outbox row as (engine_run_id, seq, line), streams in order."""
        conn = sqlite3.connect(self.database, isolation_level=None)
        try:
            if require_known_version(conn) == 0:
                return []
            rows: list[tuple[str, int, bytes]] = []
            for state in _outbox.streams(conn):
                after = 0
                while after < state.last_seq:
                    page = conn.execute(
                        _sql.OUTBOX_AFTER,
                        {"stream_no": state.stream_no, "after_seq": after, "limit": 512},
                    ).fetchall()
                    for seq, line in page:
                        rows.append((state.engine_run_id, int(seq), bytes(line)))
                        after = int(seq)
            return rows
        finally:
            conn.close()

    def check_journal(self, *, complete: bool = False) -> JournalCheck:
        """Check the journal against the outbox; raise `InvariantViolated` when they disagree.

        Always: every complete line is a committed row's exact bytes; a repeated (stream, seq) is
        byte-identical; each stream is dense from its hello; the distinct lines, in file order,
        are a prefix of the commit order. With `complete`: every committed row is in the file.
        """
        committed = self.committed()
        order = [(run_id, seq) for run_id, seq, _ in committed]
        rows = {(run_id, seq): line for run_id, seq, line in committed}
        path = self.book_dir / JOURNAL_FILE_NAME
        content = path.read_bytes() if path.exists() else b""
        whole = content[: content.rfind(b"\n") + 1]
        found = JournalCheck(torn_tail_bytes=len(content) - len(whole))
        seen: dict[tuple[str, int], bytes] = {}
        stream: str | None = None
        for raw in whole.splitlines(keepends=True):
            try:
                line = orjson.loads(raw)
            except orjson.JSONDecodeError as error:
                raise InvariantViolated(
                    f"a line of the journal is not JSON: {raw[:80]!r}"
                ) from error
            if line.get("type") == "hello":
                stream = line["data"]["engine_run_id"]
            if stream is None:
                raise InvariantViolated("a line before any hello")
            key = (stream, line["seq"])
            if key in seen:
                if seen[key] != raw:
                    raise InvariantViolated(f"{key} repeated with other bytes")
                found.duplicates += 1
                continue
            if rows.get(key) != raw:
                raise InvariantViolated(f"line {key} is not the committed row's bytes")
            seen[key] = raw
            found.keys.append(key)
        if found.keys != order[: len(found.keys)]:
            raise InvariantViolated("the journal's lines are not a prefix of the commit order")
        if complete and len(found.keys) != len(order):
            missing = order[len(found.keys)]
            raise InvariantViolated(
                f"{len(order) - len(found.keys)} committed rows are not in the journal "
                f"(first: {missing})"
            )
        return found

    def check_watermarks(self) -> None:
        """Raise `InvariantViolated` when a stream's recorded watermark runs ahead of the journal:
        a row the database counts as durable in the file is not among the file's complete lines
        (after a power cut, the next start would then never append it)."""
        if not self.database.exists():
            return
        found = set(self.check_journal().keys)
        for stream in self.status()["streams"]:
            run_id, projected = stream["engine_run_id"], stream["projected_seq"]
            missing = [seq for seq in range(1, projected + 1) if (run_id, seq) not in found]
            if missing:
                raise InvariantViolated(
                    f"stream {run_id} is recorded as projected up to seq {projected}, but the "
                    f"journal lacks seq {missing[0]}"
                    + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
                )

    # -- internals -----------------------------------------------------------------------------

    def _connect(self) -> FaultyConnection:
        conn = sqlite3.connect(
            self.database, isolation_level=None, timeout=10.0, factory=FaultyConnection
        )
        conn.set_trace_callback(self._traced)
        conn.execute(_sql.JOURNAL_MODE_WAL_SET)
        conn.execute(_sql.SYNCHRONOUS_FULL_SET)
        conn.world = self
        return conn

    def _traced(self, statement: str) -> None:
        if _is_commit(statement):
            self.commits += 1

    def _committed(self, conn: sqlite3.Connection) -> None:
        if self.recorder is not None:
            self.recorder.commit(conn)
        self.commits_returned += 1
        if self._commit_countdown > 0:
            self._commit_countdown -= 1
            if self._commit_countdown == 0:
                raise SimulatedCrash(AFTER_COMMIT)

    def _bury(self, point: str | None) -> None:
        """What the kernel does for a process that ended: descriptors closed, lock released, the
        uncommitted transaction discarded. Counted as a crash when `point` is given."""
        if point is not None:
            self.crashes[point] += 1
        if self.emitter is not None:
            abandon(self.emitter)
            self.emitter = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        if self.conn is not None:
            self.conn.world = None
            self.conn.close()  # an open transaction is rolled back
            self.conn = None


def reference_engine(
    options: DemoOptions, stops: StopRequests | None = None
) -> tuple[Callable[[sqlite3.Connection], None], Host]:
    """The reference engine of `engine-events demo` as an `EngineWorld` host: (setup, main)."""
    requests = stops or StopRequests()

    def main(conn: sqlite3.Connection, emitter: Emitter) -> int:
        return _Engine(conn, emitter, options, requests).run()

    return _create_host_schema, main


@dataclass(frozen=True)
class LifeStep:
    """One process in a scripted life of the reference engine (see `live`)."""

    ceiling_micro_usd: int | None = None
    """The book's money ceiling for this process (None: none)."""
    crash_at: str | None = None
    """Where this process dies: a point of `CRASH_POINTS`, `BEFORE_DIRECTORY_FSYNC` or
    `AFTER_COMMIT`, the `crash_on`-th time it gets there (None: it does not)."""
    crash_on: int = 1
    disk_fails_after: int | None = None
    """The journal's disk fails with ENOSPC after this many good writes of this process (after a
    partial write, as a full disk does), and heals when the process ends."""
    repair: bool = False
    """Not an engine: `engine-events status --repair` over the stopped run."""


def live(world: EngineWorld, steps: list[LifeStep], options: DemoOptions) -> list[Outcome]:
    """Play a scripted life in `world`: each step one process of the reference engine (streams
    named `run-1`, `run-2`, ... by step), or a repair. Returns how each process ended (a repair's
    exit code is 0, or 1 when the disk refused it)."""
    outcomes = []
    for number, step in enumerate(steps, 1):
        if step.crash_at == AFTER_COMMIT:
            world.crash_after_commit(step.crash_on)
        elif step.crash_at is not None:
            world.io.crash_next(step.crash_at, step.crash_on)
        if step.disk_fails_after is not None:
            world.io.fail_after(errno.ENOSPC, step.disk_fails_after)
        if step.repair:
            try:
                world.repair()
            except SimulatedCrash as crash:
                outcomes.append(Outcome(None, crash.point, None))
            except OSError:
                outcomes.append(Outcome(int(ExitCode.INFRA), None, None))  # the disk refused it
            else:
                outcomes.append(Outcome(0, None, None))
        else:
            setup, main = reference_engine(
                replace(options, ceiling_micro_usd=step.ceiling_micro_usd)
            )
            world.setup = setup
            outcomes.append(world.run(main, f"run-{number}"))
        world.disarm()
        world.disk_heals()
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine_events.testing")
    parser.add_argument("book_dir", type=Path)
    parser.add_argument(
        "--crash-at", default=None, help="POINT:N — SIGKILL at the Nth time at POINT"
    )
    parser.add_argument(
        "--fail-with", default=None, help="ERRNO:N — after N good writes, writes fail with ERRNO"
    )
    parser.add_argument("--on-journal-error", choices=("degrade", "fail"), default="degrade")
    parser.add_argument("--units", type=int, default=4)
    parser.add_argument("--stages", default="draft,edit")
    parser.add_argument("--unit-cost-micro-usd", type=int, default=250_000)
    parser.add_argument("--pace-ms", type=int, default=0)
    args = parser.parse_args(argv)
    crash_at, crash_on = None, 1
    if args.crash_at:
        point, _, count = args.crash_at.partition(":")
        crash_at, crash_on = point, int(count or 1)
    fail_errno, fail_after = None, 0
    if args.fail_with:
        name, _, count = args.fail_with.partition(":")
        fail_errno, fail_after = getattr(errno, name), int(count or 0)
    stops = StopRequests()
    stops.install()
    options = DemoOptions(
        on_journal_error=args.on_journal_error,
        units=args.units,
        stages=tuple(args.stages.split(",")),
        unit_cost_micro_usd=args.unit_cost_micro_usd,
        pace_ms=args.pace_ms,
    )
    args.book_dir.mkdir(parents=True, exist_ok=True)
    io = FaultyIO(
        crash_at=crash_at, crash_on=crash_on, fail_errno=fail_errno, fail_after_writes=fail_after
    )
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return run_demo(args.book_dir, options, io=io, stops=stops)


if __name__ == "__main__":
    sys.exit(main())

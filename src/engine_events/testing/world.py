"""The simulated world of `engine_events.testing`: a book in which engine processes live and die.

`EngineWorld` is a simulated world for a host's own checkpoint code: a book directory with a real
SQLite database and a real journal file, in which engine processes start, run the host's steps,
crash — right after any SQLite COMMIT, or at any point of the projection — exit, restart and are
repaired, with the disk failing and healing, all through the fault seams of `faults`. The host's
code runs unchanged: it gets the world's connection and the emitter, as it would get its own in
production.

    world = EngineWorld(book_dir, setup=create_my_tables)
    world.crash_after_commit(3)                   # the process dies right after its 3rd COMMIT
    outcome = world.run(my_engine_main)           # my_engine_main(conn, emitter) -> exit code
    if outcome.crashed_at is not None:
        world.repair()                            # or: world.run(my_engine_main) again
    world.check_journal(complete=True)            # every committed row is in the file, once
    world.close()

Power cuts: `EngineWorld(book, recorder=PowerCutIO())` records every system call of the journal
and a snapshot of the database after every COMMIT (`power_cut`). `live` plays a scripted life of
the reference engine in a world. A world used out of order (a step with no process running, a
repair while one runs) raises `SimulationError`.
"""

from __future__ import annotations

import contextlib
import errno
import sqlite3
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import orjson

from .. import _outbox, _sql
from .._demo import DemoOptions, StopRequests, _create_host_schema, _Engine
from .._emitter import Emitter, JournalErrorPolicy
from .._exit_codes import ExitCode
from .._journal_file import JOURNAL_FILE_NAME
from .._lock import BookLock
from .._schema import DATABASE_FILE_NAME, require_known_version
from ..errors import EngineEventsError, SimulationError
from ..readers.status import read_status, repair
from .faults import (
    AFTER_COMMIT,
    MID_PRUNE,
    FaultyConnection,
    FaultyIO,
    SimulatedCrash,
    _is_commit,
    abandon,
    open_emitter,
)
from .power_cut import PowerCutIO

T = TypeVar("T")
Host = Callable[[sqlite3.Connection, Emitter], int]
"""A host's main: runs the engine's steps on the connection and the emitter, returns an exit code."""


class InvariantViolated(AssertionError):
    """The journal and the outbox disagree: something committed was lost, doubled or changed."""


@dataclass(frozen=True)
class Outcome:
    """How one engine process of the world ended: an exit code, or a crash at a point."""

    exit_code: int | None
    crashed_at: str | None
    engine_run_id: str | None


@dataclass(frozen=True)
class _StreamRows:
    """A stream's rows the outbox still holds, in order, and how far a prune took its rows."""

    engine_run_id: str
    pruned_through: int
    rows: list[tuple[str, int, bytes]]


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
        """The process dies the next time it reaches `point` (`AFTER_COMMIT`, a projection point
        of `CRASH_POINTS`, or `MID_PRUNE` in the running process's next prune)."""
        if point == AFTER_COMMIT:
            self.crash_after_commit(1)
        elif point == MID_PRUNE:
            if self.conn is None:
                raise SimulationError("no engine process is running in this world to prune")
            self.conn.crash_next(MID_PRUNE)
        else:
            self.io.crash_next(point)

    def disarm(self) -> None:
        """No crash is pending any more."""
        self._commit_countdown = 0
        self.io.crash_at = None
        if self.conn is not None:
            self.conn.disarm()

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
            raise SimulationError("an engine process is already running in this world")
        self.processes += 1
        self.conn = self._connect()
        try:
            self._lock = BookLock(self.book_dir)
            if self.setup is not None:
                self.setup(self.conn)
            self.emitter = open_emitter(
                self.conn,
                self.book_dir,
                self.io,
                book_id=self.book_id,
                chunker_version=self.chunker_version,
                engine_run_id=engine_run_id,
                on_journal_error=on_journal_error or self.on_journal_error,
                lock=self._lock,
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
            raise SimulationError("no engine process is running in this world")
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
            raise SimulationError("no engine process is running in this world")
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
            raise SimulationError("repair runs over a stopped engine")
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
            raise SimulationError("status reads a stopped engine's book")
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
        """Every committed outbox row as (engine_run_id, seq, line), streams in order; the rows a
        prune took (a host with a retention) are no longer among them."""
        return [row for stream in self._outbox_streams() for row in stream.rows]

    def _outbox_streams(self) -> list[_StreamRows]:
        conn = sqlite3.connect(self.database, isolation_level=None)
        try:
            if require_known_version(conn) == 0:
                return []
            streams = []
            for state in _outbox.streams(conn):
                rows: list[tuple[str, int, bytes]] = []
                after = 0
                while after < state.last_seq:
                    page = conn.execute(
                        _sql.OUTBOX_AFTER,
                        {"stream_no": state.stream_no, "after_seq": after, "limit": 512},
                    ).fetchall()
                    if not page:
                        break  # every row of the stream was pruned
                    for seq, line in page:
                        rows.append((state.engine_run_id, int(seq), bytes(line)))
                        after = int(seq)
                pruned_through = rows[0][1] - 1 if rows else state.last_seq
                streams.append(_StreamRows(state.engine_run_id, pruned_through, rows))
            return streams
        finally:
            conn.close()

    def check_journal(self, *, complete: bool = False) -> JournalCheck:
        """Check the journal against the outbox; raise `InvariantViolated` when they disagree.

        Always: every complete line is a committed row's exact bytes; a repeated (stream, seq) is
        byte-identical; each stream is dense from its hello; the distinct lines, in file order,
        are a prefix of the commit order. With `complete`: every committed row is in the file.
        A row a prune took counts as committed; only its bytes can no longer be compared.
        """
        order: list[tuple[str, int]] = []
        pruned: set[tuple[str, int]] = set()
        rows: dict[tuple[str, int], bytes] = {}
        for outbox in self._outbox_streams():
            taken = [(outbox.engine_run_id, seq) for seq in range(1, outbox.pruned_through + 1)]
            order += taken
            pruned.update(taken)
            for run_id, seq, line in outbox.rows:
                order.append((run_id, seq))
                rows[(run_id, seq)] = line
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
            if key not in pruned and rows.get(key) != raw:
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

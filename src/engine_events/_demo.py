"""The reference engine behind `engine-events demo`: a host that uses the library as a real one would.

It produces `units` units, each through every stage; each step is one checkpoint transaction that
also carries its events (a progress snapshot, `unit_done` when a unit's last stage is done, and the
ledger's cumulative `spend`). Its ledger lives in the same database and survives resumes. Before a step
whose estimated cost would pass the ceiling it stops with `ceiling` (exit 4). SIGTERM asks for a soft
stop (the step in flight finishes; exit 5, `stop: "soft"`); a second SIGTERM or a SIGINT is a hard
stop (the step in flight is abandoned; exit 5, `stop: "hard"`). Run it again on the same book and it
resumes from its checkpoint as a new stream.
"""

from __future__ import annotations

import datetime as dt
import logging
import signal
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Literal

from ._emitter import Emitter, JournalErrorPolicy
from ._events import (
    STREAM_VERSION,
    Ceiling,
    Finished,
    PhaseCount,
    Progress,
    Spend,
    UnitDone,
    require_writable_stream_version,
)
from ._exit_codes import ExitCode
from ._journal_file import JournalIO, OsJournalIO
from ._lock import BookLock
from ._schema import DATABASE_FILE_NAME, connect
from .errors import EngineEventsError

CHUNKER_VERSION = "demo-1"

log = logging.getLogger("engine_events.demo")

# The host's own statements (not engine_events'): its checkpoint and its ledger.
_HOST_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS demo_step ("
    " unit INTEGER NOT NULL, stage TEXT NOT NULL, PRIMARY KEY (unit, stage))",
    "CREATE TABLE IF NOT EXISTS demo_ledger ("
    " id INTEGER PRIMARY KEY CHECK (id = 1), committed_micro_usd INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO demo_ledger (id, committed_micro_usd) VALUES (1, 0)",
)
_HOST_STEPS_DONE = "SELECT unit, stage FROM demo_step"
_HOST_LEDGER_GET = "SELECT committed_micro_usd FROM demo_ledger WHERE id = 1"
_HOST_STEP_INSERT = "INSERT INTO demo_step (unit, stage) VALUES (:unit, :stage)"
_HOST_LEDGER_ADD = (
    "UPDATE demo_ledger SET committed_micro_usd = committed_micro_usd + :cost WHERE id = 1"
)


@dataclass(frozen=True)
class DemoOptions:
    units: int = 6
    stages: tuple[str, ...] = ("draft", "edit")
    unit_cost_micro_usd: int = 250_000
    ceiling_micro_usd: int | None = None
    pace_ms: int = 100
    engine_run_id: str | None = None
    book_id: str | None = None
    on_journal_error: JournalErrorPolicy = "degrade"
    stream_version: str = STREAM_VERSION
    outbox_retention_s: int | None = None
    """Outbox rows older than this many seconds, already in the journal, are pruned (None: kept)."""
    outbox_prune_interval_s: int = 60


class StopRequests:
    """SIGTERM once: soft. SIGTERM twice, or SIGINT: hard. The handlers only set flags."""

    def __init__(self) -> None:
        self.soft = False
        self.hard = threading.Event()

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if self.soft:
            self.hard.set()
        self.soft = True

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.soft = True
        self.hard.set()


def unit_id(index: int) -> str:
    return f"unit-{index + 1:04d}"


def run_demo(
    book_dir: Path,
    options: DemoOptions,
    *,
    io: JournalIO | None = None,
    stops: StopRequests | None = None,
) -> int:
    """Run the reference engine on `book_dir`; return its exit code."""
    stops = stops or StopRequests()
    try:
        # A version the emitter does not write is a configuration error: refused (exit 10)
        # before the lock, the database or the journal is touched.
        require_writable_stream_version(options.stream_version)
        with BookLock(book_dir) as lock:
            conn = connect(book_dir / DATABASE_FILE_NAME)
            try:
                _create_host_schema(conn)
                with Emitter._open(
                    conn,
                    book_dir,
                    io or OsJournalIO(),
                    book_id=options.book_id,
                    chunker_version=CHUNKER_VERSION,
                    engine_run_id=options.engine_run_id,
                    on_journal_error=options.on_journal_error,
                    lock=lock,
                    stream_version=options.stream_version,
                    retention=None
                    if options.outbox_retention_s is None
                    else dt.timedelta(seconds=options.outbox_retention_s),
                    prune_interval_s=options.outbox_prune_interval_s,
                ) as emitter:
                    return _Engine(conn, emitter, options, stops).run()
            finally:
                conn.close()
    except EngineEventsError as error:
        # No book id at INFO or above, and the book's directory is named after it: an OSError's
        # message names its file, so at ERROR only its errno text goes; the whole message, file
        # name included, goes at DEBUG for whoever debugs this host.
        reason = error.strerror if isinstance(error, OSError) else str(error)
        log.error("engine stopped (%s, exit %d): %s", type(error).__name__, error.exit_code, reason)
        log.debug("engine stopped: %s", error)
        return int(error.exit_code)


def _create_host_schema(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _HOST_SCHEMA:
            conn.execute(statement)
    except BaseException:
        conn.rollback()
        raise
    conn.commit()


class _Engine:
    def __init__(
        self, conn: sqlite3.Connection, emitter: Emitter, options: DemoOptions, stops: StopRequests
    ) -> None:
        self.conn = conn
        self.emitter = emitter
        self.options = options
        self.stops = stops
        self.done = {(int(unit), str(stage)) for unit, stage in conn.execute(_HOST_STEPS_DONE)}
        (committed,) = conn.execute(_HOST_LEDGER_GET).fetchone()
        self.committed_micro_usd = int(committed)

    def run(self) -> int:
        log.info(
            "engine started: stream %s, %d steps done before",
            self.emitter.engine_run_id,
            len(self.done),
        )
        with self.emitter.transaction():
            self.emitter.emit(self._progress())
        for unit in range(self.options.units):
            for stage in self.options.stages:
                if (unit, stage) in self.done:
                    continue
                if self.stops.soft:
                    stop: Literal["soft", "hard"] = "hard" if self.stops.hard.is_set() else "soft"
                    return self._finish(ExitCode.GRACEFUL_STOP, stop=stop)
                cost = self.options.unit_cost_micro_usd
                ceiling = self.options.ceiling_micro_usd
                if ceiling is not None and self.committed_micro_usd + cost > ceiling:
                    return self._stop_at_ceiling(self.committed_micro_usd + cost - ceiling)
                # The step's work (a model call, in a real engine). A hard stop abandons it.
                if self.stops.hard.wait(self.options.pace_ms / 1000):
                    return self._finish(ExitCode.GRACEFUL_STOP, stop="hard")
                self._commit_step(unit, stage, cost)
        return self._finish(ExitCode.CLEAN)

    def _commit_step(self, unit: int, stage: str, cost: int) -> None:
        committed = self.committed_micro_usd + cost
        step = (unit, stage)
        self.done.add(step)  # the progress snapshot below counts this step
        try:
            with self.emitter.transaction():
                self.conn.execute(_HOST_STEP_INSERT, {"unit": unit, "stage": stage})
                self.conn.execute(_HOST_LEDGER_ADD, {"cost": cost})
                self.emitter.emit(self._progress())
                if stage == self.options.stages[-1]:
                    self.emitter.emit(UnitDone(unit=unit_id(unit), index=unit))
                self.emitter.emit(Spend(committed_micro_usd=committed))
        except BaseException:
            self.done.discard(step)
            raise
        self.committed_micro_usd = committed
        log.debug("step done: %s/%s", unit_id(unit), stage)

    def _progress(self) -> Progress:
        return Progress(
            phases={
                stage: PhaseCount(
                    done=sum(1 for unit in range(self.options.units) if (unit, stage) in self.done),
                    total=self.options.units,
                )
                for stage in self.options.stages
            }
        )

    def _units_done(self) -> int:
        return sum(
            1
            for unit in range(self.options.units)
            if all((unit, stage) in self.done for stage in self.options.stages)
        )

    def _finished(self, code: ExitCode, stop: Literal["soft", "hard"] | None = None) -> Finished:
        return Finished(
            exit_code=code,
            stop=stop,
            units_done=self._units_done(),
            units_total=self.options.units,
            committed_micro_usd=self.committed_micro_usd,
        )

    def _finish(self, code: ExitCode, stop: Literal["soft", "hard"] | None = None) -> int:
        with self.emitter.transaction():
            self.emitter.emit(self._finished(code, stop))
        log.info("engine finished: %s", code.outcome)
        return int(code)

    def _stop_at_ceiling(self, shortfall_micro_usd: int) -> int:
        with self.emitter.transaction():
            self.emitter.emit(Ceiling(shortfall_micro_usd=shortfall_micro_usd))
            self.emitter.emit(self._finished(ExitCode.CEILING))
        log.info("engine stopped at the book's ceiling")
        return int(ExitCode.CEILING)

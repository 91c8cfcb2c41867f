"""A model of an engine's life with retention, against real SQLite and real files.

Two books live the same life — commits, rollbacks, `finished`, crashes at every projection point, a
failing disk, torn tails, restarts, closes and repairs. One of them also prunes, at any point: by an
explicit `prune()` (in the host's transaction or in one of its own, any retention, measured from
any moment, in batches of any size), by itself (a retention given at open: at start, after
flushes, at close), and it dies in the middle of a prune, its batch deleted and not committed. The
other never prunes: it is the model. After every step `status --json` reads the same on both, the
journals hold the same bytes, every row the pruning book no longer holds is in its journal, and
every row past a recorded watermark is still in its outbox.

Time is the model's: a clock that moves a second a step gives the lines their `time` and the prunes
their "now", so that the two books write the same bytes and a life replays exactly.
"""

from __future__ import annotations

import datetime as dt
import errno
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from engine_events import Ceiling, ExitCode, Finished, PhaseCount, Progress, Spend, UnitDone
from engine_events._emitter import Emitter
from engine_events._events import Event
from engine_events._line import format_time
from engine_events._lock import BookLock
from engine_events._schema import DATABASE_FILE_NAME
from engine_events.readers.status import read_status, repair
from engine_events.testing import (
    CRASH_POINTS,
    MID_PRUNE,
    FaultyConnection,
    FaultyIO,
    SimulatedCrash,
    abandon,
    open_emitter,
)

Key = tuple[str, int]
HOUR = dt.timedelta(hours=1)
RETENTIONS = st.sampled_from([None, dt.timedelta(0), HOUR])
"""None: the emitter's own retention (or zero when it has none); an hour keeps every row here."""
BATCHES = st.sampled_from([1, 2, 3, 1000])
RAM = Path("/dev/shm")
"""Where the books live when the system has a file system in memory: the model checks what the
engine does, not what the disk does (power cuts have their own model), and there an fsync costs
nothing, so that a busy disk does not slow the model down."""


class Book:
    """One book of the model: its directory (named `book` in both, the same book id), its
    database through a `FaultyConnection` (a prune can die half-way), its journal's `FaultyIO`,
    and the emitter of the process that lives in it, if one does."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "book"
        self.dir.mkdir(parents=True)
        self.conn = sqlite3.connect(
            self.dir / DATABASE_FILE_NAME, isolation_level=None, factory=FaultyConnection
        )
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.io = FaultyIO(in_process=True)
        self.emitter: Emitter | None = None

    @property
    def live(self) -> Emitter:
        assert self.emitter is not None
        return self.emitter

    def bury(self) -> None:
        """The process died: what the kernel does, nothing flushed or recorded."""
        if self.emitter is not None:
            abandon(self.emitter)
            self.emitter = None

    def disarm(self) -> None:
        self.conn.disarm()
        self.io.crash_at = None

    def journal(self) -> bytes:
        path = self.dir / "events.jsonl"
        return path.read_bytes() if path.exists() else b""

    def journal_keys(self) -> list[Key]:
        """The journal's distinct lines in file order; a repeated line must be byte-identical."""
        content = self.journal()
        seen: dict[Key, bytes] = {}
        stream = ""
        for raw in content[: content.rfind(b"\n") + 1].splitlines():
            line = orjson.loads(raw)
            if line["type"] == "hello":
                stream = line["data"]["engine_run_id"]
            key = (stream, line["seq"])
            assert seen.setdefault(key, raw) == raw, f"{key} repeated with other bytes"
        return list(seen)

    def outbox(self) -> set[Key]:
        if not self._has_schema():
            return set()
        return {
            (str(run_id), int(seq))
            for run_id, seq in self.conn.execute(
                "SELECT s.engine_run_id, o.seq FROM engine_events_outbox AS o"
                " JOIN engine_events_stream AS s USING (stream_no)"
            )
        }

    def past_watermarks(self) -> set[Key]:
        """The rows recovery may still need: past their stream's recorded watermark."""
        if not self._has_schema():
            return set()
        return {
            (str(run_id), int(seq))
            for run_id, seq in self.conn.execute(
                "SELECT s.engine_run_id, o.seq FROM engine_events_outbox AS o"
                " JOIN engine_events_stream AS s USING (stream_no) WHERE o.seq > s.projected_seq"
            )
        }

    def status(self) -> dict[str, Any]:
        return read_status(self.conn)

    def _has_schema(self) -> bool:
        return bool(
            self.conn.execute(
                "SELECT 1 FROM sqlite_master WHERE name = 'engine_events_outbox'"
            ).fetchone()
        )


class PruneLife(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="prune-model-", dir=RAM if RAM.is_dir() else None))
        self.pruning = Book(self.root / "pruning")
        self.model = Book(self.root / "never-pruned")
        self.streams = 0
        self.finished = False
        """Whether the live stream stored its `finished`."""
        self.committed: dict[Key, str] = {}
        """Every committed event as (stream, seq) -> type, in commit order."""
        self.born = self.now = dt.datetime(2026, 11, 30, 2, 8, 57, tzinfo=dt.UTC)
        self.clock = [
            mock.patch("engine_events._outbox.now_time", lambda: format_time(self.now)),
            mock.patch("engine_events._prune.wall_clock", lambda: self.now),
        ]
        for patch in self.clock:
            patch.start()

    def teardown(self) -> None:
        for patch in self.clock:
            patch.stop()
        for book in (self.pruning, self.model):
            book.bury()
            book.conn.close()
        shutil.rmtree(self.root)

    # -- the life ------------------------------------------------------------------------------

    @initialize(earlier=st.lists(st.tuples(st.integers(0, 3), st.booleans()), max_size=3))
    def earlier_processes(self, earlier: list[tuple[int, bool]]) -> None:
        """Processes that lived before pruning was on: `count` checkpoints each, then a close or
        a death. Rows of earlier processes are what a prune has to work on."""
        for count, closes in earlier:
            self.start(retention=None, interval=0, dies=False)
            for amount in range(count):
                self.commit(["progress", "unit_done", "spend"], amount, None, None, finish=False)
            if closes:
                self.close(dies=False)
            else:
                self.crash_between_steps()

    @precondition(lambda self: self.pruning.emitter is None)
    @rule(
        retention=st.none() | st.just(dt.timedelta(0)),
        interval=st.sampled_from([0, 3600]),
        dies=st.booleans(),
    )
    def start(self, retention: dt.timedelta | None, interval: float, dies: bool) -> None:
        """A new process; with a retention the pruning book's emitter prunes by itself (at once,
        and may die doing so)."""
        if dies:
            self.pruning.conn.crash_next(MID_PRUNE)
        self.streams += 1
        run_id = f"run-{self.streams}"

        def start(book: Book) -> None:
            options: dict[str, Any] = {}
            if book is self.pruning:
                options = {"retention": retention, "prune_interval_s": interval}
            book.emitter = open_emitter(
                book.conn, book.dir, book.io, engine_run_id=run_id, **options
            )

        self.finished = False
        self._both(start)
        self.committed[(run_id, 1)] = "hello"  # a crash can only come after its commit

    @precondition(lambda self: self.pruning.emitter is not None and not self.finished)
    @rule(
        kinds=st.lists(st.sampled_from(["spend", "progress", "unit_done", "ceiling"]), max_size=4),
        amount=st.integers(0, 10**6),
        crash=st.none() | st.sampled_from(CRASH_POINTS),
        prune_inside=st.none() | st.tuples(RETENTIONS, BATCHES),
        finish=st.booleans(),
    )
    def commit(
        self,
        kinds: list[str],
        amount: int,
        crash: str | None,
        prune_inside: tuple[dt.timedelta | None, int] | None,
        finish: bool,
    ) -> None:
        """One checkpoint; the pruning book may also prune inside it, and die doing so."""
        events = [_event(kind, amount + index) for index, kind in enumerate(kinds)]
        if finish:
            events.append(_finished(amount))
        if not events:
            return
        seqs: list[int] = []

        def commit(book: Book) -> None:
            if crash is not None:
                book.io.crash_next(crash)
            seqs.clear()
            with book.live.transaction():
                seqs.extend(book.live.emit(fact) for fact in events)
                if book is self.pruning and prune_inside is not None:
                    retention, batch = prune_inside
                    book.live.prune(retention, max_rows=batch)

        run_id = self.pruning.live.engine_run_id
        if self._both(commit, model_follows_a_mid_prune_crash=False) == MID_PRUNE:
            return  # died inside the host's transaction: nothing of it committed
        self.committed.update(
            ((run_id, seq), fact.type) for seq, fact in zip(seqs, events, strict=True)
        )
        self.finished = self.finished or finish

    @precondition(lambda self: self.pruning.emitter is not None and not self.finished)
    @rule(amount=st.integers(0, 100))
    def rollback(self, amount: int) -> None:
        def rollback(book: Book) -> None:
            try:
                with book.live.transaction():
                    book.live.emit(Spend(committed_micro_usd=amount))
                    raise ValueError("the host's step failed")
            except ValueError:
                pass

        self._both(rollback)

    @precondition(lambda self: self.pruning.emitter is not None)
    @rule(
        retention=RETENTIONS,
        batch=BATCHES,
        moment=st.just(1.0) | st.floats(0, 1),
        dies=st.booleans(),
    )
    def prune(self, retention: dt.timedelta | None, batch: int, moment: float, dies: bool) -> None:
        """An explicit prune in a transaction of its own, counting the retention back from any
        moment of the life so far (so any prefix of the streams' rows is old enough)."""
        now = self.born + dt.timedelta(
            seconds=round((self.now - self.born).total_seconds() * moment)
        )
        if dies:
            self.pruning.conn.crash_next(MID_PRUNE)

        def prune(book: Book) -> None:
            if book is self.pruning:
                with mock.patch("engine_events._prune.wall_clock", return_value=now):
                    result = book.live.prune(retention, max_rows=batch)
                event(f"explicit prune deleted {min(result.rows_deleted, 3)}+ rows")

        self._both(prune)

    @precondition(lambda self: self.pruning.emitter is not None)
    @rule()
    def crash_between_steps(self) -> None:
        self.pruning.bury()
        self.model.bury()

    @precondition(lambda self: self.pruning.emitter is not None)
    @rule(dies=st.booleans())
    def close(self, dies: bool) -> None:
        """The process ends on purpose (the pruning book prunes at close when it has a
        retention, and may die there)."""
        if dies:
            self.pruning.conn.crash_next(MID_PRUNE)

        def close(book: Book) -> None:
            book.live.close()
            book.emitter = None

        self._both(close)

    @rule(code=st.sampled_from([errno.ENOSPC, errno.EIO]))
    def disk_fails(self, code: int) -> None:
        self.pruning.io.fail_errno = self.model.io.fail_errno = code

    @rule()
    def disk_heals(self) -> None:
        self.pruning.io.fail_errno = self.model.io.fail_errno = None

    @precondition(lambda self: self.pruning.emitter is None)
    @rule(garbage=st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b))
    def torn_tail(self, garbage: bytes) -> None:
        for book in (self.pruning, self.model):
            journal = book.dir / "events.jsonl"
            if journal.exists():
                with open(journal, "ab") as file:
                    file.write(garbage)

    @precondition(lambda self: self.pruning.emitter is None and self.pruning.io.fail_errno is None)
    @rule()
    def repair_stopped_run(self) -> None:
        """`status --repair` projects every committed row, pruned book or not."""
        for book in (self.pruning, self.model):
            with BookLock(book.dir):
                repair(book.conn, book.dir)
            assert book.journal_keys() == list(self.committed)

    # -- checks ---------------------------------------------------------------------------------

    @invariant()
    def status_reads_the_same_as_a_book_never_pruned(self) -> None:
        assert self.pruning.status() == self.model.status()

    @invariant()
    def the_journals_are_the_same_a_prefix_of_what_committed(self) -> None:
        assert self.pruning.journal() == self.model.journal()
        keys = self.pruning.journal_keys()
        assert keys == list(self.committed)[: len(keys)]

    @invariant()
    def a_row_goes_only_once_it_is_in_the_journal(self) -> None:
        kept, model = self.pruning.outbox(), self.model.outbox()
        assert kept <= model
        assert model - kept <= set(self.pruning.journal_keys())
        assert self.model.past_watermarks() <= kept, "a row recovery may need was pruned"
        event(f"rows pruned: {min(len(model - kept), 10) // 5 * 5}+")

    # -- helpers --------------------------------------------------------------------------------

    def _both(
        self, action: Callable[[Book], None], *, model_follows_a_mid_prune_crash: bool = True
    ) -> str | None:
        """Do `action` in the pruning book, then in the model; return where they died, if they did.

        A crash at a projection point happens in both at the same point: their journals see the
        same system calls. A death in the middle of a prune is the pruning book's alone: the
        model then does the whole action and dies right after it, where the prune was (with
        `model_follows_a_mid_prune_crash` False, the prune was inside the host's transaction,
        which died with it: the model dies without doing the action)."""
        self.now += dt.timedelta(seconds=1)
        died = self._run(self.pruning, action)
        if died == MID_PRUNE:
            event("died in the middle of a prune")
            if model_follows_a_mid_prune_crash:
                assert self._run(self.model, action) is None
        else:
            assert self._run(self.model, action) == died, "the books died at different points"
        if died is not None:
            self.pruning.bury()
            self.model.bury()
        return died

    @staticmethod
    def _run(book: Book, action: Callable[[Book], None]) -> str | None:
        try:
            action(book)
        except SimulatedCrash as crash:
            return crash.point
        finally:
            book.disarm()
        return None


def _event(kind: str, amount: int) -> Event:
    if kind == "spend":
        return Spend(committed_micro_usd=amount)
    if kind == "progress":
        return Progress(phases={"draft": PhaseCount(done=amount % 7, total=7)})
    if kind == "ceiling":
        return Ceiling(shortfall_micro_usd=amount)
    return UnitDone(unit=f"u{amount}", index=amount % 100)


def _finished(amount: int) -> Finished:
    return Finished(
        exit_code=ExitCode.CLEAN, units_done=1, units_total=1, committed_micro_usd=amount
    )


TestPruneLife = PruneLife.TestCase

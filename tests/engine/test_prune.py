"""Retention: the outbox rows that are in the journal, of streams that can grow no more, older than
the host's retention, go a bounded batch at a time; everything `status --json [--repair]` reports
and everything recovery needs stays."""

from __future__ import annotations

import datetime as dt
import logging
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from unittest import mock

import orjson
import pytest

from engine_events import (
    Ceiling,
    ExitCode,
    Finished,
    PhaseCount,
    Progress,
    RetentionInvalid,
    Spend,
    StreamFinished,
    UnitDone,
    _outbox,
    _prune,
)
from engine_events._emitter import Emitter
from engine_events._events import Event
from engine_events._line import format_time
from engine_events._lock import BookLock
from engine_events._prune import PruneResult
from engine_events._schema import DATABASE_FILE_NAME, connect
from engine_events.errors import BookDatabaseBusy, EngineEventsError
from engine_events.readers.status import read_status
from engine_events.testing import EngineWorld, FaultyIO, SimulatedCrash, abandon, open_emitter

ZERO = dt.timedelta(0)


@dataclass(frozen=True)
class Note(Event):
    """An event type a host defines itself: a line of any size."""

    type: ClassVar[str] = "note"
    text: str

    def data(self) -> dict[str, Any]:
        return {"text": self.text}


def progress(done: int) -> Progress:
    return Progress(phases={"draft": PhaseCount(done=done, total=4)})


def finished(code: ExitCode, money: int) -> Finished:
    return Finished(exit_code=code, units_done=1, units_total=4, committed_micro_usd=money)


def status(book_dir: Path, *extra: str) -> dict[str, Any]:
    """`engine-events status BOOK_DIR --json [extra]`, as the platform runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "engine_events._cli", "status", str(book_dir), "--json", *extra],
        capture_output=True,
        timeout=60,
        check=True,
    )
    report: dict[str, Any] = orjson.loads(result.stdout)
    return report


def outbox(conn: sqlite3.Connection) -> list[tuple[str, int]]:
    """Every outbox row as (engine_run_id, seq)."""
    return [
        (str(run_id), int(seq))
        for run_id, seq in conn.execute(
            "SELECT s.engine_run_id, o.seq FROM engine_events_outbox AS o"
            " JOIN engine_events_stream AS s USING (stream_no) ORDER BY o.stream_no, o.seq"
        )
    ]


def journal(book_dir: Path) -> list[tuple[str, int]]:
    """The journal's lines as (engine_run_id, seq), in file order."""
    keys = []
    run_id = ""
    for raw in (book_dir / "events.jsonl").read_bytes().splitlines():
        line = orjson.loads(raw)
        if line["type"] == "hello":
            run_id = line["data"]["engine_run_id"]
        keys.append((run_id, int(line["seq"])))
    return keys


def copy_book(conn: sqlite3.Connection, book_dir: Path, parent: Path) -> Path:
    """A copy of a stopped book (its database and its journal, its directory's name: the book
    id), never to be pruned."""
    into = parent / book_dir.name
    into.mkdir(parents=True)
    shutil.copyfile(book_dir / "events.jsonl", into / "events.jsonl")
    target = sqlite3.connect(into / DATABASE_FILE_NAME)
    conn.backup(target)
    target.close()
    return into


def connect_to(book_dir: Path) -> sqlite3.Connection:
    return connect(book_dir / DATABASE_FILE_NAME)


def prune_stopped_book(conn: sqlite3.Connection, book_dir: Path) -> PruneResult:
    """A prune by a process that writes no stream (every stream is an earlier process's)."""
    with BookLock(book_dir):
        return _prune.prune(conn, retention=ZERO, live_stream_no=None)


def a_lived_book(conn: sqlite3.Connection, book_dir: Path) -> None:
    """r1 stopped at its ceiling, r2 closed without a `finished`, r3 died with a checkpoint
    committed and never projected: its rows wait past its watermark."""
    with Emitter.open(conn, book_dir, engine_run_id="r1") as emitter:
        with emitter.transaction():
            emitter.emit(progress(1))
            emitter.emit(Spend(committed_micro_usd=250))
        with emitter.transaction():
            emitter.emit(Ceiling(shortfall_micro_usd=50))
            emitter.emit(finished(ExitCode.CEILING, 250))
    with Emitter.open(conn, book_dir, engine_run_id="r2") as emitter, emitter.transaction():
        emitter.emit(progress(2))
        emitter.emit(UnitDone(unit="u1", index=0))
        emitter.emit(Spend(committed_micro_usd=500))
    died = Emitter.open(conn, book_dir, engine_run_id="r3")
    conn.execute("BEGIN IMMEDIATE")
    died.emit(progress(3))
    died.emit(Spend(committed_micro_usd=750))
    conn.commit()
    abandon(died)


@pytest.fixture
def fake_clock() -> Iterator[list[dt.datetime]]:
    """The clock of the lines' `time` and of the prune's `now`: the test moves `clock[0]`."""
    clock = [dt.datetime(2026, 11, 30, 2, 8, 57, tzinfo=dt.UTC)]
    with (
        mock.patch("engine_events._outbox.now_time", lambda: format_time(clock[0])),
        mock.patch("engine_events._prune.wall_clock", lambda: clock[0]),
    ):
        yield clock


# -- what goes, what stays -----------------------------------------------------------------------


def test_status_and_repair_report_the_same_after_a_prune(
    conn: sqlite3.Connection, book_dir: Path, tmp_path: Path
) -> None:
    """Every field of `status --json` — each stream's last and projected seq, money, progress,
    ceiling, `finished` — is the same after the settled streams' rows are gone; `--repair` then
    appends the dead process's rows from the outbox exactly as it does on a book never pruned."""
    a_lived_book(conn, book_dir)
    never_pruned = copy_book(conn, book_dir, tmp_path / "never-pruned")
    before = status(book_dir)
    assert before["streams"] == [
        {"engine_run_id": "r1", "last_seq": 5, "projected_seq": 5},
        {"engine_run_id": "r2", "last_seq": 4, "projected_seq": 4},
        {"engine_run_id": "r3", "last_seq": 3, "projected_seq": 1},
    ]

    result = prune_stopped_book(conn, book_dir)

    assert result == PruneResult(rows_deleted=9, streams_touched=2, limit_reached=False)
    assert outbox(conn) == [("r3", 1), ("r3", 2), ("r3", 3)], "past r3's watermark: all stay"
    assert status(book_dir) == before
    assert status(book_dir, "--repair") == status(never_pruned, "--repair")
    assert journal(book_dir) == journal(never_pruned)
    assert journal(book_dir)[-3:] == [("r3", 1), ("r3", 2), ("r3", 3)]
    assert status(book_dir) == status(never_pruned)


def test_rows_past_the_recorded_watermark_stay_for_recovery(
    conn: sqlite3.Connection, book_dir: Path, tmp_path: Path
) -> None:
    """A process died right after its last fsync, before recording its watermark: its last rows
    are the last lines of the file, and only their bytes in the outbox let the next start
    recognise them there. A prune takes the rows up to the recorded watermark and leaves those;
    the next start appends nothing twice and reports what a book never pruned reports."""
    io = FaultyIO(in_process=True)
    emitter = open_emitter(conn, book_dir, io, engine_run_id="r1")
    for amount in (100, 200):
        with emitter.transaction():
            emitter.emit(Spend(committed_micro_usd=amount))
    _outbox.record_projected(conn, {1: 2})  # as a flush that recovered earlier streams does
    io.crash_next("after_fsync")
    with pytest.raises(SimulatedCrash), emitter.transaction():
        emitter.emit(progress(1))
        emitter.emit(Spend(committed_micro_usd=300))
    abandon(emitter)
    assert journal(book_dir) == [("r1", seq) for seq in range(1, 6)], "all in the file"
    never_pruned = copy_book(conn, book_dir, tmp_path / "never-pruned")

    assert prune_stopped_book(conn, book_dir).rows_deleted == 2
    assert outbox(conn) == [("r1", 3), ("r1", 4), ("r1", 5)]

    copy = connect_to(never_pruned)
    for book, database in ((book_dir, conn), (never_pruned, copy)):
        Emitter.open(database, book, engine_run_id="r2").close()
    copy.close()
    assert journal(book_dir) == [*(("r1", seq) for seq in range(1, 6)), ("r2", 1)]
    assert status(book_dir) == status(never_pruned)


def test_the_live_stream_stays_until_it_is_finished(
    conn: sqlite3.Connection, book_dir: Path
) -> None:
    """The stream a process is writing keeps its rows, even in the file and recorded: its last row
    gives the next seq. Once it is finished they may go, and `finished` still ends the stream:
    an emit after it is refused with the seq the summary row keeps."""
    emitter = Emitter.open(conn, book_dir, engine_run_id="r1")
    with emitter.transaction():
        emitter.emit(progress(1))
        emitter.emit(Spend(committed_micro_usd=100))
    emitter._projector.record_watermarks()  # recorded up to its last row, as a recovery does
    before = read_status(conn)
    assert emitter.prune() == PruneResult(0, 0, limit_reached=False)
    assert len(outbox(conn)) == 3

    with emitter.transaction():
        emitter.emit(finished(ExitCode.CLEAN, 100))
    emitter._projector.record_watermarks()
    assert emitter.prune() == PruneResult(4, 1, limit_reached=False)
    assert outbox(conn) == []
    with pytest.raises(StreamFinished) as refused, emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=200))
    assert refused.value.finished_seq == 4
    emitter.close()
    after = read_status(conn)
    assert after["streams"] == [{"engine_run_id": "r1", "last_seq": 4, "projected_seq": 4}]
    assert (after["money"], after["progress"]) == (before["money"], before["progress"])
    assert after["finished"]["outcome"] == "clean"


def test_without_a_retention_every_row_stays(conn: sqlite3.Connection, book_dir: Path) -> None:
    """The default keeps everything: no emitter prunes by itself, however many start and close;
    an explicit prune with a retention longer than the rows' age keeps them too."""
    for run_id in ("r1", "r2", "r3"):
        with Emitter.open(conn, book_dir, engine_run_id=run_id) as emitter, emitter.transaction():
            emitter.emit(Spend(committed_micro_usd=1))
            emitter.emit(finished(ExitCode.CLEAN, 1))
    assert len(outbox(conn)) == 9
    with Emitter.open(conn, book_dir, engine_run_id="r4") as emitter:
        assert emitter.prune(dt.timedelta(days=1)).rows_deleted == 0
    with (
        Emitter.open(
            conn, book_dir, engine_run_id="r5", retention=dt.timedelta(hours=1), prune_interval_s=0
        ) as emitter,
        emitter.transaction(),
    ):
        emitter.emit(Spend(committed_micro_usd=2))
    assert len(outbox(conn)) == 9 + 1 + 2


def test_rows_go_oldest_first_by_the_time_on_their_line(
    conn: sqlite3.Connection, book_dir: Path, fake_clock: list[dt.datetime]
) -> None:
    """A row goes once the time on its line is at least the retention ago, and every earlier
    row of its stream has gone: a clock that stepped back keeps the rows after it until they
    are all that old, so what is left of a stream stays dense."""
    start = fake_clock[0]
    minutes = [0, 1, 2, 3, 1, 5]  # the clock steps back once, at seq 5
    with Emitter.open(conn, book_dir, engine_run_id="r1") as emitter:
        for seq, minute in enumerate(minutes[1:], start=2):
            fake_clock[0] = start + dt.timedelta(minutes=minute)
            with emitter.transaction():
                assert emitter.emit(Spend(committed_micro_usd=seq)) == seq
    fake_clock[0] = start + dt.timedelta(minutes=10)
    with Emitter.open(conn, book_dir, engine_run_id="r2") as emitter:
        deleted = [
            emitter.prune(dt.timedelta(minutes=minutes, seconds=30)).rows_deleted
            for minutes in (8, 8, 7, 6, 4)
        ]
    # up to minute 1.5: seqs 1 and 2, then none (seq 5, of minute 1, waits for seq 3, of minute
    # 2); up to 2.5: seq 3; up to 3.5: seqs 4 and 5; up to 5.5: seq 6.
    assert deleted == [2, 0, 1, 2, 1]
    assert [seq for run_id, seq in outbox(conn) if run_id == "r1"] == []


def test_one_prune_is_bounded_in_rows_and_in_bytes(
    conn: sqlite3.Connection, book_dir: Path
) -> None:
    """One call deletes at most `max_rows` rows and about 8 MiB of lines, then says that the
    batch was full; calls go on until none is."""
    with Emitter.open(conn, book_dir, engine_run_id="many") as emitter, emitter.transaction():
        for index in range(2_400):
            emitter.emit(UnitDone(unit=f"u{index}", index=index))
    with Emitter.open(conn, book_dir, engine_run_id="big") as emitter, emitter.transaction():
        for index in range(20):
            emitter.emit(Note(text=f"{index}" + "x" * 1_000_000))
    with Emitter.open(conn, book_dir, engine_run_id="pruner") as emitter:
        results = [emitter.prune()]
        while results[-1].limit_reached:
            results.append(emitter.prune())
        assert emitter.prune(max_rows=5).rows_deleted == 0
    deleted = [result.rows_deleted for result in results]
    assert deleted[:2] == [1_000, 1_000]
    assert sum(deleted) == 2_401 + 21
    assert all(count <= 9 for count in deleted[3:]), "8 MiB of 1 MB lines: at most 9 a batch"
    assert [result.limit_reached for result in results][-1] is False
    assert [run_id for run_id, _ in outbox(conn)] == ["pruner"]


def test_a_prune_in_the_host_transaction_commits_or_rolls_back_with_it(
    conn: sqlite3.Connection, book_dir: Path
) -> None:
    """Inside the host's transaction the prune is part of it: a rollback brings the rows back."""
    with Emitter.open(conn, book_dir, engine_run_id="r1") as emitter, emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=1))
    emitter = Emitter.open(conn, book_dir, engine_run_id="r2")
    with pytest.raises(ZeroDivisionError), emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=2))
        assert emitter.prune().rows_deleted == 2
        assert [run_id for run_id, _ in outbox(conn)] == ["r2", "r2"]
        _ = 1 / 0  # the host's step fails
    assert [run_id for run_id, _ in outbox(conn)] == ["r1", "r1", "r2"]
    with emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=2))
        emitter.prune()
    assert [run_id for run_id, _ in outbox(conn)] == ["r2", "r2"]
    emitter.close()


def test_with_a_retention_the_emitter_prunes_by_itself(
    conn: sqlite3.Connection, book_dir: Path, fake_clock: list[dt.datetime]
) -> None:
    """`Emitter.open(..., retention=...)`: a prune once the new stream started (the earlier
    streams' rows already that old), after a flush once the interval has passed (the rows that
    have grown that old since), and at close (its own stream's, once finished and recorded)."""
    start = fake_clock[0]
    with Emitter.open(conn, book_dir, engine_run_id="r1") as emitter, emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=1))
    fake_clock[0] = start + dt.timedelta(minutes=30)
    with Emitter.open(conn, book_dir, engine_run_id="r2") as emitter, emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=2))
    fake_clock[0] = start + dt.timedelta(minutes=61)
    hour = dt.timedelta(hours=1)

    emitter = Emitter.open(conn, book_dir, engine_run_id="r3", retention=hour, prune_interval_s=0)
    assert [run_id for run_id, _ in outbox(conn)] == ["r2", "r2", "r3"], "r1 pruned at start"
    fake_clock[0] = start + dt.timedelta(minutes=91)
    with emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=3))
        emitter.emit(finished(ExitCode.CLEAN, 3))
    assert [run_id for run_id, _ in outbox(conn)] == ["r3"] * 3, "r2 pruned after the flush"
    fake_clock[0] = start + dt.timedelta(minutes=200)
    emitter.close()
    assert outbox(conn) == [], "its own stream, finished, at close"

    with Emitter.open(conn, book_dir, engine_run_id="r4") as emitter, emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=4))
    emitter = Emitter.open(conn, book_dir, engine_run_id="r5", retention=hour, prune_interval_s=60)
    fake_clock[0] += dt.timedelta(hours=2)
    with emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=5))
    assert [run_id for run_id, _ in outbox(conn)] == ["r4", "r4", "r5", "r5"], "not due yet"
    emitter.close()
    assert [run_id for run_id, _ in outbox(conn)] == ["r5", "r5"], "at close, due or not"
    assert [stream["last_seq"] for stream in status(book_dir)["streams"]] == [2, 2, 3, 2, 2]


def test_an_automatic_prune_that_fails_is_logged_not_raised(
    conn: sqlite3.Connection, book_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The host's commit succeeded: a busy database during the prune that follows is a WARNING,
    and the prune is tried again later, never an error of the host's transaction."""
    emitter = Emitter.open(conn, book_dir, engine_run_id="r1", retention=ZERO, prune_interval_s=0)
    busy = BookDatabaseBusy("database is locked")
    with (
        mock.patch("engine_events._prune.prune", side_effect=busy),
        caplog.at_level(logging.WARNING, logger="engine_events"),
        emitter.transaction(),
    ):
        emitter.emit(Spend(committed_micro_usd=1))
    assert [record.getMessage() for record in caplog.records] == [
        "outbox: rows not pruned this time (database is locked); trying again later"
    ]
    emitter.close()


def test_a_bad_retention_is_refused_with_a_typed_error(
    conn: sqlite3.Connection, book_dir: Path
) -> None:
    """A retention must be a `timedelta` of zero or more: a number of seconds or a negative span
    is `RetentionInvalid` (a ValueError, exit 10), refused before the book is touched."""
    for bad in (3600, 1.5, "7d", True, dt.timedelta(seconds=-1)):
        with pytest.raises(RetentionInvalid) as refused:
            Emitter.open(conn, book_dir, retention=bad)  # type: ignore[arg-type]
        assert refused.value.exit_code == ExitCode.CONFIG_INVALID
        assert isinstance(refused.value, ValueError)
    assert list(book_dir.iterdir()) == [book_dir / DATABASE_FILE_NAME]
    assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,), "untouched"
    emitter = Emitter.open(conn, book_dir)
    with pytest.raises(RetentionInvalid):
        emitter.prune(dt.timedelta(days=-1))
    with pytest.raises(ValueError, match="max_rows"):
        emitter.prune(max_rows=0)
    emitter.close()
    with pytest.raises(EngineEventsError, match="after close"):
        emitter.prune()


# -- a real process killed in the middle of a prune ----------------------------------------------

_PRUNER = """
import sqlite3, sys
from pathlib import Path
from engine_events import Emitter
from engine_events.testing import MID_PRUNE, FaultyConnection

book = Path(sys.argv[1])
conn = sqlite3.connect(book / "engine.sqlite3", isolation_level=None, factory=FaultyConnection)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("PRAGMA synchronous=FULL")
emitter = Emitter.open(conn, book, engine_run_id="pruner")
conn.crash_next(MID_PRUNE, 2, in_process=False)
emitter.prune()
"""


@pytest.mark.crash
def test_a_sigkill_in_the_middle_of_a_prune_leaves_every_row(
    conn: sqlite3.Connection, book_dir: Path
) -> None:
    """A real process killed with SIGKILL after a prune deleted the rows of two streams, before
    its COMMIT: SQLite's recovery drops the whole batch, every row is there, status reads as
    before; the next prune takes them."""
    a_lived_book(conn, book_dir)
    Emitter.open(conn, book_dir, engine_run_id="r4").close()  # r3 projected, all recorded
    rows, before = outbox(conn), status(book_dir)

    killed = subprocess.run(
        [sys.executable, "-c", _PRUNER, str(book_dir)], capture_output=True, timeout=60, check=False
    )

    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    assert outbox(conn) == [*rows, ("pruner", 1)]
    after = status(book_dir)
    assert after["streams"] == [
        *before["streams"],
        {"engine_run_id": "pruner", "last_seq": 1, "projected_seq": 0},
    ]
    assert (after["money"], after["progress"]) == (before["money"], before["progress"])
    Emitter.open(conn, book_dir, engine_run_id="r5", retention=ZERO).close()
    assert outbox(conn) == [("r5", 1)]
    assert status(book_dir)["streams"][:-1] == [
        *before["streams"],
        {"engine_run_id": "pruner", "last_seq": 1, "projected_seq": 1},
    ]


def test_a_world_whose_host_prunes_still_checks_its_journal(tmp_path: Path) -> None:
    """In `EngineWorld`, a host that prunes leaves lines no outbox row backs any more: they count
    as committed (only their bytes cannot be compared), and the check still finds every line."""
    world = EngineWorld(tmp_path / "book")

    def host(conn: sqlite3.Connection, emitter: Emitter) -> int:
        with emitter.transaction():
            emitter.emit(Spend(committed_micro_usd=1))
        return emitter.prune().rows_deleted

    try:
        assert [world.run(host, run_id).exit_code for run_id in ("r1", "r2")] == [0, 2]
        assert [(run_id, seq) for run_id, seq, _ in world.committed()] == [("r2", 1), ("r2", 2)]
        assert world.check_journal(complete=True).keys == [
            ("r1", 1),
            ("r1", 2),
            ("r2", 1),
            ("r2", 2),
        ]
    finally:
        world.close()

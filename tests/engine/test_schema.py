"""The engine's forward-only schema steps: a released step is never edited, only followed; a book
written under step 1 upgrades to step 2 with its data and its status intact, and then prunes with
its status intact; the repair channel reads and repairs an older book without upgrading it."""

from __future__ import annotations

import datetime as dt
import hashlib
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine_events import (
    Ceiling,
    ExitCode,
    Finished,
    PhaseCount,
    Progress,
    Spend,
    UnitDone,
    _outbox,
    _sql,
)
from engine_events._emitter import Emitter
from engine_events._events import Event, Hello
from engine_events._journal_file import JournalFile, OsJournalIO
from engine_events._lock import BookLock
from engine_events._projection import Projector
from engine_events._schema import (
    DATABASE_FILE_NAME,
    SCHEMA_VERSION,
    connect,
    migrate,
    schema_version,
)
from engine_events.errors import SchemaMismatch
from engine_events.readers.status import read_status

RELEASED_STEPS = {
    1: "663b47e95ffc8d14c6afcc99a305e157108e4b073ccf7772c0e81fd7897fb4b3",
    2: "34e0c253494eff7b1c922d85441f6cc3dda4974aaae52e41036b3710b19baa19",
}
"""The sha256 of each released step's statements. A released step is followed, never edited: a
book migrated by it must reach the same schema as one that runs it today."""


def _step_hash(version: int) -> str:
    digest = hashlib.sha256()
    for statement in _sql.MIGRATIONS[version - 1]:
        digest.update(statement.encode() + b"\n")
    return digest.hexdigest()


def test_released_steps_are_never_edited() -> None:
    """Every step's statements hash to the pinned value; every step is pinned."""
    assert {version: _step_hash(version) for version in RELEASED_STEPS} == RELEASED_STEPS
    assert len(_sql.MIGRATIONS) == SCHEMA_VERSION
    assert set(range(1, SCHEMA_VERSION + 1)) - set(RELEASED_STEPS) == set(), "pin the new step"


# -- a book as step 1's code left it -------------------------------------------------------------

STAGES = ("draft",)


def progress(done: int) -> Progress:
    return Progress(phases={"draft": PhaseCount(done=done, total=4)})


def finished(code: ExitCode, units: int, money: int) -> Finished:
    return Finished(exit_code=code, units_done=units, units_total=4, committed_micro_usd=money)


def step_1_process(
    conn: sqlite3.Connection,
    book_dir: Path,
    run_id: str,
    checkpoints: list[list[Event]],
    *,
    dies: bool = False,
) -> None:
    """One engine process as step 1's emitter ran it, through the functions it used (unchanged
    since): start-up recovery and its watermarks, the stream and its hello, each checkpoint's
    rows committed then projected, the watermarks recorded at close. `dies`: the process dies
    right after its last commit, before that checkpoint is projected or anything recorded."""
    with BookLock(book_dir):
        journal = JournalFile(book_dir, OsJournalIO())
        journal.open()
        projector = Projector(conn, journal, summaries=False)
        projector.recover()
        projector.record_watermarks()
        conn.execute(_sql.BEGIN_IMMEDIATE)
        stream_no = int(
            conn.execute(
                _sql.STREAM_INSERT, {"engine_run_id": run_id, "book_id": book_dir.name}
            ).lastrowid
            or 0
        )
        hello = Hello(engine_run_id=run_id, book_id=book_dir.name, chunker_version="c1")
        _outbox.store(conn, stream_no, hello, 0)
        conn.commit()
        projector.project_stream(stream_no)
        for number, events in enumerate(checkpoints, start=1):
            conn.execute(_sql.BEGIN_IMMEDIATE)
            for event in events:
                _outbox.store(conn, stream_no, event, projector.projected.get(stream_no, 0))
            conn.commit()
            if dies and number == len(checkpoints):
                break
            projector.project_stream(stream_no)
        else:
            projector.record_watermarks()
        journal.close()


def step_1_book(book_dir: Path) -> sqlite3.Connection:
    """A book at schema step 1: a stream that stopped at the ceiling and closed, then a resume
    that died with its last checkpoint committed but not in the journal."""
    conn = connect(book_dir / DATABASE_FILE_NAME)
    assert migrate(conn, target=1) == (0, 1)
    step_1_process(
        conn,
        book_dir,
        "r1",
        [
            [progress(1), Spend(committed_micro_usd=250)],
            [progress(2), UnitDone(unit="u1", index=0), Spend(committed_micro_usd=500)],
            [Ceiling(shortfall_micro_usd=250), finished(ExitCode.CEILING, 1, 500)],
        ],
    )
    step_1_process(
        conn,
        book_dir,
        "r2",
        [
            [progress(3), Spend(committed_micro_usd=750)],
            [progress(4), UnitDone(unit="u2", index=1), Spend(committed_micro_usd=1000)],
        ],
        dies=True,
    )
    assert schema_version(conn) == 1
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "engine_events_stream_summary" not in tables
    return conn


def status(book_dir: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-m", "engine_events._cli", "status", str(book_dir), "--json", *extra],
        capture_output=True,
        timeout=60,
        check=False,
    )
    return result.returncode, orjson.loads(result.stdout)


def pruned_copy(conn: sqlite3.Connection) -> sqlite3.Connection:
    """A copy of the database without the outbox rows retention may drop: those of every stream
    whose recorded watermark reached its last seq."""
    copy = sqlite3.connect(":memory:")
    conn.backup(copy)
    settled = [
        state.stream_no
        for state in _outbox.streams(copy, summaries=False)
        if state.projected_seq == state.last_seq
        and copy.execute(
            "SELECT projected_seq FROM engine_events_stream WHERE stream_no = ?", (state.stream_no,)
        ).fetchone()[0]
        == state.last_seq
    ]
    for stream_no in settled:
        copy.execute("DELETE FROM engine_events_outbox WHERE stream_no = ?", (stream_no,))
    copy.commit()
    return copy


def test_a_step_1_book_upgrades_with_its_data_and_status_intact(
    book_dir: Path, check_journal: Callable[[Path], dict[str, int]]
) -> None:
    """Step 2 gives every stream of a populated step-1 book its summary row, from its last row:
    `status --json` is the same before and after, and the same again once the outbox rows of the
    settled streams are gone. The book then goes on: its next engine appends the dead process's
    checkpoint, byte-identical, before its own hello."""
    conn = step_1_book(book_dir)
    rows_before = conn.execute(
        "SELECT * FROM engine_events_outbox ORDER BY stream_no, seq"
    ).fetchall()
    code, before = status(book_dir)
    assert code == 0
    assert before["streams"] == [
        {"engine_run_id": "r1", "last_seq": 8, "projected_seq": 8},
        {"engine_run_id": "r2", "last_seq": 6, "projected_seq": 3},
    ]
    assert before["money"] == {"committed_micro_usd": 1000}  # the dead process's last checkpoint
    assert schema_version(conn) == 1, "status reads an older book as it is"

    assert migrate(conn) == (1, SCHEMA_VERSION)
    assert conn.execute(
        "SELECT * FROM engine_events_outbox ORDER BY stream_no, seq"
    ).fetchall() == (rows_before)
    code, after = status(book_dir)
    assert (code, after) == (0, before)
    summaries = conn.execute(
        "SELECT stream_no, last_seq, progress_seq, spend_seq, ceiling_seq, finished_seq"
        " FROM engine_events_stream_summary ORDER BY stream_no"
    ).fetchall()
    assert summaries == [
        (state.stream_no, state.last_seq, *(state.latest.get(kind) for kind in _sql.SUMMARY_TYPES))
        for state in _outbox.streams(conn, summaries=False)
    ]
    for state in _outbox.streams(conn, summaries=False):
        (*_, progress_line, spend_line, ceiling_line, finished_line) = conn.execute(
            _sql.SUMMARY_GET, {"stream_no": state.stream_no}
        ).fetchone()
        lines = dict(
            zip(
                _sql.SUMMARY_TYPES,
                (progress_line, spend_line, ceiling_line, finished_line),
                strict=True,
            )
        )
        for kind, line in lines.items():
            seq = state.latest.get(kind)
            assert line == (None if seq is None else _outbox.line_at(conn, state.stream_no, seq))
    copy = pruned_copy(conn)
    assert copy.execute("SELECT count(*) FROM engine_events_outbox").fetchone()[0] == 6, "r1 gone"
    assert read_status(copy) == before
    copy.close()

    with Emitter.open(conn, book_dir, engine_run_id="r3") as emitter, emitter.transaction():
        emitter.emit(finished(ExitCode.CLEAN, 4, 1000))
    code, resumed = status(book_dir)
    assert [
        (s["engine_run_id"], s["last_seq"], s["projected_seq"]) for s in resumed["streams"]
    ] == [
        ("r1", 8, 8),
        ("r2", 6, 6),
        ("r3", 2, 2),
    ]
    assert resumed["finished"]["outcome"] == "clean"
    assert read_status(pruned_copy(conn)) == resumed
    conn.close()
    assert check_journal(book_dir) == {"lines": 16, "duplicates": 0, "streams": 3}


def test_an_upgraded_book_prunes_with_its_status_intact(book_dir: Path, tmp_path: Path) -> None:
    """A populated step-1 book is upgraded by an engine that has a retention; its first prune
    takes the rows of the two earlier streams (the dead process's appended first): `status
    --json`, with and without `--repair`, reports what the same book upgraded and never pruned
    reports. The schema needs nothing past step 2 for it."""
    conn = step_1_book(book_dir)
    never_pruned = tmp_path / "never-pruned" / book_dir.name
    never_pruned.mkdir(parents=True)
    shutil.copyfile(book_dir / "events.jsonl", never_pruned / "events.jsonl")
    copy = connect(never_pruned / DATABASE_FILE_NAME)
    conn.backup(copy)

    Emitter.open(conn, book_dir, engine_run_id="r3", retention=dt.timedelta(0)).close()
    Emitter.open(copy, never_pruned, engine_run_id="r3").close()

    assert conn.execute("SELECT stream_no, seq FROM engine_events_outbox").fetchall() == [(3, 1)]
    assert copy.execute("SELECT count(*) FROM engine_events_outbox").fetchone() == (15,)
    assert schema_version(conn) == schema_version(copy) == SCHEMA_VERSION
    conn.close()
    copy.close()
    for extra in ((), ("--repair",)):
        assert status(book_dir, *extra) == status(never_pruned, *extra)
    assert status(book_dir)[1]["money"] == {"committed_micro_usd": 1000}


def test_the_repair_channel_repairs_a_step_1_book_without_upgrading_it(book_dir: Path) -> None:
    """`status --json --repair` over a stopped step-1 book projects its backlog and reports, and
    leaves the schema at step 1: an older engine may still own the book, and the newer schema
    would lock it out (exit 13). The book's own next start migrates it."""
    conn = step_1_book(book_dir)
    code, report = status(book_dir, "--repair")
    assert code == 0
    assert [s["projected_seq"] for s in report["streams"]] == [8, 6]
    assert schema_version(conn) == 1
    Emitter.open(conn, book_dir, engine_run_id="r3").close()
    assert schema_version(conn) == SCHEMA_VERSION
    assert conn.execute("SELECT count(*) FROM engine_events_stream_summary").fetchone()[0] == 3
    conn.close()


def test_migrate_goes_forward_only_and_refuses_a_newer_book(conn: sqlite3.Connection) -> None:
    """A target below the book's version changes nothing; a book newer than this code is refused
    with 13 `schema_mismatch` whatever the target, untouched."""
    assert migrate(conn) == (0, SCHEMA_VERSION)
    assert migrate(conn, target=1) == (SCHEMA_VERSION, SCHEMA_VERSION)
    with pytest.raises(ValueError, match="target"):
        migrate(conn, target=SCHEMA_VERSION + 1)
    conn.execute(
        "UPDATE engine_events_meta SET value = ? WHERE key = 'schema_version'",
        (str(SCHEMA_VERSION + 1),),
    )
    for target in (1, SCHEMA_VERSION):
        with pytest.raises(SchemaMismatch) as raised:
            migrate(conn, target=target)
        assert raised.value.exit_code == 13
    assert schema_version(conn) == SCHEMA_VERSION + 1

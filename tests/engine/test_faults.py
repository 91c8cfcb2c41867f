"""A journal that cannot be written: loud degradation, or failure, and never a lost event."""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from engine_events import JournalWriteError, Spend
from engine_events._emitter import Emitter
from engine_events._schema import DATABASE_FILE_NAME, connect
from engine_events.readers.status import read_status
from engine_events.testing import FaultyIO, open_emitter


def committed_lines(conn: sqlite3.Connection) -> list[bytes]:
    rows = conn.execute("SELECT line FROM engine_events_outbox ORDER BY stream_no, seq")
    return [bytes(line) for (line,) in rows]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO, errno.EROFS, errno.EACCES])
def test_degrade_keeps_the_engine_going_and_loses_nothing(
    conn: sqlite3.Connection, book_dir: Path, code: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Under `degrade`, a write fault is logged once at ERROR, recorded, and healed by a later flush."""
    io = FaultyIO()
    emitter = open_emitter(conn, book_dir, io)
    with emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=1))
    good = (book_dir / "events.jsonl").read_bytes()

    io.fail_errno = code
    with caplog.at_level(logging.ERROR, logger="engine_events"):
        for amount in range(2, 12):
            with emitter.transaction():  # the engine goes on: no exception reaches the host
                emitter.emit(Spend(committed_micro_usd=amount))
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(errors) == 1, "one ERROR per episode, not one per flush"
    assert f"errno {code}" in errors[0].getMessage()
    assert io.failures >= 10
    assert emitter.journal_degraded
    assert read_status(conn)["journal"] == "degraded"
    assert (book_dir / "events.jsonl").read_bytes() == good, "partial writes were cut back"

    io.fail_errno = None
    with emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=12))
    assert not emitter.journal_degraded
    assert read_status(conn)["journal"] == "ok"
    emitter.close()
    assert (book_dir / "events.jsonl").read_bytes() == b"".join(committed_lines(conn))


def test_fail_policy_raises_and_keeps_the_rows(conn: sqlite3.Connection, book_dir: Path) -> None:
    """Under `fail`, a write fault raises JournalWriteError; the committed rows wait for a restart."""
    io = FaultyIO()
    emitter = open_emitter(conn, book_dir, io, on_journal_error="fail")
    io.fail_errno = errno.ENOSPC
    with pytest.raises(JournalWriteError) as raised, emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=5))
    assert raised.value.errno == errno.ENOSPC
    assert len(committed_lines(conn)) == 2  # the spend committed before the write failed
    emitter._lock.close()  # the host exits 1 here
    io.fail_errno = None
    Emitter.open(conn, book_dir, engine_run_id="next").close()
    lines = (book_dir / "events.jsonl").read_bytes().splitlines(keepends=True)
    assert lines[:2] == committed_lines(conn)[:2]
    assert orjson.loads(lines[1])["data"] == {"committed_micro_usd": 5}


def test_degraded_at_start_projects_the_backlog_later(book_dir: Path) -> None:
    """A journal unwritable from the start keeps every row, earlier streams first, until it heals."""
    conn = connect(book_dir / DATABASE_FILE_NAME)
    io = FaultyIO()
    io.fail_errno = errno.ENOSPC
    first = open_emitter(conn, book_dir, io, engine_run_id="one")
    with first.transaction():
        first.emit(Spend(committed_micro_usd=1))
    first.close()
    second = open_emitter(conn, book_dir, io, engine_run_id="two")
    assert second.journal_degraded
    io.fail_errno = None
    with second.transaction():
        second.emit(Spend(committed_micro_usd=2))
    second.close()
    assert (book_dir / "events.jsonl").read_bytes() == b"".join(committed_lines(conn))
    conn.close()


def test_fail_policy_process_exits_1_with_nothing_lost(book_dir: Path) -> None:
    """A real engine process under `fail` on an unwritable journal exits 1; a later run projects all."""
    journal = book_dir / "events.jsonl"
    journal.mkdir()  # opening a directory for writing fails with EISDIR: a journal that cannot be written
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine_events._cli",
            "demo",
            str(book_dir),
            "--units",
            "1",
            "--pace-ms",
            "0",
            "--on-journal-error",
            "fail",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    assert "cannot write the journal" in result.stderr
    journal.rmdir()
    conn = connect(book_dir / DATABASE_FILE_NAME)
    assert committed_lines(conn) == []  # refused during start-up recovery, before its hello
    conn.close()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine_events._cli",
            "demo",
            str(book_dir),
            "--units",
            "1",
            "--pace-ms",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    conn = connect(book_dir / DATABASE_FILE_NAME)
    assert journal.read_bytes() == b"".join(committed_lines(conn))
    conn.close()


@pytest.mark.parametrize("name", ["ENOSPC", "EIO"])
def test_fault_in_a_real_process_degrades_or_fails(book_dir: Path, name: str) -> None:
    """Through the seam, in real processes: `degrade` finishes (exit 0) with every row kept and
    projected once the fault clears; `fail` exits 1 and the next run projects what it committed."""
    common = [
        sys.executable,
        "-m",
        "engine_events.testing",
        "--units",
        "3",
        "--fail-with",
        f"{name}:3",
    ]
    degraded = subprocess.run(
        [*common, str(book_dir / "degrade")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert degraded.returncode == 0, degraded.stderr
    assert f"errno {getattr(errno, name)}" in degraded.stderr
    failed = subprocess.run(
        [*common, str(book_dir / "fail"), "--on-journal-error", "fail"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert failed.returncode == 1, failed.stderr
    for book in (book_dir / "degrade", book_dir / "fail"):
        conn = connect(book / DATABASE_FILE_NAME)
        rows = committed_lines(conn)
        assert read_status(conn)["journal"] == ("degraded" if book.name == "degrade" else "ok")
        conn.close()
        content = (book / "events.jsonl").read_bytes()
        assert content == b"".join(rows[: content.count(b"\n")]), (
            "the file is a prefix of the outbox"
        )
        assert len(rows) > content.count(b"\n"), "rows waited in the outbox"
        again = subprocess.run(
            [sys.executable, "-m", "engine_events.testing", "--units", "3", str(book)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert again.returncode == 0, again.stderr
        conn = connect(book / DATABASE_FILE_NAME)
        assert (book / "events.jsonl").read_bytes() == b"".join(committed_lines(conn))
        conn.close()


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_a_journal_that_is_not_a_regular_file_never_hangs_the_engine(
    book_dir: Path, tmp_path: Path, kind: str
) -> None:
    """A FIFO at the journal's path (opening it for writing waits for a reader), or a symbolic
    link, is a journal that cannot be written: the demo degrades and ends (exit 0) with every row
    kept in the outbox, `status` answers, and `status --repair` says at once that it cannot
    project. Before, the engine hung on the FIFO and ignored SIGTERM, and followed the link."""
    if kind == "fifo":
        os.mkfifo(book_dir / "events.jsonl")
    else:
        (book_dir / "events.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    argv = [sys.executable, "-m", "engine_events._cli"]
    demo = _run([*argv, "demo", str(book_dir), "--units", "1", "--pace-ms", "0"])
    assert demo.returncode == 0, demo.stderr
    assert "cannot write" in demo.stderr
    status = _run([*argv, "status", str(book_dir), "--json"])
    assert status.returncode == 0, status.stdout
    assert orjson.loads(status.stdout)["journal"] == "degraded"
    repaired = _run([*argv, "status", str(book_dir), "--json", "--repair"])
    assert repaired.returncode == 1
    assert orjson.loads(repaired.stdout)["error"] == "unreadable"
    conn = connect(book_dir / DATABASE_FILE_NAME)
    assert len(committed_lines(conn)) > 2, "every row is kept in the outbox"
    conn.close()
    assert not (tmp_path / "elsewhere.jsonl").exists()


def test_a_lock_that_is_not_a_regular_file_is_a_refusal_not_a_hang(book_dir: Path) -> None:
    """A FIFO at `.engine.lock`: the engine and `status` refuse with exit 11 (source_unreadable)
    and a clear message. Before, opening it blocked (`status`) or the engine crashed with a
    traceback."""
    os.mkfifo(book_dir / ".engine.lock")
    argv = [sys.executable, "-m", "engine_events._cli"]
    demo = _run([*argv, "demo", str(book_dir), "--units", "1", "--pace-ms", "0"])
    assert demo.returncode == 11, demo.stderr
    assert "the book lock is not a regular file" in demo.stderr
    assert "Traceback" not in demo.stderr
    status = _run([*argv, "status", str(book_dir), "--json"])
    assert status.returncode == 11
    assert orjson.loads(status.stdout)["error"] == "book_directory"


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

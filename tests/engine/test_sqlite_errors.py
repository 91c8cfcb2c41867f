"""SQLite's errors are translated once (`_sqlite`) into the `engine_events` tree, keeping the
driver's message, codes and DB-API family: callers see the same exit codes and messages."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from engine_events import Spend
from engine_events._emitter import Emitter
from engine_events._exit_codes import ExitCode
from engine_events._schema import DATABASE_FILE_NAME, connect
from engine_events._sqlite import translate, translated
from engine_events.errors import (
    BookDatabaseBusy,
    BookDatabaseError,
    BookDatabaseFailed,
    BookDatabaseRefused,
    EngineEventsError,
)


def _raised(statement: str, conn: sqlite3.Connection) -> BaseException:
    with pytest.raises(BookDatabaseError) as caught, translated():
        conn.execute(statement)
    return caught.value


def test_each_driver_error_keeps_its_message_codes_family_and_cause() -> None:
    """An operational error stays an OperationalError, a constraint an IntegrityError."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY)")
    conn.execute("INSERT INTO t VALUES (1)")
    missing = _raised("SELECT * FROM nowhere", conn)
    assert type(missing) is BookDatabaseFailed
    assert isinstance(missing, sqlite3.OperationalError)
    assert isinstance(missing, EngineEventsError)
    assert str(missing) == "no such table: nowhere"
    assert isinstance(missing.__cause__, sqlite3.OperationalError)
    assert missing.sqlite_errorname == "SQLITE_ERROR"
    twice = _raised("INSERT INTO t VALUES (1)", conn)
    assert type(twice) is BookDatabaseRefused
    assert isinstance(twice, sqlite3.IntegrityError)
    assert twice.sqlite_errorname == "SQLITE_CONSTRAINT_PRIMARYKEY"
    assert translate(twice) is twice  # translated once, never twice


def test_a_busy_database_is_busy(tmp_path: Path) -> None:
    """SQLITE_BUSY (another connection holds the write lock) is `BookDatabaseBusy`."""
    database = tmp_path / "db.sqlite3"
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("CREATE TABLE t (k)")
    holder.execute("BEGIN IMMEDIATE")
    waiter = sqlite3.connect(database, isolation_level=None, timeout=0)
    try:
        busy = _raised("BEGIN IMMEDIATE", waiter)
        assert type(busy) is BookDatabaseBusy
        assert isinstance(busy, sqlite3.OperationalError)
        assert busy.sqlite_errorname == "SQLITE_BUSY"
    finally:
        waiter.close()
        holder.rollback()
        holder.close()


def test_a_transaction_that_cannot_begin_raises_a_translated_busy(tmp_path: Path) -> None:
    """The emitter's own BEGIN runs under the translation; a host catching sqlite3's
    OperationalError still catches it."""
    book = tmp_path / "book"
    book.mkdir()
    conn = connect(book / DATABASE_FILE_NAME)
    emitter = Emitter.open(conn, book)
    other = sqlite3.connect(book / DATABASE_FILE_NAME, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        conn.execute("PRAGMA busy_timeout = 0")
        with pytest.raises(sqlite3.OperationalError) as caught, emitter.transaction():
            emitter.emit(Spend(committed_micro_usd=1))
        assert isinstance(caught.value, BookDatabaseBusy)
        other.rollback()
    finally:
        other.close()
        emitter.close()
        conn.close()


def test_status_of_a_database_that_is_not_one_is_unreadable_with_sqlites_message(
    tmp_path: Path,
) -> None:
    """`status` answers `unreadable` with the infrastructure exit code, as before: the driver's
    message is the detail."""
    book = tmp_path / "book"
    book.mkdir()
    (book / DATABASE_FILE_NAME).write_bytes(b"this is not a database, " * 100)
    result = subprocess.run(
        [sys.executable, "-m", "engine_events._cli", "status", str(book), "--json"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    report = orjson.loads(result.stdout)
    assert report == {"error": "unreadable", "detail": "file is not a database"}
    assert result.returncode == ExitCode.INFRA
    assert b"Traceback" not in result.stderr

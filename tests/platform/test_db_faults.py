"""Postgres failing under a pass: a connection killed mid-batch, the server restarted.

Nothing committed is lost, nothing is applied twice, and the pass goes on from the cursor.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from platform_ingest import BookPass, Database, DatabaseSettings, migrate, register_book
from platform_journals import RUN_A, attempts, hello, only_run, spend, unit_done, write
from server_fixtures import pg_ctl as _pg_ctl
from server_fixtures import start_again

pytestmark = [pytest.mark.postgres, pytest.mark.crash]

MakeBook = Callable[[str], Path]
LINES = 120


def _journal(book: Path) -> None:
    write(
        book,
        hello(),
        *[
            unit_done(seq, f"u-{seq}", seq) if seq % 2 else spend(seq, 10 * seq)
            for seq in range(2, LINES + 1)
        ],
    )


def _check_applied_once(
    db: Database, book: Path, sql: psycopg.Connection[tuple[object, ...]]
) -> None:
    assert attempts(db, book)[RUN_A]["last_seq"] == LINES
    run = only_run(db, book)
    assert run["units"] == [f"u-{seq}" for seq in range(3, LINES + 1, 2)]
    assert run["committed_micro_usd"] == 10 * LINES
    assert sql.execute("SELECT count(*), count(DISTINCT seq) FROM line_hashes").fetchone() == (
        LINES,
        LINES,
    )


def test_connection_killed_mid_batch_loses_nothing_and_doubles_nothing(
    db: Database,
    make_book: MakeBook,
    sql: psycopg.Connection[tuple[object, ...]],
) -> None:
    """A backend killed inside a batch: rolled back, reconnected, resumed from the cursor."""
    book = make_book("book-1")
    _journal(book)
    register_book(db, book)
    batches = [0]

    def kill_third_batch(stage: str) -> None:
        if stage != "locked":
            return
        batches[0] += 1
        if batches[0] == 3:
            pid = db.backend_pid
            sql.execute("SELECT pg_terminate_backend(%s)", (pid,))

    report = BookPass(
        db, "book-1", mode="auto", batch_lines_max=25, commit_hook=kill_third_batch
    ).run()
    assert report.restarts == 1
    assert report.lines_applied == LINES
    _check_applied_once(db, book, sql)


def test_server_restart_mid_pass_loses_nothing_and_doubles_nothing(
    own_server: object, make_book: MakeBook
) -> None:
    """Postgres restarted inside a batch: the pass waits, reconnects, applies each line once."""
    dsn: str = own_server.get_uri()  # type: ignore[attr-defined]
    db = Database(dsn, DatabaseSettings(reconnect_wait_s=0.1, reconnect_attempts_max=100))
    migrate(db)
    book = make_book("book-1")
    _journal(book)
    register_book(db, book)
    socket_dir = own_server.get_postmaster_info().socket_dir  # type: ignore[attr-defined]
    log = own_server.log  # type: ignore[attr-defined]
    batches = [0]
    restarted = threading.Event()

    def start_later() -> None:
        time.sleep(1.0)
        start_again(own_server, socket_dir, log)
        restarted.set()

    def stop_in_fourth_batch(stage: str) -> None:
        if stage != "locked":
            return
        batches[0] += 1
        if batches[0] == 4:
            _pg_ctl(own_server, "-w", "-m", "fast", "stop")
            threading.Thread(target=start_later, daemon=True).start()

    try:
        report = BookPass(
            db, "book-1", mode="auto", batch_lines_max=20, commit_hook=stop_in_fourth_batch
        ).run()
        assert restarted.wait(timeout=60)
        assert report.restarts >= 1
        assert report.lines_applied == LINES
        with psycopg.connect(dsn, autocommit=True) as sql:
            _check_applied_once(db, book, sql)
    finally:
        db.close()

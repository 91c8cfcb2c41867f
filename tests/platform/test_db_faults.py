"""Postgres failing under a pass: a connection killed mid-batch, the server restarted.

Nothing committed is lost, nothing is applied twice, and the pass goes on from the cursor. A
worker whose pass made its session again says so: its membership rested on the session lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from platform_ingest import Database, DatabaseSettings, migrate
from platform_ingest.ingest.book_pass import BookPass
from platform_ingest.ingest.books import register_book
from platform_ingest.worker.loop import Worker, WorkerSettings
from platform_journals import (
    RUN_A,
    append,
    attempts,
    hello,
    only_run,
    spend,
    sweep,
    unit_done,
    wait_for,
    write,
)
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


def _worker_over_one_book(
    db: Database, dsn: str, tmp_path: Path, worker_id: str
) -> tuple[Worker, Path]:
    """A worker (not started) over one book whose first lines are applied."""
    root = tmp_path / "books"
    book = root / "book-1"
    book.mkdir(parents=True)
    write(book, hello(book="book-1"), spend(2, 10))
    sweep(db, book)
    settings = WorkerSettings(roots=[root], mode="auto", compact_quiet_s=None)
    return Worker(dsn, settings, worker_id=worker_id), book


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

    book_pass = BookPass(
        db, "book-1", mode="auto", batch_lines_max=25, commit_hook=kill_third_batch
    )
    report = book_pass.run()
    assert report.restarts == 1
    assert len(book_pass.reconnected_after_s) == 1  # the session it made again
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


def test_a_worker_whose_pass_made_its_session_again_logs_that_postgres_was_away(
    fresh_dsn: str,
    db: Database,
    tmp_path: Path,
    sql: psycopg.Connection[tuple[object, ...]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The worker's session ends while a pass waits inside its transaction, and the pass makes
    it again itself: no away episode begins (no `Postgres is away`), yet the session the
    worker's membership rested on is gone, so the worker logs at WARNING that Postgres was away,
    and the line goes through once."""
    caplog.set_level(logging.INFO, logger="platform_ingest")
    worker, book = _worker_over_one_book(db, fresh_dsn, tmp_path, "w-again")
    name = "platform-ingest worker w-again %"

    def waits_for_a_lock() -> bool:
        row = sql.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE application_name LIKE %s", (name,)
        ).fetchone()
        return row == ("Lock",)

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    thread = threading.Thread(target=worker.run, name="worker")
    with psycopg.connect(fresh_dsn) as blocker:
        blocker.execute("SELECT 1 FROM attempts WHERE book_id = 'book-1' FOR UPDATE")
        thread.start()
        try:
            append(book, spend(3, 20))
            wait_for("the pass waits for its cursor's row", waits_for_a_lock)
            sql.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name LIKE %s",
                (name,),
            )
            blocker.rollback()
            wait_for("the line goes through", lambda: attempts(db, book)[RUN_A]["last_seq"] == 3)
            wait_for(
                "the worker logs that Postgres was away",
                lambda: any(message.startswith("Postgres was away") for message in warnings()),
            )
            assert not any(message.startswith("Postgres is away") for message in warnings())
            errors = worker.metrics.registry.get_sample_value(
                "platform_ingest_database_errors_total", {"error": "DatabaseUnavailable"}
            )
            assert errors == 1
        finally:
            worker.request_stop()
            thread.join(timeout=60)
    assert not thread.is_alive()
    assert only_run(db, book)["committed_micro_usd"] == 20


def test_a_lone_books_group_that_lost_the_session_makes_it_again_and_passes_the_book(
    db: Database,
    fresh_dsn: str,
    tmp_path: Path,
    sql: psycopg.Connection[tuple[object, ...]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A book alone in being due goes in a group of one. The worker's session ended while it was
    idle: the group of one meets the lost session, the worker makes it again at once (WARNING
    `Postgres was away`, no away episode), and the book gets its own pass: the line goes through
    once."""
    caplog.set_level(logging.INFO, logger="platform_ingest")
    worker, book = _worker_over_one_book(db, fresh_dsn, tmp_path, "w-lone")
    name = "platform-ingest worker w-lone %"

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]

    def groups() -> float:
        count = worker.metrics.registry.get_sample_value("platform_ingest_group_books_count")
        return count or 0.0

    thread = threading.Thread(target=worker.run, name="worker")
    thread.start()
    try:
        append(book, spend(3, 20))
        wait_for("the lone line goes through", lambda: attempts(db, book)[RUN_A]["last_seq"] == 3)
        assert groups() >= 1, "a lone book's line went in a group of one"
        wait_for(
            "the worker's session is there",
            lambda: (
                sql.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s", (name,)
                ).fetchone()
                == (1,)
            ),
        )
        sql.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s",
            (name,),
        )
        append(book, spend(4, 30))
        wait_for("the line goes through", lambda: attempts(db, book)[RUN_A]["last_seq"] == 4)
        wait_for(
            "the worker logs that Postgres was away",
            lambda: any(message.startswith("Postgres was away") for message in warnings()),
        )
        assert not any(message.startswith("Postgres is away") for message in warnings())
    finally:
        worker.request_stop()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert only_run(db, book)["committed_micro_usd"] == 30

"""A bounded wait of Postgres that runs out on one book's work, pass after pass, is that book's
problem (`database_timeout`, shown by `show`), never the worker's: the other books go on, the
database is not marked away, and the book goes through once the wait no longer runs out."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from platform_ingest import Database, DatabaseSettings, DatabaseTimeout
from platform_ingest.ingest.projection_step import install
from platform_ingest.projections import Event, ProjectionSession
from platform_ingest.worker.loop import Worker, WorkerSettings
from platform_journals import append, book_state, hello, spend, sweep, wait_for, write

pytestmark = pytest.mark.postgres

LOCK_TIMEOUT_MS = 200


def _last_seq(db: Database, book: Path) -> int:
    return max(
        attempt["last_seq"] for run in book_state(db, book)["runs"] for attempt in run["attempts"]
    )


def _problems(db: Database, book: Path) -> list[str]:
    return [problem["kind"] for problem in book_state(db, book)["problems"]]


@pytest.fixture
def blocker(fresh_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A session whose transaction stays open (it locks what the test asks it to)."""
    with psycopg.connect(fresh_dsn) as connection:
        yield connection


def _lock_attempts_of(blocker: psycopg.Connection[Any], book_id: str) -> None:
    blocker.execute("SELECT 1 FROM attempts WHERE book_id = %s FOR UPDATE", (book_id,))


def test_a_lock_held_on_one_books_rows_is_that_books_problem(
    fresh_dsn: str, db: Database, tmp_path: Path, blocker: psycopg.Connection[Any]
) -> None:
    root = tmp_path / "books"
    slow, other = root / "book-slow", root / "book-other"
    for book in (slow, other):
        book.mkdir(parents=True)
        write(book, hello(book=book.name), spend(2, 10))
        sweep(db, book)
    _lock_attempts_of(blocker, "book-slow")
    worker = Worker(
        fresh_dsn,
        WorkerSettings(roots=[root], mode="auto", compact_quiet_s=None),
        database_settings=DatabaseSettings(lock_timeout_ms=LOCK_TIMEOUT_MS),
        worker_id="w-timeouts",
    )
    thread = threading.Thread(target=worker.run, name="worker")
    thread.start()
    try:
        append(slow, spend(3, 20))
        wait_for("the locked book shows database_timeout", lambda: _problems(db, slow) != [])
        assert _problems(db, slow) == ["database_timeout"]
        (problem,) = book_state(db, slow)["problems"]
        assert "55P03" in problem["detail"]  # lock_not_available, in Postgres's words
        append(other, spend(3, 30))
        wait_for("the other book is applied meanwhile", lambda: _last_seq(db, other) == 3)
        assert worker.metrics.registry.get_sample_value("platform_ingest_database_up") == 1
        assert worker.metrics.registry.get_sample_value(
            "platform_ingest_pass_failures_total", {"error": "DatabaseTimeout"}
        )
        assert _last_seq(db, slow) == 2
        blocker.rollback()
        wait_for(
            "the book goes through once the lock is gone, and its problem is cleared",
            lambda: _last_seq(db, slow) == 3 and _problems(db, slow) == [],
        )
    finally:
        worker.request_stop()
        thread.join(timeout=60)
    assert not thread.is_alive()


def test_a_sweep_whose_waits_run_out_records_the_problem_and_fails(
    db: Database, tmp_path: Path, blocker: psycopg.Connection[Any], fresh_dsn: str
) -> None:
    """Outside a worker the pass raises `DatabaseTimeout` after its bounded restarts, with the
    problem on the book; the next pass that goes through clears it."""
    book = tmp_path / "book-1"
    book.mkdir()
    write(book, hello(book=book.name), spend(2, 10))
    sweep(db, book)
    append(book, spend(3, 20))
    _lock_attempts_of(blocker, "book-1")
    short = Database(fresh_dsn, DatabaseSettings(lock_timeout_ms=LOCK_TIMEOUT_MS))
    try:
        with pytest.raises(DatabaseTimeout):
            sweep(short, book)
        assert _problems(db, book) == ["database_timeout"]
        blocker.rollback()
        assert sweep(short, book).lines_applied == 1
        assert _problems(db, book) == []
    finally:
        short.close()


def test_a_book_that_timed_out_waits_at_least_ten_times_its_pass() -> None:
    """The wait before the book is tried again doubles from 0.5 s (jittered) and is never shorter
    than the floor the worker gives: ten times what the failed pass held it for."""
    from platform_ingest.worker.loop import TIMED_OUT_WAIT_FACTOR
    from platform_ingest.worker.schedule import Due, Schedule

    schedule, path = Schedule(), Path("/books/book-1")
    assert schedule.failed(path, Due("notify", 0.0)) <= 0.5
    due = schedule.take(path)  # as the worker takes a book when its pass begins
    assert due is not None
    assert schedule.failed(path, due, at_least_s=TIMED_OUT_WAIT_FACTOR * 5.0) == 50.0
    assert schedule.ready(time.monotonic() + 49.0) == []  # not passed before the wait is over
    assert schedule.ready(time.monotonic() + 51.0) == [path]


class _Dawdling:
    """A projection whose Python takes longer than Postgres lets a transaction sit idle."""

    name = "dawdling"
    version = 1

    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s

    def setup(self, session: ProjectionSession) -> None:
        pass

    def apply(self, session: ProjectionSession, events: Sequence[Event]) -> None:
        time.sleep(self.sleep_s)


def test_a_projection_that_leaves_the_transaction_idle_too_long_is_the_books_problem(
    db: Database, tmp_path: Path, fresh_dsn: str
) -> None:
    """Postgres ends a session whose transaction sat idle past its bound (SQLSTATE 25P03) while
    a projection's Python ran: the book shows `database_timeout`, on a new session, nothing of the
    batch is committed, and once the projection is quick again the book goes through."""
    book = tmp_path / "book-1"
    book.mkdir()
    write(book, hello(book=book.name), spend(2, 10))
    short = Database(fresh_dsn, DatabaseSettings(idle_in_transaction_timeout_ms=300))
    try:
        install(short, [_Dawdling(0.0)])
        with pytest.raises(DatabaseTimeout, match="25P03"):
            sweep(short, book, projections=[_Dawdling(1.0)])
        assert _problems(db, book) == ["database_timeout"]
        assert book_state(db, book)["runs"] == []  # the first batch was not committed
        assert sweep(short, book, projections=[_Dawdling(0.0)]).lines_applied == 2
        assert _problems(db, book) == []
    finally:
        short.close()

"""Two passes on one book: the row lock and the cursor's compare-and-set apply each effect once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from platform_ingest import Database, PassReport
from platform_ingest.ingest.book_pass import BookPass
from platform_ingest.ingest.books import register_book
from platform_journals import RUN_A, append, attempts, hello, only_run, unit_done, write

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]


def _race(dsn: str, book_id: str, *, batch_lines_max: int) -> list[PassReport]:
    """Run two passes in two threads on two connections; both decide their first batch from the
    same state, then both try to commit it at the same moment."""
    barrier = threading.Barrier(2, timeout=30)

    def one_pass() -> PassReport:
        first = [True]

        def hook(stage: str) -> None:
            if stage == "before" and first[0]:
                first[0] = False
                barrier.wait()

        db = Database(dsn)
        try:
            return BookPass(
                db,
                book_id,
                mode="auto",
                book_lock=False,
                batch_lines_max=batch_lines_max,
                commit_hook=hook,
            ).run()
        finally:
            db.close()

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(one_pass) for _ in range(2)]
        return [future.result(timeout=60) for future in futures]


def test_two_racing_passes_on_a_new_stream_apply_each_line_once(
    fresh_dsn: str,
    db: Database,
    make_book: MakeBook,
    sql: psycopg.Connection[tuple[object, ...]],
) -> None:
    """Two passes racing over a new stream (both create its attempt): each line applied once."""
    book = make_book("book-1")
    write(book, hello(), *[unit_done(seq, f"u-{seq}", seq) for seq in range(2, 41)])
    register_book(db, book)
    reports = _race(fresh_dsn, "book-1", batch_lines_max=8)
    assert sum(report.lines_applied for report in reports) == 40
    assert sum(report.restarts for report in reports) >= 1
    assert sql.execute("SELECT count(*) FROM line_hashes").fetchone() == (40,)
    assert attempts(db, book)[RUN_A]["last_seq"] == 40
    assert only_run(db, book)["units"] == [f"u-{seq}" for seq in range(2, 41)]


def test_two_racing_passes_on_an_active_stream_apply_each_line_once(
    fresh_dsn: str,
    db: Database,
    make_book: MakeBook,
    sql: psycopg.Connection[tuple[object, ...]],
) -> None:
    """Two passes racing on an active stream's next lines: the loser re-reads, nothing twice."""
    book = make_book("book-1")
    write(book, hello(), unit_done(2, "u-2", 2))
    register_book(db, book)
    BookPass(db, "book-1", mode="auto").run()
    append(book, *[unit_done(seq, f"u-{seq}", seq) for seq in range(3, 31)])
    reports = _race(fresh_dsn, "book-1", batch_lines_max=5)
    assert sum(report.lines_applied for report in reports) == 28, reports
    assert sum(report.restarts for report in reports) >= 1, reports
    assert sql.execute("SELECT count(*) FROM line_hashes").fetchone() == (30,)
    assert attempts(db, book)[RUN_A]["last_seq"] == 30
    assert only_run(db, book)["units"] == [f"u-{seq}" for seq in range(2, 31)]


def test_two_racing_passes_copying_large_batches_apply_each_line_once_and_refuse_none(
    fresh_dsn: str,
    db: Database,
    make_book: MakeBook,
    sql: psycopg.Connection[tuple[object, ...]],
) -> None:
    """Batches of hundreds of lines, their hashes written by COPY, raced by two passes: the loser
    starts over (never a refusal: the stream stays active), and each line is applied once."""
    book = make_book("book-1")
    write(book, hello(), unit_done(2, "u-2", 2))
    register_book(db, book)
    BookPass(db, "book-1", mode="auto").run()
    append(book, *[unit_done(seq, f"u-{seq}", seq) for seq in range(3, 2001)])
    reports = _race(fresh_dsn, "book-1", batch_lines_max=400)
    assert sum(report.lines_applied for report in reports) == 1998, reports
    assert sum(report.restarts for report in reports) >= 1, reports
    assert sql.execute("SELECT count(*) FROM line_hashes").fetchone() == (2000,)
    assert sql.execute("SELECT count(DISTINCT seq) FROM line_hashes").fetchone() == (2000,)
    attempt = attempts(db, book)[RUN_A]
    assert (attempt["state"], attempt["last_seq"]) == ("active", 2000)
    assert only_run(db, book)["units"] == [f"u-{seq}" for seq in range(2, 2001)]


def test_a_book_held_by_one_worker_is_skipped_by_another(
    fresh_dsn: str, db: Database, make_book: MakeBook
) -> None:
    """With the per-book advisory lock, a second worker skips a book another is passing over."""
    book = make_book("book-1")
    write(book, hello(), unit_done(2, "u-2", 2))
    register_book(db, book)
    inside = threading.Event()
    release = threading.Event()
    other_report: list[PassReport] = []

    def hold(stage: str) -> None:
        if stage == "before":
            inside.set()
            release.wait(timeout=30)

    def other() -> None:
        inside.wait(timeout=30)
        second = Database(fresh_dsn)
        try:
            other_report.append(BookPass(second, "book-1", mode="auto").run())
        finally:
            second.close()
            release.set()

    thread = threading.Thread(target=other)
    thread.start()
    report = BookPass(db, "book-1", mode="auto", commit_hook=hold).run()
    thread.join(timeout=60)
    assert report.lines_applied == 2
    assert other_report[0].busy
    assert other_report[0].lines_applied == 0


def test_two_workers_registering_the_same_new_books_at_once_both_succeed(
    fresh_dsn: str, make_book: MakeBook
) -> None:
    """New books registered by two sessions at the same moment: neither fails on a unique index."""
    books = [make_book(f"book-race-{index}") for index in range(60)]
    barrier = threading.Barrier(2)

    def register_all() -> list[str]:
        database = Database(fresh_dsn)
        try:
            registered = []
            for book in books:
                barrier.wait(timeout=30)
                registered.append(register_book(database, book).book_id)
            return registered
        finally:
            database.close()

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = [pool.submit(register_all) for _ in range(2)]
        registered = [result.result(timeout=120) for result in results]
    assert registered[0] == registered[1] == [book.name for book in books]

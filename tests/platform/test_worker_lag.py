"""Lag in `show --json`, measured against the real head of the journal, and the membership that
splits books between workers."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from platform_journals import append, book_state, hello, spend, sweep, unit_done, write

from platform_ingest import Database, register_book
from platform_ingest._membership import application_name, group, live_workers, owner_of

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]


def test_lag_counts_what_lies_past_the_cursor_and_the_age_of_the_last_applied_line(
    db: Database, make_book: MakeBook
) -> None:
    """Unread lines show as bytes and lines of lag; after a pass the lag is zero and the age set;
    an unterminated tail is bytes but no line."""
    book = make_book("book-1")
    lines = [hello(), unit_done(2, "u-2", 2), spend(3, 40)]
    write(book, *lines)
    register_book(db, book)
    lag = book_state(db, book)["lag"]
    assert (lag["bytes"], lag["lines"], lag["last_applied_at"]) == (sum(map(len, lines)), 3, None)
    sweep(db, book)
    lag = book_state(db, book)["lag"]
    assert (lag["bytes"], lag["lines"], lag["lines_exact"]) == (0, 0, True)
    assert lag["last_applied_at"] is not None
    more = unit_done(4, "u-4", 4)
    append(book, more, b'{"seq":5,"type":"spe')
    lag = book_state(db, book)["lag"]
    assert (lag["bytes"], lag["lines"]) == (len(more) + 20, 1)


def test_a_replaced_journal_counts_whole_as_lag(db: Database, make_book: MakeBook) -> None:
    """When the journal is replaced (another file), every byte of it is lag until a pass."""
    book = make_book("book-1")
    write(book, hello(), unit_done(2, "u-2", 2))
    sweep(db, book)
    write(book, hello(), unit_done(2, "u-2", 2))  # same bytes, a new inode
    lag = book_state(db, book)["lag"]
    assert lag["lines"] == 2
    sweep(db, book)
    assert book_state(db, book)["lag"]["lines"] == 0


def test_live_workers_are_the_sessions_that_announce_themselves(fresh_dsn: str) -> None:
    """A worker's session is listed while it is open and gone once it closes."""
    worker = Database(fresh_dsn, application_name=application_name("w-one", "digest0001"))
    other = Database(fresh_dsn)
    try:
        assert worker.backend_pid > 0  # connects
        peers = live_workers(other)
        assert [(peer.worker_id, peer.digest) for peer in peers] == [("w-one", "digest0001")]
        assert group(peers, "w-two", "digest0001") == ("w-one", "w-two")
        assert group(peers, "w-two", "digest0002") == ("w-two",)
        worker.close()
        # The server ends the closed session's backend a moment after the socket closes.
        deadline = time.monotonic() + 10
        while live_workers(other) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert live_workers(other) == []
    finally:
        worker.close()
        other.close()


def test_rendezvous_moves_only_the_books_of_a_worker_that_leaves() -> None:
    """When one of three workers leaves, only its books change hands; the others keep theirs."""
    books = [f"book-{number}" for number in range(300)]
    three = ("w-1", "w-2", "w-3")
    before = {book: owner_of(book, three) for book in books}
    after = {book: owner_of(book, ("w-1", "w-2")) for book in books}
    assert all(before[book] == after[book] for book in books if before[book] != "w-3")
    counts = [list(before.values()).count(worker) for worker in three]
    assert min(counts) > 50, counts

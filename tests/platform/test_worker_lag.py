"""Lag in `show --json`, measured against the real head of the journal, and the membership that
splits books between workers."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from platform_ingest import Database
from platform_ingest.errors import ConfigError
from platform_ingest.ingest.books import register_book
from platform_ingest.operate import lag as lag_module
from platform_ingest.store import statements as _sql
from platform_ingest.worker.loop import Worker, WorkerSettings
from platform_ingest.worker.membership import (
    APPLICATION_NAME_BYTES_MAX,
    application_name,
    check_worker_id,
    group,
    live_workers,
    member_id,
    owner_of,
    roots_digest,
)
from platform_journals import append, book_state, hello, spend, sweep, unit_done, write

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


LONG_ID = "ip-172-31-44-120.eu-central-1.compute.internal-abcdefghijklmn-1"


def test_a_worker_id_of_63_characters_is_announced_and_recognised(
    fresh_dsn: str, tmp_path: Path
) -> None:
    """A cloud hostname and `-1` (63 characters) is a worker id. Postgres keeps 63 bytes of the
    application name, so the long id is announced by its member id (a hash); its peers see it as
    a member of their group, and it owns the books they say it owns."""
    assert len(LONG_ID) == 63
    assert check_worker_id(LONG_ID) == LONG_ID
    with pytest.raises(ConfigError):
        check_worker_id("")
    assert member_id("w-3f2a9c01") == "w-3f2a9c01"  # a short id is announced as itself
    assert member_id(member_id(LONG_ID)) == member_id(LONG_ID) != LONG_ID
    long = Worker(fresh_dsn, WorkerSettings(roots=[tmp_path]), worker_id=LONG_ID)
    digest = roots_digest([tmp_path])
    name = application_name(LONG_ID, digest)
    assert len(name.encode()) <= APPLICATION_NAME_BYTES_MAX
    other = Database(fresh_dsn)
    try:
        assert long.db.backend_pid > 0  # connects, joining: not a member yet
        assert other.fetch_all(_sql.WORKERS_LIVE) == []
        long.survey.announce(name)
        assert long.db.application_name == name
        (row,) = other.fetch_all(_sql.WORKERS_LIVE)
        assert row["application_name"] == name  # whole: nothing cut off
        peers = live_workers(other)
        assert [(peer.worker_id, peer.digest) for peer in peers] == [(member_id(LONG_ID), digest)]
        members = group(peers, "w-two", digest)
        assert members == tuple(sorted((member_id(LONG_ID), "w-two")))
        assert group(peers, LONG_ID, digest) == (member_id(LONG_ID),)
        books = [f"book-{number}" for number in range(100)]
        mine = [book for book in books if owner_of(book, members) == long.survey.member]
        assert 0 < len(mine) < len(books)
    finally:
        long.db.close()
        other.close()


@pytest.mark.parametrize("worker_id", ["x" * 64, "has space", "é", "a#b", "w/1"])
def test_a_bad_worker_id_is_refused_before_postgres(worker_id: str, tmp_path: Path) -> None:
    """The check needs no Postgres: the command can make it before it starts or connects.
    (`Worker` takes an empty id as none given: a random one.)"""
    with pytest.raises(ConfigError, match="1 to 63 letters"):
        check_worker_id(worker_id)
    with pytest.raises(ConfigError, match="1 to 63 letters"):
        Worker("host=/nonexistent", WorkerSettings(roots=[tmp_path]), worker_id=worker_id)


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=300)
    | st.builds(
        lambda time, tail: b'{"seq":1,"type":"hello","time":' + time + b',"data":{}}' + tail,
        st.sampled_from(
            [b'"2026-11-30T02:08:57"', b'"2026-11-30T02:08:57.213Z"', b'"nonsense"', b"12", b"null"]
        ),
        st.sampled_from([b"\n", b"", b"\r\n", b"\x00\n"]),
    ),
    st.integers(0, 400),
)
def test_the_time_of_a_stream_waiting_to_be_named_is_read_from_any_bytes(
    tmp_path_factory: pytest.TempPathFactory, content: bytes, offset: int
) -> None:
    """Whatever the journal holds where the hello was (it may have changed since a pass judged
    it), its time is an instant with its UTC offset or None: never an error, never a naive time
    that a survey could not subtract from the clock."""
    path = tmp_path_factory.mktemp("hello") / "events.jsonl"
    path.write_bytes(content)
    found = lag_module.hello_time(path, offset)
    assert found is None or found.tzinfo is not None
    valid = b'{"seq":1,"type":"hello","time":"2026-11-30T02:08:57.213Z","data":{}}'
    if offset == 0 and content in (valid + b"\n", valid + b"\r\n"):
        assert found is not None

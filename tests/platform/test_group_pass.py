"""A group pass (many books, one transaction): one book's trouble never holds up the others of its
group, the group writes what each book's own pass would, and nothing is applied twice or lost
wherever a crash or Postgres going away lands in it."""

from __future__ import annotations

import gc
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platform_ingest import Database, DatabaseUnavailable, ProjectionFailed, migrate
from platform_ingest.ingest import group_commit
from platform_ingest.ingest.book_pass import BookPass
from platform_ingest.ingest.books import book_lock_key, register_book
from platform_ingest.ingest.group_pass import GroupPass
from platform_ingest.ingest.projection_step import install
from platform_ingest.store.db import DatabaseSettings, set_statement_hook
from platform_ingest.store.statement import Statement
from platform_journals import (
    append,
    hello,
    refuse_poison_units,
    spend,
    unit_done,
    write,
)
from projection_fixtures import FailingFor, Recording
from server_fixtures import pg_ctl, start_again

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]
BOOKS = 8
POISON_UNIT = "poison"


def stream_of(book: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, book))


def book_name(number: int) -> str:
    return f"book-{number}"


def make_books(
    db: Database, make_book: MakeBook, count: int = BOOKS, projections: Sequence[Any] = ()
) -> list[Path]:
    """`count` registered books, each a stream of a hello and one unit, applied by a group (with
    `projections`, installed first)."""
    if projections:
        install(db, projections)
    directories = []
    for number in range(count):
        name = book_name(number)
        directory = make_book(name)
        write(directory, hello(stream_of(name), book=name), unit_done(2, "u-2", 2))
        register_book(db, directory, [directory.parent])
        directories.append(directory)
    report = GroupPass(db, mode="auto", projections=projections).run(
        [book_name(n) for n in range(count)]
    )
    assert sorted(report.passed) == sorted(book_name(n) for n in range(count))
    return directories


def cursors(sql: psycopg.Connection[Any]) -> dict[str, int]:
    rows = sql.execute("SELECT book_id, last_seq FROM attempts").fetchall()
    return {str(book_id): int(last_seq) for book_id, last_seq in rows}


def test_a_group_applies_every_books_news_in_one_transaction(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[Any]
) -> None:
    books = make_books(db, make_book)
    for seq, book in enumerate(books, 3):
        append(book, unit_done(3, f"u-{seq}", 3), spend(4, 100 + seq))
    report = GroupPass(db, mode="auto").run([book.name for book in books])
    assert report.commits == 1
    assert report.busy == report.alone == []
    assert {book_id: r.lines_applied for book_id, r in report.passed.items()} == {
        book.name: 2 for book in books
    }
    assert cursors(sql) == {book.name: 4 for book in books}
    money = dict(sql.execute("SELECT book_id, committed_micro_usd FROM runs").fetchall())
    assert money == {book.name: 100 + seq for seq, book in enumerate(books, 3)}
    hashes = sql.execute("SELECT count(*), count(DISTINCT (attempt_id, seq)) FROM line_hashes")
    assert hashes.fetchone() == (4 * len(books), 4 * len(books))


def test_a_projection_raising_for_one_book_leaves_the_others_applied_by_groups(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[Any]
) -> None:
    """The group is rolled back and split down to the failing book, which alone gets a pass of
    its own; there its failure is recorded on its stream, as without groups."""
    projection = FailingFor()
    books = make_books(db, make_book, projections=[projection])
    for book in books:
        append(book, unit_done(3, "u-3", 3))
    failing = books[5].name
    projection.fail_books = {failing}
    report = GroupPass(db, mode="auto", projections=[projection]).run([book.name for book in books])
    assert report.alone == [failing]
    assert sorted(report.passed) == sorted(book.name for book in books if book.name != failing)
    assert report.splits <= 2 * BOOKS.bit_length()
    assert cursors(sql)[failing] == 2
    assert all(seq == 3 for book_id, seq in cursors(sql).items() if book_id != failing)
    with pytest.raises(ProjectionFailed):
        BookPass(db, failing, mode="auto", projections=[projection]).run()
    failures = sql.execute("SELECT book_id FROM projection_failures").fetchall()
    assert failures == [(failing,)]


def test_a_value_postgres_refuses_for_one_book_leaves_the_others_applied(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[Any]
) -> None:
    books = make_books(db, make_book)
    refuse_poison_units(sql)
    poisoned = books[2].name
    for book in books:
        append(book, unit_done(3, POISON_UNIT if book.name == poisoned else "u-3", 3))
    report = GroupPass(db, mode="auto").run([book.name for book in books])
    assert report.alone == [poisoned]
    assert cursors(sql)[poisoned] == 2
    assert all(seq == 3 for book_id, seq in cursors(sql).items() if book_id != poisoned)
    BookPass(db, poisoned, mode="auto").run()  # its own pass quarantines the stream
    state = sql.execute("SELECT state, error_kind FROM attempts WHERE book_id = %s", (poisoned,))
    assert state.fetchone() == ("quarantined", "database_refused")


def test_a_malformed_line_quarantines_its_stream_inside_the_group(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[Any]
) -> None:
    books = make_books(db, make_book)
    for book in books:
        append(book, b'{"seq":3,"type":"unit_done"\n' if book == books[1] else unit_done(3, "u", 3))
    report = GroupPass(db, mode="auto").run([book.name for book in books])
    assert report.commits == 1 and report.alone == []
    assert [problem.kind for problem in report.passed[books[1].name].problems] == ["malformed"]
    state = sql.execute("SELECT state FROM attempts WHERE book_id = %s", (books[1].name,))
    assert state.fetchone() == ("quarantined",)
    assert all(seq == 3 for book_id, seq in cursors(sql).items() if book_id != books[1].name)


@pytest.mark.parametrize(
    "held",
    [
        "SELECT 1 FROM attempts WHERE book_id = %s FOR UPDATE",
        "SELECT 1 FROM runs WHERE book_id = %s FOR UPDATE",
        "SELECT 1 FROM books WHERE book_id = %s FOR UPDATE",
        "SELECT pg_advisory_lock(%s)",
    ],
    ids=["attempt row", "run row", "book row", "advisory lock"],
)
def test_a_book_whose_rows_another_transaction_holds_is_left_out_without_a_wait(
    db: Database, make_book: MakeBook, fresh_dsn: str, held: str
) -> None:
    """An operator's remedy holding a row of one book (or another pass its lock): that book is
    busy, tried again shortly; the group commits the others at once, never waiting for the lock
    (its lock timeout is 5 s; a wait would show as a timeout and every book passed alone)."""
    books = make_books(db, make_book)
    for book in books:
        append(book, spend(3, 50))  # moves the cursor, the run and the scan hint
    held_book = books[3].name
    key: object = book_lock_key(held_book) if "advisory" in held else held_book
    with psycopg.connect(fresh_dsn) as other:  # a transaction, open until the block ends
        other.execute(held, (key,))
        started = time.monotonic()
        report = GroupPass(db, mode="auto").run([book.name for book in books])
        took_s = time.monotonic() - started
        with psycopg.connect(fresh_dsn, autocommit=True) as sql:
            seen = cursors(sql)
    assert report.busy == [held_book], took_s
    assert report.alone == [] and report.commits == 1
    assert seen[held_book] == 2
    assert all(seq == 3 for book_id, seq in seen.items() if book_id != held_book)


def test_a_book_with_long_news_gets_a_pass_of_its_own(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[Any]
) -> None:
    books = make_books(db, make_book)
    long = books[0]
    append(long, *[unit_done(seq, f"u-{seq}", seq) for seq in range(3, 400)])
    for book in books[1:]:
        append(book, unit_done(3, "u-3", 3))
    report = GroupPass(db, mode="auto", news_bytes_max=4096).run([book.name for book in books])
    assert report.alone == [long.name]
    assert cursors(sql)[long.name] == 2


@pytest.mark.parametrize("passes", ["a group", "a pass a book"])
def test_a_pass_leaves_nothing_for_the_cycle_collector(
    db: Database, make_book: MakeBook, passes: str
) -> None:
    """What a pass makes is freed when it ends, by reference counts: no cycle among its objects.
    Cycles made every pass's objects garbage only the collector frees, and its collections took
    about a tenth of a line's CPU in groups of 500 books (docs/performance.md)."""
    books = make_books(db, make_book, 4)
    for book in books:
        append(book, unit_done(3, "u-3", 1))
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        if passes == "a group":
            report = GroupPass(db, mode="auto").run([book.name for book in books])
            assert all(one.lines_applied == 1 for one in report.passed.values())
        else:
            for book in books:
                assert BookPass(db, book.name, mode="auto").run().lines_applied == 1
        gc.collect()
        left = [type(found) for found in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    ours = sorted({kind.__qualname__ for kind in left if kind.__module__.startswith("platform_")})
    assert ours == []


def test_projections_see_each_line_once_in_file_order_per_book(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[Any]
) -> None:
    projection = Recording()
    books = make_books(db, make_book, count=3, projections=[projection])
    projection.calls.clear()
    group = GroupPass(db, mode="auto", projections=[projection])
    for round_ in range(3, 6):
        for book in books:
            append(book, unit_done(round_, f"u-{round_}", round_))
        group.run([book.name for book in books])
    seen: dict[str, list[int]] = {}
    for call in projection.calls:
        for event in call:
            seen.setdefault(event.book_id, []).append(event.seq)
    assert seen == {book.name: [3, 4, 5] for book in books}


# --- crashes and Postgres away, wherever they land ------------------------------------------------

CHILD = """
import os, signal, sys
from platform_ingest import Database
from platform_ingest.ingest.group_pass import GroupPass
from platform_ingest.ingest.projection_step import install
from platform_ingest.store.db import set_statement_hook

dsn, point, books = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
if point.endswith("_copy"):
    # The rows go by COPY, as a group's many rows do, not with the group's other writes.
    from platform_ingest.ingest import group_commit
    group_commit.ROWS_SENT_WITH_WRITES_MAX = 0

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def hook(stage):
    if stage == point:
        die()

def statement(statement):
    if statement.name == point:
        die()

set_statement_hook(statement)
GroupPass(Database(dsn), mode="auto", commit_hook=hook).run(books)
print("committed", flush=True)
if point == "after":
    die()
"""
KILL_POINTS = [
    "before",
    "locked",
    "attempts_lock_skip",
    "line_hashes_copy",
    "units_copy",
    "line_hashes_insert",
    "units_insert",
    "attempts_advance",
    "changes_notify",
    "commit",
    "after",
]


def journal_lines(book: Path, seqs: int) -> list[bytes]:
    name = book.name
    lines = [hello(stream_of(name), book=name), unit_done(2, "u-2", 2)]  # as `make_books` has
    for seq in range(3, seqs + 1):
        lines.append(unit_done(seq, f"u-{seq}", seq) if seq % 2 else spend(seq, 7 * seq))
    return lines


def check_exactly_once(sql: psycopg.Connection[Any], books: list[Path], seqs: int) -> None:
    """Each book's run: every unit once, the greatest spend, one hash per line, its cursor at the
    end, each hash the sha256 of the journal's line at its seq."""
    for book in books:
        row = sql.execute(
            "SELECT a.last_seq, r.committed_micro_usd, a.attempt_id FROM attempts a"
            " JOIN runs r USING (run_id) WHERE a.book_id = %s",
            (book.name,),
        ).fetchone()
        assert row is not None
        last_seq, money, attempt_id = row
        assert last_seq == seqs
        assert money == 7 * max(seq for seq in range(3, seqs + 1) if seq % 2 == 0)
        units = sql.execute(
            "SELECT unit FROM run_units u JOIN runs r USING (run_id) WHERE r.book_id = %s"
            " ORDER BY unit",
            (book.name,),
        ).fetchall()
        assert [unit for (unit,) in units] == sorted(
            ["u-2", *(f"u-{s}" for s in range(3, seqs + 1, 2))]
        )
        hashes = dict(
            sql.execute(
                "SELECT seq, sha256 FROM line_hashes WHERE attempt_id = %s", (attempt_id,)
            ).fetchall()
        )
        expected = {
            seq: hashlib.sha256(line).digest()
            for seq, line in enumerate(journal_lines(book, seqs), 1)
        }
        assert {seq: bytes(value) for seq, value in hashes.items()} == expected


def hold_commit(sql: psycopg.Connection[Any]) -> None:
    """A deferred trigger that sleeps at the commit of any transaction that moves a cursor: the
    commit is in flight long enough for the test to kill the client inside it."""
    sql.execute(
        "CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " PERFORM pg_sleep(1.5); RETURN NULL; END $$"
    )
    sql.execute(
        "CREATE CONSTRAINT TRIGGER hold_commit AFTER UPDATE ON attempts DEFERRABLE"
        " INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.last_seq > 2) EXECUTE FUNCTION hold_commit()"
    )


@pytest.mark.crash
@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_group_killed_anywhere_loses_nothing_and_doubles_nothing(
    db: Database, make_book: MakeBook, fresh_dsn: str, sql: psycopg.Connection[Any], point: str
) -> None:
    """SIGKILL of the process running a group: before its transaction, with its locks taken,
    inside each of its writes, inside its commit (the server finishes a commit it received),
    and after it. The next group applies what was not committed, each line once."""
    books = make_books(db, make_book, count=6)
    for book in books:
        write(book, *journal_lines(book, 9))
    if point == "commit":
        hold_commit(sql)
    names = ",".join(book.name for book in books)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, fresh_dsn, point, names],
        stdout=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    if point == "commit":
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            waiting = sql.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
                " AND pid <> pg_backend_pid()"
            ).fetchone()
            if waiting is not None and waiting[0]:
                break
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=60) == -signal.SIGKILL
    if point == "commit":
        time.sleep(2.0)  # the server finishes the commit it received
        sql.execute("DROP TRIGGER hold_commit ON attempts")
    report = GroupPass(db, mode="auto").run([book.name for book in books])
    assert report.alone == [] and report.busy == []
    check_exactly_once(sql, books, 9)


def test_postgres_stopped_mid_group_loses_nothing_and_doubles_nothing(
    own_server: Any, make_book: MakeBook
) -> None:
    """Postgres stopped (fast shutdown) while a group writes: the group raises that Postgres is
    away, nothing of it is committed, and the next group after the restart applies every line
    once."""
    dsn: str = own_server.get_uri()
    db = Database(dsn, DatabaseSettings(reconnect_attempts_max=1))
    migrate(db)
    books = make_books(db, make_book, count=5)
    for book in books:
        write(book, *journal_lines(book, 7))
    socket_dir = own_server.get_postmaster_info().socket_dir
    stopped = threading.Event()

    def stop_server(statement: Statement) -> None:
        if statement.name == "attempts_advance" and not stopped.is_set():
            stopped.set()
            pg_ctl(own_server, "-w", "-m", "fast", "stop")

    set_statement_hook(stop_server)
    try:
        with pytest.raises(DatabaseUnavailable):
            GroupPass(db, mode="auto").run([book.name for book in books])
    finally:
        set_statement_hook(None)
    assert stopped.is_set()
    start_again(own_server, socket_dir)
    db.close()
    report = GroupPass(db, mode="auto").run([book.name for book in books])
    assert report.alone == []
    with psycopg.connect(dsn, autocommit=True) as sql:
        check_exactly_once(sql, books, 7)
    db.close()


@pytest.mark.parametrize(
    "where", ["attempts_lock_skip", "line_hashes_copy", "line_hashes_insert", "changes_notify"]
)
def test_a_session_cut_off_mid_group_loses_nothing_and_doubles_nothing(
    db: Database,
    make_book: MakeBook,
    sql: psycopg.Connection[Any],
    where: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The group's session ended by the server while the group writes (what a cut network ends
    in): the group raises that Postgres is away, and the next group applies every line once."""
    if where.endswith("_copy"):
        monkeypatch.setattr(group_commit, "ROWS_SENT_WITH_WRITES_MAX", 0)
    books = make_books(db, make_book, count=5)
    for book in books:
        write(book, *journal_lines(book, 7))
    cut = threading.Event()

    def end_session(statement: Statement) -> None:
        if statement.name == where and not cut.is_set():
            cut.set()
            sql.execute("SELECT pg_terminate_backend(%s)", (db.backend_pid,))

    set_statement_hook(end_session)
    try:
        with pytest.raises(DatabaseUnavailable):
            GroupPass(db, mode="auto").run([book.name for book in books])
    finally:
        set_statement_hook(None)
    assert cut.is_set()
    db.close()
    report = GroupPass(db, mode="auto").run([book.name for book in books])
    assert report.alone == [] and report.busy == []
    check_exactly_once(sql, books, 7)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    news=st.lists(
        st.lists(st.sampled_from(["unit", "spend", "again", "garbage", "gap"]), max_size=4),
        min_size=2,
        max_size=6,
    )
)
def test_a_group_decides_what_each_books_own_pass_decides(
    pg_admin_dsn: str, pg_template: str, tmp_path_factory: pytest.TempPathFactory, news: Any
) -> None:
    """Any news on any books (new lines, duplicates, garbage, gaps), passed by a group on one
    database and book by book on another: the same cursors, states, problems, money and units."""
    results = []
    for grouped in (True, False):
        name = f"group_twin_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
        info = psycopg.conninfo.conninfo_to_dict(pg_admin_dsn)
        info["dbname"] = name
        dsn = psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v})
        root = tmp_path_factory.mktemp("twin")
        db = Database(dsn)
        try:
            names = []
            for number, lines in enumerate(news):
                book = root / book_name(number)
                book.mkdir()
                journal = [hello(stream_of(book.name), book=book.name)]
                seq = 1
                for kind in lines:
                    if kind == "unit":
                        seq += 1
                        journal.append(unit_done(seq, f"u-{seq}", seq))
                    elif kind == "spend":
                        seq += 1
                        journal.append(spend(seq, 3 * seq))
                    elif kind == "again":
                        journal.append(journal[-1])
                    elif kind == "garbage":
                        journal.append(b"{not json\n")
                    else:
                        seq += 2
                        journal.append(unit_done(seq, f"u-{seq}", seq))
                write(book, *journal)
                register_book(db, book, [root])
                names.append(book.name)
            if grouped:
                report = GroupPass(db, mode="auto").run(names)
                for alone in report.alone:
                    BookPass(db, alone, mode="auto").run()
            else:
                for book_id in names:
                    BookPass(db, book_id, mode="auto").run()
            with psycopg.connect(dsn, autocommit=True) as sql:
                results.append(
                    (
                        sql.execute(
                            "SELECT book_id, state, last_seq, error_kind, error_seq, error_offset,"
                            " hint_offset FROM attempts ORDER BY book_id"
                        ).fetchall(),
                        sql.execute(
                            "SELECT book_id, state, committed_micro_usd, progress FROM runs"
                            " ORDER BY book_id"
                        ).fetchall(),
                        sql.execute(
                            "SELECT r.book_id, u.unit FROM run_units u JOIN runs r USING (run_id)"
                            " ORDER BY 1, 2"
                        ).fetchall(),
                        sql.execute(
                            "SELECT book_id, scan_offset, error_kind, error_seq FROM books"
                            " ORDER BY book_id"
                        ).fetchall(),
                    )
                )
        finally:
            db.close()
            with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    assert results[0] == results[1]

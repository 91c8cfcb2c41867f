"""Hostile or unlucky books: each is its own problem, shown by `show`, and never another book's.

A value Postgres cannot store, a FIFO or a device at the journal's path, a book directory swapped
for a symlink, a directory name that is not UTF-8, lines after `finished`, a second directory of a
book's name, a repair over a stream Postgres has not seen: each has a regression test here that
fails without its fix. The classes are fuzzed in tests/seam/test_fuzz_pass.py.
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from platform_ingest import Database, DatabaseUnavailable
from platform_ingest.cli.main import main
from platform_ingest.errors import (
    BookPathConflict,
    DataRefused,
    JournalNotRegular,
    JournalOutsideRoots,
    NotUtf8Path,
    StreamNotSeen,
)
from platform_ingest.ingest.book_pass import BookPass
from platform_ingest.ingest.books import register_book
from platform_ingest.operate.naming import name_stream
from platform_ingest.operate.repair import repair_book
from platform_ingest.operate.show import show_state
from platform_ingest.store import statements as _sql
from platform_ingest.store.db import classify, unavailable_reason
from platform_journals import (
    RUN_A,
    RUN_B,
    attempts,
    ceiling,
    finished,
    hello,
    only_run,
    refuse_poison_units,
    spend,
    sweep,
    unit_done,
    write,
)

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]


def _show(db: Database, book: Path) -> dict[str, Any]:
    """The book's entry of `show --json`, found by its id (its directory may have been swapped)."""
    (found,) = [shown for shown in show_state(db)["books"] if shown["book_id"] == book.name]
    return found


def _pass(db: Database, book_id: str = "book-1") -> int:
    """A pass over a registered book, as the worker makes it (registered once, not again)."""
    return BookPass(db, book_id, mode="auto").run().lines_applied


def _problem_kinds(db: Database, book: Path) -> list[str]:
    return [problem["kind"] for problem in _show(db, book)["problems"]]


# --- Postgres errors are classified by SQLSTATE class -----------------------------------------


def _incompressible(chars: int) -> str:
    """Text that Postgres cannot compress below its index row limit (about 2.7 KB)."""
    digests = (hashlib.sha256(str(n).encode()).hexdigest() for n in range(chars // 64 + 1))
    return "".join(digests)[:chars]


def test_an_index_row_too_large_is_the_books_problem_not_postgres_away(db: Database) -> None:
    """54000 (program_limit_exceeded) comes as an OperationalError, like a lost connection; it is
    `DataRefused`, and the connection stays usable."""
    with pytest.raises(DataRefused) as caught:
        db.execute(_sql.BOOKS_INSERT, (["book-big"], ["/books/" + _incompressible(20_000)]))
    assert caught.value.sqlstate == "54000"
    assert db.fetch_one(_sql.BOOK_SELECT, ("book-big",)) is None  # still connected


@pytest.mark.parametrize(
    "value", ["nul\x00inside", "lone \udc80 surrogate"], ids=["nul", "surrogate"]
)
def test_a_value_the_client_cannot_send_is_refused_data(db: Database, value: str) -> None:
    with pytest.raises(DataRefused):
        db.execute(_sql.BOOKS_INSERT, ([value], ["/books/ok"]))
    assert db.fetch_one(_sql.BOOK_SELECT, ("x",)) is None


@pytest.mark.parametrize(
    ("sqlstate", "expected"),
    [
        ("22001", "DataRefused"),
        ("22P05", "DataRefused"),
        ("23514", "DataRefused"),
        ("54000", "DataRefused"),
        ("57014", "DatabaseTimeout"),
        ("55P03", "DatabaseTimeout"),
        ("40P01", "DatabaseTimeout"),
        ("08006", "DatabaseUnavailable"),
        ("57P01", "DatabaseUnavailable"),
        ("53100", "DatabaseRefusesWrites"),
        ("53300", "DatabaseUnavailable"),
        ("25006", "DatabaseRefusesWrites"),
        ("25001", "DatabaseError"),
        ("42P01", "DatabaseError"),
        ("P0001", "DatabaseError"),
    ],
)
def test_classification_follows_the_sqlstate_class(
    sql: psycopg.Connection[tuple[object, ...]], sqlstate: str, expected: str
) -> None:
    """Raised for real by the server, classified by the SQLSTATE it carries."""
    with pytest.raises(psycopg.Error) as caught:
        sql.execute(f"DO $$ BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = '{sqlstate}'; END $$")
    assert caught.value.sqlstate == sqlstate
    assert classify(caught.value).__name__ == expected


@pytest.mark.parametrize(
    ("sqlstate", "reason"),
    [
        ("53100", "disk_full"),
        ("25006", "read_only"),
        ("53300", "too_many_connections"),
        ("53400", "insufficient_resources"),
        ("08006", "unreachable"),
        (None, "unreachable"),
        ("57P01", "shutting_down"),
        ("57P03", "starting_up"),
        ("57014", "timeout"),
        ("58030", "system_error"),
        ("XX000", "error"),
    ],
)
def test_why_postgres_is_away_is_named_by_the_sqlstate(sqlstate: str | None, reason: str) -> None:
    """The worker's `database_down_reason` label and log field: by the code, else its class; no
    SQLSTATE is a connection the client lost or could not make."""
    error = DatabaseUnavailable("away")
    error.sqlstate = sqlstate
    assert unavailable_reason(error) == reason


def test_a_line_postgres_refuses_quarantines_its_stream_only(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[tuple[object, ...]]
) -> None:
    """The pass finds the one line Postgres refused (one line a transaction), quarantines its
    stream with the line's seq and offset, applies every line before it, and the next book goes
    on. Before, the worker read 54000 as "Postgres away" and reconnected in a loop."""
    refuse_poison_units(sql)
    bad = make_book("book-1")
    lines = [hello(), unit_done(2, "u-1", 0), spend(3, 40), unit_done(4, "poison", 1), spend(5, 90)]
    write(bad, *lines)
    report = sweep(db, bad)
    assert report.restarts >= 1
    attempt = attempts(db, bad)[RUN_A]
    assert attempt["state"] == "quarantined"
    assert attempt["last_seq"] == 3
    offset = sum(len(line) for line in lines[:3])
    assert attempt["error"]["kind"] == "database_refused"
    assert (attempt["error"]["seq"], attempt["error"]["offset"]) == (4, offset)
    assert "SQLSTATE 54000" in attempt["error"]["detail"]
    run = only_run(db, bad)
    assert run["units"] == ["u-1"]
    assert run["committed_micro_usd"] == 40
    good = make_book("book-2")
    write(good, hello(book="book-2"), unit_done(2, "u-1", 0))
    assert sweep(db, good).lines_applied == 2
    assert sweep(db, bad).lines_applied == 0  # quarantined: nothing more, no error


# --- the journal's path holds something else than a regular file ------------------------------


def _make_special(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink_to_device":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        if os.geteuid() != 0:
            path.symlink_to("/dev/null")  # the same refusal (a symlink), without privileges
        else:
            os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers
    elif kind == "socket":
        # Bound through the directory's descriptor: a socket's path has at most 107 bytes, and a
        # test's temporary directory (under a pytest-xdist worker's, say) may be longer.
        directory = os.open(path.parent, os.O_PATH)
        listener = socket.socket(socket.AF_UNIX)
        try:
            listener.bind(f"/proc/self/fd/{directory}/{path.name}")
        finally:
            listener.close()  # the socket file stays
            os.close(directory)
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "symlink_to_device", "directory"])
def test_a_journal_that_is_not_a_regular_file_is_a_shown_problem_and_never_read(
    db: Database, make_book: MakeBook, kind: str
) -> None:
    """Before, a FIFO hung the pass (and the worker ignored SIGTERM); a device was read forever."""
    book = make_book("book-1")
    _make_special(kind, book / "events.jsonl")
    register_book(db, book)
    started = time.monotonic()
    with pytest.raises(JournalNotRegular):
        _pass(db)
    assert time.monotonic() - started < 10
    assert _problem_kinds(db, book) == ["journal_not_regular"]
    assert _show(db, book)["lag"]["bytes"] == 0
    path = book / "events.jsonl"
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    else:
        path.unlink()
    write(book, hello(), spend(2, 5))
    assert sweep(db, book).lines_applied == 2
    assert _problem_kinds(db, book) == []


def test_a_book_directory_swapped_for_a_symlink_is_refused(
    db: Database, tmp_path: Path, make_book: MakeBook
) -> None:
    """Registered as a real directory, then swapped for a symlink to a directory outside the
    roots: the pass refuses it and reads nothing of the outside journal."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 5))
    assert sweep(db, book).lines_applied == 2
    outside = tmp_path / "outside" / "book-1"
    outside.mkdir(parents=True)
    write(outside, hello(RUN_B), spend(2, 10_000_000))
    moved = book.with_name("book-1.old")
    book.rename(moved)
    book.symlink_to(outside)
    with pytest.raises(JournalOutsideRoots):
        _pass(db)
    assert _problem_kinds(db, book) == ["journal_outside_roots"]
    (run,) = _show(db, book)["runs"]
    assert [attempt["engine_run_id"] for attempt in run["attempts"]] == [RUN_A]
    assert run["committed_micro_usd"] == 5
    book.unlink()
    moved.rename(book)
    sweep(db, book)
    assert _problem_kinds(db, book) == []


def test_a_journal_that_is_a_symlink_is_refused_at_each_pass(
    db: Database, tmp_path: Path, make_book: MakeBook
) -> None:
    """A journal swapped for a symlink after registration is not followed."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 5))
    sweep(db, book)
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_bytes(hello() + spend(2, 5) + spend(3, 9_000_000))
    (book / "events.jsonl").unlink()
    (book / "events.jsonl").symlink_to(elsewhere)
    with pytest.raises(JournalNotRegular, match="symbolic link"):
        _pass(db)
    assert only_run(db, book)["committed_micro_usd"] == 5


# --- directory names that are not UTF-8 ---------------------------------------------------------


def test_a_directory_name_that_is_not_utf8_is_a_clear_error(
    fresh_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, registration crashed with a UnicodeEncodeError traceback."""
    root = tmp_path / "root"
    root.mkdir()
    raw = os.fsencode(root) + b"/book-\xff\xfe"
    os.mkdir(raw)
    with open(raw + b"/events.jsonl", "wb") as file:
        file.write(hello())
    book_dir = os.fsdecode(raw)
    database = Database(fresh_dsn)
    try:
        with pytest.raises(NotUtf8Path, match="not UTF-8"):
            register_book(database, book_dir)
    finally:
        database.close()
    for command in (
        ["sweep", "--auto", book_dir],
        ["show", book_dir],
        ["name", book_dir, RUN_A],
        ["release", book_dir, RUN_A],
    ):
        code = main(["--dsn", fresh_dsn, *command])
        captured = capsys.readouterr()
        assert code == 2, command
        assert "not UTF-8" in captured.err
        assert "Traceback" not in captured.err


# --- lines after finished ----------------------------------------------------------------------


def test_lines_after_finished_quarantine_the_stream_and_leave_the_run_completed(
    db: Database, make_book: MakeBook
) -> None:
    """Before, a ceiling and a spend after finished turned a completed run into a paused one
    with new money."""
    book = make_book("book-1")
    lines = [hello(), spend(2, 100), finished(3, money=100), ceiling(4), spend(5, 900)]
    write(book, *lines)
    sweep(db, book)
    attempt = attempts(db, book)[RUN_A]
    assert attempt["state"] == "quarantined"
    assert attempt["last_seq"] == 3
    assert attempt["error"]["kind"] == "malformed"
    assert (attempt["error"]["seq"], attempt["error"]["offset"]) == (
        4,
        sum(len(line) for line in lines[:3]),
    )
    run = only_run(db, book)
    assert (run["state"], run["committed_micro_usd"], run["reason"]) == ("completed", 100, None)


def test_a_seq_after_finished_past_a_hole_is_malformed_not_a_gap(
    db: Database, make_book: MakeBook
) -> None:
    """As `verify` says: nothing may follow a finished, so a later seq is malformed, not a gap."""
    book = make_book("book-1")
    write(book, hello(), finished(2), spend(7, 900))
    sweep(db, book)
    attempt = attempts(db, book)[RUN_A]
    assert (attempt["state"], attempt["error"]["kind"], attempt["error"]["seq"]) == (
        "quarantined",
        "malformed",
        7,
    )


def test_a_repeat_of_finished_is_still_a_duplicate(db: Database, make_book: MakeBook) -> None:
    book = make_book("book-1")
    write(book, hello(), finished(2), finished(2))
    report = sweep(db, book)
    assert report.duplicates == 1
    assert attempts(db, book)[RUN_A]["state"] == "finished"


# --- repair settles only the run of the stream it names ----------------------------------------


def _status_command(tmp_path: Path, status: dict[str, Any]) -> str:
    """A status command that prints `status` (the engine's repair channel, as a stand-in
    process: what is tested is what the platform does with the answer)."""
    script = tmp_path / "status.py"
    script.write_text(f"import json\nprint(json.dumps({status!r}))\n")
    return f"{sys.executable} {script}"


def _status(engine_run_id: str, money: int, finished_line: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "book_id": "book-1",
        "engine_run_id": engine_run_id,
        "streams": [{"engine_run_id": engine_run_id, "last_seq": 3, "projected_seq": 3}],
        "journal": "ok",
        "progress": {},
        "money": {"committed_micro_usd": money},
        "ceiling": None,
        "finished": finished_line,
    }


def test_repair_refuses_a_stream_postgres_has_not_seen(
    db: Database, make_book: MakeBook, tmp_path: Path
) -> None:
    """Before, repair fell back to the book's current run: it rewrote a completed run to
    failed/no_finished and settled the next run's money on it."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 100), finished(3, money=100))
    sweep(db, book)
    command = _status_command(tmp_path, _status(RUN_B, 700, None))
    with pytest.raises(StreamNotSeen, match="sweep"):
        repair_book(db, str(book), status_command=command)
    run = only_run(db, book)
    assert (run["state"], run["settled_micro_usd"]) == ("completed", None)


def test_repair_never_rewrites_a_completed_run(
    db: Database, make_book: MakeBook, tmp_path: Path
) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 100), finished(3, money=100))
    sweep(db, book)
    command = _status_command(tmp_path, _status(RUN_A, 100, None))
    repaired = repair_book(db, str(book), status_command=command)
    assert (repaired.changed, repaired.state) == (False, "completed")
    run = only_run(db, book)
    assert (run["state"], run["reason"], run["settled_micro_usd"]) == ("completed", None, 100)


# --- a second directory of a book's name ---------------------------------------------------------


def test_a_same_named_book_under_two_roots_shows_the_conflict(db: Database, tmp_path: Path) -> None:
    first = tmp_path / "root-a" / "book-1"
    second = tmp_path / "root-b" / "book-1"
    for book in (first, second):
        book.mkdir(parents=True)
        write(book, hello(), spend(2, 5))
    register_book(db, first)
    with pytest.raises(BookPathConflict, match="already registered") as refused:
        register_book(db, second)
    assert (refused.value.path, refused.value.registered_path) == (str(second), str(first))
    (problem,) = _show(db, first)["problems"]
    assert problem["kind"] == "book_path_conflict"
    assert str(second) in problem["detail"] and str(first) in problem["detail"]
    for path in sorted(second.iterdir()):
        path.unlink()
    second.rmdir()
    sweep(db, first)
    assert _problem_kinds(db, first) == []


# --- show: stream order in named mode, each run's own spend --------------------------------------


def test_named_streams_are_shown_in_file_order_and_a_late_name_supersedes_nothing(
    db: Database, make_book: MakeBook
) -> None:
    """B is named (and seen) first, A later, though A's hello comes first in the file. Before,
    A took the later place, superseded the live B and drove the run."""
    book = make_book("book-1")
    name_stream(db, str(book), RUN_B)
    write(book, hello(RUN_A), spend(2, 10), finished(3, money=10), hello(RUN_B), spend(2, 30))
    sweep(db, book, auto=False)
    name_stream(db, str(book), RUN_A)
    sweep(db, book, auto=False)
    run = only_run(db, book)
    assert [attempt["engine_run_id"] for attempt in run["attempts"]] == [RUN_A, RUN_B]
    assert [attempt["state"] for attempt in run["attempts"]] == ["finished", "active"]
    assert run["state"] == "running"


def test_spent_per_run_sums_to_the_books_ledger(db: Database, make_book: MakeBook) -> None:
    """The ledger is the book's, cumulative across runs: seven relaunches of a finished book
    carried seven times the book's spend in `committed_micro_usd`."""
    book = make_book("book-1")
    runs = [str(n) * 8 + "-0000-4000-8000-000000000000" for n in range(1, 4)]
    journal: list[bytes] = []
    for index, run in enumerate(runs):
        ledger = 100 * (index + 1) ** 2
        journal += [hello(run), spend(2, ledger), finished(3, money=ledger)]
    write(book, *journal)
    sweep(db, book)
    shown = _show(db, book)["runs"]
    assert [run["committed_micro_usd"] for run in shown] == [100, 400, 900]
    assert [run["spent_micro_usd"] for run in shown] == [100, 300, 500]
    assert sum(run["spent_micro_usd"] for run in shown) == 900


def test_the_text_view_prints_no_control_character(
    fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    book = make_book("book-\x1b[2J")
    write(book, hello(book="book-\x1b[2J", run="r-\x1b]0;owned\x07-\u202e"), spend(2, 5))
    assert main(["--dsn", fresh_dsn, "sweep", "--auto", str(book)]) == 0
    assert main(["--dsn", fresh_dsn, "show"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "\\x1b" in out

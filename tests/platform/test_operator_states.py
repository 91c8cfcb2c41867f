"""States an operator can end, and figures that say what is true: a line of no stream ended by a
pass that reads clean or by `release BOOK_DIR`, the lag of a quarantine on a fully applied stream,
a root refused as a book and a book registered by mistake forgotten, the remedies' JSON, and the
text of `show` (no Python `None`, one money convention, a filter that matches nothing)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from platform_ingest import ConfigError, Database, NotFound
from platform_ingest.cli.main import main
from platform_ingest.operate.forget import forget_book
from platform_ingest.operate.naming import release_book_error
from platform_ingest.operate.show import show_state
from platform_journals import (
    RUN_A,
    RUN_B,
    append,
    book_state,
    finished,
    hello,
    log_entries,
    serves_metrics,
    spend,
    start_worker,
    stop_worker,
    sweep,
    unit_done,
    wait_for,
    worker_metrics,
    write,
)

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]
GARBAGE = b"this is no JSON\n"
MALFORMED_BOOKS = 'platform_ingest_books_with_problem{kind="malformed"}'


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _finished_stream(book: str = "book-1") -> list[bytes]:
    return [
        hello(book=book),
        unit_done(2, "u-1", 0),
        spend(3, 1_200_000),
        finished(4, 0, "clean", money=1_200_000),
    ]


def _states(db: Database, book: Path) -> list[str]:
    """The states of the book's attempts (none while a worker has not registered it yet)."""
    try:
        state = book_state(db, book)
    except NotFound:
        return []
    return [attempt["state"] for run in state["runs"] for attempt in run["attempts"]]


# --- a line of no stream ------------------------------------------------------------------------


def test_a_garbage_line_after_a_finished_stream_ends_when_the_journal_is_cut_back(
    fresh_dsn: str, tmp_path: Path
) -> None:
    """A line that cannot be read, after a finished stream: the book's own error, shown without
    Python's `None` and never called "before any hello". The journal cut back to the finished
    stream (as `verify` then says, OK): the next pass reads it clean, and `show` and the worker's
    `books_with_problem{kind="malformed"}` both say the problem is over."""
    root = tmp_path / "books"
    book = root / "book-1"
    book.mkdir(parents=True)
    write(book, *_finished_stream())
    clean_size = (book / "events.jsonl").stat().st_size
    log = tmp_path / "worker.log"
    worker = start_worker(fresh_dsn, root, log, "--metrics-port", "0", "--safety-pass-s", "1")
    db = Database(fresh_dsn)
    try:
        wait_for("the port served", lambda: serves_metrics(log))
        wait_for("the stream applied", lambda: _states(db, book) == ["finished"])
        append(book, GARBAGE)
        wait_for("the error recorded", lambda: book_state(db, book)["error"] is not None)
        wait_for("the gauge says so", lambda: worker_metrics(log).get(MALFORMED_BOOKS) == 1)
        error = book_state(db, book)["error"]
        assert (error["kind"], error["seq"], error["offset"]) == ("malformed", None, clean_size)
        warnings = [e["message"] for e in log_entries(log) if e["level"] == "WARNING"]
        (told,) = [m for m in warnings if "malformed" in m]
        assert "None" not in told and "before any hello" not in told, told
        assert f"(a line of no stream): malformed at byte {clean_size}" in told, told

        os.truncate(book / "events.jsonl", clean_size)
        wait_for("the error ended", lambda: book_state(db, book)["error"] is None)
        wait_for("the gauge says so", lambda: worker_metrics(log).get(MALFORMED_BOOKS, 0) == 0)
        assert stop_worker(worker) == 0
    finally:
        db.close()
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)


def test_a_pass_that_reads_over_the_line_clean_ends_the_books_error(
    db: Database, make_book: MakeBook
) -> None:
    """The same line mended in place (now a hello of a new stream): a pass that starts before it
    and meets no line of no stream ends the book's error. A pass that begins past it never does,
    and neither does one that meets the line again."""
    book = make_book("book-1")
    write(book, *_finished_stream())
    sweep(db, book)
    append(book, GARBAGE)
    sweep(db, book)
    assert book_state(db, book)["error"] is not None
    assert sweep(db, book).start_offset > book_state(db, book)["error"]["offset"]
    assert book_state(db, book)["error"] is not None  # a pass past it: not read, not ended
    write(book, *_finished_stream(), GARBAGE, GARBAGE)  # read again from byte 0: still there
    sweep(db, book)
    assert book_state(db, book)["error"] is not None
    write(book, *_finished_stream(), hello(RUN_B), spend(2, 1_300_000))
    report = sweep(db, book)
    assert report.start_offset == 0
    state = book_state(db, book)
    assert state["error"] is None
    assert [a["engine_run_id"] for r in state["runs"] for a in r["attempts"]] == [RUN_A, RUN_B]


def test_release_of_the_book_ends_its_error_audited_while_the_line_stays(
    db: Database, make_book: MakeBook, capsys: pytest.CaptureFixture[str], fresh_dsn: str
) -> None:
    """The line stays in the journal: `release BOOK_DIR` (no stream) ends the book's error, with
    an audit row, printing JSON like every remedy; the next passes go on past the line."""
    book = make_book("book-1")
    write(book, *_finished_stream(), GARBAGE)
    sweep(db, book)
    error = book_state(db, book)["error"]
    assert error is not None
    code, out, err = _cli(
        capsys, "--dsn", fresh_dsn, "release", str(book), "--by", "ops", "--reason", "looked"
    )
    assert code == 0, err
    done = json.loads(out)
    assert (done["engine_run_id"], done["state"], done["error"]) == (None, None, error)
    assert done["action_id"] > 0
    state = book_state(db, book)
    assert state["error"] is None
    (action,) = state["actions"]
    assert (action["action"], action["engine_run_id"], action["by"], action["reason"]) == (
        "release",
        None,
        "ops",
        "looked",
    )
    assert action["evidence"] == {"error": error}
    append(book, hello(RUN_B), spend(2, 1_300_000))
    sweep(db, book)
    assert book_state(db, book)["error"] is None
    with pytest.raises(ConfigError, match="no error of its own"):
        release_book_error(db, str(book))


# --- lag of a quarantine on a fully applied stream ----------------------------------------------


def test_the_lag_of_a_conflict_on_a_fully_applied_stream_counts_from_past_its_last_line(
    db: Database, make_book: MakeBook
) -> None:
    """Every line applied, then the journal replaced by a copy with one line changed (a new file:
    the next pass reads it from byte 0): a `payload_conflict` at seq 5 quarantines the finished
    stream. Every line was applied, so nothing waits: the lag counts from just past its last
    applied line (no line, no byte), and `held_by.offset` is that offset, not 0."""
    book = make_book("book-1")
    lines = [hello(), *(spend(seq, seq * 10) for seq in range(2, 11)), finished(11, 0, "clean")]
    write(book, *lines)
    sweep(db, book)
    end = sum(map(len, lines))
    changed = [*lines[:4], spend(5, 51), *lines[5:]]
    write(book, *changed)
    sweep(db, book)
    state = book_state(db, book)
    attempt = state["runs"][0]["attempts"][0]
    assert (attempt["state"], attempt["error"]["kind"], attempt["last_seq"]) == (
        "quarantined",
        "payload_conflict",
        11,
    )
    lag = state["lag"]
    assert (lag["lines"], lag["bytes"], lag["lines_unread"]) == (0, 0, 0), lag
    assert lag["held_by"] is not None, lag
    assert (lag["held_by"]["kind"], lag["held_by"]["offset"]) == ("quarantined", end), lag
    # A line appended after the quarantined stream's end is held by it, from that offset.
    append(book, GARBAGE)
    lag = book_state(db, book)["lag"]
    assert (lag["lines"], lag["bytes"], lag["held_by"]["offset"]) == (1, len(GARBAGE), end), lag


# --- a root is no book, and a book registered by mistake is forgotten ----------------------------


def test_sweep_refuses_a_root_given_as_a_book(
    fresh_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "books"
    (root / "book-1").mkdir(parents=True)
    write(root / "book-1", *_finished_stream())
    code, _, err = _cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", str(root))
    assert code == 2
    assert "holds book directories (book-1, ...) and no journal of its own" in err, err
    code, out, _ = _cli(capsys, "--dsn", fresh_dsn, "show", "--json")
    assert (code, json.loads(out)) == (0, {"books": []})


def test_a_book_registered_by_mistake_is_forgotten_audited(
    db: Database, fresh_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory registered before the refusal existed (here, by hand): `forget` deletes it,
    its record kept in `forgotten_books` with who, why and what went with it; `show` no longer
    lists it. A book with a run is refused, and so is one nobody registered."""
    root = tmp_path / "books"
    (root / "book-1").mkdir(parents=True)
    write(root / "book-1", *_finished_stream())
    sweep(db, root / "book-1")
    with psycopg.connect(fresh_dsn, autocommit=True) as sql:
        sql.execute("INSERT INTO books (book_id, path) VALUES (%s, %s)", ("books", str(root)))
    code, out, err = _cli(
        capsys, "--dsn", fresh_dsn, "forget", str(root), "--by", "ops", "--reason", "a root"
    )
    assert code == 0, err
    done = json.loads(out)
    assert (done["action"], done["book_id"], done["path"]) == ("forget", "books", str(root))
    assert [book["book_id"] for book in show_state(db)["books"]] == ["book-1"]
    with psycopg.connect(fresh_dsn, autocommit=True) as sql:
        row = sql.execute("SELECT book_id, by_whom, reason FROM forgotten_books").fetchone()
    assert row == ("books", "ops", "a root")
    code, _, err = _cli(capsys, "--dsn", fresh_dsn, "forget", str(root), "--reason", "again")
    assert code == 2 and "neither the registered path nor the id of a book" in err
    with pytest.raises(ConfigError, match="1 runs, 1 attempts"):
        forget_book(db, str(root / "book-1"), reason="not a mistake")
    with pytest.raises(NotFound):
        forget_book(db, "no-such-book", reason="x")
    assert [book["book_id"] for book in show_state(db)["books"]] == ["book-1"]


# --- what the remedies print ------------------------------------------------------------------


def test_release_prints_json_like_the_other_remedies(
    db: Database, make_book: MakeBook, fresh_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, "bad"))
    sweep(db, book)
    code, out, _ = _cli(capsys, "--dsn", fresh_dsn, "release", str(book), RUN_A)
    assert code == 0
    done = json.loads(out)
    assert (done["engine_run_id"], done["state"], done["attempt_state"]) == (
        RUN_A,
        "active",
        "quarantined",
    )
    (action,) = book_state(db, book)["actions"]
    assert action["action_id"] == done["action_id"]


def test_a_look_at_a_line_to_skip_records_nothing_and_says_so(
    db: Database, make_book: MakeBook, fresh_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`skip` without `--sha256` prints the line's hash and what to do, and no action id: no
    audit row was written (an id of 0 would name one)."""
    book = make_book("book-1")
    bad = spend(2, "bad")
    write(book, hello(), bad)
    sweep(db, book)
    code, out, err = _cli(
        capsys, "--dsn", fresh_dsn, "skip", str(book), RUN_A, "2", "--reason", "look"
    )
    assert code == 2
    looked = json.loads(out)
    assert "action_id" not in looked
    assert (looked["recorded"], looked["sha256"]) == (False, hashlib.sha256(bad).hexdigest())
    assert "nothing skipped" in err
    assert book_state(db, book)["actions"] == []


# --- the text of `show` -----------------------------------------------------------------------


def test_show_text_never_shows_none_and_says_money_in_dollars(
    db: Database, make_book: MakeBook, fresh_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A book's own error with no seq, a run with no ledger yet: no Python `None` in the text.
    Money in dollars, as the engine's `watch` shows it; the JSON keeps integer micro-USD."""
    book = make_book("book-1")
    write(book, *_finished_stream(), GARBAGE)
    sweep(db, book)
    other = make_book("book-2")
    write(other, hello(book="book-2"), unit_done(2, "u-1", 0))
    sweep(db, other)
    code, out, _ = _cli(capsys, "--dsn", fresh_dsn, "show")
    assert code == 0
    assert not re.search(r"\bNone\b", out), out
    assert "spent $1.20 (ledger $1.20)" in out, out
    assert "micro-USD" not in out
    assert f"! malformed at byte {sum(map(len, _finished_stream()))}: a line after a" in out, out
    state = show_state(db)
    assert state["books"][0]["runs"][0]["spent_micro_usd"] == 1_200_000


def test_show_says_no_book_matches_when_a_filter_matches_none(
    db: Database, make_book: MakeBook, fresh_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    book = make_book("book-1")
    write(book, *_finished_stream())
    sweep(db, book)
    assert _cli(capsys, "--dsn", fresh_dsn, "show", "--lagging")[1] == "no book matches\n"
    assert _cli(capsys, "--dsn", fresh_dsn, "show", "--problem", "gap")[1] == "no book matches\n"

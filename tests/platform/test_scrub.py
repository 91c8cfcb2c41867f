"""The scrub against a real Postgres: an applied line changed in place (same size, same inode), which
no pass reads again, is found by `platform-ingest scrub` and by a worker's background scrub; a
compacted range by its digest; an untouched journal is clean; and for any byte of any applied line
of a journal of several streams, compacted or not, the scrub finds the change and records it as
the pass would, without moving a cursor or an effect."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platform_ingest import Database
from platform_ingest.cli.main import main
from platform_ingest.cli.storage_commands import scrub_text
from platform_ingest.errors import NotFound
from platform_ingest.ingest.books import book_lock_key, register_book
from platform_ingest.operate.compact import compact_quiet
from platform_ingest.operate.naming import release_attempt
from platform_ingest.operate.scrub import (
    STEP_COST_BYTES_MIN,
    BackgroundScrub,
    BookScrub,
    scrub_book,
)
from platform_journals import (
    RUN_A,
    RUN_B,
    RUN_C,
    attempts,
    finished,
    hello,
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
Sql = psycopg.Connection[tuple[object, ...]]


def _stream(run: str, book: str, lines: int, *, end: bool = True) -> list[bytes]:
    body = [
        spend(seq, 1000 * seq) if seq % 2 else unit_done(seq, f"u{seq}", seq)
        for seq in range(2, lines)
    ]
    last = [finished(lines, money=1000 * lines)] if end else [spend(lines, 1000 * lines)]
    return [hello(run, book), *body, *last]


def _edit_in_place(book: Path, offset: int, byte: int) -> None:
    """Overwrite one byte of the journal where it is: same file, same size."""
    path = book / "events.jsonl"
    before = os.stat(path)
    with open(path, "r+b") as file:
        os.pwrite(file.fileno(), bytes([byte]), offset)
    after = os.stat(path)
    assert (after.st_ino, after.st_size) == (before.st_ino, before.st_size)


def _other_byte(old: int) -> int:
    return ord("7") if old != ord("7") else ord("8")


def _cursors(sql: Sql) -> list[tuple[object, ...]]:
    return sql.execute(
        "SELECT engine_run_id, last_seq, last_line_sha256, hint_offset FROM attempts"
        " ORDER BY engine_run_id"
    ).fetchall()


def _effects(sql: Sql) -> list[tuple[object, ...]]:
    return sql.execute(
        "SELECT run_id, state, committed_micro_usd, (SELECT count(*) FROM run_units u"
        " WHERE u.run_id = runs.run_id) FROM runs ORDER BY run_id"
    ).fetchall()


def _scrub(dsn: str, book: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["--dsn", dsn, "scrub", "--json", str(book)])
    (report,) = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    return code, report


# --- on demand ------------------------------------------------------------------------------------


def test_scrub_finds_an_applied_line_changed_in_place(
    db: Database, fresh_dsn: str, sql: Sql, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """A digit of an applied spend changed where it lies: the pass, reading past its cursor only,
    never sees it; `scrub` finds it, quarantines the stream with `payload_conflict` (both hashes
    as evidence) and exits 6, leaving every cursor and effect as it was."""
    book = make_book("book-1")
    lines = _stream(RUN_A, "book-1", 40)
    write(book, *lines)
    sweep(db, book)
    cursors, effects = _cursors(sql), _effects(sql)
    start = sum(map(len, lines[:6]))  # seq 7, a spend of 7000
    digit = start + lines[6].index(b'"committed_micro_usd":7000') + 22
    _edit_in_place(book, digit, ord("8"))
    assert sweep(db, book).problems == []  # the pass does not read it again
    assert attempts(db, book)[RUN_A]["state"] == "finished"

    code, report = _scrub(fresh_dsn, book, capsys)
    assert code == 6
    assert report["outcome"] == "mismatch"
    (mismatch,) = report["mismatches"]
    edited = (book / "events.jsonl").read_bytes()[start : start + len(lines[6])]
    assert edited == lines[6].replace(b":7000", b":8000")
    assert mismatch == {
        "engine_run_id": RUN_A,
        "kind": "payload_conflict",
        "seq": 7,
        "offset": start,
        "detail": f"seq 7 was applied with sha256 {hashlib.sha256(lines[6]).hexdigest()}; this "
        f"line has sha256 {hashlib.sha256(edited).hexdigest()}",
        "recorded": True,
        "state": "quarantined",
    }
    error = attempts(db, book)[RUN_A]["error"]
    assert (error["kind"], error["seq"], error["offset"]) == (
        "payload_conflict",
        7,
        mismatch["offset"],
    )
    # The cursor and the effects are as the passes left them; only the state changed.
    assert _cursors(sql) == cursors and _effects(sql) == effects
    # A skip of the line as it is now lets the stream go on, finished again, and the scrub is clean.
    assert (
        main(
            [
                "--dsn",
                fresh_dsn,
                "skip",
                str(book),
                RUN_A,
                "7",
                "--reason",
                "checked",
                "--sha256",
                hashlib.sha256(edited).hexdigest(),
            ]
        )
        == 0
    )
    sweep(db, book)
    assert attempts(db, book)[RUN_A]["state"] == "finished"
    assert _scrub(fresh_dsn, book, capsys)[0] == 0


def test_an_untouched_book_of_several_streams_is_clean(
    db: Database, fresh_dsn: str, sql: Sql, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three streams, one compacted, one still live, duplicates written twice by the engine and a
    stream coming back after another's hello: every applied seq compared, exit 0, nothing
    changed."""
    book = make_book("book-1")
    a = _stream(RUN_A, "book-1", 30)
    b = _stream(RUN_B, "book-1", 20)
    c = _stream(RUN_C, "book-1", 25, end=False)
    write(book, *a, *b[:10], b[9], *b[10:])
    sweep(db, book)
    assert compact_quiet(db, quiet_for_s=0).compacted != []
    write(book, *a, *b[:10], b[9], *b[10:], *c[:5], c[0], c[3], *c[5:])
    sweep(db, book)
    cursors, effects = _cursors(sql), _effects(sql)
    code, report = _scrub(fresh_dsn, book, capsys)
    assert (code, report["outcome"], report["mismatches"]) == (0, "clean", [])
    assert report["streams"] == 3
    assert report["compacted_ranges_compared"] >= 1
    assert report["lines_compared"] == 30 + 21 + 27
    assert report["unverified_lines"] == 0
    assert report["bytes_read"] == (book / "events.jsonl").stat().st_size
    assert _cursors(sql) == cursors and _effects(sql) == effects
    capsys.readouterr()
    assert main(["--dsn", fresh_dsn, "scrub", str(book)]) == 0
    assert re.fullmatch(
        r"book book-1: clean: 3 streams, \d+ bytes read, 78 lines compared, \d compacted ranges? "
        r"compared by digest\n",
        capsys.readouterr().out,
    )


@pytest.mark.parametrize("refused", ["not seq 1", "a key after data"])
def test_a_refused_hello_that_names_its_stream_starts_it_for_the_scrub_too(
    db: Database,
    fresh_dsn: str,
    make_book: MakeBook,
    capsys: pytest.CaptureFixture[str],
    refused: str,
) -> None:
    """A hello the decoder refuses but whose stream can be read starts that stream, for the scrub
    as for the pass: its lines are not the finished stream's before it, and nothing of that
    stream is taken for a changed line."""
    book = make_book("book-1")
    b = _stream(RUN_B, "book-1", 5)
    if refused == "not seq 1":
        bad_hello = b[0].replace(b'{"seq":1,', b'{"seq":2,', 1)
    else:
        bad_hello = b[0].replace(b"}}\n", b'},"x":1}\n', 1)
    write(book, *_stream(RUN_A, "book-1", 6), bad_hello, *b[1:])
    sweep(db, book)
    states = {run: attempt["state"] for run, attempt in attempts(db, book).items()}
    assert states == {RUN_A: "finished", RUN_B: "quarantined"}
    code, report = _scrub(fresh_dsn, book, capsys)
    assert (code, report["outcome"], report["mismatches"]) == (0, "clean", [])
    assert attempts(db, book)[RUN_A]["state"] == "finished"


def test_a_compacted_range_changed_in_place_is_found_by_its_digest(
    db: Database, sql: Sql, make_book: MakeBook
) -> None:
    """Its own hashes are gone: the lines, read in order, hash to another digest than the one
    kept, and the stream is quarantined with the compacted range's conflict (not skippable)."""
    book = make_book("book-1")
    lines = _stream(RUN_A, "book-1", 300)
    write(book, *lines)
    sweep(db, book)
    assert compact_quiet(db, quiet_for_s=0).compacted != []
    start = sum(map(len, lines[:150]))
    _edit_in_place(book, start + lines[150].index(b'"time"') + 10, ord("9"))
    book_id = register_book(db, book).book_id
    report = scrub_book(db, book_id)
    assert report.outcome == "mismatch"
    (mismatch,) = report.mismatches
    assert (mismatch.problem.kind, mismatch.problem.seq, mismatch.recorded) == (
        "payload_conflict",
        300,
        True,
    )
    assert mismatch.problem.detail.startswith("seqs 1..300 were compacted to the digest ")
    error = attempts(db, book)[RUN_A]["error"]
    assert error["detail"] == mismatch.problem.detail
    # The remedy of a compacted range's conflict: the journal put back, and `release`.
    write(book, *lines)
    release_attempt(db, str(book), RUN_A, reason="journal restored")
    sweep(db, book)
    assert attempts(db, book)[RUN_A]["state"] == "finished"
    assert scrub_book(db, book_id).outcome == "clean"


def test_a_line_cut_away_is_missing(db: Database, make_book: MakeBook) -> None:
    """An applied line overwritten by blanks of the same length (no seq left to read) and the
    journal's last applied line cut off its newline: each is found, where it was."""
    book = make_book("book-1")
    lines = _stream(RUN_A, "book-1", 12, end=False)
    write(book, *lines)
    sweep(db, book)
    book_id = register_book(db, book).book_id
    start = sum(map(len, lines[:4]))
    for index in range(len(lines[4]) - 1):
        _edit_in_place(book, start + index, ord(" "))
    report = scrub_book(db, book_id)
    (mismatch,) = report.mismatches
    assert (mismatch.problem.seq, mismatch.problem.offset) == (5, start)
    assert scrub_text(report).splitlines()[1] == (
        f"  stream {RUN_A} seq 5, byte {start}: payload_conflict (quarantined): "
        f"{mismatch.problem.detail}"
    )

    write(book, *lines)
    release_attempt(db, str(book), RUN_A, reason="put back")
    sweep(db, book)
    _edit_in_place(book, sum(map(len, lines)) - 1, ord("}"))
    report = scrub_book(db, book_id)
    (mismatch,) = report.mismatches
    assert (mismatch.problem.seq, mismatch.problem.offset) == (12, None)
    assert "no line of seq 12 with those bytes" in mismatch.problem.detail
    assert report.outcome == "mismatch" and scrub_text(report).startswith("book book-1: mismatch:")
    assert (
        scrub_text(report)
        .splitlines()[1]
        .startswith(f"  stream {RUN_A} seq 12: payload_conflict (quarantined): seq 12 was applied")
    )


def test_the_scrub_waits_for_a_pass_and_lets_passes_in_between_its_steps(
    db: Database, fresh_dsn: str, make_book: MakeBook
) -> None:
    """A step takes the book's lock as a pass does: while a pass holds it, no step runs (the
    scrub waits, or reports `busy`); between steps, a pass applies new lines, and the scrub,
    which compares only what was applied when it began, stays clean."""
    book = make_book("book-1")
    lines = _stream(RUN_A, "book-1", 400, end=False)
    write(book, *lines[:300])
    sweep(db, book)
    book_id = register_book(db, book).book_id
    with psycopg.connect(fresh_dsn, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", (book_lock_key(book_id),))
        scrub = BookScrub(db, book_id)
        assert scrub.step(1 << 20) is None
        report = scrub_book(db, book_id, busy_wait_s=0.2)
        assert (report.outcome, report.bytes_read) == ("busy", 0)
        other.execute("SELECT pg_advisory_unlock(%s)", (book_lock_key(book_id),))
    scrub = BookScrub(db, book_id)
    assert scrub.step(4096) not in (None, 0)
    with open(book / "events.jsonl", "ab") as journal:
        journal.write(b"".join(lines[300:]))
    assert sweep(db, book).lines_applied == 100
    while not scrub.done:
        assert scrub.step(4096) is not None
    assert (scrub.report.outcome, scrub.report.lines_compared) == ("clean", 300)


# --- in the worker ---------------------------------------------------------------------------------


def test_the_background_scrub_keeps_its_rate_and_yields(db: Database, make_book: MakeBook) -> None:
    """A token bucket: over a clock that moves one second a turn it reads at most its rate, never
    while something else is due, and finds the change, counting bytes and mismatches."""
    book = make_book("book-1")
    lines = _stream(RUN_A, "book-1", 2000)
    write(book, *lines)
    sweep(db, book)
    book_id = register_book(db, book).book_id
    size = (book / "events.jsonl").stat().st_size
    now = [0.0]
    counted = {"bytes": 0, "mismatches": 0}

    class Counters:
        def scrubbed(self, bytes_read: int, mismatches: int) -> None:
            counted["bytes"] += bytes_read
            counted["mismatches"] += mismatches

    scrub = BackgroundScrub(db, bytes_per_s=20_000, counters=Counters(), clock=lambda: now[0])
    now[0] += 1
    scrub.step(lambda: [book_id], lambda: True)
    assert counted["bytes"] == 0  # something else was due
    turns = 0
    while not scrub.finished:
        scrub.step(lambda: [book_id], lambda: False)
        turns += 1
        assert counted["bytes"] <= 20_000 * turns + 1024  # one line past the tokens at most
        now[0] += 1
    assert counted["bytes"] == size and turns >= size // 20_000
    assert scrub.finished[-1].outcome == "clean"
    _edit_in_place(book, len(lines[0]) + 3, _other_byte(lines[1][3]))
    while len(scrub.finished) < 3:
        now[0] += 1000
        scrub.step(lambda: [book_id], lambda: False)
    assert counted["mismatches"] == 1
    assert attempts(db, book)[RUN_A]["error"]["seq"] == 2


def test_the_background_scrub_counts_a_small_books_step_at_its_fixed_cost(
    db: Database, make_book: MakeBook
) -> None:
    """Many small books: a step costs at least `STEP_COST_BYTES_MIN` of the bucket, whatever few
    bytes it read, so the scrub takes a bounded number of books a second, not its rate's worth of
    lines (a worker of thousands of small books spent its loop on their fixed costs); and the
    worker's books are asked for once a round, not once a book."""
    rate = 2 * STEP_COST_BYTES_MIN
    book_ids = []
    for number in range(12):
        book = make_book(f"book-{number}")
        write(book, *_stream(f"{number:08d}-0000-4000-8000-000000000000", book.name, 3))
        sweep(db, book)
        book_ids.append(register_book(db, book).book_id)
    now = [0.0]
    steps = [0]

    class Counters:
        def scrubbed(self, bytes_read: int, mismatches: int) -> None:
            assert bytes_read < STEP_COST_BYTES_MIN  # each book is smaller than a step's cost
            steps[0] += 1

    scrub = BackgroundScrub(db, bytes_per_s=rate, counters=Counters(), clock=lambda: now[0])
    asked = [0]

    def owned() -> list[str]:
        asked[0] += 1
        return book_ids

    for turn in range(1, 4):
        now[0] += 1
        scrub.step(owned, lambda: False)
        assert steps[0] <= 2 * turn  # a second's rate is worth two steps' fixed cost
    assert steps[0] == 6
    assert [report.outcome for report in scrub.finished] == ["clean"] * 6
    assert asked == [1]
    for _ in range(4):
        now[0] += 1
        scrub.step(owned, lambda: False)
    assert steps[0] == 14 and asked == [2]  # the second round began with the 13th book


def test_a_book_gone_since_its_round_began_is_left_and_the_others_are_scrubbed(
    db: Database, make_book: MakeBook
) -> None:
    """A round lists the worker's books when it begins: one forgotten (or never registered)
    meanwhile is left for a later round, logged, and the books after it are scrubbed."""
    book = make_book("book-1")
    write(book, *_stream(RUN_A, "book-1", 3))
    sweep(db, book)
    book_id = register_book(db, book).book_id
    now = [0.0]
    scrub = BackgroundScrub(db, bytes_per_s=4 * STEP_COST_BYTES_MIN, clock=lambda: now[0])
    now[0] += 1
    scrub.step(lambda: ["a-book-gone", book_id, "\x00<b>"], lambda: False)
    assert [report.outcome for report in scrub.finished] == ["clean"]


def _state(db: Database, book: Path) -> str | None:
    try:
        found = attempts(db, book).get(RUN_A)
    except NotFound:  # the worker has not registered the book yet
        return None
    return None if found is None else str(found["state"])


def test_a_worker_finds_a_line_changed_in_place(
    fresh_dsn: str, db: Database, tmp_path: Path
) -> None:
    """A real worker applies a book, then a line changed in place is found by its background
    scrub: the stream is quarantined, and the metrics count the bytes and the mismatch."""
    root = tmp_path / "root"
    book = root / "book-1"
    book.mkdir(parents=True)
    lines = _stream(RUN_A, "book-1", 50)
    write(book, *lines)
    log = tmp_path / "worker.log"
    worker = start_worker(
        fresh_dsn,
        root,
        log,
        "--metrics-port",
        "0",
        "--membership-s",
        "0.2",
        "--scrub-bytes-per-s",
        "100000",
    )
    try:
        wait_for("the worker serves metrics", lambda: serves_metrics(log))
        wait_for("the book applied", lambda: _state(db, book) == "finished")
        wait_for(
            "a whole scrub",
            lambda: (
                worker_metrics(log).get("platform_ingest_scrub_bytes_total", 0)
                >= 2 * sum(map(len, lines))
            ),
        )
        _edit_in_place(book, sum(map(len, lines[:20])) + 2, ord("x"))
        wait_for(
            "the change found",
            lambda: attempts(db, book)[RUN_A]["state"] == "quarantined",
        )
        error = attempts(db, book)[RUN_A]["error"]
        assert (error["kind"], error["seq"]) == ("payload_conflict", 21)
        # Counted once its step is over, just after the quarantine was written.
        wait_for(
            "the mismatch counted",
            lambda: worker_metrics(log)["platform_ingest_scrub_mismatches_total"] == 1,
        )
    finally:
        assert stop_worker(worker) == 0


# --- any byte of any applied line -------------------------------------------------------------------


_numbers = iter(range(1, 1 << 30))


@st.composite
def _journals(draw: st.DrawFn) -> tuple[list[bytes], list[int]]:
    """A journal of one to three streams, each finished or not, lines the engine wrote twice, and
    a stream coming back (its hello again) after another's; and the index of each applied line
    (the first copy of each seq)."""
    runs = [RUN_A, RUN_B, RUN_C][: draw(st.integers(1, 3))]
    journal: list[bytes] = []
    applied: list[int] = []
    book = "b-00000000"  # each example's own book is named as long
    for run in runs:
        lines = _stream(run, book, draw(st.integers(2, 12)), end=draw(st.booleans()))
        for index, each in enumerate(lines):
            applied.append(len(journal))
            journal.append(each)
            if index and draw(st.integers(0, 5)) == 0:
                journal.append(each)  # written twice (a crash before the watermark)
        if draw(st.booleans()):
            journal.extend([lines[0], lines[-1]])  # the stream again: its hello, its last line
    return journal, applied


@pytest.fixture
def scrub_db(fresh_dsn: str) -> Iterator[Database]:
    database = Database(fresh_dsn)
    yield database
    database.close()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(journal=_journals(), compacted=st.booleans(), data=st.data())
def test_any_byte_of_any_applied_line_changed_is_found(
    scrub_db: Database,
    tmp_path: Path,
    journal: tuple[list[bytes], list[int]],
    compacted: bool,
    data: st.DataObject,
) -> None:
    """Whatever byte of whatever applied line is overwritten, with whatever other byte (its
    newline too), the scrub reports a mismatch; the journal as written is always clean."""
    lines, applied = journal
    db = scrub_db
    book = tmp_path / f"b-{next(_numbers):08d}"
    book.mkdir()
    lines = [each.replace(b'"b-00000000"', f'"{book.name}"'.encode()) for each in lines]
    write(book, *lines)
    sweep(db, book)
    if compacted:
        compact_quiet(db, quiet_for_s=0)
    book_id = register_book(db, book).book_id
    clean = scrub_book(db, book_id)
    assert (clean.outcome, clean.mismatches) == ("clean", [])
    index = data.draw(st.sampled_from(applied), label="line")
    position = data.draw(st.integers(0, len(lines[index]) - 1), label="byte")
    old = lines[index][position]
    new = data.draw(st.integers(0, 255).filter(lambda byte: byte != old), label="new byte")
    _edit_in_place(book, sum(map(len, lines[:index])) + position, new)
    found = scrub_book(db, book_id)
    assert found.outcome == "mismatch", (index, position, new, found)
    assert found.mismatches


def test_a_scrub_beside_passes_doubles_nothing(
    db: Database, fresh_dsn: str, sql: Sql, make_book: MakeBook
) -> None:
    """Scrubs in a loop on one connection while passes apply a growing journal on another: every
    line is applied once, the money is what the lines say, and every scrub is clean."""
    book = make_book("book-1")
    lines = _stream(RUN_A, "book-1", 3000)
    write(book, *lines[:1])
    sweep(db, book)
    book_id = register_book(db, book).book_id
    outcomes: list[str] = []
    stop = threading.Event()

    def scrubbing() -> None:
        own = Database(fresh_dsn)
        try:
            while not stop.is_set():
                outcomes.append(scrub_book(own, book_id, step_bytes=8192).outcome)
        finally:
            own.close()

    thread = threading.Thread(target=scrubbing)
    thread.start()
    try:
        for end in range(100, 3001, 100):
            scrubbed = len(outcomes)
            with open(book / "events.jsonl", "ab") as journal:
                journal.write(b"".join(lines[end - 100 if end > 100 else 1 : end]))
            while sweep(db, book).busy:
                pass
            if end % 500 == 0:  # a whole scrub between these passes, now and then
                wait_for("a scrub", lambda before=scrubbed: len(outcomes) > before)
    finally:
        stop.set()
        thread.join()
    assert set(outcomes) == {"clean"} and len(outcomes) >= 6
    (state,) = _effects(sql)
    assert state[1:] == ("completed", 3_000_000, 1499)
    rows = sql.execute("SELECT count(*), max(seq) FROM line_hashes").fetchone()
    assert rows == (3000, 3000)

"""`rebuild`: a projection caught up from the journals, each applied line given once, across a
crash at every commit and live lines arriving meanwhile; what cannot be replayed is said exactly."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from platform_ingest import Database, sweep_book
from platform_ingest.errors import ProjectionInvalid
from platform_ingest.ingest.rebuild import rebuild
from platform_ingest.operate.compact import compact_quiet
from platform_ingest.operate.prune import prune_runs
from platform_ingest.operate.remedies import skip_line
from platform_journals import (
    BIN,
    RUN_A,
    RUN_B,
    RUN_C,
    append,
    finished,
    hello,
    spend,
    sweep,
    unit_done,
    write,
)
from projection_fixtures import Recording, recorded

pytestmark = pytest.mark.postgres

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


class _Crash(Exception):
    """Stands for the rebuild's process dying right after a commit."""


def _applied(sql: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """(book_id, engine_run_id, seq) of every line the platform applied with an effect (line
    hashes, less the lines an operator skipped), in order."""
    rows = sql.execute(
        "SELECT a.book_id, a.engine_run_id, h.seq FROM line_hashes h JOIN attempts a USING"
        " (attempt_id) WHERE NOT EXISTS (SELECT 1 FROM line_skips s WHERE s.attempt_id ="
        " h.attempt_id AND s.seq = h.seq) ORDER BY a.book_id, a.attempt_id, h.seq"
    ).fetchall()
    return [tuple(row) for row in rows]


def _given(sql: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return [(book_id, run, seq) for book_id, run, seq, _ in recorded(sql)]


def _journal(book: Path) -> None:
    write(
        book,
        hello(RUN_A),
        spend(2, 10),
        unit_done(3, "u-1", 0),
        spend(3, 10),  # a conflicting line at an applied seq: never given
        spend(2, 10),  # a duplicate
        spend(4, 20),
        hello(RUN_B),
        spend(2, 30),
        unit_done(3, "u-2", 1),
        finished(4, money=30),
    )


def test_a_late_projection_is_given_every_applied_line_once_then_follows_live(
    db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    book = make_book("book-1")
    _journal(book)
    append(book, hello(RUN_C), spend(2, 50))
    sweep(db, book)
    assert not _table_exists(sql)
    report = rebuild(db, Recording())
    assert report.cannot_replay == []
    assert report.events_given == 9
    assert _given(sql) == _applied(sql)
    assert rebuild(db, Recording()).events_given == 0  # nothing twice
    append(book, spend(3, 60))  # the caught-up stream goes on, live
    sweep_book(db, book, mode="auto", projections=[Recording()])
    assert _given(sql) == _applied(sql)
    assert ("book-1", RUN_C, 3) in _given(sql)


def _table_exists(sql: psycopg.Connection[Any]) -> bool:
    row = sql.execute("SELECT to_regclass('recorded_events')").fetchone()
    return row is not None and row[0] is not None


def test_a_crash_after_every_commit_resumes_where_it_stopped(
    db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    """Batches of one event, the rebuild stopped right after each of its commits and run again:
    each line is given once (a second time would break the recording's primary key)."""
    book = make_book("book-1")
    _journal(book)
    sweep(db, book)

    def crash(engine_run_id: str, seq: int) -> None:
        raise _Crash

    commits = 0
    while True:
        try:
            rebuild(db, Recording(), batch_events=1, hook=crash)
        except _Crash:
            commits += 1
            assert len(_given(sql)) == commits  # the commit before the crash holds, once
            continue
        break
    assert commits == 7
    assert _given(sql) == _applied(sql)


def test_live_lines_arriving_during_the_catch_up_are_given_once(
    db: Database, make_book: Any, sql: psycopg.Connection[Any], fresh_dsn: str
) -> None:
    """After each commit of the rebuild, new lines are written and applied live (with the
    projection) on another connection: at the seam each seq is given once, by one of them."""
    book = make_book("book-1")
    write(book, hello(RUN_A), *(spend(seq, seq) for seq in range(2, 12)))
    sweep(db, book)
    live = Database(fresh_dsn)
    next_seq = 12

    def live_lines(engine_run_id: str, seq: int) -> None:
        nonlocal next_seq
        append(book, spend(next_seq, next_seq), spend(next_seq + 1, next_seq + 1))
        next_seq += 2
        sweep_book(live, book, mode="auto", projections=[Recording()])

    try:
        report = rebuild(db, Recording(), batch_events=3, hook=live_lines)
    finally:
        live.close()
    assert report.cannot_replay == []
    assert _given(sql) == _applied(sql)
    assert [seq for _, _, seq in _given(sql)] == list(range(1, next_seq))


def test_a_skipped_line_is_passed_without_an_event(
    db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    book = make_book("book-1")
    bad = b'{"seq":2,"type":"spend","time":"x"}\n'
    write(book, hello(), bad, spend(3, 5))
    sweep(db, book)
    skip_line(db, str(book), RUN_A, 2, sha256=hashlib.sha256(bad).hexdigest(), reason="bad line")
    sweep(db, book)
    report = rebuild(db, Recording())
    assert [seq for _, _, seq in _given(sql)] == [1, 3]
    assert report.cannot_replay == []
    tracked = sql.execute("SELECT last_seq FROM projection_tracking").fetchone()
    assert tracked == (3,)


def test_a_stream_whose_bad_hello_was_skipped_is_replayed_as_its_own(
    db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    """A readable hello with a key after `data` starts RUN_B, though it is malformed; once an
    operator skipped it, RUN_B's lines are applied, and a rebuild finds them in RUN_B's part of
    the file (not in RUN_A's, the stream before the bad hello)."""
    book = make_book("book-1")
    bad = hello(RUN_B, version="1.4")[:-2] + b',"trace":"t-2"}\n'
    write(
        book,
        hello(RUN_A),
        spend(2, 10),
        finished(3, money=10),
        bad,
        spend(2, 30),
        unit_done(3, "u-2", 1),
        finished(4, money=30),
    )
    sweep(db, book)
    skip_line(db, str(book), RUN_B, 1, sha256=hashlib.sha256(bad).hexdigest(), reason="stray key")
    sweep(db, book)
    report = rebuild(db, Recording())
    assert report.cannot_replay == []
    assert [(run, seq) for _, run, seq in _given(sql)] == [
        (RUN_A, 1),
        (RUN_A, 2),
        (RUN_A, 3),
        (RUN_B, 2),
        (RUN_B, 3),
        (RUN_B, 4),
    ]
    assert _given(sql) == _applied(sql)


class _RecordingV2(Recording):
    version = 2

    def __init__(self) -> None:
        super().__init__()
        self.resets = 0

    def reset(self, session: Any) -> None:
        self.resets += 1
        session.execute("DROP TABLE IF EXISTS recorded_events")


def test_a_new_version_is_reset_then_caught_up(
    db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    book = make_book("book-1")
    _journal(book)
    sweep_book(db, book, mode="auto", projections=[Recording()])
    assert _given(sql) == _applied(sql)
    with pytest.raises(ProjectionInvalid, match="reset"):
        rebuild(db, type("NoReset", (Recording,), {"version": 2})())
    projection = _RecordingV2()
    report = rebuild(db, projection)
    assert (report.reset_from, projection.resets) == (1, 1)
    assert _given(sql) == _applied(sql)
    assert sql.execute("SELECT version FROM projections WHERE name = 'recording'").fetchone() == (
        2,
    )
    # A live worker of the old version is given nothing now; one of the new version follows.
    append(book, spend(5, 40))
    sweep_book(db, book, mode="auto", projections=[Recording()])
    assert _given(sql) == _applied(sql)[:7]


def test_what_cannot_be_replayed_is_said_stream_by_stream(
    db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    gone, rotated, intact = make_book("book-gone"), make_book("book-rotated"), make_book("book-ok")
    for book in (gone, rotated, intact):
        write(book, hello(book=book.name), spend(2, 10), spend(3, 20))
        sweep(db, book)
    (gone / "events.jsonl").unlink()
    write(rotated, spend(3, 20))  # the journal rotated: only the last line is left
    report = rebuild(db, Recording())
    problems = {
        (each.book_id, each.reason, each.first_seq, each.last_seq) for each in report.cannot_replay
    }
    assert problems == {
        ("book-gone", "journal_missing", 1, 3),
        ("book-rotated", "lines_missing", 1, 3),
    }
    assert {row[0] for row in _given(sql)} == {"book-ok"}


def test_a_compacted_range_is_replayed_when_its_digest_matches_and_refused_when_not(
    db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    good, changed = make_book("book-good"), make_book("book-changed")
    for book in (good, changed):
        write(book, hello(book=book.name), spend(2, 10), finished(3, money=10))
        sweep(db, book)
    assert len(compact_quiet(db, quiet_for_s=0.0).compacted) == 2
    assert sql.execute("SELECT count(*) FROM line_hashes").fetchone() == (0,)
    # The same seqs with other bytes (the file was rewritten): not what was applied.
    write(changed, hello(book="book-changed"), spend(2, 11), finished(3, money=11))
    report = rebuild(db, Recording())
    assert [(each.book_id, each.reason) for each in report.cannot_replay] == [
        ("book-changed", "lines_differ")
    ]
    assert [row for row in _given(sql) if row[0] == "book-good"] == [
        ("book-good", RUN_A, 1),
        ("book-good", RUN_A, 2),
        ("book-good", RUN_A, 3),
    ]
    assert {row[0] for row in _given(sql)} == {"book-good"}


def test_a_pruned_run_is_reported_not_replayed(
    db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 10), finished(3, money=10), hello(RUN_B), spend(2, 20))
    sweep(db, book)
    assert prune_runs(db, older_than_s=0.0).pruned
    report = rebuild(db, Recording())
    assert [
        (each.engine_run_id, each.reason, each.first_seq, each.last_seq)
        for each in report.cannot_replay
    ] == [(RUN_A, "pruned", 1, 3)]
    assert _given(sql) == [("book-1", RUN_B, 1), ("book-1", RUN_B, 2)]


def _environment() -> dict[str, str]:
    paths = [str(FIXTURES), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def test_the_command_reports_json_and_exits_4_when_something_cannot_be_replayed(
    fresh_dsn: str, db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 10))
    sweep(db, book)
    argv = [str(BIN / "platform-ingest"), "--dsn", fresh_dsn, "rebuild"]
    spec = ["--projection", "projection_fixtures:Recording", "--json"]
    done = subprocess.run(
        [*argv, *spec, str(book)], check=False, capture_output=True, env=_environment(), timeout=60
    )
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout)
    assert (report["projection"], report["events_given"], report["cannot_replay"]) == (
        "recording",
        2,
        [],
    )
    append(book, spend(3, 20))
    sweep(db, book)
    (book / "events.jsonl").unlink()
    done = subprocess.run(
        [*argv, *spec], check=False, capture_output=True, env=_environment(), timeout=60
    )
    assert done.returncode == 4, done.stderr
    (missing,) = orjson.loads(done.stdout)["cannot_replay"]
    assert (missing["reason"], missing["first_seq"], missing["last_seq"]) == (
        "journal_missing",
        3,
        3,
    )
    usage = subprocess.run(argv, check=False, capture_output=True, env=_environment(), timeout=60)
    assert usage.returncode == 2


def test_a_rebuild_killed_by_sigkill_resumes_and_gives_each_line_once(
    fresh_dsn: str, db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    book = make_book("book-1")
    write(book, hello(), *(spend(seq, seq) for seq in range(2, 3001)))
    sweep(db, book)
    argv = [
        str(BIN / "platform-ingest"),
        "--dsn",
        fresh_dsn,
        "rebuild",
        "--projection",
        "projection_fixtures:Recording",
        "--batch-events",
        "7",
    ]
    process = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_environment()
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if _table_exists(sql) and len(recorded(sql)) >= 100:
            break
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    given_before = len(recorded(sql))
    assert 0 < given_before < 3000, "the kill did not land mid-rebuild"
    done = subprocess.run(argv, check=False, capture_output=True, env=_environment(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert _given(sql) == _applied(sql)
    assert len(_given(sql)) == 3000

"""Bounded storage against a real Postgres: compaction (its steps, its lock, a crash at any step,
a real SIGKILL), pruning (audited, tombstoned, never re-applied), and `name` keeping the book's
reading position."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from platform_ingest import ConfigError, Database
from platform_ingest._logs import FieldsLogger
from platform_ingest.decisions.views import compacted_digest
from platform_ingest.ingest.books import book_lock_key
from platform_ingest.operate.compact import _record_digest, compact_quiet
from platform_ingest.operate.naming import name_stream
from platform_ingest.operate.prune import prune_runs
from platform_ingest.operate.show import show_state
from platform_ingest.store.db import DatabaseSettings, set_statement_hook
from platform_ingest.worker.housekeeping import Housekeeping
from platform_ingest.worker.metrics import Metrics
from platform_journals import (
    BIN,
    RUN_A,
    RUN_B,
    RUN_C,
    append,
    book_state,
    finished,
    hello,
    spend,
    sweep,
    unit_done,
    write,
)

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]
Sql = psycopg.Connection[tuple[object, ...]]


def _hash_rows(sql: Sql) -> int:
    row = sql.execute("SELECT count(*) FROM line_hashes").fetchone()
    assert row is not None
    return int(str(row[0]))


def _attempt(sql: Sql, engine_run_id: str) -> tuple[object, ...]:
    row = sql.execute(
        "SELECT attempt_id, compacted_seq, compacted_sha256, compaction_pending FROM attempts"
        " WHERE engine_run_id = %s",
        (engine_run_id,),
    ).fetchone()
    assert row is not None
    return row


def _finished_stream(book: Path, lines: int, run: str = RUN_A) -> list[bytes]:
    body = [spend(seq, seq) for seq in range(2, lines)]
    return [hello(run, book=book.name), *body, finished(lines, money=lines - 1)]


# --- compaction ---------------------------------------------------------------------------------


def test_compaction_keeps_one_digest_and_a_reread_is_judged_by_it(
    db: Database, sql: Sql, make_book: MakeBook
) -> None:
    """A finished attempt's hashes become the digest of its line hashes in seq order; a re-read
    from byte 0 of the same bytes is all duplicates, of changed bytes a conflict."""
    book = make_book("book-1")
    lines = _finished_stream(book, 300)
    write(book, *lines)
    sweep(db, book)
    assert compact_quiet(db, quiet_for_s=3600).compacted == []  # not quiet for an hour yet
    report = compact_quiet(db, quiet_for_s=0)
    (attempt_id, compacted_seq, digest, pending) = _attempt(sql, RUN_A)
    assert report.compacted == report.finished_deleting == [attempt_id]
    assert report.rows_deleted == 300
    assert (compacted_seq, pending, _hash_rows(sql)) == (300, False, 0)
    assert digest == compacted_digest(hashlib.sha256(line).digest() for line in lines)
    write(book, *lines)
    assert sweep(db, book).duplicates == 300
    write(book, *lines[:100], spend(101, 7), *lines[101:])
    sweep(db, book)
    error = book_state(db, book)["runs"][0]["attempts"][0]["error"]
    assert (error["kind"], error["seq"]) == ("payload_conflict", 300)


def test_compaction_leaves_a_book_a_pass_is_reading(
    db: Database, fresh_dsn: str, make_book: MakeBook
) -> None:
    """The book's advisory lock, held by a pass, makes compaction leave the book for later."""
    book = make_book("book-1")
    write(book, *_finished_stream(book, 5))
    sweep(db, book)
    with psycopg.connect(fresh_dsn, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", (book_lock_key("book-1"),))
        report = compact_quiet(db, quiet_for_s=0)
        assert list(report.skipped.values()) == ["a pass is reading the book"]
    assert compact_quiet(db, quiet_for_s=0).compacted != []


def test_compaction_waits_while_the_book_has_a_parked_stream(
    db: Database, make_book: MakeBook
) -> None:
    book = make_book("book-1")
    name_stream(db, str(book), RUN_A)
    name_stream(db, str(book), RUN_C)
    write(book, hello(RUN_C), spend(2, 5), finished(3, money=5), hello(RUN_A), hello(RUN_B))
    sweep(db, book, auto=False)
    states = {a["engine_run_id"]: a["state"] for a in book_state(db, book)["runs"][0]["attempts"]}
    assert states == {RUN_A: "parked", RUN_C: "finished"}
    assert compact_quiet(db, quiet_for_s=0).compacted == []


@pytest.mark.parametrize("crash", ["after_digest", "after_some_deletes"])
def test_a_compaction_cut_short_is_finished_by_the_next(
    crash: str, db: Database, sql: Sql, make_book: MakeBook
) -> None:
    """A crash after the digest is written (or after some rows are deleted) loses nothing: the
    rows left are never read again, a re-read is judged by the digest, and the next compaction
    deletes them."""
    book = make_book("book-1")
    lines = _finished_stream(book, 50)
    write(book, *lines)
    sweep(db, book)
    (attempt_id, *_) = _attempt(sql, RUN_A)
    assert isinstance(attempt_id, int)
    digest = compacted_digest(hashlib.sha256(line).digest() for line in lines)
    assert _record_digest(db, "book-1", attempt_id, 50, digest, quiet_for_s=0) is None
    if crash == "after_some_deletes":
        sql.execute("DELETE FROM line_hashes WHERE seq <= 20")
    write(book, *lines)
    report = sweep(db, book)
    assert (report.duplicates, report.unverified_duplicates) == (50, 0)
    assert _attempt(sql, RUN_A)[3] is True  # still pending
    finished_now = compact_quiet(db, quiet_for_s=3600)  # pending work is not waiting for quiet
    assert finished_now.finished_deleting == [attempt_id]
    assert (_hash_rows(sql), _attempt(sql, RUN_A)[3]) == (0, False)


def test_compaction_killed_before_and_during_its_deletes_loses_nothing(
    db: Database, fresh_dsn: str, sql: Sql, make_book: MakeBook
) -> None:
    """`platform-ingest compact` killed with SIGKILL before it writes the digest, then while it
    deletes the rows (slowed by a trigger, and killed once the digest is seen in Postgres): the
    attempt is untouched, then compacted with the right digest and rows left; a rerun finishes,
    and a re-read from byte 0 is all duplicates."""
    book = make_book("book-1")
    lines = _finished_stream(book, 40_000)
    write(book, *lines)
    sweep(db, book)
    expected = compacted_digest(hashlib.sha256(line).digest() for line in lines)
    sql.execute(
        "CREATE FUNCTION slow_delete() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN PERFORM pg_sleep(0.3); RETURN NULL; END $$"
    )
    sql.execute(
        "CREATE TRIGGER slow_delete BEFORE DELETE ON line_hashes"
        " FOR EACH STATEMENT EXECUTE FUNCTION slow_delete()"
    )
    env = {**os.environ, "PLATFORM_INGEST_DSN": fresh_dsn}
    argv = [str(BIN / "platform-ingest"), "compact", "--quiet-for-s", "0"]

    early = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    early.send_signal(signal.SIGKILL)  # before the interpreter has even imported the package
    early.wait()
    assert _attempt(sql, RUN_A)[1:] == (0, None, False)
    assert _hash_rows(sql) == 40_000

    during = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while _attempt(sql, RUN_A)[1] == 0:
        assert time.monotonic() < deadline, "the digest was never written"
        assert during.poll() is None, "compact ended before it wrote the digest"
        time.sleep(0.01)
    during.send_signal(signal.SIGKILL)
    during.wait()
    assert _attempt(sql, RUN_A)[1:] == (40_000, expected, True)
    assert 0 < _hash_rows(sql) <= 40_000

    write(book, *lines)  # read again while rows are left: the digest answers, never the rows
    report = sweep(db, book)
    assert (report.duplicates, report.lines_applied, report.problems) == (40_000, 0, [])
    rerun = subprocess.run(argv, env=env, capture_output=True, check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert _attempt(sql, RUN_A)[1:] == (40_000, expected, False)
    assert _hash_rows(sql) == 0


# --- pruning ------------------------------------------------------------------------------------


def test_prune_deletes_an_old_ended_run_audited_and_its_streams_never_come_back(
    db: Database, sql: Sql, make_book: MakeBook
) -> None:
    book = make_book("book-1")
    first = [hello(RUN_A), unit_done(2, "u-1", 0), spend(3, 40), finished(4, money=40)]
    write(book, *first, hello(RUN_B), spend(2, 50))
    sweep(db, book)
    assert [run["state"] for run in book_state(db, book)["runs"]] == ["completed", "running"]
    assert prune_runs(db, older_than_s=3600).pruned == []
    dry = prune_runs(db, older_than_s=0, dry_run=True)
    assert len(dry.pruned) == 1
    assert len(book_state(db, book)["runs"]) == 2
    report = prune_runs(db, older_than_s=0, by="ops", reason="retention")
    (pruned,) = report.pruned
    assert (pruned["state"], [s["engine_run_id"] for s in pruned["streams"]]) == (
        "completed",
        [RUN_A],
    )
    assert report.cleaned == 1
    shown = book_state(db, book)
    assert [run["state"] for run in shown["runs"]] == ["running"]
    (action,) = shown["actions"]
    assert (action["action"], action["by"], action["reason"]) == ("prune", "ops", "retention")
    assert action["evidence"]["committed_micro_usd"] == 40
    assert sql.execute("SELECT count(*) FROM run_units").fetchone() == (0,)
    write(book, *first, hello(RUN_B), spend(2, 50), spend(3, 60))  # a re-read from byte 0
    report_after = sweep(db, book)
    assert report_after.lines_applied == 1
    runs = book_state(db, book)["runs"]
    assert [(run["state"], run["committed_micro_usd"]) for run in runs] == [("running", 60)]
    with pytest.raises(ConfigError, match="pruned"):
        name_stream(db, str(book), RUN_A)


def test_prune_never_takes_the_latest_run_or_a_live_one(db: Database, make_book: MakeBook) -> None:
    book = make_book("book-1")
    write(book, hello(RUN_A), finished(2, money=0))
    sweep(db, book)
    assert prune_runs(db, older_than_s=0).pruned == []  # the book's latest run
    append(book, hello(RUN_B), spend(2, 1))
    sweep(db, book)
    assert [run["state"] for run in book_state(db, book)["runs"]] == ["completed", "running"]
    assert [p["run_id"] for p in prune_runs(db, older_than_s=0).pruned] != []
    assert [run["state"] for run in show_state(db)["books"][0]["runs"]] == ["running"]


# --- resumes ------------------------------------------------------------------------------------


def test_naming_a_stream_already_passed_reads_from_its_hello(
    db: Database, make_book: MakeBook
) -> None:
    """Named mode records where each foreign stream begins: naming one moves the scan back to
    its hello, not to byte 0; naming one not written yet keeps the scan where it is."""
    book = make_book("book-1")
    name_stream(db, str(book), RUN_A)
    ours = [hello(RUN_A), *[spend(seq, seq) for seq in range(2, 500)], finished(500, money=499)]
    theirs = [hello(RUN_B), spend(2, 600)]
    write(book, *ours, *theirs)
    sweep(db, book, auto=False)
    size_before_b = len(b"".join(ours))
    name_stream(db, str(book), RUN_B, new_run=True)
    report = sweep(db, book, auto=False)
    assert (report.start_offset, report.lines_applied) == (size_before_b, 2)
    assert report.bytes_read <= len(b"".join(theirs)) + len(ours[-1]) + 1
    end = (book / "events.jsonl").stat().st_size
    name_stream(db, str(book), RUN_C)
    append(book, hello(RUN_C), spend(2, 700))
    resumed = sweep(db, book, auto=False)
    assert (resumed.start_offset, resumed.lines_applied) == (end, 2)


def test_naming_reads_from_byte_0_when_the_starts_are_not_known(
    db: Database, make_book: MakeBook
) -> None:
    """A book last read in auto mode has no record of foreign starts: `name` reads it all."""
    book = make_book("book-1")
    write(book, hello(RUN_A), spend(2, 5))
    sweep(db, book)  # auto
    name_stream(db, str(book), RUN_B)
    assert sweep(db, book, auto=False).start_offset == 0


# --- the worker's housekeeping ------------------------------------------------------------------


def _housekeeping_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records the housekeeping logs itself (not the compaction's own, per attempt)."""
    return [
        record
        for record in caplog.records
        if record.name == "platform_ingest" and record.getMessage().startswith("housekeeping: ")
    ]


def _seen(record: logging.LogRecord) -> tuple[int, str, object]:
    return (record.levelno, record.getMessage(), getattr(record, "fields", None))


COMPACTED_ONE = "housekeeping: 1 attempt compacted, 20 line hashes deleted"
FAILED = re.compile(
    r"housekeeping: compaction failed \(Postgres connection lost or refused .+\); next round later"
)


def test_housekeeping_compacts_in_rounds_and_survives_postgres_away(
    db: Database,
    fresh_dsn: str,
    sql: Sql,
    make_book: MakeBook,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A round compacts what is quiet, counts it and logs it (INFO, with the worker's fields); a
    round with nothing quiet logs nothing; a round with Postgres away logs a WARNING and returns
    (the next one tries again, on a fresh connection, and compacts; a round that fails again
    logs below INFO, and the first that goes through after says so); the thread runs rounds
    until stop, which ends it and closes its connection."""
    caplog.set_level(logging.INFO, logger="platform_ingest")
    fields = {"worker": "w-test"}
    book = make_book("book-1")
    write(book, *_finished_stream(book, 20))
    sweep(db, book)
    metrics = Metrics()
    log = FieldsLogger(logging.getLogger("platform_ingest"), fields)
    settings = DatabaseSettings(connect_timeout_s=1, reconnect_attempts_max=0)
    keeper = Housekeeping(
        fresh_dsn,
        quiet_for_s=0,
        interval_s=0.05,
        database_settings=settings,
        metrics=metrics,
        log=log,
    )

    def compacted_total() -> float | None:
        return metrics.registry.get_sample_value("platform_ingest_attempts_compacted_total")

    keeper.round()
    assert _hash_rows(sql) == 0
    assert compacted_total() == 1
    assert [_seen(record) for record in _housekeeping_records(caplog)] == [
        (logging.INFO, COMPACTED_ONE, fields)
    ]
    caplog.clear()
    keeper.round()  # nothing is quiet any more: nothing counted, nothing logged
    assert (compacted_total(), _housekeeping_records(caplog)) == (1, [])

    away = Housekeeping(
        "postgresql://nobody@127.0.0.1:1/none",
        quiet_for_s=0,
        interval_s=0.05,
        database_settings=settings,
        metrics=metrics,
        log=log,
    )
    away.round()  # raises nothing
    away.round()  # the next round tries again, and fails again: not warned of twice
    failures = _housekeeping_records(caplog)
    assert [(record.levelno, getattr(record, "fields", None)) for record in failures] == [
        (logging.WARNING, fields)
    ]
    assert all(FAILED.fullmatch(record.getMessage()) for record in failures), failures
    assert not away.db.is_open
    away.stop()

    # Its session is lost between rounds: the thread's next round fails and logs, the one after
    # connects again and compacts the stream appended meanwhile.
    terminated = sql.execute(
        "SELECT pg_terminate_backend(%s, 10000)", (keeper.db.backend_pid,)
    ).fetchone()
    assert terminated == (True,)
    append(book, *_finished_stream(book, 20, RUN_B))
    sweep(db, book)
    assert _hash_rows(sql) == 20
    caplog.clear()
    before = set(threading.enumerate())
    keeper.start()
    (thread,) = [t for t in set(threading.enumerate()) - before if t.name == "housekeeping"]
    deadline = time.monotonic() + 30
    while compacted_total() != 2 or not _housekeeping_records(caplog)[2:]:
        assert thread.is_alive(), "the housekeeping thread ended by itself"
        assert time.monotonic() < deadline, (
            f"no round compacted the second stream in 30 s: {_hash_rows(sql)} line hashes left,"
            f" logged {[_seen(record) for record in _housekeeping_records(caplog)]}"
        )
        time.sleep(0.01)
    assert _hash_rows(sql) == 0
    (failed, back, compacted) = _housekeeping_records(caplog)
    assert failed.levelno == logging.WARNING and FAILED.fullmatch(failed.getMessage()), failed
    assert _seen(back) == (logging.INFO, "housekeeping: compaction goes on", fields)
    assert _seen(compacted) == (logging.INFO, COMPACTED_ONE, fields)
    assert {failed.threadName, back.threadName, compacted.threadName} == {"housekeeping"}

    stopper = threading.Thread(target=keeper.stop, daemon=True)
    stopper.start()
    stopper.join(timeout=10)
    assert not stopper.is_alive(), "stop did not return within 10 s"
    assert not thread.is_alive(), "the housekeeping thread outlived stop"
    assert not keeper.db.is_open


def test_two_compactors_and_a_pass_at_once_agree(
    db: Database, fresh_dsn: str, sql: Sql, make_book: MakeBook
) -> None:
    """Two `compact` processes and a `sweep` re-reading the whole journal run at the same time:
    every attempt ends compacted once with the right digest, and the pass finds no problem."""
    book = make_book("book-1")
    streams = [_finished_stream(book, 15_000, run) for run in (RUN_A, RUN_B, RUN_C)]
    write(book, *[raw for stream in streams for raw in stream])
    sweep(db, book)
    write(book, *[raw for stream in streams for raw in stream])  # a new inode: read from byte 0
    env = {**os.environ, "PLATFORM_INGEST_DSN": fresh_dsn}
    exe = str(BIN / "platform-ingest")
    processes = [
        subprocess.Popen(
            [exe, "compact", "--quiet-for-s", "0", "--json"], env=env, stdout=subprocess.PIPE
        )
        for _ in range(2)
    ]
    processes.append(
        subprocess.Popen(
            [exe, "sweep", "--auto", "--json", str(book)], env=env, stdout=subprocess.PIPE
        )
    )
    outputs = [process.communicate(timeout=120)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0, 0]
    compacted = [json.loads(output)["compacted"] for output in outputs[:2]]
    assert sorted(compacted[0] + compacted[1]) == sorted(set(compacted[0] + compacted[1]))
    swept = json.loads(outputs[2])
    assert (swept["lines_applied"], swept["problems"]) == (0, [])
    compact_quiet(db, quiet_for_s=0)  # whatever a busy book made them leave
    for run, stream in zip((RUN_A, RUN_B, RUN_C), streams, strict=True):
        digest = compacted_digest(hashlib.sha256(raw).digest() for raw in stream)
        assert _attempt(sql, run)[1:] == (15_000, digest, False)
    assert _hash_rows(sql) == 0
    write(book, *[raw for stream in streams for raw in stream])
    assert sweep(db, book).problems == []


def test_a_journal_of_many_foreign_hellos_asks_for_pruned_streams_once(
    db: Database, make_book: MakeBook
) -> None:
    """A hostile journal with thousands of unknown streams costs one look at the book's pruned
    streams a pass, not one query per hello."""
    book = make_book("book-1")
    name_stream(db, str(book), RUN_A)
    foreign = [hello(f"f-{number:05d}", book="book-1") for number in range(3000)]
    write(book, hello(RUN_A), spend(2, 1), finished(3, money=1), *foreign)
    seen: list[str] = []
    set_statement_hook(lambda statement: seen.append(statement.name))
    try:
        report = sweep(db, book, auto=False)
    finally:
        set_statement_hook(None)
    assert report.lines_read == 3003
    assert seen.count("pruned_streams_of_book") == 1
    assert "pruned_stream_exists" not in seen


def test_the_stream_starts_a_book_keeps_are_bounded(
    db: Database, sql: Sql, make_book: MakeBook
) -> None:
    """A journal with more foreign streams than a book keeps starts of: 1,024 are kept, the book
    says its starts are not complete, and naming a stream then reads from byte 0."""
    book = make_book("book-1")
    name_stream(db, str(book), RUN_A)
    foreign = [hello(f"f-{number:05d}", book="book-1") for number in range(1030)]
    write(book, hello(RUN_A), spend(2, 1), finished(3, money=1), *foreign)
    sweep(db, book, auto=False)
    assert sql.execute("SELECT count(*) FROM stream_starts").fetchone() == (1024,)
    assert sql.execute("SELECT starts_from_zero FROM books").fetchone() == (False,)
    name_stream(db, str(book), "f-01029", new_run=True)
    report = sweep(db, book, auto=False)
    assert report.start_offset == 0
    assert book_state(db, book)["runs"][-1]["attempts"][0]["state"] == "active"

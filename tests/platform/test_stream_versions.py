"""Stream versions deployed apart (docs/reference/stream-format.md, "Versions"): the engine and the platform upgrade in either
order. A platform reads a newer minor than its own (unknown fields and event types are ignored and
the cursor still advances past them), and reads the 1.3 and 1.4 streams of one book alike."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from platform_ingest import Database
from platform_journals import RUN_A, RUN_B, append, book_state, only_run, sweep, write

pytestmark = pytest.mark.postgres

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
NEWER_MINOR = (
    (VECTORS / "journals" / "newer_minor_1_9.jsonl").read_bytes().splitlines(keepends=True)
)
"""A 1.9 stream (see tests/vectors/make_vectors.py): hello with a pid and an unknown `host`,
progress with an unknown phase field, an unknown event type, unit_done, spend and finished with
unknown fields."""


def engine_events(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "engine_events._cli", *argv],
        capture_output=True,
        timeout=120,
        check=False,
    )


def demo(book: Path, *options: str) -> int:
    """The reference engine on `book`: 2 units x 2 stages at 10 micro-USD a step, no pause."""
    done = engine_events(
        "demo", str(book), "--units", "2", "--pace-ms", "0", "--unit-cost-micro-usd", "10", *options
    )
    return done.returncode


def platform_ingest(dsn: str, *argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "platform_ingest.cli.main", "--dsn", dsn, *argv],
        capture_output=True,
        timeout=120,
        check=False,
    )


def engine_status(book: Path) -> dict[str, Any]:
    done = engine_events("status", str(book), "--json")
    assert done.returncode == 0, done.stdout
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_a_platform_reads_a_newer_minor_line_by_line(db: Database, tmp_path: Path) -> None:
    """A 1.9 stream, as it grows: every line is read and the cursor advances past each one,
    also when the last line so far is of a type the platform does not know; the fields it does
    know take effect, the others change nothing."""
    book = tmp_path / "book-vectors"
    book.mkdir()
    hello_line, progress_line, unknown_type, unit_line, spend_line, finished_line = NEWER_MINOR
    write(book, hello_line, progress_line)
    sweep(db, book)
    (attempt,) = only_run(db, book)["attempts"]
    assert (attempt["engine_run_id"], attempt["state"], attempt["last_seq"]) == (RUN_A, "active", 2)
    assert only_run(db, book)["progress"] == {"draft": {"done": 1, "total": 2}}

    append(book, unknown_type)
    report = sweep(db, book)
    assert report.lines_applied == 1
    assert only_run(db, book)["attempts"][0]["last_seq"] == 3, "the cursor is past the unknown type"

    append(book, unit_line, spend_line, finished_line)
    sweep(db, book)
    run = only_run(db, book)
    assert (run["state"], run["exit_code"]) == ("completed", 0)
    assert (run["units"], run["committed_micro_usd"]) == (["u-0001"], 1500)
    (attempt,) = run["attempts"]
    assert (attempt["state"], attempt["last_seq"], attempt["error"]) == ("finished", 6, None)

    before = book_state(db, book)
    assert sweep(db, book).lines_applied == 0
    assert book_state(db, book) == before


def test_a_platform_reads_the_1_3_and_1_4_streams_of_one_book(
    db: Database, sql: psycopg.Connection[tuple[object, ...]], tmp_path: Path
) -> None:
    """The engine upgrades mid-book: a 1.3 process stops at the ceiling and is swept; its resume
    writes 1.4 (a hello with the pid) and is swept by the same platform. One run, two finished
    attempts, the money of the engine's own status."""
    book = tmp_path / "book-1"
    assert demo(book, "--ceiling-micro-usd", "20") == 4
    sweep(db, book)
    run = only_run(db, book)
    assert (run["state"], run["reason"]) == ("paused", "ceiling")

    assert demo(book, "--stream-version", "1.4") == 0
    sweep(db, book)
    run = only_run(db, book)
    assert run["state"] == "completed"
    assert run["committed_micro_usd"] == engine_status(book)["money"]["committed_micro_usd"] == 40
    assert run["units"] == ["unit-0001", "unit-0002"]
    assert [a["state"] for a in run["attempts"]] == ["finished", "finished"]
    versions = sql.execute("SELECT stream_version FROM attempts ORDER BY stream_index").fetchall()
    assert versions == [("1.3",), ("1.4",)]


def test_a_named_1_4_stream_follows_a_named_1_3_stream(fresh_dsn: str, tmp_path: Path) -> None:
    """Production's way, through the commands: the platform names each stream before it launches
    the engine with that id; the first engine writes 1.3, the second (upgraded) 1.4. Both are
    read in the named mode, and the run ends completed with the engine's money."""
    book = tmp_path / "book-1"
    book.mkdir()
    assert platform_ingest(fresh_dsn, "name", str(book), RUN_A).returncode == 0
    assert demo(book, "--engine-run-id", RUN_A, "--ceiling-micro-usd", "20") == 4
    assert platform_ingest(fresh_dsn, "sweep", str(book)).returncode == 0
    assert platform_ingest(fresh_dsn, "name", str(book), RUN_B).returncode == 0
    assert demo(book, "--engine-run-id", RUN_B, "--stream-version", "1.4") == 0
    assert platform_ingest(fresh_dsn, "sweep", str(book)).returncode == 0
    shown = platform_ingest(fresh_dsn, "show", str(book), "--json")
    assert shown.returncode == 0, shown.stderr
    ((run,),) = [entry["runs"] for entry in json.loads(shown.stdout)["books"]]
    assert run["state"] == "completed"
    assert run["committed_micro_usd"] == engine_status(book)["money"]["committed_micro_usd"]
    assert [(a["engine_run_id"], a["state"]) for a in run["attempts"]] == [
        (RUN_A, "finished"),
        (RUN_B, "finished"),
    ]

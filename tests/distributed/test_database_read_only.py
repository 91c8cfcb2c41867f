"""Postgres that answers and writes nothing: made read-only (`default_transaction_read_only`, as an
operator does to stop writes), or a hot standby the worker was pointed at.

Every write meets SQLSTATE 25006 (read_only_sql_transaction). That is no book's problem and no
crash of the worker: a new book directory, whose registration is a write, once made the worker
exit. The worker says once that Postgres is away, and why (one WARNING with the reason and the
SQLSTATE, `database_up 0` and `database_down_reason` in its metrics), and tries again after a wait
that grows; a `sweep` stops at once with exit 1. Once Postgres takes writes again (the setting
reset, the standby promoted) the worker goes on by itself: every line applied, none twice.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from platform_journals import RUN_A, append, hello, log_entries, unit_done, wait_for
from postgres_cluster import (
    Cluster,
    clusters,
    command,
    metric,
    projection_rows,
    show,
    start_worker,
    stop_process,
)

pytestmark = [pytest.mark.postgres, pytest.mark.crash]

DOWN = 'platform_ingest_database_down_reason{reason="read_only",sqlstate="25006"}'
LAST = 40


def _seqs(cluster: Cluster) -> dict[str, int]:
    with cluster.connect() as connection:
        rows = connection.execute("SELECT book_id, max(last_seq) FROM attempts GROUP BY book_id")
        return {book: seq for book, seq in rows.fetchall()}


def _journal(book: Path, first: int, last: int) -> None:
    """Seqs `first` to `last` of the book's one stream: a hello, then a unit each."""
    book.mkdir(parents=True, exist_ok=True)
    append(
        book,
        *(
            hello(book=book.name) if seq == 1 else unit_done(seq, f"unit-{seq}", seq)
            for seq in range(first, last + 1)
        ),
    )


def _waits_while_read_only(
    cluster: Cluster,
    log: Path,
    worker: subprocess.Popen[bytes],
    books: Sequence[Path],
    registered: Sequence[str],
) -> None:
    """The worker shows why it waits, and lives; a sweep stops; no book is marked (of the
    `registered` ones: the others could not be)."""
    wait_for("the worker shows Postgres read-only", lambda: metric(log, DOWN) == 1)
    assert metric(log, "platform_ingest_database_up") == 0
    assert worker.poll() is None, "the worker died of a read-only Postgres"
    swept = command("platform-ingest", "--dsn", cluster.dsn(), "sweep", "--auto", *map(str, books))
    assert swept.returncode == 1, swept.stderr
    (said,) = swept.stderr.decode().splitlines()
    assert f"the sweep stops, {len(books)} of {len(books)} books not passed" in said
    assert "SQLSTATE 25006" in said
    state = show(cluster.dsn())
    assert {name: book["problems"] for name, book in state.items()} == {
        name: [] for name in registered
    }


def _went_on(
    cluster: Cluster, log: Path, worker: subprocess.Popen[bytes], books: Sequence[Path]
) -> None:
    """Every line applied once, the projection given each once; one WARNING for the episode."""
    wait_for("every line applied", lambda: _seqs(cluster) == {book.name: LAST for book in books})
    wait_for("Postgres shown back", lambda: metric(log, "platform_ingest_database_up") == 1)
    assert metric(log, DOWN) is None
    assert stop_process(worker) == 0
    expected = [(book.name, RUN_A, seq) for book in sorted(books) for seq in range(1, LAST + 1)]
    with cluster.connect() as connection:
        applied = connection.execute(
            "SELECT book_id, engine_run_id, seq FROM line_hashes JOIN attempts USING"
            " (attempt_id) ORDER BY book_id, engine_run_id, seq"
        ).fetchall()
    assert [tuple(row) for row in applied] == expected
    assert [row[:3] for row in projection_rows(cluster)] == expected
    state = show(cluster.dsn())
    for book in books:
        (run,) = state[book.name]["runs"]
        assert (run["units"], state[book.name]["problems"]) == (
            [f"unit-{seq}" for seq in range(2, LAST + 1)],
            [],
        )
    entries = log_entries(log)
    away = [entry for entry in entries if entry["message"].startswith("Postgres is away")]
    assert [(entry["level"], entry["reason"], entry["sqlstate"]) for entry in away] == [
        ("WARNING", "read_only", "25006")
    ]
    assert any(entry["message"].startswith("Postgres is back") for entry in entries)
    assert not any("could not finish" in entry["message"] for entry in entries)
    assert [entry for entry in entries if "exception" in entry] == []


def test_a_read_only_postgres_makes_the_worker_wait_and_go_on_once_writable(
    request: pytest.FixtureRequest,
) -> None:
    with clusters(request.config) as place:
        cluster = place.new("primary")
        root = place.root / "books"
        old, new = root / "book-old", root / "book-new"
        write_first = 5
        _journal(old, 1, write_first)
        log = place.root / "worker.log"
        worker = start_worker(cluster.dsn(), root, log, worker_id="w-read-only")
        try:
            wait_for("the first lines applied", lambda: _seqs(cluster) == {old.name: write_first})
            cluster.execute("ALTER SYSTEM SET default_transaction_read_only = on", "postgres")
            cluster.execute("SELECT pg_reload_conf()", "postgres")
            # A new session has the setting once the postmaster has read it again, and by then
            # it has told every session, the worker's among them, to read it before their next
            # statement.
            wait_for(
                "the setting read again",
                lambda: cluster.scalar("SHOW default_transaction_read_only") == "on",
            )
            _journal(old, write_first + 1, LAST)
            _journal(new, 1, LAST)  # a new book: its registration is a write
            _waits_while_read_only(cluster, log, worker, [old, new], registered=[old.name])
            cluster.execute("ALTER SYSTEM RESET default_transaction_read_only", "postgres")
            cluster.execute("SELECT pg_reload_conf()", "postgres")
            _went_on(cluster, log, worker, [new, old])
        finally:
            stop_process(worker)


def test_a_worker_pointed_at_a_hot_standby_waits_until_it_is_promoted(
    request: pytest.FixtureRequest,
) -> None:
    with clusters(request.config) as place:
        primary = place.new("primary")
        standby = place.base_backup(primary, "standby", standby=True)
        standby.start()
        assert standby.in_recovery()
        root = place.root / "books"
        books = [root / "book-1", root / "book-2"]
        for book in books:
            _journal(book, 1, LAST)
        log = place.root / "worker.log"
        worker = start_worker(standby.dsn(), root, log, worker_id="w-standby")
        try:
            _waits_while_read_only(standby, log, worker, books, registered=[])
            primary.kill()
            standby.promote()
            _went_on(standby, log, worker, books)
        finally:
            stop_process(worker)

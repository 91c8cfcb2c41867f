"""Postgres out of disk space, for real: its database lives in a tablespace on a small tmpfs,
which a file fills to the last byte while a worker tails two books.

A full disk is neither one book's problem nor a crash of the worker: every write meets SQLSTATE
53100 (disk_full), so the worker says once that Postgres is away, and why (one WARNING with the
reason and the SQLSTATE, `database_up 0` and `database_down_reason` in its metrics), and tries
again after a wait that grows, never in a tight loop. A `sweep` meanwhile stops at once with exit
1, and no book is marked. Once the file is deleted the worker goes on by itself: every line is
applied, and none twice.
"""

from __future__ import annotations

import time

import pytest

from platform_journals import RUN_A, append, hello, log_entries, spend, unit_done, wait_for, write
from postgres_cluster import (
    PROJECTION,
    Cluster,
    clusters,
    command,
    fill,
    metric,
    projection_rows,
    show,
    start_worker,
    stop_process,
)

pytestmark = [pytest.mark.postgres, pytest.mark.crash]

BOOKS = ("book-1", "book-2")
LINES_WHILE_FULL = 2000
"""Each book's lines written once the disk is full: far more line hashes than the pages Postgres
already has can hold, so that the tables must grow."""
DOWN = 'platform_ingest_database_down_reason{reason="disk_full",sqlstate="53100"}'
ERRORS = 'platform_ingest_database_errors_total{error="DatabaseRefusesWrites"}'
WINDOW_S = 6.0
TRIES_IN_WINDOW_MAX = 8
"""While Postgres stays full, how many times at most the worker tries it in `WINDOW_S` seconds:
its waits double from 0.2 s (shortened by at most half, for jitter) to 5 s, so even a window from
the episode's start holds 7 tries. Before, each try was a pass that reconnected and failed nine
times at once, and the worker tried again as soon as it took a connection: a try every 0.6 s or
so, ten in the window, each with ten WARNINGs."""


def _seqs(cluster: Cluster) -> dict[str, int]:
    with cluster.connect() as connection:
        rows = connection.execute("SELECT book_id, max(last_seq) FROM attempts GROUP BY book_id")
        return {book: seq for book, seq in rows.fetchall()}


def _applied(cluster: Cluster) -> list[tuple[str, str, int]]:
    """(book, stream, seq) of each line hash: each applied line once, or a duplicate shows."""
    with cluster.connect() as connection:
        rows = connection.execute(
            "SELECT book_id, engine_run_id, seq FROM line_hashes JOIN attempts USING"
            " (attempt_id) ORDER BY book_id, engine_run_id, seq"
        ).fetchall()
    return [(book, stream, seq) for book, stream, seq in rows]


def test_a_full_disk_makes_the_worker_wait_and_go_on_once_space_returns(
    request: pytest.FixtureRequest,
) -> None:
    with clusters(request.config) as place:
        space = place.small_filesystem("space", "32m")
        cluster = place.new("primary", tablespace=space)
        root = place.root / "books"
        books = [root / name for name in BOOKS]
        for book in books:
            book.mkdir(parents=True)
            write(book, hello(book=book.name), spend(2, 10))
        log = place.root / "worker.log"
        worker = start_worker(cluster.dsn(), root, log, worker_id="w-full")
        try:
            wait_for("the first lines applied", lambda: _seqs(cluster) == dict.fromkeys(BOOKS, 2))
            filler = fill(space)
            last = 2 + LINES_WHILE_FULL
            for book in books:
                append(
                    book,
                    *(unit_done(seq, f"unit-{seq:06d}-" + "x" * 80, seq) for seq in range(3, last)),
                    spend(last, 20),
                )
            wait_for("the worker shows the full disk", lambda: metric(log, DOWN) == 1)
            assert metric(log, "platform_ingest_database_up") == 0
            assert worker.poll() is None, "the worker died of the full disk"

            tried = metric(log, ERRORS) or 0
            time.sleep(WINDOW_S)
            tries = (metric(log, ERRORS) or 0) - tried
            assert tries <= TRIES_IN_WINDOW_MAX

            swept = command(
                "platform-ingest",
                "--dsn",
                cluster.dsn(),
                "sweep",
                "--auto",
                "--projection",
                PROJECTION,
                *map(str, books),
            )
            assert swept.returncode == 1, swept.stderr
            (said,) = swept.stderr.decode().splitlines()
            assert "the sweep stops, 2 of 2 books not passed" in said
            assert "SQLSTATE 53100" in said
            state = show(cluster.dsn())  # reads still work on a full disk
            assert [state[name]["problems"] for name in BOOKS] == [[], []]

            filler.unlink()
            wait_for("every line applied", lambda: _seqs(cluster) == dict.fromkeys(BOOKS, last))
            wait_for(
                "the worker shows Postgres back",
                lambda: metric(log, "platform_ingest_database_up") == 1,
            )
            assert metric(log, DOWN) is None
            assert stop_process(worker) == 0
        finally:
            stop_process(worker)
        # Each line once: one line hash per seq of each stream, and the projection given each
        # line once (a second time would break its primary key, and the batch with it).
        expected = [(book, RUN_A, seq) for book in BOOKS for seq in range(1, last + 1)]
        assert _applied(cluster) == expected
        assert [row[:3] for row in projection_rows(cluster)] == expected
        state = show(cluster.dsn())
        for name in BOOKS:
            (run,) = state[name]["runs"]
            assert len(run["units"]) == len(set(run["units"])) == last - 3
            assert state[name]["problems"] == []
        entries = log_entries(log)
        warnings = [entry for entry in entries if entry["level"] == "WARNING"]
        away = [entry for entry in warnings if entry["message"].startswith("Postgres is away")]
        assert [(entry["reason"], entry["sqlstate"]) for entry in away] == [("disk_full", "53100")]
        assert [entry["message"].split(" after ")[0] for entry in warnings] == [
            away[0]["message"],
            "Postgres is back",
        ]
        assert [entry for entry in entries if "exception" in entry] == []
    print(f"disk full: {tries:.0f} tries in {WINDOW_S:.0f} s, {len(expected)} lines each once")

"""`platform-ingest run`: the worker, as real processes against a real Postgres.

Two workers share a root of a dozen books written by real engines (`engine-events demo`); one is
killed with SIGKILL midway and the other takes its books over. A new book directory and a new line
are picked up by change notification, not by the safety pass. Postgres restarted under a running
worker loses and doubles nothing. The worker's logs name no book and no amount.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from platform_ingest import Database, migrate
from platform_ingest.worker.membership import owner_of
from platform_journals import (
    BIN,
    DEADLINE_S,
    RUN_A,
    _environment,
    append,
    dsn_for,
    hello,
    log_entries,
    passes_by_trigger,
    scrape_metrics,
    spend,
    start_worker,
    stop_worker,
    unit_done,
    wait_for,
    worker_metrics,
    write,
)
from server_fixtures import pg_ctl as _pg_ctl
from server_fixtures import start_again

pytestmark = [pytest.mark.postgres, pytest.mark.crash]

BOOKS = [f"secret-title-{number:02d}" for number in range(1, 13)]
UNITS = 6
STAGES = ("draft", "edit")
UNIT_COST = 12_345_679  # eight digits: never mistaken for a pid, a port or a count in a log line
WORKER_A, WORKER_B = "w-alpha", "w-beta"


def _scalar(dsn: str, query: str, params: tuple[Any, ...] = ()) -> Any:
    with psycopg.connect(dsn, autocommit=True) as connection:
        row = connection.execute(query, params).fetchone()  # type: ignore[arg-type]
        return None if row is None else row[0]


# --- two workers, one killed ------------------------------------------------------------------


@dataclass
class SharedRun:
    dsn: str
    root: Path
    logs: list[Path]
    survivor_exit: int
    killed_passes: int
    statuses: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def shared_run(pg_admin_dsn: str, pg_template: str) -> Iterator[SharedRun]:
    """Two workers on one root of twelve books while engines write them; one is SIGKILLed once
    it has applied lines and engines are still writing; the other is stopped with SIGTERM at the
    end, after every run completed in Postgres."""
    name = f"ingest_workers_{os.getpid()}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    dsn = dsn_for(pg_admin_dsn, name)
    with tempfile.TemporaryDirectory(prefix="ingest-workers-") as directory:
        root = Path(directory) / "books"
        root.mkdir()
        for book in BOOKS:
            (root / book).mkdir()
        logs = [Path(directory) / "worker-a.log", Path(directory) / "worker-b.log"]
        options = ("--safety-pass-s", "2", "--membership-s", "0.3")
        a = start_worker(dsn, root, logs[0], *options, worker_id=WORKER_A)
        b = start_worker(dsn, root, logs[1], *options, worker_id=WORKER_B)
        engines: list[subprocess.Popen[bytes]] = []
        try:
            wait_for(
                "both workers see each other",
                lambda: all(
                    any(entry.get("workers") == 2 for entry in log_entries(log)) for log in logs
                ),
            )
            for book in BOOKS:
                engines.append(
                    subprocess.Popen(
                        [
                            str(BIN / "engine-events"),
                            "--log-level",
                            "WARNING",
                            "demo",
                            str(root / book),
                            "--units",
                            str(UNITS),
                            "--stages",
                            ",".join(STAGES),
                            "--unit-cost-micro-usd",
                            str(UNIT_COST),
                            "--pace-ms",
                            "120",
                        ],
                        env=_environment(),
                    )
                )

            def a_applied() -> int:
                return sum(
                    "pass over" in entry["message"] and " applied" in entry["message"]
                    for entry in log_entries(logs[0])
                )

            wait_for("worker A applied lines", lambda: a_applied() > 0)
            assert any(engine.poll() is None for engine in engines), "engines ended too soon"
            a.send_signal(signal.SIGKILL)
            assert a.wait(timeout=30) == -signal.SIGKILL
            killed_passes = a_applied()
            assert [engine.wait(timeout=120) for engine in engines] == [0] * len(engines)

            def all_completed() -> bool:
                count = _scalar(
                    dsn,
                    "SELECT count(*) FROM runs r WHERE state = 'completed' AND"
                    " (SELECT count(*) FROM run_units u WHERE u.run_id = r.run_id) = %s",
                    (UNITS,),
                )
                return bool(count == len(BOOKS))

            wait_for("every run completed in Postgres", all_completed)
            survivor_exit = stop_worker(b)
            statuses = {}
            for book in BOOKS:
                done = subprocess.run(
                    [str(BIN / "engine-events"), "status", str(root / book), "--json"],
                    capture_output=True,
                    check=True,
                    env=_environment(),
                )
                statuses[book] = json.loads(done.stdout)
            yield SharedRun(dsn, root, logs, survivor_exit, killed_passes, statuses)
        finally:
            for process in [a, b, *engines]:
                if process.poll() is None:
                    process.kill()
                    process.wait(timeout=30)
            with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_two_worker_ids_split_the_books() -> None:
    """The fixed worker ids of the shared run each own some of the twelve books (rendezvous)."""
    owners = [owner_of(book, (WORKER_A, WORKER_B)) for book in BOOKS]
    assert 0 < owners.count(WORKER_A) < len(BOOKS)


def test_a_killed_worker_loses_nothing_and_the_survivor_exits_zero(shared_run: SharedRun) -> None:
    """SIGKILL of one of two workers: every run completed, each unit once, money right, exit 0."""
    assert shared_run.survivor_exit == 0
    assert shared_run.killed_passes > 0
    dsn = shared_run.dsn
    db = Database(dsn)
    try:
        from platform_ingest.operate.show import show_state

        state = show_state(db)
    finally:
        db.close()
    books = {book["book_id"]: book for book in state["books"]}
    assert sorted(books) == BOOKS
    expected_units = [f"unit-{index:04d}" for index in range(1, UNITS + 1)]
    for book_id, book in books.items():
        (run,) = book["runs"]
        status = shared_run.statuses[book_id]
        assert run["state"] == "completed", (book_id, run)
        assert run["units"] == expected_units
        assert run["committed_micro_usd"] == status["money"]["committed_micro_usd"]
        assert run["committed_micro_usd"] == UNITS * len(STAGES) * UNIT_COST
        (attempt,) = run["attempts"]
        (stream,) = status["streams"]
        assert (attempt["state"], attempt["last_seq"]) == ("finished", stream["last_seq"])
        assert book["lag"]["lines"] == 0
    lines = sum(
        len((shared_run.root / book / "events.jsonl").read_bytes().splitlines()) for book in BOOKS
    )
    assert _scalar(dsn, "SELECT count(*) FROM line_hashes") == lines
    # Both workers worked: the killed one applied lines, and the survivor took its books over.
    survivor = log_entries(shared_run.logs[1])
    assert any(entry.get("workers") == 1 for entry in survivor)


def test_worker_logs_hold_no_book_id_and_no_amount(shared_run: SharedRun) -> None:
    """Every INFO+ line the two workers logged is JSON and names no book and no money amount."""
    amounts = {str(UNIT_COST * steps) for steps in range(1, UNITS * len(STAGES) + 1)}
    entries = [entry for log in shared_run.logs for entry in log_entries(log)]
    assert len(entries) > 10
    assert any(entry["message"].startswith("pass over b-") for entry in entries)
    for entry in entries:
        assert entry["level"] in {"INFO", "WARNING", "ERROR", "CRITICAL"}
        text = json.dumps(entry)
        assert "secret-title" not in text, text
        assert str(shared_run.root) not in text, text
        assert not any(amount in text for amount in amounts), text


# --- change notification ------------------------------------------------------------------------


def _last_seq(dsn: str, book_id: str) -> int:
    value = _scalar(
        dsn, "SELECT coalesce(max(last_seq), 0) FROM attempts WHERE book_id = %s", (book_id,)
    )
    return int(value)


def test_new_book_and_new_line_are_applied_on_notification(fresh_dsn: str, tmp_path: Path) -> None:
    """With the safety pass 60 s away, a new book directory and a new line are applied well
    before it: the change notification woke the worker. The metrics count what was applied."""
    root = tmp_path / "books"
    (root / "book-1").mkdir(parents=True)
    write(root / "book-1", hello(book="book-1"), unit_done(2, "u-2", 2))
    log = tmp_path / "worker.log"
    worker = start_worker(fresh_dsn, root, log, "--safety-pass-s", "60", "--metrics-port", "0")
    try:
        wait_for("the first book applied at start", lambda: _last_seq(fresh_dsn, "book-1") == 2)
        started = time.monotonic()
        (root / "book-2").mkdir()
        write(root / "book-2", hello(RUN_A, book="book-2"), unit_done(2, "u-2", 2))
        wait_for("the new book applied", lambda: _last_seq(fresh_dsn, "book-2") == 2, 30)
        append(root / "book-1", unit_done(3, "u-3", 3))
        wait_for("the new line applied", lambda: _last_seq(fresh_dsn, "book-1") == 3, 30)
        assert time.monotonic() - started < 60  # the safety pass never ran in between
        (port,) = [
            int(match.group(1))
            for entry in log_entries(log)
            if (match := re.fullmatch(r"metrics on port (\d+)", entry["message"]))
        ]
        # A pass counts its lines once its last batch is committed and it has returned: a
        # scrape just after the commit may come before the count.
        wait_for(
            "the metrics count the five lines",
            lambda: scrape_metrics(port)["platform_ingest_lines_applied_total"] >= 5,
            30,
        )
        metrics = scrape_metrics(port)
        assert metrics["platform_ingest_lines_applied_total"] == 5
        assert metrics['platform_ingest_passes_total{trigger="notify"}'] >= 1
        assert metrics["platform_ingest_watcher_up"] == 1
        assert metrics["platform_ingest_database_up"] == 1
        assert metrics["platform_ingest_apply_seconds_count"] >= 2
        assert "platform_ingest_lag_bytes" in metrics
        assert stop_worker(worker) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)


# --- Postgres restarted -------------------------------------------------------------------------


IDLE_BOOKS = 40


def test_postgres_restarted_under_a_running_worker(own_server: Any, tmp_path: Path) -> None:
    """Postgres stopped and started while a worker tails a book being written: every line is
    applied exactly once, the worker lives through it and exits 0 on SIGTERM. The idle books
    beside it are measured once Postgres is back, not passed one by one."""
    dsn: str = own_server.get_uri()
    db = Database(dsn)
    migrate(db)
    db.close()
    root = tmp_path / "books"
    book = root / "book-1"
    book.mkdir(parents=True)
    total = 150
    write(book, hello(book="book-1"))
    idle = [root / f"idle-{number:02d}" for number in range(IDLE_BOOKS)]
    for path in idle:
        path.mkdir()
        write(path, hello(book=path.name), spend(2, 5))
    log = tmp_path / "worker.log"
    worker = start_worker(dsn, root, log, "--safety-pass-s", "2", "--metrics-port", "0")
    socket_dir = own_server.get_postmaster_info().socket_dir
    written = threading.Event()

    def writer() -> None:
        for seq in range(2, total + 1):
            append(book, unit_done(seq, f"u-{seq}", seq))
            if seq == 50:
                _pg_ctl(own_server, "-w", "-m", "fast", "stop")
            if seq == 90:
                start_again(own_server, socket_dir)
            time.sleep(0.02)
        written.set()

    try:
        wait_for("the hello applied", lambda: _last_seq(dsn, "book-1") == 1)
        for path in idle:
            wait_for("the idle books applied", lambda path=path: _last_seq(dsn, path.name) == 2)
        before = passes_by_trigger(worker_metrics(log))
        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        assert written.wait(timeout=DEADLINE_S)
        wait_for("every line applied", lambda: _last_seq(dsn, "book-1") == total)
        assert worker.poll() is None, "the worker died with Postgres"
        of_book_1 = " FROM line_hashes JOIN attempts USING (attempt_id) WHERE book_id = 'book-1'"
        assert _scalar(dsn, "SELECT count(*)" + of_book_1) == total
        assert _scalar(dsn, "SELECT count(DISTINCT seq)" + of_book_1) == total
        assert _scalar(dsn, "SELECT count(*) FROM run_units") == total - 1
        messages = [entry["message"] for entry in log_entries(log)]
        assert any(message.startswith("Postgres is away") for message in messages)
        assert any(message.startswith("Postgres is back") for message in messages)
        after = passes_by_trigger(worker_metrics(log))
        woken = {trigger: after.get(trigger, 0) - before.get(trigger, 0) for trigger in after}
        # Passed again without a notification: book-1's interrupted passes and the books the
        # safety pass found behind, never every idle book.
        assert woken.get("retry", 0) + woken.get("survey", 0) < IDLE_BOOKS, woken
        assert stop_worker(worker) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)

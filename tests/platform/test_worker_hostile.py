"""A hostile root: one worker, ten healthy books written by real engines, and five bad books.

The bad books: a FIFO at the journal's path, a book directory swapped for a symlink to a directory
outside the root after it was registered, a directory whose name is not UTF-8, a book with a line
Postgres refuses to store, and a book with U+0000 in a unit id. The worker applies every line of
the healthy books, each bad book shows its typed problem in `show --json`, the logs name the bad
directory only by an opaque reference, and SIGTERM ends the worker with exit 0.

The value Postgres refuses is made by a trigger (`platform_journals.refuse_poison_units`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from platform_ingest import Database
from platform_ingest.operate.show import show_state
from platform_journals import (
    BIN,
    _environment,
    dsn_for,
    hello,
    log_entries,
    refuse_poison_units,
    spend,
    start_worker,
    unit_done,
    wait_for,
    write,
)

pytestmark = [pytest.mark.postgres, pytest.mark.crash]

HEALTHY = [f"healthy-{number:02d}" for number in range(1, 11)]
UNITS = 5
STAGES = ("draft", "edit")
STOP_BOUND_S = 5.0
"""The bound promised on a SIGTERM'd worker's exit (a bound, not a speed)."""


@dataclass
class HostileRun:
    state: dict[str, dict[str, Any]]
    logs: list[dict[str, Any]]
    stop_exit: int
    stop_seconds: float
    bad_dir_ref: str
    engine_exits: list[int]


def _engine(book: Path) -> subprocess.Popen[bytes]:
    argv = [str(BIN / "engine-events"), "--log-level", "WARNING", "demo", str(book)]
    argv += ["--units", str(UNITS), "--stages", ",".join(STAGES), "--pace-ms", "60"]
    return subprocess.Popen(argv, env=_environment())


def _state(dsn: str) -> dict[str, dict[str, Any]]:
    db = Database(dsn)
    try:
        return {book["book_id"]: book for book in show_state(db)["books"]}
    finally:
        db.close()


def _completed(dsn: str) -> bool:
    state = _state(dsn)
    return all(
        book in state
        and len(state[book]["runs"]) == 1
        and state[book]["runs"][0]["state"] == "completed"
        and len(state[book]["runs"][0]["units"]) == UNITS
        for book in HEALTHY
    )


def _spent(dsn: str, book: str) -> int | None:
    runs = _state(dsn).get(book, {}).get("runs", [])
    return runs[0]["committed_micro_usd"] if runs else None


def _problem(state: dict[str, dict[str, Any]], book: str) -> list[str]:
    if book not in state:
        return []
    return [problem["kind"] for problem in state[book]["problems"]]


def _attempt_errors(state: dict[str, dict[str, Any]], book: str) -> list[str]:
    if book not in state:
        return []
    return [
        attempt["error"]["kind"]
        for run in state[book]["runs"]
        for attempt in run["attempts"]
        if attempt["error"] is not None
    ]


@pytest.fixture(scope="module")
def hostile_run(
    pg_admin_dsn: str, pg_template: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostileRun]:
    name = f"ingest_hostile_{os.getpid()}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    dsn = dsn_for(pg_admin_dsn, name)
    with psycopg.connect(dsn, autocommit=True) as sql:
        refuse_poison_units(sql)
    directory = tmp_path_factory.mktemp("hostile")
    root = directory / "books"
    root.mkdir()
    outside = directory / "outside" / "book-swap"
    outside.mkdir(parents=True)
    write(outside, hello(book="book-swap", run="r-outside"), spend(2, 9_000_000))
    for book in HEALTHY:
        (root / book).mkdir()
    (root / "book-fifo").mkdir()
    os.mkfifo(root / "book-fifo" / "events.jsonl")
    (root / "book-swap").mkdir()
    write(root / "book-swap", hello(book="book-swap"), spend(2, 5))
    bad_name = os.fsencode(root) + b"/book-\xff\xfe"
    os.mkdir(bad_name)
    with open(bad_name + b"/events.jsonl", "wb") as file:
        file.write(hello(book="book-x"))
    (root / "book-poison").mkdir()
    write(
        root / "book-poison",
        hello(book="book-poison"),
        unit_done(2, "u-1", 0),
        unit_done(3, "poison", 1),
        spend(4, 5),
    )
    (root / "book-nul").mkdir()
    write(root / "book-nul", hello(book="book-nul"), unit_done(2, "u-\x00", 0))
    log = directory / "worker.log"
    worker = start_worker(dsn, root, log, "--safety-pass-s", "2")
    engines: list[subprocess.Popen[bytes]] = []
    try:
        wait_for("the swap book applied before its swap", lambda: _spent(dsn, "book-swap") == 5)
        engines = [_engine(root / book) for book in HEALTHY]
        shutil.move(root / "book-swap", directory / "book-swap.moved")
        (root / "book-swap").symlink_to(outside, target_is_directory=True)
        engine_exits = [engine.wait(timeout=180) for engine in engines]
        wait_for("every healthy run completed in Postgres", lambda: _completed(dsn))
        wait_for(
            "every bad book shows its problem",
            lambda: (
                _problem(state := _state(dsn), "book-fifo") == ["journal_not_regular"]
                and _problem(state, "book-swap") == ["journal_outside_roots"]
                and _attempt_errors(state, "book-poison") == ["database_refused"]
                and _attempt_errors(state, "book-nul") == ["malformed"]
            ),
        )
        state = _state(dsn)
        worker.send_signal(signal.SIGTERM)
        started = time.monotonic()
        stop_exit = worker.wait(timeout=60)
        stop_seconds = time.monotonic() - started
        bad_ref = "d-" + hashlib.sha256(bad_name).hexdigest()[:10]
        yield HostileRun(state, log_entries(log), stop_exit, stop_seconds, bad_ref, engine_exits)
    finally:
        for process in [worker, *engines]:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
        with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_every_healthy_line_is_applied(hostile_run: HostileRun) -> None:
    assert hostile_run.engine_exits == [0] * len(HEALTHY)
    for book in HEALTHY:
        (run,) = hostile_run.state[book]["runs"]
        assert run["state"] == "completed"
        assert run["units"] == [f"unit-{index:04d}" for index in range(1, UNITS + 1)]
        assert hostile_run.state[book]["lag"]["lines"] == 0
        assert hostile_run.state[book]["problems"] == []


def test_each_bad_book_shows_its_typed_problem(hostile_run: HostileRun) -> None:
    state = hostile_run.state
    assert _problem(state, "book-fifo") == ["journal_not_regular"]
    assert "FIFO" in state["book-fifo"]["problems"][0]["detail"]
    swap = state["book-swap"]
    assert _problem(state, "book-swap") == ["journal_outside_roots"]
    (run,) = swap["runs"]
    assert run["committed_micro_usd"] == 5  # nothing of the outside journal
    assert [attempt["engine_run_id"] for attempt in run["attempts"]] != ["r-outside"]
    poison = state["book-poison"]["runs"][0]
    assert poison["units"] == ["u-1"]
    (attempt,) = poison["attempts"]
    assert (attempt["state"], attempt["last_seq"], attempt["error"]["seq"]) == (
        "quarantined",
        2,
        3,
    )
    (nul,) = state["book-nul"]["runs"][0]["attempts"]
    assert (nul["state"], nul["error"]["seq"]) == ("quarantined", 2)
    assert not any(book.startswith("book-\udcff") for book in state)


def test_the_bad_name_is_logged_by_reference_once(hostile_run: HostileRun) -> None:
    warnings = [
        entry
        for entry in hostile_run.logs
        if entry["level"] == "WARNING" and hostile_run.bad_dir_ref in entry["message"]
    ]
    assert len(warnings) == 1, warnings
    assert "NotUtf8Path" in warnings[0]["message"]
    for entry in hostile_run.logs:
        assert "healthy-" not in json.dumps(entry)
        assert entry["level"] != "ERROR", entry


def test_sigterm_ends_the_worker_with_exit_zero(hostile_run: HostileRun) -> None:
    assert hostile_run.stop_exit == 0
    assert hostile_run.stop_seconds < STOP_BOUND_S

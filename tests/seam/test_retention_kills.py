"""The engine's outbox retention under real kills: a reference engine that prunes every row it may
(`--outbox-retention-s 0`, a prune after every flush), killed with SIGKILL at random moments (in the
middle of a prune, between a prune and the next projection, mid-write), started again, and swept
by the platform between kills. A prune deletes rows only once their lines are durably in the
journal, so no kill can lose a committed line, and the platform reads the same lines whether a
row was pruned or not.

At the end (one clean run to completion, one more sweep) the platform holds exactly what the
engine says: every stream's last seq applied, no attempt quarantined, stalled or refused, the
book's ledger equal to the engine's, every unit done, and the outbox really was pruned (fewer
rows than the journal has lines).
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from platform_ingest import Database
from platform_journals import book_state, sweep

pytestmark = [pytest.mark.crash, pytest.mark.postgres]

UNITS = 30
KILLS = 12
UNIT_COST = 1000
TROUBLE = frozenset({"quarantined", "stalled", "refused"})


def _engine_events() -> str:
    found = Path(sys.executable).with_name("engine-events")
    return str(found) if found.exists() else shutil.which("engine-events") or "engine-events"


def _demo(book: Path) -> list[str]:
    return [
        _engine_events(),
        "--log-level",
        "ERROR",
        "demo",
        str(book),
        "--units",
        str(UNITS),
        "--pace-ms",
        "3",
        "--unit-cost-micro-usd",
        str(UNIT_COST),
        "--outbox-retention-s",
        "0",
        "--outbox-prune-interval-s",
        "0",
    ]


def _outbox_rows(book: Path) -> int:
    conn = sqlite3.connect(book / "engine.sqlite3")
    try:
        (rows,) = conn.execute("SELECT count(*) FROM engine_events_outbox").fetchone()
    finally:
        conn.close()
    return int(rows)


def _hellos(book: Path) -> int:
    journal = book / "events.jsonl"
    return journal.read_bytes().count(b'"type":"hello"') if journal.exists() else 0


def _wait_for_hello(book: Path, hellos: int, deadline_s: float = 30.0) -> None:
    """Until the journal holds `hellos` hellos: the new life's stream has begun. Not any new line:
    a life first projects what the killed one committed and never wrote (lines of the stream
    before), and a kill landing then would end a life that has no stream of its own."""
    deadline = time.monotonic() + deadline_s
    while _hellos(book) < hellos:
        assert time.monotonic() < deadline, "the engine wrote no hello"
        time.sleep(0.002)


def test_kills_around_the_outbox_prune_lose_no_line_and_no_money(
    db: Database, make_book: Callable[[str], Path]
) -> None:
    book = make_book("book-1")
    chance = random.Random(20261203)
    killed = 0
    for _ in range(KILLS):
        before = _hellos(book)
        engine = subprocess.Popen(_demo(book), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # Let it write its hello first, so each kill lands inside its life: a prune at start, a
        # flush and its prune, a projection, a close.
        _wait_for_hello(book, before + 1)
        time.sleep(chance.uniform(0.0, 0.08))
        engine.send_signal(signal.SIGKILL)
        _, stderr = engine.communicate(timeout=30)
        if engine.returncode == -signal.SIGKILL:
            killed += 1
        else:
            assert engine.returncode == 0, stderr.decode()
            break  # it finished before the kill landed
        sweep(db, book)
        troubled = [
            (attempt["engine_run_id"], attempt["state"], attempt["error"])
            for run in book_state(db, book)["runs"]
            for attempt in run["attempts"]
            if attempt["state"] in TROUBLE
        ]
        assert troubled == []
    assert killed >= KILLS // 2, f"only {killed} kills landed"

    done = subprocess.run(_demo(book), check=False, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    sweep(db, book)
    status = json.loads(
        subprocess.run(
            [_engine_events(), "status", str(book), "--json"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    )

    state = book_state(db, book)
    attempts = {a["engine_run_id"]: a for run in state["runs"] for a in run["attempts"]}
    assert [a for a in attempts.values() if a["state"] in TROUBLE] == []
    for stream in status["streams"]:
        assert attempts[stream["engine_run_id"]]["last_seq"] == stream["last_seq"], stream
    ledger = max(run["committed_micro_usd"] for run in state["runs"])
    assert ledger == status["money"]["committed_micro_usd"] == UNITS * 2 * UNIT_COST
    assert sum(run["spent_micro_usd"] for run in state["runs"]) == ledger
    units = {unit for run in state["runs"] for unit in run["units"]}
    assert len(units) == UNITS
    lines = (book / "events.jsonl").read_bytes().count(b"\n")
    rows = _outbox_rows(book)
    hellos = (book / "events.jsonl").read_bytes().count(b'"type":"hello"')
    assert hellos == len(attempts) == len(status["streams"]) >= killed  # a stream per life
    print(f"{killed} kills over {hellos} streams; {lines} lines, {rows} outbox rows left")
    assert rows < lines, "nothing was pruned: the test proves nothing"

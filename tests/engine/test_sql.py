"""Every statement engine_events runs is listed in `_sql`, and none scans the outbox."""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine_events import (
    BankStop,
    Ceiling,
    ExitCode,
    Finished,
    PhaseCount,
    Progress,
    Spend,
    UnitDone,
)
from engine_events._emitter import Emitter
from engine_events._schema import DATABASE_FILE_NAME, connect
from engine_events._sql import ALL_STATEMENTS, MIGRATIONS, QUERIES
from engine_events.readers.status import read_status, repair

# Tables that grow with processes (one row per stream), never with events: reading them whole is
# what the repair channel and recovery are for.
_SMALL_TABLES = (
    "engine_events_stream",
    "engine_events_stream_summary",
    "engine_events_meta",
    "sqlite_master",
    "stream",  # the streams, in the step-2 migration that gives each one its summary row
)

_LITERAL = r"(?:-?\d+(?:\.\d+)?|'(?:[^']|'')*'|[Xx]'[0-9A-Fa-f]*'|NULL)"


def _pattern(statement: str) -> re.Pattern[str]:
    parts = re.split(r":[a-z_]+", statement)
    return re.compile(_LITERAL.join(re.escape(part) for part in parts))


def _parameters(statement: str) -> dict[str, object]:
    return {name: 1 for name in re.findall(r":([a-z_]+)", statement)}


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sqlite3.Connection]:
    """A book database with many streams and events, so that a scan would show."""
    book_dir = tmp_path_factory.mktemp("filled")
    conn = connect(book_dir / DATABASE_FILE_NAME)
    for stream in range(3):
        with Emitter.open(conn, book_dir, engine_run_id=f"run-{stream}") as emitter:
            for step in range(30):
                with emitter.transaction():
                    for index in range(20):
                        emitter.emit(UnitDone(unit=f"u{step}", index=index))
                    emitter.emit(Spend(committed_micro_usd=step))
    conn.execute("ANALYZE")
    yield conn
    conn.close()


@pytest.mark.parametrize("statement", QUERIES)
def test_no_statement_scans_the_outbox(filled: sqlite3.Connection, statement: str) -> None:
    """EXPLAIN QUERY PLAN of each listed statement shows no scan and no sort of the outbox."""
    plan = filled.execute(f"EXPLAIN QUERY PLAN {statement}", _parameters(statement)).fetchall()
    details = [row[3] for row in plan]
    for detail in details:
        if detail.startswith("SCAN"):
            assert detail.split()[1] in _SMALL_TABLES, f"{statement!r} scans: {details}"
        assert "TEMP B-TREE" not in detail or "engine_events_outbox" not in statement, details


def _assert_no_outbox_scan(conn: sqlite3.Connection, statement: str) -> None:
    plan = conn.execute(f"EXPLAIN QUERY PLAN {statement}", _parameters(statement)).fetchall()
    details = [row[3] for row in plan]
    for detail in details:
        if detail.startswith("SCAN"):
            assert detail.split()[1] in _SMALL_TABLES, f"{statement!r} scans: {details}"
        assert "TEMP B-TREE" not in detail, details


@pytest.mark.parametrize("version", range(1, len(MIGRATIONS) + 1))
def test_no_migration_scans_the_outbox(filled: sqlite3.Connection, version: int) -> None:
    """Each data statement of each migration step reads the outbox by seeks only (the step-2 fill
    runs over a populated outbox): one per stream, never a scan or a sort of the events."""
    data_statements = [
        statement
        for statement in MIGRATIONS[version - 1]
        if not statement.startswith("CREATE TABLE")
    ]
    for statement in data_statements:
        _assert_no_outbox_scan(filled, statement)
    assert version == 1 or data_statements, "step 2 fills its table from the outbox"


def test_a_whole_life_runs_only_listed_statements(book_dir: Path) -> None:
    """Tracing open, every event type, a rollback, a death, recovery, pruning (at start, and inside
    the host's transaction), status and repair finds nothing unlisted."""
    conn = connect(book_dir / DATABASE_FILE_NAME)
    executed: list[str] = []
    conn.set_trace_callback(executed.append)
    with Emitter.open(conn, book_dir, engine_run_id="a") as emitter:
        with emitter.transaction():
            emitter.emit(Progress(phases={"x": PhaseCount(done=0, total=1)}))
            emitter.emit(UnitDone(unit="u", index=0))
            emitter.emit(Spend(committed_micro_usd=1))
            emitter.emit(BankStop(signature="s"))
            emitter.emit(Ceiling(shortfall_micro_usd=1))
        with pytest.raises(ValueError), emitter.transaction():
            emitter.emit(UnitDone(unit="u" * (1 << 20), index=1))
        with emitter.transaction():
            emitter.emit(
                Finished(
                    exit_code=ExitCode.CLEAN, units_done=1, units_total=1, committed_micro_usd=1
                )
            )
    died = Emitter.open(conn, book_dir, engine_run_id="b")
    with died.transaction():
        died.emit(Spend(committed_micro_usd=2))
    died._journal.close()  # dies without close(): its rows are at the end, past the watermark
    died._lock.close()
    Emitter.open(conn, book_dir, engine_run_id="c").close()  # recognises them there
    with (
        Emitter.open(conn, book_dir, engine_run_id="d", retention=dt.timedelta(0)) as pruning,
        pruning.transaction(),  # a prune at start, then one inside the host's transaction
    ):
        pruning.emit(Spend(committed_micro_usd=3))
        pruning.prune()
    read_status(conn)
    repair(conn, book_dir)
    conn.set_trace_callback(None)
    outbox = conn.execute("SELECT DISTINCT stream_no FROM engine_events_outbox").fetchall()
    assert outbox == [(4,)], "the earlier streams' rows were pruned"
    conn.close()

    patterns = [_pattern(statement) for statement in ALL_STATEMENTS]
    unlisted = [sql for sql in executed if not any(p.fullmatch(sql) for p in patterns)]
    assert executed and not unlisted, unlisted
    used = {
        statement
        for statement in QUERIES
        if any(_pattern(statement).fullmatch(sql) for sql in executed)
    }
    assert len(used) >= len(QUERIES) - 1, f"statements never exercised: {set(QUERIES) - used}"

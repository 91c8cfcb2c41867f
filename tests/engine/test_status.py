"""`engine-events status BOOK_DIR --json [--repair]`: the repair channel over a stopped run."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson

from engine_events import Ceiling, ExitCode, Finished, PhaseCount, Progress, Spend
from engine_events._emitter import Emitter
from engine_events._schema import DATABASE_FILE_NAME, SCHEMA_VERSION, connect


def status(book_dir: Path, *extra: str) -> tuple[int, dict[str, object]]:
    result = subprocess.run(
        [sys.executable, "-m", "engine_events._cli", "status", str(book_dir), "--json", *extra],
        capture_output=True,
        timeout=60,
        check=False,
    )
    return result.returncode, orjson.loads(result.stdout)


def test_status_reports_the_shape_of_the_contract(conn: sqlite3.Connection, book_dir: Path) -> None:
    """The report has every key docs/reference/engine-events-cli.md lists, read from SQLite, for the latest stream."""
    with Emitter.open(conn, book_dir, engine_run_id="r1", book_id="b-42") as emitter:
        with emitter.transaction():
            emitter.emit(Progress(phases={"draft": PhaseCount(done=2, total=5)}))
            emitter.emit(Spend(committed_micro_usd=700))
        with emitter.transaction():
            emitter.emit(Ceiling(shortfall_micro_usd=30))
            emitter.emit(
                Finished(
                    exit_code=ExitCode.CEILING,
                    units_done=2,
                    units_total=5,
                    committed_micro_usd=700,
                )
            )
    code, report = status(book_dir)
    assert code == 0
    assert report == {
        "book_id": "b-42",
        "engine_run_id": "r1",
        "streams": [{"engine_run_id": "r1", "last_seq": 5, "projected_seq": 5}],
        "journal": "ok",
        "progress": {"draft": {"done": 2, "total": 5}},
        "money": {"committed_micro_usd": 700},
        "ceiling": {"halted": True, "scope": "book", "shortfall_micro_usd": 30},
        "finished": {
            "outcome": "ceiling",
            "exit_code": 4,
            "stop": None,
            "refusal": None,
            "volume": {"units_done": 2, "units_total": 5},
            "money": {"committed_micro_usd": 700},
        },
    }


def test_money_carries_across_streams(book_dir: Path) -> None:
    """`money` is the ledger's latest cumulative spend, whichever stream said it last."""
    conn = connect(book_dir / DATABASE_FILE_NAME)
    with Emitter.open(conn, book_dir, engine_run_id="r1") as emitter, emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=500))
    Emitter.open(conn, book_dir, engine_run_id="r2").close()
    conn.close()
    code, report = status(book_dir)
    assert code == 0 and report["money"] == {"committed_micro_usd": 500}
    assert report["engine_run_id"] == "r2" and report["finished"] is None


def test_repair_projects_the_backlog_and_cuts_the_torn_tail(book_dir: Path) -> None:
    """--repair runs recovery steps (1) and (2) under the lock, then reports a projected journal."""
    conn = connect(book_dir / DATABASE_FILE_NAME)
    emitter = Emitter.open(conn, book_dir, engine_run_id="r1")
    conn.execute("BEGIN IMMEDIATE")
    emitter.emit(Spend(committed_micro_usd=5))
    emitter.emit(
        Finished(exit_code=ExitCode.CLEAN, units_done=1, units_total=1, committed_micro_usd=5)
    )
    conn.commit()  # committed, never projected: the process died
    emitter._lock.close()
    conn.close()
    with open(book_dir / "events.jsonl", "ab") as journal:
        journal.write(b'{"seq":2,"ty')

    code, report = status(book_dir)
    assert code == 0
    assert report["streams"] == [{"engine_run_id": "r1", "last_seq": 3, "projected_seq": 1}]
    assert report["finished"]["outcome"] == "clean"  # type: ignore[index]  # from SQLite, not the file

    code, report = status(book_dir, "--repair")
    assert code == 0
    assert report["streams"] == [{"engine_run_id": "r1", "last_seq": 3, "projected_seq": 3}]
    content = (book_dir / "events.jsonl").read_bytes()
    assert [orjson.loads(raw)["seq"] for raw in content.splitlines()] == [1, 2, 3]


def test_missing_database_is_a_clear_error(book_dir: Path) -> None:
    """A book with no database answers a typed error and a non-zero exit."""
    code, report = status(book_dir)
    assert code == 11 and report["error"] == "no_database"


def test_newer_schema_answers_13(conn: sqlite3.Connection, book_dir: Path) -> None:
    """A database of a newer schema is refused with 13 schema_mismatch, untouched."""
    Emitter.open(conn, book_dir).close()
    conn.execute(
        "UPDATE engine_events_meta SET value = ? WHERE key = 'schema_version'",
        (str(SCHEMA_VERSION + 1),),
    )
    with open(book_dir / "events.jsonl", "ab") as journal:
        journal.write(b'{"seq":2,"ty')  # a torn tail that a repair would cut
    before = (book_dir / "events.jsonl").read_bytes()
    code, report = status(book_dir, "--repair")
    assert code == 13 and report["error"] == "schema_mismatch"
    assert (book_dir / "events.jsonl").read_bytes() == before, "nothing written"

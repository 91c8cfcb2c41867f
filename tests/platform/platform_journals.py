"""Hand-made journal lines and small helpers shared by the platform tests.

The lines are built here (not with the engine's package): the platform side meets the engine only
in the file format.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from psycopg import conninfo

from platform_ingest import BookPass, Database, PassReport, register_book
from platform_ingest._show import show_state

BIN = Path(sys.executable).parent
"""Where the project's commands are installed (next to this interpreter)."""
DEADLINE_S = 90.0
T = "2026-11-30T02:08:57.213Z"
RUN_A = "0b6c1f3e-8a57-4d0b-9a63-2f7c4f0e5a11"
RUN_B = "5d2e9c40-3b1a-4f8e-8c7d-6a9b0c1d2e33"
RUN_C = "9a1b2c3d-0000-4000-8000-00000000000c"


def line(seq: int, kind: str, data: Any, time: str = T) -> bytes:
    return (
        json.dumps({"seq": seq, "type": kind, "time": time, "data": data}, separators=(",", ":"))
        + "\n"
    ).encode()


def hello(run: str = RUN_A, book: str = "book-1", version: str = "1.3") -> bytes:
    data = {
        "stream_version": version,
        "engine_run_id": run,
        "book_id": book,
        "chunker_version": "c1",
    }
    return line(1, "hello", data)


def spend(seq: int, amount: Any) -> bytes:
    return line(seq, "spend", {"committed_micro_usd": amount})


def progress(seq: int, **phases: tuple[int, int]) -> bytes:
    return line(
        seq,
        "progress",
        {
            "phases": {
                name: {"done": done, "total": total} for name, (done, total) in phases.items()
            }
        },
    )


def unit_done(seq: int, unit: str, index: int) -> bytes:
    return line(seq, "unit_done", {"unit": unit, "index": index})


def ceiling(seq: int, shortfall: int | None = 250) -> bytes:
    data: dict[str, Any] = {"halted": True, "scope": "book"}
    if shortfall is not None:
        data["shortfall_micro_usd"] = shortfall
    return line(seq, "ceiling", data)


def bank_stop(seq: int, signature: str = "sig-7") -> bytes:
    return line(seq, "bank_stop", {"signature": signature})


def finished(
    seq: int,
    code: int = 0,
    outcome: str = "clean",
    *,
    stop: str | None = None,
    refusal: str | None = None,
    money: int = 2000,
) -> bytes:
    data = {
        "outcome": outcome,
        "exit_code": code,
        "stop": stop,
        "refusal": refusal,
        "volume": {"units_done": 2, "units_total": 2},
        "money": {"committed_micro_usd": money},
    }
    return line(seq, "finished", data)


POISON_UNIT = "poison"
"""A unit id Postgres refuses to store once `refuse_poison_units` ran: it raises SQLSTATE 54000
(program_limit_exceeded, what an index row too large raises). The stream's bounds keep every value
a reader accepts storable, so a real refusal needs a value no reader lets through."""


def refuse_poison_units(connection: Any) -> None:
    """Make Postgres refuse the run_units row of `POISON_UNIT`, through a trigger."""
    connection.execute(
        """CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
             IF NEW.unit = 'poison' THEN
               RAISE EXCEPTION 'index row size exceeds maximum' USING ERRCODE = '54000';
             END IF;
             RETURN NEW;
           END $$"""
    )
    connection.execute(
        "CREATE TRIGGER refuse_poison BEFORE INSERT ON run_units"
        " FOR EACH ROW EXECUTE FUNCTION refuse_poison()"
    )


def write(book_dir: Path, *lines: bytes) -> None:
    """Replace the journal with these bytes (a new file: a new inode for each call)."""
    path = book_dir / "events.jsonl"
    temporary = book_dir / "events.jsonl.tmp"
    temporary.write_bytes(b"".join(lines))
    temporary.replace(path)


def append(book_dir: Path, *lines: bytes) -> None:
    with open(book_dir / "events.jsonl", "ab") as file:
        file.write(b"".join(lines))


def sweep(db: Database, book_dir: Path, *, auto: bool = True, **options: Any) -> PassReport:
    book = register_book(db, book_dir)
    return BookPass(db, book.book_id, mode="auto" if auto else "named", **options).run()


def book_state(db: Database, book_dir: Path) -> dict[str, Any]:
    """The book's entry of `show --json`."""
    (book,) = show_state(db, [str(book_dir)])["books"]
    found: dict[str, Any] = book
    return found


def attempts(db: Database, book_dir: Path) -> dict[str, dict[str, Any]]:
    """engine_run_id -> its attempt as `show --json` prints it."""
    found: dict[str, dict[str, Any]] = {}
    for run in book_state(db, book_dir)["runs"]:
        for attempt in run["attempts"]:
            found[attempt["engine_run_id"]] = attempt
    return found


def only_run(db: Database, book_dir: Path) -> dict[str, Any]:
    (run,) = book_state(db, book_dir)["runs"]
    found: dict[str, Any] = run
    return found


def dsn_for(admin_dsn: str, database: str) -> str:
    """The admin DSN pointed at another database of the same server."""
    params = conninfo.conninfo_to_dict(admin_dsn)
    params["dbname"] = database
    return conninfo.make_conninfo(**{key: str(value) for key, value in params.items()})


# --- workers as real processes ---------------------------------------------------------------


def _environment() -> dict[str, str]:
    environment = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    environment.pop("PLATFORM_INGEST_DSN", None)
    return environment


def start_worker(
    dsn: str, root: Path, log: Path, *options: str, worker_id: str | None = None
) -> subprocess.Popen[bytes]:
    argv = [str(BIN / "platform-ingest"), "--dsn", dsn, "run", str(root), "--auto", *options]
    if worker_id is not None:
        argv += ["--worker-id", worker_id]
    with open(log, "wb") as stderr:
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, env=_environment())


def log_entries(log: Path) -> list[dict[str, Any]]:
    entries = []
    content = log.read_text()
    # The worker may be writing right now: only complete lines are judged.
    for text in content[: content.rfind("\n") + 1].splitlines():
        entry = json.loads(text)  # every line is one JSON object
        assert isinstance(entry, dict)
        entries.append(entry)
    return entries


def wait_for(what: str, check: Callable[[], bool], deadline_s: float = DEADLINE_S) -> None:
    """Poll `check` until it holds; fail with `what` after the deadline (a bound, not a speed)."""
    end = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > end:
            pytest.fail(f"not reached within {deadline_s:.0f} s: {what}")
        time.sleep(0.1)

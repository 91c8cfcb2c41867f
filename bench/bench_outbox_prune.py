"""Outbox retention benchmark: the outbox's bytes before and after pruning, and the prune's pace
against its floor, measured in the same run.

    python bench/bench_outbox_prune.py [--streams N] [--events N] [--dir DIR] [--json]

1. A book lived by `--streams` processes, each writing `--events` events (progress, unit_done and
   spend, 100 to a checkpoint) and a `finished`, then closing. The outbox's bytes (its table and its
   primary key, in SQLite pages, by the `dbstat` table) are measured; then a new engine prunes with a
   retention of zero, batch after batch, until nothing is left to prune; the bytes are measured
   again. Printed: both, and their ratio. The database file itself keeps its size: SQLite keeps the
   freed pages for the rows that come next (printed too), so a book with a retention stops growing.
2. The prune's pace in rows per second, against the floor: bare `DELETE`s of the same number of
   rows of the same size, in batches of the same size, each batch its own durable commit (WAL,
   synchronous=FULL), from a table shaped like the outbox.
`status --json` is checked to read the same before and after. With --json the figures, and the load
average before and after them, are printed as one JSON object on stdout (the prose goes to stderr),
for `bench/run_all.py`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from _report import load_average
from engine_events import Emitter, ExitCode, Finished, PhaseCount, Progress, Spend, UnitDone
from engine_events._prune import PRUNE_ROWS_MAX
from engine_events._schema import DATABASE_FILE_NAME, connect
from engine_events.readers.status import read_status

OUTBOX_OBJECTS = ("engine_events_outbox", "sqlite_autoindex_engine_events_outbox_1")
EVENTS_PER_CHECKPOINT = 100


def live(conn: sqlite3.Connection, book: Path, streams: int, events: int) -> None:
    """`streams` processes, one after the other, each `events` events then `finished`."""
    for stream in range(streams):
        with Emitter.open(conn, book, engine_run_id=f"run-{stream}") as emitter:
            spent = 0
            for start in range(0, events, EVENTS_PER_CHECKPOINT):
                with emitter.transaction():
                    for index in range(start, min(events, start + EVENTS_PER_CHECKPOINT)):
                        if index % 3 == 0:
                            phases = {"draft": PhaseCount(done=index, total=events)}
                            emitter.emit(Progress(phases=phases))
                        elif index % 3 == 1:
                            emitter.emit(UnitDone(unit=f"unit-{index:07d}", index=index))
                        else:
                            spent += 1250
                            emitter.emit(Spend(committed_micro_usd=spent))
            with emitter.transaction():
                emitter.emit(
                    Finished(
                        exit_code=ExitCode.CLEAN,
                        units_done=events,
                        units_total=events,
                        committed_micro_usd=spent,
                    )
                )


def outbox_bytes(conn: sqlite3.Connection) -> int:
    """The pages the outbox's table and primary key take, in bytes."""
    marks = ", ".join("?" for _ in OUTBOX_OBJECTS)
    (size,) = conn.execute(
        f"SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name IN ({marks})", OUTBOX_OBJECTS
    ).fetchone()
    return int(size)


def file_bytes(conn: sqlite3.Connection, database: Path) -> tuple[int, int]:
    """The database file's size once the WAL is checkpointed into it, and its free pages' bytes."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    (free_pages,) = conn.execute("PRAGMA freelist_count").fetchone()
    return database.stat().st_size, int(free_pages) * int(page_size)


def prune_all(conn: sqlite3.Connection, book: Path) -> tuple[int, int, float]:
    """Prune with a retention of zero until nothing is left; (rows, batches, seconds)."""
    emitter = Emitter.open(conn, book, engine_run_id="pruner")
    rows = batches = 0
    started = time.perf_counter()
    while True:
        result = emitter.prune(dt.timedelta(0))
        rows += result.rows_deleted
        batches += 1
        if not result.limit_reached:
            break
    elapsed = time.perf_counter() - started
    emitter.close()
    return rows, batches, elapsed


def floor_rate(work: Path, rows: int, line_bytes: int) -> float:
    """Bare batched DELETEs of `rows` rows of `line_bytes` from an outbox-shaped table."""
    conn = sqlite3.connect(work / "floor.sqlite3", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(
        "CREATE TABLE t (stream_no INTEGER NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL,"
        " PRIMARY KEY (stream_no, seq))"
    )
    line = b"x" * line_bytes
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT INTO t VALUES (1, ?, ?)", ((seq, line) for seq in range(1, rows + 1)))
    conn.commit()
    started = time.perf_counter()
    for through in range(PRUNE_ROWS_MAX, rows + PRUNE_ROWS_MAX, PRUNE_ROWS_MAX):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM t WHERE stream_no = 1 AND seq <= ?", (through,))
        conn.commit()
    elapsed = time.perf_counter() - started
    conn.close()
    return rows / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=10, help="processes that lived (10)")
    parser.add_argument("--events", type=int, default=20_000, help="events each (20000)")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args()
    out = sys.stderr if args.json else sys.stdout
    load_before = load_average()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}; "
        f"load average {load_before}",
        file=out,
    )
    with tempfile.TemporaryDirectory(dir=args.dir) as name:
        work = Path(name)
        book = work / "book"
        book.mkdir()
        database = book / DATABASE_FILE_NAME
        conn = connect(database)
        live(conn, book, args.streams, args.events)
        rows_before = conn.execute("SELECT count(*) FROM engine_events_outbox").fetchone()[0]
        (line_bytes,) = conn.execute(
            "SELECT avg(length(line)) FROM engine_events_outbox"
        ).fetchone()
        before, (file_before, free_before) = outbox_bytes(conn), file_bytes(conn, database)
        status_before = read_status(conn)

        pruned, batches, elapsed = prune_all(conn, book)

        after, (file_after, free_after) = outbox_bytes(conn), file_bytes(conn, database)
        status_after = read_status(conn)
        del status_after["streams"][-1]  # the pruner's own stream
        status_before["engine_run_id"] = status_after["engine_run_id"] = None
        status_before["finished"] = status_after["finished"] = None  # the latest stream's
        if status_after != status_before:
            raise SystemExit("status --json reads differently after pruning")
        conn.close()
        floor = floor_rate(work, pruned, round(line_bytes))
    rate = pruned / elapsed
    load_after = load_average()
    print(
        f"outbox bytes before pruning : {before:>14,} ({rows_before:,} rows of "
        f"{line_bytes:.0f} bytes on average, {args.streams} finished streams)",
        file=out,
    )
    print(
        f"outbox bytes after pruning  : {after:>14,}   ratio after/before {after / before:.5f} "
        f"({pruned:,} rows pruned in {batches} batches of at most {PRUNE_ROWS_MAX})",
        file=out,
    )
    print(
        f"database file               : {file_before:>14,} before, {file_after:,} after; free "
        f"pages {free_before:,} before, {free_after:,} after (reused by the next rows)",
        file=out,
    )
    print(
        f"prune pace                  : {rate:>14,.0f} rows/s   floor {floor:,.0f} rows/s   "
        f"ratio {rate / floor:.2f} ({elapsed:.2f} s in all)",
        file=out,
    )
    print(f"load average after          : {load_after}", file=out)
    if args.json:
        figures = [
            {
                "name": f"outbox bytes after pruning {pruned:,} rows of {args.streams} finished "
                "streams (retention zero)",
                "unit": "bytes",
                "value": after,
                "baseline_name": "the outbox's bytes before pruning",
                "baseline": before,
                "ratio": after / before,
                "target": "only the live stream's rows left",
            },
            {
                "name": f"prune pace, batches of {PRUNE_ROWS_MAX} rows each committed durably",
                "unit": "rows/s",
                "value": rate,
                "baseline_name": "floor: bare batched DELETEs of same-size rows, WAL+FULL",
                "baseline": floor,
                "ratio": rate / floor,
                "target": "ratio >= 0.4 (each line is read for its time)",
            },
        ]
        notes = [
            f"Load average (1, 5, 15 min) before: {load_before}; after: {load_after}. The "
            "database file keeps its size; the freed pages hold the rows that come next."
        ]
        print(json.dumps({"bench": "outbox_prune", "figures": figures, "notes": notes}))


if __name__ == "__main__":
    main()

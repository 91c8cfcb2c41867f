"""Emitter benchmarks, each against its physical floor measured in the same run.

    python bench/bench_emitter.py [--events N] [--memory-events N] [--dir DIR] [--json]

1. Durable per-event rate: one checkpoint transaction carrying one event, committed durably and
   projected with write+fsync, against the floor: a bare SQLite WAL commit with synchronous=FULL of a
   row of the same size plus a bare write+fsync of a line of the same size.
2. Batched: a checkpoint transaction carrying 100 events (target: 50,000 events/s or more), against
   the floor of the same batch: ONE bare SQLite WAL+FULL commit of 100 rows of the same bytes
   (inserted with one executemany) plus ONE bare write+fsync of the same 100 lines. The commit and
   the fsync are paid once per 100 events, so what separates the two is the per-event Python.
In both, floor and project alternate in rounds (so a disk or a neighbour slowing down for a while
weighs on both) and the ratio is the median of the rounds' ratios. The load average
(/proc/loadavg) is noted before and after.
3. Memory: peak RSS of a process that projects 1,000,000 committed events (target: under 100 MB),
   measured in a fresh child process so that nothing else is counted.
The directory should be on the disk the engine would use (default: a temporary directory).
With --json the figures are printed as one JSON object on stdout (the prose goes to stderr), for
`bench/run_all.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engine_events import Spend, UnitDone
from engine_events._emitter import Emitter
from engine_events._schema import DATABASE_FILE_NAME, connect

HOST_TABLE = "CREATE TABLE checkpoint (step INTEGER PRIMARY KEY, state TEXT NOT NULL)"
HOST_INSERT = "INSERT INTO checkpoint (step, state) VALUES (?, 'done')"


def floor_rate(work: Path, events: int, line: bytes) -> float:
    """Bare SQLite WAL+FULL commit of a same-size row, then bare write+fsync of a same-size line."""
    conn = sqlite3.connect(work / "floor.sqlite3", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, line BLOB NOT NULL)")
    fd = os.open(work / "floor.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    started = time.perf_counter()
    for step in range(events):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (id, line) VALUES (?, ?)", (step, line))
        conn.commit()
        os.write(fd, line)
        os.fsync(fd)
    elapsed = time.perf_counter() - started
    os.close(fd)
    conn.close()
    return events / elapsed


def batched_floor_rate(work: Path, events: int, per_transaction: int, line: bytes) -> float:
    """Per checkpoint: one bare WAL+FULL commit of `per_transaction` rows of `line`, then one bare
    write+fsync of the same lines."""
    conn = sqlite3.connect(work / "floor-batched.sqlite3", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, line BLOB NOT NULL)")
    fd = os.open(work / "floor-batched.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    transactions = max(1, events // per_transaction)
    lines = line * per_transaction
    started = time.perf_counter()
    for step in range(transactions):
        first = step * per_transaction
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO t (id, line) VALUES (?, ?)",
            ((first + index, line) for index in range(per_transaction)),
        )
        conn.commit()
        os.write(fd, lines)
        os.fsync(fd)
    elapsed = time.perf_counter() - started
    os.close(fd)
    conn.close()
    return transactions * per_transaction / elapsed


def load_average() -> str:
    path = Path("/proc/loadavg")
    return " ".join(path.read_text().split()[:3]) if path.exists() else "unknown"


def emitter_rate(work: Path, events: int, per_transaction: int) -> float:
    book = work / f"book-{per_transaction}"
    book.mkdir()
    conn = connect(book / DATABASE_FILE_NAME)
    conn.execute(HOST_TABLE)
    emitter = Emitter.open(conn, book, engine_run_id=f"bench-{per_transaction}")
    transactions = max(1, events // per_transaction)
    started = time.perf_counter()
    for step in range(transactions):
        with emitter.transaction():
            conn.execute(HOST_INSERT, (step,))
            for _ in range(per_transaction):
                emitter.emit(Spend(committed_micro_usd=step * 1000))
    elapsed = time.perf_counter() - started
    emitter.close()
    conn.close()
    return transactions * per_transaction / elapsed


def memory_child(work: Path, events: int) -> None:
    """Commit `events` rows unprojected (as after a long degraded episode), then project them all."""
    book = work / "book-memory"
    book.mkdir()
    conn = connect(book / DATABASE_FILE_NAME)
    emitter = Emitter.open(conn, book, engine_run_id="bench-memory")
    conn.execute("BEGIN IMMEDIATE")
    for index in range(events):
        emitter.emit(UnitDone(unit=f"unit-{index:07d}", index=index))
    conn.commit()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    emitter.flush()
    elapsed = time.perf_counter() - started
    emitter.close()
    conn.close()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    size = (book / "events.jsonl").stat().st_size
    print(f"{events} {elapsed:.3f} {size} {before} {peak_kib}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batched-events", type=int, default=200_000)
    parser.add_argument("--memory-events", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    parser.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    out = sys.stderr if args.json else sys.stdout
    figures: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(dir=args.dir) as name:
        work = Path(name)
        if args.memory_child is not None:
            memory_child(work, args.memory_child)
            return
        load_before = load_average()
        line = b'{"seq":7,"type":"spend","time":"2026-11-30T02:08:57.213Z","data":{"committed_micro_usd":1250000}}\n'
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"SQLite {sqlite3.sqlite_version}",
            file=out,
        )
        # Floor and project alternate in rounds, so that a disk or a neighbour slowing down for a
        # while weighs on both; the ratio is the median of the rounds' ratios.
        ratios, floors, singles = [], [], []
        for round_number in range(args.rounds):
            round_dir = work / f"round-{round_number}"
            round_dir.mkdir()
            floors.append(floor_rate(round_dir, args.events // args.rounds, line))
            singles.append(emitter_rate(round_dir, args.events // args.rounds, 1))
            ratios.append(singles[-1] / floors[-1])
        floor, single = statistics.median(floors), statistics.median(singles)
        print(
            f"durable per-event rate : {single:10.0f} events/s   floor {floor:10.0f}/s   "
            f"ratio {statistics.median(ratios):.2f} (target >= 0.80; rounds: "
            f"{', '.join(f'{r:.2f}' for r in ratios)})",
            file=out,
        )
        figures.append(
            {
                "name": "durable per-event rate (one event per checkpoint transaction)",
                "unit": "events/s",
                "value": single,
                "baseline_name": "floor: bare SQLite WAL+FULL commit, then bare write+fsync",
                "baseline": floor,
                "ratio": statistics.median(ratios),
                "target": "ratio >= 0.80",
            }
        )
        batched_ratios, batched_floors, batcheds = [], [], []
        per_round = args.batched_events // args.rounds
        for round_number in range(args.rounds):
            round_dir = work / f"batched-{round_number}"
            round_dir.mkdir()
            batched_floors.append(batched_floor_rate(round_dir, per_round, 100, line))
            batcheds.append(emitter_rate(round_dir, per_round, 100))
            batched_ratios.append(batcheds[-1] / batched_floors[-1])
        batched, batched_floor = statistics.median(batcheds), statistics.median(batched_floors)
        batched_ratio = statistics.median(batched_ratios)
        print(
            f"100 events/transaction : {batched:10.0f} events/s   floor {batched_floor:10.0f}/s   "
            f"ratio {batched_ratio:.2f} (target >= 50,000 events/s; rounds: "
            f"{', '.join(f'{r:.2f}' for r in batched_ratios)})",
            file=out,
        )
        figures.append(
            {
                "name": "batched: 100 events per checkpoint transaction",
                "unit": "events/s",
                "value": batched,
                "baseline_name": "floor: one bare SQLite WAL+FULL commit of the 100 rows, "
                "then one bare write+fsync of the 100 lines",
                "baseline": batched_floor,
                "ratio": batched_ratio,
                "target": ">= 50,000 events/s",
            }
        )
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                "--memory-child",
                str(args.memory_events),
                "--dir",
                str(work),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        events, elapsed, size, before_kib, peak_kib = child.stdout.split()
        print(
            f"project {int(events):,} committed events: {float(elapsed):.1f} s, "
            f"{int(size) / 2**20:.0f} MiB written, peak RSS {int(peak_kib) / 1024:.0f} MB "
            f"(before projecting {int(before_kib) / 1024:.0f} MB; target < 100 MB)",
            file=out,
        )
        figures.append(
            {
                "name": f"peak RSS projecting {int(events):,} committed events "
                f"({int(size) / 2**20:.0f} MiB, {float(elapsed):.1f} s)",
                "unit": "MB",
                "value": int(peak_kib) / 1024,
                "baseline_name": "RSS of the same process before projecting",
                "baseline": int(before_kib) / 1024,
                "ratio": int(peak_kib) / int(before_kib),
                "target": "< 100 MB",
            }
        )
    note = f"load average (1, 5, 15 min) before: {load_before}; after: {load_average()}"
    print(note, file=out)
    if args.json:
        print(json.dumps({"bench": "emitter", "figures": figures, "notes": [note]}))


if __name__ == "__main__":
    main()

"""Emitter benchmarks, each against its physical floor measured in the same run.

    python bench/bench_emitter.py [--events N] [--memory-events N] [--dir DIR] [--json]

1. Durable per-event rate: one checkpoint transaction carrying one event, committed durably and
   projected with write+fsync, against the floor: a bare SQLite WAL commit with synchronous=FULL of a
   row of the same size plus a bare write+fsync of a line of the same size.
2. Batched: a checkpoint transaction carrying 100 events (target: 50,000 events/s or more), against
   the floor of the same batch: ONE bare SQLite WAL+FULL commit of 100 rows of the same bytes
   (inserted with one executemany) plus ONE bare write+fsync of the same 100 lines. The commit and
   the fsync are paid once per 100 events, so what separates the two is the per-event Python.
In both, floor and project alternate checkpoint by checkpoint, in rounds (so a disk or a neighbour
slowing down for a while weighs on both alike), and the ratio is the median of the rounds' ratios.
The load average (/proc/loadavg) is noted before and after.
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

from _report import load_average
from engine_events import Spend, UnitDone
from engine_events._emitter import Emitter
from engine_events._schema import DATABASE_FILE_NAME, connect

HOST_TABLE = "CREATE TABLE checkpoint (step INTEGER PRIMARY KEY, state TEXT NOT NULL)"
HOST_INSERT = "INSERT INTO checkpoint (step, state) VALUES (?, 'done')"


class Floor:
    """The floor of one checkpoint of `per_transaction` events: one bare WAL+FULL commit of that
    many rows of `line` (one execute for one row, one executemany for more), then one bare
    write+fsync of the same lines."""

    def __init__(self, work: Path, per_transaction: int, line: bytes) -> None:
        self.conn = sqlite3.connect(work / "floor.sqlite3", isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, line BLOB NOT NULL)")
        self.fd = os.open(work / "floor.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.per_transaction = per_transaction
        self.line = line
        self.lines = line * per_transaction
        self.rows = 0

    def checkpoint(self) -> None:
        first, self.rows = self.rows, self.rows + self.per_transaction
        self.conn.execute("BEGIN IMMEDIATE")
        if self.per_transaction == 1:
            self.conn.execute("INSERT INTO t (id, line) VALUES (?, ?)", (first, self.line))
        else:
            self.conn.executemany(
                "INSERT INTO t (id, line) VALUES (?, ?)",
                ((first + index, self.line) for index in range(self.per_transaction)),
            )
        self.conn.commit()
        os.write(self.fd, self.lines)
        os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)
        self.conn.close()


class Project:
    """One checkpoint of the host: its own row and `per_transaction` events in one transaction,
    committed, then projected (write+fsync)."""

    def __init__(self, work: Path, per_transaction: int) -> None:
        book = work / "book"
        book.mkdir()
        self.conn = connect(book / DATABASE_FILE_NAME)
        self.conn.execute(HOST_TABLE)
        self.emitter = Emitter.open(self.conn, book, engine_run_id="bench")
        self.per_transaction = per_transaction
        self.step = 0

    def checkpoint(self) -> None:
        self.step += 1
        with self.emitter.transaction():
            self.conn.execute(HOST_INSERT, (self.step,))
            for _ in range(self.per_transaction):
                self.emitter.emit(Spend(committed_micro_usd=self.step * 1000))

    def close(self) -> None:
        self.emitter.close()
        self.conn.close()


def alternate(work: Path, events: int, per_transaction: int, line: bytes) -> tuple[float, float]:
    """(floor, project) in events/s over `events` events, their checkpoints alternating one for
    one (which goes first alternating too), so that a disk slowing down for a while weighs on
    both alike."""
    (work / "floor").mkdir()
    (work / "project").mkdir()
    floor, project = (
        Floor(work / "floor", per_transaction, line),
        Project(work / "project", per_transaction),
    )
    spent = {"floor": 0.0, "project": 0.0}
    transactions = max(1, events // per_transaction)
    try:
        for step in range(transactions):
            for name in ("floor", "project") if step % 2 == 0 else ("project", "floor"):
                started = time.perf_counter()
                (floor if name == "floor" else project).checkpoint()
                spent[name] += time.perf_counter() - started
    finally:
        floor.close()
        project.close()
    done = transactions * per_transaction
    return done / spent["floor"], done / spent["project"]


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
    parser.add_argument("--rounds", type=int, default=11)
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
        # Floor and project alternate checkpoint by checkpoint within each round, so that a disk
        # or a neighbour slowing down for a while weighs on both; the ratio is the median of the
        # rounds' ratios.
        ratios, floors, singles = [], [], []
        for round_number in range(args.rounds):
            round_dir = work / f"round-{round_number}"
            round_dir.mkdir()
            floor_rate, single_rate = alternate(round_dir, args.events // args.rounds, 1, line)
            floors.append(floor_rate)
            singles.append(single_rate)
            ratios.append(single_rate / floor_rate)
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
            floor_rate, batched_rate = alternate(round_dir, per_round, 100, line)
            batched_floors.append(floor_rate)
            batcheds.append(batched_rate)
            batched_ratios.append(batched_rate / floor_rate)
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

"""Benchmark of fan-in: one worker (then two) over thousands of books, each growing a line at a time.

    python bench/bench_fanin.py [--books 5000] [--rates 100,1000,3000,5000] [--seconds 10]
        [--two-workers-rate 5000] [--big-lines 100000] [--dsn DSN] [--json]

The load a platform has: many books running at once, each writing a line now and then, so that
each line is the only new line of its book when the worker reads it. N book directories (a hello
and two `unit_done` lines each) are applied first; then a writer appends one `unit_done` line at a
time to a book picked at random, at a steady aggregate rate, for `--seconds` per rate (no fsync:
what the worker needs is visibility; an engine's fsync is paid on the engine's host).

Figures, for each rate:

- latency from the write's return to the commit of the transaction that applied the line (a
  deferred trigger stamps `clock_timestamp()` and the transaction id at the commit, same clock):
  p50, p99, max;
- commits per second and lines per commit (distinct transaction ids of the stamps);
- CPU per line of the worker process and of its Postgres backends (every session named
  `platform-ingest ...`), from /proc, over the rate's window; and of the worker's, its loop
  thread's (the rest is its helper threads: the file-change watcher's two above all).

The reference, in the same run: a big pass (one book, `--big-lines` lines written at once) under
the same worker, its CPU per line, worker and backend. The ratio `spread / big` is the cost of a
line's spread over books.

Two workers: both on the same books at `--two-workers-rate` (set it past one worker's knee): the
lines applied per second by each configuration while the writer runs, and their ratio.

Without --dsn an embedded Postgres is started in a temporary directory and removed at the end.
Nothing here is a pass/fail check: the test suite has no timed assertion.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import math
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import psycopg

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from _report import FIGURES, figure, load_average, prose_to, say  # noqa: E402
from _report import fresh_database as empty_database  # noqa: E402
from platform_ingest import Database, migrate  # noqa: E402
from platform_ingest.store.embedded import embedded_postgres  # noqa: E402

BIN = Path(sys.executable).parent
TIME = "2026-11-30T02:08:57.213Z"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
WORKER_SESSIONS = "application_name LIKE 'platform-ingest %' AND datname = current_database()"


def line(seq: int, kind: str, data: dict[str, object]) -> bytes:
    return orjson.dumps({"seq": seq, "type": kind, "time": TIME, "data": data}) + b"\n"


def hello(book_id: str) -> bytes:
    data: dict[str, object] = {
        "stream_version": "1.3",
        "engine_run_id": str(uuid.uuid4()),
        "book_id": book_id,
        "chunker_version": "c1",
    }
    return line(1, "hello", data)


def unit(seq: int) -> bytes:
    return line(seq, "unit_done", {"unit": f"u-{seq:07d}", "index": seq})


def fresh_database(admin_dsn: str, name: str) -> str:
    dsn = empty_database(admin_dsn, name)
    db = Database(dsn)
    migrate(db)
    db.close()
    return dsn


def install_stamp(connection: psycopg.Connection[Any]) -> None:
    """A deferred trigger on `attempts`: the cursor a transaction moved, its attempt, the
    transaction's id and `clock_timestamp()` as it reaches its commit."""
    connection.execute(
        "CREATE TABLE bench_commits (attempt_id bigint, seq bigint, txid bigint, at timestamptz)"
    )
    connection.execute(
        "CREATE FUNCTION bench_stamp() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " INSERT INTO bench_commits VALUES"
        " (NEW.attempt_id, NEW.last_seq, txid_current(), clock_timestamp()); RETURN NULL;"
        " END $$"
    )
    connection.execute(
        "CREATE CONSTRAINT TRIGGER bench_stamp AFTER UPDATE ON attempts"
        " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bench_stamp()"
    )


@contextlib.contextmanager
def workers(dsn: str, root: Path, logs: Path, count: int) -> Iterator[list[int]]:
    processes = []
    try:
        for index in range(count):
            with open(logs / f"worker-{index}.log", "ab") as stderr:
                processes.append(
                    subprocess.Popen(
                        [
                            str(BIN / "platform-ingest"),
                            "--dsn",
                            dsn,
                            "run",
                            str(root),
                            "--auto",
                            "--no-compact",
                        ],
                        stderr=stderr,
                    )
                )
        yield [process.pid for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            process.wait(timeout=60)


def scalar(connection: psycopg.Connection[Any], query: str, params: tuple[Any, ...] = ()) -> int:
    row = connection.execute(query, params).fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def wait_until(
    connection: psycopg.Connection[Any], query: str, value: int, timeout_s: float = 600
) -> bool:
    start = time.monotonic()
    while scalar(connection, query) < value:
        if time.monotonic() - start > timeout_s:
            return False
        time.sleep(0.02)
    return True


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """CPU time of a process (all its threads), or of one of its threads."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def loop_cpu_of(pids: list[int]) -> float:
    """CPU time of the workers' loop threads (a process's first thread runs its loop; the others
    are the file-change watcher's two, the control listener's, the housekeeping's)."""
    return sum(cpu_seconds(pid, pid) for pid in pids)


def backend_pids(connection: psycopg.Connection[Any]) -> list[int]:
    rows = connection.execute(f"SELECT pid FROM pg_stat_activity WHERE {WORKER_SESSIONS}")
    return [int(pid) for (pid,) in rows.fetchall()]


@dataclass
class Sample:
    rate: int
    workers: int
    lines: int
    applied_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    commits_per_s: float
    lines_per_commit: float
    worker_cpu_us_per_line: float
    loop_cpu_us_per_line: float
    """Of the worker's CPU, its loop thread's (passes, groups, survey, scrub, wake-ups handled)."""
    backend_cpu_us_per_line: float
    unapplied: int


@dataclass
class Books:
    root: Path
    ids: list[str]
    attempt_of: dict[str, int]
    next_seq: dict[str, int]


def make_books(connection: psycopg.Connection[Any], root: Path, count: int) -> Books:
    ids = []
    for number in range(count):
        book_id = f"book-{number:06d}"
        (root / book_id).mkdir(parents=True)
        (root / book_id / "events.jsonl").write_bytes(hello(book_id) + unit(2) + unit(3))
        ids.append(book_id)
    return Books(root, ids, {}, dict.fromkeys(ids, 4))


def attempts_by_book(connection: psycopg.Connection[Any]) -> dict[str, int]:
    rows = connection.execute(
        "SELECT b.path, a.attempt_id FROM attempts a JOIN books b USING (book_id)"
    ).fetchall()
    return {Path(str(path)).name: int(attempt_id) for path, attempt_id in rows}


def cpu_of(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def offered(
    books: Books, rate: int, seconds: float, rng: random.Random
) -> list[tuple[str, int, float]]:
    """Append one line at a time to random books at `rate` lines/s; (book, seq, written at)."""
    written = []
    total = int(rate * seconds)
    started = time.monotonic()
    for number in range(total):
        due = started + number / rate
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        book_id = rng.choice(books.ids)
        seq = books.next_seq[book_id]
        books.next_seq[book_id] = seq + 1
        fd = os.open(books.root / book_id / "events.jsonl", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, unit(seq))
        finally:
            os.close(fd)
        written.append((book_id, seq, time.time()))
    return written


def measure(
    connection: psycopg.Connection[Any],
    books: Books,
    *,
    worker_pids: list[int],
    rate: int,
    seconds: float,
    rng: random.Random,
) -> Sample:
    connection.execute("TRUNCATE bench_commits")
    backends = backend_pids(connection)
    cpu_worker, cpu_backend = cpu_of(worker_pids), cpu_of(backends)
    cpu_loop = loop_cpu_of(worker_pids)
    written = offered(books, rate, seconds, rng)
    # Stamped: the last seq a transaction moved each cursor to. Every line is applied once the
    # stamps reach every book's last line.
    last: dict[int, int] = {}
    for book_id, seq, _ in written:
        last[books.attempt_of[book_id]] = seq
    done = (
        "SELECT count(*) FROM (SELECT attempt_id, max(seq) AS seq FROM bench_commits"
        " GROUP BY attempt_id) s WHERE (attempt_id, seq) IN (SELECT * FROM unnest(%s::bigint[],"
        " %s::bigint[]))"
    )
    deadline = time.monotonic() + max(60.0, 6 * seconds)
    while scalar(connection, done, (list(last), list(last.values()))) < len(last):
        if time.monotonic() > deadline:
            print(
                f"  (at {rate} lines/s: not every line applied within the bound)", file=sys.stderr
            )
            break
        time.sleep(0.05)
    spent_worker = cpu_of(worker_pids) - cpu_worker
    spent_loop = loop_cpu_of(worker_pids) - cpu_loop
    spent_backend = cpu_of(backends) - cpu_backend
    rows = connection.execute(
        "SELECT attempt_id, seq, txid, extract(epoch FROM at) FROM bench_commits"
    ).fetchall()
    stamps: dict[int, list[tuple[int, float]]] = {}
    transactions: set[int] = set()
    for attempt_id, seq, txid, at in rows:
        stamps.setdefault(int(attempt_id), []).append((int(seq), float(at)))
        transactions.add(int(txid))
    for stamped in stamps.values():
        stamped.sort()
    latencies = []
    for book_id, seq, at in written:
        # A line applied together with later ones of its book is stamped with the last seq its
        # transaction moved to: the commit that applied it is the first stamp at or past it.
        stamped = stamps.get(books.attempt_of[book_id], [])
        index = bisect.bisect_left(stamped, (seq, -math.inf))
        if index < len(stamped):
            latencies.append(stamped[index][1] - at)
    lines = len(written)
    last_commit = max((float(at) for *_, at in rows), default=written[-1][2])
    span_s = max(last_commit - written[0][2], 1e-9)
    return Sample(
        rate=rate,
        workers=len(worker_pids),
        lines=lines,
        applied_per_s=len(latencies) / span_s,
        p50_ms=quantile(latencies, 0.5) * 1000 if latencies else float("nan"),
        p99_ms=quantile(latencies, 0.99) * 1000 if latencies else float("nan"),
        max_ms=max(latencies) * 1000 if latencies else float("nan"),
        commits_per_s=len(transactions) / span_s,
        lines_per_commit=lines / max(1, len(transactions)),
        worker_cpu_us_per_line=spent_worker / max(1, lines) * 1e6,
        loop_cpu_us_per_line=spent_loop / max(1, lines) * 1e6,
        backend_cpu_us_per_line=spent_backend / max(1, lines) * 1e6,
        unapplied=lines - len(latencies),
    )


def big_pass(
    connection: psycopg.Connection[Any], root: Path, worker_pids: list[int], lines: int
) -> tuple[float, float]:
    """One book of `lines` lines written at once under the running worker: CPU per line."""
    book_id = "book-big"
    directory = root / book_id
    directory.mkdir()
    content = hello(book_id) + b"".join(unit(seq) for seq in range(2, lines + 1))
    backends = backend_pids(connection)
    cpu_worker, cpu_backend = cpu_of(worker_pids), cpu_of(backends)
    (directory / "events.jsonl").write_bytes(content)
    query = (
        "SELECT count(*) FROM attempts a JOIN books b USING (book_id)"
        f" WHERE b.path LIKE '%%/{book_id}' AND a.last_seq = {lines}"
    )
    wait_until(connection, query, 1)
    spent_worker = cpu_of(worker_pids) - cpu_worker
    spent_backend = cpu_of(backends) - cpu_backend
    return spent_worker / lines * 1e6, spent_backend / lines * 1e6


def run_workers(
    admin_dsn: str,
    work: Path,
    name: str,
    *,
    books_count: int,
    worker_count: int,
    rates: list[int],
    seconds: float,
    big_lines: int,
) -> tuple[list[Sample], tuple[float, float] | None]:
    dsn = fresh_database(admin_dsn, name)
    root = work / name
    root.mkdir()
    rng = random.Random(7)
    with psycopg.connect(dsn, autocommit=True) as connection:
        books = make_books(connection, root, books_count)
        with workers(dsn, root, work, worker_count) as pids:
            if not wait_until(
                connection, "SELECT count(*) FROM attempts WHERE last_seq = 3", books_count
            ):
                raise SystemExit("the books were not applied")
            books.attempt_of = attempts_by_book(connection)
            install_stamp(connection)
            time.sleep(2.0)  # the start-up survey's passes are over
            samples = [
                measure(connection, books, worker_pids=pids, rate=rate, seconds=seconds, rng=rng)
                for rate in rates
            ]
            reference = big_pass(connection, root, pids, big_lines) if big_lines else None
    return samples, reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--books", type=int, default=5000)
    parser.add_argument("--rates", default="100,1000,3000,5000")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--two-workers-rate", type=int, default=5000, help="0: not measured")
    parser.add_argument("--big-lines", type=int, default=100_000)
    parser.add_argument("--dsn", default=os.environ.get("PLATFORM_INGEST_DSN"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    prose_to(sys.stderr if args.json else sys.stdout)
    rates = [int(rate) for rate in args.rates.split(",")]
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="bench-fanin-") as directory:
        work = Path(directory)
        with contextlib.ExitStack() as stack:
            admin_dsn = args.dsn or stack.enter_context(embedded_postgres(work / "postgres"))
            common = {"books_count": args.books, "seconds": args.seconds}
            one, big = run_workers(
                admin_dsn,
                work,
                "bench_fanin_1",
                worker_count=1,
                rates=rates,
                big_lines=args.big_lines,
                **common,
            )
            two: list[Sample] = []
            if args.two_workers_rate:
                at = [args.two_workers_rate]
                one_at, _ = run_workers(
                    admin_dsn,
                    work,
                    "bench_fanin_1b",
                    worker_count=1,
                    rates=at,
                    big_lines=0,
                    **common,
                )
                two, _ = run_workers(
                    admin_dsn,
                    work,
                    "bench_fanin_2",
                    worker_count=2,
                    rates=at,
                    big_lines=0,
                    **common,
                )
                one += one_at
    load_after = load_average()
    report(args, one=one, two=two, big=big, load_before=load_before, load_after=load_after)


def report(
    args: argparse.Namespace,
    *,
    one: list[Sample],
    two: list[Sample],
    big: tuple[float, float] | None,
    load_before: str,
    load_after: str,
) -> None:
    say(
        f"fan-in: {args.books} books, one line at a time to a random book,"
        f" {args.seconds:g} s a rate"
    )
    say(f"load average before {load_before}, after {load_after}, {os.cpu_count()} cores")
    say("")
    say(
        "| workers | lines/s offered | applied/s | p50 ms | p99 ms | max ms | commits/s"
        " | lines a commit | worker CPU µs/line | of it, its loop's thread | backend CPU µs/line |"
    )
    say("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for sample in one + two:
        say(
            f"| {sample.workers} | {sample.rate:,} | {sample.applied_per_s:,.0f}"
            f" | {sample.p50_ms:.1f} | {sample.p99_ms:.1f} | {sample.max_ms:.0f}"
            f" | {sample.commits_per_s:,.0f} | {sample.lines_per_commit:.2f}"
            f" | {sample.worker_cpu_us_per_line:.0f} | {sample.loop_cpu_us_per_line:.0f}"
            f" | {sample.backend_cpu_us_per_line:.0f} |"
        )
    for sample in one[: len(one) - (1 if two else 0)]:
        figure(
            f"p99 write to commit, {sample.rate:,} lines/s over {args.books:,} books",
            "ms",
            sample.p99_ms,
            baseline_name="the target",
            baseline=100.0,
            target="<= 100 ms",
        )
    if big is not None:
        worker_us, backend_us = big
        reference = worker_us + backend_us
        say("")
        say(
            f"big pass ({args.big_lines:,} lines, one book): worker {worker_us:.1f} µs/line,"
            f" backend {backend_us:.1f} µs/line, together {reference:.1f}"
        )
        for sample in one[: len(one) - (1 if two else 0)]:
            spread = sample.worker_cpu_us_per_line + sample.backend_cpu_us_per_line
            say(
                f"  at {sample.rate:,} lines/s over the books: {spread:.0f} µs/line,"
                f" {spread / reference:.1f}x a big pass's (target <= 5x)"
            )
            figure(
                f"CPU a line (worker and backend), {sample.rate:,} lines/s over the books",
                "µs",
                spread,
                baseline_name="a big pass's CPU a line",
                baseline=reference,
                target="<= 5x",
            )
    if two:
        solo, pair = one[-1], two[-1]
        say("")
        say(
            f"two workers at {pair.rate:,} lines/s offered: {pair.applied_per_s:,.0f} applied/s"
            f" against one's {solo.applied_per_s:,.0f}:"
            f" {pair.applied_per_s / max(1.0, solo.applied_per_s):.2f}x (target >= 1.7x)"
        )
        figure(
            f"lines applied a second, two workers, {pair.rate:,} offered",
            "lines/s",
            pair.applied_per_s,
            baseline_name="one worker",
            baseline=solo.applied_per_s,
            target=">= 1.7x",
        )
    if args.json:
        notes = [f"load average before {load_before}, after {load_after}"]
        print(orjson.dumps({"bench": "fanin", "figures": FIGURES, "notes": notes}).decode())


if __name__ == "__main__":
    main()

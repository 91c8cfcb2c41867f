"""Benchmark of the worker (`platform-ingest run`) against its targets and floors, in one run.

    python bench/bench_worker.py [--only latency|idle|startup|scale] [--lines 1000] [--pace-ms 20]
        [--books 10000] [--idle-s 30] [--busy-books 200] [--busy-lines 1000] [--dsn DSN]

Figures printed (each with its target):

- latency: a small writer appends one line at a time to a journal and fsyncs it, at a steady pace
  (the worker is idle before each line), and records the time fsync returned. A deferred trigger
  installed in the benchmark's own database stamps `clock_timestamp()` when the transaction that
  applies the line reaches its commit (same host, same clock). Latency = stamp - fsync return
  (it can be negative: change notification fires at write(), before fsync returns). Targets:
  p50 <= 10 ms, p99 <= 100 ms. Floors, measured here too: the notifier's own wake-up after a
  write+fsync, and one single-row commit on the same server.
- idle: N book directories (each with a short finished-looking journal), one worker. After it has
  applied them all: its CPU over `--idle-s` seconds (target < 5 % of a core) with its Postgres
  backend's CPU beside it, its RSS, its inotify watches (against max_user_watches), and the time
  from appending a line to one random book to that line's commit (target <= 1 s), for 20 books.
- startup: N book directories (each with a short journal), one worker: the time from starting the
  process to the end of its first safety pass (its metric `last_survey_timestamp_seconds`; target
  <= 5 s for 10,000 books), (a) with every book new, then until every line is applied, and (b) a
  restart over the same books, all applied, with the passes it made (none needed). The load
  average (/proc/loadavg) is printed beside each.
- scale: 200 busy books (each gets `--busy-lines` lines written at once) under one worker, then
  under two workers on a fresh database: lines applied per second, and the ratio (on 2 cores the
  point is that it does not fall).

Without --dsn an embedded Postgres is started in a temporary directory and removed at the end.
Nothing here is a pass/fail check: the test suite has no timed assertion.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import psycopg

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from _report import fresh_database as empty_database  # noqa: E402
from _report import install_commit_stamp, scrape_metrics  # noqa: E402
from platform_ingest import Database, migrate  # noqa: E402
from platform_ingest.store.embedded import embedded_postgres  # noqa: E402

BIN = Path(sys.executable).parent
TIME = "2026-11-30T02:08:57.213Z"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def line(seq: int, kind: str, data: dict[str, object]) -> bytes:
    return orjson.dumps({"seq": seq, "type": kind, "time": TIME, "data": data}) + b"\n"


def hello(book_id: str) -> bytes:
    data = {
        "stream_version": "1.3",
        "engine_run_id": str(uuid.uuid4()),
        "book_id": book_id,
        "chunker_version": "c1",
    }
    return line(1, "hello", data)


def unit(seq: int) -> bytes:
    return line(seq, "unit_done", {"unit": f"u-{seq:07d}", "index": seq})


def fresh_database(admin_dsn: str, name: str) -> str:
    """`_report.fresh_database`, migrated."""
    dsn = empty_database(admin_dsn, name)
    db = Database(dsn)
    migrate(db)
    db.close()
    return dsn


@contextlib.contextmanager
def worker(dsn: str, root: Path, log: Path, *options: str) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as stderr:
        process = subprocess.Popen(
            [str(BIN / "platform-ingest"), "--dsn", dsn, "run", str(root), "--auto", *options],
            stderr=stderr,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=60)


def scalar(connection: psycopg.Connection[tuple[object, ...]], query: str) -> int:
    row = connection.execute(query).fetchone()  # type: ignore[arg-type]
    return int(row[0]) if row is not None and row[0] is not None else 0


def wait_until(connection: psycopg.Connection[tuple[object, ...]], query: str, value: int) -> float:
    start = time.monotonic()
    while scalar(connection, query) < value:
        if time.monotonic() - start > 1800:
            raise SystemExit(f"not reached: {query} >= {value}")
        time.sleep(0.01)
    return time.monotonic() - start


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    for text in Path(f"/proc/{pid}/status").read_text().splitlines():
        if text.startswith("VmRSS:"):
            return int(text.split()[1]) * 1024
    return 0


def inotify_watches(pid: int) -> int:
    watches = 0
    for fdinfo in Path(f"/proc/{pid}/fdinfo").iterdir():
        with contextlib.suppress(OSError):
            watches += fdinfo.read_text().count("inotify wd:")
    return watches


def backend_pid(connection: psycopg.Connection[tuple[object, ...]]) -> int | None:
    row = connection.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'platform-ingest worker %'"
        " AND datname = current_database() LIMIT 1"
    ).fetchone()
    return None if row is None else int(row[0])  # type: ignore[arg-type]


# --- latency ------------------------------------------------------------------------------------


def notify_floor(work: Path, samples: int) -> list[float]:
    """The worker's watcher alone: write+fsync -> its `on_journal` call, in seconds.

    The same `Watcher` the worker runs, over a root of one book; the wake-up is stamped in the
    callback (the worker only puts it on its queue there)."""
    from platform_ingest.worker.watcher import Watcher

    root = work / "notify-floor"
    book = root / "book"
    book.mkdir(parents=True)
    (book / "events.jsonl").touch()  # only writes are timed, not the file's creation
    written: list[float] = []
    woken: list[float] = []
    watcher = Watcher(
        [root],
        on_journal=lambda path: woken.append(time.time()),
        on_root=lambda path: None,
        on_state=lambda up: None,
    )
    watcher.start()
    if not watcher.started.wait(10):
        raise SystemExit("the watcher did not start")
    time.sleep(0.2)
    woken.clear()
    with open(book / "events.jsonl", "ab") as file:
        for _ in range(samples):
            file.write(b"x\n")
            file.flush()
            os.fsync(file.fileno())
            written.append(time.time())
            time.sleep(0.01)
    time.sleep(0.1)
    watcher.stop()
    return [
        min(w for w in woken if w >= t - 0.005) - t
        for t in written
        if any(w >= t - 0.005 for w in woken)
    ]


def commit_floor(dsn: str, samples: int) -> list[float]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("CREATE TABLE IF NOT EXISTS bench_floor (n bigint)")
        times = []
        for number in range(samples):
            start = time.perf_counter()
            connection.execute("INSERT INTO bench_floor VALUES (%s)", (number,))
            times.append(time.perf_counter() - start)
    return times


def bench_latency(admin_dsn: str, work: Path, lines: int, pace_ms: int) -> None:
    dsn = fresh_database(admin_dsn, "bench_worker_latency")
    root = work / "latency"
    book = root / "book-latency"
    book.mkdir(parents=True)
    (book / "events.jsonl").write_bytes(hello("book-latency"))
    with psycopg.connect(dsn, autocommit=True) as connection:
        install_commit_stamp(connection)
        with worker(dsn, root, work / "latency.log", "--safety-pass-s", "3600"):
            wait_until(connection, "SELECT max(last_seq) FROM attempts", 1)
            time.sleep(1.0)
            fsynced: dict[int, float] = {}
            with open(book / "events.jsonl", "ab") as file:
                next_at = time.monotonic()
                for seq in range(2, lines + 2):
                    next_at += pace_ms / 1000
                    time.sleep(max(0.0, next_at - time.monotonic()))
                    os.write(file.fileno(), unit(seq))
                    os.fsync(file.fileno())
                    fsynced[seq] = time.time()
            wait_until(connection, "SELECT max(last_seq) FROM attempts", lines + 1)
            rows = connection.execute(
                "SELECT seq, extract(epoch FROM at) FROM bench_commits"
            ).fetchall()
    committed: dict[int, float] = {}
    for seq, at in rows:
        committed.setdefault(int(seq), float(at))  # type: ignore[arg-type]
    latencies = [committed[seq] - fsynced[seq] for seq in fsynced if seq in committed]
    batched = lines - len(latencies)
    notify = notify_floor(work, 200)
    commit = commit_floor(dsn, 200)
    p50, p99 = quantile(latencies, 0.5), quantile(latencies, 0.99)
    notify50, commit50 = statistics.median(notify), statistics.median(commit)
    # The watcher is woken at write(), before fsync returns: measured from fsync's return its
    # wake-up is often negative, and then the floor is the commit alone.
    floor50 = max(0.0, notify50) + commit50
    print(f"\nlatency: engine fsync -> Postgres commit of the same line, {len(latencies)} lines")
    print(f"  pace {pace_ms} ms between lines (worker idle before each); commit stamped by a")
    print("  deferred trigger (clock_timestamp() at the apply transaction's commit), same clock")
    if batched:
        print(f"  ({batched} lines shared a transaction with the line after them: not counted)")
    print(f"  p50 {p50 * 1000:7.2f} ms   (target <= 10 ms)")
    print(f"  p99 {p99 * 1000:7.2f} ms   (target <= 100 ms)")
    print(f"  max {max(latencies) * 1000:7.2f} ms")
    print(
        f"  floor: notifier wake-up p50 {notify50 * 1000:.2f} ms (from fsync's return; below 0"
        f" counts as 0) + one-row commit p50 {commit50 * 1000:.2f} ms"
        f" = {floor50 * 1000:.2f} ms; p50 / floor = {p50 / floor50:.1f}x"
    )


# --- idle with many books ---------------------------------------------------------------------


def bench_idle(admin_dsn: str, work: Path, books: int, idle_s: float) -> None:
    dsn = fresh_database(admin_dsn, "bench_worker_idle")
    root = work / "idle"
    root.mkdir()
    for number in range(books):
        book_id = f"book-{number:06d}"
        (root / book_id).mkdir()
        (root / book_id / "events.jsonl").write_bytes(hello(book_id) + unit(2) + unit(3))
    limit = Path("/proc/sys/fs/inotify/max_user_watches").read_text().strip()
    with (
        psycopg.connect(dsn, autocommit=True) as connection,
        worker(dsn, root, work / "idle.log") as process,
    ):
        started = time.monotonic()
        wait_until(connection, "SELECT count(*) FROM attempts WHERE last_seq = 3", books)
        startup_s = time.monotonic() - started
        time.sleep(2.0)
        backend = backend_pid(connection)
        cpu_before = cpu_seconds(process.pid)
        backend_before = cpu_seconds(backend) if backend else 0.0
        time.sleep(idle_s)
        cpu = (cpu_seconds(process.pid) - cpu_before) / idle_s
        backend_cpu = ((cpu_seconds(backend) - backend_before) / idle_s) if backend else 0.0
        rss = rss_bytes(process.pid)
        watches = inotify_watches(process.pid)
        within = []
        for number in random.sample(range(books), min(20, books)):
            book_id = f"book-{number:06d}"
            with open(root / book_id / "events.jsonl", "ab") as file:
                file.write(unit(4))
                file.flush()
                os.fsync(file.fileno())
            start = time.monotonic()
            query = f"SELECT max(last_seq) FROM attempts WHERE book_id = '{book_id}'"
            while scalar(connection, query) < 4:
                time.sleep(0.002)
            within.append(time.monotonic() - start)
            time.sleep(0.2)
    print(f"\nidle: {books} book directories under one worker")
    print(f"  start-up (register and apply every book): {startup_s:.1f} s")
    print(f"  worker CPU over {idle_s:.0f} s idle: {cpu * 100:.2f} % of a core (target < 5 %);")
    print(f"  its Postgres backend: {backend_cpu * 100:.2f} % of a core")
    print(f"  worker RSS: {rss / 2**20:.1f} MiB")
    print(f"  inotify watches held: {watches} (max_user_watches here: {limit})")
    print(
        f"  a line appended to one of them is committed within: p50 {statistics.median(within) * 1000:.1f} ms,"
        f" max {max(within) * 1000:.1f} ms over {len(within)} books (target <= 1 s)"
    )


# --- start-up with many books -------------------------------------------------------------------


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def metrics_of(log: Path, process: subprocess.Popen[bytes]) -> dict[str, float]:
    """The worker's metrics, once it has logged its metrics port."""
    port = None
    while port is None:
        if process.poll() is not None:
            raise SystemExit(f"the worker exited with {process.returncode}")
        for text in log.read_bytes().splitlines():
            with contextlib.suppress(orjson.JSONDecodeError):
                message = str(orjson.loads(text).get("message", ""))
                if message.startswith("metrics on port "):
                    port = int(message.rsplit(" ", 1)[1])
        time.sleep(0.01)
    return scrape_metrics(port)


def first_survey_s(log: Path, process: subprocess.Popen[bytes], started_at: float) -> float:
    """Seconds from `started_at` (wall clock, before the process started) to the end of the
    worker's first safety pass."""
    while True:
        done = metrics_of(log, process).get("platform_ingest_last_survey_timestamp_seconds", 0.0)
        if done > 0:
            return done - started_at
        time.sleep(0.02)


def passes(metrics: dict[str, float]) -> str:
    counts = {
        name.split('"')[1]: int(value)
        for name, value in metrics.items()
        if name.startswith("platform_ingest_passes_total{")
    }
    return ", ".join(f"{trigger} {count}" for trigger, count in sorted(counts.items())) or "none"


def bench_startup(admin_dsn: str, work: Path, books: int) -> None:
    dsn = fresh_database(admin_dsn, "bench_worker_startup")
    root = work / "startup"
    root.mkdir()
    for number in range(books):
        book_id = f"book-{number:06d}"
        (root / book_id).mkdir()
        (root / book_id / "events.jsonl").write_bytes(hello(book_id) + unit(2) + unit(3))
    options = ("--metrics-port", "0", "--no-compact")
    lines = []
    with psycopg.connect(dsn, autocommit=True) as connection:
        load = loadavg()
        started_at = time.time()
        with worker(dsn, root, work / "startup-new.log", *options) as process:
            new_s = first_survey_s(work / "startup-new.log", process, started_at)
            wait_until(connection, "SELECT count(*) FROM attempts WHERE last_seq = 3", books)
            applied_s = time.time() - started_at
            new_passes = passes(metrics_of(work / "startup-new.log", process))
        lines.append(f"  (a) all new (load {load}): first safety pass complete {new_s:.2f} s;")
        lines.append(f"      every line applied {applied_s:.1f} s; passes: {new_passes}")
        time.sleep(2.0)
        load = loadavg()
        started_at = time.time()
        with worker(dsn, root, work / "startup-restart.log", *options) as process:
            restart_s = first_survey_s(work / "startup-restart.log", process, started_at)
            time.sleep(5.0)
            restart_passes = passes(metrics_of(work / "startup-restart.log", process))
        lines.append(
            f"  (b) restart, all applied (load {load}): first safety pass complete"
            f" {restart_s:.2f} s; passes in its first 5 s after it: {restart_passes}"
        )
    print(
        f"\nstartup: {books} book directories, one worker (target <= 5 s to the first safety pass)"
    )
    print("\n".join(lines))


# --- two workers against one ------------------------------------------------------------------


def busy_rate(admin_dsn: str, work: Path, workers: int, books: int, lines: int) -> float:
    dsn = fresh_database(admin_dsn, f"bench_worker_scale_{workers}")
    root = work / f"scale-{workers}"
    root.mkdir()
    for number in range(books):
        (root / f"book-{number:04d}").mkdir()
    with contextlib.ExitStack() as stack, psycopg.connect(dsn, autocommit=True) as connection:
        for index in range(workers):
            stack.enter_context(worker(dsn, root, work / f"scale-{workers}-{index}.log"))
        wait_until(connection, "SELECT count(*) FROM books", books)
        while (
            scalar(
                connection,
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'platform-ingest worker %'",
            )
            < workers
        ):
            time.sleep(0.05)
        time.sleep(2.0)
        started = time.monotonic()
        for number in range(books):
            book_id = f"book-{number:04d}"
            content = hello(book_id) + b"".join(unit(seq) for seq in range(2, lines + 1))
            with open(root / book_id / "events.jsonl", "ab") as file:
                file.write(content)
        wait_until(connection, f"SELECT count(*) FROM attempts WHERE last_seq = {lines}", books)
        elapsed = time.monotonic() - started
    return books * lines / elapsed


def bench_scale(admin_dsn: str, work: Path, books: int, lines: int) -> None:
    one = busy_rate(admin_dsn, work, 1, books, lines)
    two = busy_rate(admin_dsn, work, 2, books, lines)
    print(f"\nscale: {books} busy books x {lines} lines, written at once, until all committed")
    print(f"  one worker:  {one:10,.0f} lines/s")
    print(f"  two workers: {two:10,.0f} lines/s")
    print(f"  two / one = {two / one:.2f} (on {os.cpu_count()} cores; target: it does not fall)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("latency", "idle", "startup", "scale"))
    parser.add_argument("--lines", type=int, default=1000, help="latency: lines written")
    parser.add_argument("--pace-ms", type=int, default=20, help="latency: between lines")
    parser.add_argument("--books", type=int, default=10_000, help="idle, startup: book directories")
    parser.add_argument("--idle-s", type=float, default=30.0, help="idle: CPU measured over")
    parser.add_argument("--busy-books", type=int, default=200)
    parser.add_argument("--busy-lines", type=int, default=1000)
    parser.add_argument("--dsn", default=os.environ.get("PLATFORM_INGEST_DSN"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-worker-") as directory:
        work = Path(directory)
        with contextlib.ExitStack() as stack:
            admin_dsn = args.dsn or stack.enter_context(embedded_postgres(work / "postgres"))
            if args.only in (None, "latency"):
                bench_latency(admin_dsn, work, args.lines, args.pace_ms)
            if args.only in (None, "idle"):
                bench_idle(admin_dsn, work, args.books, args.idle_s)
            if args.only in (None, "startup"):
                bench_startup(admin_dsn, work, args.books)
            if args.only in (None, "scale"):
                bench_scale(admin_dsn, work, args.busy_books, args.busy_lines)


if __name__ == "__main__":
    main()

"""Benchmark of the platform tailer against its floors, measured in the same run on the same server.

    python bench/bench_ingest.py [--lines N] [--naive-lines N] [--dsn DSN] [--big] [--big-bytes B]
        [--big-batch-lines N]
        [--whole-process] [--whole-lines N,N] [--whole-batches N,N] [--rounds N] [--split]
        [--json]

Figures printed:

- apply rate of one pass over an N-line journal into a fresh database (effects, one sha256 row per
  line, cursor), against a NAIVE tailer on the same lines (one transaction per line: lock the
  cursor, insert the effect, update the cursor, commit), and against the physical floor of the
  server (the same number of rows inserted in large batches with nothing else to do);
- resume: a pass over the same book after a few lines were appended reads only what lies past the
  hint (bytes read are counted by the reader);
- with --big: one pass over a ~1 GB journal, with its bytes read and the peak RSS of the process;
- with --whole-process: `platform-ingest sweep` run as a process of its own (start-up, connection,
  registration and the pass: the whole command) over journals of --whole-lines lines (200,000 and
  1,000,000), with the default batch bounds and with each of --whole-batches, each with the
  process's own peak RSS; against two floors measured in the same run: COPY of the same rows into
  the same tables (one `line_hashes` row a line, one `run_units` row a `unit_done`, in Postgres's
  binary format as the pass sends them, made before the clock starts; nothing else), and the naive
  tailer (timed on its first --naive-lines lines, its rate per line taken for the
  whole journal). Each rate is the median of --rounds rounds. Before them, the fixed cost of a
  `sweep` (over a book with no journal) beyond the interpreter's own start. The children run with
  their bytecode cached, as an installed package has it;
- with --split: where a pass's time goes, over journals of --whole-lines lines. Inside this
  process (tuned as the command tunes itself), one pass with its writer and one with a writer that
  writes nothing (the pass's own thread, all a writer that cost the interpreter nothing would
  leave), alternating for --rounds rounds, each round beside the COPY floor; and what the COPY
  ratio of the whole command would be with such a writer: the floor against the pass alone plus
  the command's fixed cost, measured in the same run. Beside each pass, the CPU this process spent
  in it (both threads hold one interpreter lock: with the CPU near the wall time, the pass is bound
  by its interpreter, and the floor against that CPU plus the fixed cost bounds the ratio).

Without --dsn an embedded Postgres is started in a temporary directory and removed at the end.
With --json the figures are printed as one JSON object on stdout (the prose goes to stderr), for
`bench/run_all.py`. Nothing here is a pass/fail check: the test suite has no timed assertion.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import orjson
import psycopg

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from _report import FIGURES, figure, fresh_database, load_average, prose_to, say  # noqa: E402
from platform_ingest import Database, migrate  # noqa: E402
from platform_ingest.cli.main import tune_interpreter  # noqa: E402
from platform_ingest.ingest.apply import BATCH_BYTES_MAX, BATCH_LINES_MAX, SealedBatch, Writer  # noqa: E402
from platform_ingest.ingest.book_pass import BookPass  # noqa: E402
from platform_ingest.ingest.books import register_book  # noqa: E402
from platform_ingest.store.embedded import embedded_postgres  # noqa: E402

TIME = "2026-11-30T02:08:57.213Z"

NOTES: list[str] = []


def _line(seq: int, kind: str, data: dict[str, object]) -> bytes:
    return orjson.dumps({"seq": seq, "type": kind, "time": TIME, "data": data}) + b"\n"


def journal_lines(
    book_id: str, count: int, *, start_seq: int = 1, phases: int = 3, engine_run_id: str = ""
) -> Iterator[bytes]:
    """A realistic stream: hello, then progress / unit_done / spend in turn (cumulative spend)."""
    run_id = engine_run_id or str(uuid.uuid4())
    seq = start_seq
    if seq == 1:
        yield _line(
            1,
            "hello",
            {
                "stream_version": "1.3",
                "engine_run_id": run_id,
                "book_id": book_id,
                "chunker_version": "c1",
            },
        )
        seq = 2
    names = [f"phase-{index}" for index in range(phases)]
    while seq < start_seq + count:
        turn = seq % 3
        if turn == 0:
            data: dict[str, object] = {
                "phases": {name: {"done": seq // 3, "total": start_seq + count} for name in names}
            }
            yield _line(seq, "progress", data)
        elif turn == 1:
            yield _line(seq, "unit_done", {"unit": f"u-{seq:09d}", "index": seq})
        else:
            yield _line(seq, "spend", {"committed_micro_usd": 1000 * seq})
        seq += 1


def write_journal(path: Path, lines: Iterator[bytes]) -> int:
    """Write lines in large buffered chunks (bounded memory); return the bytes written."""
    written = 0
    chunk: list[bytes] = []
    chunk_bytes = 0
    with open(path, "ab") as file:
        for line in lines:
            chunk.append(line)
            chunk_bytes += len(line)
            if chunk_bytes >= 4 * 1024 * 1024:
                file.write(b"".join(chunk))
                written += chunk_bytes
                chunk, chunk_bytes = [], 0
        file.write(b"".join(chunk))
        written += chunk_bytes
    return written


def naive_tailer(dsn: str, journal: Path, limit: int) -> tuple[int, float]:
    """One transaction per line: lock the cursor, insert the effect, update the cursor, commit."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            "CREATE TABLE cursor_naive (attempt int PRIMARY KEY, last_seq bigint NOT NULL)"
        )
        connection.execute(
            "CREATE TABLE effect_naive (attempt int, seq bigint, sha256 bytea, kind text,"
            " PRIMARY KEY (attempt, seq))"
        )
        connection.execute("INSERT INTO cursor_naive VALUES (1, 0)")
        applied = 0
        started = time.perf_counter()
        with open(journal, "rb") as file:
            for raw in file:
                if applied >= limit:
                    break
                value = orjson.loads(raw)
                with connection.transaction():
                    row = connection.execute(
                        "SELECT last_seq FROM cursor_naive WHERE attempt = 1 FOR UPDATE"
                    ).fetchone()
                    if row is None or value["seq"] != row[0] + 1:
                        continue
                    connection.execute(
                        "INSERT INTO effect_naive VALUES (1, %s, %s, %s)",
                        (value["seq"], hashlib.sha256(raw).digest(), value["type"]),
                    )
                    connection.execute(
                        "UPDATE cursor_naive SET last_seq = %s WHERE attempt = 1 AND last_seq = %s",
                        (value["seq"], row[0]),
                    )
                applied += 1
        return applied, time.perf_counter() - started


def insert_floor(dsn: str, rows: int, batch_rows: int = 5000) -> float:
    """The server's floor for our write volume: the same rows, in large batches, nothing else."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            "CREATE TABLE floor_rows (attempt bigint, seq bigint, sha256 bytea,"
            " PRIMARY KEY (attempt, seq))"
        )
        digest = hashlib.sha256(b"x").digest()
        started = time.perf_counter()
        for first in range(1, rows + 1, batch_rows):
            seqs = list(range(first, min(first + batch_rows, rows + 1)))
            with connection.transaction():
                connection.execute(
                    "INSERT INTO floor_rows SELECT * FROM unnest(%b::bigint[], %b::bigint[],"
                    " %b::bytea[])",
                    ([1] * len(seqs), seqs, [digest] * len(seqs)),
                )
        return time.perf_counter() - started


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def bench_rate(admin_dsn: str, work: Path, lines: int, naive_lines: int) -> None:
    book = work / "bench-book"
    book.mkdir()
    journal = book / "events.jsonl"
    size = write_journal(journal, journal_lines(book.name, lines))
    say(f"journal: {lines:,} lines, {size / 1e6:.1f} MB")

    db = Database(fresh_database(admin_dsn, "bench_ingest"))
    migrate(db)
    register_book(db, book)
    started = time.perf_counter()
    report = BookPass(db, book.name, mode="auto").run()
    elapsed = time.perf_counter() - started
    rate = report.lines_applied / elapsed
    say(
        f"platform_ingest: {report.lines_applied:,} lines applied in {elapsed:.2f} s"
        f" = {rate:,.0f} lines/s"
    )

    sample = min(naive_lines, lines)
    applied, naive_elapsed = naive_tailer(fresh_database(admin_dsn, "bench_naive"), journal, sample)
    naive_rate = applied / naive_elapsed
    say(
        f"naive tailer (one transaction per line), measured on the first {applied:,} lines:"
        f" {naive_elapsed:.2f} s = {naive_rate:,.0f} lines/s"
    )
    floor_elapsed = insert_floor(fresh_database(admin_dsn, "bench_floor"), lines)
    floor_rate = lines / floor_elapsed
    say(f"floor (batched inserts of the same rows, nothing else): {floor_rate:,.0f} rows/s")
    say(f"ratio platform_ingest / naive: {rate / naive_rate:.1f}x (target >= 40x)")
    say(f"ratio platform_ingest / floor: {rate / floor_rate:.2f}")
    figure(
        f"apply rate, one pass over {lines:,} lines (effects, line hashes, cursor)",
        "lines/s",
        rate,
        baseline_name="baseline: a naive tailer, one transaction per line",
        baseline=naive_rate,
        target="ratio >= 40",
    )
    figure(
        "apply rate against the server's floor",
        "lines/s",
        rate,
        baseline_name="floor: the same rows inserted in large batches, nothing else",
        baseline=floor_rate,
        target="(the share of the floor the pass reaches)",
    )

    appended_lines = 1000
    appended = write_journal(
        journal,
        journal_lines(book.name, appended_lines, start_seq=lines + 1, engine_run_id="unused"),
    )
    started = time.perf_counter()
    resume = BookPass(db, book.name, mode="auto").run()
    resume_elapsed = time.perf_counter() - started
    say(
        f"resume: journal {journal.stat().st_size:,} bytes, {appended:,} bytes appended;"
        f" the pass read {resume.bytes_read:,} bytes from offset {resume.start_offset:,}"
        f" ({resume.lines_applied:,} lines applied, {resume_elapsed * 1000:.0f} ms)"
    )
    idle = BookPass(db, book.name, mode="auto").run()
    say(f"idle pass (nothing new): read {idle.bytes_read:,} bytes")
    figure(
        f"resume after {appended_lines:,} lines appended: bytes the pass read",
        "bytes",
        resume.bytes_read,
        baseline_name="the journal's size",
        baseline=journal.stat().st_size,
        target="only what lies past the verified hint",
    )
    figure(
        "idle pass (nothing new): bytes read",
        "bytes",
        idle.bytes_read,
        baseline_name="the journal's size",
        baseline=journal.stat().st_size,
        target="only the hint's own line",
    )
    db.close()


def bench_big(admin_dsn: str, work: Path, target_bytes: int, batch_lines_max: int) -> None:
    book = work / "big-book"
    book.mkdir()
    journal = book / "events.jsonl"
    sample = list(journal_lines(book.name, 3, start_seq=2, phases=12))
    line_bytes = sum(len(line) for line in sample) / len(sample)
    count = int(target_bytes / line_bytes)
    size = write_journal(journal, journal_lines(book.name, count, phases=12))
    say(f"big journal: {count:,} lines, {size / 1e9:.2f} GB")
    db = Database(fresh_database(admin_dsn, "bench_big"))
    migrate(db)
    register_book(db, book)
    rss_before = peak_rss_bytes()
    started = time.perf_counter()
    report = BookPass(db, book.name, mode="auto", batch_lines_max=batch_lines_max).run()
    elapsed = time.perf_counter() - started
    say(
        f"big pass (batches of at most {batch_lines_max:,} lines, {BATCH_BYTES_MAX:,} bytes):"
        f" {report.lines_applied:,} lines applied"
    )
    say(
        f"big pass: {report.lines_applied:,} lines in {elapsed:.1f} s"
        f" ({report.lines_applied / elapsed:,.0f} lines/s), read {report.bytes_read:,} bytes"
    )
    say(
        f"peak RSS: {peak_rss_bytes() / 1e6:.1f} MB (before the pass: {rss_before / 1e6:.1f} MB;"
        " limit 150 MB)"
    )
    bounds = "" if batch_lines_max == BATCH_LINES_MAX else f", batches of {batch_lines_max:,} lines"
    figure(
        f"one pass over a {size / 1e9:.2f} GB journal ({count:,} lines,"
        f" {report.lines_applied / elapsed:,.0f} lines/s{bounds}): peak RSS",
        "MB",
        peak_rss_bytes() / 1e6,
        baseline_name="RSS before the pass",
        baseline=rss_before / 1e6,
        target="< 150 MB",
    )
    db.close()


SWEEP = """
import sys
from platform_ingest.cli.main import main
from platform_ingest.ingest.book_pass import BookPass
peak_file, lines_max, bytes_max = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if lines_max:
    BookPass.__init__.__kwdefaults__["batch_lines_max"] = lines_max
if bytes_max:
    BookPass.__init__.__kwdefaults__["batch_bytes_max"] = bytes_max
try:
    code = main(sys.argv[4:])
finally:
    with open("/proc/self/status") as status, open(peak_file, "w") as peak:
        peak.write(next(row for row in status if row.startswith("VmHWM:")))
sys.exit(code)
"""
"""`platform-ingest sweep` as its console script runs it (`main`), in a process of its own; batch
bounds other than the defaults are set as the pass's defaults first (0: the default kept). At the
end it writes its peak RSS (`VmHWM`, which exec starts afresh; `ru_maxrss` of a child would count
the pages it shared with the benchmark when it was forked) to the file named first."""


def child_environment() -> dict[str, str]:
    """The environment of a `platform-ingest` child: this checkout's sources first, and their
    bytecode cached (in a directory of the benchmark's), as an installed package has it; an
    environment that forbids writing bytecode would make every child compile the package again."""
    path = [str(SRC), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), PYTHONPYCACHEPREFIX=str(PYCACHE))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


PYCACHE = Path(tempfile.gettempdir()) / "bench-ingest-pycache"


def sweep_process(
    dsn: str, book: Path, *, lines_max: int = 0, bytes_max: int = 0
) -> tuple[float, int, dict[str, object]]:
    """Run `platform-ingest sweep --auto --json BOOK` as a child process: its wall time (from
    the fork to its exit), its own peak RSS in bytes, and its report."""
    env = child_environment()
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as directory:
        peak_file = Path(directory) / "peak"
        argv = [sys.executable, "-c", SWEEP, str(peak_file), str(lines_max), str(bytes_max)]
        argv += ["--dsn", dsn, "sweep", "--auto", "--json", str(book)]
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, env=env, check=False)
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"sweep exited {done.returncode}: {done.stderr.decode()[-2000:]}")
        report = json.loads(done.stdout.decode().splitlines()[-1])
        peak = int(peak_file.read_text().split()[1]) * 1024  # VmHWM:   12345 kB
    return elapsed, peak, report


def bench_fixed_cost(admin_dsn: str, work: Path, runs: int) -> float:
    """The fixed cost of a `sweep`: the whole command over a book with no journal (start-up,
    imports, connection, registration, a pass that finds nothing), against the interpreter's own
    start (`python -c pass`), the two alternating; medians of `runs` each, after one of each to
    warm the bytecode cache and the page cache."""
    dsn = fresh_database(admin_dsn, "bench_fixed")
    migrate_dsn(dsn)
    book = work / "fixed-empty"
    book.mkdir()
    env = child_environment()
    sweep = [
        sys.executable,
        "-c",
        "import sys; from platform_ingest.cli.main import main; sys.exit(main())",
    ]
    sweep += ["--dsn", dsn, "sweep", "--auto", str(book)]
    bare = [sys.executable, "-c", "pass"]
    times: dict[str, list[float]] = {"sweep": [], "bare": []}
    load_before = load_average()
    for turn in range(runs + 1):
        for name, argv in (("sweep", sweep), ("bare", bare))[:: 1 if turn % 2 else -1]:
            started = time.perf_counter()
            subprocess.run(argv, env=env, check=True, capture_output=True)
            if turn:
                times[name].append(time.perf_counter() - started)
    sweep_s, bare_s = statistics.median(times["sweep"]), statistics.median(times["bare"])
    say(
        f"fixed cost: sweep of a book with no journal {sweep_s * 1e3:.1f} ms, python -c pass"
        f" {bare_s * 1e3:.1f} ms (medians of {runs}; load {load_before} before,"
        f" {load_average()} after)"
    )
    figure(
        "fixed cost of `platform-ingest sweep` beyond the interpreter's start (a book with no"
        f" journal; medians of {runs} runs, alternating)",
        "ms",
        (sweep_s - bare_s) * 1e3,
        baseline_name="the interpreter's own start: python -c pass",
        baseline=bare_s * 1e3,
        target="<= 150 ms beyond it",
    )
    return sweep_s - bare_s


def copy_floor(dsn: str, lines: int) -> tuple[float, int, int]:
    """The floor of what a pass writes per line: the same rows into the same tables (migrated,
    with their keys) by COPY, in one transaction, nothing else. The rows are sent in Postgres's
    binary format, as the pass sends them, and made before the clock starts (by `struct` here,
    not by the project's encoder). Returns the time, and the rows of each table."""
    digest = hashlib.sha256(b"x").digest()
    hash_row = struct.Struct(">hiqiqi32s")
    hash_rows = [hash_row.pack(3, 8, 1, 8, seq, 32, digest) for seq in range(1, lines + 1)]
    unit_row = struct.Struct(">hiqi11siqiqiq")
    unit_rows = [
        unit_row.pack(5, 8, 1, 11, f"u-{seq:09d}".encode(), 8, seq, 8, 1, 8, seq)
        for seq in range(2, lines + 1)
        if seq % 3 == 1
    ]
    chunks = {
        "COPY line_hashes (attempt_id, seq, sha256) FROM STDIN (FORMAT BINARY)": _chunks(hash_rows),
        "COPY run_units (run_id, unit, unit_index, attempt_id, seq) FROM STDIN (FORMAT BINARY)": (
            _chunks(unit_rows)
        ),
    }
    del hash_rows
    with psycopg.connect(dsn) as connection:
        started = time.perf_counter()
        with connection.transaction(), connection.cursor() as cursor:
            for statement, data in chunks.items():
                with cursor.copy(statement) as copy:
                    for chunk in data:
                        copy.write(chunk)
        elapsed = time.perf_counter() - started
    return elapsed, lines, len(unit_rows)


_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
_COPY_TRAILER = struct.pack(">h", -1)


def _chunks(rows: list[bytes], rows_a_chunk: int = 50_000) -> list[bytes]:
    """Binary COPY data of `rows` in chunks: the header in the first, the trailer in the last."""
    chunks = [
        b"".join(rows[first : first + rows_a_chunk]) for first in range(0, len(rows), rows_a_chunk)
    ]
    return [_COPY_SIGNATURE, *chunks, _COPY_TRAILER]


def bench_whole_process(
    admin_dsn: str,
    work: Path,
    line_counts: list[int],
    batch_bounds: list[tuple[int, int]],
    *,
    naive_lines: int,
    rounds: int,
) -> None:
    """Each round measures the COPY floor, then every batch bound in turn (the order rotated from
    round to round); a figure is the median of the rounds (its ratio, the median of the rounds'
    ratios), its peak RSS the highest of the rounds. The naive tailer is timed once per size."""
    load_before = load_average()
    say(f"whole process: load average {load_before} before, on {os.cpu_count()} cores")
    bench_fixed_cost(admin_dsn, work, runs=15)
    bounds = [(0, 0, f"default bounds ({BATCH_LINES_MAX:,} lines, {BATCH_BYTES_MAX:,} bytes)")]
    bounds += [
        (
            lines_max,
            bytes_max,
            f"batches of {lines_max:,} lines, {bytes_max or BATCH_BYTES_MAX:,} bytes",
        )
        for lines_max, bytes_max in batch_bounds
        if (lines_max, bytes_max or BATCH_BYTES_MAX) != (BATCH_LINES_MAX, BATCH_BYTES_MAX)
    ]
    for lines in line_counts:
        book = work / f"whole-{lines}"
        book.mkdir()
        journal = book / "events.jsonl"
        size = write_journal(journal, journal_lines(book.name, lines))
        say(f"journal: {lines:,} lines, {size / 1e6:.1f} MB")
        sample = min(naive_lines, lines)
        applied, naive_elapsed = naive_tailer(
            fresh_database(admin_dsn, "bench_naive"), journal, sample
        )
        naive_rate = applied / naive_elapsed
        say(
            f"  naive tailer, timed on the first {applied:,} lines: {naive_rate:,.0f} lines/s"
            f" (the whole journal would take {lines / naive_rate:,.0f} s)"
        )
        copy_rates: list[float] = []
        rates: dict[int, list[float]] = {index: [] for index in range(len(bounds))}
        peaks: dict[int, int] = dict.fromkeys(range(len(bounds)), 0)
        for round_no in range(rounds):
            copy_dsn = fresh_database(admin_dsn, "bench_copy")
            migrate_dsn(copy_dsn)
            copy_elapsed, hash_rows, unit_rows = copy_floor(copy_dsn, lines)
            copy_rates.append(lines / copy_elapsed)
            say(
                f"  round {round_no + 1}: COPY floor, {hash_rows:,} line_hashes rows and"
                f" {unit_rows:,} run_units rows in {copy_elapsed:.2f} s ="
                f" {copy_rates[-1]:,.0f} lines/s (load {load_average()})"
            )
            order = list(range(len(bounds)))
            order = order[round_no % len(order) :] + order[: round_no % len(order)]
            for index in order:
                lines_max, bytes_max, label = bounds[index]
                dsn = fresh_database(admin_dsn, "bench_sweep")
                migrate_dsn(dsn)
                elapsed, rss, report = sweep_process(
                    dsn, book, lines_max=lines_max, bytes_max=bytes_max
                )
                applied_lines = int(str(report["lines_applied"]))
                if applied_lines != lines:
                    raise RuntimeError(f"sweep applied {applied_lines:,} of {lines:,} lines")
                rates[index].append(lines / elapsed)
                peaks[index] = max(peaks[index], rss)
                say(
                    f"    sweep, {label}: {elapsed:.2f} s = {lines / elapsed:,.0f} lines/s;"
                    f" peak RSS {rss / 1e6:.1f} MB; / COPY {lines / elapsed / copy_rates[-1]:.2f}"
                )
        copy_rate = statistics.median(copy_rates)
        for index, (_, _, label) in enumerate(bounds):
            rate = statistics.median(rates[index])
            to_copy = statistics.median(
                each / floor for each, floor in zip(rates[index], copy_rates, strict=True)
            )
            say(
                f"  {label}: median {rate:,.0f} lines/s; / COPY {to_copy:.2f} (median of the"
                f" rounds); / naive {rate / naive_rate:.0f}x; peak RSS {peaks[index] / 1e6:.1f} MB"
            )
            name = f"whole process: `sweep` over {lines:,} lines, {label}"
            if rounds > 1:
                name += f"; median of {rounds} rounds"
            figure(
                name,
                "lines/s",
                rate,
                baseline_name="floor: COPY of the same rows into the same tables, nothing else",
                baseline=copy_rate,
                ratio=to_copy,
                target="ratio >= 0.5",
            )
            figure(
                name,
                "lines/s",
                rate,
                baseline_name=(
                    f"baseline: a naive tailer, one transaction per line (timed on"
                    f" {applied:,} lines)"
                ),
                baseline=naive_rate,
                target="ratio >= 100",
            )
            figure(
                f"whole process: `sweep` over {lines:,} lines, {label}: peak RSS",
                "MB",
                peaks[index] / 1e6,
                baseline_name="the journal's size",
                baseline=size / 1e6,
                target="< 150 MB",
            )
        journal.unlink()
    load_after = load_average()
    say(f"whole process: load average {load_after} after")
    NOTES.append(
        f"Load average {load_before} before, {load_after} after, on {os.cpu_count()} cores."
        f" Each rate is the median of {rounds} rounds; in each round the COPY floor is measured"
        " first, then every batch bound in turn. Only ratios within one run count. The naive"
        f" tailer is timed on its first {naive_lines:,} lines and its rate taken for the whole"
        " journal; the sweep's time is the whole command (start-up, connection, registration,"
        " the pass); its peak RSS is its own (VmHWM)."
    )


class _WriterThatWritesNothing(Writer):
    """A writer whose batches go nowhere: a pass with it costs what the pass's own thread does
    (its new rows get no ids, which nothing in the pass's thread reads)."""

    def submit(self, sealed: SealedBatch) -> None:
        self.drain()


def _timed_pass(admin_dsn: str, book: Path, writer: type[Writer]) -> tuple[float, float]:
    """One pass over `book` inside this process into a fresh database, with `writer`: its wall
    time, and the CPU time this process spent in it (the pass's thread and its writer's; the
    Postgres server is a process of its own)."""
    db = Database(fresh_database(admin_dsn, "bench_split"))
    try:
        migrate(db)
        register_book(db, book)
        with mock.patch("platform_ingest.ingest.book_pass.Writer", writer):
            started, cpu_started = time.perf_counter(), time.process_time()
            BookPass(db, book.name, mode="auto").run()
            return time.perf_counter() - started, time.process_time() - cpu_started
    finally:
        db.close()


def bench_split(admin_dsn: str, work: Path, line_counts: list[int], *, rounds: int) -> None:
    """Each round measures the COPY floor, then the pass with its writer and with a writer that
    writes nothing (which first alternating); each figure is the median of the rounds."""
    load_before = load_average()
    say(f"split: load average {load_before} before, on {os.cpu_count()} cores")
    fixed_s = bench_fixed_cost(admin_dsn, work, runs=15)
    tune_interpreter()  # as `platform-ingest` tunes its process
    for lines in line_counts:
        book = work / f"split-{lines}"
        book.mkdir()
        size = write_journal(book / "events.jsonl", journal_lines(book.name, lines))
        say(f"journal: {lines:,} lines, {size / 1e6:.1f} MB")
        times: dict[str, list[float]] = {"with": [], "alone": [], "copy": []}
        cpu: dict[str, list[float]] = {"with": [], "alone": []}
        arms: list[tuple[str, type[Writer]]] = [
            ("with", Writer),
            ("alone", _WriterThatWritesNothing),
        ]
        for round_no in range(rounds):
            copy_dsn = fresh_database(admin_dsn, "bench_copy")
            migrate_dsn(copy_dsn)
            times["copy"].append(copy_floor(copy_dsn, lines)[0])
            for name, writer in arms[:: 1 if round_no % 2 else -1]:
                wall_s, cpu_s = _timed_pass(admin_dsn, book, writer)
                times[name].append(wall_s)
                cpu[name].append(cpu_s)
            say(
                f"  round {round_no + 1}: COPY floor {times['copy'][-1]:.2f} s; the pass with its"
                f" writer {times['with'][-1]:.2f} s ({cpu['with'][-1]:.2f} s of CPU), alone"
                f" {times['alone'][-1]:.2f} s ({cpu['alone'][-1]:.2f} s) (load {load_average()})"
            )
        with_s, alone_s, copy_s = (statistics.median(times[name]) for name in times)
        with_cpu_s = statistics.median(cpu["with"])
        bound = copy_s / (alone_s + fixed_s)
        say(
            f"  medians: with its writer {with_s:.2f} s, alone {alone_s:.2f} s (the writer's"
            f" share {1 - alone_s / with_s:.0%}); COPY floor {copy_s:.2f} s; the whole command's"
            f" ratio to COPY with a writer that cost nothing, at most {bound:.2f}"
        )
        say(
            f"  the process's CPU in the pass with its writer: {with_cpu_s:.2f} s,"
            f" {with_cpu_s / with_s:.0%} of its wall time (both threads share one interpreter"
            f" lock: the pass lasts as long as the CPU its interpreter spends); the whole"
            f" command's ratio to COPY with this CPU, at most {copy_s / (with_cpu_s + fixed_s):.2f}"
        )
        figure(
            f"split: one pass over {lines:,} lines inside the process, with its writer",
            "s",
            with_s,
            baseline_name="the same pass with a writer that writes nothing (the pass's thread)",
            baseline=alone_s,
            target="(the writer's cost to the pass)",
        )
        figure(
            f"split: the COPY ratio of `sweep` over {lines:,} lines with a writer that cost"
            " nothing (the floor against the pass alone plus the fixed cost)",
            "s",
            alone_s + fixed_s,
            baseline_name="floor: COPY of the same rows into the same tables, nothing else",
            baseline=copy_s,
            ratio=bound,
            target="(an upper bound on the ratio of the whole command; target 0.5)",
        )
        figure(
            f"split: the process's CPU in one pass over {lines:,} lines with its writer (the"
            " pass's thread and the writer's, under one interpreter lock)",
            "s",
            with_cpu_s,
            baseline_name="the same pass's wall time",
            baseline=with_s,
            target="(near 1: the pass is bound by its interpreter, not by Postgres)",
        )
        (book / "events.jsonl").unlink()
    NOTES.append(
        f"Split: load average {load_before} before, {load_average()} after, on"
        f" {os.cpu_count()} cores; medians of {rounds} rounds."
    )


def _bounds(text: str) -> tuple[int, int]:
    """'LINES' or 'LINES:BYTES' (0 bytes: the default byte bound)."""
    lines_max, _, bytes_max = text.partition(":")
    return int(lines_max), int(bytes_max or 0)


def migrate_dsn(dsn: str) -> None:
    db = Database(dsn)
    try:
        migrate(db)
    finally:
        db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument(
        "--naive-lines",
        type=int,
        default=20_000,
        help="lines the naive tailer is timed on (it is slow; its rate is per line)",
    )
    parser.add_argument("--dsn", default=os.environ.get("PLATFORM_INGEST_DSN"))
    parser.add_argument("--big", action="store_true", help="also pass over a ~1 GB journal")
    parser.add_argument("--big-bytes", type=int, default=1_000_000_000)
    parser.add_argument(
        "--big-batch-lines",
        type=int,
        default=BATCH_LINES_MAX,
        help="the line bound of --big's pass (the byte bound stays the default)",
    )
    parser.add_argument(
        "--whole-process",
        action="store_true",
        help="`platform-ingest sweep` as a process, for several batch bounds, against COPY",
    )
    parser.add_argument(
        "--whole-lines",
        default="200000,1000000",
        help="the journals' sizes for --whole-process (comma-separated)",
    )
    parser.add_argument(
        "--whole-batches",
        default="5000,20000,50000",
        help="the batch bounds tried by --whole-process beside the default, comma-separated:"
        " LINES (with the default byte bound) or LINES:BYTES",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of --whole-process (each figure is the median of the rounds)",
    )
    parser.add_argument(
        "--split",
        action="store_true",
        help="where a pass's time goes: with its writer and with one that writes nothing",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args()
    prose_to(sys.stderr if args.json else sys.stdout)
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as directory:
        work = Path(directory)
        with contextlib.ExitStack() as stack:
            admin_dsn = args.dsn or stack.enter_context(embedded_postgres(work / "postgres"))
            if args.big:
                bench_big(admin_dsn, work, args.big_bytes, args.big_batch_lines)
            elif args.split:
                bench_split(
                    admin_dsn,
                    work,
                    [int(each) for each in args.whole_lines.split(",")],
                    rounds=args.rounds,
                )
            elif args.whole_process:
                bench_whole_process(
                    admin_dsn,
                    work,
                    [int(each) for each in args.whole_lines.split(",")],
                    [_bounds(each) for each in args.whole_batches.split(",")],
                    naive_lines=args.naive_lines,
                    rounds=args.rounds,
                )
            else:
                bench_rate(admin_dsn, work, args.lines, args.naive_lines)
    if args.json:
        print(json.dumps({"bench": "ingest", "figures": FIGURES, "notes": NOTES}))


if __name__ == "__main__":
    main()

"""Benchmark of the platform tailer against its floors, measured in the same run on the same server.

    python bench/bench_ingest.py [--lines N] [--naive-lines N] [--dsn DSN] [--big] [--big-bytes B]
        [--json]

Figures printed:

- apply rate of one pass over an N-line journal into a fresh database (effects, one sha256 row per
  line, cursor), against a NAIVE tailer on the same lines (one transaction per line: lock the
  cursor, insert the effect, update the cursor, commit), and against the physical floor of the
  server (the same number of rows inserted in large batches with nothing else to do);
- resume: a pass over the same book after a few lines were appended reads only what lies past the
  hint (bytes read are counted by the reader);
- with --big: one pass over a ~1 GB journal, with its bytes read and the peak RSS of the process.

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

from platform_ingest import Database, migrate  # noqa: E402
from platform_ingest._books import register_book  # noqa: E402
from platform_ingest._embedded import embedded_postgres  # noqa: E402
from platform_ingest._pass import BookPass  # noqa: E402

TIME = "2026-11-30T02:08:57.213Z"

OUT = sys.stdout
"""Where the prose goes (stderr under --json)."""
FIGURES: list[dict[str, object]] = []


def say(text: str) -> None:
    print(text, file=OUT)


def figure(
    name: str,
    unit: str,
    value: float,
    *,
    baseline_name: str,
    baseline: float,
    target: str,
    ratio: float | None = None,
) -> None:
    FIGURES.append(
        {
            "name": name,
            "unit": unit,
            "value": value,
            "baseline_name": baseline_name,
            "baseline": baseline,
            "ratio": value / baseline if ratio is None and baseline else ratio,
            "target": target,
        }
    )


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


def fresh_database(admin_dsn: str, name: str) -> str:
    with psycopg.connect(admin_dsn, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
        connection.execute(f'CREATE DATABASE "{name}"')
    info = psycopg.conninfo.conninfo_to_dict(admin_dsn)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})


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


def bench_big(admin_dsn: str, work: Path, target_bytes: int) -> None:
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
    report = BookPass(db, book.name, mode="auto").run()
    elapsed = time.perf_counter() - started
    say(
        f"big pass: {report.lines_applied:,} lines in {elapsed:.1f} s"
        f" ({report.lines_applied / elapsed:,.0f} lines/s), read {report.bytes_read:,} bytes"
    )
    say(
        f"peak RSS: {peak_rss_bytes() / 1e6:.1f} MB (before the pass: {rss_before / 1e6:.1f} MB;"
        " limit 150 MB)"
    )
    figure(
        f"one pass over a {size / 1e9:.2f} GB journal ({count:,} lines,"
        f" {report.lines_applied / elapsed:,.0f} lines/s): peak RSS",
        "MB",
        peak_rss_bytes() / 1e6,
        baseline_name="RSS before the pass",
        baseline=rss_before / 1e6,
        target="< 150 MB",
    )
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
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args()
    global OUT  # noqa: PLW0603 - the prose's destination, chosen once by the command line
    OUT = sys.stderr if args.json else sys.stdout
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as directory:
        work = Path(directory)
        with contextlib.ExitStack() as stack:
            admin_dsn = args.dsn or stack.enter_context(embedded_postgres(work / "postgres"))
            if args.big:
                bench_big(admin_dsn, work, args.big_bytes)
            else:
                bench_rate(admin_dsn, work, args.lines, args.naive_lines)
    if args.json:
        print(json.dumps({"bench": "ingest", "figures": FIGURES}))


if __name__ == "__main__":
    main()

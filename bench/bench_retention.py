"""Benchmark of the platform's bounded storage, each figure beside its baseline in the same run.

    python bench/bench_retention.py [--attempt-lines N] [--lines N] [--history-lines H]
        [--history-attempts K] [--rounds R] [--resume-lines N] [--resumes K] [--dsn DSN] [--json]

Figures printed:

- storage: the Postgres bytes one finished attempt of --attempt-lines lines (a hello, spend lines,
  a finished; applied by a real pass in named mode) holds, before and after compaction
  (`compact_quiet(db, quiet_for_s=0)`). Counted: `pg_total_relation_size('line_hashes')` (its
  heap, its primary-key index and its TOAST; the attempt's rows are the only rows in it) plus the
  attempt's own row (`pg_column_size`). After compaction the attempt has no `line_hashes` row left
  (counted: zero rows, zero bytes) and its row carries the digest. The table's files are shown as
  compaction leaves them, after VACUUM and after VACUUM FULL: what they keep is space for later
  rows, not the attempt's. Not counted, before or after (compaction does not change them): the
  run's row, the attempt's entries in the attempts table's indexes;
- apply rate into a database that already holds H compacted historical lines, against the same
  pass into a fresh database: rounds alternate (fresh first, then history first), each round one
  new journal of --lines lines passed into both, and the ratio is the median of the rounds' ratios;
- resumes: on the storage book (its 1M-line stream finished and compacted), the launcher names a
  new stream (`name_stream(..., new_run=True)`), the engine appends --resume-lines lines (a hello,
  spend lines, a finished) and a pass in named mode runs; the bytes it read (`bytes_read`, counted
  by the reader) against the new lines' bytes plus one hint line, for the first resume and after
  --resumes successive ones; then, for contrast, one more resume read from byte 0 as before
  (the book's scan reset before the pass, as `name` used to do).

The history is written with SQL (generate_series), not by passes over journals, to save time: for
each of K books, its row, one completed run, one finished attempt (last changed 8 days ago), one
`line_hashes` row per line and one `run_units` row per `unit_done` line (every third line, as in
the journals of `bench_ingest.py`); then the platform's own compaction (`compact_quiet`, default
quiet period) turns the hashes into digests and deletes the rows, and a VACUUM ANALYZE does what
autovacuum would. What is left is what passes plus compaction leave: attempts with
`compacted_seq`/`compacted_sha256` and no `line_hashes` rows, the runs, and their units (which
compaction does not touch: pruning does). The history's journals are not on disk.

The machine's load average (/proc/loadavg) is noted before and after: on a loaded machine every
rate drops, and only the ratios measured within one run can be compared.

Without --dsn an embedded Postgres is started in a temporary directory and removed at the end.
With --json the figures are printed as one JSON object on stdout (the prose goes to stderr), for
`bench/run_all.py`. Nothing here is a pass/fail check: the test suite has no timed assertion.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from _report import FIGURES, figure, fresh_database, load_average, prose_to, say  # noqa: E402
from platform_ingest import Database, migrate  # noqa: E402
from platform_ingest.decisions.views import Mode  # noqa: E402
from platform_ingest.ingest.book_pass import BookPass, PassReport  # noqa: E402
from platform_ingest.ingest.books import register_book  # noqa: E402
from platform_ingest.operate.compact import compact_quiet  # noqa: E402
from platform_ingest.operate.naming import name_stream  # noqa: E402
from platform_ingest.store import statements as ingest_sql  # noqa: E402
from platform_ingest.store.embedded import embedded_postgres  # noqa: E402

TIME = "2026-11-30T02:08:57.213Z"
KIB = 1024

NOTES: list[str] = []


# --- journals ---------------------------------------------------------------------------------


def _line(seq: int, kind: str, data: dict[str, object]) -> bytes:
    return orjson.dumps({"seq": seq, "type": kind, "time": TIME, "data": data}) + b"\n"


def _hello(book_id: str, engine_run_id: str) -> bytes:
    return _line(
        1,
        "hello",
        {
            "stream_version": "1.3",
            "engine_run_id": engine_run_id,
            "book_id": book_id,
            "chunker_version": "c1",
        },
    )


def spend_stream(
    book_id: str, engine_run_id: str, count: int, *, spent_before: int = 0
) -> Iterator[bytes]:
    """A whole stream of `count` lines: a hello, spend lines (cumulative), a finished."""
    yield _hello(book_id, engine_run_id)
    spent = spent_before
    for seq in range(2, count):
        spent += 1000
        yield _line(seq, "spend", {"committed_micro_usd": spent})
    yield _line(
        count,
        "finished",
        {
            "outcome": "clean",
            "exit_code": 0,
            "stop": None,
            "refusal": None,
            "volume": {"units_done": 0, "units_total": 0},
            "money": {"committed_micro_usd": spent},
        },
    )


def mixed_stream(book_id: str, count: int, phases: int = 3) -> Iterator[bytes]:
    """A live stream as `bench_ingest.py` writes it: a hello, then progress / unit_done / spend
    in turn (no finished)."""
    yield _hello(book_id, str(uuid.uuid4()))
    names = [f"phase-{index}" for index in range(phases)]
    for seq in range(2, count + 1):
        turn = seq % 3
        if turn == 0:
            data: dict[str, object] = {
                "phases": {name: {"done": seq // 3, "total": count} for name in names}
            }
            yield _line(seq, "progress", data)
        elif turn == 1:
            yield _line(seq, "unit_done", {"unit": f"u-{seq:09d}", "index": seq})
        else:
            yield _line(seq, "spend", {"committed_micro_usd": 1000 * seq})


def write_journal(path: Path, lines: Iterator[bytes]) -> tuple[int, int]:
    """Append the lines in large buffered chunks (bounded memory); return (bytes written, the
    length of the last line)."""
    written = last = 0
    chunk: list[bytes] = []
    chunk_bytes = 0
    with open(path, "ab") as file:
        for line in lines:
            chunk.append(line)
            chunk_bytes += len(line)
            last = len(line)
            if chunk_bytes >= 4 * 1024 * 1024:
                file.write(b"".join(chunk))
                written += chunk_bytes
                chunk, chunk_bytes = [], 0
        file.write(b"".join(chunk))
        written += chunk_bytes
    return written, last


# --- databases ----------------------------------------------------------------------------


def checkpoint(connection: psycopg.Connection[Any]) -> None:
    """Write out what building a database left dirty, so no checkpoint lands in a timed pass
    (needs the right to; skipped without it)."""
    with contextlib.suppress(psycopg.Error):
        connection.execute("CHECKPOINT")


def timed_pass(db: Database, book_id: str, mode: Mode) -> tuple[PassReport, float]:
    started = time.perf_counter()
    report = BookPass(db, book_id, mode=mode).run()
    return report, time.perf_counter() - started


def _size(connection: psycopg.Connection[Any], query: str, params: tuple[Any, ...] = ()) -> int:
    row = connection.execute(query, params).fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def table_files(connection: psycopg.Connection[Any], table: str) -> str:
    heap = _size(connection, "SELECT pg_relation_size(%s::regclass)", (table,))
    indexes = _size(connection, "SELECT pg_indexes_size(%s::regclass)", (table,))
    total = _size(connection, "SELECT pg_total_relation_size(%s::regclass)", (table,))
    return f"{total:,} bytes (heap {heap:,}, indexes {indexes:,})"


# --- 1. storage per attempt, and 3. resumes -------------------------------------------------


def bench_storage_and_resumes(
    admin_dsn: str, work: Path, attempt_lines: int, resume_lines: int, resumes: int
) -> None:
    dsn = fresh_database(admin_dsn, "bench_retention_storage")
    db = Database(dsn)
    migrate(db)
    book = work / "storage-book"
    book.mkdir()
    journal = book / "events.jsonl"
    book_id = register_book(db, book).book_id
    first = "stream-000"
    name_stream(db, str(book), first)
    size, _ = write_journal(journal, spend_stream(book_id, first, attempt_lines))
    say(
        f"storage book: one named stream of {attempt_lines:,} lines (a hello, spend lines, a"
        f" finished), {size / 1e6:.1f} MB"
    )
    report, elapsed = timed_pass(db, book_id, "named")
    say(
        f"  pass (named mode): {report.lines_applied:,} lines applied in {elapsed:.1f} s"
        f" ({report.lines_applied / elapsed:,.0f} lines/s)"
    )
    with psycopg.connect(dsn, autocommit=True) as sql:
        row = sql.execute(
            "SELECT attempt_id, state, last_seq FROM attempts WHERE engine_run_id = %s", (first,)
        ).fetchone()
        assert row is not None and row[1] == "finished" and row[2] == attempt_lines, row
        attempt_id = int(row[0])
        others = _size(
            sql, "SELECT count(*) FROM line_hashes WHERE attempt_id <> %s", (attempt_id,)
        )
        assert others == 0, "the attempt's rows must be the only ones in line_hashes"
        row_query = "SELECT pg_column_size(a.*) FROM attempts a WHERE attempt_id = %s"
        rows_query = "SELECT count(*) FROM line_hashes WHERE attempt_id = %s"
        hashes_before = _size(sql, "SELECT pg_total_relation_size('line_hashes')")
        rows_before = _size(sql, rows_query, (attempt_id,))
        row_before = _size(sql, row_query, (attempt_id,))
        before = hashes_before + row_before
        say(
            f"  before compaction: line_hashes {table_files(sql, 'line_hashes')} for its"
            f" {rows_before:,} rows ({hashes_before / rows_before:.0f} bytes a line), plus the"
            f" attempt's row {row_before} bytes = {before:,} bytes"
        )
        started = time.perf_counter()
        compaction = compact_quiet(db, quiet_for_s=0)
        compact_s = time.perf_counter() - started
        assert compaction.compacted == [attempt_id], compaction.as_json()
        rows_after = _size(sql, rows_query, (attempt_id,))
        row_after = _size(sql, row_query, (attempt_id,))
        assert rows_after == 0, rows_after
        after = row_after  # no line_hashes row of the attempt is left
        say(
            f"  compaction (compact_quiet, quiet_for_s=0): {compact_s:.1f} s"
            f" ({rows_before / compact_s:,.0f} lines/s), {compaction.rows_deleted:,} rows deleted"
        )
        say(
            f"  after compaction: {rows_after} line_hashes rows of the attempt (0 bytes), plus the"
            f" attempt's row {row_after} bytes (with its digest) = {after:,} bytes"
            f" (target < 1 KiB); before / after = {before / after:,.0f}x"
        )
        say(f"  the table's files as compaction leaves them: {table_files(sql, 'line_hashes')}")
        sql.execute("VACUUM line_hashes")
        say(
            f"  after VACUUM (as autovacuum would): {table_files(sql, 'line_hashes')}; the index"
            " keeps its emptied pages for later rows"
        )
        sql.execute("VACUUM FULL line_hashes")
        say(
            f"  after VACUUM FULL: {table_files(sql, 'line_hashes')}, the empty table's own"
            " overhead, whatever the number of attempts"
        )
    figure(
        f"Postgres bytes of one finished attempt of {attempt_lines:,} lines, after compaction"
        " (its line_hashes rows: none; its attempts row)",
        "bytes",
        after,
        baseline_name=(
            "before compaction: pg_total_relation_size of line_hashes (its rows only) plus its"
            " attempts row"
        ),
        baseline=before,
        target="< 1 KiB after",
    )
    bench_resumes(db, book, journal, earlier=attempt_lines, lines=resume_lines, resumes=resumes)
    db.close()


def _resume(
    db: Database, book: Path, journal: Path, index: int, lines: int, *, from_zero: bool
) -> tuple[PassReport, float, int, int, int]:
    """Name a new stream, append its lines, pass; return (report, seconds, bytes appended, the
    hint line's length, the journal's size before the append)."""
    book_id = book.name
    engine_run_id = f"stream-{index:03d}"
    name_stream(db, str(book), engine_run_id, new_run=True)
    size_before = journal.stat().st_size
    with open(journal, "rb") as file:
        file.seek(max(0, size_before - 4096))
        hint_line = len(file.read().rsplit(b"\n", 2)[-2]) + 1
    appended, _ = write_journal(
        journal, spend_stream(book_id, engine_run_id, lines, spent_before=10**12 + index * 10**6)
    )
    if from_zero:
        db.execute(ingest_sql.BOOK_SCAN_RESET, (book_id,))
    report, elapsed = timed_pass(db, book_id, "named")
    assert report.lines_applied == lines and not report.problems, report
    return report, elapsed, appended, hint_line, size_before


def bench_resumes(
    db: Database, book: Path, journal: Path, *, earlier: int, lines: int, resumes: int
) -> None:
    say(
        f"resumes (named mode) on that book, its {earlier:,}-line stream finished and compacted:"
        f" each names a new stream (new run), appends {lines} lines, then one pass"
    )
    read: list[tuple[int, int]] = []
    for index in range(1, resumes + 1):
        report, elapsed, appended, hint_line, size_before = _resume(
            db, book, journal, index, lines, from_zero=False
        )
        assert report.start_offset == size_before, (report.start_offset, size_before)
        read.append((report.bytes_read, appended + hint_line))
        say(
            f"  resume {index:2d}: read {report.bytes_read:,} bytes from byte"
            f" {report.start_offset:,}; new lines {appended:,} bytes + hint line {hint_line}"
            f" bytes = {appended + hint_line:,} ({elapsed * 1000:.0f} ms)"
        )
    old, old_elapsed, old_appended, _, old_size = _resume(
        db, book, journal, resumes + 1, lines, from_zero=True
    )
    say(
        f"  as before (the scan reset, read from byte 0): resume {resumes + 1} read"
        f" {old.bytes_read:,} bytes (the journal: {old_size + old_appended:,} bytes), for"
        f" {old_appended:,} new bytes ({old_elapsed:.2f} s; {old.duplicates:,} duplicates,"
        f" {old.unverified_duplicates} unverified)"
    )
    say(
        "  (a pass's bytes also count the byte before the hint line, read to check that the line"
        " begins there)"
    )
    first_read, first_expected = read[0]
    last_read, last_expected = read[-1]
    figure(
        f"resume after {earlier:,} earlier lines (named mode, {lines} new lines): bytes read",
        "bytes",
        first_read,
        baseline_name="the new lines' bytes plus one hint line",
        baseline=first_expected,
        target="ratio <= 1 (the pass also reads the byte before the hint line)",
    )
    figure(
        f"the last of {resumes} successive resumes: bytes read",
        "bytes",
        last_read,
        baseline_name="the new lines' bytes plus one hint line",
        baseline=last_expected,
        target="ratio <= 1 (the pass also reads the byte before the hint line)",
    )
    figure(
        f"resume after {earlier:,} earlier lines: bytes read, against the old behaviour",
        "bytes",
        last_read,
        baseline_name=(
            "the old behaviour: the next resume of the same size read from byte 0 (scan reset)"
        ),
        baseline=old.bytes_read,
        target="(the share of the journal a resume reads)",
    )


# --- 2. apply rate with a compacted history -------------------------------------------------


def build_history(dsn: str, db: Database, lines: int, attempts: int) -> None:
    """K books, each with one completed run and one finished attempt of lines/K lines, their
    line hashes and units; then the platform's compaction over them (see the module docstring)."""
    per = lines // attempts
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as sql:
        for index in range(attempts):
            book_id = f"history-{index:03d}"
            stream = f"history-stream-{index:03d}"
            digest = os.urandom(32)
            sql.execute(
                """INSERT INTO books (book_id, path, scan_offset, scan_line_bytes, scan_sha256,
                     scan_file, scan_stream, scan_mode, registered_at)
                   VALUES (%s, %s, %s, 100, %s, '0:0', %s, 'auto', now() - interval '30 days')""",
                (book_id, f"/history/{book_id}", per * 100, digest, stream),
            )
            run = sql.execute(
                """INSERT INTO runs (book_id, state, outcome, exit_code, committed_micro_usd,
                     progress, created_at, updated_at)
                   VALUES (%s, 'completed', 'clean', 0, %s, %s, now() - interval '9 days',
                     now() - interval '8 days')
                   RETURNING run_id""",
                (
                    book_id,
                    1000 * per,
                    json.dumps(
                        {f"phase-{n}": {"done": per // 3, "total": per // 3} for n in range(3)}
                    ),
                ),
            ).fetchone()
            assert run is not None
            attempt = sql.execute(
                """INSERT INTO attempts (book_id, run_id, engine_run_id, state, last_seq,
                     last_line_sha256, hint_offset, hint_line_bytes, hint_file, stream_index,
                     stream_version, chunker_version, last_line_time, last_applied_at,
                     created_at, changed_at)
                   VALUES (%s, %s, %s, 'finished', %s, %s, %s, 100, '0:0', 1, '1.3', 'c1', %s,
                     now() - interval '8 days', now() - interval '9 days',
                     now() - interval '8 days')
                   RETURNING attempt_id""",
                (book_id, run[0], stream, per, digest, per * 100, TIME),
            ).fetchone()
            assert attempt is not None
            sql.execute(
                """INSERT INTO line_hashes (attempt_id, seq, sha256)
                   SELECT %s, s, sha256(int8send(s) || %s::bytea)
                   FROM generate_series(1, %s) s""",
                (attempt[0], digest, per),
            )
            sql.execute(
                """INSERT INTO run_units (run_id, unit, unit_index, attempt_id, seq)
                   SELECT %s, 'u-' || lpad(s::text, 9, '0'), s, %s, s
                   FROM generate_series(1, %s) s WHERE s %% 3 = 1""",
                (run[0], attempt[0], per),
            )
        written = time.perf_counter() - started
        hashes = table_files(sql, "line_hashes")
        say(
            f"  written with SQL in {written:.0f} s: {attempts} books, runs and finished attempts"
            f" of {per:,} lines each; line_hashes {hashes}"
        )
        started = time.perf_counter()
        compacted: list[int] = []
        while True:
            report = compact_quiet(db)  # the default quiet period: the attempts are 8 days old
            compacted += report.compacted
            if not report.compacted and not report.finished_deleting:
                break
        compact_s = time.perf_counter() - started
        assert len(compacted) == attempts, compacted
        say(
            f"  compacted by compact_quiet in {compact_s:.0f} s ({per * attempts / compact_s:,.0f}"
            " lines/s)"
        )
        started = time.perf_counter()
        sql.execute("VACUUM ANALYZE")
        checkpoint(sql)
        left = _size(sql, "SELECT count(*) FROM line_hashes")
        units = _size(sql, "SELECT count(*) FROM run_units")
        say(
            f"  VACUUM ANALYZE in {time.perf_counter() - started:.0f} s; left: {left} line_hashes"
            f" rows, files {table_files(sql, 'line_hashes')}; run_units {units:,} rows,"
            f" {table_files(sql, 'run_units')}; database"
            f" {_size(sql, 'SELECT pg_database_size(current_database())'):,} bytes"
        )


def bench_history(
    admin_dsn: str,
    work: Path,
    *,
    lines: int,
    history_lines: int,
    history_attempts: int,
    rounds: int,
) -> None:
    say(
        f"apply rate with a history: {history_lines:,} lines in {history_attempts} finished"
        " attempts of other books, compacted"
    )
    history_dsn = fresh_database(admin_dsn, "bench_retention_history")
    history = Database(history_dsn)
    migrate(history)
    build_history(history_dsn, history, history_lines, history_attempts)
    fresh_dsn = fresh_database(admin_dsn, "bench_retention_fresh")
    fresh = Database(fresh_dsn)
    migrate(fresh)
    say(
        f"  {rounds} rounds, each one new journal of {lines:,} lines passed (auto mode) into both"
        " databases, which keep the earlier rounds' books; the order alternates"
    )
    rates: dict[str, list[float]] = {"fresh": [], "history": []}
    ratios: list[float] = []
    for number in range(rounds):
        book = work / f"apply-{number:02d}"
        book.mkdir()
        size, _ = write_journal(book / "events.jsonl", mixed_stream(book.name, lines))
        order = ["fresh", "history"] if number % 2 == 0 else ["history", "fresh"]
        measured: dict[str, float] = {}
        for which in order:
            db = fresh if which == "fresh" else history
            book_id = register_book(db, book).book_id
            report, elapsed = timed_pass(db, book_id, "auto")
            assert report.lines_applied == lines and not report.problems, report
            measured[which] = report.lines_applied / elapsed
            rates[which].append(measured[which])
        ratios.append(measured["history"] / measured["fresh"])
        say(
            f"  round {number + 1} ({size / 1e6:.1f} MB, {order[0]} first): fresh"
            f" {measured['fresh']:,.0f} lines/s, with history {measured['history']:,.0f} lines/s,"
            f" ratio {ratios[-1]:.3f}"
        )
    fresh_rate = statistics.median(rates["fresh"])
    history_rate = statistics.median(rates["history"])
    ratio = statistics.median(ratios)
    say(
        f"  median: fresh {fresh_rate:,.0f} lines/s, with history {history_rate:,.0f} lines/s;"
        f" median of the rounds' ratios {ratio:.3f} (target >= 0.9)"
    )
    figure(
        f"apply rate, one pass over {lines:,} lines, into a database holding {history_lines:,}"
        f" compacted lines ({history_attempts} attempts); median of {rounds} rounds",
        "lines/s",
        history_rate,
        baseline_name="the same pass into a fresh database, rounds alternating",
        baseline=fresh_rate,
        ratio=ratio,
        target="ratio >= 0.9 (median of the rounds' ratios)",
    )
    history.close()
    fresh.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--attempt-lines",
        type=int,
        default=1_000_000,
        help="lines of the finished attempt measured before and after compaction, and the"
        " earlier lines the resumes come after",
    )
    parser.add_argument(
        "--lines", type=int, default=200_000, help="lines of each journal timed for the apply rate"
    )
    parser.add_argument(
        "--history-lines", type=int, default=10_000_000, help="compacted lines already held"
    )
    parser.add_argument("--history-attempts", type=int, default=10)
    parser.add_argument(
        "--rounds", type=int, default=10, help="rounds of the apply rate (each into both databases)"
    )
    parser.add_argument("--resume-lines", type=int, default=100, help="lines of each resume")
    parser.add_argument("--resumes", type=int, default=10)
    parser.add_argument("--dsn", default=os.environ.get("PLATFORM_INGEST_DSN"))
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args()
    if args.attempt_lines < 3 or args.resume_lines < 3 or args.lines < 3:
        parser.error("a stream needs at least 3 lines (a hello, a line, a finished)")
    if args.rounds < 1 or args.resumes < 1 or args.history_attempts < 1:
        parser.error("--rounds, --resumes and --history-attempts must be at least 1")
    prose_to(sys.stderr if args.json else sys.stdout)
    load_before = load_average()
    say(f"{os.cpu_count()} cores; load average before: {load_before}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-retention-") as directory:
        work = Path(directory)
        with contextlib.ExitStack() as stack:
            admin_dsn = args.dsn or stack.enter_context(embedded_postgres(work / "postgres"))
            bench_storage_and_resumes(
                admin_dsn, work, args.attempt_lines, args.resume_lines, args.resumes
            )
            bench_history(
                admin_dsn,
                work,
                lines=args.lines,
                history_lines=args.history_lines,
                history_attempts=args.history_attempts,
                rounds=args.rounds,
            )
    load_after = load_average()
    say(f"load average after: {load_after}; {time.perf_counter() - started:.0f} s in all")
    NOTES.append(
        f"Load average {load_before} before, {load_after} after, on {os.cpu_count()} cores."
        " A loaded machine slows both sides of a rate: only the ratios measured within one run"
        " count, not rates compared across runs. The history is written with SQL and then"
        " compacted by the platform (see the benchmark's docstring)."
    )
    if args.json:
        print(json.dumps({"bench": "retention", "figures": FIGURES, "notes": NOTES}))


if __name__ == "__main__":
    main()

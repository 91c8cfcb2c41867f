"""Benchmark of the scrub (a book's applied lines read again and compared) against its floor.

    python bench/bench_scrub.py [--lines N] [--streams K] [--rounds R] [--dsn DSN] [--json]

One book: a journal of `--streams` finished streams of `--lines` lines each (progress, unit_done
and spend in turn, as `bench_ingest.py` writes them), applied by one pass; the first half of the
streams then compacted (their seqs judged by one digest), the others keep each line's hash. Each
round times, taking turns on the same journal:

- the scrub, `scrub_book` (steps of 1 MiB under the book's lock, each line decoded, hashed and
  compared with its kept hash or built into its range's digest): bytes a second of wall time, and
  the process's CPU seconds;
- the floor: the same file read in 256 KiB chunks, cut into lines, and each line's sha256 taken
  (what any comparison of lines with their hashes must do, nothing decoded, nothing asked of
  Postgres);
- for scale: one sha256 over the whole file (the hashing alone).

Printed: the medians over the rounds, and the ratio of the scrub to its floor (the median of the
rounds' ratios); the CPU the worker's background scrub takes at its default rate
(`run --scrub-bytes-per-s`, 1 MiB/s) follows from the scrub's CPU seconds a byte. Without --dsn an
embedded Postgres is started in a temporary directory and removed at the end.

With --json the figures are printed as one JSON object on stdout (the prose goes to stderr), for
`bench/run_all.py`. Nothing here is a pass/fail check: the test suite has no timed assertion.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from _report import FIGURES, figure, fresh_database, load_average, prose_to, say  # noqa: E402
from platform_ingest import Database, migrate  # noqa: E402
from platform_ingest._defaults import SCRUB_BYTES_PER_S_DEFAULT  # noqa: E402
from platform_ingest.ingest.book_pass import BookPass  # noqa: E402
from platform_ingest.ingest.books import register_book  # noqa: E402
from platform_ingest.operate.compact import compact_quiet  # noqa: E402
from platform_ingest.operate.scrub import ScrubReport, scrub_book  # noqa: E402
from platform_ingest.store.embedded import embedded_postgres  # noqa: E402

TIME = "2026-11-30T02:08:57.213Z"
CHUNK = 256 * 1024
BOOK = "book-scrub"


def _line(seq: int, kind: str, data: dict[str, object]) -> bytes:
    return orjson.dumps({"seq": seq, "type": kind, "time": TIME, "data": data}) + b"\n"


def stream(count: int) -> Iterator[bytes]:
    """A finished stream: a hello, progress / unit_done / spend in turn, a finished."""
    data: dict[str, object] = {
        "stream_version": "1.3",
        "engine_run_id": str(uuid.uuid4()),
        "book_id": BOOK,
        "chunker_version": "c1",
    }
    yield _line(1, "hello", data)
    phases = ("draft", "edit", "review")
    spent = 0
    for seq in range(2, count):
        turn = seq % 3
        if turn == 0:
            yield _line(
                seq,
                "progress",
                {"phases": {name: {"done": seq // 3, "total": count} for name in phases}},
            )
        elif turn == 1:
            yield _line(seq, "unit_done", {"unit": f"unit-{seq:09d}", "index": seq})
        else:
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


def floor(path: Path) -> int:
    """Each complete line of the file hashed, read as the reader reads it; the lines' count."""
    lines = 0
    with open(path, "rb") as file:
        rest = b""
        while chunk := file.read(CHUNK):
            cut = (rest + chunk).split(b"\n")
            rest = cut.pop()
            for each in cut:
                hashlib.sha256(each + b"\n").digest()
            lines += len(cut)
    return lines


def whole_file(path: Path) -> None:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)


def timed(run: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of `run()`."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def bench(admin_dsn: str, work: Path, lines: int, streams: int, rounds: int) -> None:
    dsn = fresh_database(admin_dsn, "bench_scrub")
    db = Database(dsn)
    migrate(db)
    book = work / BOOK
    book.mkdir()
    path = book / "events.jsonl"
    with open(path, "wb") as file:
        for _ in range(streams):
            file.writelines(stream(lines))
    size = path.stat().st_size
    book_id = register_book(db, book).book_id
    started = time.perf_counter()
    BookPass(db, book_id, mode="auto").run()
    say(
        f"journal: {size:,} bytes, {lines * streams:,} lines; applied in"
        f" {time.perf_counter() - started:.1f} s"
    )
    compacted = compact_quiet(db, quiet_for_s=0, limit=streams // 2).compacted
    say(f"{len(compacted)} of {streams} streams compacted")
    scrub_wall, scrub_cpu, floor_wall, whole_wall, ratios = [], [], [], [], []
    reports: list[ScrubReport] = []
    for _ in range(rounds):
        wall, cpu = timed(lambda: reports.append(scrub_book(db, book_id)))
        assert reports[-1].outcome == "clean", reports[-1]
        floor_s, _ = timed(lambda: floor(path))
        whole_s, _ = timed(lambda: whole_file(path))
        scrub_wall.append(wall)
        scrub_cpu.append(cpu)
        floor_wall.append(floor_s)
        whole_wall.append(whole_s)
        ratios.append(wall / floor_s)
    report = reports[-1]
    say(
        f"last scrub: {report.lines_compared:,} lines compared, {report.ranges_compared}"
        f" compacted ranges by digest, {report.unverified} unverified"
    )
    mib = 1024 * 1024
    scrub_rate = size / statistics.median(scrub_wall) / mib
    floor_rate = size / statistics.median(floor_wall) / mib
    whole_rate = size / statistics.median(whole_wall) / mib
    cpu_per_mib = statistics.median(scrub_cpu) / (size / mib)
    default_mib = SCRUB_BYTES_PER_S_DEFAULT / mib
    figure(
        "scrub, MiB of journal a second (one book, half its streams compacted)",
        "MiB/s",
        scrub_rate,
        baseline_name="floor: each line of the same file cut and sha256'd, nothing decoded,"
        " no Postgres, in the same rounds",
        baseline=floor_rate,
        ratio=1 / statistics.median(ratios),
        target="(the scrub's share of its floor's speed)",
    )
    figure(
        "for scale: one sha256 over the whole file, MiB a second",
        "MiB/s",
        whole_rate,
        baseline_name="the same floor",
        baseline=floor_rate,
        target="(the hashing alone)",
    )
    figure(
        f"CPU of the worker's background scrub at its default rate ({default_mib:g} MiB/s),"
        " share of one core",
        "%",
        100 * cpu_per_mib * default_mib,
        baseline_name="one core",
        baseline=100.0,
        target="< 5% of a core",
    )
    say(
        f"scrub {scrub_rate:.1f} MiB/s (CPU {cpu_per_mib * 1000:.1f} ms a MiB), floor"
        f" {floor_rate:.1f} MiB/s, whole-file sha256 {whole_rate:.1f} MiB/s; scrub/floor speed"
        f" {1 / statistics.median(ratios):.2f} (median of {rounds} rounds); at"
        f" {default_mib:g} MiB/s the background scrub takes {100 * cpu_per_mib * default_mib:.1f}%"
        " of a core"
    )
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=100_000, help="lines of each stream")
    parser.add_argument("--streams", type=int, default=4, help="streams of the book")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dsn", default=os.environ.get("PLATFORM_INGEST_DSN"))
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args()
    if args.lines < 3 or args.streams < 1 or args.rounds < 1:
        parser.error("--lines at least 3, --streams and --rounds at least 1")
    prose_to(sys.stderr if args.json else sys.stdout)
    load_before = load_average()
    say(f"{os.cpu_count()} cores; load average before: {load_before}")
    with tempfile.TemporaryDirectory(prefix="bench-scrub-") as directory:
        work = Path(directory)
        with contextlib.ExitStack() as stack:
            admin_dsn = args.dsn or stack.enter_context(embedded_postgres(work / "postgres"))
            bench(admin_dsn, work, args.lines, args.streams, args.rounds)
    load_after = load_average()
    say(f"load average after: {load_after}")
    notes = [f"Load average {load_before} before, {load_after} after, on {os.cpu_count()} cores."]
    if args.json:
        print(json.dumps({"bench": "scrub", "figures": FIGURES, "notes": notes}))


if __name__ == "__main__":
    main()

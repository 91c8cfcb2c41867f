"""Benchmark of how cost grows with the work: the CPU of one pass per line, over journals a hundred
times apart in size, and the CPU of the worker's survey per book, over roots ten times apart, each
beside its floor or baseline and beside the smallest size, all measured in the same run.

    python bench/bench_growth.py [--only pass|survey] [--lines 1000,100000,10000000]
        [--rounds 5] [--books 1000,10000,100000] [--surveys 5] [--unanalyzed-surveys 1]
        [--growing 0.01] [--seed 1] [--profile] [--work DIR] [--dsn DSN] [--json]

CPU is counted where the work is done: this process (`time.process_time()`: the pass's thread and
its writer's, or the survey's) and the Postgres backend of its session (the `/proc/PID/schedstat`
run time of that server process, read when the server is on this machine; otherwise only this
process's CPU is counted, and the figures say so). The server's background processes (WAL writer,
checkpointer, autovacuum) are not counted. The interpreter is tuned as `platform-ingest` tunes its
process (`gc.freeze`, the collector's thresholds, the switch interval).

Figures printed (a table of them at the end, each also kept for `run_all.py`):

- the pass's CPU per line: one journal of each of `--lines` lines (hello, then progress,
  unit_done and spend lines in turn, as `bench_ingest.py` writes them, in 4 MiB writes; deleted
  after), registered and passed once (`BookPass`, auto mode) into a fresh database each, in
  microseconds of CPU per line: this process, its backend, and the two together. Sizes under
  1,000,000 lines are passed `--rounds` times (a fresh database each) and the median taken;
  larger ones once. Before the first size, one 1,000-line pass into a database of its own warms
  the interpreter (not counted). Beside each: the ratio to the smallest size (target: within 1.5),
  and the floor: reading the same file line by line and `orjson.loads` of each line, nothing else
  (this process's CPU, repeated over at least 1,000,000 lines in all). A pass's fixed cost (its
  state loaded, its writer started, its last commit) weighs on the smallest journal most: the
  table also gives each size's ratio to the size before it;
- a survey's CPU per book: a root of each of `--books` book directories (a hello and two
  `unit_done` lines each, as `bench_fleet.py` writes them), each with a database of its own and
  one worker's `Survey` over it (alone in its group: it owns every book). Every root is set up
  first, in turn: what a worker does at start, measured and reported on its own (the root listed
  and every book registered, the worker announced, every book claimed, its lag measured, and the
  first survey), then every book passed (not counted). Autovacuum is off on the benchmark's
  tables, so that when they are first analyzed is the benchmark's choice. Then, in rounds of one
  survey of each root (the order rotated from round to round, so that the machine's load weighs
  on every size alike): `--unanalyzed-surveys` idle surveys before the tables' first ANALYZE
  (reported on their own: the window before autovacuum's first visit); `VACUUM ANALYZE` of each
  database, as autovacuum would do within a minute or so; `--surveys` idle surveys (no journal
  changed; each must find no book due); `--surveys` surveys with `--growing` of the books grown
  (one line appended to that share of the books, a new sample each time, before each survey;
  each survey must find exactly those due, which are then passed, not counted). A survey is
  `Survey.run()` and every `step()` until it is done. Each figure is the median over its surveys
  of the CPU per book per survey, beside the ratio to the smallest root (target: within 1.5) and
  the baseline, measured before each survey: `os.scandir` of the root and `os.stat` of each
  book's journal, the filesystem work a survey cannot avoid. With --profile, one more idle survey
  of each root runs under cProfile (not counted) and its costliest functions are printed.

The journals and the books are made under `--work` (default: the temporary directory), where the
embedded Postgres also lives; the free space there is checked before each journal, and a size
that does not fit is skipped and said. Without --dsn an embedded Postgres is started and removed at
the end. With --json the figures are printed as one JSON object on stdout (the prose goes to
stderr), for `bench/run_all.py`. Nothing here is a pass/fail check: the test suite has no timed
assertion.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import logging
import os
import pstats
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import psycopg

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from _report import FIGURES, figure, fresh_database, load_average, prose_to, say  # noqa: E402
from bench_fleet import make_books, next_line  # noqa: E402
from bench_ingest import journal_lines, write_journal  # noqa: E402
from platform_ingest import Database, migrate  # noqa: E402

# The platform's private modules, all in this block.
from platform_ingest._logs import FieldsLogger  # noqa: E402
from platform_ingest.cli.main import tune_interpreter  # noqa: E402
from platform_ingest.ingest.book_pass import BookPass  # noqa: E402
from platform_ingest.ingest.books import register_book  # noqa: E402
from platform_ingest.store.embedded import embedded_postgres  # noqa: E402
from platform_ingest.worker.membership import application_name, roots_digest  # noqa: E402
from platform_ingest.worker.metrics import Metrics  # noqa: E402
from platform_ingest.worker.schedule import Schedule  # noqa: E402
from platform_ingest.worker.survey import Survey  # noqa: E402

NOTES: list[str] = []
WORKER_ID = "bench-growth"
TARGET = "ratio <= 1.5 (against the smallest size)"
ROUNDS_BELOW_LINES = 1_000_000
"""Sizes under this many lines are passed `--rounds` times (the median taken); larger ones once."""
FLOOR_LINES_MIN = 1_000_000
"""The floor (read and parse) is repeated over at least this many lines in all."""
WARM_UP_LINES = 1000
PROFILE_FUNCTIONS = 15
"""How many functions `--profile` prints, by their own time."""
JOURNAL_BYTES_A_LINE = 160
"""About what one line of these journals takes on disk (143 to 150 bytes)."""
DATABASE_BYTES_A_LINE = 600
"""A generous bound of what a line costs Postgres: its line hash (heap and key), a third of a
`run_units` row, their WAL before a checkpoint recycles it."""


# --- CPU --------------------------------------------------------------------------------------


def backend_pid(db: Database) -> int | None:
    """The pid of the session's Postgres backend when it can be read here: the server on this
    machine (a Unix socket or a loopback address) and that pid a `postgres` process."""
    info = db.connection.info
    host = info.host or ""
    if not (host.startswith("/") or host in ("localhost", "127.0.0.1", "::1")):
        return None
    pid = info.backend_pid
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != "postgres":
            return None
        Path(f"/proc/{pid}/schedstat").read_text()
    except OSError:
        return None
    return pid


def backend_cpu_s(pid: int | None) -> float:
    """The backend's CPU so far (its run time in nanoseconds in `/proc/PID/schedstat`); 0 when
    it cannot be read."""
    if pid is None:
        return 0.0
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


@dataclass(frozen=True)
class Cpu:
    """CPU seconds spent in some work: this process's and its backend's."""

    process_s: float
    backend_s: float

    @property
    def total_s(self) -> float:
        return self.process_s + self.backend_s


def measured(pid: int | None, work: Callable[[], object]) -> Cpu:
    """The CPU `work` costs this process and the backend `pid`."""
    process_before, backend_before = time.process_time(), backend_cpu_s(pid)
    work()
    return Cpu(time.process_time() - process_before, backend_cpu_s(pid) - backend_before)


def median_cpu(samples: Sequence[Cpu]) -> Cpu:
    """The sample of median total CPU (its two parts kept together)."""
    ordered = sorted(samples, key=lambda sample: sample.total_s)
    return ordered[(len(ordered) - 1) // 2]


def fits(work: Path, needed: int, what: str) -> bool:
    """Whether `needed` bytes are free under `work`; said when not."""
    free = shutil.disk_usage(work).free
    if free >= needed:
        return True
    say(f"  {what}: skipped, it needs about {needed / 1e9:.1f} GB and {free / 1e9:.1f} GB are free")
    NOTES.append(f"{what} was skipped: about {needed / 1e9:.1f} GB needed, {free / 1e9:.1f} free.")
    return False


# --- the pass's CPU per line ------------------------------------------------------------------


@dataclass(frozen=True)
class PassSize:
    lines: int
    bytes: int
    rounds: int
    cpu: Cpu
    wall_s: float
    floor_s: float
    """The floor's CPU per line, in seconds."""


def read_and_parse_s(journal: Path, lines: int) -> float:
    """The floor: this process's CPU per line to read the journal line by line and parse each
    line with `orjson.loads`, nothing else (repeated over at least `FLOOR_LINES_MIN` lines)."""
    repeats = max(1, -(-FLOOR_LINES_MIN // lines))
    started = time.process_time()
    for _ in range(repeats):
        with open(journal, "rb") as file:
            for raw in file:
                orjson.loads(raw)
    return (time.process_time() - started) / (repeats * lines)


def timed_pass(admin_dsn: str, book: Path, lines: int) -> tuple[Cpu, float, bool]:
    """One pass over `book` into a fresh database: its CPU, its wall time, and whether the
    backend's CPU was read."""
    db = Database(fresh_database(admin_dsn, "bench_growth_pass"))
    try:
        migrate(db)
        register_book(db, book)
        pid = backend_pid(db)
        applied: list[int] = []
        started = time.perf_counter()
        cpu = measured(
            pid, lambda: applied.append(BookPass(db, book.name, mode="auto").run().lines_applied)
        )
        wall_s = time.perf_counter() - started
        if applied != [lines]:
            raise RuntimeError(f"the pass applied {applied} of {lines:,} lines")
        return cpu, wall_s, pid is not None
    finally:
        db.close()


def bench_pass(admin_dsn: str, work: Path, sizes: list[int], rounds: int) -> None:
    load_before = load_average()
    say(f"pass: load average {load_before} before, on {os.cpu_count()} cores")
    warm = work / "growth-warm-up"
    warm.mkdir()
    write_journal(warm / "events.jsonl", journal_lines(warm.name, WARM_UP_LINES))
    _, _, backend_read = timed_pass(admin_dsn, warm, WARM_UP_LINES)
    shutil.rmtree(warm)
    if not backend_read:
        say("  the server's processes cannot be read here: the CPU counted is this process's only")
    measured_sizes: list[PassSize] = []
    for lines in sizes:
        needed = lines * (JOURNAL_BYTES_A_LINE + DATABASE_BYTES_A_LINE)
        if not fits(work, needed, f"the pass over {lines:,} lines"):
            continue
        book = work / f"growth-{lines}"
        book.mkdir()
        journal = book / "events.jsonl"
        started = time.perf_counter()
        size = write_journal(journal, journal_lines(book.name, lines))
        say(
            f"journal: {lines:,} lines, {size / 1e6:,.1f} MB ({size / lines:.0f} bytes a line),"
            f" written in {time.perf_counter() - started:.1f} s"
        )
        floor_s = read_and_parse_s(journal, lines)
        times = rounds if lines < ROUNDS_BELOW_LINES else 1
        samples: list[Cpu] = []
        walls: list[float] = []
        for round_no in range(times):
            cpu, wall_s, _ = timed_pass(admin_dsn, book, lines)
            samples.append(cpu)
            walls.append(wall_s)
            say(
                f"  pass {round_no + 1} of {times}: {wall_s:.2f} s; CPU {cpu.process_s:.3f} s here"
                f" + {cpu.backend_s:.3f} s in its backend = {cpu.total_s / lines * 1e6:.2f} µs a"
                f" line (load {load_average()})"
            )
        shutil.rmtree(book)
        cpu = median_cpu(samples)
        measured_sizes.append(PassSize(lines, size, times, cpu, statistics.median(walls), floor_s))
        say(
            f"  median: {cpu.total_s / lines * 1e6:.2f} µs of CPU a line"
            f" ({cpu.process_s / lines * 1e6:.2f} here, {cpu.backend_s / lines * 1e6:.2f} in the"
            f" backend); floor (read and orjson.loads) {floor_s * 1e6:.2f} µs a line"
        )
    if not measured_sizes:
        return
    load_after = load_average()
    say(f"pass: load average {load_after} after")
    smallest = measured_sizes[0]
    counted = "this process and its Postgres backend" if backend_read else "this process only"
    for each in measured_sizes:
        per_line = each.cpu.total_s / each.lines * 1e6
        smallest_per_line = smallest.cpu.total_s / smallest.lines * 1e6
        shown = f"median of {each.rounds}" if each.rounds > 1 else "one pass"
        name = (
            f"pass over {each.lines:,} lines ({each.bytes / 1e6:,.1f} MB, {shown}): CPU per line,"
            f" {counted}"
        )
        figure(
            name,
            "µs",
            per_line,
            baseline_name=f"the same at {smallest.lines:,} lines (the smallest size)",
            baseline=smallest_per_line,
            target=TARGET,
        )
        figure(
            name,
            "µs",
            per_line,
            baseline_name="floor: reading the same file line by line and orjson.loads of each",
            baseline=each.floor_s * 1e6,
            target="(the pass against the bare read and parse)",
        )
    say("")
    say(
        "| lines | MB | wall s | CPU µs/line: here | backend | both | / smallest | / previous"
        " | floor µs/line | / floor |"
    )
    say("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    previous = smallest
    for each in measured_sizes:
        here, backend = each.cpu.process_s / each.lines * 1e6, each.cpu.backend_s / each.lines * 1e6
        both = here + backend
        to_smallest = both / (smallest.cpu.total_s / smallest.lines * 1e6)
        to_previous = both / (previous.cpu.total_s / previous.lines * 1e6)
        say(
            f"| {each.lines:,} | {each.bytes / 1e6:,.1f} | {each.wall_s:.2f} | {here:.2f} |"
            f" {backend:.2f} | {both:.2f} | {to_smallest:.2f} | {to_previous:.2f} |"
            f" {each.floor_s * 1e6:.2f} | {both / (each.floor_s * 1e6):.1f} |"
        )
        previous = each
    say("")
    NOTES.append(
        f"Pass: load average {load_before} before, {load_after} after, on {os.cpu_count()} cores;"
        f" CPU counted: {counted}. Sizes under {ROUNDS_BELOW_LINES:,} lines: the median of"
        f" {rounds} passes, a fresh database each; larger sizes one pass."
    )


# --- a survey's CPU per book ------------------------------------------------------------------


@dataclass
class Root:
    """One root of books, its database and its worker's survey, with what was measured of it."""

    books: int
    path: Path
    dsn: str
    db: Database
    survey: Survey
    schedule: Schedule
    pid: int | None
    last_seq: list[int] = field(default_factory=list)
    first: Cpu | None = None
    passes_s: float = 0.0
    unanalyzed: list[Cpu] = field(default_factory=list)
    idle: list[Cpu] = field(default_factory=list)
    growing: list[Cpu] = field(default_factory=list)
    baselines: list[float] = field(default_factory=list)
    """The baseline's CPU of each of its surveys after the ANALYZE, in seconds."""


def new_survey(db: Database, root: Path) -> tuple[Survey, Schedule]:
    """The survey of one worker over `root`, as `Worker` makes it."""
    schedule = Schedule()
    survey = Survey(
        db,
        [root],
        worker_id=WORKER_ID,
        digest=roots_digest([root]),
        membership_interval_s=1.0,
        survey_interval_s=15.0,
        schedule=schedule,
        metrics=Metrics(),
        log=FieldsLogger(logging.getLogger("platform_ingest"), {}),
        stopping=lambda: False,
    )
    return survey, schedule


def survey_once(survey: Survey) -> None:
    survey.run()
    while survey.surveying:
        survey.step()


def start(survey: Survey, root: Path) -> None:
    """What a worker does at start: the root listed and every book registered, the worker
    announced, every book claimed (its lag measured), then its first survey."""
    survey.rescan_roots = {root}
    survey.rescan()
    survey.announce(application_name(WORKER_ID, roots_digest([root])))
    survey.refresh_membership()
    survey_once(survey)


def pass_due(root: Root) -> int:
    """Pass every book due (not measured); the number passed."""
    passed = 0
    for path in root.schedule.ready(float("inf")):
        root.schedule.take(path)
        book = root.survey.books[path]
        assert book.book_id
        BookPass(root.db, book.book_id, mode="auto").run()
        passed += 1
    return passed


def scan_and_stat_s(root: Path) -> float:
    """The baseline: this process's CPU to list the root and stat each book's journal."""
    started = time.process_time()
    for entry in os.scandir(root):
        if entry.is_dir():
            os.stat(os.path.join(entry.path, "events.jsonl"), follow_symlinks=False)
    return time.process_time() - started


def autovacuum_off(dsn: str) -> None:
    """Autovacuum off on the benchmark's own tables: when their first ANALYZE comes is the
    benchmark's choice (`analyze`), not a moment of autovacuum's."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        tables = connection.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
        for (table,) in tables:
            connection.execute(f'ALTER TABLE "{table}" SET (autovacuum_enabled = off)')


def analyze(dsn: str) -> None:
    """What autovacuum does to the tables within a minute or so of their change: vacuumed and
    analyzed (which also invalidates the plans a session has cached over them)."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE")


def per_book(root: Root, cpu: Cpu) -> str:
    return (
        f"{cpu.process_s / root.books * 1e6:.2f} µs a book here"
        f" + {cpu.backend_s / root.books * 1e6:.2f} in its backend"
    )


def one_survey(root: Root, what: str, expected_due: int) -> tuple[Cpu, float]:
    """The baseline, then one survey of `root`, which must find `expected_due` books due."""
    baseline_s = scan_and_stat_s(root.path)
    cpu = measured(root.pid, lambda: survey_once(root.survey))
    due = len(root.schedule.ready(float("inf")))
    if due != expected_due:
        raise RuntimeError(f"{what} found {due:,} books due, not {expected_due:,}")
    say(
        f"  {root.books:,} books, {what}: {per_book(root, cpu)}; baseline"
        f" {baseline_s / root.books * 1e6:.2f} µs a book (load {load_average()})"
    )
    return cpu, baseline_s


def set_up(admin_dsn: str, work: Path, books: int) -> Root:
    """A root of `books` book directories and a database of its own; the worker's start over it
    (measured), then every book passed (not measured)."""
    path = (work / f"books-{books}").resolve()
    started = time.perf_counter()
    make_books(path, books)
    say(f"survey: {books:,} books made in {time.perf_counter() - started:.1f} s")
    dsn = fresh_database(admin_dsn, f"bench_growth_survey_{books}")
    db = Database(dsn)
    migrate(db)
    autovacuum_off(dsn)
    survey, schedule = new_survey(db, path)
    root = Root(books, path, dsn, db, survey, schedule, backend_pid(db), [3] * books)
    root.first = measured(root.pid, lambda: start(survey, path))
    due = len(schedule.ready(float("inf")))
    if due != books:
        raise RuntimeError(f"the start found {due:,} of {books:,} books due")
    say(f"  start (register, claim, first survey): {per_book(root, root.first)}")
    started = time.perf_counter()
    passed = pass_due(root)
    root.passes_s = time.perf_counter() - started
    say(f"  every book passed (not counted): {passed:,} in {root.passes_s:.1f} s")
    return root


def grow(root: Root, rng: random.Random, share: float) -> int:
    """One line appended to `share` of the root's books (a new sample); how many."""
    grown = max(1, round(root.books * share))
    for book in rng.sample(range(root.books), grown):
        root.last_seq[book] += 1
        with open(root.path / f"book-{book:06d}" / "events.jsonl", "ab") as journal:
            journal.write(next_line(root.last_seq[book]))
    return grown


def rotated(roots: list[Root], turn: int) -> list[Root]:
    """The roots in turn order, the first one moved along each turn."""
    shift = turn % len(roots)
    return roots[shift:] + roots[:shift]


def profile_survey(root: Root) -> None:
    """One more idle survey under cProfile (not counted): where this process's CPU goes."""
    profiler = cProfile.Profile()
    profiler.enable()
    survey_once(root.survey)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(PROFILE_FUNCTIONS)
    say(f"profile of an idle survey of {root.books:,} books (tottime, under cProfile):")
    for text in out.getvalue().splitlines():
        if text.strip() and not text.startswith(("   Ordered by", "         ")):
            say(f"    {text}")


def bench_survey(
    admin_dsn: str,
    work: Path,
    sizes: list[int],
    *,
    surveys: int,
    unanalyzed: int,
    growing: float,
    seed: int,
    profile: bool,
) -> None:
    """Every root set up first; then the surveys of every kind in rounds, one survey of each root
    a round (the order rotated from round to round), so that the load of the machine weighs on
    every size alike."""
    load_before = load_average()
    say(f"survey: load average {load_before} before, on {os.cpu_count()} cores")
    rng = random.Random(seed)
    roots: list[Root] = []
    try:
        for books in sizes:
            needed = books * 64 * 1024  # a directory, a journal, their rows, generously
            if fits(work, needed, f"the survey of {books:,} books"):
                roots.append(set_up(admin_dsn, work, books))
        if not roots:
            return
        for turn in range(unanalyzed):
            for root in rotated(roots, turn):
                what = f"idle survey {turn + 1} before the first ANALYZE"
                root.unanalyzed.append(one_survey(root, what, 0)[0])
        for root in roots:
            analyze(root.dsn)
        for turn in range(surveys):
            for root in rotated(roots, turn):
                cpu, baseline_s = one_survey(root, f"idle survey {turn + 1}", 0)
                root.idle.append(cpu)
                root.baselines.append(baseline_s)
        for turn in range(surveys):
            for root in rotated(roots, turn):
                grown = grow(root, rng, growing)
                what = f"survey {turn + 1}, {grown:,} books grown"
                cpu, baseline_s = one_survey(root, what, grown)
                root.growing.append(cpu)
                root.baselines.append(baseline_s)
                pass_due(root)
        if profile:
            for root in roots:
                profile_survey(root)
    finally:
        for root in roots:
            root.db.close()
            shutil.rmtree(root.path)
    load_after = load_average()
    say(f"survey: load average {load_after} after")
    report_surveys(roots, surveys=surveys, unanalyzed=unanalyzed, growing=growing)
    passes = ", ".join(f"{root.books:,} in {root.passes_s:.0f} s" for root in roots)
    NOTES.append(
        f"Survey: load average {load_before} before, {load_after} after, on {os.cpu_count()}"
        f" cores; CPU counted: {counted_of(roots)}; medians of {surveys} surveys of each kind,"
        " every root surveyed once a round (the order rotated), the baseline measured before"
        f" each survey. Every book passed once after the start (not counted): {passes}."
        " Autovacuum is off on the benchmark's tables; VACUUM ANALYZE is run after the surveys"
        " before the first ANALYZE."
    )


def counted_of(roots: list[Root]) -> str:
    if all(root.pid is not None for root in roots):
        return "this process and its Postgres backend"
    return "this process only"


def report_surveys(roots: list[Root], *, surveys: int, unanalyzed: int, growing: float) -> None:
    counted = counted_of(roots)
    kinds: list[tuple[str, Callable[[Root], list[Cpu]], bool]] = [
        (
            "start: register, claim, first survey",
            lambda root: [root.first] if root.first else [],
            False,
        ),
        (
            f"idle survey before the tables' first ANALYZE (median of {unanalyzed})",
            lambda root: root.unanalyzed,
            True,
        ),
        (f"idle survey (median of {surveys})", lambda root: root.idle, True),
        (
            f"survey, {growing:.0%} of the books grown (median of {surveys})",
            lambda root: root.growing,
            True,
        ),
    ]
    smallest = roots[0]
    rows: list[str] = []
    for kind, samples_of, with_baseline in kinds:
        if not samples_of(smallest):
            continue
        smallest_per_book = median_cpu(samples_of(smallest)).total_s / smallest.books * 1e6
        previous_per_book = smallest_per_book
        for root in roots:
            cpu = median_cpu(samples_of(root))
            here, backend = cpu.process_s / root.books * 1e6, cpu.backend_s / root.books * 1e6
            both = here + backend
            name = f"{kind} over {root.books:,} books: CPU per book, {counted}"
            figure(
                name,
                "µs",
                both,
                baseline_name=f"the same over {smallest.books:,} books (the smallest root)",
                baseline=smallest_per_book,
                target=TARGET,
            )
            baseline_us = statistics.median(root.baselines) / root.books * 1e6
            shown = " | |"
            if with_baseline:
                figure(
                    name,
                    "µs",
                    both,
                    baseline_name="baseline: os.scandir of the root and os.stat of each journal",
                    baseline=baseline_us,
                    target="(the survey against the bare filesystem work)",
                )
                shown = f" {baseline_us:.2f} | {both / baseline_us:.1f} |"
            rows.append(
                f"| {kind} | {root.books:,} | {here:.2f} | {backend:.2f} | {both:.2f} |"
                f" {both / smallest_per_book:.2f} | {both / previous_per_book:.2f} |{shown}"
            )
            previous_per_book = both
    say("")
    say(
        "| survey | books | CPU µs/book: here | backend | both | / smallest | / previous"
        " | baseline µs/book | / baseline |"
    )
    say("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        say(row)
    say("")


def _sizes(text: str) -> list[int]:
    sizes = sorted({int(each.replace("_", "")) for each in text.split(",") if each.strip()})
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError("sizes must be positive integers, comma-separated")
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("pass", "survey"))
    parser.add_argument(
        "--lines", type=_sizes, default=[1000, 100_000, 10_000_000], help="journals' sizes"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help=f"passes over a journal under {ROUNDS_BELOW_LINES:,} lines (the median taken)",
    )
    parser.add_argument(
        "--books", type=_sizes, default=[1000, 10_000, 100_000], help="roots' sizes"
    )
    parser.add_argument("--surveys", type=int, default=5, help="surveys measured of each kind")
    parser.add_argument(
        "--unanalyzed-surveys",
        type=int,
        default=1,
        help="idle surveys measured before the tables' first ANALYZE (0: none)",
    )
    parser.add_argument(
        "--growing", type=float, default=0.01, help="share of the books grown before a survey"
    )
    parser.add_argument("--seed", type=int, default=1, help="of the books grown")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="one more idle survey of each root under cProfile (not counted): where its CPU goes",
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="where journals, books and Postgres go"
    )
    parser.add_argument("--dsn", default=os.environ.get("PLATFORM_INGEST_DSN"))
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args()
    if args.rounds < 1 or args.surveys < 1 or args.unanalyzed_surveys < 0:
        parser.error("--rounds and --surveys must be at least 1, --unanalyzed-surveys at least 0")
    if not 0 < args.growing <= 1:
        parser.error("--growing must be in (0, 1]")
    prose_to(sys.stderr if args.json else sys.stdout)
    tune_interpreter()  # as `platform-ingest` tunes its process
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-growth-", dir=args.work) as directory:
        work = Path(directory)
        with contextlib.ExitStack() as stack:
            admin_dsn = args.dsn or stack.enter_context(embedded_postgres(work / "postgres"))
            if args.only in (None, "pass"):
                bench_pass(admin_dsn, work, args.lines, args.rounds)
            if args.only in (None, "survey"):
                bench_survey(
                    admin_dsn,
                    work,
                    args.books,
                    surveys=args.surveys,
                    unanalyzed=args.unanalyzed_surveys,
                    growing=args.growing,
                    seed=args.seed,
                    profile=args.profile,
                )
    say(f"{time.perf_counter() - started:.0f} s in all")
    if args.json:
        print(json.dumps({"bench": "growth", "figures": FIGURES, "notes": NOTES}))


if __name__ == "__main__":
    main()

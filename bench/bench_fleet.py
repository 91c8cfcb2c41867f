"""Benchmark of a fleet of workers (`platform-ingest run`) sharing many books, with one worker
killed and restarted over and over, in one run.

    python bench/bench_fleet.py [--books 40000] [--workers 4] [--churn-s 60] [--kill-every-s 10]
        [--restart-after-s S] [--steady-s 15] [--writer-books 200] [--pace-ms 10]
        [--probe-books 200] [--dsn DSN] [--json]

The set-up: `--books` book directories under one root, each with a short journal (a hello and two
`unit_done` lines, written directly in the format the other benchmarks use), and `--workers`
real `platform-ingest run ROOT --auto` processes on one Postgres, each with a stable
`--worker-id` (as a systemd unit gives it). The fleet first applies every book (timed: the commit
rate one primary sustains while 40,000 books are passed at once). Then a writer appends one line
at a time to `--writer-books` books, each line written and fsynced, every `--pace-ms`, through a
quiet phase of `--steady-s` seconds and then the churn: every `--kill-every-s` seconds one worker
(in turn) is killed with SIGKILL, and started again (same worker id) `--restart-after-s` later
(default: half the kill interval). At the end the writer stops, every line is waited for, and the
workers are stopped with SIGTERM.

Figures printed (each with its target where there is one):

- takeover: for each kill, (a) when the killed worker's Postgres session left `pg_stat_activity`;
  (b) when EVERY orphaned book (each book the killed worker owned, by the same rendezvous hash the
  workers compute) was owned again: the live workers' `platform_ingest_books{state="owned"}`
  metrics, polled every 50 ms, all reporting and summing to the number of books (said when this
  only happened after the restart, or not before the next kill); (c) when a line written to each
  of `--probe-books` orphaned books right after the kill (a random sample, not the writer's
  books; the write is not fsynced, which only visibility needs) was committed, the last of them:
  ownership plus the claim's lag measurement plus the pass. All three from the SIGKILL. Target:
  `--membership-s` (1 s) plus one pass. Probing every orphaned book (10,000 at full size) would
  put 10,000 passes in each 10 s window on 2 cores and measure that backlog, not the takeover;
  ownership in (b) covers every one of them, the probes what follows it. For each restart: the
  end of the restarted worker's first survey (from its log: it has listed and registered every
  book and measured its own), and when it owned its share again (its metrics). And every survey
  of the run (each worker logs its duration at DEBUG): while one runs, its worker passes nothing.
- latency: from the writer's fsync return to the commit of the transaction that applied the
  line, stamped by a deferred trigger with clock_timestamp() (as `bench_worker.py` does; same
  host, same clock), p50 and p99 during the churn beside the same figures in the quiet phase.
  Target (the worker's steady state): p50 <= 10 ms, p99 <= 100 ms. Under churn a line written to
  a book whose owner was just killed waits for the takeover, which is what the churn p99 shows.
- Postgres: connections to the benchmark's database (pg_stat_activity, the benchmark's own
  sessions left out) and advisory locks held (pg_locks, locktype 'advisory'), sampled every
  0.25 s through the whole run: max and median, by role. Expected: three sessions per worker
  (its own, which announces it; its control listener's; its housekeeping's, opened at its first
  round, a safety-pass interval after start); a book lock only while a pass is in flight. Also commits per second and WAL bytes per second
  (pg_stat_database, pg_current_wal_lsn) in each phase.
- lines applied twice: must be 0, counted in Postgres three ways that do not rely on the
  constraints they would test: (1) a BEFORE INSERT trigger on `line_hashes` logs every
  (attempt, seq) written into a table with no key; one logged twice was applied by two committed
  transactions; (2) the same on `run_units`, whose inserts say ON CONFLICT DO NOTHING (a unit
  applied twice would vanish in the key; the BEFORE trigger fires before the conflict is met);
  (3) the deferred trigger's (old last_seq, new last_seq] ranges per attempt: their lengths must
  add up to the final last_seq, with no overlap. Then each book's final state is compared with
  what was written: last_seq, one `run_units` row per `unit_done` line, the run's spend equal to
  the last cumulative `spend` written, one `line_hashes` row per line (a line lost shows here).

Before anything starts, the inotify budget is checked: every worker watches the root and every
book directory (books + 1 watches each), against /proc/sys/fs/inotify/max_user_watches less what
this user's processes already hold. When the fleet does not fit, it is said, and the number of
books is lowered to what fits (a worker over the limit falls back to its survey every 15 s: that
would measure the survey, not the fleet).

Without --dsn an embedded Postgres is started in a temporary directory and removed at the end.
With --json the figures are printed as one JSON object on stdout (the prose goes to stderr), for
`bench/run_all.py`. Nothing here is a pass/fail check: the test suite has no timed assertion.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psycopg

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from _report import (  # noqa: E402
    FIGURES,
    figure,
    fresh_database,
    load_average,
    prose_to,
    say,
    scrape_metrics,
)
from bench_worker import hello, line, unit  # noqa: E402
from platform_ingest import Database, migrate  # noqa: E402
from platform_ingest.store.embedded import embedded_postgres  # noqa: E402
from platform_ingest.worker.membership import owner_of  # noqa: E402

BIN = Path(sys.executable).parent
NOTES: list[str] = []
BENCH_APP = "bench-fleet"
"""The application name of the benchmark's own sessions: left out of the connection counts."""
MEMBERSHIP_S = 1.0
"""The workers' `--membership-s` (their default): what takeover is measured against."""
WATCHES = Path("/proc/sys/fs/inotify/max_user_watches")
SESSIONS_PER_WORKER = 3
"""A worker's Postgres sessions: its own (which announces it to the others), its control
listener's (LISTEN for operators' changes) and its housekeeping's (compaction)."""

Connection = psycopg.Connection[tuple[Any, ...]]


def connect(dsn: str) -> Connection:
    return psycopg.connect(dsn, autocommit=True, application_name=BENCH_APP)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# --- books and their lines ------------------------------------------------------------------


def book_name(number: int) -> str:
    return f"book-{number:06d}"


def next_line(seq: int) -> bytes:
    """Line `seq` (>= 4) of a book: `unit_done` on even seqs, a cumulative `spend` on odd ones,
    so that both kinds of effect can be compared with what was written."""
    if seq % 2 == 0:
        return unit(seq)
    return line(seq, "spend", {"committed_micro_usd": 1000 * seq})


def expected(last_seq: int) -> tuple[int, int]:
    """(units, spend) of a book whose journal holds seqs 1..last_seq: seqs 2 and 3 are the
    initial units, then `next_line`'s pattern."""
    units = 2 + sum(1 for seq in range(4, last_seq + 1) if seq % 2 == 0)
    odd = last_seq if last_seq % 2 == 1 else last_seq - 1
    return units, 1000 * odd if odd >= 5 else 0


def make_books(root: Path, books: int) -> None:
    """Book directories with a short journal each, written directly: at 40,000 books an engine
    or a pass per book would take minutes the benchmark does not need."""
    root.mkdir(parents=True)
    for number in range(books):
        book_id = book_name(number)
        (root / book_id).mkdir()
        (root / book_id / "events.jsonl").write_bytes(hello(book_id) + unit(2) + unit(3))


def append(path: Path, data: bytes, *, sync: bool) -> float:
    """Append one line; the wall time after write (and fsync when `sync`) returned."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
        return time.time()
    finally:
        os.close(fd)


# --- inotify budget -------------------------------------------------------------------------


def watches_in_use() -> int:
    """inotify watches held by this user's processes now (those whose fds can be read)."""
    held = 0
    uid = os.getuid()
    for process in Path("/proc").iterdir():
        if not process.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if process.stat().st_uid != uid:
                continue
            for fdinfo in (process / "fdinfo").iterdir():
                with contextlib.suppress(OSError):
                    held += fdinfo.read_text().count("inotify wd:")
    return held


def fitting_books(books: int, workers: int) -> int:
    """The number of books the fleet can watch, said aloud when it is fewer than asked."""
    try:
        limit = int(WATCHES.read_text())
    except OSError:
        say("inotify: max_user_watches unreadable; assuming the fleet fits")
        return books
    used = watches_in_use()
    needed = workers * (books + 1)
    say(
        f"inotify: {workers} workers x ({books:,} books + 1 root) = {needed:,} watches;"
        f" max_user_watches {limit:,}, {used:,} already held by this user"
    )
    if needed <= limit - used:
        NOTES.append(
            f"inotify: the fleet needs {needed:,} watches ({workers} x ({books:,} + 1)); the"
            f" limit here is {limit:,} per user ({used:,} held by others): it fits."
        )
        return books
    fits = max(0, (limit - used) // workers - 1)
    say(
        f"  DOES NOT FIT: a worker over the limit falls back to its survey (every 15 s);"
        f" measuring {fits:,} books instead (raise fs.inotify.max_user_watches to run {books:,})"
    )
    NOTES.append(
        f"inotify: {books:,} books need {needed:,} watches, over the limit of {limit:,}"
        f" ({used:,} held already): measured with {fits:,} books."
    )
    return fits


# --- the database's instruments -------------------------------------------------------------


def instrument(dsn: str) -> None:
    """The triggers that stamp commits and log every write the duplicate check counts."""
    with connect(dsn) as connection:
        for statement in (
            "CREATE TABLE bench_commits (attempt_id bigint, old_seq bigint, new_seq bigint,"
            " at timestamptz)",
            "CREATE FUNCTION bench_stamp() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " INSERT INTO bench_commits VALUES (NEW.attempt_id, OLD.last_seq, NEW.last_seq,"
            " clock_timestamp()); RETURN NULL; END $$",
            # Deferred: it runs when the applying transaction commits, so the stamp is the
            # commit's time (within the commit's own work), not the statement's.
            "CREATE CONSTRAINT TRIGGER bench_stamp AFTER UPDATE ON attempts"
            " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.last_seq > OLD.last_seq)"
            " EXECUTE FUNCTION bench_stamp()",
            # No key on the logs: a write made twice by committed transactions shows twice.
            "CREATE TABLE bench_line_log (attempt_id bigint, seq bigint)",
            "CREATE FUNCTION bench_line_log() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " INSERT INTO bench_line_log VALUES (NEW.attempt_id, NEW.seq); RETURN NEW; END $$",
            "CREATE TRIGGER bench_line_log BEFORE INSERT ON line_hashes"
            " FOR EACH ROW EXECUTE FUNCTION bench_line_log()",
            "CREATE TABLE bench_unit_log (run_id bigint, unit text)",
            "CREATE FUNCTION bench_unit_log() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " INSERT INTO bench_unit_log VALUES (NEW.run_id, NEW.unit); RETURN NEW; END $$",
            # BEFORE: fires for a row that ON CONFLICT DO NOTHING then discards.
            "CREATE TRIGGER bench_unit_log BEFORE INSERT ON run_units"
            " FOR EACH ROW EXECUTE FUNCTION bench_unit_log()",
        ):
            connection.execute(statement)


def scalar(connection: Connection, query: str) -> int:
    row = connection.execute(query).fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


@dataclass
class Rates:
    """What the server did over one phase (wall-clock bounds, for the commit stamps)."""

    transactions_s: float
    """pg_stat_database.xact_commit: every transaction, reads included."""
    wal_s: float
    wall_from: float
    wall_to: float


@dataclass
class ServerCounters:
    commits: int
    wal: int
    at: float
    wall: float

    @classmethod
    def read(cls, connection: Connection) -> ServerCounters:
        row = connection.execute(
            "SELECT xact_commit, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint"
            " FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        return cls(int(row[0]), int(row[1]), time.monotonic(), time.time())

    def rates_since(self, before: ServerCounters) -> Rates:
        elapsed = max(1e-9, self.at - before.at)
        return Rates(
            (self.commits - before.commits) / elapsed,
            (self.wal - before.wal) / elapsed,
            before.wall,
            self.wall,
        )


class Sampler(threading.Thread):
    """Connections and advisory locks of the benchmark's database, every 0.25 s."""

    def __init__(self, dsn: str) -> None:
        super().__init__(name="sampler", daemon=True)
        self.dsn = dsn
        self.stop = threading.Event()
        self.samples: list[tuple[float, int, int, int, int, int]] = []
        """(time, worker, listener, housekeeping and all client sessions, advisory locks)."""

    def run(self) -> None:
        with connect(self.dsn) as connection:
            while not self.stop.wait(0.25):
                row = connection.execute(
                    "SELECT"
                    " count(*) FILTER (WHERE application_name LIKE 'platform-ingest worker %%'),"
                    " count(*) FILTER (WHERE application_name LIKE 'platform-ingest listener %%'),"
                    " count(*) FILTER (WHERE application_name = 'platform-ingest housekeeping'),"
                    " count(*),"
                    " (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                    "   AND database = (SELECT oid FROM pg_database"
                    "                   WHERE datname = current_database()))"
                    # Client sessions only: autovacuum workers are in pg_stat_activity too.
                    " FROM pg_stat_activity WHERE datname = current_database()"
                    " AND backend_type = 'client backend' AND application_name <> %s",
                    (BENCH_APP,),
                ).fetchone()
                assert row is not None
                workers, listeners, housekeeping, sessions, locks = (int(value) for value in row)
                self.samples.append(
                    (time.monotonic(), workers, listeners, housekeeping, sessions, locks)
                )


# --- the workers ----------------------------------------------------------------------------


@dataclass
class Member:
    """One worker slot: its stable id, and the process running it now."""

    index: int
    worker_id: str
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    port: int | None = None
    starts: int = 0

    def start(self, dsn: str, root: Path, logs: Path) -> None:
        self.starts += 1
        self.log = logs / f"{self.worker_id}-{self.starts}.log"
        self.port = None
        with open(self.log, "wb") as stderr:
            self.process = subprocess.Popen(
                [
                    str(BIN / "platform-ingest"),
                    "--dsn",
                    dsn,
                    # DEBUG adds one line per survey, with its duration (read at the end).
                    "--log-level",
                    "DEBUG",
                    "run",
                    str(root),
                    "--auto",
                    "--metrics-port",
                    "0",
                    "--worker-id",
                    self.worker_id,
                    "--membership-s",
                    str(MEMBERSHIP_S),
                ],
                stderr=stderr,
            )

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def metrics(self) -> dict[str, float] | None:
        """The worker's metrics, or None while it has not served them yet."""
        if not self.alive:
            if self.process is not None and self.process.returncode not in (None, -signal.SIGKILL):
                raise SystemExit(f"{self.worker_id} exited with {self.process.returncode}")
            return None
        if self.port is None:
            assert self.log is not None
            for text in self.log.read_bytes().splitlines():
                with contextlib.suppress(orjson.JSONDecodeError):
                    message = str(orjson.loads(text).get("message", ""))
                    if message.startswith("metrics on port "):
                        self.port = int(message.rsplit(" ", 1)[1])
            if self.port is None:
                return None
        try:
            return scrape_metrics(self.port, timeout_s=5)
        except OSError:
            return None

    def owned(self) -> int | None:
        metrics = self.metrics()
        if metrics is None:
            return None
        return int(metrics.get('platform_ingest_books{state="owned"}', -1))


# --- the writer -----------------------------------------------------------------------------


class Writer(threading.Thread):
    """Appends one fsynced line at a time to its books, every `pace_s`, as an engine does."""

    def __init__(self, root: Path, books: list[str], last_seq: dict[str, int], pace_s: float):
        super().__init__(name="writer", daemon=True)
        self.root = root
        self.books = books
        self.last_seq = last_seq
        self.pace_s = pace_s
        self.stop = threading.Event()
        self.lines: list[tuple[str, int, float]] = []
        """(book, seq, wall time when fsync returned)."""

    def run(self) -> None:
        next_at = time.monotonic()
        while not self.stop.is_set():
            next_at += self.pace_s
            self.stop.wait(max(0.0, next_at - time.monotonic()))
            book = random.choice(self.books)
            seq = self.last_seq[book] + 1
            at = append(self.root / book / "events.jsonl", next_line(seq), sync=True)
            self.last_seq[book] = seq
            self.lines.append((book, seq, at))


# --- the run ----------------------------------------------------------------------------------


@dataclass
class Kill:
    victim: str
    at_wall: float
    at: float
    orphans: int
    session_gone_s: float | None = None
    owned_again_s: float | None = None
    probes: list[tuple[str, int]] = field(default_factory=list)
    restarted_at: float | None = None
    restarted_wall: float | None = None
    log: Path | None = None
    """The restarted worker's log."""
    owned_by_survivors: bool = False
    """Every book was owned again before the restart (else the fleet settled after it)."""
    handed_back_s: float | None = None


def wait_for(what: str, check: Any, timeout_s: float, every_s: float = 0.25) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"not reached within {timeout_s:.0f} s: {what}")
        time.sleep(every_s)
    return time.monotonic() - started


def commit_times(connection: Connection) -> dict[int, list[tuple[int, int, float]]]:
    """Every stamped commit, by attempt: (old last_seq, new last_seq, wall time), in time order."""
    stamps: dict[int, list[tuple[int, int, float]]] = {}
    for attempt_id, old, new, at in connection.execute(
        "SELECT attempt_id, old_seq, new_seq, extract(epoch FROM at)::float8 FROM bench_commits"
        " ORDER BY at"
    ):
        stamps.setdefault(int(attempt_id), []).append((int(old), int(new), float(at)))
    return stamps


def committed_at(stamps: list[tuple[int, int, float]], seq: int) -> float | None:
    for old, new, at in stamps:
        if old < seq <= new:
            return at
    return None


SURVEY = re.compile(r"survey of (\d+) books: .*, ([0-9.]+) s$")


def surveys_of(log: Path) -> list[tuple[float, int, float]]:
    """The surveys a worker logged (at DEBUG): (wall time at its end, books, seconds)."""
    found = []
    for text in log.read_bytes().splitlines():
        with contextlib.suppress(orjson.JSONDecodeError, ValueError):
            record = orjson.loads(text)
            match = SURVEY.search(str(record.get("message", "")))
            if match:
                at = datetime.datetime.fromisoformat(str(record["time"]).replace("Z", "+00:00"))
                found.append((at.timestamp(), int(match[1]), float(match[2])))
    return found


def run_fleet(admin_dsn: str, work: Path, args: argparse.Namespace) -> None:
    books = fitting_books(args.books, args.workers)
    if books < args.workers:
        raise SystemExit("no room for the fleet's inotify watches")
    dsn = fresh_database(admin_dsn, "bench_fleet")
    db = Database(dsn)
    migrate(db)
    db.close()
    instrument(dsn)
    root = work / "books"
    logs = work / "logs"
    logs.mkdir()
    started = time.monotonic()
    make_books(root, books)
    say(f"\n{books:,} book directories written in {time.monotonic() - started:.1f} s")

    names = [book_name(number) for number in range(books)]
    members = [Member(index, f"fleet-{index}") for index in range(args.workers)]
    ids = [member.worker_id for member in members]
    owner = {book_id: owner_of(book_id, ids) for book_id in names}
    share = {worker_id: sum(1 for o in owner.values() if o == worker_id) for worker_id in ids}
    rng = random.Random(7)
    writer_books = rng.sample(names, min(args.writer_books, books // 2))
    writer_set = set(writer_books)
    last_seq = dict.fromkeys(names, 3)

    sampler = Sampler(dsn)
    kills: list[Kill] = []
    with connect(dsn) as connection, contextlib.ExitStack() as stack:
        for member in members:
            stack.callback(member.stop)
        sampler.start()
        stack.callback(sampler.stop.set)

        # --- start-up: the fleet applies every book --------------------------------------
        load = load_average()
        before = ServerCounters.read(connection)
        started = time.monotonic()
        for member in members:
            member.start(dsn, root, logs)

        def applied() -> bool:
            for member in members:
                if not member.alive:
                    raise SystemExit(f"{member.worker_id} exited; its log: {member.log}")
            return scalar(connection, "SELECT count(*) FROM attempts WHERE last_seq >= 3") >= books

        startup_s = wait_for("every book applied", applied, 1800)
        startup_rates = ServerCounters.read(connection).rates_since(before)
        wait_for(
            "every worker owning its share",
            lambda: all(member.owned() == share[member.worker_id] for member in members),
            120,
        )
        say(
            f"start-up (load before {load}): {args.workers} workers applied {books:,} books"
            f" in {startup_s:.1f} s"
        )
        attempt_of = {
            str(book_id): int(attempt_id)
            for book_id, attempt_id in connection.execute(
                "SELECT book_id, attempt_id FROM attempts"
            )
        }

        # --- quiet phase, then churn, with the writer throughout ---------------------------
        writer = Writer(root, writer_books, last_seq, args.pace_ms / 1000)
        quiet_from = time.time()
        quiet_counters = ServerCounters.read(connection)
        writer.start()
        stack.callback(writer.stop.set)
        time.sleep(args.steady_s)
        churn_from = time.time()
        churn_counters = ServerCounters.read(connection)
        quiet_rates = churn_counters.rates_since(quiet_counters)
        churn_started = time.monotonic()
        churn_ends = churn_started + args.churn_s
        tick = 0
        while True:
            kill_at = churn_started + tick * args.kill_every_s
            if kill_at >= churn_ends:
                break
            time.sleep(max(0.0, kill_at - time.monotonic()))
            victim = members[tick % len(members)]
            tick += 1
            orphans = [book_id for book_id in names if owner[book_id] == victim.worker_id]
            victim.kill()
            kill = Kill(victim.worker_id, time.time(), time.monotonic(), len(orphans))
            kills.append(kill)
            # The probes go out at once: a line each to a sample of the orphaned books.
            candidates = [book_id for book_id in orphans if book_id not in writer_set]
            for book_id in rng.sample(candidates, min(args.probe_books, len(candidates))):
                seq = last_seq[book_id] + 1
                append(root / book_id / "events.jsonl", next_line(seq), sync=False)
                last_seq[book_id] = seq
                kill.probes.append((book_id, seq))
            restart_at = kill.at + args.restart_after_s
            next_kill = churn_started + tick * args.kill_every_s
            application = f"platform-ingest worker {victim.worker_id} %"
            # Until the next kill (the last cycle too): the restart and the hand-back that
            # follows are part of the churn, and so is a fleet that has not settled by then.
            while time.monotonic() < next_kill:
                now = time.monotonic()
                if kill.restarted_at is None and now >= restart_at:
                    victim.start(dsn, root, logs)
                    kill.restarted_at, kill.restarted_wall = now, time.time()
                    kill.log = victim.log
                if kill.session_gone_s is None and not scalar(
                    connection,
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    f" AND application_name LIKE '{application}'",
                ):
                    kill.session_gone_s = now - kill.at
                if kill.owned_again_s is None:
                    # Every book owned by exactly one live worker: the live workers' `owned`
                    # metrics (all of them reporting) sum to the number of books.
                    counts = [member.owned() for member in members if member.alive]
                    if all(count is not None for count in counts) and sum(
                        count for count in counts if count is not None
                    ) == len(names):
                        kill.owned_again_s = now - kill.at
                        kill.owned_by_survivors = kill.restarted_at is None
                if (
                    kill.restarted_at is not None
                    and kill.handed_back_s is None
                    and victim.owned() == share[victim.worker_id]
                ):
                    kill.handed_back_s = now - kill.restarted_at
                time.sleep(0.05)
        churn_to = time.time()
        churn_rates = ServerCounters.read(connection).rates_since(churn_counters)
        writer.stop.set()
        writer.join()

        # --- every line applied, then the workers stop -------------------------------------
        def all_applied() -> bool:
            rows = connection.execute(
                "SELECT book_id, last_seq FROM attempts WHERE book_id = ANY(%s)",
                ([book_id for book_id, seq in last_seq.items() if seq > 3],),
            ).fetchall()
            return all(int(seq) >= last_seq[str(book_id)] for book_id, seq in rows)

        drain_s = wait_for("every written line applied", all_applied, 300)
        for member in members:
            member.stop()
        sampler.stop.set()
        sampler.join()

        report(
            connection,
            books=books,
            args=args,
            startup_s=startup_s,
            startup_rates=startup_rates,
            quiet_rates=quiet_rates,
            churn_rates=churn_rates,
            kills=kills,
            writer=writer,
            attempt_of=attempt_of,
            last_seq=last_seq,
            windows=(quiet_from, churn_from, churn_to),
            sampler=sampler,
            drain_s=drain_s,
            logs=logs,
        )


def report(
    connection: Connection,
    *,
    books: int,
    args: argparse.Namespace,
    startup_s: float,
    startup_rates: Rates,
    quiet_rates: Rates,
    churn_rates: Rates,
    kills: list[Kill],
    writer: Writer,
    attempt_of: dict[str, int],
    last_seq: dict[str, int],
    windows: tuple[float, float, float],
    sampler: Sampler,
    drain_s: float,
    logs: Path,
) -> None:
    stamps = commit_times(connection)
    workers = args.workers

    # --- takeover ---------------------------------------------------------------------------
    say(
        f"\ntakeover: {len(kills)} kills (SIGKILL every {args.kill_every_s:g} s, restart"
        f" {args.restart_after_s:g} s later), {books:,} books over {workers} workers"
    )
    probe_s: list[float] = []
    ready_s: list[float] = []

    def shown(value: float | None) -> str:
        return "   -  " if value is None else f"{value:6.2f}"

    for number, kill in enumerate(kills, 1):
        committed = [
            committed_at(stamps.get(attempt_of[book_id], []), seq) for book_id, seq in kill.probes
        ]
        done = [at - kill.at_wall for at in committed if at is not None]
        last = max(done) if done and len(done) == len(committed) else None
        if last is not None:
            probe_s.append(last)
        ready = None
        if kill.log is not None and kill.restarted_wall is not None:
            surveys = surveys_of(kill.log)
            if surveys:
                ready = surveys[0][0] - kill.restarted_wall
                ready_s.append(ready)
        owned = shown(kill.owned_again_s) + (
            "" if kill.owned_again_s is None or kill.owned_by_survivors else " (after the restart)"
        )
        say(
            f"  kill {number:2d} {kill.victim}: {kill.orphans:,} orphaned books; session gone"
            f" {shown(kill.session_gone_s)} s; every book owned again {owned} s;"
            f" {len(kill.probes)} probe lines committed {shown(last)} s"
            f" ({len(committed) - len(done)} missing); restarted: first survey done"
            f" {shown(ready)} s, its share owned {shown(kill.handed_back_s)} s after it"
        )
    owned_s = [kill.owned_again_s for kill in kills if kill.owned_again_s is not None]
    gone_s = [kill.session_gone_s for kill in kills if kill.session_gone_s is not None]
    back_s = [kill.handed_back_s for kill in kills if kill.handed_back_s is not None]
    by_survivors = sum(1 for kill in kills if kill.owned_by_survivors)
    unsettled = len(kills) - len(owned_s)
    say(
        f"  every orphaned book owned again before the restart: {by_survivors} of {len(kills)}"
        " kills; "
        + (
            f"median {statistics.median(owned_s):.2f} s, max {max(owned_s):.2f} s"
            f" (target <= --membership-s {MEMBERSHIP_S:g} s + a pass)"
            if owned_s
            else "never"
        )
        + (f"; {unsettled} kills with the fleet not settled before the next" if unsettled else "")
    )
    if owned_s:
        figure(
            "fleet: every orphaned book owned again after a SIGKILL (max over kills)",
            "s",
            max(owned_s),
            baseline_name="--membership-s",
            baseline=MEMBERSHIP_S,
            target="<= membership-s + one pass",
        )
    if probe_s:
        say(
            f"  probe lines on orphaned books all committed: median"
            f" {statistics.median(probe_s):.2f} s, max {max(probe_s):.2f} s after the SIGKILL"
        )
        figure(
            f"fleet: a line on each of {args.probe_books} orphaned books committed (max over kills)",
            "s",
            max(probe_s),
            baseline_name="--membership-s",
            baseline=MEMBERSHIP_S,
            target="<= membership-s + one pass",
        )
    if gone_s:
        say(f"  the killed worker's session left pg_stat_activity: max {max(gone_s):.2f} s")
    if ready_s:
        say(
            f"  restart -> the restarted worker's first survey done (its {books:,} books listed"
            f" and registered, its own measured): median {statistics.median(ready_s):.2f} s,"
            f" max {max(ready_s):.2f} s"
        )
        figure(
            "fleet: restart -> first survey done (median over restarts)",
            "s",
            statistics.median(ready_s),
            baseline_name="--kill-every-s",
            baseline=args.kill_every_s,
            target="< the kill interval (else the fleet never settles)",
        )
    if back_s:
        say(
            f"  restart -> the restarted worker owns its share again: median"
            f" {statistics.median(back_s):.2f} s, max {max(back_s):.2f} s"
        )
    surveys = [survey for log in sorted(logs.glob("*.log")) for survey in surveys_of(log)]
    if surveys:
        seconds = [survey[2] for survey in surveys]
        say(
            "  surveys (every 15 s per worker, a page of 500 books at a time with the passes due"
            " run between pages: a survey's length includes them):"
            f" {len(surveys)}, median {statistics.median(seconds):.2f} s over"
            f" {statistics.median([survey[1] for survey in surveys]):,.0f} books,"
            f" p90 {quantile(seconds, 0.9):.2f} s, max {max(seconds):.2f} s"
        )
        figure(
            "fleet: one survey of a worker's books (p90)",
            "s",
            quantile(seconds, 0.9),
            baseline_name="--safety-pass-s",
            baseline=15.0,
            target="(a pause in that worker's passes)",
        )

    # --- latency ----------------------------------------------------------------------------
    quiet_from, churn_from, churn_to = windows
    latencies: dict[str, list[float]] = {"quiet": [], "churn": []}
    missing = 0
    for book_id, seq, at in writer.lines:
        line_committed = committed_at(stamps.get(attempt_of[book_id], []), seq)
        if line_committed is None:
            missing += 1
            continue
        phase = "quiet" if at < churn_from else "churn"
        latencies[phase].append(line_committed - at)
    quiet, churn = latencies["quiet"], latencies["churn"]
    say(
        f"\nlatency: engine fsync -> commit, {len(writer.lines):,} lines fsynced one at a time to"
        f" {len(writer.books)} books every {args.pace_ms} ms"
        f" ({churn_to - quiet_from:.0f} s; {missing} not stamped)"
    )
    for phase, values in (("quiet", quiet), ("churn", churn)):
        if values:
            say(
                f"  {phase:5s} ({len(values):5,} lines): p50 {quantile(values, 0.5) * 1000:8.2f} ms"
                f" (target <= 10 ms), p99 {quantile(values, 0.99) * 1000:8.2f} ms"
                f" (target <= 100 ms), max {max(values) * 1000:8.2f} ms;"
                f" over 1 s: {sum(1 for v in values if v > 1):,}"
            )
    if quiet and churn:
        for q, name, target in ((0.5, "p50", "<= 10 ms"), (0.99, "p99", "<= 100 ms")):
            figure(
                f"fleet: fsync -> commit {name} during churn",
                "ms",
                quantile(churn, q) * 1000,
                baseline_name=f"{name} without churn, same run",
                baseline=quantile(quiet, q) * 1000,
                target=f"{target} (steady state)",
            )

    # --- Postgres -------------------------------------------------------------------------
    samples = sampler.samples
    worker_sessions = [sample[1] for sample in samples]
    listeners = [sample[2] for sample in samples]
    housekeeping = [sample[3] for sample in samples]
    sessions = [sample[4] for sample in samples]
    locks = [sample[5] for sample in samples]
    say(f"\nPostgres, sampled every 0.25 s ({len(samples):,} samples, the whole run):")
    if samples:
        say(
            f"  connections: max {max(sessions)}, median {statistics.median(sessions):g}"
            f" (by role, max: worker {max(worker_sessions)}, control listener {max(listeners)},"
            f" housekeeping {max(housekeeping)}; expected {SESSIONS_PER_WORKER} per worker ="
            f" {SESSIONS_PER_WORKER * workers})"
        )
        say(
            f"  advisory locks held: max {max(locks)}, median {statistics.median(locks):g}"
            f" (a book's lock only while a pass is in flight: at most one per worker)"
        )
        figure(
            "fleet: Postgres connections (max sampled)",
            "sessions",
            max(sessions),
            baseline_name=f"{SESSIONS_PER_WORKER} per worker (its own, listener, housekeeping)",
            baseline=SESSIONS_PER_WORKER * workers,
            target=f"<= {SESSIONS_PER_WORKER * workers}",
        )
        figure(
            "fleet: advisory locks held (max sampled)",
            "locks",
            max(locks),
            baseline_name="one per worker",
            baseline=workers,
            target=f"<= {workers}",
        )
    applies = {
        phase: scalar(
            connection,
            "SELECT count(*) FROM bench_commits WHERE at >= to_timestamp("
            f"{rates.wall_from}) AND at < to_timestamp({rates.wall_to})",
        )
        / max(1e-9, rates.wall_to - rates.wall_from)
        for phase, rates in (
            ("start-up", startup_rates),
            ("quiet", quiet_rates),
            ("churn", churn_rates),
        )
    }
    for phase, rates in (
        (f"start-up ({books:,} books, {startup_s:.0f} s)", startup_rates),
        ("quiet", quiet_rates),
        ("churn", churn_rates),
    ):
        say(
            f"  {phase}: {applies[phase.split(' ')[0]]:,.0f} apply commits/s (stamped),"
            f" {rates.transactions_s:,.0f} transactions/s (reads included),"
            f" {rates.wal_s / 2**10:,.0f} KiB/s of WAL"
        )
    peak = scalar(
        connection,
        "SELECT max(n) FROM (SELECT count(*) AS n FROM bench_commits"
        " GROUP BY date_trunc('second', at)) t",
    )
    say(f"  the busiest second of the run: {peak:,} apply commits")
    figure(
        f"fleet: apply commits/s while {books:,} books are applied at start",
        "commits/s",
        applies["start-up"],
        baseline_name="transactions/s, reads included",
        baseline=startup_rates.transactions_s,
        target="(what one primary sustained)",
    )

    # --- lines applied twice ------------------------------------------------------------------
    lines_twice = scalar(
        connection,
        "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM bench_line_log"
        " GROUP BY attempt_id, seq HAVING count(*) > 1) t",
    )
    units_twice = scalar(
        connection,
        "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM bench_unit_log"
        " GROUP BY run_id, unit HAVING count(*) > 1) t",
    )
    ranges_over = scalar(
        connection,
        "SELECT coalesce(sum(GREATEST(0, applied - last_seq)), 0) FROM (SELECT a.attempt_id,"
        " a.last_seq, sum(c.new_seq - c.old_seq) AS applied FROM attempts a"
        " JOIN bench_commits c USING (attempt_id) GROUP BY a.attempt_id, a.last_seq) t",
    )
    lost = 0
    wrong_books = 0
    rows = connection.execute(
        "SELECT a.book_id, a.last_seq, r.committed_micro_usd, coalesce(u.n, 0), coalesce(h.n, 0)"
        " FROM attempts a JOIN runs r ON r.run_id = a.run_id"
        " LEFT JOIN (SELECT run_id, count(*) AS n FROM run_units GROUP BY run_id) u"
        "   ON u.run_id = a.run_id"
        " LEFT JOIN (SELECT attempt_id, count(*) AS n FROM line_hashes GROUP BY attempt_id) h"
        "   ON h.attempt_id = a.attempt_id"
    ).fetchall()
    for book_id, seq, spend, units, hashes in rows:
        written = last_seq[str(book_id)]
        want_units, want_spend = expected(written)
        if (int(seq), int(units), int(spend), int(hashes)) != (
            written,
            want_units,
            want_spend,
            written,
        ):
            wrong_books += 1
            lost += max(0, written - int(hashes))
    twice = lines_twice + units_twice + ranges_over
    written_lines = sum(seq - 3 for seq in last_seq.values())
    say(
        f"\nlines applied twice: {twice} (target 0): line_hashes writes logged twice"
        f" {lines_twice}, unit effects logged twice {units_twice}, cursor ranges overlapping"
        f" {ranges_over}"
    )
    say(
        f"  final state against what was written ({written_lines:,} lines after the initial"
        f" ones, {len(rows):,} books): {wrong_books} books differ, {lost} lines missing;"
        f" the last line applied {drain_s:.1f} s after the writer stopped"
    )
    figure(
        "fleet: lines applied twice",
        "lines",
        twice,
        baseline_name="none",
        baseline=0,
        ratio=None,
        target="0",
    )
    figure(
        "fleet: books whose final state differs from what was written",
        "books",
        wrong_books,
        baseline_name="none",
        baseline=0,
        ratio=None,
        target="0",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--books", type=int, default=40_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--churn-s", type=float, default=60.0, help="length of the churn phase")
    parser.add_argument("--kill-every-s", type=float, default=10.0)
    parser.add_argument(
        "--restart-after-s", type=float, default=None, help="default: half of --kill-every-s"
    )
    parser.add_argument("--steady-s", type=float, default=15.0, help="the quiet phase before")
    parser.add_argument("--writer-books", type=int, default=200, help="books the writer appends to")
    parser.add_argument("--pace-ms", type=float, default=10.0, help="between the writer's lines")
    parser.add_argument(
        "--probe-books", type=int, default=200, help="orphaned books given a line at each kill"
    )
    parser.add_argument("--dsn", default=os.environ.get("PLATFORM_INGEST_DSN"))
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = parser.parse_args()
    if args.workers < 2:
        parser.error("--workers must be at least 2 (one is killed while the others take over)")
    if args.kill_every_s <= 0 or args.churn_s <= 0 or args.books < args.workers:
        parser.error("--kill-every-s and --churn-s must be positive, --books >= --workers")
    if args.restart_after_s is None:
        args.restart_after_s = args.kill_every_s / 2
    if not 0 <= args.restart_after_s < args.kill_every_s:
        parser.error("--restart-after-s must be below --kill-every-s")
    prose_to(sys.stderr if args.json else sys.stdout)
    # A SIGTERM (a runner's timeout) unwinds like an error: the workers and the embedded
    # Postgres are stopped, the temporary directory removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    load_before = load_average()
    say(f"{os.cpu_count()} cores; load average before: {load_before}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as directory:
        work = Path(directory)
        with contextlib.ExitStack() as stack:
            admin_dsn = args.dsn or stack.enter_context(embedded_postgres(work / "postgres"))
            run_fleet(admin_dsn, work, args)
    load_after = load_average()
    say(f"load average after: {load_after}; {time.perf_counter() - started:.0f} s in all")
    NOTES.append(
        f"Load average {load_before} before, {load_after} after, on {os.cpu_count()} cores;"
        f" {args.workers} worker processes, one killed (SIGKILL) every {args.kill_every_s:g} s"
        f" over {args.churn_s:g} s and restarted {args.restart_after_s:g} s later. The methods"
        " (ownership from the workers' metrics, probe lines, commit stamps, write logs) are in"
        " the benchmark's docstring."
    )
    if args.json:
        print(json.dumps({"bench": "fleet", "figures": FIGURES, "notes": NOTES}))


if __name__ == "__main__":
    main()

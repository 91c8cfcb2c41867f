"""A worker host cut off from Postgres by a real partition: packets dropped by the kernel after
they left their sender, never a reset (`network_partition`).

Two workers, A and B, each in a network namespace of its own (a host of its own), share twelve
books that engines (`engine-events demo`) write all the time; A is cut off from Postgres, then
healed. Each scenario lands the cut somewhere else, and checks what docs/platform/workers.md ("A
host cut off from Postgres") promises:

- no line applied twice and none lost: the ledger projection (`projection_fixtures.Ledger`, a row
  per applied line and no key, so a double would be two rows) holds each line the engines wrote
  exactly once, and each run's money, units and cursor are what its engine reports
  (`engine-events status --json`);
- A's books are worked by B within the documented bound, counted from the cut to the first line
  B applies to each of them, and A finds its own session lost within it too; a cut shorter than
  the bound ends no session and moves no book;
- once healed, A logs at WARNING that Postgres was away, and works its books again on its own:
  nobody restarts it.

The default run holds one cut longer than the bound and one shorter; the cuts landed on purpose
(a reply in flight, inside an apply transaction, inside a COPY, while A holds an operator's skip,
one direction only) are slow (`--run-slow`). Each test prints what it measured.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from network_partition import (
    LabUnavailable,
    Link,
    PartitionLab,
    make_lab_directory,
    partition_lab,
    remove_lab_directory,
    session_of,
)
from platform_ingest import Database, migrate
from platform_ingest.ingest.projection_step import install
from platform_ingest.operate.show import show_state
from platform_ingest.store import statements
from platform_ingest.store.statement import Statement
from platform_ingest.worker.loop import worker_database_settings
from platform_ingest.worker.membership import owner_of
from platform_journals import (
    BIN,
    _environment,
    append,
    hello,
    log_entries,
    spend,
    unit_done,
    wait_for,
)
from projection_fixtures import Ledger
from server_fixtures import record_server_directory, stop_postmasters

pytestmark = [pytest.mark.postgres, pytest.mark.crash]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BOOKS = [f"book-{number:02d}" for number in range(1, 13)]
WORKER_A, WORKER_B = "w-alpha", "w-beta"
MEMBERSHIP_S = 1.0
"""The default `--membership-s`."""
SETTINGS = worker_database_settings()
CUT_NOTICED_S = SETTINGS.tcp_user_timeout_ms / 1000
"""How long the kernel lets a cut connection live after the last thing Postgres heard from or
sent to the worker (`tcp_user_timeout`, which the keepalive's `idle + interval * count` equals)."""
PASS_S = 5.0
"""A pass over each book taken over, on a loaded machine."""
TAKEOVER_BOUND_S = CUT_NOTICED_S + 2 * MEMBERSHIP_S + PASS_S
"""The documented bound (docs/platform/workers.md, "Takeover time"): 25 s, then the membership
interval twice (the cut worker's last statement, which starts the server's count, may come up
to one interval after the cut; the others look up the live workers once an interval), then a
pass: 32 s with the defaults."""
LOCK_WAIT_BOUND_S = TAKEOVER_BOUND_S + SETTINGS.lock_timeout_ms / 1000
"""The documented bound when the cut comes while a statement of the worker waits for a lock on
the server: its reply (an error, at `lock_timeout`) is what goes unacknowledged, and the 25 s
count from it: 37 s with the defaults."""
LONG_CUT_S = 35.0
SHORT_CUT_S = 5.0
PACE_MS = 200
UNIT_COST = 1_000
SETTLE_S = 120.0
BACK_WARNINGS = ("Postgres is back after", "Postgres was away")
"""What the worker logs at WARNING once Postgres answers again after it lost its session: the
loop's away episode ends, or a pass made the session again itself."""
BAD_SEQ = 20
"""The malformed line of the book an operator skips a line of."""


def _epoch(log_time: str) -> float:
    return (
        dt.datetime.strptime(log_time, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()
    )


def _as_sent(statement: Statement) -> str:
    """A listed statement's text as `pg_stat_activity` shows it (psycopg sends `$n`)."""
    numbers = iter(range(1, 100))
    text = re.sub(r"%s", lambda _: f"${next(numbers)}", statement.text).replace("%%", "%")
    return " ".join(text.split())


def _is_running(row: dict[str, Any] | None, statement: Statement) -> bool:
    return row is not None and " ".join(str(row["query"]).split()) == _as_sent(statement)


def books_of(worker_id: str, books: list[str]) -> list[str]:
    return [book for book in books if owner_of(book, (WORKER_A, WORKER_B)) == worker_id]


def test_the_two_worker_ids_split_the_books() -> None:
    """Each of the fixed worker ids owns some of the twelve books (rendezvous), so a cut moves
    some books and leaves others."""
    assert 0 < len(books_of(WORKER_A, BOOKS)) < len(BOOKS)


def test_the_takeover_bounds_are_the_documented_ones() -> None:
    """The bounds asserted below are the figures docs/platform/workers.md gives, and the
    kernel's bound is the same 25 s whether the connection has data in flight or not."""
    keepalive_s = SETTINGS.tcp_keepalive_idle_s + (
        SETTINGS.tcp_keepalive_interval_s * SETTINGS.tcp_keepalive_count
    )
    assert keepalive_s == CUT_NOTICED_S == 25
    doc = (Path(__file__).resolve().parents[2] / "docs" / "platform" / "workers.md").read_text()
    assert f"{TAKEOVER_BOUND_S:.0f} s with the defaults" in doc
    assert f"{LOCK_WAIT_BOUND_S:.0f} s with the defaults" in doc


# --- the lab ------------------------------------------------------------------------------------


TEMPLATE = "partition_template"


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest) -> Iterator[PartitionLab]:
    """Two hosts, `a` and `b`, and a Postgres listening on TCP for them; a template database,
    migrated, with the ledger projection installed. Taken down after the module, however it
    ended; skipped, naming the command that failed, where it cannot be made."""
    directory = make_lab_directory()
    record_server_directory(request.config, directory)
    stack = contextlib.ExitStack()

    def take_down() -> None:
        stack.close()
        stop_postmasters([directory])
        remove_lab_directory(directory)

    try:
        made = stack.enter_context(partition_lab(["a", "b"], directory))
        with psycopg.connect(made.observer_dsn("postgres"), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{TEMPLATE}"')
        db = Database(made.observer_dsn(TEMPLATE))
        try:
            migrate(db)
            install(db, [Ledger()])
        finally:
            db.close()
    except LabUnavailable as error:
        take_down()
        pytest.skip(f"a network partition cannot be made here: {error}")
    except BaseException:
        take_down()
        raise
    try:
        yield made
    finally:
        take_down()


def test_both_ends_of_a_worker_connection_bound_a_cut(lab: PartitionLab) -> None:
    """A worker's connection over TCP carries the keepalive and `tcp_user_timeout` bounds on
    both ends: as the session's settings on the server's, on the socket on the worker's."""
    db = Database(lab.worker_dsn("a", TEMPLATE), SETTINGS)
    try:
        connection = db.connection
        shown = {
            name: connection.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in (
                "tcp_user_timeout",
                "tcp_keepalives_idle",
                "tcp_keepalives_interval",
                "tcp_keepalives_count",
            )
        }
        # Postgres shows what its socket holds (milliseconds, seconds, a count).
        assert shown == {
            "tcp_user_timeout": "25000",
            "tcp_keepalives_idle": "10",
            "tcp_keepalives_interval": "5",
            "tcp_keepalives_count": "3",
        }
        with socket.socket(fileno=os.dup(connection.pgconn.socket)) as client:
            options = {
                option: client.getsockopt(socket.IPPROTO_TCP, option)
                for option in (
                    socket.TCP_USER_TIMEOUT,
                    socket.TCP_KEEPIDLE,
                    socket.TCP_KEEPINTVL,
                    socket.TCP_KEEPCNT,
                )
            }
            assert client.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert options == {
            socket.TCP_USER_TIMEOUT: 25_000,
            socket.TCP_KEEPIDLE: 10,
            socket.TCP_KEEPINTVL: 5,
            socket.TCP_KEEPCNT: 3,
        }
    finally:
        db.close()


_databases = iter(range(1, 1000))


@dataclass
class Measured:
    """What one scenario measured: seconds from the cut (from the heal for `back_after_heal_s`)."""

    name: str
    cut_s: float
    lines: int = 0
    doubled: int = 0
    lost: int = 0
    session_gone_s: float | None = None
    noticed_s: float | None = None
    """When A's own session first failed (its first WARNING of a lost connection, from a pass
    or from the loop): its wait for Postgres had ended."""
    first_taken_s: float | None = None
    all_taken_s: float | None = None
    taken: dict[str, float] = field(default_factory=dict)
    back_after_heal_s: float | None = None

    def line(self) -> str:
        def shown(value: float | None) -> str:
            return "never" if value is None else f"{value:.1f} s"

        return (
            f"{self.name}: cut {self.cut_s:.0f} s; A's session gone after"
            f" {shown(self.session_gone_s)}; B's first line on A's books after"
            f" {shown(self.first_taken_s)}, on each of them after {shown(self.all_taken_s)};"
            f" A found its session lost after {shown(self.noticed_s)}, was back"
            f" {shown(self.back_after_heal_s)} after the heal; {self.lines} lines,"
            f" {self.doubled} applied twice, {self.lost} lost"
        )


class Scene:
    """One scenario's database, root of books, two workers (A on host `a`, B on host `b`) and
    engines; everything it started is stopped by `close`, however the scenario ended."""

    def __init__(self, lab: PartitionLab, directory: Path) -> None:
        self.lab = lab
        self.link_a: Link = lab.links["a"]
        self.database = f"partition_{os.getpid()}_{next(_databases)}"
        with psycopg.connect(lab.observer_dsn("postgres"), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self.database}" TEMPLATE "{TEMPLATE}"')
        self.observer_dsn = lab.observer_dsn(self.database)
        self.observer = psycopg.connect(self.observer_dsn, autocommit=True)
        self.directory = directory
        self.root = directory / "books"
        self.root.mkdir()
        self.books = list(BOOKS)
        for book in self.books:
            (self.root / book).mkdir()
        self.logs = {WORKER_A: directory / "worker-a.log", WORKER_B: directory / "worker-b.log"}
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.engines: dict[str, subprocess.Popen[bytes]] = {}
        self.writers: list[threading.Thread] = []
        self.stop_writing = threading.Event()

    # --- starting -------------------------------------------------------------------------

    def start(self) -> None:
        """Both workers, then the engines; returns once A has applied lines of its books."""
        for worker_id, tag in ((WORKER_A, "a"), (WORKER_B, "b")):
            self.workers[worker_id] = self._start_worker(worker_id, tag)
        wait_for(
            "both workers see each other",
            lambda: all(
                any(entry.get("workers") == 2 for entry in log_entries(log))
                for log in self.logs.values()
            ),
        )
        for book in BOOKS:
            self.engines[book] = subprocess.Popen(
                [
                    str(BIN / "engine-events"),
                    "--log-level",
                    "WARNING",
                    "demo",
                    str(self.root / book),
                    "--units",
                    "100000",  # stopped with SIGTERM when the scenario is over
                    "--unit-cost-micro-usd",
                    str(UNIT_COST),
                    "--pace-ms",
                    str(PACE_MS),
                ],
                env=_environment(),
            )
        started = time.time()
        wait_for(
            "worker A applied lines of each of its books",
            lambda: (
                len(self.first_lines(WORKER_A, self.books_of_a(), after=started))
                == len(self.books_of_a())
            ),
        )

    def _start_worker(self, worker_id: str, tag: str) -> subprocess.Popen[bytes]:
        argv = [
            str(BIN / "platform-ingest"),
            "--dsn",
            self.lab.worker_dsn(tag, self.database),
            "run",
            str(self.root),
            "--auto",
            "--worker-id",
            worker_id,
            "--membership-s",
            str(MEMBERSHIP_S),
            "--projection",
            "projection_fixtures:Ledger",
        ]
        environment = {**_environment(), "PYTHONPATH": str(FIXTURES)}
        with open(self.logs[worker_id], "wb") as stderr:
            return subprocess.Popen(
                self.lab.links[tag].exec_argv(*argv),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=environment,
            )

    def books_of_a(self) -> list[str]:
        return books_of(WORKER_A, self.books)

    # --- looking --------------------------------------------------------------------------

    def session(self, worker_id: str) -> dict[str, Any] | None:
        """The worker's own session (the one that announces it)."""
        return session_of(self.observer, f"platform-ingest worker {worker_id} ")

    def wait_session(
        self, what: str, check: Callable[[dict[str, Any] | None], bool], deadline_s: float = 30
    ) -> dict[str, Any]:
        found: list[dict[str, Any]] = []

        def seen() -> bool:
            row = self.session(WORKER_A)
            if row is not None and check(row):
                found.append(row)
                return True
            return False

        wait_for(what, seen, deadline_s)
        return found[-1]

    def unacknowledged(self, row: dict[str, Any]) -> int:
        return self.link_a.unacknowledged_bytes(self.lab.server.port, int(row["client_port"]))

    def first_lines(self, worker_id: str, books: list[str], *, after: float) -> dict[str, float]:
        """book -> when the worker applied its first line of it after `after`."""
        rows = self.observer.execute(
            """SELECT book_id, extract(epoch FROM min(applied_at))::float8 FROM applied_lines
               WHERE applied_by LIKE %s AND book_id = ANY(%s) AND applied_at > to_timestamp(%s)
               GROUP BY book_id""",
            (f"platform-ingest worker {worker_id} %", books, after),
        ).fetchall()
        return {str(book): float(at) for book, at in rows}

    def warnings_of_a(self, prefixes: tuple[str, ...], *, after: float) -> list[float]:
        """When A logged a WARNING starting with one of `prefixes`, after `after`."""
        return [
            _epoch(entry["time"])
            for entry in log_entries(self.logs[WORKER_A])
            if entry["level"] == "WARNING"
            and entry["message"].startswith(prefixes)
            and _epoch(entry["time"]) > after
        ]

    def connection_lost_of_a(self, *, after: float) -> list[float]:
        """When A's own session failed, after `after`: the WARNING of a pass that lost it, or of
        the loop that found Postgres away (the control listener's connection is another one)."""
        return [
            _epoch(entry["time"])
            for entry in log_entries(self.logs[WORKER_A])
            if entry["level"] == "WARNING"
            and (
                "DatabaseUnavailable" in entry["message"]
                or entry["message"].startswith("Postgres is away (")
            )
            and not entry["message"].startswith("the control listener")
            and _epoch(entry["time"]) > after
        ]

    # --- the long cut's course ------------------------------------------------------------

    def through_long_cut(self, measured: Measured, cut_at: float) -> float:
        """From a cut of A that began at `cut_at`: B's first line on each of A's books and the
        moment A's session ended, until the heal at `cut_at + LONG_CUT_S`; then A back, writing
        over. Returns when the link was healed."""
        books = self.books_of_a()
        pid = (self.session(WORKER_A) or {}).get("pid")
        heal_at = cut_at + measured.cut_s
        while time.time() < heal_at:
            if measured.session_gone_s is None and (self.session(WORKER_A) or {}).get("pid") != pid:
                measured.session_gone_s = time.time() - cut_at
            if len(measured.taken) < len(books):
                taken = self.first_lines(WORKER_B, books, after=cut_at)
                measured.taken = {book: at - cut_at for book, at in taken.items()}
            time.sleep(0.1)
        healed_at = self.link_a.heal()
        if measured.taken:
            measured.first_taken_s = min(measured.taken.values())
            if len(measured.taken) == len(books):
                measured.all_taken_s = max(measured.taken.values())
        wait_for(
            "A logs that Postgres was away",
            lambda: bool(self.warnings_of_a(BACK_WARNINGS, after=healed_at)),
            60,
        )
        (back_at, *_) = self.warnings_of_a(BACK_WARNINGS, after=healed_at)
        measured.back_after_heal_s = back_at - healed_at
        noticed = self.connection_lost_of_a(after=cut_at)
        if noticed:
            measured.noticed_s = noticed[0] - cut_at
        wait_for(
            "A applies lines of each of its books again",
            lambda: len(self.first_lines(WORKER_A, books, after=healed_at)) == len(books),
            60,
        )
        return healed_at

    # --- ending ---------------------------------------------------------------------------

    def finish(self, measured: Measured) -> None:
        """Stop the engines and writers, wait until Postgres holds every line, stop the workers
        (each exits 0), and count what was applied twice or lost."""
        for engine in self.engines.values():
            engine.send_signal(signal.SIGTERM)
        assert {engine.wait(timeout=60) for engine in self.engines.values()} <= {0, 5}
        self.stop_writing.set()
        for writer in self.writers:
            writer.join(timeout=30)
        expected = self.lines_written()
        wait_for("Postgres holds every line written", lambda: self._settled(expected), SETTLE_S)
        for worker_id, worker in self.workers.items():
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=60) == 0, f"worker {worker_id} did not exit 0"
        applied: dict[tuple[str, str, int], int] = {}
        for book_id, stream, seq, count in self.observer.execute(
            "SELECT book_id, engine_run_id, seq, count(*) FROM applied_lines GROUP BY 1, 2, 3"
        ):
            applied[(book_id, stream, seq)] = count
        measured.lines = len(expected)
        measured.doubled = sum(count - 1 for count in applied.values())
        measured.lost = len(expected - applied.keys())
        assert applied.keys() - expected == set(), "lines applied that no engine wrote"

    def lines_written(self) -> set[tuple[str, str, int]]:
        """(book, stream, seq) of every line in the journals, but a skipped one."""
        written = set()
        for book in self.books:
            stream = ""
            for raw in (self.root / book / "events.jsonl").read_bytes().splitlines():
                line = json.loads(raw)  # the skipped line too: its time is what is wrong
                if line["type"] == "hello":
                    stream = line["data"]["engine_run_id"]
                if book not in BOOKS and line["seq"] == BAD_SEQ:
                    continue  # the line an operator skipped
                written.add((book, stream, int(line["seq"])))
        return written

    def _settled(self, expected: set[tuple[str, str, int]]) -> bool:
        rows = self.observer.execute(
            "SELECT book_id, engine_run_id, last_seq FROM attempts"
        ).fetchall()
        last = {(book, stream): seq for book, stream, seq in rows}
        heads: dict[tuple[str, str], int] = {}
        for book, stream, seq in expected:
            heads[(book, stream)] = max(seq, heads.get((book, stream), 0))
        return all(last.get(key) == seq for key, seq in heads.items())

    def check_runs(self) -> None:
        """Each engine book's run in Postgres is what its engine reports: money, units, cursor."""
        db = Database(self.observer_dsn)
        try:
            books = {book["book_id"]: book for book in show_state(db)["books"]}
        finally:
            db.close()
        for book in BOOKS:
            done = subprocess.run(
                [str(BIN / "engine-events"), "status", str(self.root / book), "--json"],
                capture_output=True,
                check=True,
                env=_environment(),
            )
            status = json.loads(done.stdout)
            (run,) = books[book]["runs"]
            (attempt,) = run["attempts"]
            (stream,) = status["streams"]
            assert (attempt["state"], attempt["last_seq"]) == ("finished", stream["last_seq"])
            assert run["committed_micro_usd"] == status["money"]["committed_micro_usd"]
            units_done = status["finished"]["volume"]["units_done"]
            assert run["units"] == [f"unit-{index:04d}" for index in range(1, units_done + 1)]
            assert books[book]["lag"]["lines"] == 0

    def close(self) -> None:
        self.link_a.heal()
        self.stop_writing.set()
        for process in [*self.workers.values(), *self.engines.values()]:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
        for writer in self.writers:
            writer.join(timeout=30)
        self.observer.close()
        with psycopg.connect(self.lab.observer_dsn("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')


@pytest.fixture
def scene(lab: PartitionLab, tmp_path: Path) -> Iterator[Scene]:
    made = Scene(lab, tmp_path)
    try:
        yield made
    finally:
        made.close()


def check_long_cut(
    scene: Scene,
    measured: Measured,
    cut_at: float,
    healed_at: float,
    *,
    bound_s: float = TAKEOVER_BOUND_S,
) -> None:
    """What a cut longer than the bound must leave: A's books worked by B within the bound, A
    finding its session lost within it too, A logging at WARNING once healed that Postgres was
    away, nothing doubled or lost."""
    print(measured.line())
    missing = sorted(set(scene.books_of_a()) - measured.taken.keys())
    assert missing == [], f"B applied no line of {missing} while A was cut off: {measured.line()}"
    assert measured.all_taken_s is not None
    assert measured.all_taken_s <= bound_s, measured.line()
    assert measured.noticed_s is not None, "A never found its session lost"
    assert measured.noticed_s <= bound_s, measured.line()
    assert scene.warnings_of_a(BACK_WARNINGS, after=healed_at)
    assert (measured.doubled, measured.lost) == (0, 0), measured.line()
    scene.check_runs()


# --- the default run: one cut longer than the bound, one shorter ------------------------------


def test_a_cut_longer_than_the_bound_moves_the_books_and_back(scene: Scene) -> None:
    """A cut off for 35 s wherever it was: B works A's books within the bound; once healed, A
    logs that Postgres was away, connects again and works its books; each line applied once."""
    scene.start()
    measured = Measured("cut longer than the bound", LONG_CUT_S)
    cut_at = scene.link_a.cut()
    healed_at = scene.through_long_cut(measured, cut_at)
    scene.finish(measured)
    check_long_cut(scene, measured, cut_at, healed_at)


def test_a_cut_shorter_than_the_bound_ends_no_session(scene: Scene) -> None:
    """A cut off for 5 s: its session lives through it, none of its books is worked by B, it
    never logs Postgres away, and it goes on with its books once healed; each line applied once."""
    scene.start()
    before = scene.session(WORKER_A)
    assert before is not None
    cut_at = scene.link_a.cut()
    time.sleep(SHORT_CUT_S)
    healed_at = scene.link_a.heal()
    books = scene.books_of_a()
    wait_for(
        "A applies lines of each of its books again",
        lambda: len(scene.first_lines(WORKER_A, books, after=healed_at)) == len(books),
        60,
    )
    after = scene.session(WORKER_A)
    measured = Measured("cut shorter than the bound", SHORT_CUT_S)
    scene.finish(measured)
    print(
        f"{measured.name}: cut {measured.cut_s:.0f} s; A's session kept:"
        f" {after is not None and after['pid'] == before['pid']}; {measured.lines} lines,"
        f" {measured.doubled} applied twice, {measured.lost} lost"
    )
    assert after is not None and after["pid"] == before["pid"], "A's session was ended"
    assert scene.first_lines(WORKER_B, books, after=0) == {}, "B worked A's books"
    assert scene.connection_lost_of_a(after=cut_at) == []
    assert scene.warnings_of_a(BACK_WARNINGS, after=cut_at) == []
    assert (measured.doubled, measured.lost) == (0, 0), measured.line()
    scene.check_runs()


# --- cuts landed on purpose -------------------------------------------------------------------


def _blocker(scene: Scene) -> psycopg.Connection[Any]:
    """A session of the test's own whose transaction holds what the landing needs."""
    connection = psycopg.connect(scene.observer_dsn)
    connection.execute("SET lock_timeout = '20s'")
    return connection


def _attempt_of(scene: Scene, book: str) -> tuple[int, int, int]:
    """(attempt id, run id, last seq) of the book's one attempt."""
    row = scene.observer.execute(
        "SELECT attempt_id, run_id, last_seq FROM attempts WHERE book_id = %s", (book,)
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


@pytest.mark.slow
def test_a_cut_with_a_reply_in_flight(scene: Scene) -> None:
    """Postgres holds a reply A has not acknowledged when the cut comes: A's session, idle with
    those bytes in its send queue, is never probed by keepalive; `tcp_user_timeout` ends it."""
    scene.start()
    with _blocker(scene) as blocker:
        # A's pass reads its book's runs first, outside any transaction: held here, A waits for
        # the reply, then the reply is sent into the cut.
        blocker.execute("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")
        scene.wait_session(
            "A waits for the rows of its book's runs",
            lambda row: (
                _is_running(row, statements.RUNS_OF_BOOK) and row["wait_event_type"] == "Lock"
            ),
        )
        cut_at = scene.link_a.cut(to_postgres=False, to_worker=True)
        blocker.rollback()
    landed = scene.wait_session(
        "Postgres sent the reply, unacknowledged, and the session is idle",
        lambda row: row["state"] == "idle" and scene.unacknowledged(row) > 0,
    )
    scene.link_a.cut(to_postgres=True)
    assert _is_running(landed, statements.RUNS_OF_BOOK)
    measured = Measured("reply in flight", LONG_CUT_S)
    healed_at = scene.through_long_cut(measured, cut_at)
    scene.finish(measured)
    check_long_cut(scene, measured, cut_at, healed_at)


@pytest.mark.slow
def test_a_cut_inside_an_apply_transaction(scene: Scene) -> None:
    """The cut comes while A's apply transaction waits for its cursor's row lock; the row is
    released into the cut: the session is left idle in its transaction with the reply in flight,
    ended by `tcp_user_timeout`, not by the 60 s idle-in-transaction timeout."""
    scene.start()
    book = scene.books_of_a()[0]
    attempt_id, _, _ = _attempt_of(scene, book)
    with _blocker(scene) as blocker:
        blocker.execute("SELECT 1 FROM attempts WHERE attempt_id = %s FOR UPDATE", (attempt_id,))
        scene.wait_session(
            "A's apply transaction waits for its cursor's row",
            lambda row: (
                _is_running(row, statements.ATTEMPTS_LOCK) and row["wait_event_type"] == "Lock"
            ),
        )
        cut_at = scene.link_a.cut()
        blocker.rollback()
    scene.wait_session(
        "the transaction is idle with the reply in flight",
        lambda row: row["state"] == "idle in transaction" and scene.unacknowledged(row) > 0,
    )
    measured = Measured("inside an apply transaction", LONG_CUT_S)
    healed_at = scene.through_long_cut(measured, cut_at)
    scene.finish(measured)
    check_long_cut(scene, measured, cut_at, healed_at)


@pytest.mark.slow
def test_a_cut_inside_a_copy(scene: Scene) -> None:
    """The cut comes while A's COPY of line hashes waits on a row of the test's own (a key it
    inserted and holds, uncommitted); A's lock timeout then fails the COPY into the cut: the
    session is idle in an aborted transaction with the error in flight, and the 25 s count
    from that error, 5 s after the cut (the lock-wait bound)."""
    scene.start()
    book = scene.books_of_a()[0]
    with _blocker(scene) as blocker:
        for _ in range(50):
            attempt_id, _, last_seq = _attempt_of(scene, book)
            try:
                # The next lines' keys, taken before A's next batch writes them.
                blocker.execute(
                    """INSERT INTO line_hashes (attempt_id, seq, sha256)
                       SELECT %s, seq, '\\x00' FROM generate_series(%s::bigint, %s::bigint) AS seq""",
                    (attempt_id, last_seq + 1, last_seq + 5000),
                )
                break
            except psycopg.errors.UniqueViolation:
                blocker.rollback()  # A's batch got there first: take the keys after it
        else:
            pytest.fail("A's batches always got to the next keys first")
        scene.wait_session(
            "A's COPY of line hashes waits on the test's keys",
            lambda row: (
                _is_running(row, statements.LINE_HASHES_COPY) and row["wait_event_type"] == "Lock"
            ),
        )
        cut_at = scene.link_a.cut()
        scene.wait_session(
            "the COPY failed into the cut: an aborted transaction, its error in flight",
            lambda row: (
                row["state"] == "idle in transaction (aborted)" and scene.unacknowledged(row) > 0
            ),
        )
        blocker.rollback()
    measured = Measured("inside a COPY", LONG_CUT_S)
    healed_at = scene.through_long_cut(measured, cut_at)
    scene.finish(measured)
    check_long_cut(scene, measured, cut_at, healed_at, bound_s=LOCK_WAIT_BOUND_S)


def _skip_book(scene: Scene) -> str:
    """A hand-written book of A's whose line `BAD_SEQ` is malformed, written on by a thread (an
    engine writes no malformed line), its lines added to the scene's books."""
    name = next(
        f"book-skip-{n}"
        for n in range(100)
        if owner_of(f"book-skip-{n}", (WORKER_A, WORKER_B)) == WORKER_A
    )
    path = scene.root / name
    path.mkdir()
    scene.books.append(name)

    def write() -> None:
        append(path, hello(run=SKIP_STREAM, book=name))
        seq = 2
        while not scene.stop_writing.is_set():
            if seq == BAD_SEQ:
                append(path, BAD_LINE)
            elif seq % 2:
                append(path, unit_done(seq, f"u-{seq}", seq))
            else:
                append(path, spend(seq, UNIT_COST * seq))
            seq += 1
            time.sleep(PACE_MS / 1000)

    writer = threading.Thread(target=write, name="skip-book-writer", daemon=True)
    scene.writers.append(writer)
    writer.start()
    return name


SKIP_STREAM = "7f3c2a10-5b4e-4c8d-9e1f-0a2b3c4d5e6f"
BAD_LINE = b'{"seq":%d,"type":"spend","time":"x"}\n' % BAD_SEQ


@pytest.mark.slow
def test_a_cut_while_a_holds_an_operators_skip(scene: Scene) -> None:
    """An operator skips the malformed line of one of A's books; A's pass, holding the skip,
    is cut off inside its apply transaction. B goes on with the skip: the line skipped stays
    without effect, every other line is applied once, and the skip is recorded once."""
    book = _skip_book(scene)
    scene.start()

    def quarantined() -> bool:
        row = scene.observer.execute(
            "SELECT state, error_seq FROM attempts WHERE book_id = %s", (book,)
        ).fetchone()
        return row == ("quarantined", BAD_SEQ)

    wait_for("the malformed line quarantines its stream", quarantined)
    _, run_id, _ = _attempt_of(scene, book)
    time.sleep(2.0)  # lines pile up past the quarantine: the pass that holds the skip has work
    with _blocker(scene) as blocker:
        blocker.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (run_id,))
        skipped = subprocess.run(
            [
                str(BIN / "platform-ingest"),
                "--dsn",
                scene.observer_dsn,
                "skip",
                str(scene.root / book),
                SKIP_STREAM,
                str(BAD_SEQ),
                "--sha256",
                hashlib.sha256(BAD_LINE).hexdigest(),
                "--reason",
                "a malformed spend",
                "--by",
                "partition-test",
            ],
            capture_output=True,
            check=False,
            env=_environment(),
            timeout=60,
        )
        assert skipped.returncode == 0, skipped.stderr
        scene.wait_session(
            "A's pass, holding the skip, waits for its run's row inside its transaction",
            lambda row: _is_running(row, statements.RUNS_LOCK) and row["wait_event_type"] == "Lock",
        )
        cut_at = scene.link_a.cut()
        blocker.rollback()
    scene.wait_session(
        "the transaction is idle with the reply in flight",
        lambda row: row["state"] == "idle in transaction" and scene.unacknowledged(row) > 0,
    )
    measured = Measured("holding an operator's skip", LONG_CUT_S)
    healed_at = scene.through_long_cut(measured, cut_at)
    scene.finish(measured)
    check_long_cut(scene, measured, cut_at, healed_at)
    assert book in measured.taken, "B never worked the book of the skip"
    applied = scene.observer.execute(
        "SELECT count(*), count(DISTINCT seq), bool_or(seq = %s) FROM applied_lines"
        " WHERE book_id = %s",
        (BAD_SEQ, book),
    ).fetchone()
    (attempt_state,) = scene.observer.execute(
        "SELECT state FROM attempts WHERE book_id = %s", (book,)
    ).fetchone() or (None,)
    assert applied is not None and applied[0] == applied[1] and applied[2] is False
    assert attempt_state == "active"
    (skips,) = scene.observer.execute(
        "SELECT count(*) FROM operator_actions WHERE book_id = %s AND action = 'skip'", (book,)
    ).fetchone() or (None,)
    assert skips == 1


@pytest.mark.slow
def test_an_asymmetric_cut(scene: Scene) -> None:
    """Only Postgres's packets to A are dropped; A's still reach Postgres, which runs its
    statements and answers into the cut: the session ends once its replies stay
    unacknowledged for `tcp_user_timeout`."""
    scene.start()
    cut_at = scene.link_a.cut(to_postgres=False, to_worker=True)
    measured = Measured("one direction (Postgres to A)", LONG_CUT_S)
    healed_at = scene.through_long_cut(measured, cut_at)
    scene.finish(measured)
    check_long_cut(scene, measured, cut_at, healed_at)

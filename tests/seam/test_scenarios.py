"""Every small scenario, run once without a crash, then once per commit it makes with a crash right
after that commit — and each ends where the crash-free run ended.

A scenario is a short list of what happens to a book: the reference engine runs (to its end, to a
ceiling, to a soft or hard stop, killed at a projection point), the disk fails and heals, the
stopped run is repaired. A supervisor plays the platform's part: it names each stream it launches,
tails the book into Postgres after every process, and after a crash reads the stopped run's status:
if the stream it launched ended on purpose (`finished`) it repairs the run (the repair channel
projects what the crash left), else it launches the engine again (whose start recovers).

The crash-free run's SQLite COMMITs are counted by tracing (the world's trace callback), never
hard-coded; the replay with a crash after commit k must end in the same Postgres state (the runs:
state, reason, stop, outcome, exit code, money, shortfall, units, progress; every attempt's cursor
at the head of its stream, none in trouble) and the same journal content modulo stream ids, times
and seqs: the same unit_done, spend, ceiling, bank_stop and finished lines in the same order, the
same last progress snapshot, every committed row in the file with only byte-identical repeats.
"""

from __future__ import annotations

import errno
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine_events._demo import DemoOptions, StopRequests
from engine_events.readers.verify import verify_journal
from engine_events.testing import (
    AFTER_COMMIT,
    EngineWorld,
    Outcome,
    SimulatedCrash,
    reference_engine,
)
from platform_ingest import Database
from platform_ingest.ingest.book_pass import BookPass
from platform_ingest.ingest.books import register_book
from platform_ingest.operate.show import show_state
from seam_model import STATS

pytestmark = pytest.mark.postgres

LAUNCHES_MAX = 8
"""A supervisor launches one step's engine at most this often (one crash, one kill, then done)."""
UNIT_COST = 250_000


@dataclass(frozen=True)
class Run:
    """The reference engine runs: `units` units by (draft, edit), one checkpoint per step."""

    units: int = 3
    ceiling_micro_usd: int | None = None
    stop_at_steps: int | None = None
    """A person asks for a stop once the book has this many steps done (SIGTERM: soft)."""
    hard: bool = False
    """...a second SIGTERM: the stop is hard."""
    kill_at_fsync: int | None = None
    """The process is SIGKILLed after its nth journal fsync (before recording the watermark)."""


@dataclass(frozen=True)
class DiskFails:
    code: int
    after_writes: int


@dataclass(frozen=True)
class DiskHeals:
    pass


@dataclass(frozen=True)
class Repair:
    pass


Step = Run | DiskFails | DiskHeals | Repair

SCENARIOS: dict[str, list[Step]] = {
    "run to the end": [Run()],
    "ceiling stop, then a resume": [Run(ceiling_micro_usd=3 * UNIT_COST + 1), Run()],
    "soft stop, then a resume": [Run(stop_at_steps=2), Run()],
    "hard stop": [Run(stop_at_steps=3, hard=True)],
    "degraded disk that heals": [
        DiskFails(errno.ENOSPC, after_writes=3),
        Run(),
        DiskHeals(),
        Repair(),
    ],
    "resume after a kill": [Run(kill_at_fsync=4)],
}


class StopAt(StopRequests):
    """A person's stop request, once the book has `steps` steps done (read from the host's own
    checkpoint, so a resumed process sees the same request)."""

    def __init__(self, world: EngineWorld, steps: int, *, hard: bool) -> None:
        super().__init__()
        self._world = world
        self._steps = steps
        self._hard = hard

    @property
    def soft(self) -> bool:
        conn = self._world.conn
        if conn is None or self._steps is None:
            return False
        (done,) = conn.execute("SELECT count(*) FROM demo_step").fetchone()
        if done >= self._steps:
            if self._hard:
                self.hard.set()
            return True
        return False

    @soft.setter
    def soft(self, value: bool) -> None:
        pass  # set by a signal handler in the real engine; here the checkpoint decides


@dataclass
class Played:
    commits: int = 0
    commits_returned: int = 0
    crashes: dict[str, int] = field(default_factory=dict)
    launches: int = 0
    disk_failures: int = 0
    journal: dict[str, Any] = field(default_factory=dict)
    postgres: list[dict[str, Any]] = field(default_factory=list)


def play(steps: list[Step], book: Path, db: Database, crash_after_commit: int) -> Played:
    """Play a scenario on a fresh book; crash once, right after that commit (0: never)."""
    world = EngineWorld(book, chunker_version="demo-1")
    register_book(db, book)
    played = Played()
    world.crash_after_commit(crash_after_commit)
    try:
        for step in steps:
            if isinstance(step, DiskFails):
                world.io.fail_after(step.code, step.after_writes)
            elif isinstance(step, DiskHeals):
                world.disk_heals()
            elif isinstance(step, Repair):
                _repair(world)
            else:
                _supervise(world, step, db, played)
            _tail(db, book)
        world.disarm()
        world.check_journal(complete=True)
    finally:
        world.close()
    played.commits, played.commits_returned = world.commits, world.commits_returned
    played.crashes = dict(world.crashes)
    played.disk_failures = world.io.failures
    played.journal = journal_facts(book)
    played.postgres = postgres_runs(db, book, world)
    return played


def _supervise(world: EngineWorld, step: Run, db: Database, played: Played) -> None:
    """Launch the engine under a name of the platform's choosing; after a crash, repair and
    launch again unless the launched stream ended on purpose."""
    options = DemoOptions(
        units=step.units,
        ceiling_micro_usd=step.ceiling_micro_usd,
        pace_ms=0,
    )
    stops = StopAt(world, step.stop_at_steps, hard=step.hard) if step.stop_at_steps else None
    setup, main = reference_engine(options, stops)
    world.setup = setup
    if step.kill_at_fsync is not None:
        world.io.crash_next("after_fsync", step.kill_at_fsync)
    for _ in range(LAUNCHES_MAX):
        played.launches += 1
        engine_run_id = str(uuid.uuid4())
        outcome: Outcome = world.run(main, engine_run_id)
        _tail(db, world.book_dir)
        if outcome.crashed_at is None:
            world.io.crash_at = None
            return
        report = world.status()
        if report["engine_run_id"] == engine_run_id and report["finished"] is not None:
            # It ended on purpose and no engine will start on it again: the repair channel
            # projects what the crash left in the outbox.
            _repair(world)
            _tail(db, world.book_dir)
            world.io.crash_at = None
            return
        # Otherwise the engine is launched again: its start recovers the journal itself.
    raise AssertionError(f"the engine was launched {LAUNCHES_MAX} times without ending")


def _repair(world: EngineWorld) -> dict[str, Any]:
    """`status --json --repair` (again if the repair process died); when the disk refuses the
    repair, the status without it."""
    for _ in range(LAUNCHES_MAX):
        try:
            return world.repair()
        except SimulatedCrash:
            continue
        except OSError:
            return world.status()
    raise AssertionError(f"the repair died {LAUNCHES_MAX} times")


def _tail(db: Database, book: Path) -> None:
    report = BookPass(db, book.name, mode="auto", batch_lines_max=4).run()
    assert report.problems == [], report.problems


def journal_facts(book: Path) -> dict[str, Any]:
    """The journal's content modulo stream ids, times and seqs (see the module docstring)."""
    journal = book / "events.jsonl"
    verdict = verify_journal(journal)
    assert verdict.ok and verdict.torn_tail is None, verdict.to_json()
    seen: set[tuple[str, int]] = set()
    facts: list[tuple[str, Any]] = []
    progress = None
    stream = ""
    for raw in journal.read_bytes().splitlines():
        line = orjson.loads(raw)
        if line["type"] == "hello":
            stream = line["data"]["engine_run_id"]
        key = (stream, line["seq"])
        if key in seen:
            continue
        seen.add(key)
        if line["type"] == "progress":
            progress = line["data"]
        elif line["type"] != "hello":
            facts.append((line["type"], line["data"]))
    return {"facts": facts, "last progress": progress}


def postgres_runs(db: Database, book: Path, world: EngineWorld) -> list[dict[str, Any]]:
    """The book's runs in Postgres, without what names a stream; every attempt's cursor is at
    the head of its stream and none is in trouble."""
    heads: dict[str, int] = {}
    for run_id, seq, _ in world.committed():
        heads[run_id] = seq
    (shown,) = show_state(db, [str(book)])["books"]
    assert shown.get("error") is None
    runs = []
    cursors = {}
    for run in shown["runs"]:
        for attempt in run["attempts"]:
            assert attempt["state"] in ("active", "finished", "superseded"), attempt
            cursors[attempt["engine_run_id"]] = attempt["last_seq"]
        runs.append({k: v for k, v in run.items() if k not in ("run_id", "attempts")})
    assert cursors == heads, "an attempt's cursor is not at the head of its stream"
    return runs


def _replays(name: str, steps: list[Step], root: Path, db: Database) -> tuple[int, int]:
    slug = name.replace(" ", "-").replace(",", "")
    baseline = play(steps, root / f"{slug}-baseline", db, 0)
    assert baseline.commits == baseline.commits_returned, "a COMMIT the world could not see return"
    assert baseline.commits > 0
    kills = sum(1 for step in steps if isinstance(step, Run) and step.kill_at_fsync)
    assert baseline.crashes == ({"after_fsync": kills} if kills else {})
    assert (baseline.disk_failures > 0) == any(isinstance(step, DiskFails) for step in steps)
    for commit in range(1, baseline.commits + 1):
        replay = play(steps, root / f"{slug}-crash-{commit}", db, commit)
        assert replay.crashes.get(AFTER_COMMIT) == 1, f"no crash after commit {commit}"
        assert replay.journal == baseline.journal, f"journal differs after a crash at {commit}"
        assert replay.postgres == baseline.postgres, f"Postgres differs after a crash at {commit}"
    STATS[f"scenario replays: {name}"] += baseline.commits
    STATS["scenario replays"] += baseline.commits
    return baseline.commits, len(steps)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_crash_after_any_commit_ends_where_the_crash_free_run_ends(
    name: str, seam_dsn: str, tmp_path: Path
) -> None:
    """Replayed with a crash right after each of its commits, the scenario ends in the same
    Postgres state and the same journal content as without a crash."""
    db = Database(seam_dsn)
    try:
        commits, _ = _replays(name, SCENARIOS[name], tmp_path, db)
    finally:
        db.close()
    assert commits >= 5  # every scenario commits at least its schema, hello and steps

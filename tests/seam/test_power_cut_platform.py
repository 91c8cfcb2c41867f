"""Power cuts seen from the platform: the tailer may have applied lines the power cut then took away.

Two lives of the reference engine (as in tests/engine/test_power_cut.py, which checks every crash
state on the engine side) are recorded with a `PowerCutIO`. For a sample of their crash states —
every Nth distinct one, and every one at the end of the life — the platform plays its part against
a real Postgres, a fresh database for each state:

1. before the cut, a pass over the file as the processes left it: the page cache, lines not yet
   fsynced among them (a tailer may read a line before its fsync returns);
2. the power cut: the file becomes the crash state (rewritten in place, since a surviving file keeps
   its inode, or removed when its name did not survive) and the database the snapshot as of the
   cut; a pass while the engine is down;
3. the engine restarts and runs to completion; a last pass.

After every pass nothing is in trouble (no problem reported, no error on the book) and Postgres
holds the model of the exit codes and the reader's rules applied to a prefix of the committed lines, each once, with
each applied line's hash the committed bytes'; after the last pass, all of them: every attempt's
cursor at the head of its stream.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from engine_events._demo import DemoOptions
from engine_events.testing import (
    BEFORE_DIRECTORY_FSYNC,
    CrashState,
    EngineWorld,
    LifeStep,
    PowerCutIO,
    crash_states,
    live,
    materialize,
    reference_engine,
)
from platform_ingest import Database
from platform_ingest.ingest.book_pass import BookPass
from platform_ingest.ingest.books import register_book
from platform_journals import dsn_for
from seam_model import STATS, PostgresFaults, applied_prefix, expected_runs, observed_runs
from seam_model import sha256 as line_sha256

pytestmark = pytest.mark.postgres

UNIT_COST = 250_000
OPTIONS = DemoOptions(units=3, stages=("draft", "edit"), unit_cost_micro_usd=UNIT_COST, pace_ms=0)
CEILING = 3 * UNIT_COST + 1
LIVES: dict[str, list[LifeStep]] = {
    "a ceiling stop, then a resume": [LifeStep(ceiling_micro_usd=CEILING), LifeStep()],
    "crashes, a repair, resumes": [
        LifeStep(crash_at=BEFORE_DIRECTORY_FSYNC),
        LifeStep(ceiling_micro_usd=CEILING, crash_at="before_fsync", crash_on=3),
        LifeStep(repair=True),
        LifeStep(crash_at="mid_write", crash_on=2),
        LifeStep(crash_at="after_fsync", crash_on=3),
        LifeStep(),
    ],
}
_numbers = itertools.count(1)


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """In memory (tmpfs) when there is one: the model, not the disk, decides what survives."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(prefix="power-cut-platform-", dir=shm))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def record(book: Path, steps: list[LifeStep]) -> PowerCutIO:
    recorder = PowerCutIO()
    world = EngineWorld(book, recorder=recorder)
    try:
        live(world, steps, OPTIONS)
    finally:
        world.close()
    return recorder


def sample(recorder: PowerCutIO, every: int) -> list[CrashState]:
    """Every `every`-th distinct crash state (line tears), and all of those at the end."""
    distinct: dict[tuple[int | None, tuple[tuple[str, bytes | None], ...]], CrashState] = {}
    for state in crash_states(recorder, tears="line"):
        distinct.setdefault((state.snapshot, state.files), state)
    states = list(distinct.values())
    end = len(recorder.ops)
    return [state for index, state in enumerate(states) if index % every == 0 or state.cut == end]


def committed(book: Path) -> list[tuple[str, int, str, dict[str, Any]]]:
    """The committed lines of the book's database, in commit order, decoded for the model."""
    world = EngineWorld(book)
    try:
        rows = world.committed()
    finally:
        world.close()
    lines = [(run_id, seq, orjson.loads(line)) for run_id, seq, line in rows]
    return [(run_id, seq, line["type"], line["data"]) for run_id, seq, line in lines]


def check_pass(db: Database, faults: PostgresFaults, book: Path, *, whole: bool) -> None:
    """One pass, then: nothing in trouble, a prefix of the committed lines applied once each
    (with `whole`: all of them)."""
    report = BookPass(db, book.name, mode="auto", batch_lines_max=4).run()
    assert report.problems == [], report.problems
    lines = committed(book)
    runs, book_error = observed_runs(db, book)
    assert book_error is None
    cursors = {
        attempt["engine_run_id"]: attempt["last_seq"] for run in runs for attempt in run["attempts"]
    }
    count, applied = applied_prefix(lines, cursors)
    assert runs == expected_runs(applied)
    world = EngineWorld(book)
    try:
        rows = {(run_id, seq): line for run_id, seq, line in world.committed()}
    finally:
        world.close()
    assert faults.applied_hashes(book.name) == {
        (run_id, seq): line_sha256(rows[run_id, seq]) for run_id, seq, *_ in applied
    }
    if whole:
        assert count == len(lines), "the last pass left committed lines unapplied"


def check_state(
    recorder: PowerCutIO, state: CrashState, source: Path, book: Path, dsn: str
) -> None:
    db = Database(dsn)
    faults = PostgresFaults(dsn)
    try:
        materialize(recorder, recorder.live_state(state.cut), book, source_dir=source)
        register_book(db, book)
        check_pass(db, faults, book, whole=False)  # the tailer read the page cache
        materialize(recorder, state, book, source_dir=source)  # the power cut
        check_pass(db, faults, book, whole=False)
        world = EngineWorld(book)
        try:
            setup, main = reference_engine(OPTIONS)
            world.setup = setup
            outcome = world.run(main, "restarted")
            assert outcome.exit_code == 0, outcome
        finally:
            world.close()
        check_pass(db, faults, book, whole=True)
    finally:
        faults.close()
        db.close()


def enumerate_sample(
    seam_admin_dsn: str, seam_template: str, root: Path, every: int
) -> tuple[int, list[str]]:
    """Check a sample of every life's crash states; return how many, and the violations."""
    checked = 0
    violations: list[str] = []
    for name, steps in LIVES.items():
        source = root / "life" / "book"
        recorder = record(source, steps)
        for state in sample(recorder, every):
            database = f"power_cut_{os.getpid()}_{next(_numbers)}"
            with psycopg.connect(seam_admin_dsn, autocommit=True) as admin:
                admin.execute(f'CREATE DATABASE "{database}" TEMPLATE "{seam_template}"')
            book = root / "state" / "book"
            try:
                check_state(recorder, state, source, book, dsn_for(seam_admin_dsn, database))
            except AssertionError as error:
                where = recorder.ops[state.cut - 1].describe() if state.cut else "before anything"
                first = str(error).strip().splitlines()[0] if str(error).strip() else "assert"
                violations.append(f"{name}: cut {state.cut} (after {where}), {state.how}: {first}")
            finally:
                shutil.rmtree(book.parent, ignore_errors=True)
                with psycopg.connect(seam_admin_dsn, autocommit=True) as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            checked += 1
        shutil.rmtree(source.parent)
    return checked, violations


def report(
    profile: str,
    checked: int,
    violations: list[str],
    started: float,
    capsys: pytest.CaptureFixture[str],
) -> None:
    STATS["power cuts: crash states passed through Postgres"] += checked
    with capsys.disabled():
        print(
            f"\npower cuts through Postgres ({profile}): {checked} crash states, "
            f"{len(violations)} violations, {time.perf_counter() - started:.1f}s"
        )
        for violation in violations[:5]:
            print(f"  {violation}")


def test_a_sample_of_crash_states_ends_right_in_postgres(
    seam_admin_dsn: str,
    seam_template: str,
    scratch: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """CI: every 4th distinct crash state of two lives, and all at their ends."""
    started = time.perf_counter()
    checked, violations = enumerate_sample(seam_admin_dsn, seam_template, scratch, every=4)
    report("ci", checked, violations, started, capsys)
    assert violations == []
    assert checked >= 50


@pytest.mark.slow
def test_every_crash_state_ends_right_in_postgres(
    seam_admin_dsn: str,
    seam_template: str,
    scratch: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--run-slow`: every distinct crash state (line tears) of the two lives."""
    started = time.perf_counter()
    checked, violations = enumerate_sample(seam_admin_dsn, seam_template, scratch, every=1)
    report("thorough", checked, violations, started, capsys)
    assert violations == []
    assert checked >= 150

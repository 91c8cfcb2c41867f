"""The engine-side world host authors run their checkpoint code in (`engine_events.testing`), and
what building it found: a failed `Emitter.open` left the journal's descriptor open, and a repair
that projected every row left the journal's state `degraded`."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import pytest

from engine_events import Emitter, EventError, Spend
from engine_events._demo import DemoOptions
from engine_events._schema import DATABASE_FILE_NAME, connect
from engine_events.testing import (
    AFTER_COMMIT,
    EngineWorld,
    InvariantViolated,
    SimulatedCrash,
    reference_engine,
)


def _open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _step(conn: sqlite3.Connection, emitter: Emitter) -> int:
    with emitter.transaction():
        return emitter.emit(Spend(committed_micro_usd=5))


def _main(conn: sqlite3.Connection, emitter: Emitter) -> int:
    _step(conn, emitter)
    return 0


def test_a_failed_start_leaves_no_journal_descriptor_open(tmp_path: Path) -> None:
    """Regression: `Emitter.open` failing after the journal was opened (here a reused
    engine_run_id) closes the journal's descriptor; thousands of failed starts leaked them."""
    conn = connect(tmp_path / DATABASE_FILE_NAME)
    Emitter.open(conn, tmp_path, engine_run_id="run-1").close()
    before = _open_descriptors()
    for _ in range(20):
        with pytest.raises(EventError):
            Emitter.open(conn, tmp_path, engine_run_id="run-1")
    assert _open_descriptors() == before
    conn.close()


def test_commits_are_counted_and_a_crash_lands_right_after_the_chosen_one(tmp_path: Path) -> None:
    """The world counts every COMMIT by tracing, and its crash comes right after the nth one:
    the step's events are committed and the journal is repaired to hold them."""
    world = EngineWorld(tmp_path / "book")
    world.start("run-1")
    before = world.commits
    assert before == world.commits_returned > 0
    world.crash_after_commit(1)
    with pytest.raises(SimulatedCrash) as crashed:
        world.step(_step)
    assert crashed.value.point == AFTER_COMMIT
    assert world.commits == before + 1 == world.commits_returned
    assert not world.running and world.crashes == {AFTER_COMMIT: 1}
    assert [(run, seq) for run, seq, _ in world.committed()] == [("run-1", 1), ("run-1", 2)]
    with pytest.raises(InvariantViolated):
        world.check_journal(complete=True)  # the crash came before the projection
    world.repair()
    assert world.check_journal(complete=True).keys == [("run-1", 1), ("run-1", 2)]
    world.close()


def test_the_journal_check_fails_on_a_line_nobody_committed(tmp_path: Path) -> None:
    """The check the simulations rely on can fail: a line changed in the file is caught."""
    world = EngineWorld(tmp_path / "book")
    world.run(_main, "run-1")
    journal = tmp_path / "book" / "events.jsonl"
    journal.write_bytes(
        journal.read_bytes().replace(b'"committed_micro_usd":5', b'"committed_micro_usd":6')
    )
    with pytest.raises(InvariantViolated, match="not the committed row's bytes"):
        world.check_journal()
    world.close()


def test_a_failing_disk_degrades_the_engine_and_refuses_the_repair(tmp_path: Path) -> None:
    """Through the same seam: with the disk failing the engine goes on (rows kept in the outbox)
    and the repair is refused; healed, the repair projects every committed row and the journal
    is `ok` again (regression: a repair left it `degraded`)."""
    world = EngineWorld(tmp_path / "book")
    world.start("run-1")
    world.disk_fails(errno.ENOSPC)
    world.step(_step)
    assert world.emitter is not None and world.emitter.journal_degraded
    world.exit()
    with pytest.raises(OSError) as refused:
        world.repair()
    assert refused.value.errno == errno.ENOSPC, "the disk's refusal, not another OSError"
    world.disk_heals()
    assert world.repair()["journal"] == "ok"
    world.check_journal(complete=True)
    world.close()


def test_the_reference_engine_runs_in_the_world(tmp_path: Path) -> None:
    """A host's main runs unchanged inside the world: the demo engine, killed at a projection
    point, then resumed, ends with every committed row in the journal."""
    world = EngineWorld(tmp_path / "book")
    setup, main = reference_engine(DemoOptions(units=2, pace_ms=0))
    world.setup = setup
    world.io.crash_next("mid_write", 3)
    killed = world.run(main, "run-1")
    assert killed.crashed_at == "mid_write" and killed.exit_code is None
    resumed = world.run(main, "run-2")
    assert resumed.exit_code == 0 and resumed.crashed_at is None
    found = world.check_journal(complete=True)
    assert {run for run, _ in found.keys} == {"run-1", "run-2"}
    world.close()

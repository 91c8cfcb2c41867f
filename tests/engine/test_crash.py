"""Real engine processes killed with SIGKILL: at random moments, and at each named crash point."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from engine_events._schema import DATABASE_FILE_NAME
from engine_events.testing import CRASH_POINTS

pytestmark = pytest.mark.crash

UNITS, STAGES, COST = 4, ("draft", "edit"), 250_000


def engine(book_dir: Path, *extra: str, units: int = UNITS) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engine_events.testing",
            str(book_dir),
            "--units",
            str(units),
            "--stages",
            ",".join(STAGES),
            "--unit-cost-micro-usd",
            str(COST),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def run_to_completion(book_dir: Path, units: int = UNITS, attempts_max: int = 20) -> int:
    """Restart the engine until it finishes cleanly; return how many runs it took."""
    for attempt in range(1, attempts_max + 1):
        process = engine(book_dir, units=units)
        _, stderr = process.communicate(timeout=120)
        if process.returncode == 0:
            return attempt
        assert process.returncode == -signal.SIGKILL, stderr.decode()
    raise AssertionError("the engine did not finish")


def status(book_dir: Path) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-m", "engine_events._cli", "status", str(book_dir), "--json"],
        capture_output=True,
        timeout=60,
        check=True,
    )
    report: dict[str, object] = orjson.loads(result.stdout)
    return report


def assert_finished_whole(
    book_dir: Path, check_journal: Callable[[Path], dict[str, int]], units: int = UNITS
) -> dict[str, int]:
    counts = check_journal(book_dir)
    report = status(book_dir)
    assert report["money"] == {"committed_micro_usd": units * len(STAGES) * COST}
    assert report["finished"]["outcome"] == "clean"  # type: ignore[index]
    verify = subprocess.run(
        [sys.executable, "-m", "engine_events._cli", "verify", str(book_dir / "events.jsonl")],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert verify.returncode == 0, verify.stdout.decode()
    return counts


@pytest.mark.parametrize("point", CRASH_POINTS)
@pytest.mark.parametrize("occurrence", [1, 2, 4, 7])
def test_crash_at_each_named_point_loses_nothing(
    tmp_path: Path, point: str, occurrence: int, check_journal: Callable[[Path], dict[str, int]]
) -> None:
    """SIGKILL at a named point of the projection, then restarts: the journal is whole and dense."""
    book_dir = tmp_path / "book"
    process = engine(book_dir, "--crash-at", f"{point}:{occurrence}")
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == -signal.SIGKILL, stderr.decode()
    run_to_completion(book_dir)
    assert_finished_whole(book_dir, check_journal)


def test_random_sigkills_lose_nothing(
    tmp_path: Path, check_journal: Callable[[Path], dict[str, int]]
) -> None:
    """Many SIGKILLs at random moments of a running engine, then a clean finish: nothing lost."""
    rng = random.Random(20261130)
    book_dir = tmp_path / "book"
    units = 300
    kills = kills_before_hello = 0
    for _ in range(30):
        streams_before = _streams(book_dir)
        process = engine(book_dir, "--pace-ms", "5", units=units)
        time.sleep(rng.uniform(0.05, 0.35))
        if process.poll() is not None:
            _, stderr = process.communicate()
            assert process.returncode == 0, stderr.decode()
            break
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
        kills += 1
        kills_before_hello += _streams(book_dir) == streams_before  # died while starting
    assert kills >= 15, "the engine must really have been killed mid-flight, many times"
    run_to_completion(book_dir, units=units)
    counts = assert_finished_whole(book_dir, check_journal, units=units)
    assert counts["streams"] >= kills - kills_before_hello


def _streams(book_dir: Path) -> int:
    """How many streams the book's database holds (0 before the emitter ever ran)."""
    database = book_dir / DATABASE_FILE_NAME
    if not database.exists():
        return 0
    conn = sqlite3.connect(database)
    try:
        (count,) = conn.execute("SELECT count(*) FROM engine_events_stream").fetchone()
        return int(count)
    except sqlite3.OperationalError:  # the schema is not there yet
        return 0
    finally:
        conn.close()

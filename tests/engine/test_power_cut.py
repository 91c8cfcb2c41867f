"""Power cuts, not only crashes: the crash states of the reference engine's life, each restarted.

A life of the reference engine is played in an `EngineWorld` whose journal calls go through a
recording `PowerCutIO`, with a snapshot of the database after every COMMIT. For every cut point of
the recording and every crash state there (see `engine_events.testing.power_cut`), the surviving journal is
laid out next to the database as of the cut, and:

- at the cut: every complete line is a committed row's bytes, repeats are byte-identical, the
  distinct lines are a prefix of the commit order, and no stream's recorded watermark runs ahead of
  the file (nothing fsynced and counted as projected is lost);
- after a restart of the reference engine, run to completion: every committed row is in the file
  exactly as stored, `engine-events verify` passes, the book's ledger is whole and the last stream
  finished clean;
- after `engine-events status --repair` on a second copy of the same state: every committed row is
  in the file and `verify` passes.

The CI profile enumerates small lives exhaustively (every cut point, every prefix of the unsynced
writes, every torn page, every line boundary and a byte inside each line). `--run-slow` adds every
byte tear and zero-filled tails for the same lives, and seeded random longer lives.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine_events._demo import DemoOptions
from engine_events._journal_file import JOURNAL_FILE_NAME
from engine_events.readers.verify import verify_journal
from engine_events.testing import (
    AFTER_COMMIT,
    BEFORE_DIRECTORY_FSYNC,
    CRASH_POINTS,
    PAGE_BYTES,
    CrashState,
    EngineWorld,
    InvariantViolated,
    LifeStep,
    Outcome,
    PowerCutIO,
    Tears,
    crash_states,
    live,
    materialize,
    reference_engine,
)

UNIT_COST = 250_000
OPTIONS = DemoOptions(units=3, stages=("draft", "edit"), unit_cost_micro_usd=UNIT_COST, pace_ms=0)
CEILING = 3 * UNIT_COST + 1
"""The book's ceiling stops the first process after three of its six steps."""

LIVES: dict[str, list[LifeStep]] = {
    "a ceiling stop, then a resume": [LifeStep(ceiling_micro_usd=CEILING), LifeStep()],
    "crashes, a repair, resumes": [
        LifeStep(crash_at=BEFORE_DIRECTORY_FSYNC),  # dies right after creating the journal
        LifeStep(ceiling_micro_usd=CEILING, crash_at="before_fsync", crash_on=3),
        LifeStep(repair=True),  # finds the dead process's unsynced lines at the end
        LifeStep(crash_at="mid_write", crash_on=2),  # leaves a torn line
        LifeStep(crash_at="after_fsync", crash_on=3),  # dies before recording its watermark
        LifeStep(),
    ],
    "a full disk, a repair, a resume": [
        LifeStep(disk_fails_after=3),  # a partial write cut back, unsynced; rows kept in SQLite
        LifeStep(repair=True),
        LifeStep(crash_at=AFTER_COMMIT, crash_on=4),
        LifeStep(),
    ],
}
EXPECTED_OUTCOMES = {
    "a ceiling stop, then a resume": [(4, None), (0, None)],
    "crashes, a repair, resumes": [
        (None, BEFORE_DIRECTORY_FSYNC),
        (None, "before_fsync"),
        (0, None),
        (None, "mid_write"),
        (None, "after_fsync"),
        (0, None),
    ],
    "a full disk, a repair, a resume": [(0, None), (0, None), (None, AFTER_COMMIT), (0, None)],
}


@dataclass
class Figures:
    """What an enumeration checked."""

    lives: int = 0
    ops: int = 0
    cut_points: int = 0
    states: int = 0
    """Crash states enumerated (distinct within their cut point)."""
    distinct: int = 0
    """Distinct (database, journal) pairs among them: each restarted twice."""
    restarts: int = 0
    torn: int = 0
    names_lost: int = 0
    violations: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def line(self, profile: str) -> str:
        return (
            f"power cuts ({profile}): {self.lives} lives, {self.ops} recorded ops, "
            f"{self.cut_points} cut points, {self.states} crash states ({self.distinct} distinct; "
            f"{self.torn} with a torn write, {self.names_lost} with the journal's name lost), "
            f"{self.restarts} restarts, {len(self.violations)} violations, "
            f"{time.perf_counter() - self.started:.1f}s"
        )


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """Where the states are laid out and restarted: in memory (tmpfs) when there is one, since the
    model, not the disk, decides what survives, and thousands of restarts fsync."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(prefix="power-cut-", dir=shm))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def record(
    book: Path, steps: list[LifeStep], options: DemoOptions = OPTIONS
) -> tuple[PowerCutIO, list[Outcome]]:
    """Play a life in a world over `book` with a recording under its journal's system calls."""
    recorder = PowerCutIO()
    world = EngineWorld(book, recorder=recorder)
    try:
        outcomes = live(world, steps, options)
        # Every COMMIT SQLite executed was seen returning, and snapshotted: none escaped the hook.
        assert world.commits == world.commits_returned == recorder.count("commit")
        world.check_journal(complete=False)
    finally:
        world.close()
    # The recording is faithful: replayed, it gives the file the processes left.
    journal = book / JOURNAL_FILE_NAME
    assert recorder.live_state().content(journal) == journal.read_bytes()
    return recorder, outcomes


def enumerate_life(
    name: str,
    steps: list[LifeStep],
    root: Path,
    figures: Figures,
    *,
    tears: Tears,
    zero_tails: bool = False,
    options: DemoOptions = OPTIONS,
) -> list[Outcome]:
    """Record the life, then check every crash state of every cut point of it; return how its
    processes ended."""
    source = root / "life" / "book"
    recorder, outcomes = record(source, steps, options)
    figures.lives += 1
    figures.ops += len(recorder.ops)
    figures.cut_points += len(recorder.ops) + 1
    seen: set[tuple[int | None, tuple[tuple[str, bytes | None], ...]]] = set()
    for state in crash_states(recorder, tears=tears, zero_tails=zero_tails):
        figures.states += 1
        figures.torn += "torn" in state.how or "zeros" in state.how
        figures.names_lost += "name lost" in state.how
        key = (state.snapshot, state.files)
        if key in seen:
            continue
        seen.add(key)
        figures.distinct += 1
        for restart in ("engine", "repair"):
            problems = check_state(
                recorder, state, source, root / "state" / "book", restart=restart, options=options
            )
            figures.restarts += 1
            where = recorder.ops[state.cut - 1].describe() if state.cut else "before anything"
            figures.violations.extend(
                f"{name}: cut {state.cut} (after {where}), {state.how}: {problem}"
                for problem in problems
            )
    shutil.rmtree(source.parent)
    return outcomes


def check_state(
    recorder: PowerCutIO,
    state: CrashState,
    source: Path,
    book: Path,
    *,
    restart: str,
    options: DemoOptions,
) -> list[str]:
    """Lay out one crash state, check it, restart on it, check again; return the problems."""
    materialize(recorder, state, book, source_dir=source)
    world = EngineWorld(book)
    problems: list[str] = []
    try:
        try:
            world.check_journal()
            world.check_watermarks()
        except InvariantViolated as error:
            problems.append(f"at the cut: {error}")
        if restart == "repair":
            world.repair()
        else:
            setup, main = reference_engine(options)
            world.setup = setup
            outcome = world.run(main, "restarted")
            if outcome.exit_code != 0:
                problems.append(f"the restarted engine ended with {outcome}")
        try:
            world.check_journal(complete=True)
        except InvariantViolated as error:
            problems.append(f"after the {restart}: {error}")
        journal = book / JOURNAL_FILE_NAME
        if journal.exists():
            verdict = verify_journal(journal)
            if not verdict.ok or verdict.torn_tail is not None:
                problems.append(f"verify after the {restart}: {verdict.to_json()}")
        if restart == "engine":
            report = world.status()
            total = options.units * len(options.stages) * options.unit_cost_micro_usd
            if report["money"] != {"committed_micro_usd": total}:
                problems.append(f"the ledger after the restart is {report['money']}, not {total}")
            if (report["finished"] or {}).get("outcome") != "clean":
                problems.append(f"the restarted stream did not finish clean: {report['finished']}")
    finally:
        world.close()
        shutil.rmtree(book)
    return problems


def report(figures: Figures, profile: str, capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\n{figures.line(profile)}")
        for violation in figures.violations[:10]:
            print(f"  {violation}")


# -- the model itself ------------------------------------------------------------------------


def _states(
    recorder: PowerCutIO, path: Path, *, tears: Tears = "page", zero_tails: bool = False
) -> set[bytes | None]:
    """The journal's possible contents after a power cut at the end of the recording."""
    states = crash_states(recorder, tears=tears, zero_tails=zero_tails, cuts=[len(recorder.ops)])
    return {state.content(path) for state in states}


def _new_file(directory: Path, recorder: PowerCutIO, *, fsync_directory: bool = True) -> int:
    path = directory / JOURNAL_FILE_NAME
    fd = recorder.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
    if fsync_directory:
        recorder.fsync_directory(directory)
    return fd


def test_an_unsynced_write_can_vanish_a_synced_one_cannot(tmp_path: Path) -> None:
    recorder = PowerCutIO()
    fd = _new_file(tmp_path, recorder)
    try:
        recorder.write(fd, memoryview(b"one\n"))
        recorder.fsync(fd)
        recorder.write(fd, memoryview(b"two\n"))
        recorder.write(fd, memoryview(b"three\n"))
    finally:
        os.close(fd)
    journal = tmp_path / JOURNAL_FILE_NAME
    assert _states(recorder, journal) == {
        b"one\n",
        b"one\ntwo\n",
        b"one\ntwo\nthree\n",  # a prefix of the unsynced writes, in order: never `three` alone
    }
    assert [op.offset for op in recorder.ops if op.kind == "write"] == [0, 4, 8]  # O_APPEND


def test_a_torn_write_keeps_a_page_aligned_prefix(tmp_path: Path) -> None:
    recorder = PowerCutIO()
    fd = _new_file(tmp_path, recorder)
    head = b"x" * 1000 + b"\n"
    data = b"y" * (2 * PAGE_BYTES + 500) + b"\n"
    try:
        recorder.write(fd, memoryview(head))
        recorder.fsync(fd)
        recorder.write(fd, memoryview(data))
    finally:
        os.close(fd)
    journal = tmp_path / JOURNAL_FILE_NAME
    kept = {len(content) for content in _states(recorder, journal) if content is not None}
    assert kept == {len(head), PAGE_BYTES, 2 * PAGE_BYTES, len(head) + len(data)}
    every_byte = _states(recorder, journal, tears="byte")
    assert len(every_byte) == len(data) + 1  # nothing of it, each of its prefixes, all of it
    zeros = _states(recorder, journal, zero_tails=True) - _states(recorder, journal)
    assert {content[len(head) :].lstrip(b"y").strip(b"\0") for content in zeros if content} == {
        b""
    }  # the size persisted, the data past the tear reads as zeros
    lines = _states(recorder, journal, tears="line")
    assert head + b"y" in lines and head + data[:-1] in lines  # a line's first byte, its `\n`


def test_a_truncate_is_durable_only_once_fsynced(tmp_path: Path) -> None:
    recorder = PowerCutIO()
    fd = _new_file(tmp_path, recorder)
    journal = tmp_path / JOURNAL_FILE_NAME
    try:
        recorder.write(fd, memoryview(b"one\ntw"))
        recorder.fsync(fd)
        recorder.ftruncate(fd, 4)
        assert _states(recorder, journal) == {b"one\ntw", b"one\n"}
        recorder.fsync(fd)
        assert _states(recorder, journal) == {b"one\n"}
    finally:
        os.close(fd)


def test_a_file_created_without_a_directory_fsync_can_vanish(tmp_path: Path) -> None:
    recorder = PowerCutIO()
    fd = _new_file(tmp_path, recorder, fsync_directory=False)
    journal = tmp_path / JOURNAL_FILE_NAME
    try:
        recorder.write(fd, memoryview(b"one\n"))
        recorder.fsync(fd)
        assert _states(recorder, journal) == {b"one\n", None}  # fsynced, and still gone
        recorder.fsync_directory(tmp_path)
        assert _states(recorder, journal) == {b"one\n"}
    finally:
        os.close(fd)


def test_a_file_that_existed_before_the_recording_is_durable(tmp_path: Path) -> None:
    journal = tmp_path / JOURNAL_FILE_NAME
    journal.write_bytes(b"old\n")
    recorder = PowerCutIO()
    fd = recorder.open(journal, os.O_WRONLY | os.O_APPEND, 0o644)
    try:
        recorder.write(fd, memoryview(b"new\n"))
    finally:
        os.close(fd)
    assert recorder.initial == {str(journal): b"old\n"}
    assert _states(recorder, journal) == {b"old\n", b"old\nnew\n"}


def test_the_database_at_a_cut_is_the_last_commit_before_it(scratch: Path) -> None:
    """Every cut point carries the snapshot of the last COMMIT before it; a line is only ever
    written after the COMMIT of its row, so no crash state holds a line its database lacks."""
    recorder, _ = record(scratch / "book", [LifeStep()])
    last: int | None = None
    for state in crash_states(recorder):
        if state.cut > 0 and recorder.ops[state.cut - 1].kind == "commit":
            last = recorder.ops[state.cut - 1].snapshot
        assert state.snapshot == last
    assert last == len(recorder.snapshots) - 1
    first_write = next(index for index, op in enumerate(recorder.ops) if op.kind == "write")
    assert any(op.kind == "commit" for op in recorder.ops[:first_write])


# -- what the enumeration found --------------------------------------------------------------


def test_a_journal_left_by_a_process_dead_before_its_directory_fsync_keeps_its_name(
    scratch: Path,
) -> None:
    """Regression: the directory was fsynced only by the process that created the journal. One
    that died between the create and that fsync left a name the next process never made durable:
    its lines were fsynced and its watermark recorded, and a power cut could still take the whole
    file away — the next start then appended only the rows past the watermark, with no hello."""
    book = scratch / "book"
    recorder, outcomes = record(book, [LifeStep(crash_at=BEFORE_DIRECTORY_FSYNC), LifeStep()])
    assert outcomes[0].crashed_at == BEFORE_DIRECTORY_FSYNC and outcomes[1].exit_code == 0
    journal = book / JOURNAL_FILE_NAME
    first_write = next(index for index, op in enumerate(recorder.ops) if op.kind == "write")
    assert any(op.kind == "fsync_directory" for op in recorder.ops[:first_write])
    for state in crash_states(recorder, cuts=range(first_write, len(recorder.ops) + 1)):
        assert state.content(journal) is not None, state


def test_lines_a_dead_process_left_unsynced_are_made_durable_before_they_count(
    scratch: Path,
) -> None:
    """Regression: recovery counted the rows it found at the end of the file as projected and
    recorded the watermark, but a process that died before its fsync left them in the page cache
    only. A power cut then lost them while SQLite said they were in the file: nothing appended
    them again (a `finished` could be lost that way)."""
    book = scratch / "book"
    recorder, outcomes = record(
        book, [LifeStep(crash_at="before_fsync", crash_on=3), LifeStep(repair=True)]
    )
    assert [(o.exit_code, o.crashed_at) for o in outcomes] == [(None, "before_fsync"), (0, None)]
    repair_open = max(index for index, op in enumerate(recorder.ops) if op.kind == "open")
    after = [op.kind for op in recorder.ops[repair_open:]]
    assert after.index("fsync") < after.index("commit")  # durable, then counted
    figures = Figures()
    for state in crash_states(recorder, cuts=range(repair_open, len(recorder.ops) + 1)):
        figures.violations.extend(
            check_state(
                recorder, state, book, scratch / "state" / "book", restart="repair", options=OPTIONS
            )
        )
    assert figures.violations == []


# -- the enumeration -------------------------------------------------------------------------


def test_every_crash_state_of_small_lives_restarts_whole(
    scratch: Path, capsys: pytest.CaptureFixture[str], record_property: object
) -> None:
    """CI: every cut point of three small lives, every crash state there, restarted twice."""
    figures = Figures()
    for name, steps in LIVES.items():
        outcomes = enumerate_life(name, steps, scratch, figures, tears="line")
        assert [(o.exit_code, o.crashed_at) for o in outcomes] == EXPECTED_OUTCOMES[name]
    report(figures, "ci", capsys)
    assert callable(record_property)
    record_property("power_cut_states", figures.states)
    record_property("power_cut_violations", len(figures.violations))
    assert figures.violations == []
    assert figures.distinct >= 300, "the enumeration must really check crash states"
    assert figures.torn >= 100 and figures.names_lost >= 3


def random_life(rng: random.Random) -> tuple[DemoOptions, list[LifeStep]]:
    """A longer life: more units and stages, processes crashing anywhere, ceilings, a full disk,
    repairs; it ends with a process that runs to completion."""
    stages = ("draft", "edit", "polish")[: rng.randint(2, 3)]
    options = DemoOptions(
        units=rng.randint(4, 7), stages=stages, unit_cost_micro_usd=UNIT_COST, pace_ms=0
    )
    steps_total = options.units * len(stages)
    points = [None, None, *CRASH_POINTS, BEFORE_DIRECTORY_FSYNC, AFTER_COMMIT]
    steps = []
    for _ in range(rng.randint(3, 6)):
        if rng.random() < 0.15:
            steps.append(LifeStep(repair=True))
            continue
        steps.append(
            LifeStep(
                ceiling_micro_usd=rng.choice([None, rng.randint(1, steps_total) * UNIT_COST + 1]),
                crash_at=rng.choice(points),
                crash_on=rng.randint(1, 8),
                disk_fails_after=rng.choice([None, None, None, None, rng.randint(0, 6)]),
            )
        )
    return options, [*steps, LifeStep()]


@pytest.mark.slow
def test_every_crash_state_thorough(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--run-slow`: the small lives with every byte tear and zero-filled tails, then seeded
    random longer lives with every page and line tear and zero-filled tails."""
    figures = Figures()
    for name, steps in LIVES.items():
        enumerate_life(name, steps, scratch, figures, tears="byte", zero_tails=True)
    report(figures, "thorough: small lives, every byte", capsys)
    longer = Figures()
    rng = random.Random(20261130)
    for number in range(12):
        options, steps = random_life(rng)
        enumerate_life(
            f"random life {number}",
            steps,
            scratch,
            longer,
            tears="line",
            zero_tails=True,
            options=options,
        )
    report(longer, "thorough: 12 random longer lives", capsys)
    assert figures.violations == [] and longer.violations == []
    assert figures.distinct >= 5000 and longer.distinct >= 2000

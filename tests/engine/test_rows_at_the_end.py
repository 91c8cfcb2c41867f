"""Rows a crash left at the end of the journal, past the recorded watermark, are recognised at the
next start (or repair) and not appended again: for any number of rows and any size."""

from __future__ import annotations

import errno
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, ClassVar
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_events import Spend, UnitDone
from engine_events._emitter import Emitter
from engine_events._events import Event
from engine_events._journal_file import JournalFile, OsJournalIO, TailReader
from engine_events._lock import BookLock
from engine_events._outbox import streams
from engine_events._projection import BATCH_LINES_MAX, Projector
from engine_events._schema import DATABASE_FILE_NAME, connect
from engine_events._sql import OUTBOX_AFTER
from engine_events.readers.status import repair
from engine_events.testing import EngineWorld, FaultyIO, SimulatedCrash, abandon, open_emitter


@dataclass(frozen=True)
class Note(Event):
    """An event type a host defines itself (readers ignore its type): a line of any size."""

    type: ClassVar[str] = "note"
    text: str

    def data(self) -> dict[str, Any]:
        return {"text": self.text}


def crash_after_fsync_of_a_big_checkpoint(
    book_dir: Path, events: list[Event], fsync: int
) -> sqlite3.Connection:
    """Open a stream, commit one checkpoint of `events`, and die right after the `fsync`-th fsync
    of its projection, before any watermark is recorded. Returns the dead process's database."""
    conn = connect(book_dir / DATABASE_FILE_NAME)
    io = FaultyIO(in_process=True)
    emitter = open_emitter(conn, book_dir, io, engine_run_id="big")
    io.crash_next("after_fsync", fsync)
    with pytest.raises(SimulatedCrash), emitter.transaction():
        for event in events:
            emitter.emit(event)
    abandon(emitter)
    return conn


def batches(sizes: list[int], limit_lines: int, limit_bytes: int) -> int:
    """How many write()+fsync a projection of lines of these sizes takes (as `project_stream`)."""
    count = lines = size = 0
    for line_size in sizes:
        lines += 1
        size += line_size
        if lines == limit_lines or size >= limit_bytes:
            count, lines, size = count + 1, 0, 0
    return count + (lines > 0)


@pytest.mark.parametrize("fsync", [1, 2])
def test_a_600_event_checkpoint_is_in_the_journal_once(
    book_dir: Path, check_journal: Callable[[Path], dict[str, int]], fsync: int
) -> None:
    """A checkpoint of 600 events projected in two writes (512 + 88 lines); a crash after either
    fsync, before the watermark; the restart appends only what is missing, and nothing twice."""
    events: list[Event] = [UnitDone(unit=f"u{index}", index=index) for index in range(600)]
    assert len(events) > BATCH_LINES_MAX
    conn = crash_after_fsync_of_a_big_checkpoint(book_dir, events, fsync)
    in_file = (book_dir / "events.jsonl").read_bytes().count(b"\n")
    assert in_file == (1 + BATCH_LINES_MAX if fsync == 1 else 601)
    assert streams(conn)[0].projected_seq < in_file, "the watermark lags the file"

    started = time.perf_counter()
    Emitter.open(conn, book_dir, engine_run_id="next").close()
    elapsed = time.perf_counter() - started
    conn.close()
    counts = check_journal(book_dir)
    assert counts == {"lines": 602, "duplicates": 0, "streams": 2}
    assert (book_dir / "events.jsonl").read_bytes().count(b"\n") == 602
    print(
        f"restart after a 600-event checkpoint ({in_file} lines in the file): {elapsed * 1e3:.1f} ms"
    )


def test_a_checkpoint_over_16_mib_is_in_the_journal_once(
    book_dir: Path, check_journal: Callable[[Path], dict[str, int]]
) -> None:
    """The same for a checkpoint of 18 lines of almost 1 MiB each (18 MiB, three writes): a
    crash after its last fsync, then a restart, leaves each line in the journal once."""
    events: list[Event] = [Note(text=f"{index:04d}" + "n" * 1_000_000) for index in range(18)]
    writes = batches([1_000_100] * 18, BATCH_LINES_MAX, 8 * 1024 * 1024)
    conn = crash_after_fsync_of_a_big_checkpoint(book_dir, events, writes)
    size = (book_dir / "events.jsonl").stat().st_size
    assert size > 16 * 1024 * 1024 and streams(conn)[0].projected_seq == 1
    Emitter.open(conn, book_dir, engine_run_id="next").close()
    conn.close()
    assert check_journal(book_dir) == {"lines": 20, "duplicates": 0, "streams": 2}
    assert (book_dir / "events.jsonl").stat().st_size < size + 1000  # only the new hello


def test_a_last_line_that_is_no_row_of_ours_is_not_taken_for_one(book_dir: Path) -> None:
    """A file whose last line looks like a row (same seq) but is not its bytes: nothing is
    recognised, the rows are appended (the file holds them after the stranger)."""
    conn = connect(book_dir / DATABASE_FILE_NAME)
    emitter = open_emitter(conn, book_dir, FaultyIO(fail_errno=errno.ENOSPC), engine_run_id="a")
    with emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=5))
    emitter.close()  # degraded: both rows wait in the outbox
    stranger = b'{"seq":2,"type":"spend","time":"2026-11-30T02:08:57.213Z","data":{}}\n'
    (book_dir / "events.jsonl").write_bytes(stranger)
    Emitter.open(conn, book_dir, engine_run_id="b").close()
    conn.close()
    lines = (book_dir / "events.jsonl").read_bytes().splitlines(keepends=True)
    assert lines[0] == stranger and len(lines) == 4


# -- any number of streams, rows and bytes at the end -------------------------------------------


class FullDisk(OsJournalIO):
    """A journal whose writes all fail: every row stays in the outbox, unprojected."""

    def write(self, fd: int, data: memoryview) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def unprojected_rows(conn: sqlite3.Connection) -> list[bytes]:
    """R: every committed row past its stream's watermark, in the order recovery projects them."""
    rows: list[bytes] = []
    for state in streams(conn):
        page = conn.execute(
            OUTBOX_AFTER,
            {"stream_no": state.stream_no, "after_seq": state.projected_seq, "limit": 1 << 20},
        ).fetchall()
        rows += [bytes(line) for _, line in page]
    return rows


@settings(
    max_examples=60,
    deadline=None,
    # check_journal is a stateless function: sharing it between examples is what is wanted.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    projected=st.integers(0, 6),
    per_stream=st.lists(st.integers(0, 9), min_size=1, max_size=4),
    cut=st.integers(0, 10_000),
    torn=st.integers(0, 3),
    repeat=st.none() | st.integers(0, 10_000),
    by_repair=st.booleans(),
    window=st.sampled_from([16, 64, 1024]),
)
def test_any_prefix_of_the_unprojected_rows_at_the_end_is_not_appended_again(
    *,
    check_journal: Callable[[Path], dict[str, int]],
    projected: int,
    per_stream: list[int],
    cut: int,
    torn: int,
    repeat: int | None,
    by_repair: bool,
    window: int,
) -> None:
    """Streams whose rows wait in the outbox (a disk that failed, processes that died); the file
    ends with the first k of those rows, in projection order, k anything from none to all, maybe
    followed by a repeated region of the file, maybe with a torn piece of the next one. The next
    start (or a repair) leaves every committed row in the journal, and appends none that is
    already there. Batches of 3 rows and read windows of a few bytes make every walk cross many
    of both."""
    root = Path(tempfile.mkdtemp(prefix="rows-at-end-"))
    try:
        book = root / "book"
        book.mkdir()
        conn = connect(book / DATABASE_FILE_NAME)
        io = FaultyIO()
        emitter = open_emitter(conn, book, io, engine_run_id="s0")
        for amount in range(projected):  # projected, and recorded by the next row or close()
            with emitter.transaction():
                emitter.emit(Spend(committed_micro_usd=amount))
        io.fail_errno = errno.ENOSPC
        for number, count in enumerate(per_stream):
            if number:
                emitter = open_emitter(conn, book, FullDisk(), engine_run_id=f"s{number}")
            for index in range(count):
                with emitter.transaction():
                    emitter.emit(UnitDone(unit=f"u{number}-{index}", index=index))
            emitter.close()
        rows = unprojected_rows(conn)
        k = cut % (len(rows) + 1)
        path = book / "events.jsonl"
        with open(path, "ab") as journal:
            journal.write(b"".join(rows[:k]))
        repeated = 0
        if repeat is not None:
            content = path.read_bytes()
            starts = repeatable_starts(content)
            region = content[starts[repeat % len(starts)] :]
            with open(path, "ab") as journal:
                journal.write(region)
            repeated = region.count(b"\n")
        if k < len(rows):
            with open(path, "ab") as journal:
                journal.write(rows[k][: torn * len(rows[k]) // 4])
        with (
            mock.patch("engine_events._projection.BATCH_LINES_MAX", 3),
            mock.patch("engine_events._journal_file._TAIL_WINDOW_BYTES", window),
        ):
            if by_repair:
                with BookLock(book):
                    repair(conn, book)
            else:
                Emitter.open(conn, book, engine_run_id="last").close()
        conn.close()
        assert check_journal(book)["duplicates"] == repeated
    finally:
        shutil.rmtree(root)


def repeatable_starts(content: bytes) -> list[int]:
    """Where a repeated region of the journal may start: at a hello, or at a line of the file's
    last stream (a region from inside an earlier stream, appended after a later hello, is
    another journal, not a repeat of this one)."""
    hellos: list[int] = []
    last_stream: list[int] = []
    offset = 0
    for raw in content.splitlines(keepends=True):
        if raw.startswith(b'{"seq":1,"type":"hello",'):
            hellos.append(offset)
            last_stream = []
        last_stream.append(offset)
        offset += len(raw)
    return sorted(set(hellos) | set(last_stream))


def test_the_walk_back_reads_the_file_in_bounded_windows(book_dir: Path) -> None:
    """Recognising a run of rows at the end reads the file backwards through windows of a bounded
    size: a 600-row run is matched with many reads of at most the window, each byte read once."""
    conn = crash_after_fsync_of_a_big_checkpoint(
        book_dir, [UnitDone(unit=f"u{index}", index=index) for index in range(600)], 2
    )
    reads: list[int] = []

    class Recording:
        def __init__(self, reader: BinaryIO) -> None:
            self._reader = reader

        def seek(self, offset: int) -> int:
            return self._reader.seek(offset)

        def read(self, size: int = -1) -> bytes:
            data = self._reader.read(size)
            reads.append(len(data))
            return data

    class RecordingTailReader(TailReader):
        def __init__(self, reader: BinaryIO, end: int) -> None:
            super().__init__(Recording(reader), end)  # type: ignore[arg-type]

    journal = JournalFile(book_dir, OsJournalIO())
    with BookLock(book_dir):
        journal.open()
        projector = Projector(conn, journal)
        pending = projector.load_watermarks()
        with (
            mock.patch("engine_events._journal_file._TAIL_WINDOW_BYTES", 4096),
            mock.patch("engine_events._journal_file.TailReader", RecordingTailReader),
        ):
            found = projector._rows_already_at_end(pending)
        journal.close()
    conn.close()
    assert found == {1: 601}
    (_hello, *run) = (book_dir / "events.jsonl").read_bytes().splitlines(keepends=True)
    run_bytes = sum(len(line) for line in run)
    assert max(reads) <= 4096
    assert run_bytes <= sum(reads) <= run_bytes + 4096 + 1
    assert len(reads) >= run_bytes // 4096


# -- a repeated region after the rows -----------------------------------------------------------


def _spend(_conn: sqlite3.Connection, emitter: Emitter) -> None:
    with emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=5))


def rows_of_two_streams_at_the_end(book: Path, second_stream_spends: int) -> EngineWorld:
    """A world whose journal ends with run-1's last row and run-2's lines, none of them recorded
    as projected: run-1 is killed after projecting its spend (its watermark lags by that row),
    run-2 starts on a full disk (its recovery finds that row at the end but cannot fsync it) and
    is killed, and run-3's recovery projects both streams and dies right after its fsync."""
    world = EngineWorld(book)
    world.start("run-1")
    world.step(_spend)
    world.crash()
    world.disk_fails(errno.ENOSPC)
    world.start("run-2")
    for _ in range(second_stream_spends):
        world.step(_spend)
    world.crash()
    world.disk_heals()
    world.io.crash_next("after_fsync", 2)  # the first fsync makes run-1's row durable
    with pytest.raises(SimulatedCrash):
        world.start("run-3")
    streams = [
        (s["engine_run_id"], s["last_seq"], s["projected_seq"]) for s in world.status()["streams"]
    ]
    assert streams == [("run-1", 2, 1), ("run-2", 1 + second_stream_spends, 0)]
    return world


@pytest.mark.parametrize(
    ("second_stream_spends", "region_start", "by_repair"),
    [
        (0, 2, True),  # the repeat is run-2's hello, the file's last line
        (0, 2, False),
        (0, 0, True),  # the whole file again: the run ends the file once more
        (2, 2, True),  # from run-2's hello: its rows are the file's last lines again
        (2, 3, True),  # from a row of the last stream: found through the file's last hello
        (2, 4, False),
    ],
)
def test_rows_followed_by_a_repeated_region_are_not_appended_after_it(
    tmp_path: Path, second_stream_spends: int, region_start: int, by_repair: bool
) -> None:
    """Regression: the rows of two streams, unrecorded, end the file, and a region of the file is
    written again after them. Recovery took the run for absent and appended it again: run-1's
    spend after run-2's hello, where every reader reads it as run-2's seq 2 (a line nobody
    committed). The run is recognised, nothing is appended twice, only the new stream is."""
    book = tmp_path / "book"
    world = rows_of_two_streams_at_the_end(book, second_stream_spends)
    journal = book / "events.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    assert len(lines) == 3 + second_stream_spends
    region = lines[region_start:]
    with open(journal, "ab") as file:
        file.write(b"".join(region))
    if by_repair:
        world.repair()
    else:
        world.start("run-4")
        world.exit()
    check = world.check_journal(complete=True)
    assert check.duplicates == len(region)
    assert journal.read_bytes().count(b"\n") == len(lines) + len(region) + (not by_repair)
    world.close()


def test_rows_of_the_last_stream_followed_by_a_repeat_are_not_appended_again(
    tmp_path: Path,
) -> None:
    """One stream whose last two rows are in the file past its recorded watermark, the last one
    repeated: the next start finds them (the stream's hello is durable, by its watermark) and
    appends nothing again."""

    def two_spends(_conn: sqlite3.Connection, emitter: Emitter) -> None:
        with emitter.transaction():
            emitter.emit(Spend(committed_micro_usd=5))
            emitter.emit(Spend(committed_micro_usd=6))

    book = tmp_path / "book"
    world = EngineWorld(book)
    world.start("run-1")
    world.crash_at("after_fsync")
    with pytest.raises(SimulatedCrash):
        world.step(two_spends)
    assert world.status()["streams"][0]["projected_seq"] == 1
    journal = book / "events.jsonl"
    last = journal.read_bytes().splitlines(keepends=True)[-1]
    with open(journal, "ab") as file:
        file.write(last)
    world.start("run-2")
    world.exit()
    assert world.check_journal(complete=True).duplicates == 1
    world.close()


@pytest.mark.parametrize("chunk", [1, 2, 5, 7, 64, 1 << 16])
def test_the_last_line_with_a_prefix_is_found_across_chunk_boundaries(
    book_dir: Path, chunk: int
) -> None:
    """The file's last hello is read backwards in chunks: found wherever a chunk boundary falls
    (inside the newline before it, inside its first bytes), at byte 0, or not at all."""
    hello_a = b'{"seq":1,"type":"hello","data":"a"}\n'
    hello_b = b'{"seq":1,"type":"hello","data":"b"}\n'
    row = b'{"seq":2,"type":"spend","data":{}}\n'
    prefix = b'{"seq":1,"type":"hello",'
    cases = [
        (b"", None),
        (row, None),
        (row + row, None),
        (hello_a, hello_a),
        (hello_a + row + row, hello_a),
        (hello_a + row + hello_b + row, hello_b),
        (row + hello_b, hello_b),
        (hello_a + hello_b + hello_a + row, hello_a),
    ]
    for content, expected in cases:
        (book_dir / "events.jsonl").write_bytes(content)
        journal = JournalFile(book_dir, OsJournalIO())
        journal.size = len(content)
        with mock.patch("engine_events._journal_file._TAIL_CHUNK_BYTES", chunk):
            assert journal.last_line_starting_with(prefix) == expected, content

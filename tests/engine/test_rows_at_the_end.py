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

from engine_events import Event, Spend, UnitDone
from engine_events._emitter import Emitter
from engine_events._journal_file import JournalFile, OsJournalIO, TailReader
from engine_events._lock import BookLock
from engine_events._outbox import streams
from engine_events._projection import BATCH_LINES_MAX, Projector
from engine_events._schema import DATABASE_FILE_NAME, connect
from engine_events._sql import OUTBOX_AFTER
from engine_events._status import repair
from engine_events.testing import FaultyIO, SimulatedCrash, abandon


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
    emitter = Emitter.open(conn, book_dir, engine_run_id="big", io=io)
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
    emitter = Emitter.open(conn, book_dir, engine_run_id="a", io=FaultyIO(fail_errno=errno.ENOSPC))
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
    by_repair: bool,
    window: int,
) -> None:
    """Streams whose rows wait in the outbox (a disk that failed, processes that died); the file
    ends with the first k of those rows, in projection order, k anything from none to all, maybe
    with a torn piece of the next one. The next start (or a repair) leaves every committed row in
    the journal exactly once. Batches of 3 rows and read windows of a few bytes make every walk
    cross many of both."""
    root = Path(tempfile.mkdtemp(prefix="rows-at-end-"))
    try:
        book = root / "book"
        book.mkdir()
        conn = connect(book / DATABASE_FILE_NAME)
        io = FaultyIO()
        emitter = Emitter.open(conn, book, engine_run_id="s0", io=io)
        for amount in range(projected):  # projected, and recorded by the next row or close()
            with emitter.transaction():
                emitter.emit(Spend(committed_micro_usd=amount))
        io.fail_errno = errno.ENOSPC
        for number, count in enumerate(per_stream):
            if number:
                emitter = Emitter.open(conn, book, engine_run_id=f"s{number}", io=FullDisk())
            for index in range(count):
                with emitter.transaction():
                    emitter.emit(UnitDone(unit=f"u{number}-{index}", index=index))
            emitter.close()
        rows = unprojected_rows(conn)
        k = cut % (len(rows) + 1)
        with open(book / "events.jsonl", "ab") as journal:
            journal.write(b"".join(rows[:k]))
            if k < len(rows):
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
        assert check_journal(book)["duplicates"] == 0
    finally:
        shutil.rmtree(root)


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

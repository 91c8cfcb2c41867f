"""The per-event path made cheaper keeps every rule: the line's `time` (formatted once per second,
checked in full once per millisecond), and the outbox row's errors and running summary, whether the
row goes in with one statement (the last row where the emitter expects it) or with two."""

from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path
from unittest import mock

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine_events import (
    BankStop,
    Ceiling,
    ExitCode,
    Finished,
    PhaseCount,
    Progress,
    Spend,
    UnitDone,
    _line,
    _outbox,
)
from engine_events._emitter import Emitter
from engine_events._events import Event
from engine_events._line import TIME_PATTERN, format_time, is_time, now_time, time_of_ns
from engine_events._projection import BATCH_LINES_MAX
from engine_events._schema import migrate
from engine_events._sql import SUMMARY_TYPES
from engine_events.errors import BookDatabaseError, BookDatabaseRefused, LineTooLong

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# Years 1970 to 9999, to the nanosecond.
instants = st.integers(min_value=0, max_value=253402300799_999_999_999)


def _is_time_in_full(value: object) -> bool:
    """`is_time` without its memo: the shape, then a real instant."""
    if not isinstance(value, str) or TIME_PATTERN.fullmatch(value) is None:
        return False
    try:
        dt.datetime.fromisoformat(value[:-1])
    except ValueError:
        return False
    return True


@given(st.lists(instants, min_size=1, max_size=6))
def test_time_of_ns_is_format_time_of_the_same_instant(instants: list[int]) -> None:
    """Whatever second the memo holds, each instant reads as `format_time` writes it."""
    for ns in instants:
        assert time_of_ns(ns) == format_time(EPOCH + dt.timedelta(microseconds=ns // 1000))


def test_time_of_ns_truncates_to_the_millisecond_across_a_second() -> None:
    second = 1_764_460_137 * 10**9
    assert time_of_ns(second - 1) == "2025-11-29T23:48:56.999Z"
    assert time_of_ns(second) == "2025-11-29T23:48:57.000Z"
    assert time_of_ns(second + 999_999) == "2025-11-29T23:48:57.000Z"
    assert time_of_ns(second + 1_000_000) == "2025-11-29T23:48:57.001Z"
    assert time_of_ns(second - 1) == "2025-11-29T23:48:56.999Z"  # back to the second before


def test_now_time_reads_the_clock_datetime_now_reads() -> None:
    before = format_time(dt.datetime.now(dt.UTC))
    now = now_time()
    after = format_time(dt.datetime.now(dt.UTC))
    assert before <= now <= after
    assert is_time(now)


candidate_times = st.one_of(
    instants.map(time_of_ns),
    st.from_regex(
        r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z", fullmatch=True
    ),
    st.text(max_size=30),
    st.sampled_from(
        ["2026-02-30T00:00:00.000Z", "2026-11-30T24:00:00.000Z", "0000-01-01T00:00:00.000Z"]
    ),
)


@given(st.lists(candidate_times, min_size=1, max_size=8))
def test_is_time_with_its_memo_decides_as_the_full_check(values: list[str]) -> None:
    """The memo of the last accepted time never lets a refused value through, in any order."""
    for value in values:
        assert is_time(value) == _is_time_in_full(value)


def test_is_time_checks_a_str_subclass_in_full() -> None:
    class Liar(str):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = str.__hash__

    assert is_time("2026-11-30T02:08:57.213Z")  # now the memo
    assert not is_time(Liar("not a time"))
    assert not is_time(b"2026-11-30T02:08:57.213Z")


def test_a_database_error_while_storing_an_event_is_translated(tmp_path: Path) -> None:
    """The outbox insert's errors come out as the engine's, as every engine statement's do."""
    conn = sqlite3.connect(tmp_path / "book.sqlite3", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    emitter = Emitter.open(conn, tmp_path, engine_run_id="r")
    conn.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON engine_events_outbox "
        "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
    )
    with (
        pytest.raises(BookDatabaseRefused, match="refused by the test") as caught,
        emitter.transaction(),
    ):
        emitter.emit(Spend(committed_micro_usd=1))
    assert isinstance(caught.value, BookDatabaseError)
    assert isinstance(caught.value, sqlite3.IntegrityError)
    assert isinstance(caught.value.__cause__, sqlite3.IntegrityError)
    conn.execute("DROP TRIGGER refuse")
    with emitter.transaction():
        assert emitter.emit(Spend(committed_micro_usd=2)) == 2
    emitter.close()
    conn.close()


def test_each_row_carries_its_streams_running_summary(tmp_path: Path) -> None:
    """Row by row, across transactions, a rolled-back one and a savepoint rolled back inside
    one: each row points at the latest event of each summary type before or at it."""
    conn = sqlite3.connect(tmp_path / "book.sqlite3", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    emitter = Emitter.open(conn, tmp_path, engine_run_id="r")
    progress = Progress(phases={"p": PhaseCount(done=0, total=1)})
    with emitter.transaction():
        emitter.emit(UnitDone(unit="u", index=0))
        emitter.emit(Spend(committed_micro_usd=1))
        emitter.emit(progress)
    with pytest.raises(RuntimeError, match="rolled back"), emitter.transaction():
        emitter.emit(Ceiling(shortfall_micro_usd=5))
        raise RuntimeError("rolled back")
    with emitter.transaction():
        conn.execute("SAVEPOINT host")
        emitter.emit(Ceiling(shortfall_micro_usd=5))
        conn.execute("ROLLBACK TO host")
        conn.execute("RELEASE host")
        emitter.emit(Spend(committed_micro_usd=2))
        emitter.emit(Ceiling(shortfall_micro_usd=3))
        emitter.emit(UnitDone(unit="u", index=1))
    with emitter.transaction():
        emitter.emit(
            Finished(exit_code=ExitCode.CLEAN, units_done=2, units_total=2, committed_micro_usd=2)
        )
    rows = conn.execute(
        "SELECT seq, type, projected_seq, progress_seq, spend_seq, ceiling_seq, finished_seq "
        "FROM engine_events_outbox ORDER BY seq"
    ).fetchall()
    assert [row[0] for row in rows] == list(range(1, 9)), "dense, whatever was rolled back"
    latest: dict[str, int] = {}
    last_seq = 0
    for seq, kind, projected_seq, *summary in rows:
        if kind in SUMMARY_TYPES:
            latest[kind] = seq
        assert dict(zip(SUMMARY_TYPES, summary, strict=True)) == {
            name: latest.get(name) for name in SUMMARY_TYPES
        }
        assert projected_seq <= last_seq
        last_seq = seq
    emitter.close()
    conn.close()


T = "2026-11-30T02:08:57.213Z"
kinds = st.sampled_from(["unit_done", "spend", "progress", "ceiling", "bank_stop"])


def _event(kind: str, number: int) -> Event:
    if kind == "unit_done":
        return UnitDone(unit=f"u{number}", index=number)
    if kind == "spend":
        return Spend(committed_micro_usd=number)
    if kind == "progress":
        return Progress(phases={"p": PhaseCount(done=0, total=number)})
    if kind == "ceiling":
        return Ceiling(shortfall_micro_usd=number)
    return BankStop(signature=f"s{number}")


def _stream(conn: sqlite3.Connection) -> int:
    conn.execute("INSERT INTO engine_events_stream (engine_run_id, book_id) VALUES ('r', 'b')")
    return int(conn.execute("SELECT max(stream_no) FROM engine_events_stream").fetchone()[0])


def _rows(conn: sqlite3.Connection) -> list[tuple[object, ...]]:
    return conn.execute("SELECT * FROM engine_events_outbox ORDER BY stream_no, seq").fetchall()


@given(
    st.lists(
        st.tuples(
            kinds,
            st.integers(min_value=-3, max_value=3),  # how far the caller's expectation is off
            st.integers(min_value=0, max_value=20),  # the watermark the caller passes
            st.booleans(),  # whether a savepoint around it is rolled back
        ),
        min_size=1,
        max_size=25,
    )
)
def test_a_row_is_the_same_whatever_the_caller_expects(
    steps: list[tuple[str, int, int, bool]],
) -> None:
    """`store` with any expectation of the last row (right, stale after a rollback, behind, none)
    writes exactly the rows `store` without one writes: the same seq, line, watermark and running
    summary; a wrong expectation only costs the read it would have saved."""
    expecting = sqlite3.connect(":memory:", isolation_level=None)
    reading = sqlite3.connect(":memory:", isolation_level=None)
    with mock.patch("engine_events._outbox.now_time", lambda: T):
        for conn in (expecting, reading):
            migrate(conn)
            conn.execute("BEGIN")
        stream_no = _stream(expecting)
        assert _stream(reading) == stream_no
        last = 0
        for number, (kind, off, projected, rolled_back) in enumerate(steps):
            event = _event(kind, number)
            for conn in (expecting, reading):
                if rolled_back:
                    conn.execute("SAVEPOINT step")
            seq, line = _outbox.store(
                expecting, stream_no, event, projected, after_seq=max(0, last + off)
            )
            assert (seq, line) == _outbox.store(reading, stream_no, event, projected)
            assert seq == last + 1
            if rolled_back:
                for conn in (expecting, reading):
                    conn.execute("ROLLBACK TO step")
                    conn.execute("RELEASE step")
            else:
                last = seq
            assert _rows(expecting) == _rows(reading)
    expecting.close()
    reading.close()


def test_a_line_too_long_only_at_the_expected_seq_goes_in_at_the_real_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stale expectation one seq too far can give the line one more digit: the limit is judged
    on the line at the stream's real next seq, not on the expected one."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    conn.execute("BEGIN")
    stream_no = _stream(conn)
    with mock.patch("engine_events._outbox.now_time", lambda: T):
        for number in range(8):
            _outbox.store(conn, stream_no, Spend(committed_micro_usd=number), 0)
        event = UnitDone(unit="u", index=0)
        monkeypatch.setattr(_line, "LINE_BYTES_MAX", len(_line.encode_line(9, event, T)))
        with pytest.raises(LineTooLong):
            _line.encode_line(10, event, T)
        assert _outbox.store(conn, stream_no, event, 0, after_seq=9)[0] == 9
    conn.close()


def test_a_flush_reads_the_outbox_once_and_a_full_batch_goes_on(tmp_path: Path) -> None:
    """After a checkpoint the projection reads the stream's new rows with one query; a batch cut
    at the bound of lines is followed by the next, until every committed row is in the journal."""
    conn = sqlite3.connect(tmp_path / "book.sqlite3", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    emitter = Emitter.open(conn, tmp_path, engine_run_id="r")
    executed: list[str] = []
    conn.set_trace_callback(executed.append)
    with emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=1))
    reads = [
        sql for sql in executed if sql.startswith("SELECT seq, line FROM engine_events_outbox")
    ]
    assert len(reads) == 1, reads
    executed.clear()
    with emitter.transaction():
        for number in range(BATCH_LINES_MAX * 2 + 1):
            emitter.emit(UnitDone(unit="u", index=number))
    reads = [
        sql for sql in executed if sql.startswith("SELECT seq, line FROM engine_events_outbox")
    ]
    assert len(reads) == 3, "two full batches, then the short one that ends the stream"
    conn.set_trace_callback(None)
    journal = (tmp_path / "events.jsonl").read_bytes().splitlines()
    assert len(journal) == 2 + BATCH_LINES_MAX * 2 + 1
    assert [orjson.loads(line)["seq"] for line in journal] == list(range(1, len(journal) + 1))
    emitter.close()
    conn.close()

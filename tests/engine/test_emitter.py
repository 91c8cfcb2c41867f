"""The emitter's contract with its host: transactions, seq allocation, recovery, bad input."""

from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_events import (
    STREAM_VERSIONS,
    DurabilityError,
    EngineEventsError,
    EventError,
    ExitCode,
    Finished,
    LineTooLong,
    MoneyError,
    NotInTransaction,
    PhaseCount,
    Progress,
    ProjectLocked,
    Spend,
    StreamVersionNotSupported,
    UnitDone,
)
from engine_events._emitter import Emitter
from engine_events._events import Hello
from engine_events._lock import BookLock
from engine_events._schema import DATABASE_FILE_NAME, SCHEMA_VERSION, connect, schema_version
from engine_events.errors import BookDirectoryError, SchemaMismatch, StreamFinished
from engine_events.readers.status import read_status
from engine_events.readers.verify import verify_journal


def journal_lines(book_dir: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in (book_dir / "events.jsonl").read_bytes().splitlines()]


def test_open_writes_hello_at_seq_1(conn: sqlite3.Connection, book_dir: Path) -> None:
    """Opening starts a stream whose first line is a hello at seq 1, projected at once."""
    with Emitter.open(conn, book_dir, chunker_version="c7", engine_run_id="run-a") as emitter:
        assert emitter.engine_run_id == "run-a"
        assert emitter.book_id == "book-1"
    (hello,) = journal_lines(book_dir)
    assert hello == {
        "seq": 1,
        "type": "hello",
        "time": hello["time"],
        "data": {
            "stream_version": "1.3",
            "engine_run_id": "run-a",
            "book_id": "book-1",
            "chunker_version": "c7",
        },
    }


def test_events_are_projected_after_commit_only(conn: sqlite3.Connection, book_dir: Path) -> None:
    """A line reaches the file after its transaction commits, never before, and in seq order."""
    with Emitter.open(conn, book_dir) as emitter:
        with emitter.transaction():
            assert emitter.emit(Spend(committed_micro_usd=10)) == 2
            assert emitter.emit(UnitDone(unit="u1", index=0)) == 3
            assert len(journal_lines(book_dir)) == 1  # only the hello so far
        assert [line["seq"] for line in journal_lines(book_dir)] == [1, 2, 3]


def test_rolled_back_transaction_leaves_no_event(conn: sqlite3.Connection, book_dir: Path) -> None:
    """An event exists iff its checkpoint committed: a rollback takes the event and its seq back."""
    with Emitter.open(conn, book_dir) as emitter:
        with pytest.raises(RuntimeError, match="host failed"), emitter.transaction():
            emitter.emit(Spend(committed_micro_usd=10))
            raise RuntimeError("host failed")
        with emitter.transaction():
            assert emitter.emit(Spend(committed_micro_usd=20)) == 2
    lines = journal_lines(book_dir)
    assert [(line["seq"], line["type"]) for line in lines] == [(1, "hello"), (2, "spend")]
    assert lines[1]["data"] == {"committed_micro_usd": 20}


def test_host_managed_transaction_and_flush(conn: sqlite3.Connection, book_dir: Path) -> None:
    """A host may run its own BEGIN/COMMIT and call flush() after it."""
    with Emitter.open(conn, book_dir) as emitter:
        conn.execute("BEGIN IMMEDIATE")
        emitter.emit(Spend(committed_micro_usd=5))
        conn.commit()
        emitter.flush()
        assert [line["seq"] for line in journal_lines(book_dir)] == [1, 2]


def test_emit_outside_a_transaction_is_refused(conn: sqlite3.Connection, book_dir: Path) -> None:
    """emit() outside the host's transaction raises NotInTransaction and stores nothing."""
    with Emitter.open(conn, book_dir) as emitter:
        with pytest.raises(NotInTransaction, match="outside a transaction"):
            emitter.emit(Spend(committed_micro_usd=1))
        assert emitter.last_seq == 1
    assert len(journal_lines(book_dir)) == 1


def test_flush_inside_a_transaction_is_refused(conn: sqlite3.Connection, book_dir: Path) -> None:
    """flush() inside an open transaction would project uncommitted rows, so it refuses."""
    with Emitter.open(conn, book_dir) as emitter, emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=1))
        with pytest.raises(EngineEventsError, match="after COMMIT") as refused:
            emitter.flush()
        assert refused.type is EngineEventsError  # a usage error: none of the narrower kinds


def test_host_cannot_emit_a_hello(conn: sqlite3.Connection, book_dir: Path) -> None:
    """Only the emitter writes the hello, as seq 1."""
    with (
        Emitter.open(conn, book_dir) as emitter,
        emitter.transaction(),
        pytest.raises(EventError, match="hello"),
    ):
        emitter.emit(Hello(engine_run_id="x", book_id="b", chunker_version=""))


def test_float_money_is_refused_when_the_event_is_built() -> None:
    """A float in a money field fails in the host's code, before anything is stored."""
    with pytest.raises(MoneyError, match="committed_micro_usd"):
        Spend(committed_micro_usd=1.5)  # type: ignore[arg-type]
    with pytest.raises(MoneyError):
        Finished(exit_code=ExitCode.CLEAN, units_done=1, units_total=1, committed_micro_usd=-1)


def test_line_over_the_limit_is_refused_and_the_transaction_survives(
    conn: sqlite3.Connection, book_dir: Path
) -> None:
    """An event whose line would pass 1 MiB raises LineTooLong; nothing of it is stored."""
    phases = {f"{i:05d}" + "x" * 250: PhaseCount(done=0, total=1) for i in range(4400)}
    with Emitter.open(conn, book_dir) as emitter, emitter.transaction():
        with pytest.raises(LineTooLong):
            emitter.emit(Progress(phases=phases))
        emitter.emit(Spend(committed_micro_usd=3))
    assert [line["type"] for line in journal_lines(book_dir)] == ["hello", "spend"]
    assert journal_lines(book_dir)[1]["seq"] == 2


def test_weak_durability_is_refused(book_dir: Path) -> None:
    """A connection without WAL + synchronous=FULL is refused before anything is written."""
    conn = sqlite3.connect(book_dir / DATABASE_FILE_NAME, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    with pytest.raises(DurabilityError, match="synchronous"):
        Emitter.open(conn, book_dir)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("PRAGMA synchronous=FULL")
    with pytest.raises(DurabilityError, match="journal_mode"):
        Emitter.open(conn, book_dir)
    conn.close()
    assert not (book_dir / "events.jsonl").exists()
    assert BookLock(book_dir).held  # the failed opens released the lock


def test_newer_schema_is_refused_untouched(conn: sqlite3.Connection, book_dir: Path) -> None:
    """A database written by a newer engine_events is refused with exit 13 and not modified."""
    Emitter.open(conn, book_dir).close()
    conn.execute(
        "UPDATE engine_events_meta SET value = ? WHERE key = 'schema_version'",
        (str(SCHEMA_VERSION + 1),),
    )
    before = (book_dir / "events.jsonl").read_bytes()
    with pytest.raises(SchemaMismatch) as raised:
        Emitter.open(conn, book_dir)
    assert raised.value.exit_code == 13
    assert (book_dir / "events.jsonl").read_bytes() == before
    (count,) = conn.execute("SELECT count(*) FROM engine_events_stream").fetchone()
    assert count == 1


def test_second_emitter_on_a_locked_book_is_refused(
    conn: sqlite3.Connection, book_dir: Path
) -> None:
    """While one process holds the book lock, another open fails with ProjectLocked (exit 12)."""
    with Emitter.open(conn, book_dir):
        with pytest.raises(ProjectLocked) as raised:
            BookLock(book_dir)
        assert raised.value.exit_code == 12


def test_missing_book_directory_is_a_typed_error(tmp_path: Path) -> None:
    """A book directory that does not exist is refused with BookDirectoryError."""
    with pytest.raises(BookDirectoryError, match="does not exist"):
        BookLock(tmp_path / "absent")


@pytest.fixture
def unwritable_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory this process cannot create files in, even as root (a read-only mount)."""
    path = tmp_path / "read-only-book"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:  # no mount privilege: sysfs refuses new files to root as well
        yield Path("/sys")
        return
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_unwritable_book_directory_is_a_typed_error(unwritable_dir: Path) -> None:
    """A book directory the process may not write is refused with BookDirectoryError, exit 11."""
    with pytest.raises(BookDirectoryError, match="cannot create the book lock") as raised:
        BookLock(unwritable_dir)
    assert raised.value.exit_code == 11
    assert raised.value.errno in (errno.EACCES, errno.EROFS, errno.EPERM)


def test_resume_is_a_new_stream_in_the_same_file(book_dir: Path) -> None:
    """A second process on the book starts a new stream: new engine_run_id, seq again from 1."""
    for run_id in ("run-1", "run-2"):
        conn = connect(book_dir / DATABASE_FILE_NAME)
        with Emitter.open(conn, book_dir, engine_run_id=run_id) as emitter, emitter.transaction():
            emitter.emit(Progress(phases={"draft": PhaseCount(done=1, total=2)}))
        conn.close()
    lines = journal_lines(book_dir)
    assert [(line["seq"], line["type"]) for line in lines] == [
        (1, "hello"),
        (2, "progress"),
        (1, "hello"),
        (2, "progress"),
    ]
    assert lines[2]["data"]["engine_run_id"] == "run-2"  # type: ignore[index]


def test_reused_engine_run_id_is_refused(book_dir: Path) -> None:
    """A stream id names one process: opening again with the same id is an error."""
    conn = connect(book_dir / DATABASE_FILE_NAME)
    Emitter.open(conn, book_dir, engine_run_id="same").close()
    with pytest.raises(EventError, match="already names a stream"):
        Emitter.open(conn, book_dir, engine_run_id="same")
    conn.close()


def test_unprojected_rows_of_an_earlier_stream_come_first(book_dir: Path) -> None:
    """Committed rows a crash left unprojected are appended, byte-identical, before the new hello."""
    conn = connect(book_dir / DATABASE_FILE_NAME)
    emitter = Emitter.open(conn, book_dir, engine_run_id="first")
    conn.execute("BEGIN IMMEDIATE")
    emitter.emit(Spend(committed_micro_usd=7))
    emitter.emit(UnitDone(unit="u", index=0))
    conn.commit()  # committed, never flushed: as if the process died right here
    stored = [
        bytes(row[0]) for row in conn.execute("SELECT line FROM engine_events_outbox ORDER BY seq")
    ]
    emitter._lock.close()  # the dead process's lock is gone
    conn.close()

    conn = connect(book_dir / DATABASE_FILE_NAME)
    Emitter.open(conn, book_dir, engine_run_id="second").close()
    raw = (book_dir / "events.jsonl").read_bytes().splitlines(keepends=True)
    assert raw[:3] == stored
    assert orjson.loads(raw[3])["data"]["engine_run_id"] == "second"
    status = read_status(conn)
    assert [s["projected_seq"] for s in status["streams"]] == [3, 1]
    conn.close()


def test_torn_tail_is_cut_before_anything_new(book_dir: Path) -> None:
    """A last line without a newline is cut back to the last newline at start."""
    conn = connect(book_dir / DATABASE_FILE_NAME)
    Emitter.open(conn, book_dir, engine_run_id="a").close()
    whole = (book_dir / "events.jsonl").read_bytes()
    with open(book_dir / "events.jsonl", "ab") as journal:
        journal.write(b'{"seq":2,"type":"spe')
    Emitter.open(conn, book_dir, engine_run_id="b").close()
    content = (book_dir / "events.jsonl").read_bytes()
    assert content.startswith(whole)
    assert content.count(b"\n") == 2 and content.endswith(b"\n")
    assert b'"spe\n' not in content and b'{"seq":2,"type":"spe{' not in content
    conn.close()


def test_lines_already_at_the_end_are_not_appended_twice(book_dir: Path) -> None:
    """A crash after fsync but before the watermark leaves rows in the file; recovery finds them."""
    conn = connect(book_dir / DATABASE_FILE_NAME)
    emitter = Emitter.open(conn, book_dir, engine_run_id="a")
    with emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=1))
    with emitter.transaction():
        emitter.emit(Spend(committed_micro_usd=2))
    # The watermark of the last flush is only recorded by the next transaction or by close():
    assert read_status(conn)["streams"] == [
        {"engine_run_id": "a", "last_seq": 3, "projected_seq": 2}
    ]
    emitter._lock.close()  # die without close()
    conn.close()
    conn = connect(book_dir / DATABASE_FILE_NAME)
    Emitter.open(conn, book_dir, engine_run_id="b").close()
    seqs = [line["seq"] for line in journal_lines(book_dir)]
    assert seqs == [1, 2, 3, 1]
    conn.close()


def test_a_commit_that_fails_projects_nothing(conn: sqlite3.Connection, book_dir: Path) -> None:
    """When COMMIT itself fails (a deferred constraint), the events are gone with the transaction."""
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute(
        "CREATE TABLE child (parent_id INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
    )
    with Emitter.open(conn, book_dir) as emitter:
        with pytest.raises(sqlite3.IntegrityError), emitter.transaction():
            conn.execute("INSERT INTO child (parent_id) VALUES (42)")
            emitter.emit(Spend(committed_micro_usd=9))
        assert not conn.in_transaction
        with emitter.transaction():
            assert emitter.emit(Spend(committed_micro_usd=10)) == 2
    lines = journal_lines(book_dir)
    assert [(line["seq"], line["data"]) for line in lines[1:]] == [(2, {"committed_micro_usd": 10})]


FINISHED = Finished(exit_code=ExitCode.CLEAN, units_done=1, units_total=1, committed_micro_usd=5)


def test_nothing_may_follow_a_committed_finished(conn: sqlite3.Connection, book_dir: Path) -> None:
    """Once the stream's finished is committed, emit raises StreamFinished and stores nothing; the
    host's transaction itself goes on."""
    with Emitter.open(conn, book_dir) as emitter:
        with emitter.transaction():
            assert emitter.emit(FINISHED) == 2
        with emitter.transaction():
            conn.execute("CREATE TABLE host_rows (x)")
            with pytest.raises(StreamFinished) as raised:
                emitter.emit(Spend(committed_micro_usd=9))
            assert raised.value.finished_seq == 2
            conn.execute("INSERT INTO host_rows VALUES (1)")
        assert conn.execute("SELECT count(*) FROM host_rows").fetchone() == (1,)
        with emitter.transaction(), pytest.raises(StreamFinished):
            emitter.emit(FINISHED)
    assert [line["type"] for line in journal_lines(book_dir)] == ["hello", "finished"]


def test_nothing_may_follow_a_finished_in_the_same_transaction(
    conn: sqlite3.Connection, book_dir: Path
) -> None:
    """A finished stored earlier in the open transaction already ends the stream."""
    with Emitter.open(conn, book_dir) as emitter, emitter.transaction():
        emitter.emit(FINISHED)
        with pytest.raises(StreamFinished):
            emitter.emit(UnitDone(unit="u", index=0))
    assert [line["type"] for line in journal_lines(book_dir)] == ["hello", "finished"]


def test_a_rolled_back_finished_does_not_end_the_stream(
    conn: sqlite3.Connection, book_dir: Path
) -> None:
    """A finished rolled back with its transaction (the emitter's, or the host's own) never
    existed: the stream goes on, and may end later with another finished."""
    with Emitter.open(conn, book_dir) as emitter:
        with pytest.raises(RuntimeError, match="host failed"), emitter.transaction():
            emitter.emit(FINISHED)
            raise RuntimeError("host failed")
        conn.execute("BEGIN IMMEDIATE")
        emitter.emit(FINISHED)
        conn.rollback()
        with emitter.transaction():
            assert emitter.emit(Spend(committed_micro_usd=3)) == 2
            assert emitter.emit(FINISHED) == 3
        with emitter.transaction(), pytest.raises(StreamFinished):
            emitter.emit(Spend(committed_micro_usd=4))
    assert [line["type"] for line in journal_lines(book_dir)] == ["hello", "spend", "finished"]


def test_a_finished_whose_commit_failed_does_not_end_the_stream(
    conn: sqlite3.Connection, book_dir: Path
) -> None:
    """When COMMIT itself fails, the finished is gone with its transaction."""
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute(
        "CREATE TABLE child (parent_id INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
    )
    with Emitter.open(conn, book_dir) as emitter:
        with pytest.raises(sqlite3.IntegrityError), emitter.transaction():
            conn.execute("INSERT INTO child (parent_id) VALUES (42)")
            emitter.emit(FINISHED)
        with emitter.transaction():
            assert emitter.emit(Spend(committed_micro_usd=10)) == 2


# Each step is one transaction: the kinds of its events, then whether it commits.
transactions = st.lists(
    st.tuples(
        st.lists(st.sampled_from(["spend", "unit_done", "finished"]), min_size=1, max_size=3),
        st.sampled_from(["commit", "rollback", "host_rollback"]),
    ),
    max_size=8,
)


@settings(deadline=None)
@given(transactions)
def test_the_journal_never_holds_a_line_after_finished(
    plan: list[tuple[list[str], str]],
) -> None:
    """Whatever the host commits or rolls back, emit refuses exactly the events after a stored
    finished, and the journal's stream ends at its first committed finished."""
    with tempfile.TemporaryDirectory() as scratch:
        book = Path(scratch) / "book"
        book.mkdir()
        conn = connect(book / DATABASE_FILE_NAME)
        committed: list[str] = []
        with Emitter.open(conn, book) as emitter:
            for kinds, ending in plan:
                conn.execute("BEGIN IMMEDIATE")
                stored = [*committed]
                for kind in kinds:
                    event = {
                        "spend": Spend(committed_micro_usd=1),
                        "unit_done": UnitDone(unit="u", index=0),
                        "finished": FINISHED,
                    }[kind]
                    if "finished" in stored:
                        with pytest.raises(StreamFinished):
                            emitter.emit(event)
                    else:
                        assert emitter.emit(event) == len(stored) + 2
                        stored.append(kind)
                if ending == "commit":
                    conn.commit()
                    emitter.flush()
                    committed = stored
                else:
                    conn.rollback()
        conn.close()
        types = [line["type"] for line in journal_lines(book)]
        assert types == ["hello", *committed]
        assert "finished" not in types[:-1]


def test_a_hello_the_readers_would_refuse_is_refused_at_open(book_dir: Path) -> None:
    """A stream id or book id over 255 bytes or holding U+0000 fails the open, writes nothing,
    and releases the lock."""
    conn = connect(book_dir / DATABASE_FILE_NAME)
    for fields in (
        {"engine_run_id": "r" * 256},
        {"book_id": "b\x00"},
        {"chunker_version": "é" * 128},
    ):
        with pytest.raises(EventError):
            Emitter.open(conn, book_dir, **fields)
    conn.close()
    assert not (book_dir / "events.jsonl").exists() or journal_lines(book_dir) == []
    assert BookLock(book_dir).held


# -- stream versions -------------------------------------------------------------------------------


def test_the_host_picks_stream_1_4_and_its_hello_carries_the_pid(
    conn: sqlite3.Connection, book_dir: Path
) -> None:
    """`stream_version="1.4"` writes a 1.4 hello with the process's pid; the default stays 1.3,
    without it. One book holds both, and verify reads them."""
    Emitter.open(conn, book_dir, engine_run_id="old").close()
    with Emitter.open(conn, book_dir, engine_run_id="new", stream_version="1.4") as emitter:
        assert emitter.stream_version == "1.4"
        with emitter.transaction():
            emitter.emit(Spend(committed_micro_usd=3))
    old, new, spend = journal_lines(book_dir)
    assert old["data"]["stream_version"] == "1.3" and "pid" not in old["data"]  # type: ignore[index,operator]
    assert new["data"] == {
        "stream_version": "1.4",
        "engine_run_id": "new",
        "book_id": "book-1",
        "chunker_version": "",
        "pid": os.getpid(),
    }
    assert spend["seq"] == 2
    assert verify_journal(book_dir / "events.jsonl").ok


@pytest.mark.parametrize("version", ["1.5", "1.2", "2.0", "", "1.4 ", 1.4, None])
def test_a_stream_version_the_emitter_does_not_write_is_refused_untouched(
    conn: sqlite3.Connection, book_dir: Path, version: object
) -> None:
    """Any version but 1.3 and 1.4 is refused with StreamVersionNotSupported (exit 10, a
    configuration error) before the lock, the database or the journal is touched."""
    with pytest.raises(StreamVersionNotSupported) as raised:
        Emitter.open(conn, book_dir, stream_version=version)  # type: ignore[arg-type]
    assert raised.value.exit_code == 10
    assert raised.value.supported == STREAM_VERSIONS == ("1.3", "1.4")
    assert not (book_dir / "events.jsonl").exists()
    assert schema_version(conn) == 0
    assert BookLock(book_dir).held


def test_a_pid_belongs_to_stream_1_4() -> None:
    """A hello of 1.3 cannot carry a pid (no 1.3 writer wrote one), and a pid is an integer from 1
    to 2**63 - 1: the event refuses anything else when it is built."""
    assert Hello(engine_run_id="r", book_id="b", chunker_version="", stream_version="1.4", pid=1)
    for version, pid in [("1.3", 7), ("1.4", 0), ("1.4", -1), ("1.4", 2**63), ("1.4", True)]:
        with pytest.raises(EventError):
            Hello(
                engine_run_id="r", book_id="b", chunker_version="", stream_version=version, pid=pid
            )

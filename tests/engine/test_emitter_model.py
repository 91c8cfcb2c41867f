"""A model of an engine's life: commits, rollbacks, crashes at every projection point, a failing
disk, torn tails, restarts and repairs — and after every step, nothing committed is lost."""

from __future__ import annotations

import errno
import shutil
import sqlite3
import tempfile
from pathlib import Path

import orjson
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from engine_events import Spend, UnitDone
from engine_events._emitter import Emitter
from engine_events._lock import BookLock
from engine_events._schema import DATABASE_FILE_NAME, connect, schema_version
from engine_events.readers.status import read_status, repair
from engine_events.testing import CRASH_POINTS, FaultyIO, SimulatedCrash, abandon, open_emitter

Key = tuple[str, int]


class EngineLife(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="engine-model-"))
        self.book = self.root / "book"
        self.book.mkdir()
        self.conn = connect(self.book / DATABASE_FILE_NAME)
        self.io = FaultyIO(in_process=True)
        self.emitter: Emitter | None = None
        self.streams = 0
        # The model: every committed event as (stream, seq) -> (type, data), in commit order.
        self.committed: dict[Key, tuple[str, object]] = {}
        self.crashes = 0

    def teardown(self) -> None:
        if self.emitter is not None:
            abandon(self.emitter)
        self.conn.close()
        shutil.rmtree(self.root)

    # -- the engine's life --------------------------------------------------------------------

    @precondition(lambda self: self.emitter is None)
    @rule()
    def start(self) -> None:
        self.streams += 1
        run_id = f"run-{self.streams}"
        try:
            self.emitter = open_emitter(self.conn, self.book, self.io, engine_run_id=run_id)
        except SimulatedCrash:
            self._crashed_while_starting(run_id)
            return
        self._record(run_id, 1, "hello", None)

    @precondition(lambda self: self.emitter is not None)
    @rule(
        amounts=st.lists(st.integers(0, 10**9), min_size=1, max_size=4),
        crash=st.none() | st.sampled_from(CRASH_POINTS),
    )
    def commit(self, amounts: list[int], crash: str | None) -> None:
        emitter = self.emitter
        assert emitter is not None
        if crash is not None:
            self.io.crash_next(crash)
        stored: list[tuple[int, str, object]] = []
        try:
            with emitter.transaction():
                for index, amount in enumerate(amounts):
                    fact = (
                        Spend(committed_micro_usd=amount)
                        if index % 2 == 0
                        else UnitDone(unit=f"u{amount}", index=index)
                    )
                    stored.append((emitter.emit(fact), fact.type, fact.data()))
        except SimulatedCrash:
            event(f"crash at {crash}")
            self._crash()  # the crash points all lie after COMMIT: the events exist
        finally:
            self.io.crash_at = None
        for seq, kind, data in stored:
            self._record(emitter.engine_run_id, seq, kind, data)

    @precondition(lambda self: self.emitter is not None)
    @rule(amount=st.integers(0, 100))
    def rollback(self, amount: int) -> None:
        emitter = self.emitter
        assert emitter is not None
        try:
            with emitter.transaction():
                emitter.emit(Spend(committed_micro_usd=amount))
                raise ValueError("the host's step failed")
        except ValueError:
            pass

    @precondition(lambda self: self.emitter is not None)
    @rule()
    def crash_between_steps(self) -> None:
        self._crash()

    @rule(code=st.sampled_from([errno.ENOSPC, errno.EIO]))
    def disk_fails(self, code: int) -> None:
        self.io.fail_errno = code

    @rule()
    def disk_heals(self) -> None:
        self.io.fail_errno = None

    @precondition(lambda self: self.emitter is None)
    @rule(garbage=st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b))
    def torn_tail(self, garbage: bytes) -> None:
        """A crash mid-write leaves an unterminated last line."""
        journal = self.book / "events.jsonl"
        if journal.exists():
            with open(journal, "ab") as file:
                file.write(garbage)

    @precondition(lambda self: self.emitter is None)
    @rule()
    def repair_stopped_run(self) -> None:
        if self.io.fail_errno is not None:
            return  # repair uses the real disk; a failing one is the emitter's to model
        with BookLock(self.book):
            repair(self.conn, self.book)
        assert self._journal_keys() == list(self.committed), "repair projects everything"

    # -- checks ---------------------------------------------------------------------------------

    @invariant()
    def the_journal_is_a_dense_prefix_of_what_committed(self) -> None:
        keys = self._journal_keys()
        assert keys == list(self.committed)[: len(keys)], "the file is the committed order's prefix"

    @invariant()
    def no_line_is_in_the_journal_twice(self) -> None:
        """Whatever crashed where, a restart or a repair recognises the rows already at the end
        of the file: a line is never appended a second time."""
        journal = self.book / "events.jsonl"
        if journal.exists():
            content = journal.read_bytes()
            lines = content[: content.rfind(b"\n") + 1].splitlines()
            assert len(lines) == len(set(lines)), "a line is in the journal twice"

    @invariant()
    def pruning_the_settled_streams_changes_no_status(self) -> None:
        """Retention may drop the outbox rows of every stream whose recorded watermark reached
        its last seq; each such stream's summary row then tells `status` exactly the same."""
        if self.conn.in_transaction or schema_version(self.conn) == 0:
            return
        copy = sqlite3.connect(":memory:")
        try:
            self.conn.backup(copy)
            settled = [
                stream_no
                for stream_no, recorded in copy.execute(
                    "SELECT stream_no, projected_seq FROM engine_events_stream"
                )
                if recorded > 0
                and recorded
                == copy.execute(
                    "SELECT max(seq) FROM engine_events_outbox WHERE stream_no = ?", (stream_no,)
                ).fetchone()[0]
            ]
            for stream_no in settled:
                copy.execute("DELETE FROM engine_events_outbox WHERE stream_no = ?", (stream_no,))
            event(f"streams pruned: {min(len(settled), 3)}+")
            assert read_status(copy) == read_status(self.conn)
        finally:
            copy.close()

    @invariant()
    def a_healthy_live_engine_has_projected_everything(self) -> None:
        if (
            self.emitter is not None
            and self.io.fail_errno is None
            and not self.emitter.journal_degraded
        ):
            assert self._journal_keys() == list(self.committed)

    # -- helpers --------------------------------------------------------------------------------

    def _record(self, run_id: str, seq: int, kind: str, data: object) -> None:
        self.committed[(run_id, seq)] = (kind, data)

    def _crash(self) -> None:
        assert self.emitter is not None
        abandon(self.emitter)
        self.emitter = None
        self.crashes += 1

    def _crashed_while_starting(self, run_id: str) -> None:
        """A crash during start-up: whatever of the new stream committed stays committed."""
        self.crashes += 1
        with BookLock(self.book):  # the dead process's lock is gone
            pass
        row = self.conn.execute(
            "SELECT 1 FROM engine_events_stream WHERE engine_run_id = ?", (run_id,)
        ).fetchone()
        if row is not None:
            self._record(run_id, 1, "hello", None)

    def _journal_keys(self) -> list[Key]:
        """The distinct lines of the journal in file order, checked line by line on the way."""
        journal = self.book / "events.jsonl"
        if not journal.exists():
            return []
        content = journal.read_bytes()
        complete = content[: content.rfind(b"\n") + 1]
        seen: dict[Key, bytes] = {}
        keys: list[Key] = []
        stream = ""
        for raw in complete.splitlines(keepends=True):
            line = orjson.loads(raw)
            if line["type"] == "hello":
                stream = line["data"]["engine_run_id"]
            key = (stream, line["seq"])
            if key in seen:
                assert seen[key] == raw, f"{key} repeated with other bytes"
                continue
            kind, data = self.committed[key]
            assert line["type"] == kind and (data is None or line["data"] == data)
            seen[key] = raw
            keys.append(key)
        return keys


TestEngineLife = EngineLife.TestCase

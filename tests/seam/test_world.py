"""The whole seam in one simulated world: an engine host on a real SQLite database and journal
file, the platform's pass over that file into a real Postgres — and faults everywhere.

The engine crashes right after any SQLite COMMIT and at every step of the projection, its disk
fails (ENOSPC, EIO: a partial write, then errors) and heals, its process exits, is restarted or
repaired; the file gets a torn tail, a duplicated region, or is replaced by a copy; a Postgres
commit fails (a deferred trigger refuses it with a chosen SQLSTATE), the pass's connection is
killed mid-batch or between passes, the tailer restarts, its hints are lost or spoiled.

After every step: the outbox holds exactly what the host committed; the journal is a prefix of
the commit order with only byte-identical repeats; Postgres holds the effects of a prefix of the
committed lines, each applied once (one line hash per seq, the committed bytes' hash), and no
attempt is quarantined, stalled or refused. At rest (disk healed, engine stopped and repaired,
one more pass), every attempt's cursor is at the head of its stream: nothing committed is lost.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import itertools
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any, Literal

import orjson
import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from engine_events import (
    BankStop,
    Ceiling,
    Emitter,
    EngineEventsError,
    ExitCode,
    Finished,
    PhaseCount,
    Progress,
    Spend,
    UnitDone,
)
from engine_events.testing import (
    AFTER_COMMIT,
    CRASH_POINTS,
    MID_PRUNE,
    EngineWorld,
    SimulatedCrash,
)
from platform_ingest import Database, DatabaseError
from platform_ingest.decisions.views import compacted_digest
from platform_ingest.ingest.apply import CommitHook
from platform_ingest.ingest.book_pass import BookPass
from platform_ingest.ingest.books import register_book
from platform_ingest.operate.compact import compact_quiet
from seam_model import (
    COMMIT_FAULTS,
    STATS,
    Committed,
    PostgresFaults,
    applied_prefix,
    expected_runs,
    observed_runs,
    sha256,
)

pytestmark = pytest.mark.postgres

_books = itertools.count(1)

HOST_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS host_ledger (id INTEGER PRIMARY KEY CHECK (id = 1),"
    " steps INTEGER NOT NULL, units INTEGER NOT NULL, spent INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO host_ledger VALUES (1, 0, 0, 0)",
)
HOST_LEDGER = "SELECT steps, units, spent FROM host_ledger WHERE id = 1"
HOST_STEP = "UPDATE host_ledger SET steps = steps + 1, units = :units, spent = :spent WHERE id = 1"
PHASES = ("draft", "edit")

ENDINGS: dict[str, tuple[int, Literal["soft", "hard"] | None, str | None, str | None]] = {
    # how a stream ends on purpose: (exit code, stop, refusal, the event before `finished`)
    "clean": (0, None, None, None),
    "flagged": (2, None, None, None),
    "infra": (1, None, None, None),
    "bank_stop": (3, None, None, "bank_stop"),
    "ceiling": (4, None, None, "ceiling"),
    "soft_stop": (5, "soft", None, None),
    "hard_stop": (5, "hard", None, None),
    "refused": (14, None, "decisions_rejected", None),
}


def host_setup(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in HOST_SCHEMA:
            conn.execute(statement)
    except BaseException:
        conn.rollback()
        raise
    conn.commit()


class SeamWorld(RuleBasedStateMachine):
    dsn: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="seam-world-"))
        self.book_id = f"seam-book-{os.getpid()}-{next(_books):07d}"
        self.book = self.root / self.book_id
        self.world = EngineWorld(self.book, setup=host_setup, chunker_version="c1")
        self.streams = 0
        self.committed: list[Committed] = []
        self.lines: dict[tuple[str, int], bytes] = {}
        """Each committed row's line, kept as it is seen: a prune takes rows out of the outbox,
        the platform still hashes their lines."""
        self.db = Database(self.dsn)
        self.faults = PostgresFaults(self.dsn)
        register_book(self.db, self.book)
        self.steps = 0

    def teardown(self) -> None:
        try:
            self._settle()
        finally:
            for point, count in self.world.crashes.items():
                STATS[f"crashes: {point}"] += count
            STATS["engine processes"] += self.world.processes
            STATS["sqlite commits"] += self.world.commits
            STATS["simulation steps"] += self.steps
            STATS["examples"] += 1
            self.world.close()
            self.faults.disarm()
            self.faults.close()
            self.db.close()
            shutil.rmtree(self.root)

    # -- the engine ------------------------------------------------------------------------------

    @precondition(lambda self: not self.world.running)
    @rule(policy=st.sampled_from(["degrade", "degrade", "fail"]))
    def start(self, policy: str) -> None:
        self._count("start")
        self.streams += 1
        run_id = f"00000000-0000-4000-8000-{self.streams:012d}"
        try:
            self.world.start(run_id, on_journal_error="fail" if policy == "fail" else "degrade")
        except SimulatedCrash as crash:
            event(f"engine crash while starting: {crash.point}")
        except EngineEventsError as error:
            event(f"engine exit while starting: {type(error).__name__}")
            STATS["engine exits on a journal error"] += 1
        self._hello_if_committed(run_id)

    @precondition(lambda self: self.world.running)
    @rule(
        kinds=st.lists(st.sampled_from(["spend", "unit_done", "progress"]), min_size=1, max_size=4),
        crash=st.none() | st.sampled_from([AFTER_COMMIT, *CRASH_POINTS]),
    )
    def commit(self, kinds: list[str], crash: str | None) -> None:
        """One checkpoint of the host: its ledger row and its events, one transaction."""
        self._count("commit")
        if crash is not None:
            self.world.crash_at(crash)

        def step(conn: sqlite3.Connection, emitter: Emitter, stored: list[Committed]) -> None:
            self._host_step(conn, emitter, kinds, stored)

        self._committing(step)

    @precondition(lambda self: not self.world.running)
    @rule(
        bursts=st.lists(
            st.lists(st.sampled_from(["spend", "unit_done", "progress"]), min_size=1, max_size=3),
            max_size=6,
        )
    )
    def run_engine(self, bursts: list[list[str]]) -> None:
        """A new engine process starts and commits some checkpoints."""
        self.start("degrade")
        self.commit_burst(bursts)

    @precondition(lambda self: self.world.running)
    @rule(
        bursts=st.lists(
            st.lists(st.sampled_from(["spend", "unit_done", "progress"]), min_size=1, max_size=3),
            min_size=2,
            max_size=6,
        )
    )
    def commit_burst(self, bursts: list[list[str]]) -> None:
        """Several checkpoints in a row, each its own transaction."""
        for kinds in bursts:
            if not self.world.running:
                break
            self.commit(kinds, None)

    @precondition(lambda self: self.world.running)
    @rule(ending=st.sampled_from(sorted(ENDINGS)))
    def finish(self, ending: str) -> None:
        """The host ends its stream on purpose: (ceiling or bank_stop, then) finished, exit."""
        self._count("finish")
        code, stop, refusal, before = ENDINGS[ending]

        def step(conn: sqlite3.Connection, emitter: Emitter, stored: list[Committed]) -> None:
            steps, units, spent = conn.execute(HOST_LEDGER).fetchone()
            with emitter.transaction():
                if before == "ceiling":
                    fact: Any = Ceiling(shortfall_micro_usd=1000 + steps)
                    stored.append(self._emit(emitter, fact))
                elif before == "bank_stop":
                    stored.append(self._emit(emitter, BankStop(signature=f"sig-{steps}")))
                finished = Finished(
                    exit_code=ExitCode(code),
                    units_done=units,
                    units_total=units + 3,
                    committed_micro_usd=spent,
                    stop=stop,
                    refusal=refusal,
                )
                stored.append(self._emit(emitter, finished))

        if self._committing(step):
            try:
                self.world.exit()
            except SimulatedCrash as crash:
                event(f"engine crash while exiting: {crash.point}")
            except (EngineEventsError, OSError):
                STATS["engine exits on a journal error"] += 1

    @precondition(lambda self: self.world.running)
    @rule()
    def rollback(self) -> None:
        """The host's step fails: its transaction rolls back, nothing of it reaches anyone."""
        self._count("rollback")

        def step(conn: sqlite3.Connection, emitter: Emitter) -> None:
            with emitter.transaction():
                conn.execute(HOST_STEP, {"units": 999, "spent": 999})
                emitter.emit(Spend(committed_micro_usd=999_999))
                raise ValueError("the host's step failed")

        with contextlib.suppress(ValueError):
            self.world.step(step)

    @precondition(lambda self: self.world.running)
    @rule(crash=st.booleans())
    def prune(self, crash: bool) -> None:
        """The host prunes the outbox (every row it may: no retention), or dies mid-prune."""
        self._count("prune")
        if crash:
            self.world.crash_at(MID_PRUNE)
        try:
            pruned = self.world.step(lambda _conn, emitter: emitter.prune(dt.timedelta(0)))
        except SimulatedCrash as died:
            event(f"engine crash: {died.point}")
            return
        STATS["outbox rows pruned"] += pruned.rows_deleted

    @rule(point=st.sampled_from([AFTER_COMMIT, *CRASH_POINTS]))
    def crash_at(self, point: str) -> None:
        """The next time the engine reaches `point`, it dies there."""
        self._count("crash_at")
        self.world.crash_at(point)

    @precondition(lambda self: self.world.running)
    @rule()
    def restart(self) -> None:
        """SIGKILL between two steps, then a new process (a new stream) on the same book."""
        self._count("restart")
        self.world.crash()
        event("engine killed between steps")
        self.start("degrade")

    @precondition(lambda self: self.world.running)
    @rule()
    def stop(self) -> None:
        """The process exits without a `finished` (as the host's own shutdown path may)."""
        self._count("stop")
        try:
            self.world.exit()
        except SimulatedCrash as crash:
            event(f"engine crash while exiting: {crash.point}")
        except (EngineEventsError, OSError):
            STATS["engine exits on a journal error"] += 1

    @rule(code=st.sampled_from([errno.ENOSPC, errno.EIO, None]))
    def disk(self, code: int | None) -> None:
        """The journal's disk starts failing (a partial write, then errors) or heals."""
        self._count("disk")
        if code is None:
            self.world.disk_heals()
            return
        STATS[f"disk faults: {errno.errorcode[code]}"] += 1
        self.world.disk_fails(code)

    @precondition(lambda self: not self.world.running)
    @rule()
    def repair(self) -> None:
        """`engine-events status --json --repair` over the stopped run."""
        self._count("repair")
        try:
            self.world.repair()
        except SimulatedCrash as crash:
            event(f"repair crash: {crash.point}")
            return
        except OSError:
            STATS["repairs refused by the disk"] += 1
            return
        STATS["repairs"] += 1
        self.world.check_journal(complete=True)

    # -- the file --------------------------------------------------------------------------------

    @precondition(lambda self: not self.world.running)
    @rule(
        kind=st.sampled_from(["torn_tail", "replaced_by_copy"]),
        garbage=st.binary(min_size=1, max_size=60).map(lambda b: b.replace(b"\n", b"x")),
    )
    def file_fault(self, kind: str, garbage: bytes) -> None:
        """While the engine is down: a crash mid-write left an unterminated last line, or the
        file was replaced by a byte-identical copy (a new inode: every hint is void)."""
        self._count("file_fault")
        journal = self.book / "events.jsonl"
        if not journal.exists():
            return
        if kind == "torn_tail":
            if journal.read_bytes().endswith(b"\n"):
                with open(journal, "ab") as file:
                    file.write(garbage)
                STATS["torn tails"] += 1
            return
        copy = self.book / "events.jsonl.copy"
        shutil.copyfile(journal, copy)
        os.replace(copy, journal)
        STATS["hint losses: file replaced by a copy"] += 1

    @precondition(lambda self: not self.world.running)
    @rule(data=st.data())
    def duplicate(self, data: st.DataObject) -> None:
        """A region of the file, from a line start to its end, is written again.

        The region starts at a hello, or at a line of the file's last stream: a reader tells
        streams apart by their hello, so a region that starts inside an earlier stream and is
        appended after a later hello would be another journal, not a repeat of this one.
        """
        self._count("duplicate")
        journal = self.book / "events.jsonl"
        content = journal.read_bytes() if journal.exists() else b""
        if not content or not content.endswith(b"\n"):
            return
        hellos: set[int] = set()
        last_stream: set[int] = set()
        offset = 0
        for raw in content.splitlines(keepends=True):
            if orjson.loads(raw)["type"] == "hello":
                hellos.add(offset)
                last_stream = set()
            last_stream.add(offset)
            offset += len(raw)
        valid = sorted(hellos | last_stream)
        start = data.draw(st.sampled_from(valid[-12:]), label="region start")
        with open(journal, "ab") as file:
            file.write(content[start:])
        STATS["duplicated regions"] += 1
        STATS["duplicated lines"] += content[start:].count(b"\n")
        event("duplicated region")

    # -- the tailer ------------------------------------------------------------------------------

    def _arm(self, fault: str | None, nth: int) -> CommitHook | None:
        """Arm the Postgres fault the next pass meets (none: None); the commit hook that injects
        it inside a batch, when it needs one."""
        if fault in COMMIT_FAULTS:
            self.faults.fail_commit(COMMIT_FAULTS[fault], nth=nth)
        elif fault == "connection_killed_in_batch":
            return self.faults.kill_in_batch(self.db, nth)
        elif fault == "connection_killed":
            self.faults.terminate(self.db.backend_pid)
        return None

    @rule(
        fault=st.sampled_from(
            [None, None, *sorted(COMMIT_FAULTS), "connection_killed_in_batch", "connection_killed"]
        ),
        batch_lines_max=st.integers(1, 8),
        nth=st.integers(1, 3),
    )
    def tail(self, fault: str | None, batch_lines_max: int, nth: int) -> None:
        """One pass of the platform over the book, with a Postgres fault or none."""
        self._count("tail")
        hook = self._arm(fault, nth)
        before = self.world.check_journal()
        try:
            report = BookPass(
                self.db,
                self.book_id,
                mode="auto",
                batch_lines_max=batch_lines_max,
                commit_hook=hook,
            ).run()
        except DatabaseError as error:
            STATS[f"postgres faults: {fault}: pass failed ({type(error).__name__})"] += 1
            self.db.reconnect()
            return
        finally:
            self.faults.disarm()
        if fault is not None:
            STATS[f"postgres faults: {fault}"] += 1
            event(f"postgres fault: {fault}")
        STATS["passes"] += 1
        STATS["lines applied"] += report.lines_applied
        STATS["duplicate lines skipped by the pass"] += report.duplicates
        STATS["hints discarded by the pass"] += int(report.hint_discarded)
        STATS["pass restarts after a fault"] += report.restarts
        assert report.problems == [], report.problems
        # A pass that ran to its end has applied every complete line of the file.
        cursors = self._cursors()
        count, _ = applied_prefix(self.committed, cursors)
        assert count == len(before.keys), "a pass left complete lines unapplied"

    @rule(steps=st.one_of(st.none(), st.integers(0, 6)))
    def compact(self, steps: int | None) -> None:
        """The platform compacts every attempt in a quiet state (no wait for quiet time), to the
        end or cut short after a few of its bounded steps, as a crash leaves it."""
        self._count("compact")
        taken = itertools.count()

        def stopping() -> bool:
            return steps is not None and next(taken) >= steps

        report = compact_quiet(self.db, quiet_for_s=0, stopping=stopping)
        STATS["attempts compacted"] += len(report.compacted)
        if report.compacted and steps is not None:
            STATS["compactions cut short"] += 1

    @rule(
        how=st.sampled_from(
            ["hash", "offset_past_end", "offset_mid_line", "file", "tailer_restart", "lost"]
        )
    )
    def truncate_hint(self, how: str) -> None:
        """The hints in Postgres no longer match the file, or the tailer restarts (a new
        connection, nothing in memory), with its hints ("lost") or without."""
        self._count("truncate_hint")
        if how in ("tailer_restart", "lost"):
            self.db.close()
            self.db = Database(self.dsn)
            STATS["tailer restarts"] += 1
            if how == "tailer_restart":
                return
            how = "file"
        self.faults.spoil_hints(self.book_id, how)
        STATS[f"hint losses: {how}"] += 1

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def the_outbox_holds_exactly_what_the_host_committed(self) -> None:
        """What the host committed, less what a prune took: the first rows of streams."""
        rows = self.world.committed()
        for run_id, seq, line in rows:
            self.lines.setdefault((run_id, seq), line)
        outbox = [(run_id, seq, *self._decoded(line)) for run_id, seq, line in rows]
        kept = {(run_id, seq) for run_id, seq, _ in rows}
        first_kept: dict[str, int] = {}
        for run_id, seq, _ in rows:
            first_kept.setdefault(run_id, seq)
        pruned = [(run_id, seq) for run_id, seq, *_ in self.committed if (run_id, seq) not in kept]
        for run_id, seq in pruned:
            assert seq < first_kept.get(run_id, seq + 1), "a prune took a row after a kept one"
        assert outbox == [c for c in self.committed if (c[0], c[1]) in kept]
        self.world.check_journal()
        STATS["invariant checks"] += 1

    @invariant()
    def postgres_holds_a_prefix_applied_once(self) -> None:
        cursors = self._cursors()
        _, applied = applied_prefix(self.committed, cursors)
        runs, book_error = observed_runs(self.db, self.book)
        assert book_error is None
        assert runs == expected_runs(applied)
        rows = self.lines
        compacted = self.faults.compacted_ranges(self.book_id)
        hashes = self.faults.applied_hashes(self.book_id)
        assert hashes == {
            (run_id, seq): sha256(rows[run_id, seq])
            for run_id, seq, *_ in applied
            if seq > compacted.get(run_id, (0, b""))[0]
        }
        for run_id, (through, digest) in compacted.items():
            lines = (rows[run_id, seq] for seq in range(1, through + 1))
            assert digest == compacted_digest(sha256(line) for line in lines)

    # -- helpers ---------------------------------------------------------------------------------

    def _count(self, rule_name: str) -> None:
        self.steps += 1
        STATS[f"steps: {rule_name}"] += 1

    def _settle(self) -> None:
        """At rest: the disk heals, the engine exits and the run is repaired, one clean pass.
        Then every attempt's cursor is at the head of its stream."""
        self.world.disarm()
        self.world.disk_heals()
        self.faults.disarm()
        if self.world.running:
            self.world.exit()
        self.world.repair()
        self.world.check_journal(complete=True)
        report = BookPass(self.db, self.book_id, mode="auto").run()
        assert report.problems == []
        STATS["lines applied"] += report.lines_applied
        STATS["duplicate lines skipped by the pass"] += report.duplicates
        heads: dict[str, int] = {}
        for run_id, seq, _, _ in self.committed:
            heads[run_id] = seq
        assert self._cursors() == heads, "a committed line never reached Postgres"
        self.postgres_holds_a_prefix_applied_once()
        STATS["settled at rest"] += 1

    def _committing(self, step: Any) -> bool:
        """Run a host step that commits; its events are committed unless it failed before COMMIT
        (every crash point lies after COMMIT). Returns True when the process is still alive."""
        stored: list[Committed] = []

        def run(conn: sqlite3.Connection, emitter: Emitter) -> None:
            step(conn, emitter, stored)  # appends each event as it is emitted

        alive = True
        try:
            self.world.step(run)
        except SimulatedCrash as crash:
            event(f"engine crash: {crash.point}")
            alive = False
        except EngineEventsError as error:
            event(f"engine exit: {type(error).__name__}")
            STATS["engine exits on a journal error"] += 1
            alive = False
        self.committed.extend(stored)
        return alive

    def _host_step(
        self, conn: sqlite3.Connection, emitter: Emitter, kinds: list[str], stored: list[Committed]
    ) -> None:
        steps, units, spent = conn.execute(HOST_LEDGER).fetchone()
        with emitter.transaction():
            for kind in kinds:
                if kind == "spend":
                    spent += 1000 + steps
                    stored.append(self._emit(emitter, Spend(committed_micro_usd=spent)))
                elif kind == "unit_done":
                    unit = UnitDone(unit=f"unit-{units:04d}", index=units)
                    units += 1
                    stored.append(self._emit(emitter, unit))
                else:
                    phases = {
                        name: PhaseCount(done=min(units, 9), total=9 + index)
                        for index, name in enumerate(PHASES)
                    }
                    stored.append(self._emit(emitter, Progress(phases=phases)))
            conn.execute(HOST_STEP, {"units": units, "spent": spent})

    def _emit(self, emitter: Emitter, fact: Any) -> Committed:
        seq = emitter.emit(fact)
        return (emitter.engine_run_id, seq, fact.type, fact.data())

    def _hello_if_committed(self, run_id: str) -> None:
        """Whether the stream's hello committed is the engine's to say (a crash may come just
        before or just after its COMMIT)."""
        for committed_run, seq, line in self.world.committed():
            if committed_run == run_id and seq == 1:
                self.committed.append((run_id, 1, *self._decoded(line)))
                return

    @staticmethod
    def _decoded(line: bytes) -> tuple[str, dict[str, Any]]:
        value = orjson.loads(line)
        return value["type"], value["data"]

    def _cursors(self) -> dict[str, int]:
        return {
            attempt["engine_run_id"]: attempt["last_seq"]
            for run in observed_runs(self.db, self.book)[0]
            for attempt in run["attempts"]
        }


def test_the_seam_never_loses_or_doubles_a_committed_event(seam_dsn: str) -> None:
    """Crashes after every commit and at every projection step, disk, file and Postgres faults:
    Postgres always holds a prefix of what committed, each line once, and at rest all of it."""
    SeamWorld.dsn = seam_dsn
    run_state_machine_as_test(SeamWorld, settings=settings(settings.default))

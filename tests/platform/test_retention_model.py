"""Property: compaction at any point, a crash of it at any step, re-reads with duplicates and
conflicts: `show --json` equals what a platform that never compacts shows.

A hypothesis state machine writes a journal of several streams (with the repeats at-least-once
delivery makes), sweeps it, compacts any stream at any moment, cuts compactions short (the digest
written, some rows deleted, as a crash leaves them), and rewrites the file (a new inode: the pass
reads from byte 0), sometimes with one line changed. Two platforms read the same file: the subject
compacts, the model (in memory) never does. After every sweep their states must be equal, but for
the one documented difference: a conflict inside a compacted range is found at the range's last
seq, with digests as evidence, not at the changed line. Nothing may be an unverified duplicate:
every re-read here starts at byte 0 and reads whole ranges.

It runs twice: the subject in memory (many examples, the rules alone) and in Postgres (the pass,
the writer, compaction's real steps).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    precondition,
    rule,
    run_state_machine_as_test,
)

from memory_platform import MemoryPlatform, Platform, PostgresPlatform, shown_keys
from platform_ingest import Database
from platform_ingest.decisions.views import compacted_digest
from platform_ingest.operate.compact import _record_digest
from platform_journals import finished, hello, line, progress, spend, unit_done

_books = itertools.count(1)


def _run_id(number: int) -> str:
    return f"00000000-0000-4000-8000-{number:012d}"


class CompactionLife(RuleBasedStateMachine):
    """The subject platform is made by `make_subject`; a memory platform that never compacts is
    the model."""

    make_subject: Any = None
    crashes = False
    """Whether compactions can be cut short (the subject is Postgres)."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="compaction-life-"))
        self.book = self.root / f"book-{next(_books):07d}"
        self.book.mkdir()
        self.subject: Platform = self.make_subject()
        self.model = MemoryPlatform()
        self.lines: list[bytes] = []
        self.owner: list[int] = []
        """The stream number of each line."""
        self.streams = 0
        self.seq = 0
        self.spent = 0
        self.open = False
        self.compacted: set[str] = set()

    def teardown(self) -> None:
        close = getattr(self.subject, "close", None)
        if close is not None:
            close()
        shutil.rmtree(self.root)

    # --- the engine's journal -----------------------------------------------------------------

    def _add(self, raw: bytes) -> None:
        self.lines.append(raw)
        self.owner.append(self.streams)

    @rule()
    def new_stream(self) -> None:
        self.streams += 1
        self.seq, self.open = 1, True
        self._add(hello(_run_id(self.streams), book=self.book.name))

    @precondition(lambda self: self.open)
    @rule(kind=st.sampled_from(["spend", "unit", "progress", "heartbeat"]), value=st.integers(0, 9))
    def event(self, kind: str, value: int) -> None:
        self.seq += 1
        if kind == "spend":
            self.spent += value
            raw = spend(self.seq, self.spent)
        elif kind == "unit":
            raw = unit_done(self.seq, f"u-{value}", value)
        elif kind == "progress":
            raw = progress(self.seq, draft=(value, 9))
        else:
            raw = line(self.seq, "heartbeat", {"n": value})
        self._add(raw)

    @precondition(lambda self: self.open)
    @rule(code=st.sampled_from([0, 2, 4, 5]))
    def finish(self, code: int) -> None:
        self.seq += 1
        self._add(
            finished(self.seq, code, "x", stop="soft" if code == 5 else None, money=self.spent)
        )
        self.open = False

    @precondition(lambda self: self.open and self.seq > 1)
    @rule(data=st.data())
    def reproject(self, data: st.DataObject) -> None:
        """The engine writes its latest lines again (a crash between write and watermark)."""
        mine = [
            raw for raw, owner in zip(self.lines, self.owner, strict=True) if owner == self.streams
        ]
        count = data.draw(st.integers(1, min(3, len(mine))), label="lines again")
        for raw in mine[-count:]:
            self._add(raw)

    # --- the platforms --------------------------------------------------------------------------

    def _write(self, lines: list[bytes], *, new_file: bool) -> None:
        path = self.book / "events.jsonl"
        if new_file or not path.exists():
            temporary = self.book / "events.jsonl.tmp"
            temporary.write_bytes(b"".join(lines))
            temporary.replace(path)
        else:
            size = path.stat().st_size
            with open(path, "ab") as file:
                file.write(b"".join(lines)[size:])

    @rule(batch_lines_max=st.integers(1, 8))
    def sweep(self, batch_lines_max: int) -> None:
        self._write(self.lines, new_file=False)
        self._sweep_both(batch_lines_max)

    @precondition(lambda self: len(self.lines) > 1)
    @rule(data=st.data(), change=st.booleans())
    def rewrite(self, data: st.DataObject, change: bool) -> None:
        """The file replaced by a copy (a new inode), maybe with one line's bytes changed."""
        lines = list(self.lines)
        if change:
            index = data.draw(st.integers(0, len(lines) - 1), label="changed line")
            before = lines[index]
            lines[index] = (
                before.replace(b'.213Z"', b'.214Z"')
                if b'.213Z"' in before
                else (before.replace(b'.214Z"', b'.213Z"'))
            )
            self.lines = lines
        self._write(lines, new_file=True)
        self._sweep_both(data.draw(st.integers(1, 8), label="batch_lines_max"))

    def _sweep_both(self, batch_lines_max: int) -> None:
        report = self.subject.sweep(self.book, batch_lines_max=batch_lines_max)
        self.model.sweep(self.book, batch_lines_max=batch_lines_max)
        assert report.unverified_duplicates == 0
        self._compare()

    @precondition(lambda self: self.streams > 0)
    @rule(data=st.data())
    def compact(self, data: st.DataObject) -> None:
        run_id = _run_id(data.draw(st.integers(1, self.streams), label="stream"))
        if self._known(run_id) and self.subject.compact(self.book, run_id):
            self.compacted.add(run_id)
            event("a stream compacted")

    @precondition(lambda self: self.crashes and self.streams > 1)
    @rule(data=st.data(), rows_deleted=st.integers(0, 5))
    def compaction_cut_short(self, data: st.DataObject, rows_deleted: int) -> None:
        """A compaction that wrote its digest and deleted some rows, then crashed."""
        assert isinstance(self.subject, PostgresPlatform)
        quiet = self.subject.sql.execute(
            "SELECT attempt_id, last_seq, engine_run_id FROM attempts WHERE book_id = %s"
            " AND compacted_seq = 0 AND last_seq > 0 AND state IN ('finished', 'superseded')"
            " ORDER BY attempt_id",
            (self.book.name,),
        ).fetchall()
        if not quiet:
            return
        row = data.draw(st.sampled_from(quiet), label="attempt")
        attempt_id, last_seq, run_id = int(str(row[0])), int(str(row[1])), str(row[2])
        hashes = self.subject.sql.execute(
            "SELECT sha256 FROM line_hashes WHERE attempt_id = %s ORDER BY seq", (attempt_id,)
        ).fetchall()
        digest = compacted_digest(bytes(value) for (value,) in hashes)  # type: ignore[arg-type]
        why_not = _record_digest(
            self.subject.db, self.book.name, attempt_id, last_seq, digest, quiet_for_s=0
        )
        if why_not is None:
            self.compacted.add(run_id)
            event("a compaction cut short")
            self.subject.sql.execute(
                "DELETE FROM line_hashes WHERE attempt_id = %s AND seq <= %s",
                (attempt_id, rows_deleted),
            )

    def _known(self, run_id: str) -> bool:
        return any(
            attempt["engine_run_id"] == run_id
            for run in self.model.book_state(self.book)["runs"]
            for attempt in run["attempts"]
        )

    # --- the check ------------------------------------------------------------------------------

    def _compare(self) -> None:
        expected = self.model.book_state(self.book)
        found = shown_keys(self.subject.book_state(self.book), expected)
        for run_found, run_expected in zip(found["runs"], expected["runs"], strict=False):
            for attempt, model_attempt in zip(
                run_found["attempts"], run_expected["attempts"], strict=False
            ):
                if attempt["engine_run_id"] not in self.compacted:
                    continue
                error, model_error = attempt["error"], model_attempt["error"]
                if error is not None and model_error is not None:
                    # The documented difference: the evidence of a conflict in a compacted range.
                    assert error["kind"] == model_error["kind"] == "payload_conflict"
                    attempt["error"] = model_error
                    event("a conflict found in a compacted range")
        assert found == shown_keys(expected, expected)


class _OwnPostgres(PostgresPlatform):
    """A Postgres subject with connections of its own, closed with the example."""

    def __init__(self, dsn: str) -> None:
        super().__init__(Database(dsn), psycopg.connect(dsn, autocommit=True))

    def close(self) -> None:
        self.db.close()
        self.sql.close()


def test_compaction_in_memory_changes_nothing_but_the_evidence() -> None:
    CompactionLife.make_subject = staticmethod(MemoryPlatform)
    CompactionLife.crashes = False
    run_state_machine_as_test(
        CompactionLife,
        settings=settings(
            settings.default,
            stateful_step_count=30,
        ),
    )


@pytest.mark.postgres
def test_compaction_in_postgres_changes_nothing_but_the_evidence(fresh_dsn: str) -> None:
    """The same machine with Postgres as the subject, compactions cut short included."""

    CompactionLife.make_subject = staticmethod(lambda: _OwnPostgres(fresh_dsn))
    CompactionLife.crashes = True
    run_state_machine_as_test(
        CompactionLife,
        settings=settings(
            settings.default,
            max_examples=min(settings.default.max_examples, 25),
            stateful_step_count=25,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )

"""The apply transaction: a bounded batch of lines, their effects and the cursors, all or nothing.

A pass decides what each line does (`book_pass`) and gathers it in a `Batch`. `seal` takes a snapshot
of everything the batch will write; `commit_sealed` writes it in ONE Postgres transaction, in this
order:

1. new runs and new attempts are inserted (an attempt that already exists means another pass got
   there first: `CursorMoved`);
2. the touched attempt rows are locked (`FOR UPDATE`) and their `last_seq` re-checked against what
   the pass read — another worker may have moved them (`CursorMoved`);
3. the touched runs are locked and the batch's effects folded onto each row as it is NOW (greatest
   spend, latest progress, state moves in order); if the result is not what the pass expects,
   someone else changed the run (`CursorMoved`); else it is written;
4. one sha256 per applied line is written by binary COPY, and the units by another in a
   savepoint (a unit the run already has fails it: the units then go in by one statement that
   keeps each once, `ON CONFLICT DO NOTHING`); no round trip per line. A line hash already in
   Postgres can only be there because another pass applied the line: the attempts were locked
   and checked in step 2, so that unique violation is `CursorMoved` too;
5. each cursor moves by compare-and-set (`UPDATE ... WHERE attempt_id = %(attempt_id)s AND
   last_seq = %(expected_seq)s`, rowcount must be 1), and the book's scan hint moves
   (compare-and-set on its epoch, which `name` and `release` bump);
6. the projections installed are given the batch's events (`projection_step.project`), and a change
   notification per attempt moved is queued (`pg_notify('platform_ingest', ...)`: its run id,
   attempt id, state and last seq, no book id and no money). Postgres delivers notifications only
   when the transaction commits, so a listener never hears of an effect that was rolled back.

If any step fails nothing is committed: the pass reads its state again from Postgres and starts
over, and nothing is applied twice.

`Writer` runs `commit_sealed` on a thread of its own, one batch at a time, so that Postgres
writes batch N while the pass reads and decides batch N+1. A sealed batch holds copies, never the
pass's live objects' changing fields; the writer only fills in the ids it inserts.

The statements that write a view take named parameters, built here from the sealed values
(`advance_params`, `scan_params`, `run_params`, `problem_params`): the same keys serve a book's
statement and a group's, whose every key is a column of values (`columns`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Literal

import orjson

from ..decisions.batch import Batch
from ..decisions.problems import ProblemRecord
from ..decisions.runs import RunChanges, RunView, progress_json
from ..decisions.views import AttemptView, BookView, CursorAdvance, ScanAdvance
from ..errors import CursorMoved, DataRefused
from ..journal.hint import Hint
from ..journal.line import Line
from ..projections import Projection
from ..store import statements
from ..store.db import Database
from .projection_step import project

BATCH_LINES_MAX = 20_000
"""The most lines one apply transaction carries (docs/performance.md: larger batches than 5,000
lines apply faster; beyond 20,000 the gain is within the noise and the memory is not)."""
BATCH_BYTES_MAX = 8 * 1024 * 1024
"""The most bytes of lines one apply transaction carries (the pass counts the lines' sizes as it
decides them): a batch is sealed when it reaches either bound, so long lines make batches of fewer
lines and the memory a batch holds stays bounded whatever the lines' length."""

CommitStage = Literal["before", "locked"]
"""Where a commit is: "before" (no transaction yet) or "locked" (the cursors locked)."""
CommitHook = Callable[[CommitStage], None]
"""Called by the writer at each `CommitStage` of every batch."""


@dataclass(eq=False)
class SealedBatch:
    """A batch as it will be written: values copied when it was sealed."""

    new_runs: list[RunView]
    new_attempts: list[AttemptView]
    advances: list[CursorAdvance]
    runs: list[tuple[RunView, RunChanges, RunView]]
    """(the pass's run, the batch's changes, the run as the pass expects it after them)"""
    hash_attempts: list[AttemptView]
    hash_seqs: list[int]
    hash_values: list[bytes]
    units: list[tuple[AttemptView, str, int, int]]
    scan: ScanAdvance
    """Always written: its compare-and-set on the book's epoch makes a batch fail if `name` or
    `release` changed the book since the pass loaded it."""
    starts: list[tuple[str, Hint, str | None]] = field(default_factory=list)
    starts_reset: bool = False
    lines: int = 0
    last_line: tuple[str | None, int | None, int] | None = None
    applied_attempts: list[AttemptView] = field(default_factory=list)
    applied_lines: list[Line] = field(default_factory=list)

    @property
    def lines_applied(self) -> int:
        return len(self.hash_seqs)


def seal(batch: Batch, book: BookView) -> SealedBatch:
    """Take the snapshot of `batch` that `commit_sealed` writes; the pass may go on changing its
    attempts and runs after this."""
    for run, changes in batch.run_changes.values():
        if changes.progress is not None:
            changes.progress = run.progress = progress_snapshot(changes.progress)
    return SealedBatch(
        new_runs=batch.new_runs,
        new_attempts=batch.new_attempts,
        advances=[attempt.seal() for attempt in batch.touched.values()],
        runs=[(run, changes, run.copy()) for run, changes in batch.run_changes.values()],
        hash_attempts=batch.hash_attempts,
        hash_seqs=batch.hash_seqs,
        hash_values=batch.hash_values,
        units=batch.units,
        scan=book.seal_scan(),
        starts=batch.starts,
        starts_reset=batch.starts_reset,
        lines=batch.lines,
        last_line=batch.last_line,
        applied_attempts=batch.applied_attempts,
        applied_lines=batch.applied_lines,
    )


def progress_snapshot(phases: dict[str, Any]) -> dict[str, Any]:
    """What is kept of a progress snapshot: `done` and `total` of each phase."""
    return {
        name: {"done": counts["done"], "total": counts["total"]} for name, counts in phases.items()
    }


def _id(value: int | None) -> int:
    if value is None:
        raise CursorMoved("a row this batch needs was not inserted")
    return value


def commit_sealed(
    db: Database,
    book_id: str,
    sealed: SealedBatch,
    hook: CommitHook | None = None,
    projections: Sequence[Projection] = (),
) -> None:
    """Write `sealed` in one transaction (see the module docstring). Raises `CursorMoved` when
    another pass moved a cursor first; the caller then re-reads its state from Postgres."""
    if hook is not None:
        hook("before")
    with db.transaction():
        for run in sealed.new_runs:
            row = db.fetch_one(statements.RUN_INSERT, (book_id,))
            run.run_id = _id(None if row is None else row["run_id"])
        for attempt in sealed.new_attempts:
            row = db.fetch_one(
                statements.ATTEMPT_INSERT,
                (book_id, _id(attempt.run.run_id), attempt.engine_run_id, "pending"),
            )
            if row is None:
                raise CursorMoved(f"stream {attempt.engine_run_id} was registered by another pass")
            attempt.attempt_id = row["attempt_id"]
        new = {id(attempt) for attempt in sealed.new_attempts}
        expected = {
            _id(advance.attempt.attempt_id): advance.expected_seq
            for advance in sealed.advances
            if id(advance.attempt) not in new
        }
        if expected:
            for attempt_id, last_seq in db.fetch_tuples(
                statements.ATTEMPTS_LOCK, (sorted(expected),)
            ):
                if expected[attempt_id] != last_seq:
                    raise CursorMoved(f"attempt {attempt_id} is at seq {last_seq} in Postgres")
        if hook is not None:
            hook("locked")
        if sealed.runs:
            by_id = {_id(run.run_id): (changes, wanted) for run, changes, wanted in sealed.runs}
            for row in db.fetch_all(statements.RUNS_LOCK, (sorted(by_id),)):
                current = RunView.from_row(row)
                changes, wanted = by_id[row["run_id"]]
                changes.fold_onto(current)
                wanted.run_id = current.run_id
                if current != wanted:
                    raise CursorMoved(f"run {current.run_id} was changed by someone else")
                db.execute(statements.RUN_UPDATE, run_params(current))
        if sealed.hash_seqs:
            copy_line_hashes(db, sealed.hash_attempts, sealed.hash_seqs, sealed.hash_values)
        if sealed.units:
            write_units(db, sealed.units)
        for advance in sealed.advances:
            if db.execute(statements.ATTEMPT_ADVANCE, advance_params(advance)) != 1:
                raise CursorMoved(f"attempt {advance.attempt.attempt_id} moved under the pass")
        if db.execute(statements.BOOK_SCAN_ADVANCE, scan_params(sealed.scan)) != 1:
            raise CursorMoved("the book was named or released during the pass")
        write_after_cursors(db, book_id, sealed, projections)
        if sealed.advances:
            db.execute(statements.CHANGES_NOTIFY, (notifications(sealed),))


def write_after_cursors(
    db: Database, book_id: str, sealed: SealedBatch, projections: Sequence[Projection]
) -> None:
    """Steps 5 and 6 of one book's batch once its cursors moved: the foreign streams' starts,
    and the projections given the batch's events (a group writes each book's so)."""
    if sealed.starts_reset:
        db.execute(statements.STREAM_STARTS_FORGET, (book_id,))
    if sealed.starts:
        write_starts(db, book_id, sealed.starts)
    if projections and sealed.advances:
        project(
            db,
            book_id,
            projections,
            sealed.advances,
            applied_attempts=sealed.applied_attempts,
            applied_lines=sealed.applied_lines,
        )
        # A failure stands until the stream's cursor moves past it: a batch that only moved the
        # stream's hint (past repeated lines) leaves it, with its count of failures.
        moved = [advance.attempt.engine_run_id for advance in sealed.advances if advance.moved]
        if moved:
            db.execute(statements.PROJECTION_FAILURES_CLEAR, (book_id, moved))


def notifications(sealed: SealedBatch) -> list[str]:
    """One payload per attempt the batch moved: ids, state and cursor only (no book id, whose
    name may say whose it is, and no money: a listener needs to know what to re-read)."""
    return [
        orjson.dumps(
            {
                "run_id": advance.attempt.run.run_id,
                "attempt_id": advance.attempt.attempt_id,
                "state": advance.state,
                "last_seq": advance.last_seq,
            }
        ).decode()
        for advance in sealed.advances
    ]


def problem_params(problem: ProblemRecord | None) -> dict[str, Any]:
    """The four columns of a problem (`error_kind`, `error_seq`, `error_offset`,
    `error_detail`), all null when there is none."""
    if problem is None:
        return {"error_kind": None, "error_seq": None, "error_offset": None, "error_detail": None}
    return {
        "error_kind": problem.kind,
        "error_seq": problem.seq,
        "error_offset": problem.offset,
        "error_detail": problem.detail,
    }


def advance_params(advance: CursorAdvance) -> dict[str, Any]:
    """The parameters of `statements.ATTEMPT_ADVANCE` (a row of `ATTEMPTS_ADVANCE`)."""
    return {
        "state": advance.state,
        "last_seq": advance.last_seq,
        "last_line_sha256": advance.last_line_sha256,
        "hint_offset": advance.hint_offset,
        "hint_line_bytes": advance.hint_line_bytes,
        "hint_file": advance.hint_file,
        "stream_index": advance.stream_index,
        "stream_version": advance.stream_version,
        "chunker_version": advance.chunker_version,
        **problem_params(advance.error),
        "last_line_time": advance.last_line_time,
        "applied": advance.applied,
        "attempt_id": advance.attempt.attempt_id,
        "expected_seq": advance.expected_seq,
    }


def scan_params(scan: ScanAdvance) -> dict[str, Any]:
    """The parameters of `statements.BOOK_SCAN_ADVANCE` (a row of `BOOKS_SCAN_ADVANCE`)."""
    return {
        "scan_offset": scan.scan.offset,
        "scan_line_bytes": scan.scan.line_bytes,
        "scan_sha256": scan.scan.sha256,
        "scan_file": scan.scan.file,
        "scan_stream": scan.scan_stream,
        "scan_mode": scan.scan_mode,
        **problem_params(scan.error),
        "starts_from_zero": scan.starts_from_zero,
        "book_id": scan.book_id,
        "scan_epoch": scan.epoch,
    }


def run_params(run: RunView) -> dict[str, Any]:
    """The parameters of `statements.RUN_UPDATE` (a row of `RUNS_UPDATE`)."""
    return {
        "state": run.state,
        "reason": run.reason,
        "stop": run.stop,
        "refusal": run.refusal,
        "outcome": run.outcome,
        "exit_code": run.exit_code,
        "committed_micro_usd": run.committed_micro_usd,
        "shortfall_micro_usd": run.shortfall_micro_usd,
        "settled_micro_usd": run.settled_micro_usd,
        "progress": progress_json(run.progress),
        "run_id": run.run_id,
    }


def columns(rows: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """The parameters of a statement that takes each column as an array (`unnest`): the rows'
    values gathered by key."""
    return {key: [row[key] for row in rows] for key in rows[0]}


class Writer:
    """Commits sealed batches on one thread of its own, at most one in flight.

    `submit` first waits for the batch before (and raises its error, if it failed), so batches
    commit in order and the pass learns of a failure before it hands over the next one.
    """

    def __init__(
        self,
        db: Database,
        book_id: str,
        hook: CommitHook | None,
        projections: Sequence[Projection] = (),
    ) -> None:
        self._db = db
        self._book_id = book_id
        self._hook = hook
        self._projections = projections
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-writer")
        self._in_flight: Future[None] | None = None
        self._in_flight_lines = 0
        self._in_flight_sealed: SealedBatch | None = None
        self.lines_committed = 0

    @property
    def busy(self) -> bool:
        return self._in_flight is not None

    def submit(self, sealed: SealedBatch) -> None:
        self.drain()
        self._in_flight = self._executor.submit(
            commit_sealed, self._db, self._book_id, sealed, self._hook, self._projections
        )
        self._in_flight_lines = sealed.lines_applied
        self._in_flight_sealed = sealed

    def drain(self) -> None:
        """Wait for the batch in flight; raise its error if it failed. A `DataRefused` of a batch
        of one line names that line (`evidence`)."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            try:
                in_flight.result()
            except DataRefused as error:
                sealed = self._in_flight_sealed
                if sealed is not None and sealed.lines == 1 and sealed.last_line is not None:
                    raise error.of_line(sealed.last_line) from error.__cause__
                raise
            self.lines_committed += self._in_flight_lines

    def close(self) -> None:
        """Wait for the batch in flight without raising (the pass is already failing or done)."""
        if self._in_flight is not None:
            wait_for([self._in_flight])
            self._in_flight = None
        self._executor.shutdown(wait=True)


UNIQUE_VIOLATION = "23505"
_ATTEMPT_ID = attrgetter("attempt_id")
_RUN_ID = attrgetter("run.run_id")


def copy_line_hashes(
    db: Database, attempts: Sequence[AttemptView], seqs: Sequence[int], values: Sequence[bytes]
) -> None:
    """COPY one row a line applied. A key already there means another pass applied one of these
    lines (the cursor moved): `CursorMoved`, never `DataRefused`, which would quarantine the
    stream for a race. The failed COPY has aborted the transaction, which is rolled back."""
    with line_applied_elsewhere():
        db.copy(statements.LINE_HASHES_COPY, line_hash_columns(attempts, seqs, values))


def line_hash_columns(
    attempts: Sequence[AttemptView], seqs: Sequence[int], values: Sequence[bytes]
) -> tuple[list[int], Sequence[int], Sequence[bytes]]:
    """The columns of `line_hashes` rows (`LINE_HASHES_COPY`, `LINE_HASHES_INSERT`)."""
    attempt_ids = list(map(_ATTEMPT_ID, attempts))
    if None in attempt_ids:
        raise CursorMoved("a row this batch needs was not inserted")
    return attempt_ids, seqs, values


@contextmanager
def line_applied_elsewhere() -> Iterator[None]:
    """A line hash's key already in `line_hashes` (the only unique key a batch's writes can
    meet) is another pass's line: `CursorMoved`, not the book's `DataRefused`."""
    try:
        yield
    except DataRefused as error:
        if error.sqlstate != UNIQUE_VIOLATION:
            raise
        raise CursorMoved(f"a line of this batch was applied by another pass: {error}") from error


def unit_columns(units: Sequence[tuple[AttemptView, str, int, int]]) -> tuple[list[Any], ...]:
    """The columns of `run_units` rows (`UNITS_COPY`, `UNITS_INSERT`)."""
    attempts, names, indexes, seqs = map(list, zip(*units, strict=True))
    return (list(map(_RUN_ID, attempts)), names, indexes, list(map(_ATTEMPT_ID, attempts)), seqs)


def write_units(db: Database, units: Sequence[tuple[AttemptView, str, int, int]]) -> None:
    """Write the batch's units: by COPY, in a savepoint. A unit the run already has (an engine
    that did a unit again, a batch that holds one twice) fails the COPY on the run's key; the
    savepoint is rolled back and the units go in again by one statement that keeps each unit
    once (`ON CONFLICT DO NOTHING`), as they always did. Nothing else of the transaction is lost,
    and any other refusal is raised as it was."""
    columns = unit_columns(units)
    try:
        with db.transaction():  # nested: a savepoint
            db.copy(statements.UNITS_COPY, columns)
    except DataRefused as error:
        if error.sqlstate != UNIQUE_VIOLATION:
            raise
        db.execute(statements.UNITS_INSERT, columns)


def write_starts(db: Database, book_id: str, starts: list[tuple[str, Hint, str | None]]) -> None:
    """Record foreign streams' starts, one statement (the first start of a stream is kept)."""
    db.execute(
        statements.STREAM_STARTS_INSERT,
        {
            "book_id": book_id,
            "engine_run_id": [engine_run_id for engine_run_id, _, _ in starts],
            "hint_offset": [hint.offset for _, hint, _ in starts],
            "hint_line_bytes": [hint.line_bytes for _, hint, _ in starts],
            "hint_sha256": [hint.sha256 for _, hint, _ in starts],
            "hint_file": [hint.file for _, hint, _ in starts],
            "hint_stream": [section for _, _, section in starts],
        },
    )

"""The write of a group's transaction: the sealed batches of many books, each set of rows in one
statement, inside the transaction `group_pass.GroupPass` opened (its commit is the group's one).

A book's batch writes what `apply.commit_sealed` writes (new runs and attempts, the runs folded,
the line hashes, the units, each cursor by compare-and-set, the scan hint by compare-and-set on its
epoch, the projections, the change notifications), in the same lock order (attempts, then runs,
then books), but for every book of the group at once: a statement a kind of row, not a statement
a book, so that a group of 500 one-line books costs about what one book's batch of 500 lines does.

The rows are locked without waiting (`SKIP LOCKED`): a row another transaction holds (an operator's
remedy on the book, its run or an attempt) leaves its book out of the group, and the book is passed
again shortly, as when another worker's pass holds it. Anything else that goes wrong is raised, and
the caller rolls the whole group back: nothing of it is committed, and each book is tried again
(`group_pass` splits the group, down to the one book whose part fails).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..decisions.runs import RunChanges, RunView
from ..errors import CursorMoved
from ..projections import Projection
from ..store import statements
from ..store.db import Database
from .apply import (
    SealedBatch,
    advance_params,
    columns,
    copy_line_hashes,
    notifications,
    run_params,
    scan_params,
    write_after_cursors,
    write_units,
)


@dataclass(eq=False)
class Part:
    """One book's batch in a group."""

    book_id: str
    sealed: SealedBatch


def commit_group(
    db: Database, parts: Sequence[Part], projections: Sequence[Projection] = ()
) -> list[Part]:
    """Write `parts` in the caller's transaction; return those left out because another
    transaction holds one of their rows (nothing of theirs written). Raises `CursorMoved` when a
    row is not what a book's pass read (the caller rolls back)."""
    for part in parts:
        _insert_new(db, part)
    left_out: set[str] = set()
    _lock_attempts(db, parts, left_out)
    updates = _lock_runs(db, [part for part in parts if part.book_id not in left_out], left_out)
    kept_ids = [part.book_id for part in parts if part.book_id not in left_out]
    if kept_ids:
        rows = db.fetch_tuples(statements.BOOKS_ROW_LOCK_SKIP, (kept_ids,))
        locked = {book_id for (book_id,) in rows}
        left_out.update(book_id for book_id in kept_ids if book_id not in locked)
    for part in parts:
        if part.book_id in left_out and (part.sealed.new_runs or part.sealed.new_attempts):
            # Its new rows are written already: the group is rolled back rather than leave them.
            raise CursorMoved(f"book {part.book_id}'s rows are held by another transaction")
    kept = [part for part in parts if part.book_id not in left_out]
    if kept:
        runs = [params for book_id, params in updates if book_id not in left_out]
        if runs:
            db.execute(statements.RUNS_UPDATE, columns(runs))
        _write(db, kept, projections)
    return [part for part in parts if part.book_id in left_out]


def _lock_attempts(db: Database, parts: Sequence[Part], left_out: set[str]) -> None:
    """Lock the attempts the batches advance (those already in Postgres): an attempt locked by
    another transaction leaves its book out; one whose cursor is not where the pass read it is
    `CursorMoved`."""
    expected: dict[int, tuple[int, str]] = {}
    for part in parts:
        new = {id(attempt) for attempt in part.sealed.new_attempts}
        for advance in part.sealed.advances:
            attempt = advance.attempt
            if id(attempt) not in new and attempt.attempt_id is not None:
                expected[attempt.attempt_id] = (advance.expected_seq, part.book_id)
    if not expected:
        return
    found = dict(db.fetch_tuples(statements.ATTEMPTS_LOCK_SKIP, (sorted(expected),)))
    for attempt_id, (seq, book_id) in expected.items():
        last_seq = found.get(attempt_id)
        if last_seq is None:
            left_out.add(book_id)
        elif last_seq != seq:
            raise CursorMoved(f"attempt {attempt_id} is at seq {last_seq} in Postgres")


def _lock_runs(
    db: Database, parts: Sequence[Part], left_out: set[str]
) -> list[tuple[str, dict[str, Any]]]:
    """Lock the runs the batches change and fold each batch's changes onto the row as it is now;
    a run locked by another transaction leaves its book out, one changed by someone else since
    the pass read it is `CursorMoved`. Returns (book, `RUN_UPDATE` values) of each run."""
    wanted: dict[int, tuple[str, RunChanges, RunView]] = {}
    for part in parts:
        for run, changes, expected in part.sealed.runs:
            if run.run_id is None:
                raise CursorMoved("a row this batch needs was not inserted")
            wanted[run.run_id] = (part.book_id, changes, expected)
    if not wanted:
        return []
    found = {
        row["run_id"]: row for row in db.fetch_all(statements.RUNS_LOCK_SKIP, (sorted(wanted),))
    }
    updates = []
    for run_id, (book_id, changes, expected) in wanted.items():
        row = found.get(run_id)
        if row is None:
            left_out.add(book_id)
            continue
        current = RunView.from_row(row)
        changes.fold_onto(current)
        expected.run_id = current.run_id
        if current != expected:
            raise CursorMoved(f"run {current.run_id} was changed by someone else")
        updates.append((book_id, run_params(current)))
    return updates


def _write(db: Database, parts: Sequence[Part], projections: Sequence[Projection]) -> None:
    """Everything else of the kept parts, after their rows are locked and their runs written."""
    hashes = [part.sealed for part in parts if part.sealed.hash_seqs]
    if hashes:
        copy_line_hashes(
            db,
            [attempt for sealed in hashes for attempt in sealed.hash_attempts],
            [seq for sealed in hashes for seq in sealed.hash_seqs],
            [value for sealed in hashes for value in sealed.hash_values],
        )
    units = [unit for part in parts for unit in part.sealed.units]
    if units:
        write_units(db, units)
    advances = [advance_params(advance) for part in parts for advance in part.sealed.advances]
    if advances and db.execute(statements.ATTEMPTS_ADVANCE, columns(advances)) != len(advances):
        raise CursorMoved("an attempt of the group moved under its pass")
    scans = [scan_params(part.sealed.scan) for part in parts]
    if db.execute(statements.BOOKS_SCAN_ADVANCE, columns(scans)) != len(scans):
        raise CursorMoved("a book of the group was named or released during its pass")
    for part in parts:
        write_after_cursors(db, part.book_id, part.sealed, projections)
    payloads = [payload for part in parts for payload in notifications(part.sealed)]
    if payloads:
        db.execute(statements.CHANGES_NOTIFY, (payloads,))


def _insert_new(db: Database, part: Part) -> None:
    """The book's new runs and attempts (a new stream), one row a statement: rare beside the
    lines, and each needs the id Postgres gives it."""
    sealed = part.sealed
    for run in sealed.new_runs:
        row = db.fetch_one(statements.RUN_INSERT, (part.book_id,))
        if row is None:
            raise CursorMoved("a run of the group was not inserted")
        run.run_id = row["run_id"]
    for attempt in sealed.new_attempts:
        if attempt.run.run_id is None:
            raise CursorMoved("a row this batch needs was not inserted")
        row = db.fetch_one(
            statements.ATTEMPT_INSERT,
            (part.book_id, attempt.run.run_id, attempt.engine_run_id, "pending"),
        )
        if row is None:
            raise CursorMoved(f"stream {attempt.engine_run_id} was registered by another pass")
        attempt.attempt_id = row["attempt_id"]

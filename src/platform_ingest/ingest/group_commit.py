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
from ..store.db import Database, Params
from ..store.statement import Statement
from .apply import (
    SealedBatch,
    advance_params,
    columns,
    copy_line_hashes,
    line_applied_elsewhere,
    line_hash_columns,
    notifications,
    run_params,
    scan_params,
    unit_columns,
    write_after_cursors,
    write_units,
)

ROWS_SENT_WITH_WRITES_MAX = 256
"""A group's line hashes, and its units, up to this many rows go with its other writes in one
round trip (statements of arrays); more go by COPY, whose encoding costs less a row than an
array's, in round trips of their own (four for the units, in a savepoint: `apply.write_units`)."""


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
    left_out, run_updates = _lock_rows(db, parts)
    for part in parts:
        if part.book_id in left_out and (part.sealed.new_runs or part.sealed.new_attempts):
            # Its new rows are written already: the group is rolled back rather than leave them.
            raise CursorMoved(f"book {part.book_id}'s rows are held by another transaction")
    kept = [part for part in parts if part.book_id not in left_out]
    if kept:
        runs = [params for book_id, params in run_updates if book_id not in left_out]
        _write(db, kept, runs, projections)
    return [part for part in parts if part.book_id in left_out]


def _lock_rows(
    db: Database, parts: Sequence[Part]
) -> tuple[set[str], list[tuple[str, dict[str, Any]]]]:
    """Lock, in one round trip and in the order of a batch (attempts, runs, books), the rows the
    batches change, without waiting: a row another transaction holds (an operator's remedy on
    the book, its run or an attempt) leaves its book out. An attempt whose cursor is not where
    the pass read it, or a run changed by someone else since, is `CursorMoved`. Returns the books
    left out, and (book, `RUN_UPDATE` values) of each run of the others, its batch's changes
    folded onto the row as locked."""
    expected: dict[int, tuple[int, str]] = {}
    wanted: dict[int, tuple[str, RunChanges, RunView]] = {}
    for part in parts:
        new = {id(attempt) for attempt in part.sealed.new_attempts}
        for advance in part.sealed.advances:
            attempt = advance.attempt
            if id(attempt) not in new and attempt.attempt_id is not None:
                expected[attempt.attempt_id] = (advance.expected_seq, part.book_id)
        for run, changes, expected_run in part.sealed.runs:
            if run.run_id is None:
                raise CursorMoved("a row this batch needs was not inserted")
            wanted[run.run_id] = (part.book_id, changes, expected_run)
    queries: list[tuple[Statement, Params]] = []
    if expected:
        queries.append((statements.ATTEMPTS_LOCK_SKIP, (sorted(expected),)))
    if wanted:
        queries.append((statements.RUNS_LOCK_SKIP, (sorted(wanted),)))
    queries.append((statements.BOOKS_ROW_LOCK_SKIP, ([part.book_id for part in parts],)))
    results = db.fetch_together(queries)
    attempt_rows = results.pop(0) if expected else []
    run_rows = results.pop(0) if wanted else []
    (book_rows,) = results
    left_out: set[str] = set()
    found_attempts = {row["attempt_id"]: row["last_seq"] for row in attempt_rows}
    for attempt_id, (seq, book_id) in expected.items():
        last_seq = found_attempts.get(attempt_id)
        if last_seq is None:
            left_out.add(book_id)
        elif last_seq != seq:
            raise CursorMoved(f"attempt {attempt_id} is at seq {last_seq} in Postgres")
    found_runs = {row["run_id"]: row for row in run_rows}
    updates = []
    for run_id, (book_id, changes, expected_run) in wanted.items():
        if book_id in left_out:
            continue  # an attempt of its book is held: nothing of the book is written
        row = found_runs.get(run_id)
        if row is None:
            left_out.add(book_id)
            continue
        current = RunView.from_row(row)
        changes.fold_onto(current)
        expected_run.run_id = current.run_id
        if current != expected_run:
            raise CursorMoved(f"run {current.run_id} was changed by someone else")
        updates.append((book_id, run_params(current)))
    locked = {row["book_id"] for row in book_rows}
    left_out.update(part.book_id for part in parts if part.book_id not in locked)
    return left_out, updates


def _write(
    db: Database,
    parts: Sequence[Part],
    runs: list[dict[str, Any]],
    projections: Sequence[Projection],
) -> None:
    """Everything else of the kept parts, after their rows are locked, in one round trip: the
    line hashes and units (by COPY beforehand, in round trips of their own, when there are more
    than `ROWS_SENT_WITH_WRITES_MAX`), the runs, the cursors, the scan hints, the notifications;
    the counts of the cursors and hints checked after it; then the projections."""
    writes: list[tuple[Statement, Params]] = []
    hashes = [part.sealed for part in parts if part.sealed.hash_seqs]
    if hashes:
        hash_attempts = [attempt for sealed in hashes for attempt in sealed.hash_attempts]
        seqs = [seq for sealed in hashes for seq in sealed.hash_seqs]
        values = [value for sealed in hashes for value in sealed.hash_values]
        if len(seqs) > ROWS_SENT_WITH_WRITES_MAX:
            copy_line_hashes(db, hash_attempts, seqs, values)
        else:
            columns_of_hashes = line_hash_columns(hash_attempts, seqs, values)
            writes.append((statements.LINE_HASHES_INSERT, columns_of_hashes))
    units = [unit for part in parts for unit in part.sealed.units]
    if len(units) > ROWS_SENT_WITH_WRITES_MAX:
        write_units(db, units)
    elif units:
        # `ON CONFLICT DO NOTHING`: a unit the run already has is kept once, as `write_units` does.
        writes.append((statements.UNITS_INSERT, unit_columns(units)))
    advances = [advance_params(advance) for part in parts for advance in part.sealed.advances]
    scans = [scan_params(part.sealed.scan) for part in parts]
    payloads = [payload for part in parts for payload in notifications(part.sealed)]
    if runs:
        writes.append((statements.RUNS_UPDATE, columns(runs)))
    if advances:
        writes.append((statements.ATTEMPTS_ADVANCE, columns(advances)))
    writes.append((statements.BOOKS_SCAN_ADVANCE, columns(scans)))
    if payloads:
        writes.append((statements.CHANGES_NOTIFY, (payloads,)))
    with line_applied_elsewhere():
        written = db.execute_together(writes)
    counts = dict(zip((statement.name for statement, _ in writes), written, strict=True))
    if advances and counts[statements.ATTEMPTS_ADVANCE.name] != len(advances):
        raise CursorMoved("an attempt of the group moved under its pass")
    if counts[statements.BOOKS_SCAN_ADVANCE.name] != len(scans):
        raise CursorMoved("a book of the group was named or released during its pass")
    for part in parts:
        write_after_cursors(db, part.book_id, part.sealed, projections)


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

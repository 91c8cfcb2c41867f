"""Pruning: runs past a second, longer retention are deleted by an explicit, audited command.

`prune` never runs by itself. A run is prunable when it has ended (completed, failed, refused),
has not changed for the retention, is not its book's latest run (a new stream in auto mode joins
the latest run), and none of its attempts is pending, active or parked or has moved within the
retention. Each run goes in one short transaction, under the book's advisory lock (a book a pass
is reading is left for the next call):

- one `pruned_streams` row per attempt stays, for good: the journal may still hold the stream's
  lines, and a re-read must never apply them again (the rules skip a pruned stream; `name` refuses
  one);
- one `operator_actions` row records the run as it was (state, money, its own part of the book's
  ledger and its count of units, attempts) and who pruned it: every survivor's own part is
  computed with the pruned runs' ledgers among the runs before it (`spent`), so a prune changes
  no survivor's `spent_micro_usd`, and the sum over the book's runs, pruned ones included, stays
  the book's ledger;
- the run, its attempts and their skips are deleted, and the book's scan epoch is bumped.

The run's units and its attempts' line hashes (already compacted, most often) are then deleted a
bounded transaction at a time (`cleanup_pending`); a crash in between leaves rows that nothing
reads, and the next `prune` deletes them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from .._defaults import RUNS_PER_CALL_MAX
from .._plain import counted
from ..decisions.runs import RunView
from ..decisions.spent import spent_of_book
from ..decisions.states import ENDED_RUN_STATES
from ..decisions.views import AWAITING_STATES
from ..ingest.books import book_lock_key, book_ref
from ..store import statements
from ..store.db import Database
from .compact import DELETE_SEQS, Progress
from .remedies import default_operator, record_action

logger = logging.getLogger("platform_ingest")

UNITS_PER_DELETE = 10_000
"""How many of a pruned run's units one transaction deletes."""


@dataclass
class PruneReport:
    """What one `prune` call did (or, with `dry_run`, would do)."""

    dry_run: bool
    pruned: list[dict[str, Any]] = field(default_factory=list)
    """one entry per run: book_id, run_id, state, its streams"""
    skipped: dict[int, str] = field(default_factory=dict)
    """run id -> why it was left"""
    cleaned: int = 0
    """pruned attempts whose hashes and units are all deleted now"""

    def as_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "pruned": self.pruned,
            "skipped": {str(key): value for key, value in self.skipped.items()},
            "cleaned": self.cleaned,
        }


def prune_runs(
    db: Database,
    *,
    older_than_s: float,
    dry_run: bool = False,
    limit: int = RUNS_PER_CALL_MAX,
    by: str | None = None,
    reason: str = "",
    progress: Progress | None = None,
) -> PruneReport:
    """Prune up to `limit` runs unchanged for `older_than_s` seconds; finish earlier cleanups.
    `progress` is told of each run before it is taken on."""
    if older_than_s < 0:
        raise ValueError("older_than_s must not be negative")
    report = PruneReport(dry_run=dry_run)
    candidates = db.fetch_all(statements.RUNS_TO_PRUNE, (older_than_s, older_than_s, limit))
    for number, candidate in enumerate(candidates, start=1):
        if progress is not None:
            progress(number, len(candidates))
        run_id, book_id = int(candidate["run_id"]), str(candidate["book_id"])
        if dry_run:
            report.pruned.append({"book_id": book_id, "run_id": run_id})
            continue
        pruned = _prune_run(
            db,
            book_id,
            run_id,
            older_than_s=older_than_s,
            by=by or default_operator(),
            reason=reason or f"unchanged for {older_than_s:g} s",
        )
        if isinstance(pruned, str):
            report.skipped[run_id] = pruned
        else:
            report.pruned.append(pruned)
    if not dry_run:
        report.cleaned = _clean_up(db)
    return report


def _prune_run(
    db: Database, book_id: str, run_id: int, *, older_than_s: float, by: str, reason: str
) -> dict[str, Any] | str:
    """One run, in one transaction; returns what was pruned, or why it was not."""
    with db.transaction():
        locked = db.fetch_one(statements.BOOK_LOCK_FOR_TRANSACTION, (book_lock_key(book_id),))
        if locked is None or not locked["pg_try_advisory_xact_lock"]:
            return "a pass is reading the book"
        row = db.fetch_one(statements.RUN_FOR_PRUNING, (run_id,))
        if row is None:
            return "it is gone"
        run = RunView.from_row(row)
        if run.state not in ENDED_RUN_STATES:
            return f"it is {run.state}"
        attempts = db.fetch_all(statements.ATTEMPTS_OF_RUN_LOCK, (older_than_s, run_id))
        for attempt in attempts:
            if attempt["state"] in AWAITING_STATES or not attempt["quiet"]:
                return f"stream {attempt['engine_run_id']} is {attempt['state']} or moved lately"
        streams = [
            {
                "engine_run_id": attempt["engine_run_id"],
                "state": attempt["state"],
                "last_seq": attempt["last_seq"],
            }
            for attempt in attempts
        ]
        for attempt in attempts:
            db.execute(
                statements.PRUNED_STREAM_INSERT,
                (
                    book_id,
                    attempt["engine_run_id"],
                    run_id,
                    attempt["attempt_id"],
                    attempt["last_seq"],
                ),
            )
        evidence = {
            "run_id": run_id,
            "state": run.state,
            "reason": run.reason,
            "outcome": run.outcome,
            "exit_code": run.exit_code,
            "committed_micro_usd": run.committed_micro_usd,
            "settled_micro_usd": run.settled_micro_usd,
            "spent_micro_usd": _own_part(db, book_id, run_id),
            "units": _units_of(db, run_id),
            "streams": streams,
        }
        record_action(db, book_id, None, "prune", by=by, reason=reason, evidence=evidence)
        db.execute(statements.LINE_SKIPS_OF_RUN_DELETE, (run_id,))
        db.execute(statements.ATTEMPTS_OF_RUN_DELETE, (run_id,))
        db.execute(statements.RUN_DELETE, (run_id,))
        db.execute(statements.BOOK_EPOCH_BUMP, (book_id,))
    logger.warning(
        "book %s: run %d pruned (%s, %s) by %s",
        book_ref(book_id),
        run_id,
        run.state,
        counted(len(streams), "stream"),
        by,
    )
    return {"book_id": book_id, "run_id": run_id, "state": run.state, "streams": streams}


def _own_part(db: Database, book_id: str, run_id: int) -> int:
    """The run's own part of the book's ledger (`spent`), as `show` gives it now: kept in the
    audit record, it completes the sum over the book's runs once the run is gone."""
    runs = db.fetch_all(statements.RUNS_OF_BOOKS, ([book_id],))
    actions = db.fetch_all(statements.ACTIONS_OF_BOOKS, ([book_id],))
    return spent_of_book(runs, actions)[run_id]


def _units_of(db: Database, run_id: int) -> int:
    row = db.fetch_one(statements.RUN_UNITS_COUNT, (run_id,))
    return 0 if row is None else int(row["units"])


def _clean_up(db: Database) -> int:
    """Delete what pruned runs left: their attempts' line hashes and their units."""
    cleaned = 0
    for attempt_id, run_id, last_seq in db.fetch_tuples(
        statements.PRUNE_CLEANUP_PENDING, (RUNS_PER_CALL_MAX,)
    ):
        for low in range(0, last_seq, DELETE_SEQS):
            with db.transaction():
                db.execute(
                    statements.LINE_HASHES_DELETE_RANGE,
                    (attempt_id, low, min(low + DELETE_SEQS, last_seq)),
                )
        while True:
            with db.transaction():
                deleted = db.execute(
                    statements.RUN_UNITS_DELETE_SOME, (run_id, run_id, UNITS_PER_DELETE)
                )
            if deleted < UNITS_PER_DELETE:
                break
        with db.transaction():
            db.execute(statements.PRUNE_CLEANUP_DONE, (attempt_id,))
        cleaned += 1
    return cleaned

"""Compaction: a quiet attempt's line hashes become one digest, so storage stays bounded.

An attempt is quiet when it is finished, superseded, exited, disowned or abandoned, nothing of it
has moved (no line applied, no state or hint changed: `changed_at`) for the quiet period, it was
never compacted, and no attempt of its book is parked. Its `line_hashes` rows (one per seq, about
116 bytes each with their index) become `compacted_sha256`, the sha256 of their hashes in seq order, with
`compacted_seq`: O(1) bytes, whatever the attempt's length. A pass that reads the range again
judges it by that digest (`decisions/replay.py`; the guarantee is in docs/platform/cursor.md).

Each attempt is compacted in bounded steps, safe with any number of workers:

1. its hashes are read, a page at a time, outside any transaction, and the digest built;
2. one short transaction takes the book's advisory lock (skipped if a pass holds it), re-checks
   the attempt (still quiet, still at that seq, still not compacted), writes the digest with
   `compaction_pending`, and bumps the book's scan epoch (a pass that loaded the attempt before
   cannot commit what it decided from the old rows: its compare-and-set fails, it starts over);
3. the rows are deleted, `DELETE_SEQS` a transaction, then `compaction_pending` is cleared.

A crash anywhere loses nothing: before 2 nothing changed; after 2 the rows left are never read
again (the digest answers for their seqs) and the next compaction run finishes deleting them.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from .._defaults import ATTEMPTS_PER_RUN_MAX
from .._defaults import QUIET_FOR_S_DEFAULT as QUIET_FOR_S_DEFAULT  # noqa: PLC0414 - the worker's default too
from ..ingest.books import book_lock_key
from ..store import statements
from ..store.db import Database

logger = logging.getLogger("platform_ingest")

READ_PAGE_SEQS = 50_000
"""How many hashes one read of step 1 fetches."""
DELETE_SEQS = 10_000
"""How many seqs' rows one deleting transaction of step 3 removes."""
QUIET_STATES = frozenset({"finished", "superseded", "exited", "disowned", "abandoned"})
"""States in which an attempt can be quiet (the list `statements.QUIET_ATTEMPTS` filters on)."""


@dataclass
class CompactionReport:
    """What one `compact_quiet` call did."""

    compacted: list[int] = field(default_factory=list)
    """attempt ids whose hashes became a digest"""
    finished_deleting: list[int] = field(default_factory=list)
    """attempt ids whose compacted rows are all gone now (a crashed run's left too)"""
    skipped: dict[int, str] = field(default_factory=dict)
    """attempt id -> why it was left as it is this time"""
    rows_deleted: int = 0

    def as_json(self) -> dict[str, object]:
        return {
            "compacted": self.compacted,
            "finished_deleting": self.finished_deleting,
            "skipped": {str(key): value for key, value in self.skipped.items()},
            "rows_deleted": self.rows_deleted,
        }


Progress = Callable[[int, int], None]
"""Told `(n, of)` before the command takes on the n-th of `of` items (for a person's view)."""


def _never() -> bool:
    return False


def compact_quiet(
    db: Database,
    *,
    quiet_for_s: float = QUIET_FOR_S_DEFAULT,
    limit: int = ATTEMPTS_PER_RUN_MAX,
    stopping: Callable[[], bool] = _never,
    progress: Progress | None = None,
) -> CompactionReport:
    """Compact up to `limit` quiet attempts, and finish any compaction a crash left half done.
    `stopping` is asked between bounded steps: when it says so, the call returns early (what is
    left is finished by a later call). `progress` is told of each attempt before it is taken on."""
    if quiet_for_s < 0:
        raise ValueError("quiet_for_s must not be negative")
    report = CompactionReport()
    pending = [row[0] for row in db.fetch_tuples(statements.COMPACTIONS_PENDING, (limit,))]
    quiet = [row[0] for row in db.fetch_tuples(statements.QUIET_ATTEMPTS, (quiet_for_s, limit))]
    attempt_ids = [*pending, *quiet]
    for number, attempt_id in enumerate(attempt_ids, start=1):
        if stopping():
            break
        if progress is not None:
            progress(number, len(attempt_ids))
        compact_attempt(db, attempt_id, quiet_for_s=quiet_for_s, report=report, stopping=stopping)
    return report


def compact_attempt(
    db: Database,
    attempt_id: int,
    *,
    quiet_for_s: float,
    report: CompactionReport,
    stopping: Callable[[], bool] = _never,
) -> None:
    """Compact one attempt if it is (still) quiet; finish deleting its rows if it is pending."""
    row = db.fetch_one(statements.ATTEMPT_FOR_COMPACTION, (quiet_for_s, attempt_id))
    if row is None:
        return
    if not row["compaction_pending"]:
        last_seq = int(row["last_seq"])
        digest = _digest(db, attempt_id, last_seq, stopping)
        if stopping():
            return
        if digest is None:
            report.skipped[attempt_id] = "its line hashes are not one per seq 1..last_seq"
            return
        why_not = _record_digest(
            db, row["book_id"], attempt_id, last_seq, digest, quiet_for_s=quiet_for_s
        )
        if why_not is not None:
            report.skipped[attempt_id] = why_not
            return
        report.compacted.append(attempt_id)
        logger.info(
            "attempt %d (stream %s): %d line hashes compacted into one digest",
            attempt_id,
            row["engine_run_id"],
            last_seq,
        )
    _delete_compacted_rows(db, attempt_id, report, stopping)


def _digest(
    db: Database, attempt_id: int, last_seq: int, stopping: Callable[[], bool]
) -> bytes | None:
    """The digest of seqs 1..last_seq, read a page at a time; None when a seq has no row (or
    when `stopping` says so)."""
    digest = hashlib.sha256()  # as `compacted_digest` builds it, without holding the hashes
    seq = 0
    while seq < last_seq and not stopping():
        page = db.fetch_tuples(
            statements.LINE_HASHES_PAGE, (attempt_id, seq, last_seq, READ_PAGE_SEQS)
        )
        if not page:
            return None
        for row_seq, sha256 in page:
            seq += 1
            if row_seq != seq:
                return None
            digest.update(sha256)
    if seq < last_seq:  # stopped before the end
        return None
    return digest.digest()


def _record_digest(
    db: Database, book_id: str, attempt_id: int, last_seq: int, digest: bytes, *, quiet_for_s: float
) -> str | None:
    """Step 2: the digest replaces the rows, if the attempt is still what step 1 read; returns
    why not, else None."""
    with db.transaction():
        locked = db.fetch_one(statements.BOOK_LOCK_FOR_TRANSACTION, (book_lock_key(book_id),))
        if locked is None or not locked["pg_try_advisory_xact_lock"]:
            return "a pass is reading the book"
        row = db.fetch_one(statements.ATTEMPT_FOR_COMPACTION, (quiet_for_s, attempt_id))
        if row is None or row["last_seq"] != last_seq or row["compacted_seq"] != 0:
            return "it moved since its hashes were read"
        if not row["quiet"] or row["state"] not in QUIET_STATES:
            return "it is not quiet any more"
        if row["book_parked"]:
            return "an attempt of its book is parked"
        if db.execute(statements.ATTEMPT_COMPACTED, (last_seq, digest, attempt_id, last_seq)) != 1:
            return "it moved since its hashes were read"
        db.execute(statements.BOOK_EPOCH_BUMP, (book_id,))
    return None


def _delete_compacted_rows(
    db: Database, attempt_id: int, report: CompactionReport, stopping: Callable[[], bool]
) -> None:
    """Step 3: the compacted rows go, a bounded transaction at a time."""
    row = db.fetch_one(statements.ATTEMPT_FOR_COMPACTION, (0.0, attempt_id))
    if row is None or not row["compaction_pending"]:
        return
    through = int(row["compacted_seq"])
    for low in range(0, through, DELETE_SEQS):
        if stopping():
            return
        with db.transaction():
            report.rows_deleted += db.execute(
                statements.LINE_HASHES_DELETE_RANGE,
                (attempt_id, low, min(low + DELETE_SEQS, through)),
            )
    with db.transaction():
        db.execute(statements.ATTEMPT_COMPACTION_DONE, (attempt_id,))
    report.finished_deleting.append(attempt_id)

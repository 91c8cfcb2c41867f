"""The projections' part of a batch's apply transaction, and their registration.

`project` runs last in `apply.commit_sealed`, after every compare-and-set of the platform has held
(so a batch that loses a race never runs a projection's work for nothing):

1. the projections' registry rows are locked for share (a rebuild that changes a version locks
   them for update: a batch never straddles a version change) and the tracking rows of the batch's
   attempts for update;
2. a projection is *in step* with an attempt when its tracking `last_seq` equals the attempt's
   cursor before the batch (a new attempt, or one at seq 0, starts in step at 0). Only then is
   it given the attempt's events past that seq and its tracking moved to the attempt's new cursor
   (seqs the batch passed with no event, an operator's skipped line, move it too). A projection
   not in step, or registered at another version, is left behind: `platform-ingest rebuild`
   catches it up, from the journal, and the live batch that follows finds it in step;
3. Postgres's own count of rows this transaction wrote to each platform table is the same after
   the projections as before them, and the transaction is still open: else
   `ProjectionStatementRefused`.

Anything a projection raises becomes `ProjectionFailed` (the batch is rolled back by the caller's
transaction), naming the attempt and the last seq it was given.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..decisions.views import AttemptView, CursorAdvance
from ..errors import (
    DatabaseTimeout,
    DatabaseUnavailable,
    ProjectionFailed,
    ProjectionInvalid,
    ProjectionSetupNotPermitted,
    ProjectionStatementRefused,
)
from ..journal.line import Line
from ..projections import Event, Projection, ProjectionSession
from ..store import statements
from ..store.db import Database, classify
from ..store.driver import DriverError
from ..store.migrations import PLATFORM_TABLES

logger = logging.getLogger("platform_ingest")

_new_event = tuple.__new__
"""Builds an `Event` without the named tuple's own `__new__` (a Python function): one per line."""


def install(db: Database, projections: Sequence[Projection]) -> None:
    """Register each projection (at its version, if new) and run its `setup`, each in a
    transaction of its own. A projection registered at another version is logged: live batches
    leave it behind until `platform-ingest rebuild` brings it to this version.

    A role that may not run a setup (SQLSTATE 42501: the worker role, which creates no table) goes
    on when the projection is registered at this version: its setup ran then, by the owner role's
    `migrate --projection` (docs/platform/workers.md, "Roles"). Otherwise
    `ProjectionSetupNotPermitted` names that command."""
    for projection in projections:
        try:
            with db.transaction():
                row = db.fetch_one(
                    statements.PROJECTION_REGISTER, (projection.name, projection.version)
                )
                registered = None if row is None else row["version"]
                _setup(db, projection)
        except _SetupNotPermitted as refused:
            _set_up_by_the_owner(db, projection, refused)
            continue
        if registered != projection.version:
            logger.warning(
                "projection %s is at version %s in Postgres and %d here: it is given no events "
                "until `platform-ingest rebuild` brings it to this version",
                projection.name,
                registered,
                projection.version,
            )


class _SetupNotPermitted(Exception):
    """A projection's setup was refused for want of privileges (its transaction rolled back)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _setup(db: Database, projection: Projection) -> None:
    try:
        projection.setup(ProjectionSession(db.connection, projection.name))
    except ProjectionFailed:
        raise
    except Exception as error:
        if getattr(error, "sqlstate", None) == _INSUFFICIENT_PRIVILEGE:
            raise _SetupNotPermitted(_first_line(error)) from error
        raise ProjectionInvalid(
            f"projection {projection.name}: setup() failed: {type(error).__name__}: "
            f"{_first_line(error)}"
        ) from error


def _set_up_by_the_owner(db: Database, projection: Projection, refused: _SetupNotPermitted) -> None:
    """The role may not run the setup: fine when the owner's `migrate --projection` registered the
    projection at this version (its tables are there, as its setup made them); else refused."""
    row = db.fetch_one(statements.PROJECTION_VERSION_OF, (projection.name,))
    if row is not None and row["version"] == projection.version:
        logger.info(
            "projection %s: this role may not run its setup (%s); the owner role set it up at "
            "version %d (`platform-ingest migrate --projection`), and its tables are used as "
            "they are",
            projection.name,
            refused.detail,
            projection.version,
        )
        return
    done = "has not set it up" if row is None else f"set it up only at version {row['version']}"
    raise ProjectionSetupNotPermitted(
        f"projection {projection.name} version {projection.version}: role "
        f"{db.connection.info.user} may not run its setup() ({refused.detail}), and the owner "
        f"role {done}: run `platform-ingest migrate --projection SPEC` with this "
        "projection's SPEC as the owner role (the role that ran `migrate`), then start this "
        "command again"
    ) from refused


_INSUFFICIENT_PRIVILEGE = "42501"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:500] if text else ""


def _platform_writes(db: Database) -> dict[str, int]:
    rows = db.fetch_tuples(statements.PLATFORM_WRITES_OF_TRANSACTION, (sorted(PLATFORM_TABLES),))
    return {name: writes for name, writes in rows}


def project(
    db: Database,
    book_id: str,
    projections: Sequence[Projection],
    advances: Sequence[CursorAdvance],
    *,
    applied_attempts: Sequence[AttemptView],
    applied_lines: Sequence[Line],
) -> None:
    """Step 4 of the module docstring's order, inside the caller's transaction."""
    names = [projection.name for projection in projections]
    attempts = {
        advance.attempt.attempt_id: (advance.attempt, advance.last_seq, advance.expected_seq)
        for advance in advances
    }
    ids = sorted(attempt_id for attempt_id in attempts if attempt_id is not None)
    if not ids:
        return
    versions = dict(db.fetch_tuples(statements.PROJECTIONS_LOCK, (names,)))
    tracking = {
        (name, attempt_id): last_seq
        for name, attempt_id, last_seq in db.fetch_tuples(
            statements.PROJECTION_TRACKING_LOCK, (names, ids)
        )
    }
    events: dict[int, list[Event]] = {attempt_id: [] for attempt_id in ids}
    for attempt, line in zip(applied_attempts, applied_lines, strict=True):
        run_id, attempt_id = attempt.run.run_id, attempt.attempt_id
        assert run_id is not None and attempt_id is not None  # inserted before this step
        events[attempt_id].append(
            _new_event(
                Event,
                (
                    book_id,
                    run_id,
                    attempt_id,
                    attempt.engine_run_id,
                    line.seq,
                    line.type,
                    line.time,
                    line.data,
                ),
            )
        )
    before = _platform_writes(db)
    # The tracking rows to write (`PROJECTION_TRACKING_WRITE`), a column a key.
    moved: dict[str, list[Any]] = {"projection": [], "attempt_id": [], "last_seq": []}
    for projection in projections:
        if versions.get(projection.name) != projection.version:
            continue  # registered at another version: the rebuild's to bring along
        session = ProjectionSession(db.connection, projection.name)
        for attempt_id in ids:
            attempt, new_last_seq, expected = attempts[attempt_id]
            done = tracking.get((projection.name, attempt_id))
            if done is None and expected == 0:
                done = 0
            if done != expected or new_last_seq <= expected:
                continue  # behind (added late, or a rebuild still catching up), or nothing new
            todo = [event for event in events[attempt_id] if event.seq > expected]
            if todo:
                _apply_one(projection, session, todo, attempt_id, attempt.engine_run_id)
                _check_platform_untouched(db, before, projection, todo[-1])
            moved["projection"].append(projection.name)
            moved["attempt_id"].append(attempt_id)
            moved["last_seq"].append(new_last_seq)
    if moved["projection"]:
        db.execute(statements.PROJECTION_TRACKING_WRITE, moved)


def apply_verified(
    db: Database,
    projection: Projection,
    events: Sequence[Event],
    attempt_id: int,
    engine_run_id: str,
) -> None:
    """Give `events` (one attempt's, in seq order) to `projection` inside the caller's
    transaction, with the same checks as a live batch (`rebuild` uses it)."""
    before = _platform_writes(db)
    session = ProjectionSession(db.connection, projection.name)
    _apply_one(projection, session, events, attempt_id, engine_run_id)
    _check_platform_untouched(db, before, projection, events[-1])


def _check_platform_untouched(
    db: Database, before: dict[str, int], projection: Projection, last: Event
) -> None:
    """The transaction is still open, and Postgres counts no row written to a platform table
    since `before` (only the projection ran since): else `ProjectionStatementRefused`."""
    why = None
    if not db.in_transaction:
        why = "the apply transaction was ended"
    else:
        after = _platform_writes(db)
        touched = sorted(name for name, writes in after.items() if writes != before.get(name, 0))
        if touched:
            why = f"it wrote to the platform's table {touched[0]!r}"
    if why is not None:
        raise ProjectionStatementRefused(
            projection.name,
            why,
            attempt_id=last.attempt_id,
            engine_run_id=last.engine_run_id,
            seq=last.seq,
        )


def _apply_one(
    projection: Projection,
    session: ProjectionSession,
    events: Sequence[Event],
    attempt_id: int,
    engine_run_id: str,
) -> None:
    seq = events[-1].seq
    try:
        projection.apply(session, events)
    except DriverError as error:
        kind = classify(error)
        if kind in (DatabaseUnavailable, DatabaseTimeout):
            # Postgres away or a bounded wait ran out: the worker's trouble, not the projection's.
            raise kind(f"{kind.__name__} in projection {projection.name}: {error}") from error
        raise ProjectionFailed(
            projection.name,
            f"{type(error).__name__} (SQLSTATE {error.sqlstate or 'client'}): {_first_line(error)}",
            attempt_id=attempt_id,
            engine_run_id=engine_run_id,
            seq=seq,
        ) from error
    except ProjectionFailed as error:
        raise error.of_events(
            attempt_id=attempt_id, engine_run_id=engine_run_id, seq=seq
        ) from error.__cause__
    except Exception as error:  # whatever a projection raises stops only its book
        raise ProjectionFailed(
            projection.name,
            f"{type(error).__name__}: {_first_line(error)}",
            attempt_id=attempt_id,
            engine_run_id=engine_run_id,
            seq=seq,
        ) from error


def projections_behind(
    db: Database, book_ids: Sequence[str], projections: Sequence[str]
) -> dict[str, int]:
    """Per projection, the applied lines of these books it has not applied (0 included): a
    projection added after its books were applied stays that many behind, since a pass applies
    only new lines, until `platform-ingest rebuild --projection NAME` replays them."""
    behind = dict.fromkeys(projections, 0)
    if not projections:
        return behind
    for first in range(0, len(book_ids), BEHIND_PAGE_BOOKS):
        page = list(book_ids[first : first + BEHIND_PAGE_BOOKS])
        for row in db.fetch_all(statements.PROJECTION_LAG_OF_BOOKS, (page, list(projections))):
            behind[row["projection"]] += row["behind"]
    return behind


BEHIND_PAGE_BOOKS = 500
"""`projections_behind` measures books in pages of this many (one query a page)."""

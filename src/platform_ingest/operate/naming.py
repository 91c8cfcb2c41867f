"""What an operator (or the platform's launcher) does to a book: `name` a stream, `release` an
attempt after looking at it.

`name` of a stream that is named already is a no-op (the launcher may say it twice); of a stream
that is disowned or abandoned it is refused, naming the command that can do what was asked
(`undisown`), so that it never says "already named" while the stream's lines are not read.

Both bump the book's scan epoch, so a pass that started before them cannot move the scan hint past
what they changed (its compare-and-set on the epoch fails and it starts over). `name` keeps the
book's reading position: it moves the scan back to where the named stream begins only if a pass
already went past it (named mode keeps every foreign stream's start; `books.scan_back_to_stream`).
`release` resets it, so the next pass reads the journal from byte 0: the released stream's lines
are read again, and a stream whose `finished` was applied is seen finished again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..decisions.problems import problem_json
from ..decisions.runs import RunView
from ..decisions.views import RELEASABLE_STATES, AttemptState
from ..errors import ConfigError, NotFound
from ..ingest.books import (
    book_ref,
    register_book,
    remedied_book,
    require_stream_id,
    scan_back_to_stream,
)
from ..store import statements
from ..store.db import Database
from .remedies import Action, default_operator, record_action

logger = logging.getLogger("platform_ingest")


@dataclass(frozen=True)
class Named:
    """The outcome of `name`: the attempt and its run; `created` is False when it existed."""

    book_id: str
    engine_run_id: str
    run_id: int
    created: bool


def name_stream(db: Database, book_dir: str, engine_run_id: str, *, new_run: bool = False) -> Named:
    """Name a stream for the book's current run (or, with `new_run`, for a new run)."""
    require_stream_id(engine_run_id)
    book = register_book(db, book_dir)
    with db.transaction():
        if db.fetch_one(statements.PRUNED_STREAM_EXISTS, (book.book_id, engine_run_id)) is not None:
            raise ConfigError(
                f"stream {engine_run_id} was this book's and its run was pruned; its lines are "
                "never applied again"
            )
        existing = db.fetch_one(statements.ATTEMPT_BY_STREAM_LOCK, (book.book_id, engine_run_id))
        if existing is not None and existing["state"] == "disowned":
            raise ConfigError(
                f"stream {engine_run_id} is disowned on this book: take that back first with "
                f"`platform-ingest undisown BOOK_DIR {engine_run_id} --reason ...`, then name it"
            )
        if existing is not None and existing["state"] == "abandoned":
            raise ConfigError(
                f"stream {engine_run_id} was abandoned on this book: it is never read again; "
                "a resume of the run is a new stream (name that one)"
            )
        if existing is not None:
            if new_run:
                raise ConfigError(
                    f"stream {engine_run_id} is already named for this book (run "
                    f"{existing['run_id']}); it cannot start a new run"
                )
            return Named(book.book_id, engine_run_id, existing["run_id"], created=False)
        row = db.fetch_one(statements.RUN_CURRENT_LOCK, (book.book_id,))
        current = None if row is None else RunView.from_row(row)
        if current is not None and current.ended and not new_run:
            raise ConfigError(
                f"the book's current run {current.run_id} has ended ({current.state}); "
                "pass --new-run to start a new run for this stream"
            )
        if current is None or new_run:
            created_run = db.fetch_one(statements.RUN_INSERT, (book.book_id,))
            if created_run is None:
                raise NotFound("the new run was not created")
            run_id = int(created_run["run_id"])
        else:
            run_id = current.run_id or 0
        db.execute(statements.ATTEMPT_INSERT, (book.book_id, run_id, engine_run_id, "pending"))
        scan_back_to_stream(db, book, engine_run_id)
    logger.info(
        "book %s: stream %s named for run %d", book_ref(book.book_id), engine_run_id, run_id
    )
    return Named(book.book_id, engine_run_id, run_id, created=True)


def release_attempt(
    db: Database,
    book_dir: str,
    engine_run_id: str,
    *,
    by: str | None = None,
    reason: str = "",
) -> AttemptState:
    """`release_stream`; the attempt's new state."""
    return _release(db, book_dir, engine_run_id, by=by, reason=reason)[1]


def release_stream(
    db: Database,
    book_dir: str,
    engine_run_id: str,
    *,
    by: str | None = None,
    reason: str = "",
) -> Action:
    """Lift a quarantine, a stall or a refusal after an operator looked; what was done, the
    attempt's new state among it. Audited (`operator_actions`) like every remedy.

    The attempt goes on from its cursor: the next pass reads from byte 0 and, if the offending line
    is still there, records it again.
    """
    return _release(db, book_dir, engine_run_id, by=by, reason=reason)[0]


def _release(
    db: Database, book_dir: str, engine_run_id: str, *, by: str | None, reason: str
) -> tuple[Action, AttemptState]:
    book = register_book(db, book_dir)
    with db.transaction():
        row = db.fetch_one(statements.ATTEMPT_BY_STREAM_LOCK, (book.book_id, engine_run_id))
        if row is None:
            raise NotFound(f"no attempt of stream {engine_run_id} on this book")
        state: AttemptState = row["state"]
        if state not in RELEASABLE_STATES:
            raise ConfigError(
                f"stream {engine_run_id} is {state}; only a quarantined, stalled or refused "
                "attempt can be released"
            )
        new_state: AttemptState = "active" if row["last_seq"] > 0 else "pending"
        db.execute(statements.ATTEMPT_RELEASE, (new_state, row["attempt_id"], state))
        evidence = {"attempt_state": state, "error": problem_json(row)}
        action_id = record_action(
            db,
            book.book_id,
            engine_run_id,
            "release",
            by=by or default_operator(),
            reason=reason or "released after a look",
            evidence=evidence,
        )
        db.execute(statements.BOOK_SCAN_RESET, (book.book_id,))
    logger.warning(
        "book %s: stream %s released from %s by an operator",
        book_ref(book.book_id),
        engine_run_id,
        state,
    )
    return Action(action_id, book.book_id, engine_run_id, new_state, evidence), new_state


def release_book_error(
    db: Database, book_dir: str, *, by: str | None = None, reason: str = ""
) -> Action:
    """End the book's own error (a line of no stream: before any hello, or one that cannot be
    read after a finished stream), audited like every remedy. Nothing is read again: the next
    pass starts where the last one ended, past the line; one that reads the line again (from
    byte 0, after a hint failed) records it again while it is in the journal."""
    book = remedied_book(db, book_dir)
    with db.transaction():
        row = db.fetch_one(statements.BOOK_SELECT_LOCK, (book.book_id,))
        error = None if row is None else problem_json(row)
        if row is None or error is None:
            raise ConfigError(
                f"book {book.book_id} has no error of its own (a line of no stream) to release;"
                " a stream's problem is released with ENGINE_RUN_ID"
            )
        db.execute(statements.BOOK_ERROR_CLEAR, (book.book_id,))
        evidence = {"error": error}
        action_id = record_action(
            db,
            book.book_id,
            None,
            "release",
            by=by or default_operator(),
            reason=reason or "released after a look",
            evidence=evidence,
        )
    logger.warning("book %s: its own error released by an operator", book_ref(book.book_id))
    return Action(action_id, book.book_id, None, None, evidence)

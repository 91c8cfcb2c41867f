"""`forget`: a book registered by mistake leaves the platform, audited.

A directory that is no book (a root swept as one before `sweep` refused it, a directory given by
a slip of the hand) stays registered: `show` lists it and a worker passes it. `forget` deletes its
row and the rows that hang on it (its problems, its audit, its recorded stream starts, a
projection's failure), in one transaction under the book's advisory lock (a pass reading it makes
`forget` refuse, to be tried again), and writes one `forgotten_books` row: who, why, when, and what
was deleted, the book's earlier audit included.

The rule: only a book nothing of which was ever applied, named or pruned is forgotten. A book with
a run, an attempt or a pruned stream is refused: its runs carry money and units, and a pruned
stream's record is what keeps its lines from being applied again. A directory still directly under
a worker's root is registered again by that worker's next survey: move it out of the root first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..decisions.problems import problem_json
from ..decisions.views import BookView
from ..errors import ConfigError, NotFound
from ..ingest.books import book_lock_key, book_ref, find_book
from ..store import statements
from ..store.db import Database
from ..store.driver import jsonb
from .remedies import default_operator

logger = logging.getLogger("platform_ingest")


@dataclass(frozen=True)
class Forgotten:
    """What `forget` did: its record's id (in `forgotten_books`), the book, and what was deleted."""

    action_id: int
    book_id: str
    path: str
    at: str
    evidence: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {
            "action_id": self.action_id,
            "action": "forget",
            "book_id": self.book_id,
            "path": self.path,
            "at": self.at,
            "evidence": self.evidence,
        }


def _registered(db: Database, book_dir: str) -> BookView:
    """The book `book_dir` names: its directory's registered path, or its book id (a directory
    may be gone, or never have been a book). Never registers one."""
    try:
        return find_book(db, book_dir)
    except (NotFound, ValueError, OSError):
        row = db.fetch_one(statements.BOOK_SELECT, (book_dir,))
        if row is None:
            raise NotFound(
                f"{book_dir} is neither the registered path nor the id of a book"
            ) from None
        return BookView.from_row(row)


def forget_book(db: Database, book_dir: str, *, reason: str, by: str | None = None) -> Forgotten:
    """Delete a book registered by mistake, nothing of which was applied, named or pruned."""
    by = by or default_operator()
    if not reason.strip() or not by.strip():
        raise ConfigError("forget needs --reason (and --by): the record keeps why and who")
    book = _registered(db, book_dir)
    with db.transaction():
        locked = db.fetch_one(statements.BOOK_LOCK_FOR_TRANSACTION, (book_lock_key(book.book_id),))
        if locked is None or not locked["pg_try_advisory_xact_lock"]:
            raise ConfigError(f"a pass is reading book {book.book_id}; try again")
        row = db.fetch_one(statements.BOOK_SELECT_LOCK, (book.book_id,))
        if row is None:
            raise NotFound(f"book {book.book_id} is no longer registered")
        held = db.fetch_one(statements.BOOK_HOLDINGS, (book.book_id,) * 3)
        if held is not None and (held["runs"] or held["attempts"] or held["pruned_streams"]):
            raise ConfigError(
                f"book {book.book_id} holds {held['runs']} runs, {held['attempts']} attempts and "
                f"{held['pruned_streams']} pruned streams: only a book nothing of which was "
                "applied, named or pruned can be forgotten (its runs carry money and units)"
            )
        actions = db.fetch_all(statements.BOOK_FORGET_ACTIONS, (book.book_id,))
        problems = db.fetch_all(statements.BOOK_FORGET_PROBLEMS, (book.book_id,))
        db.execute(statements.BOOK_FORGET_STARTS, (book.book_id,))
        db.execute(statements.BOOK_FORGET_FAILURES, (book.book_id,))
        db.execute(statements.BOOK_FORGET, (book.book_id,))
        evidence = {
            "error": problem_json(row),
            "problems": [{"kind": p["kind"], "detail": p["detail"]} for p in problems],
            "actions": [
                {
                    "action_id": a["action_id"],
                    "action": a["action"],
                    "engine_run_id": a["engine_run_id"],
                    "by": a["by_whom"],
                    "reason": a["reason"],
                    "at": a["at"].isoformat(),
                    "evidence": a["evidence"],
                }
                for a in sorted(actions, key=lambda a: int(a["action_id"]))
            ],
        }
        record = db.fetch_one(
            statements.FORGOTTEN_INSERT, (book.book_id, book.path, by, reason, jsonb(evidence))
        )
        if record is None:
            raise NotFound("the record of the forgotten book was not written")
    logger.warning("book %s: forgotten by an operator", book_ref(book.book_id))
    return Forgotten(
        int(record["action_id"]), book.book_id, book.path, record["at"].isoformat(), evidence
    )

"""Which books under the roots are this worker's, and a book claimed when it becomes so.

Every `membership_interval_s` the worker looks up the live workers of its roots (`membership`):
each book is worked by one of them, by rendezvous hashing. A book that becomes this worker's (the
worker starts, a new directory, a worker left) has its lag measured and is due for a pass
(`claim`) only when it needs one (lines past its cursor, a journal a pass refuses, a problem
recorded), so a restart over books all applied passes none; one that becomes another's is no
longer due.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .._logs import FieldsLogger
from .._plain import counted
from ..operate.lag import lag_of_books
from ..store import statements
from ..store.db import Database, Row
from .membership import group, live_workers, member_id, owner_of
from .metrics import Metrics
from .registration import Book, BookRegistry, Registered
from .schedule import Schedule

LAG_LINES_BYTES_MAX = 16 * 1024 * 1024
"""A claim and a survey count lines past a cursor in at most this many bytes per book (then a
lower bound)."""


class Ownership:
    """The worker's group of live workers, and which of the registry's books are its own."""

    def __init__(
        self,
        db: Database,
        registry: BookRegistry,
        *,
        worker_id: str,
        digest: str,
        membership_interval_s: float,
        schedule: Schedule,
        metrics: Metrics,
        log: FieldsLogger,
    ) -> None:
        self.db = db
        self.registry = registry
        self.worker_id = worker_id
        self.member = member_id(worker_id)
        """The id this worker is announced and hashed by (`membership.member_id`)."""
        self.digest = digest
        self.membership_interval_s = membership_interval_s
        self.schedule = schedule
        self.metrics = metrics
        self.log = log
        self.group: tuple[str, ...] = ()
        """The member ids of the live workers of these roots; empty until `announce`: a worker
        that is still registering its books works none of them."""
        self.announced = False
        self.next_membership = 0.0
        self._counted = False

    def announce(self, application_name: str) -> None:
        """The worker joins its group: its session takes the name the others look for. Called
        once every book under the roots is registered, so the share the others drop at their
        next membership check is measured and passed here within moments, not after a start-up
        of many seconds over a large root."""
        self.db.execute(statements.APPLICATION_NAME_SET, (application_name,))
        self.db.application_name = application_name  # a reconnect announces it at once
        self.announced = True
        self.next_membership = 0.0

    def joined(self) -> bool:
        """Whether the worker has announced itself and the last membership check counted it."""
        return self.announced and self.member in self.group

    def refresh(self) -> None:
        """Look up the live workers; the books that changed hands are claimed or dropped."""
        self.next_membership = time.monotonic() + self.membership_interval_s
        members = group(live_workers(self.db), self.worker_id, self.digest)
        if members == self.group and self._counted:
            return
        changed = members != self.group
        self.group = members
        books = self.registry.books
        self.claim([book for book in books.values() if self._assign(book)])
        self.count_books()
        if changed:
            owned = len(self.registry.owned())
            self.log.info(
                "worker %s works %d of %s, with %s on these roots",
                self.worker_id,
                owned,
                counted(len(books), "book"),
                counted(len(members), "worker"),
                fields={"books_owned": owned, "workers": len(members)},
            )

    def take(self, registered: Registered) -> None:
        """Books registered just now: those that are this worker's are claimed."""
        claimed = [book for book, _ in registered if self._assign(book)]
        self.claim(claimed, {row["book_id"]: row for _, row in registered})

    def _assign(self, book: Book) -> bool:
        """Whether the book is this worker's now; True when it just became so (a claim)."""
        if not book.book_id:
            return False
        owned = bool(self.group) and owner_of(book.book_id, self.group) == self.member
        claimed = owned and not book.owned
        if not owned:
            self.schedule.drop(book.path)
            book.behind_since = None
        book.owned = owned
        return claimed

    def claim(self, books: Sequence[Book], rows: dict[str, Row] | None = None) -> None:
        """Books that just became this worker's: their lag is measured, in pages, and only those
        that need a pass are due (`claim`): complete lines past the cursor (a book named or
        released meanwhile shows some, as `name` and `release` move its scan back), something at
        the journal's path that a pass refuses, or a problem recorded on the book (a pass checks
        it again). A book whose journal is all applied, or does not exist yet, is not passed."""
        if not books:
            return
        ids = [book.book_id for book in books if book.book_id]
        known = rows or {}
        missing = sorted(book_id for book_id in ids if book_id not in known)
        page_rows = [known[book_id] for book_id in ids if book_id in known]
        page_rows.extend(self.registry.rows(missing))
        lags = lag_of_books(self.db, page_rows, lines_bytes_max=LAG_LINES_BYTES_MAX)
        by_id = {book.book_id: book for book in books}
        now = time.monotonic()
        for row in page_rows:
            book = by_id[row["book_id"]]
            lag = lags[row["book_id"]]
            book.epoch = row["scan_epoch"]
            if (
                lag.lines_unread > 0
                or lag.journal_refused
                or lag.lines_awaited
                or row["problem_kinds"]
                or row["error_kind"] is not None
            ):
                self.schedule.mark(book.path, "claim", now)

    def count_books(self) -> None:
        """The gauges of the group and of the books owned and shared."""
        owned = len(self.registry.owned())
        self.metrics.workers.set(len(self.group))
        self.metrics.books.labels("owned").set(owned)
        self.metrics.books.labels("shared").set(len(self.registry.books) - owned)
        self._counted = True

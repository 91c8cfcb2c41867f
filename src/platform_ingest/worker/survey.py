"""The survey, the worker's safety net, and the worker's books as its loop drives them.

Every `survey_interval_s` the roots are listed again, the refused directories tried again, and the
lag of each of the worker's books measured against the real head of its journal (`lag`), a page
of books at a time so that the passes of books notified meanwhile run between pages. A book with
complete lines past its cursor (a change notification that never came) or whose scan epoch moved
(`name`, `release`) is due for a pass (`survey`). At the survey's end the lag metrics and the
gauges of what is true now of the books are published (`survey_gauges`). A stream waiting to be
named is logged once (WARNING) the first time a survey finds it.

`Survey` is what the loop holds: the books under the roots and their registration
(`registration`), which of them are this worker's (`ownership`), and the survey's clock. The
books found due go into the worker's `Schedule`; the passes are the loop's (`loop`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from .._logs import FieldsLogger
from .._plain import counted, plain
from ..ingest.projection_step import projections_behind
from ..operate.lag import Lag, lag_of_books
from ..store.db import Database
from .metrics import Metrics
from .ownership import LAG_LINES_BYTES_MAX, Ownership
from .registration import BOOKS_BY_ID_PAGE, Book, BookRegistry
from .schedule import Schedule
from .survey_gauges import Tally

__all__ = ["BOOKS_BY_ID_PAGE", "Book", "Survey"]


class Survey:
    """The worker's books (`registry`), its group of workers and its own books (`ownership`),
    and the survey's clock."""

    def __init__(
        self,
        db: Database,
        roots: Sequence[Path],
        *,
        worker_id: str,
        digest: str,
        membership_interval_s: float,
        survey_interval_s: float,
        schedule: Schedule,
        metrics: Metrics,
        log: FieldsLogger,
        stopping: Callable[[], bool],
        projections: Sequence[str] = (),
    ) -> None:
        self.db = db
        self.registry = BookRegistry(db, roots, schedule=schedule, log=log, stopping=stopping)
        self.ownership = Ownership(
            db,
            self.registry,
            worker_id=worker_id,
            digest=digest,
            membership_interval_s=membership_interval_s,
            schedule=schedule,
            metrics=metrics,
            log=log,
        )
        self.projections = sorted(projections)
        """The names of the projections this worker applies (their lines behind are measured)."""
        self.roots = list(roots)
        self.survey_interval_s = survey_interval_s
        self.schedule = schedule
        self.metrics = metrics
        self.log = log
        self.books = self.registry.books
        """The book directories under the roots, by path."""
        self.next_survey = 0.0
        self._pages: list[list[str]] = []
        self._tally: Tally | None = None
        self._unnamed_told: set[tuple[str, str]] = set()
        """(book id, engine_run_id) of the streams waiting to be named already logged."""
        self._behind_told: set[str] = set()
        """The projections whose lines behind were already logged."""

    # --- the books, as the loop meets them ------------------------------------------------------

    @property
    def rescan_roots(self) -> set[Path]:
        """The roots to list again at the next `rescan`."""
        return self.registry.rescan_roots

    @rescan_roots.setter
    def rescan_roots(self, roots: set[Path]) -> None:
        self.registry.rescan_roots = roots

    def rescan(self) -> None:
        """List the roots to rescan; the new books are registered, and this worker's claimed."""
        self.ownership.take(self.registry.rescan())

    def forget(self, book: Book) -> None:
        self.registry.forget(book)

    def registration_lost(self, book: Book) -> None:
        self.registry.registration_lost(book)

    def book_by_id(self, book_id: str) -> Book | None:
        return self.registry.book_by_id(book_id)

    def owned(self) -> list[Book]:
        return self.registry.owned()

    # --- the worker's share, as the loop meets it -----------------------------------------------

    @property
    def member(self) -> str:
        return self.ownership.member

    @property
    def announced(self) -> bool:
        return self.ownership.announced

    @property
    def next_membership(self) -> float:
        return self.ownership.next_membership

    @next_membership.setter
    def next_membership(self, when: float) -> None:
        self.ownership.next_membership = when

    def announce(self, application_name: str) -> None:
        self.ownership.announce(application_name)

    def joined(self) -> bool:
        return self.ownership.joined()

    def refresh_membership(self) -> None:
        self.ownership.refresh()

    # --- the survey (safety net and lag) --------------------------------------------------------

    @property
    def surveying(self) -> bool:
        """A survey has pages of books left to measure (`step`)."""
        return self._tally is not None

    def run(self) -> None:
        """Begin a survey: the roots listed, refused books tried again, and the worker's books put
        in pages whose lag `step` measures one at a time, so that the passes of books notified
        meanwhile run between pages instead of waiting for the whole survey."""
        self.next_survey = time.monotonic() + self.survey_interval_s
        # Plans cached while the tables were small are made again for the tables as they are:
        # else the survey's pages scan every attempt until the first ANALYZE (`discard_plans`).
        self.db.discard_plans()
        self.rescan_roots = set(self.roots)
        self.rescan()
        self.ownership.take(self.registry.register_new(again=True))
        self.ownership.count_books()
        ids = sorted(book.book_id for book in self.owned() if book.book_id)
        self._pages = [
            ids[first : first + BOOKS_BY_ID_PAGE] for first in range(0, len(ids), BOOKS_BY_ID_PAGE)
        ]
        self._tally = Tally(started=time.monotonic())
        if not self._pages:
            self._finish()

    def step(self) -> None:
        """Measure the lag of one page of the survey's books: each book behind or whose epoch
        moved is marked due. After the last page, the lag metrics are published."""
        tally = self._tally
        if tally is None or not self._pages:
            return
        ids = self._pages.pop(0)
        rows = self.registry.rows(ids)
        lags = lag_of_books(self.db, rows, lines_bytes_max=LAG_LINES_BYTES_MAX)
        owned_ids = [
            row["book_id"]
            for row in rows
            if (book := self.book_by_id(row["book_id"])) is not None and book.owned
        ]
        if self.projections and owned_ids:
            tally.projection_behind.update(projections_behind(self.db, owned_ids, self.projections))
        now = time.monotonic()
        wall_now = datetime.now(UTC)  # the holds' ages, once a page
        for book_id in sorted(set(ids) - {row["book_id"] for row in rows}):
            lost = self.book_by_id(book_id)
            if lost is not None and lost.owned:
                self.registration_lost(lost)
        for row in rows:
            book = self.book_by_id(row["book_id"])
            if book is None or not book.owned:
                continue  # gone, or another worker's since the survey began
            lag = lags[row["book_id"]]
            tally.count_truths(row, lag, wall_now)
            self._tell_unnamed(book, lag)
            tally.books += 1
            tally.lag_bytes += lag.bytes
            tally.lag_lines += lag.lines
            tally.lag_bytes_max = max(tally.lag_bytes_max, lag.bytes)
            moved = book.epoch is not None and book.epoch != row["scan_epoch"]
            book.epoch = row["scan_epoch"]
            if lag.lines > 0:
                tally.behind += 1
                if book.behind_since is None:
                    book.behind_since = now
                age = lag.age_s if lag.age_s is not None else now - book.behind_since
                tally.age_max = max(tally.age_max, age)
            else:
                book.behind_since = None
            if lag.lines_unread > 0 or moved or lag.lines_awaited:
                self.schedule.mark(book.path, "survey", now)
        if not self._pages:
            self._finish()

    def _tell_unnamed(self, book: Book, lag: Lag) -> None:
        """Log each stream waiting to be named once (WARNING): nothing of it is applied, and
        nothing else says so."""
        for hold in lag.holds:
            key = (book.book_id or "", hold.engine_run_id)
            if hold.kind != "unnamed" or key in self._unnamed_told:
                continue
            self._unnamed_told.add(key)
            self.log.warning(
                "book %s: stream %s is waiting to be named (its hello at byte %d); nothing of it"
                " is applied: run `platform-ingest name BOOK_DIR %s`, or work the book with --auto",
                book.ref,
                plain(hold.engine_run_id),
                hold.offset,
                plain(hold.engine_run_id),
            )

    def _finish(self) -> None:
        tally, self._tally = self._tally, None
        assert tally is not None
        tally.publish(self.metrics, self.projections)
        for projection in self.projections:
            behind = tally.projection_behind[projection]
            if behind and projection not in self._behind_told:
                self._behind_told.add(projection)
                self.log.warning(
                    "projection %s is %s behind the books' cursors (a pass applies only new"
                    " lines): run `platform-ingest rebuild --projection %s`",
                    projection,
                    counted(behind, "line"),
                    projection,
                )
        self.metrics.last_survey.set(time.time())
        self.log.debug(
            "survey of %s: %d behind, %s past the cursors, %.3f s",
            counted(tally.books, "book"),
            tally.behind,
            counted(tally.lag_lines, "line"),
            time.monotonic() - tally.started,
        )

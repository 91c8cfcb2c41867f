"""What the worker knows of the books under its roots, and how it keeps that true.

- The books: each directory directly under a root, registered in Postgres on first sight (a
  directory refused is skipped with one WARNING naming it by an opaque reference).
- Membership (every `membership_interval_s`): which live workers share these roots
  (`membership`), hence which books are this worker's; a book that becomes its own (the
  worker starts, a new directory, a worker left) has its lag measured and is due for a pass
  (`claim`) only when it needs one (lines past its cursor, a journal a pass refuses, a problem
  recorded), so a restart over books all applied passes none; one that becomes another's is no
  longer due.
- The survey (every `survey_interval_s`), the safety net: the roots listed again, the refused
  directories tried again, and the lag of each of the worker's books measured against the real
  head of its journal (`lag`). A book with complete lines past its cursor (a change notification
  that never came) or whose scan epoch moved (`name`, `release`) is due for a pass (`survey`).
  The lag metrics come from here, and the gauges of what is true now of the worker's books
  (attempts by state, books by problem, lines held and the oldest hold of each kind, each
  projection's lines behind): rebuilt from Postgres by every survey, the first at start, so that
  a restarted worker shows a quarantine as soon as its first survey ends. A stream waiting to be
  named is logged once (WARNING) the first time a survey finds it.

The books found due go into the worker's `Schedule`; the passes are the loop's (`loop`).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

from .._logs import FieldsLogger
from .._plain import counted, plain
from ..decisions.views import ATTEMPT_STATES
from ..errors import BookProblemKind, StreamProblemKind
from ..ingest.books import book_ref, path_ref, register_books
from ..ingest.projection_step import projections_behind
from ..operate.lag import HOLD_KINDS, Lag, lag_of_books
from ..store import statements
from ..store.db import Database, Row
from .membership import group, live_workers, member_id, owner_of
from .metrics import Metrics
from .schedule import Schedule

LAG_LINES_BYTES_MAX = 16 * 1024 * 1024
"""The survey counts lines past a cursor in at most this many bytes per book (then a lower bound)."""
BOOKS_BY_ID_PAGE = 500
"""The survey loads the worker's books in pages of this many ids."""
STANDING_STATES = frozenset({"quarantined", "stalled", "refused", "parked"})
"""The attempt states whose recorded problem stands (a person must look, or the book waits)."""
PROBLEM_GAUGE_KINDS: tuple[str, ...] = (
    *get_args(StreamProblemKind),
    *get_args(BookProblemKind),
    "unnamed_stream",
)
"""The kinds of `books_with_problem`, each shown (0 included) from the first survey on."""


@dataclass(eq=False)
class Book:
    """A book directory under a root, as the worker knows it."""

    path: Path
    book_id: str | None = None
    """None: not registered yet; "": refused (tried again by the survey)."""
    ref: str = ""
    owned: bool = False
    epoch: int | None = None
    behind_since: float | None = None
    trouble: str | None = None
    """Why the last pass over the book (or its registration) failed: logged once per episode."""
    vanished: bool = False
    """Its directory is gone from its root: one last pass records what that leaves (a
    `journal_missing` when an attempt awaits lines), then the worker forgets it."""


class Survey:
    """The worker's books, its group of workers, and the survey's clock."""

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
        self.projections = sorted(projections)
        """The names of the projections this worker applies (their lines behind are measured)."""
        self.roots = list(roots)
        self.worker_id = worker_id
        self.member = member_id(worker_id)
        """The id this worker is announced and hashed by (`membership.member_id`)."""
        self.digest = digest
        self.membership_interval_s = membership_interval_s
        self.survey_interval_s = survey_interval_s
        self.schedule = schedule
        self.metrics = metrics
        self.log = log
        self._stopping = stopping
        self.books: dict[Path, Book] = {}
        self._listed: dict[Path, set[str]] = {}
        """The names of the directories under each root when it was last listed (`rescan`)."""
        self._by_id: dict[str, Book] = {}
        """The registered books by id (a survey's page and an operator's change name books by id)."""
        self.group: tuple[str, ...] = ()
        """The member ids of the live workers of these roots; empty until `announce`: a worker
        that is still registering its books works none of them."""
        self.announced = False
        self.next_membership = 0.0
        self.next_survey = 0.0
        self.rescan_roots: set[Path] = set()
        self._counted = False
        self._pages: list[list[str]] = []
        self._tally: _Tally | None = None
        self._unnamed_told: set[tuple[str, str]] = set()
        self._behind_told: set[str] = set()
        """The projections whose lines behind were already logged."""
        """(book id, engine_run_id) of the streams waiting to be named already logged."""

    # --- books under the roots ----------------------------------------------------------------

    def rescan(self) -> None:
        """Find the book directories directly under the roots to rescan, and register new ones.

        Only the names that came or went since a root was last listed are made into paths: a
        root of 40,000 books is listed in about 18 ms, where a path a book took about 200 ms, and
        the worker passes nothing while it lists (every survey lists every root)."""
        roots, self.rescan_roots = self.rescan_roots, set()
        for root in sorted(roots):
            try:
                names = {entry.name for entry in os.scandir(root) if entry.is_dir()}
            except OSError as error:
                self.log.warning("a root could not be listed: %s", type(error).__name__)
                continue
            listed = self._listed.get(root, set())
            for name in names - listed:
                path = root / name
                if path not in self.books:
                    self.books[path] = Book(path)
                self.books[path].vanished = False
            for name in listed - names:
                path = root / name
                gone = self.books.get(path)
                if gone is not None and gone.owned and gone.book_id:
                    gone.vanished = True
                    self.schedule.mark(path, "survey", time.monotonic())
                elif gone is not None:
                    self.forget(gone)
            self._listed[root] = names
        self._register_new()

    def forget(self, book: Book) -> None:
        """The book's directory is gone (and its last pass, if it was ours, is done)."""
        if self.books.get(book.path) is book:
            del self.books[book.path]
        self.schedule.forget(book.path)
        if book.book_id and self._by_id.get(book.book_id) is book:
            del self._by_id[book.book_id]

    def _register_new(self, *, again: bool = False) -> None:
        """Register the books not registered yet, in pages (`register_books`); the new ones this
        worker works are claimed (`_claim`).

        A directory refused (a name that is not UTF-8, a second directory of a book's name, one
        outside the roots) is skipped with one WARNING naming it by an opaque reference; `again`
        (the survey) tries the refused ones once more, in case what refused them is gone.
        """
        pending = [
            book
            for book in self.books.values()
            if book.book_id is None or (again and book.book_id == "")
        ]
        if not pending or self._stopping():
            return
        results = register_books(self.db, [book.path for book in pending], self.roots)
        rows: dict[str, Row] = {}
        claimed: list[Book] = []
        for book, result in zip(pending, results, strict=True):
            if isinstance(result, Exception):
                reason = type(result).__name__
                if book.trouble != reason:
                    self.log.warning(
                        "a book directory (%s) was refused and is skipped: %s",
                        path_ref(book.path),
                        reason,
                        fields={"path_ref": path_ref(book.path)},
                    )
                book.trouble = reason
                book.book_id = ""
                continue
            book.trouble = None
            book.book_id = result["book_id"]
            self._by_id[book.book_id] = book
            book.ref = book_ref(result["book_id"])
            rows[result["book_id"]] = result
            if self._assign(book):
                claimed.append(book)
        self._claim(claimed, rows)

    def registration_lost(self, book: Book) -> None:
        """The book's row is not in Postgres any more (a restore from an older backup, a replica
        promoted that had not seen it): it is registered again at once, as a new directory is,
        with one WARNING. Registered again, it is claimed, and its lag (every line of its journal)
        passes it."""
        if book.book_id and self._by_id.get(book.book_id) is book:
            del self._by_id[book.book_id]
        self.log.warning(
            "%s is not registered in Postgres any more (restored from an older backup?); "
            "registered again, its journal is read from its start",
            book.ref,
        )
        book.book_id = None
        book.owned = False
        book.epoch = None
        self.schedule.drop(book.path)
        self.rescan_roots.add(book.path.parent)

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

    def _claim(self, books: Sequence[Book], rows: dict[str, Row] | None = None) -> None:
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
        page_rows.extend(self._rows(missing))
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

    def _rows(self, ids: Sequence[str]) -> list[Row]:
        """The books' rows (`statements.BOOKS_BY_ID`), in pages."""
        rows: list[Row] = []
        for first in range(0, len(ids), BOOKS_BY_ID_PAGE):
            rows.extend(
                self.db.fetch_all(
                    statements.BOOKS_BY_ID, (list(ids[first : first + BOOKS_BY_ID_PAGE]),)
                )
            )
        return rows

    def book_by_id(self, book_id: str) -> Book | None:
        """The book of this id under the roots, if the worker knows it."""
        return self._by_id.get(book_id)

    def owned(self) -> list[Book]:
        """The books this worker works."""
        return [book for book in self.books.values() if book.owned]

    # --- membership -----------------------------------------------------------------------------

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

    def refresh_membership(self) -> None:
        """Look up the live workers; the books that changed hands are claimed or dropped."""
        self.next_membership = time.monotonic() + self.membership_interval_s
        members = group(live_workers(self.db), self.worker_id, self.digest)
        if members == self.group and self._counted:
            return
        changed = members != self.group
        self.group = members
        self._claim([book for book in self.books.values() if self._assign(book)])
        self._count_books()
        if changed:
            owned = len(self.owned())
            self.log.info(
                "worker %s works %d of %s, with %s on these roots",
                self.worker_id,
                owned,
                counted(len(self.books), "book"),
                counted(len(members), "worker"),
                fields={"books_owned": owned, "workers": len(members)},
            )

    def _count_books(self) -> None:
        owned = len(self.owned())
        self.metrics.workers.set(len(self.group))
        self.metrics.books.labels("owned").set(owned)
        self.metrics.books.labels("shared").set(len(self.books) - owned)
        self._counted = True

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
        self._register_new(again=True)
        self._count_books()
        ids = sorted(book.book_id for book in self.owned() if book.book_id)
        self._pages = [
            ids[first : first + BOOKS_BY_ID_PAGE] for first in range(0, len(ids), BOOKS_BY_ID_PAGE)
        ]
        self._tally = _Tally(started=time.monotonic())
        if not self._pages:
            self._finish()

    def step(self) -> None:
        """Measure the lag of one page of the survey's books: each book behind or whose epoch
        moved is marked due. After the last page, the lag metrics are published."""
        tally = self._tally
        if tally is None or not self._pages:
            return
        ids = self._pages.pop(0)
        rows = self._rows(ids)
        lags = lag_of_books(self.db, rows, lines_bytes_max=LAG_LINES_BYTES_MAX)
        owned_ids = [
            row["book_id"]
            for row in rows
            if (book := self._by_id.get(row["book_id"])) is not None and book.owned
        ]
        if self.projections and owned_ids:
            tally.projection_behind.update(projections_behind(self.db, owned_ids, self.projections))
        now = time.monotonic()
        wall_now = datetime.now(UTC)  # the holds' ages, once a page
        for book_id in sorted(set(ids) - {row["book_id"] for row in rows}):
            lost = self._by_id.get(book_id)
            if lost is not None and lost.owned:
                self.registration_lost(lost)
        for row in rows:
            book = self._by_id.get(row["book_id"])
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
        metrics = self.metrics
        metrics.lag_bytes.set(tally.lag_bytes)
        metrics.lag_lines.set(tally.lag_lines)
        metrics.lag_bytes_max.set(tally.lag_bytes_max)
        metrics.books_behind.set(tally.behind)
        metrics.lag_age_max.set(tally.age_max)
        for state in ATTEMPT_STATES:
            metrics.attempts.labels(state).set(tally.attempts[state])
        for kind in PROBLEM_GAUGE_KINDS:
            metrics.books_with_problem.labels(kind).set(tally.books_with_problem[kind])
        for hold in HOLD_KINDS:
            metrics.lag_lines_held.labels(hold).set(tally.lines_held[hold])
            metrics.oldest_hold_age.labels(hold).set(tally.oldest_hold_s.get(hold, 0.0))
        for projection in self.projections:
            behind = tally.projection_behind[projection]
            metrics.projection_lines_behind.labels(projection).set(behind)
            if behind and projection not in self._behind_told:
                self._behind_told.add(projection)
                self.log.warning(
                    "projection %s is %s behind the books' cursors (a pass applies only new"
                    " lines): run `platform-ingest rebuild --projection %s`",
                    projection,
                    counted(behind, "line"),
                    projection,
                )
        metrics.last_survey.set(time.time())
        self.log.debug(
            "survey of %s: %d behind, %s past the cursors, %.3f s",
            counted(tally.books, "book"),
            tally.behind,
            counted(tally.lag_lines, "line"),
            time.monotonic() - tally.started,
        )


@dataclass
class _Tally:
    """What a survey's pages have measured so far."""

    started: float
    books: int = 0
    lag_bytes: int = 0
    lag_lines: int = 0
    lag_bytes_max: int = 0
    behind: int = 0
    age_max: float = 0.0
    attempts: Counter[str] = field(default_factory=Counter)
    books_with_problem: Counter[str] = field(default_factory=Counter)
    lines_held: Counter[str] = field(default_factory=Counter)
    oldest_hold_s: dict[str, float] = field(default_factory=dict)
    projection_behind: Counter[str] = field(default_factory=Counter)

    def count_truths(self, book: Row, lag: Lag, now: datetime) -> None:
        """Count one book's attempts by state, its standing problems by kind, and its holds."""
        kinds: set[str] = set(book["problem_kinds"] or ())
        if book["error_kind"] is not None:
            kinds.add(book["error_kind"])
        for state, error_kind in lag.attempts:
            self.attempts[state] += 1
            if error_kind is not None and state in STANDING_STATES:
                kinds.add(error_kind)
        if any(hold.kind == "unnamed" for hold in lag.holds):
            kinds.add("unnamed_stream")
        for kind in kinds:
            self.books_with_problem[kind] += 1
        held = lag.held_by
        if held is not None:
            self.lines_held[held.kind] += lag.lines - lag.lines_unread
        for hold in lag.holds:
            if hold.since is not None:
                age = max(0.0, (now - hold.since).total_seconds())
                self.oldest_hold_s[hold.kind] = max(self.oldest_hold_s.get(hold.kind, 0.0), age)

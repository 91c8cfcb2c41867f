"""`platform-ingest run`: the long-running worker.

One thread does every pass (a pass is `_pass.BookPass`: state only in Postgres, nothing cached
between passes); two helpers only tell it what to look at:

- the watcher (`_watcher`): a book's journal changed, or a root's list of books did;
- the clock: the membership check (`_membership`, every `membership_interval_s`), the survey (every
  `survey_interval_s`), and retries.

What wakes a pass over a book the worker works (its `trigger` in the metrics):

- `notify`: its journal changed;
- `claim`: the worker starts, or the book became this worker's (a worker left or joined);
- `survey`: the safety net. Every `survey_interval_s` the worker measures the lag of each of its
  books against the real head (`_lag`) and passes every book with complete lines past its cursor
  (a change notification that never came) or whose scan epoch moved (`name`, `release`);
- `retry`: a pass found the book busy (another worker's pass holds it), or could not finish.

Postgres going away: a pass or a survey that meets `DatabaseUnavailable` or `DatabaseTimeout` (the
named operational errors; nothing else is retried) marks the database down. The worker then tries
to connect again after a jittered, growing wait (at most `database_wait_max_s`), each try bounded
by the connect timeout, and meanwhile does nothing else; once connected it passes all its books,
each from its cursor in Postgres. The state shows: `database_up 0` in the metrics, lag growing in
`show`, one WARNING per episode in the logs.

SIGTERM or SIGINT (`request_stop`): the batch in flight is committed (a pass stops before its next
transaction begins), the watcher stops, the session ends (its books go to the other workers at
their next membership check) and `run` returns 0.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import _sql
from ._books import book_ref, path_ref, register_book
from ._db import Database, DatabaseSettings
from ._lag import lag_of_books
from ._membership import (
    application_name,
    group,
    live_workers,
    new_worker_id,
    owner_of,
    roots_digest,
)
from ._metrics import Metrics
from ._pass import BookPass, Mode, PassReport
from ._watcher import Watcher
from .errors import (
    ConfigError,
    CursorMoved,
    DatabaseError,
    DatabaseTimeout,
    DatabaseUnavailable,
    JournalUnreadable,
    NotFound,
)

logger = logging.getLogger("platform_ingest")

BUSY_RETRY_WAIT_S = 0.25
"""After a pass found its book busy (another worker's pass), the wait before trying again."""
BUSY_RETRIES_MAX = 40
"""Busy retries before the book is left to the survey."""
LAG_LINES_BYTES_MAX = 16 * 1024 * 1024
"""The survey counts lines past a cursor in at most this many bytes per book (then a lower bound)."""
DATABASE_WAIT_FIRST_S = 0.2
WORKER_ID = re.compile(r"[A-Za-z0-9._:-]{1,24}")


@dataclass
class WorkerSettings:
    """How a worker runs. Times are in seconds."""

    roots: Sequence[Path]
    mode: Mode = "auto"
    survey_interval_s: float = 15.0
    membership_interval_s: float = 1.0
    database_wait_max_s: float = 5.0
    metrics_port: int | None = None


def worker_database_settings() -> DatabaseSettings:
    """The worker's bounds: a pass that meets a lost server gives up after two quick reconnects,
    and the worker's own loop (which a SIGTERM interrupts) does the longer waiting."""
    return DatabaseSettings(
        connect_timeout_s=5,
        reconnect_attempts_max=2,
        reconnect_wait_s=0.1,
        reconnect_wait_max_s=0.2,
    )


@dataclass(eq=False)
class _Book:
    """A book directory under a root, as the worker knows it."""

    path: Path
    book_id: str | None = None
    ref: str = ""
    owned: bool = False
    epoch: int | None = None
    busy_retries: int = 0
    behind_since: float | None = None
    trouble: str | None = None
    """Why the last pass over the book (or its registration) failed: logged once per episode."""


@dataclass(eq=False)
class _Due:
    trigger: str
    woken_at: float
    not_before: float = 0.0


class _Stopping(Exception):
    """Raised from the commit hook so that a pass stops before its next transaction begins."""


@dataclass
class _Event:
    kind: str
    path: Path | None = None
    at: float = field(default_factory=time.monotonic)


class Worker:
    """Tails every book directly under the roots until `request_stop`."""

    def __init__(
        self,
        dsn: str,
        settings: WorkerSettings,
        *,
        database_settings: DatabaseSettings | None = None,
        worker_id: str | None = None,
    ) -> None:
        if not settings.roots:
            raise ConfigError("run needs at least one root")
        for root in settings.roots:
            if not root.is_dir():
                raise ConfigError(f"root {root} is not a directory")
        self.settings = settings
        self.roots = [root.resolve() for root in settings.roots]
        self.worker_id = worker_id or new_worker_id()
        if not WORKER_ID.fullmatch(self.worker_id):
            raise ConfigError(
                f"worker id {self.worker_id!r}: 1 to 24 letters, digits, '.', '_', ':' or '-'"
            )
        self.digest = roots_digest(self.roots)
        self.db = Database(
            dsn,
            database_settings or worker_database_settings(),
            application_name=application_name(self.worker_id, self.digest),
        )
        self.metrics = Metrics()
        self.metrics_port: int | None = None
        self._events: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        self._stopping = False
        self._books: dict[Path, _Book] = {}
        self._due: dict[Path, _Due] = {}
        self._group: tuple[str, ...] = (self.worker_id,)
        self._database_down_since: float | None = None
        self._database_retry_at = 0.0
        self._database_wait_s = DATABASE_WAIT_FIRST_S
        self._next_membership = 0.0
        self._next_survey = 0.0
        self._rescan_roots: set[Path] = set()
        self._counted = False
        self._log_fields = {"worker": self.worker_id}

    # --- control ----------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask the worker to stop (safe to call from a signal handler: the queue is reentrant)."""
        self._stopping = True
        self._events.put(_Event("stop"))

    def _hook(self, stage: str) -> None:
        if stage == "before" and self._stopping:
            raise _Stopping

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        if self.settings.metrics_port is not None:
            self.metrics_port = self.metrics.serve(self.settings.metrics_port)
            logger.info("metrics on port %d", self.metrics_port, extra={"fields": self._log_fields})
        watcher = Watcher(
            self.roots,
            on_journal=lambda path: self._events.put(_Event("journal", path)),
            on_root=lambda root: self._events.put(_Event("root", root)),
            on_state=lambda up: self._events.put(_Event("watcher_up" if up else "watcher_down")),
        )
        logger.info(
            "worker %s starts on %d roots (%s mode)",
            self.worker_id,
            len(self.roots),
            self.settings.mode,
            extra={"fields": self._log_fields},
        )
        watcher.start()
        try:
            self._loop()
        finally:
            watcher.stop()
            self.db.close()  # ends the session: the other workers take the books over
        logger.info("worker %s stopped", self.worker_id, extra={"fields": self._log_fields})
        return 0

    def _loop(self) -> None:
        self._rescan_roots = set(self.roots)
        while not self._stopping:
            self._handle_events(self._wait_s())
            if self._stopping:
                break
            if self._database_down_since is not None and (
                time.monotonic() < self._database_retry_at or not self._reconnect()
            ):
                continue
            try:
                if time.monotonic() >= self._next_membership:
                    self._refresh_membership()
                if self._rescan_roots:
                    self._rescan()
                now = time.monotonic()
                if now >= self._next_survey:
                    self._survey()
                self._passes()
            except (DatabaseUnavailable, DatabaseTimeout) as error:
                self._database_failed(error)

    def _wait_s(self) -> float:
        now = time.monotonic()
        if self._database_down_since is not None:
            return max(0.0, self._database_retry_at - now)
        if self._rescan_roots:
            return 0.0
        soonest = min(self._next_membership, self._next_survey)
        for due in self._due.values():
            soonest = min(soonest, due.not_before)
        return max(0.0, soonest - now)

    def _handle_events(self, timeout_s: float) -> None:
        events: list[_Event] = []
        try:
            events.append(self._events.get(timeout=timeout_s))
        except queue.Empty:
            return
        while True:
            try:
                events.append(self._events.get_nowait())
            except queue.Empty:
                break
        for event in events:
            if event.kind == "stop":
                self._stopping = True
            elif event.kind == "journal" and event.path is not None:
                book = self._books.get(event.path)
                if book is None:
                    self._rescan_roots.add(event.path.parent)
                elif book.owned:
                    self._mark(book, "notify", event.at)
            elif event.kind == "root" and event.path is not None:
                self._rescan_roots.add(event.path)
            elif event.kind in ("watcher_up", "watcher_down"):
                self.metrics.watcher_up.set(1 if event.kind == "watcher_up" else 0)

    def _mark(self, book: _Book, trigger: str, at: float, not_before: float = 0.0) -> None:
        due = self._due.get(book.path)
        if due is None:
            self._due[book.path] = _Due(trigger, at, not_before)
        else:
            due.woken_at = min(due.woken_at, at)
            due.not_before = min(due.not_before, not_before)

    # --- books under the roots ----------------------------------------------------------------

    def _rescan(self) -> None:
        """Find the book directories directly under the roots to rescan, and register new ones."""
        roots, self._rescan_roots = self._rescan_roots, set()
        for root in sorted(roots):
            try:
                entries = [root / entry.name for entry in os.scandir(root) if entry.is_dir()]
            except OSError as error:
                logger.warning(
                    "a root could not be listed: %s",
                    type(error).__name__,
                    extra={"fields": self._log_fields},
                )
                continue
            present = set(entries)
            for path in entries:
                if path not in self._books:
                    self._books[path] = _Book(path)
            for path in [path for path in self._books if path.parent == root]:
                if path not in present:
                    del self._books[path]
                    self._due.pop(path, None)
        self._register_new()

    def _register_new(self, *, again: bool = False) -> None:
        """Register the books not registered yet; the new ones this worker works are passed.

        A directory refused (a name that is not UTF-8, a second directory of a book's name, one
        outside the roots) is skipped with one WARNING naming it by an opaque reference; `again`
        (the survey) tries the refused ones once more, in case what refused them is gone.
        """
        for book in [
            book
            for book in self._books.values()
            if book.book_id is None or (again and book.book_id == "")
        ]:
            if self._stopping:
                return
            try:
                registered = register_book(self.db, book.path, self.roots)
            except (ConfigError, NotFound) as error:
                reason = type(error).__name__
                if book.trouble != reason:
                    logger.warning(
                        "a book directory (%s) was refused and is skipped: %s",
                        path_ref(book.path),
                        reason,
                        extra={"fields": {**self._log_fields, "path_ref": path_ref(book.path)}},
                    )
                book.trouble = reason
                book.book_id = ""
                continue
            book.trouble = None
            book.book_id = registered.book_id
            book.ref = book_ref(registered.book_id)
            self._assign(book, "claim")

    def _assign(self, book: _Book, trigger: str) -> None:
        if not book.book_id:
            return
        owned = owner_of(book.book_id, self._group) == self.worker_id
        if owned and not book.owned:
            self._mark(book, trigger, time.monotonic())
        if not owned:
            self._due.pop(book.path, None)
            book.behind_since = None
        book.owned = owned

    # --- membership -----------------------------------------------------------------------------

    def _refresh_membership(self) -> None:
        self._next_membership = time.monotonic() + self.settings.membership_interval_s
        members = group(live_workers(self.db), self.worker_id, self.digest)
        self.metrics.database_up.set(1)
        if members == self._group and self._counted:
            return
        changed = members != self._group
        self._group = members
        for book in self._books.values():
            self._assign(book, "claim")
        self._count_books()
        if changed:
            owned = sum(book.owned for book in self._books.values())
            logger.info(
                "worker %s works %d of %d books, with %d workers on these roots",
                self.worker_id,
                owned,
                len(self._books),
                len(members),
                extra={
                    "fields": {**self._log_fields, "books_owned": owned, "workers": len(members)}
                },
            )

    def _count_books(self) -> None:
        owned = sum(book.owned for book in self._books.values())
        self.metrics.workers.set(len(self._group))
        self.metrics.books.labels("owned").set(owned)
        self.metrics.books.labels("shared").set(len(self._books) - owned)
        self._counted = True

    # --- the survey (safety net and lag) --------------------------------------------------------

    def _survey(self) -> None:
        started = time.monotonic()
        self._next_survey = started + self.settings.survey_interval_s
        self._rescan_roots = set(self.roots)
        self._rescan()
        self._register_new(again=True)
        self._count_books()
        owned = {book.book_id: book for book in self._books.values() if book.owned and book.book_id}
        ids = sorted(owned)
        rows = []
        for first in range(0, len(ids), 500):
            rows.extend(self.db.fetch_all(_sql.BOOKS_BY_ID, (ids[first : first + 500],)))
        lags = lag_of_books(self.db, rows, lines_bytes_max=LAG_LINES_BYTES_MAX)
        self.metrics.database_up.set(1)
        now = time.monotonic()
        lag_bytes = lag_lines = lag_bytes_max = behind = 0
        age_max = 0.0
        for row in rows:
            book = owned[row["book_id"]]
            lag = lags[row["book_id"]]
            lag_bytes += lag.bytes
            lag_lines += lag.lines
            lag_bytes_max = max(lag_bytes_max, lag.bytes)
            moved = book.epoch is not None and book.epoch != row["scan_epoch"]
            book.epoch = row["scan_epoch"]
            if lag.lines > 0:
                behind += 1
                if book.behind_since is None:
                    book.behind_since = now
                age = lag.age_s if lag.age_s is not None else now - book.behind_since
                age_max = max(age_max, age)
            else:
                book.behind_since = None
            if lag.lines > 0 or moved:
                self._mark(book, "survey", now)
        metrics = self.metrics
        metrics.lag_bytes.set(lag_bytes)
        metrics.lag_lines.set(lag_lines)
        metrics.lag_bytes_max.set(lag_bytes_max)
        metrics.books_behind.set(behind)
        metrics.lag_age_max.set(age_max)
        metrics.last_survey.set(time.time())
        logger.debug(
            "survey of %d books: %d behind, %d lines past the cursors, %.3f s",
            len(rows),
            behind,
            lag_lines,
            time.monotonic() - started,
            extra={"fields": self._log_fields},
        )

    # --- passes -------------------------------------------------------------------------------

    def _passes(self) -> None:
        now = time.monotonic()
        ready = [(path, due) for path, due in self._due.items() if due.not_before <= now]
        ready.sort(key=lambda item: item[1].woken_at)
        for path, due in ready:
            if self._stopping:
                return
            del self._due[path]
            book = self._books.get(path)
            if book is None or not book.owned or not book.book_id:
                continue
            self._pass(book, due)

    def _pass(self, book: _Book, due: _Due) -> None:
        metrics = self.metrics
        metrics.passes.labels(due.trigger).inc()
        assert book.book_id
        try:
            report = BookPass(
                self.db, book.book_id, mode=self.settings.mode, commit_hook=self._hook
            ).run()
        except _Stopping:
            return
        except (DatabaseUnavailable, DatabaseTimeout) as error:
            metrics.pass_failures.labels(type(error).__name__).inc()
            self._mark(book, "retry", due.woken_at)
            raise
        except CursorMoved:
            metrics.pass_failures.labels("CursorMoved").inc()
            self._mark(book, "retry", due.woken_at, time.monotonic() + BUSY_RETRY_WAIT_S)
            return
        except (JournalUnreadable, NotFound, DatabaseError) as error:
            # The book's own trouble (shown by `show` as its problem): the other books go on, and
            # the survey passes this one again when its journal changes.
            reason = type(error).__name__
            metrics.pass_failures.labels(reason).inc()
            if book.trouble != reason:
                logger.warning(
                    "pass over %s could not finish: %s; the survey tries again",
                    book.ref,
                    reason,
                    extra={"fields": self._log_fields},
                )
            book.trouble = reason
            return
        if book.trouble is not None:
            logger.info(
                "pass over %s goes through again", book.ref, extra={"fields": self._log_fields}
            )
            book.trouble = None
        metrics.database_up.set(1)
        self._count(book, due, report)

    def _count(self, book: _Book, due: _Due, report: PassReport) -> None:
        metrics = self.metrics
        if report.busy:
            book.busy_retries += 1
            if book.busy_retries <= BUSY_RETRIES_MAX:
                self._mark(book, "retry", due.woken_at, time.monotonic() + BUSY_RETRY_WAIT_S)
            return
        book.busy_retries = 0
        if report.lines_applied:
            metrics.lines_applied.inc(report.lines_applied)
            metrics.apply_seconds.observe(time.monotonic() - due.woken_at)
        if report.duplicates:
            metrics.duplicates.inc(report.duplicates)
        for problem in report.problems:
            metrics.problems.labels(problem.rsplit(": ", 1)[-1]).inc()

    # --- Postgres away --------------------------------------------------------------------------

    def _database_failed(self, error: DatabaseError) -> None:
        now = time.monotonic()
        self.metrics.database_up.set(0)
        self.metrics.database_errors.labels(type(error).__name__).inc()
        if self._database_down_since is None:
            self._database_down_since = now
            self._database_wait_s = DATABASE_WAIT_FIRST_S
            logger.warning(
                "Postgres is away (%s); the worker waits and reconnects",
                type(error).__name__,
                extra={"fields": self._log_fields},
            )
        wait_s = min(self.settings.database_wait_max_s, self._database_wait_s)
        self._database_wait_s = wait_s * 2
        self._database_retry_at = now + wait_s * random.uniform(0.5, 1.0)

    def _reconnect(self) -> bool:
        try:
            self.db.connect_once()
        except DatabaseUnavailable as error:
            self._database_failed(error)
            return False
        down_s = time.monotonic() - (self._database_down_since or time.monotonic())
        self._database_down_since = None
        self.metrics.database_up.set(1)
        logger.warning(
            "Postgres is back after %.1f s; every book goes on from its cursor",
            down_s,
            extra={"fields": self._log_fields},
        )
        now = time.monotonic()
        self._next_membership = 0.0
        for book in self._books.values():
            if book.owned:
                self._mark(book, "retry", now)
        return True

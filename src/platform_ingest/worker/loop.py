"""`platform-ingest run`: the long-running worker, and its loop.

One thread does every pass (the books due go in groups, `group_pass.GroupPass`, a book alone in
being due in a group of one; a book whose last pass failed gets its own, `book_pass.BookPass`;
state only in Postgres, nothing cached between passes); two helpers only tell it what to look at:

- the watcher (`watcher`): a book's journal changed, or a root's list of books did;
- the clock: the membership check (every `membership_interval_s`), the survey (every
  `survey_interval_s`), both in `survey`, and retries (`schedule`).

What wakes a pass over a book the worker works (its `trigger` in the metrics):

- `notify`: its journal changed;
- `claim`: the worker starts, or the book became this worker's (a new directory, a worker left
  or joined), and its lag measured says it needs a pass (`ownership.Ownership.claim`);
- `survey`: the safety net. Every `survey_interval_s` the worker measures the lag of each of its
  books against the real head (`lag`) and passes every book with complete lines past its cursor
  (a change notification that never came) or whose scan epoch moved (`name`, `release`);
- `retry`: a pass found the book busy (another worker's pass holds it), or could not finish.

Postgres going away: a pass or a survey that meets `DatabaseUnavailable` (a server that answers
and writes nothing, its disk full or read-only, is one: `DatabaseRefusesWrites`), or a survey,
membership check or registration that meets `DatabaseTimeout` (the named operational errors;
nothing else is retried), marks the database down. A pass whose bounded waits run out again and
again (a lock held on its book's rows, a projection's slow statement) is its book's problem instead
(`database_timeout`, `book_pass`): the book is tried again after a doubling wait (0.5 s to 60 s) and
every other book goes on. The worker then tries again after a jittered, growing wait (at most
`database_wait_max_s`): it connects, each try bounded by the connect timeout, and does the work
that was due, and meanwhile does nothing else. Postgres is back only once that work went through
(a full or read-only server takes connections and answers reads); then the worker passes all its
books behind, each from its cursor in Postgres. The state shows: `database_up 0` in the metrics
with why (`database_down_reason{reason, sqlstate}`), lag growing in `show`, one WARNING per
episode in the logs. A pass that lost its connection and made it again
itself (its two quick reconnects: a network cut that healed meanwhile, a restarted server) began no
episode, yet the worker's session, and with it its membership, had ended: the worker logs one
WARNING (`Postgres was away`) and looks at its membership and its books again at once, as at the
end of an episode.

Postgres gone back in time (restored from an older backup, a lagging replica promoted): the
cursors are older, so the books are behind and passed again; a book whose row is gone is
registered again (`Survey.registration_lost`).

SIGTERM or SIGINT (`request_stop`): the batch in flight is committed (a pass stops before its next
transaction begins), the watcher stops, the session ends (its books go to the other workers at
their next membership check) and `run` returns 0.

A newer release's `migrate` under the worker (`schema_watch`, looked at between passes): the
worker takes no pass any more, logs one ERROR naming both versions, stops as on SIGTERM and
`run` raises `SchemaChanged` (the command exits for the supervisor to start the new release).

This module holds the loop: the events it waits for, the passes and what their outcome means.
When each book is due, and the waits while Postgres is away, are `schedule`'s; which books there
are, which are this worker's and how far behind they are, `survey`'s.
"""

from __future__ import annotations

import gc
import logging
import math
import queue
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .._defaults import SCRUB_BYTES_PER_S_DEFAULT
from .._logs import FieldsLogger
from .._plain import counted
from ..errors import (
    ConfigError,
    CursorMoved,
    DatabaseError,
    DatabaseTimeout,
    DatabaseUnavailable,
    JournalUnreadable,
    NotFound,
    ProjectionFailed,
    SchemaChanged,
)
from ..ingest.apply import CommitStage
from ..ingest.book_pass import BookPass, Mode, PassReport
from ..ingest.group_pass import GROUP_BOOKS_MAX, GroupPass
from ..ingest.projection_step import install
from ..operate.compact import QUIET_FOR_S_DEFAULT
from ..operate.scrub import BackgroundScrub
from ..projections import Projection, check_projections
from ..store.db import Database, DatabaseSettings, unavailable_reason
from ..store.schema import require_current
from .control import ControlListener
from .health import Health, serve
from .housekeeping import Housekeeping
from .membership import (
    application_name,
    check_worker_id,
    joining_name,
    new_worker_id,
    roots_digest,
)
from .metrics import Metrics
from .schedule import BUSY_RETRY_WAIT_S, Due, PostgresAway, Schedule
from .schema_watch import SchemaWatch
from .survey import Book, Survey
from .watcher import Watcher

logger = logging.getLogger("platform_ingest")

EventKind = Literal[
    "stop", "journal", "root", "watcher_up", "watcher_down", "book", "resurvey", "schema"
]
"""What the loop is told: stop; a journal changed; a root's list of books changed; the watcher
works again, or stopped working; an operator changed a book (by its id); the control listener is
back after a loss (a safety pass now); `migrate` changed the schema (a look at it now)."""


@dataclass
class WorkerSettings:
    """How a worker runs. Times are in seconds."""

    roots: Sequence[Path]
    mode: Mode = "auto"
    survey_interval_s: float = 15.0
    membership_interval_s: float = 1.0
    database_wait_max_s: float = 5.0
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    """Where the metrics are served: loopback unless the operator opens it."""
    compact_quiet_s: float | None = QUIET_FOR_S_DEFAULT
    """Compact attempts quiet for this long (`housekeeping`); None: never."""
    scrub_bytes_per_s: float = SCRUB_BYTES_PER_S_DEFAULT
    """Read the owned books' applied lines again at most this fast (`operate.scrub`); 0: never."""


def worker_database_settings() -> DatabaseSettings:
    """The worker's bounds: a pass that meets a lost server gives up after two quick reconnects,
    and the worker's own loop (which a SIGTERM interrupts) does the longer waiting."""
    return DatabaseSettings(
        connect_timeout_s=5,
        reconnect_attempts_max=2,
        reconnect_wait_s=0.1,
        reconnect_wait_max_s=0.2,
    )


class _Stopping(Exception):
    """Raised from the commit hook so that a pass stops before its next transaction begins."""


TIMED_OUT_WAIT_FACTOR = 10.0
"""A pass whose bounded wait ran out (`DatabaseTimeout`) held the worker for the whole bound (5 s
of a lock wait, 30 s of a statement, 60 s of an idle transaction): its book is tried again no
sooner than this many times that, so one such book takes at most about a tenth of the worker."""
PASSES_BETWEEN_PAGES_S = 0.05
"""How long the passes due may run between two pages of a survey (each page measures the lag of
500 books, tens of milliseconds): a notified book is passed within a page or two of its line, and
the survey (at start-up: the first safety pass over every book) is not held up behind the passes
of every book it found behind."""
HEALTHZ_STALE_MIN_S = 60.0
"""`/healthz` fails once the loop has neither turned nor committed a batch for this long (or
three times the longest wait of the loop, when that is longer)."""


@dataclass
class _Event:
    kind: EventKind
    path: Path | None = None
    at: float = field(default_factory=time.monotonic)
    book_id: str | None = None


class Worker:
    """Tails every book directly under the roots until `request_stop`."""

    def __init__(
        self,
        dsn: str,
        settings: WorkerSettings,
        *,
        database_settings: DatabaseSettings | None = None,
        worker_id: str | None = None,
        projections: Sequence[Projection] = (),
    ) -> None:
        if not settings.roots:
            raise ConfigError("run needs at least one root")
        for root in settings.roots:
            if not root.is_dir():
                raise ConfigError(f"root {root} is not a directory")
        self.settings = settings
        self.projections = check_projections(projections)
        self._installed = not self.projections
        """The projections' tables are set up (`projection_step.install`, once Postgres answers)."""
        self.roots = [root.resolve() for root in settings.roots]
        self.worker_id = check_worker_id(worker_id or new_worker_id())
        self.digest = roots_digest(self.roots)
        # Joining under another name: the others count this worker only once it has registered
        # every book under the roots and can work its share (`Survey.announce`).
        self.db = Database(
            dsn,
            database_settings or worker_database_settings(),
            application_name=joining_name(self.worker_id),
        )
        self.metrics = Metrics()
        self.control = ControlListener(
            dsn,
            worker_id=self.worker_id,
            settings=database_settings or worker_database_settings(),
            on_book=lambda book_id: self._events.put(_Event("book", book_id=book_id)),
            on_reconnected=lambda: self._events.put(_Event("resurvey")),
            on_schema=lambda: self._events.put(_Event("schema")),
        )
        self.schema = SchemaWatch(settings.survey_interval_s)
        self.housekeeping = (
            None
            if settings.compact_quiet_s is None
            else Housekeeping(
                dsn,
                quiet_for_s=settings.compact_quiet_s,
                interval_s=settings.survey_interval_s,
                database_settings=database_settings or worker_database_settings(),
                metrics=self.metrics,
                log=FieldsLogger(logger, {"worker": self.worker_id}),
            )
        )
        self.metrics_port: int | None = None
        self.log = FieldsLogger(logger, {"worker": self.worker_id})
        self._events: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        self._stopping = False
        self.schedule = Schedule()
        self.scrub = BackgroundScrub(
            self.db, bytes_per_s=settings.scrub_bytes_per_s, counters=self.metrics
        )
        self.away = PostgresAway(settings.database_wait_max_s)
        self._away_reason: str | None = None
        """Why Postgres is away in the episode going on (`store.db.unavailable_reason`)."""
        self.survey = Survey(
            self.db,
            self.roots,
            worker_id=self.worker_id,
            digest=self.digest,
            membership_interval_s=settings.membership_interval_s,
            survey_interval_s=settings.survey_interval_s,
            schedule=self.schedule,
            metrics=self.metrics,
            log=self.log,
            stopping=lambda: self._stopping,
            projections=[projection.name for projection in self.projections],
        )
        self.health = Health(
            self.metrics.registry,
            stale_after_s=max(
                HEALTHZ_STALE_MIN_S,
                3 * settings.database_wait_max_s,
                3 * settings.membership_interval_s,
            ),
        )
        self.health.joined = self.survey.joined

    # --- control ----------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask the worker to stop (safe to call from a signal handler: the queue is reentrant)."""
        self._stopping = True
        self._events.put(_Event("stop"))

    def _hook(self, stage: CommitStage) -> None:
        self.health.turned()  # a long pass commits batch after batch: alive all along
        if stage == "before" and self._stopping:
            raise _Stopping

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        if self.settings.metrics_port is not None:
            self.metrics_port = serve(
                self.metrics.registry,
                self.health,
                self.settings.metrics_port,
                self.settings.metrics_address,
            )
            self.log.info(
                "metrics on port %d",
                self.metrics_port,
                fields={"metrics_port": self.metrics_port},
            )
        watcher = Watcher(
            self.roots,
            on_journal=lambda path: self._events.put(_Event("journal", path)),
            on_root=lambda root: self._events.put(_Event("root", root)),
            on_state=lambda up: self._events.put(_Event("watcher_up" if up else "watcher_down")),
        )
        self.log.info(
            "worker %s starts on %s (%s mode)",
            self.worker_id,
            counted(len(self.roots), "root"),
            self.settings.mode,
        )
        watcher.start()
        self.control.start()
        if self.housekeeping is not None:
            self.housekeeping.start()
        # What start-up made (modules, the parser, the settings) lives as long as the process:
        # moved out of the collector's generations, the full collections a busy loop triggers
        # no longer walk it each time (docs/performance.md, "Many books, a line each").
        gc.freeze()
        try:
            self._loop()
        except SchemaChanged as error:
            self.log.error(
                "%s: the worker takes no pass any more and exits, for its supervisor to start it "
                "on the new release",
                error,
                fields={
                    "schema_version": error.found_version,
                    "known_schema_version": error.known_version,
                },
            )
            raise
        finally:
            if self.housekeeping is not None:
                self.housekeeping.stop()
            self.control.stop()
            watcher.stop()
            self.db.close()  # ends the session: the other workers take the books over
        self.log.info("worker %s stopped", self.worker_id)
        return 0

    def _loop(self) -> None:
        survey = self.survey
        survey.rescan_roots = set(self.roots)
        while not self._stopping:
            self.health.turned()
            self._handle_events(self._wait_s())
            if self._stopping:
                break
            if self.away.away and (time.monotonic() < self.away.retry_at or not self._reconnect()):
                continue
            try:
                # In the loop, not before it: a Postgres away at start is waited for.
                if not self.health.schema_checked:
                    require_current(self.db)
                if not self._installed:
                    install(self.db, self.projections)
                    self._installed = True
                self.health.schema_checked = True
                self.schema.check(self.db)  # a query only when a look is due
                if not survey.announced:
                    survey.rescan()  # every book registered, none worked yet
                    survey.announce(application_name(self.worker_id, self.digest))
                if time.monotonic() >= survey.next_membership:
                    survey.refresh_membership()
                if survey.rescan_roots:
                    survey.rescan()
                if time.monotonic() >= survey.next_survey and not survey.surveying:
                    survey.run()
                if survey.surveying:
                    survey.step()  # one page; the passes due run before the next
                self._passes()
                # In the time the passes leave: it yields to any event, and to any pass due.
                self.scrub.step(
                    lambda: [book.book_id for book in survey.owned() if book.book_id],
                    lambda: (
                        self._stopping
                        or not self._events.empty()
                        or self.schedule.soonest(math.inf) <= time.monotonic()
                    ),
                )
            except (DatabaseUnavailable, DatabaseTimeout) as error:
                self._database_failed(error)
                continue
            # The work went through: only now is Postgres back, not when it took a connection
            # (a server whose disk is full, or that is read-only, takes one and writes nothing).
            if self.away.away:
                self._back()
            else:
                self.metrics.database_up.set(1)

    def _wait_s(self) -> float:
        now = time.monotonic()
        if self.away.away:
            return max(0.0, self.away.retry_at - now)
        if self.survey.rescan_roots or self.survey.surveying:
            return 0.0
        soonest = self.schedule.soonest(min(self.survey.next_membership, self.survey.next_survey))
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
                book = self.survey.books.get(event.path)
                if book is None:
                    self.survey.rescan_roots.add(event.path.parent)
                elif book.owned:
                    self.schedule.mark(book.path, "notify", event.at)
            elif event.kind == "root" and event.path is not None:
                self.survey.rescan_roots.add(event.path)
            elif event.kind == "book" and event.book_id is not None:
                book = self.survey.book_by_id(event.book_id)
                if book is not None and book.owned:
                    self.schedule.mark(book.path, "operator", event.at)
            elif event.kind == "resurvey":
                self.survey.next_survey = 0.0
            elif event.kind == "schema":
                self.schema.look_again()
            elif event.kind in ("watcher_up", "watcher_down"):
                self.metrics.watcher_up.set(1 if event.kind == "watcher_up" else 0)

    # --- passes -------------------------------------------------------------------------------

    def _passes(self) -> None:
        """The passes due, the longest waiting first. While a survey has pages left, at most
        `PASSES_BETWEEN_PAGES_S` of them before its next page: the books a survey finds behind
        (thousands, at start-up) wait for the survey to finish, a survey does not wait for all
        of their passes; a book that has waited longest still goes first.

        The books due go in groups (`group_pass`: one transaction for up to `GROUP_BOOKS_MAX`
        books; a book alone in being due is a group of one, which costs a third of the round
        trips of its own pass); a book whose last pass failed (its `trouble`) gets a pass of its
        own, as it always did."""
        ready = self.schedule.ready(time.monotonic())
        until = time.monotonic() + PASSES_BETWEEN_PAGES_S if self.survey.surveying else math.inf
        grouped: list[tuple[Book, Due]] = []
        for path in ready:
            if self._stopping or time.monotonic() >= until:
                break
            due = self.schedule.take(path)
            book = self.survey.books.get(path)
            if due is None or book is None or not book.owned or not book.book_id:
                continue
            if book.trouble is None:
                grouped.append((book, due))
                if len(grouped) >= GROUP_BOOKS_MAX:
                    self._group(grouped)
                    grouped = []
                continue
            self._pass(book, due)
            if book.vanished:
                self.survey.forget(book)
        if grouped:
            self._group(grouped)

    def _group(self, items: list[tuple[Book, Due]]) -> None:
        """One group pass over `items` (`group_pass.GroupPass`); the books it hands back get a
        pass of their own at once, the busy ones are tried again shortly.

        A group of one book does what the book's own pass did where they differ: a row of it
        another transaction holds (an operator's remedy) is waited for by its own pass (bounded,
        `database_timeout`), not left for later; and when the group lost the worker's session,
        the session is made again at once (logged as a pass that made it again:
        `_session_made_again`) and the book gets its own pass."""
        lone = len(items) == 1
        by_id = {book.book_id: (book, due) for book, due in items if book.book_id}
        group = GroupPass(
            self.db, mode=self.settings.mode, commit_hook=self._hook, projections=self.projections
        )
        try:
            report = group.run(list(by_id))
        except _Stopping:
            return
        except DatabaseUnavailable as error:
            if lone and self._made_again():
                self._alone(*items[0])
                return
            self.metrics.pass_failures.labels(type(error).__name__).inc()
            for book, due in items:
                self.schedule.retry(book.path, due)
            raise
        self.metrics.group_books.observe(len(report.passed))
        for book_id, pass_report in report.passed.items():
            book, due = by_id[book_id]
            self.metrics.passes.labels(due.trigger).inc()
            self._count(book, due, pass_report)
        for book_id in report.busy:
            book, due = by_id[book_id]
            if lone:
                self._alone(book, due)
                continue
            self.metrics.passes.labels(due.trigger).inc()
            self.schedule.busy(book.path, due)
        for book_id in report.alone:
            self._alone(*by_id[book_id])

    def _alone(self, book: Book, due: Due) -> None:
        """The book's own pass, now."""
        self._pass(book, due)
        if book.vanished:
            self.survey.forget(book)

    def _made_again(self) -> bool:
        """After a group of one lost the worker's session: connect once (bounded by the connect
        timeout); True when the session is made again (logged as such), False when Postgres is
        still away."""
        lost_at = time.monotonic()
        try:
            self.db.connect_once()
        except DatabaseUnavailable:
            return False
        self._session_made_again(time.monotonic() - lost_at)
        return True

    def _pass(self, book: Book, due: Due) -> None:
        assert book.book_id
        book_pass = BookPass(
            self.db,
            book.book_id,
            mode=self.settings.mode,
            commit_hook=self._hook,
            projections=self.projections,
        )
        self._run_pass(book, due, book_pass)  # a lost connection it could not make again: raised
        if book_pass.reconnected_after_s:
            self._session_made_again(sum(book_pass.reconnected_after_s))

    def _run_pass(self, book: Book, due: Due, book_pass: BookPass) -> None:
        metrics = self.metrics
        metrics.passes.labels(due.trigger).inc()
        started = time.monotonic()
        try:
            report = book_pass.run()
        except _Stopping:
            return
        except ProjectionFailed as error:
            # Shown by `show` on its attempt; never skipped.
            metrics.projection_failures.labels(error.projection).inc()
            self._book_failed(
                book, due, "ProjectionFailed", f"projection {error.projection} failed"
            )
            return
        except DatabaseTimeout:
            # A lock held on its rows, a projection's slow statement: shown by `show` as the
            # book's `database_timeout`. The pass held the worker for the whole bound, so the
            # wait is also at least `TIMED_OUT_WAIT_FACTOR` times what it took.
            took_s = time.monotonic() - started
            self._book_failed(
                book,
                due,
                "DatabaseTimeout",
                "a bounded wait of Postgres ran out",
                at_least_s=TIMED_OUT_WAIT_FACTOR * took_s,
            )
            return
        except DatabaseUnavailable as error:
            metrics.pass_failures.labels(type(error).__name__).inc()
            self.schedule.retry(book.path, due)
            raise
        except CursorMoved:
            metrics.pass_failures.labels("CursorMoved").inc()
            self.schedule.retry(book.path, due, wait_s=BUSY_RETRY_WAIT_S)
            return
        except NotFound:
            # The book's row is gone while its directory is here: Postgres was restored from a
            # backup (or a replica promoted) older than the book's registration. Registered
            # again, it is read from byte 0 and each of its lines applied once.
            metrics.pass_failures.labels("NotFound").inc()
            self.survey.registration_lost(book)
            return
        except (JournalUnreadable, DatabaseError) as error:
            # The book's own trouble (shown by `show` as its problem): the other books go on, and
            # the survey passes this one again when its journal changes.
            reason = type(error).__name__
            metrics.pass_failures.labels(reason).inc()
            if book.trouble != reason and isinstance(error, JournalUnreadable):
                metrics.problems.labels(error.kind).inc()  # once per episode, as it is logged
            if book.trouble != reason:
                self.log.warning(
                    "pass over %s could not finish: %s; the survey tries again", book.ref, reason
                )
            book.trouble = reason
            return
        if book.trouble is not None:
            self.log.info("pass over %s goes through again", book.ref)
            book.trouble = None
        self._count(book, due, report)

    def _book_failed(
        self, book: Book, due: Due, reason: str, what: str, *, at_least_s: float = 0.0
    ) -> None:
        """The pass failed for the book's own reason: tried again after a wait that doubles
        with each failure in a row (`Schedule.failed`), while the other books go on; one WARNING
        per episode."""
        self.metrics.pass_failures.labels(reason).inc()
        wait_s = self.schedule.failed(book.path, due, at_least_s=at_least_s)
        if book.trouble != reason:
            self.log.warning("pass over %s: %s; tried again in %.1f s", book.ref, what, wait_s)
        book.trouble = reason

    def _count(self, book: Book, due: Due, report: PassReport) -> None:
        metrics = self.metrics
        if report.busy:
            self.schedule.busy(book.path, due)
            return
        self.schedule.went_through(book.path)
        if report.lines_applied:
            metrics.lines_applied.inc(report.lines_applied)
            metrics.apply_seconds.observe(time.monotonic() - due.woken_at)
        if report.duplicates:
            metrics.duplicates.inc(report.duplicates)
        for problem in report.problems:
            metrics.problems.labels(problem.kind).inc()

    # --- Postgres away --------------------------------------------------------------------------

    def _database_failed(self, error: DatabaseError) -> None:
        """Postgres cannot do the work: the episode begins (one WARNING, with why: the reason
        and SQLSTATE, also in the metrics), or goes on, each try after a longer wait."""
        reason, sqlstate = unavailable_reason(error), error.sqlstate or "client"
        self.metrics.database_down(reason, sqlstate)
        self.metrics.database_errors.labels(type(error).__name__).inc()
        fields = {"reason": reason, "sqlstate": sqlstate}
        if self.away.failed(time.monotonic()):
            self.log.warning(
                "Postgres is away (%s, SQLSTATE %s); the worker waits and tries again",
                reason,
                sqlstate,
                fields=fields,
            )
        elif reason != self._away_reason:
            self.log.info(
                "Postgres is still away, now %s (SQLSTATE %s)", reason, sqlstate, fields=fields
            )
        self._away_reason = reason

    def _session_made_again(self, waited_s: float) -> None:
        """A pass lost the worker's session and made it again itself (a network cut that healed
        while it tried, Postgres restarted, the backend ended): no away episode began, yet the
        session, hence the worker's membership, had ended, and the other workers may have taken
        its books meanwhile. Logged once at WARNING like an episode's end, and the membership and
        the safety pass are looked at again at once, as after `_reconnect`."""
        self.metrics.database_errors.labels("DatabaseUnavailable").inc()
        self.log.warning(
            "Postgres was away: a pass lost the worker's session and made it again after %.1f s;"
            " every book goes on from its cursor",
            waited_s,
        )
        self.survey.next_membership = 0.0
        self.survey.next_survey = 0.0
        self.schema.look_again()

    def _reconnect(self) -> bool:
        """Try once to connect; the episode goes on until the work goes through (`_back`)."""
        try:
            self.db.connect_once()
        except DatabaseUnavailable as error:
            self._database_failed(error)
            return False
        # What was due before (a pass Postgres interrupted, a notification) is still scheduled;
        # what was missed meanwhile shows as lag: the safety pass, at once, measures every book in
        # pages and passes only those behind, not every book (10,000 idle books would each get a
        # pass after every outage).
        self.survey.next_membership = 0.0
        self.survey.next_survey = 0.0
        self.schema.look_again()
        return True

    def _back(self) -> None:
        down_s = self.away.back(time.monotonic())
        self._away_reason = None
        self.metrics.database_back()
        self.log.warning(
            "Postgres is back after %.1f s; every book goes on from its cursor", down_s
        )

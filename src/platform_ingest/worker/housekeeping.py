"""The worker's housekeeping: compaction of quiet attempts, on a thread and a connection of its
own, so that it never holds up a pass.

Every `interval_s` it compacts what has been quiet for `quiet_for_s` (`compact.compact_quiet`,
a bounded number of attempts a round). Several workers may do it at once: compaction takes the
book's advisory lock and compares before it writes, so the only cost of a race is a read done
twice. A failure (Postgres away) is logged once per episode (a WARNING; the rounds that fail after
it, at DEBUG), and the next round tries again; it never stops the worker.
"""

from __future__ import annotations

import logging
import threading

from .._logs import FieldsLogger
from .._plain import counted
from ..errors import IngestError
from ..operate.compact import compact_quiet
from ..store.db import Database, DatabaseSettings
from .metrics import Metrics

logger = logging.getLogger("platform_ingest")

APPLICATION_NAME = "platform-ingest housekeeping"
"""Not a worker's name: membership counts only the workers' own sessions."""


class Housekeeping:
    """A daemon thread that compacts quiet attempts until `stop`."""

    def __init__(
        self,
        dsn: str,
        *,
        quiet_for_s: float,
        interval_s: float,
        database_settings: DatabaseSettings,
        metrics: Metrics,
        log: FieldsLogger,
    ) -> None:
        self.quiet_for_s = quiet_for_s
        self.interval_s = interval_s
        self.metrics = metrics
        self.log = log
        self.db = Database(dsn, database_settings, application_name=APPLICATION_NAME)
        self.failing = False
        """The last round failed: the next failures of the episode are not warned of again."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="housekeeping", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop after the bounded step in progress (a page read, a chunk deleted)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.db.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.round()

    def round(self) -> None:
        """One round of compaction (the thread's loop body; tests call it directly)."""
        try:
            report = compact_quiet(
                self.db, quiet_for_s=self.quiet_for_s, stopping=self._stop.is_set
            )
        except IngestError as error:
            level = logging.DEBUG if self.failing else logging.WARNING
            self.log.log(level, "housekeeping: compaction failed (%s); next round later", error)
            self.failing = True
            self.db.close()  # a fresh connection next round
            return
        if self.failing:
            self.log.info("housekeeping: compaction goes on")
            self.failing = False
        if report.compacted:
            self.metrics.attempts_compacted.inc(len(report.compacted))
            self.log.info(
                "housekeeping: %s compacted, %s deleted",
                counted(len(report.compacted), "attempt"),
                counted(report.rows_deleted, "line hash", "line hashes"),
            )

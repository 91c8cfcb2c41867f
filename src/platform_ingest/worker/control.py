"""The worker's ear for operators: a connection of its own that LISTENs on `platform_ingest_control`.

`name`, `release`, every remedy and the launcher's `exited` bump the book's scan epoch, and a
trigger (schema step 4) sends the book's id on that channel when their transaction commits. The
listener hands each id to the worker's loop, which passes the book at once if it is the worker's
(`operator` trigger), instead of at its next safety pass.

It also LISTENs on `platform_ingest_schema`, where `migrate` says it changed the schema: the
listener calls `on_schema`, and the worker looks at the schema version at once (`schema_watch`).

The listener's session is announced as `platform-ingest listener <worker id>`, never as a worker,
so membership does not count it. When its connection is lost it connects again after a jittered
wait that grows to 5 s; notifications sent meanwhile are lost, so it asks the worker for a safety
pass once it is back (the survey measures every book, named and released ones included). Nothing
here touches a cursor: a missed notification costs time, never correctness.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .._backoff import Backoff
from ..store import statements
from ..store.db import Database, DatabaseSettings

logger = logging.getLogger("platform_ingest")

WAKE_S = 1.0
"""How often the listening thread looks at its stop flag while no notification comes."""


class ControlListener:
    """Hands the id of each book an operator changed to `on_book`; calls `on_reconnected` after
    its connection came back (what was sent meanwhile is lost), and `on_schema` when `migrate`
    changed the schema."""

    def __init__(
        self,
        dsn: str,
        *,
        worker_id: str,
        settings: DatabaseSettings,
        on_book: Callable[[str], None],
        on_reconnected: Callable[[], None],
        on_schema: Callable[[], None] = lambda: None,
    ) -> None:
        self._db = Database(
            dsn, settings, application_name=f"platform-ingest listener {worker_id}"[:63]
        )
        self._on_book = on_book
        self._on_reconnected = on_reconnected
        self._on_schema = on_schema
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ingest-control", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=WAKE_S * 5)
        self._db.close()

    def _run(self) -> None:
        backoff = Backoff(0.2, 5.0, jitter=0.5)
        lost = False
        while not self._stop.is_set():
            try:
                self._db.connect_once()
                self._db.listen(statements.LISTEN_CONTROL)
                self._db.listen(statements.LISTEN_SCHEMA)
                if lost:
                    logger.info("the control listener is back")
                    self._on_reconnected()
                lost = False
                backoff.reset()
                self._listen()
            except Exception as error:  # noqa: BLE001 - whatever stops it: wait, connect again
                # A lost connection is a `DatabaseError`; anything else must not kill the thread
                # either (the worker would silently fall back to its safety pass for good).
                if not lost:
                    logger.warning(
                        "the control listener lost Postgres (%s); operators' changes reach "
                        "this worker at its safety pass until it is back",
                        type(error).__name__,
                    )
                lost = True
                self._stop.wait(backoff.next_s())

    def _listen(self) -> None:
        while not self._stop.is_set():
            for notify in self._db.notifications(WAKE_S):
                if notify.channel == statements.CHANNEL_SCHEMA:
                    self._on_schema()
                else:
                    self._on_book(notify.payload)

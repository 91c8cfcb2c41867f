"""Postgres through psycopg 3: the one execute helper, bounded waits, and driver errors translated.

Every statement goes through `Database.execute` (or `fetch_*`), which refuses a text that is not
in `_sql.STATEMENTS`. Every wait is bounded: the connection is made with `connect_timeout`, and the
session carries `statement_timeout`, `lock_timeout` and `idle_in_transaction_session_timeout`, so a
stuck server or a held lock becomes a `DatabaseTimeout` that shows, never a hang.

Driver errors are translated here and only here (`_translated`): a lost connection becomes
`DatabaseUnavailable`, a timeout `DatabaseTimeout` (both retryable by the caller, who then re-reads
its cursor from Postgres), anything else `DatabaseError`. Nothing is retried in this module.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg.errors

from ._sql import LISTED_TEXTS, Statement
from .errors import DatabaseError, DatabaseTimeout, DatabaseUnavailable, IngestError

logger = logging.getLogger("platform_ingest")

Row = dict[str, Any]
StatementHook = Callable[[Statement], None]


@dataclass(frozen=True)
class DatabaseSettings:
    """Bounds on every wait. Times are in the unit their name ends with."""

    statement_timeout_ms: int = 30_000
    lock_timeout_ms: int = 5_000
    idle_in_transaction_timeout_ms: int = 60_000
    connect_timeout_s: int = 10
    reconnect_attempts_max: int = 40
    reconnect_wait_s: float = 0.25
    reconnect_wait_max_s: float = 2.0
    tcp_keepalive_idle_s: int = 10
    """A client that vanished (host down, network cut) is noticed by the server after about
    `idle + interval * count` seconds; its session, and the worker's share of books, ends then."""
    tcp_keepalive_interval_s: int = 5
    tcp_keepalive_count: int = 3


_statement_hook: StatementHook | None = None


def set_statement_hook(hook: StatementHook | None) -> None:
    """Call `hook` with every statement before it is sent (tests record what runs)."""
    global _statement_hook  # noqa: PLW0603 - one process-wide observation point, off by default
    _statement_hook = hook


@contextmanager
def _translated() -> Iterator[None]:
    """Translate psycopg's errors into this package's, keeping the driver error as the cause."""
    try:
        yield
    except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as error:
        raise DatabaseTimeout(f"Postgres wait passed its bound: {error}") from error
    except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure) as error:
        raise DatabaseTimeout(f"Postgres aborted a transaction to break a wait: {error}") from error
    except (psycopg.OperationalError, psycopg.InterfaceError) as error:
        raise DatabaseUnavailable(f"Postgres connection lost or refused: {error}") from error
    except psycopg.Error as error:
        raise DatabaseError(f"Postgres refused the operation: {error}") from error


class Database:
    """One connection (autocommit; writes go through `transaction()`), made on first use."""

    def __init__(
        self,
        dsn: str,
        settings: DatabaseSettings | None = None,
        *,
        application_name: str = "platform-ingest",
    ) -> None:
        self.dsn = dsn
        self.settings = settings or DatabaseSettings()
        self.application_name = application_name
        """Shown in `pg_stat_activity`; a worker's session announces the worker by it."""
        self._connection: psycopg.Connection[Any] | None = None

    def _connect(self) -> psycopg.Connection[Any]:
        settings = self.settings
        options = (
            f"-c statement_timeout={settings.statement_timeout_ms}"
            f" -c lock_timeout={settings.lock_timeout_ms}"
            f" -c idle_in_transaction_session_timeout={settings.idle_in_transaction_timeout_ms}"
            f" -c tcp_keepalives_idle={settings.tcp_keepalive_idle_s}"
            f" -c tcp_keepalives_interval={settings.tcp_keepalive_interval_s}"
            f" -c tcp_keepalives_count={settings.tcp_keepalive_count}"
        )
        with _translated():
            return psycopg.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=settings.connect_timeout_s,
                options=options,
                application_name=self.application_name,
                keepalives=1,
                keepalives_idle=settings.tcp_keepalive_idle_s,
                keepalives_interval=settings.tcp_keepalive_interval_s,
                keepalives_count=settings.tcp_keepalive_count,
            )

    @property
    def connection(self) -> psycopg.Connection[Any]:
        if self._connection is None or self._connection.closed:
            self._connection = self._connect()
        return self._connection

    @property
    def is_open(self) -> bool:
        """True while the current connection is usable (never connects)."""
        return self._connection is not None and not self._connection.closed

    @property
    def backend_pid(self) -> int:
        """The server process of this connection (tests use it to kill the connection)."""
        return self.connection.info.backend_pid

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def connect_once(self) -> None:
        """Drop the connection and try once to make a new one (bounded by `connect_timeout_s`);
        `DatabaseUnavailable` when the server is still away. The caller owns the waiting."""
        self.close()
        self._connection = self._connect()

    def reconnect(self) -> None:
        """Drop the connection and make a new one, waiting (bounded) while the server is away."""
        self.close()
        settings = self.settings
        wait_s = settings.reconnect_wait_s
        for attempt in range(1, settings.reconnect_attempts_max + 1):
            try:
                self._connection = self._connect()
                return
            except DatabaseUnavailable:
                if attempt == settings.reconnect_attempts_max:
                    raise
                logger.info("Postgres unavailable; reconnect attempt %d waits", attempt)
                time.sleep(wait_s)
                wait_s = min(wait_s * 2, settings.reconnect_wait_max_s)

    def _cursor(self, statement: Statement, params: Sequence[Any]) -> psycopg.Cursor[Any]:
        if statement.text not in LISTED_TEXTS:
            raise IngestError(f"statement {statement.name!r} is not in the listed statements")
        if _statement_hook is not None:
            _statement_hook(statement)
        return self.connection.execute(statement.text, params)

    def execute(self, statement: Statement, params: Sequence[Any] = ()) -> int:
        """Run one listed statement; return its rowcount."""
        with _translated():
            return self._cursor(statement, params).rowcount

    def fetch_all(self, statement: Statement, params: Sequence[Any] = ()) -> list[Row]:
        """Run one listed statement and return its rows as dicts."""
        with _translated():
            cursor = self._cursor(statement, params)
            names = [column.name for column in cursor.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def fetch_tuples(self, statement: Statement, params: Sequence[Any] = ()) -> list[Any]:
        """Run one listed statement and return its rows as tuples (hot paths)."""
        with _translated():
            return self._cursor(statement, params).fetchall()

    def fetch_one(self, statement: Statement, params: Sequence[Any] = ()) -> Row | None:
        rows = self.fetch_all(statement, params)
        return rows[0] if rows else None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Commit on success, roll back on error; a failed rollback never hides the first error.

        A connection lost mid-transaction raises `DatabaseUnavailable`: nothing of the transaction
        was committed unless the commit itself was acknowledged.
        """
        with _translated(), self.connection.transaction():
            yield

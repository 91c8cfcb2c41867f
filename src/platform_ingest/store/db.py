"""Postgres through psycopg 3: the one execute helper, bounded waits, and driver errors translated.

Every statement goes through `Database.execute` (or `fetch_*`, or `copy` for a listed binary
`COPY ... FROM STDIN`), which refuses a text that is not in `statements.STATEMENTS`. Every wait is
bounded: the connection is made with `connect_timeout`, and the session carries
`statement_timeout`, `lock_timeout` and `idle_in_transaction_session_timeout`, so a stuck server or
a held lock becomes a `DatabaseTimeout` that shows, never a hang. A network cut is bounded by the
kernel on both ends of the socket, whatever was in flight when it came: TCP keepalive probes a
connection with nothing unacknowledged, and `tcp_user_timeout` drops one whose sent data stays
unacknowledged (keepalive never probes those); the lost connection is `DatabaseUnavailable`
(docs/platform/workers.md, "A host cut off from Postgres").

Driver errors are translated here and only here (`_translated`), by SQLSTATE class: a lost
connection or a server in trouble becomes `DatabaseUnavailable`, and a server that answers but
writes nothing (disk full, read-only) its `DatabaseRefusesWrites`; a timeout `DatabaseTimeout`
(all retryable by the caller, who then re-reads its cursor from Postgres), a value Postgres cannot
store (classes 22, 23, 54) `DataRefused` (the problem of the book whose lines carry it, never a
reason to reconnect), anything else `DatabaseError`. `unavailable_reason` names, by the same
SQLSTATE, why the database is away (the worker's metrics and logs show it). Nothing is retried in this module. (The
caller may know better for one statement: a unique violation of the line hashes' COPY means another
pass applied the line, and `apply` raises it as `CursorMoved`.)
"""

from __future__ import annotations

import getpass
import logging
import os
import re
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import psycopg.conninfo
import psycopg.errors
import psycopg.pq
from psycopg.rows import BaseRowFactory, dict_row, tuple_row

from .._backoff import Backoff
from ..errors import (
    DatabaseAuthenticationFailed,
    DatabaseError,
    DatabaseRefusesWrites,
    DatabaseTimeout,
    DatabaseUnavailable,
    DataRefused,
    IngestError,
)
from .copy_data import copy_data
from .statement import Statement
from .statements import LISTED_TEXTS, PLANS_DISCARD

logger = logging.getLogger("platform_ingest")

Row = dict[str, Any]
Params = Sequence[Any] | Mapping[str, Any]
"""A statement's parameters: positional (`%s`), or by name (`%(name)s`) for one that names them."""
StatementHook = Callable[[Statement], None]
T = TypeVar("T")


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
    """A peer that vanished (host down, network cut) while the connection had nothing
    unacknowledged is noticed after about `idle + interval * count` seconds, on both ends; the
    worker's session, and its share of books, ends then."""
    tcp_keepalive_interval_s: int = 5
    tcp_keepalive_count: int = 3
    tcp_user_timeout_ms: int = 25_000
    """How long data sent on the connection may stay unacknowledged before the kernel drops it, on
    both ends (libpq's `tcp_user_timeout`, and the server's for this session). Keepalive never
    probes a socket with unacknowledged data: without this bound, a cut that comes while a reply
    or a statement is in flight keeps the session for as long as the kernel retransmits (about 15
    minutes with Linux's defaults), and the worker's books with it. The same as the keepalive's
    `idle + interval * count`, so a cut ends the session 25 s after the last byte sent or received
    on it, however it lands (a keepalive probe past this time also ends it)."""


_statement_hook: StatementHook | None = None


def set_statement_hook(hook: StatementHook | None) -> None:
    """Call `hook` with every statement before it is sent (tests record what runs)."""
    global _statement_hook  # noqa: PLW0603 - one process-wide observation point, off by default
    _statement_hook = hook


_REFUSES_WRITES_STATES = frozenset({"53100", "25006"})
"""disk_full, read_only_sql_transaction: the server answers, and writes nothing (its disk is full;
it is a hot standby, or `default_transaction_read_only` is on). Every book's writes meet the same
refusal, and connecting again changes nothing until the disk or the setting does."""
_UNAVAILABLE_STATES = frozenset({"57P01", "57P02", "57P03"})
"""admin_shutdown, crash_shutdown, cannot_connect_now: the server is going or not yet back."""
_TIMEOUT_STATES = frozenset({"57014", "55P03", "40001", "40P01", "25P03"})
"""query_canceled (statement_timeout), lock_not_available (lock_timeout), serialization_failure,
deadlock_detected, idle_in_transaction_session_timeout: a bounded wait ran out."""
_SERVER_CLASSES = frozenset({"08", "53", "58"})
"""connection exception, insufficient resources (disk full, out of memory, too many
connections), system error: the server's trouble, the same for every book."""
_DATA_CLASSES = frozenset({"22", "23", "54"})
"""data exception, integrity constraint violation, program limit exceeded: Postgres cannot store
the values one book's lines carry. That book's problem, never a reason to reconnect."""


def classify(error: psycopg.Error) -> type[DatabaseError]:
    """The error class of a driver error, by its SQLSTATE (its class, the first two characters),
    never by the driver's exception type: psycopg raises `ProgramLimitExceeded` (an index row too
    large for one book's value) as an `OperationalError`, as it does a lost connection.

    An error with no SQLSTATE was raised by the client: `DataError` when psycopg refused to send a
    value (a NUL in text), otherwise the connection is gone.
    """
    state = error.sqlstate
    if state is None:
        if isinstance(error, psycopg.DataError):
            return DataRefused
        return DatabaseUnavailable
    if state in _TIMEOUT_STATES:
        return DatabaseTimeout
    if state in _REFUSES_WRITES_STATES:
        return DatabaseRefusesWrites
    if state in _UNAVAILABLE_STATES or state[:2] in _SERVER_CLASSES:
        return DatabaseUnavailable
    if state[:2] in _DATA_CLASSES:
        return DataRefused
    return DatabaseError


_REASONS = {
    "53100": "disk_full",
    "53200": "out_of_memory",
    "53300": "too_many_connections",
    "25006": "read_only",
    "57P01": "shutting_down",
    "57P02": "crashed",
    "57P03": "starting_up",
}
_REASONS_OF_CLASSES = {"08": "unreachable", "53": "insufficient_resources", "58": "system_error"}


def unavailable_reason(error: DatabaseError) -> str:
    """Why Postgres cannot do the work, by the error's SQLSTATE (its class when the code itself
    is not named): `disk_full`, `read_only`, `unreachable` (a lost or refused connection: class
    08, or raised by the client with no SQLSTATE), `shutting_down`, `starting_up`, `timeout`, ...
    One of a short fixed list, so that a metric may carry it as a label."""
    state = error.sqlstate
    if state is None:
        return "unreachable"
    if state in _TIMEOUT_STATES:
        return "timeout"
    return _REASONS.get(state) or _REASONS_OF_CLASSES.get(state[:2], "error")


_AUTHENTICATION_REFUSALS = (
    (re.compile(r'password authentication failed for user "(?P<role>[^"]*)"'), "28P01"),
    (re.compile(r"fe_sendauth: no password supplied"), "28P01"),
    (re.compile(r'role "(?P<role>[^"]*)" does not exist'), "28000"),
    (
        re.compile(r'pg_hba\.conf (?:entry for|rejects connection for) .*user "(?P<role>[^"]*)"'),
        "28000",
    ),
    (re.compile(r'authentication failed for user "(?P<role>[^"]*)"'), "28000"),
)
"""How libpq words a login the server refused. The SQLSTATE of a refusal during the start-up of
a connection does not reach psycopg's error (it is None, as for a lost connection); its message
does, and these are the server's words for 28P01 (invalid_password) and 28000
(invalid_authorization_specification)."""


def _authentication_refusal(error: psycopg.Error, dsn: str) -> DatabaseAuthenticationFailed | None:
    """The refused login a connection error tells of, naming the role, or None."""
    message = str(error)
    for pattern, state in _AUTHENTICATION_REFUSALS:
        found = pattern.search(message)
        if found is None:
            continue
        role = found.groupdict().get("role") or _dsn_user(dsn)
        return DatabaseAuthenticationFailed(
            f'Postgres refused to authenticate role "{role}" (SQLSTATE {state}): '
            f"{_first_line(error)}",
            sqlstate=state,
            role=role,
        )
    return None


def _dsn_user(dsn: str) -> str:
    """The role a DSN logs in as (libpq's default, the system user, when it names none)."""
    try:
        user = psycopg.conninfo.conninfo_to_dict(dsn).get("user")
    except psycopg.ProgrammingError:
        user = None
    return str(user or os.environ.get("PGUSER") or getpass.getuser())


_MESSAGES: dict[type[DatabaseError], str] = {
    DatabaseTimeout: "Postgres wait passed its bound or broke a deadlock",
    DatabaseRefusesWrites: "Postgres takes no writes",
    DatabaseUnavailable: "Postgres connection lost or refused",
    DataRefused: "Postgres cannot store a value of this book",
    DatabaseError: "Postgres refused the operation",
}


@contextmanager
def _translated(connecting_to: str | None = None) -> Iterator[None]:
    """Translate psycopg's errors into this package's (`classify`), keeping the driver error as
    the cause and its SQLSTATE on the new error. While connecting (`connecting_to`, the DSN), a
    login the server refused is `DatabaseAuthenticationFailed`, naming the role."""
    try:
        yield
    except psycopg.Error as error:
        if connecting_to is not None and error.sqlstate is None:
            refused = _authentication_refusal(error, connecting_to)
            if refused is not None:
                raise refused from error
        kind = classify(error)
        state = error.sqlstate or "client"
        message = f"{_MESSAGES[kind]} (SQLSTATE {state}): {_first_line(error)}"
        raise kind(message, sqlstate=error.sqlstate) from error
    except UnicodeEncodeError as error:
        # psycopg encodes text parameters itself; a string it cannot encode never reached Postgres.
        raise DataRefused(f"{_MESSAGES[DataRefused]} (not encodable: {error.reason})") from error


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _check_listed(statement: Statement, *kinds: str) -> None:
    """Refuse a statement that is not listed, or not of one of `kinds` (a COPY runs only through
    `Database.copy`, and nothing else does); then show it to the statement hook."""
    if statement.text not in LISTED_TEXTS:
        raise IngestError(f"statement {statement.name!r} is not in the listed statements")
    if statement.kind not in kinds:
        raise IngestError(
            f"statement {statement.name!r} of kind {statement.kind!r} cannot run here"
        )
    if _statement_hook is not None:
        _statement_hook(statement)


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
            f" -c tcp_user_timeout={settings.tcp_user_timeout_ms}"
        )
        with _translated(self.dsn):
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
                tcp_user_timeout=settings.tcp_user_timeout_ms,
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
    def in_transaction(self) -> bool:
        """True while a transaction is open on the connection and no statement of it failed."""
        return self.connection.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS

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
        backoff = Backoff(settings.reconnect_wait_s, settings.reconnect_wait_max_s)
        for attempt in range(1, settings.reconnect_attempts_max + 1):
            try:
                self._connection = self._connect()
                return
            except DatabaseUnavailable:
                if attempt == settings.reconnect_attempts_max:
                    raise
                logger.info("Postgres unavailable; reconnect attempt %d waits", attempt)
                time.sleep(backoff.next_s())

    def _cursor(
        self, statement: Statement, params: Params, row_factory: BaseRowFactory[T]
    ) -> psycopg.Cursor[T]:
        """Execute one listed statement on a new cursor whose rows `row_factory` makes."""
        _check_listed(statement, "query", "ddl")
        cursor = self.connection.cursor(row_factory=row_factory)
        return cursor.execute(statement.text, params)

    def copy(self, statement: Statement, columns: Sequence[Sequence[Any]]) -> int:
        """Run one listed binary `COPY ... FROM STDIN` (kind "copy") of the rows whose values
        `columns` holds (one sequence a column, of the statement's `types`), sent as one piece of
        data (`copy_data`); return the rows Postgres wrote. Inside a `transaction()` the rows are
        written with it, or not at all."""
        _check_listed(statement, "copy")
        try:
            data = copy_data(statement.types, columns)
        except (struct.error, UnicodeEncodeError) as error:
            raise DataRefused(f"{_MESSAGES[DataRefused]} (not encodable: {error})") from error
        with _translated():
            cursor = self.connection.cursor()
            with cursor.copy(statement.text) as copy:
                copy.write(data)
            return cursor.rowcount

    def listen(self, statement: Statement) -> None:
        """Run one listed `LISTEN` (kind "session") on this connection: its notifications then
        come through `notifications`."""
        with _translated():
            _check_listed(statement, "session")
            self.connection.execute(statement.text)

    def discard_plans(self) -> None:
        """Forget the query plans this session has cached, keeping its prepared statements: each
        is planned again, with the tables as they are now, on its next run. Postgres keeps a
        prepared statement's generic plan until the table is analyzed, whatever rows arrive
        meanwhile; a plan made while `attempts` or `books` was nearly empty (a worker's start
        over many new books) scans the whole table on every page of a survey until autovacuum
        first analyzes it (docs/performance.md, "How cost grows with the work")."""
        with _translated():
            _check_listed(PLANS_DISCARD, "session")
            self.connection.execute(PLANS_DISCARD.text)

    def notifications(self, timeout_s: float) -> Iterator[psycopg.Notify]:
        """The notifications of the channels this connection listens on that arrive within
        `timeout_s` (those already received first); errors translated as for a statement."""
        with _translated():
            yield from self.connection.notifies(timeout=timeout_s)

    def execute(self, statement: Statement, params: Params = ()) -> int:
        """Run one listed statement; return its rowcount."""
        with _translated():
            return self._cursor(statement, params, tuple_row).rowcount

    def fetch_all(self, statement: Statement, params: Params = ()) -> list[Row]:
        """Run one listed statement and return its rows as dicts (`dict_row`)."""
        with _translated():
            return self._cursor(statement, params, dict_row).fetchall()

    def fetch_tuples(self, statement: Statement, params: Params = ()) -> list[Any]:
        """Run one listed statement and return its rows as tuples (hot paths)."""
        with _translated():
            return self._cursor(statement, params, tuple_row).fetchall()

    def fetch_together(self, queries: Sequence[tuple[Statement, Params]]) -> list[list[Row]]:
        """Run listed statements in one round trip (psycopg's pipeline mode: sent together, then
        their results read), in order; each one's rows as dicts. A statement that fails raises
        as alone, and those after it do not run."""
        with _translated():
            return [cursor.fetchall() for cursor in self._together(queries, dict_row)]

    def execute_together(self, queries: Sequence[tuple[Statement, Params]]) -> list[int]:
        """`fetch_together` for statements whose rowcounts are all that is needed."""
        with _translated():
            return [cursor.rowcount for cursor in self._together(queries, tuple_row)]

    def _together(
        self, queries: Sequence[tuple[Statement, Params]], row_factory: BaseRowFactory[T]
    ) -> list[psycopg.Cursor[T]]:
        """The cursors of `queries` once all their results are back (one round trip)."""
        with self.connection.pipeline():
            return [self._cursor(statement, params, row_factory) for statement, params in queries]

    def fetch_one(self, statement: Statement, params: Params = ()) -> Row | None:
        """Run one listed statement and return its first row as a dict, or None (`fetchone`)."""
        with _translated():
            return self._cursor(statement, params, dict_row).fetchone()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Commit on success, roll back on error; a failed rollback never hides the first error.

        A connection lost mid-transaction raises `DatabaseUnavailable`: nothing of the transaction
        was committed unless the commit itself was acknowledged.
        """
        with _translated(), self.connection.transaction():
            yield

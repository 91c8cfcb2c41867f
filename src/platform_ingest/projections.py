"""Projections: your own effects, committed in the apply transaction with the platform's cursor.

A projection is any object with a `name`, a `version`, and two methods:

    class Ledger:
        name = "ledger"
        version = 1

        def setup(self, session: ProjectionSession) -> None:
            session.execute("CREATE TABLE IF NOT EXISTS ledger_entries (...)")

        def apply(self, session: ProjectionSession, events: Sequence[Event]) -> None:
            for event in events:
                if event.type == "spend":
                    session.execute("INSERT INTO ledger_entries ...", (...))

`apply` is called inside the transaction that commits a batch of lines: once per attempt the batch
moved, with that attempt's events in seq order. What it writes commits with the lines' effects and
the cursor, or not at all. The projection never commits: the platform owns the transaction.

Its SQL goes through `ProjectionSession`, which refuses what would break the platform's promises:
transaction control (COMMIT, ROLLBACK, SAVEPOINT, ...), session changes (SET ROLE, SET SESSION,
RESET, DISCARD, LISTEN), several statements in one text, and DDL or locks on the platform's own
tables. The platform's tables are written only by its listed statements (`statements.STATEMENTS`): the
apply transaction compares Postgres's own count of the rows this transaction inserted, updated and
deleted in each of them (`pg_stat_xact_user_tables`) before and after the projections ran, so a
write by any route (a statement, a function, a trigger) refuses the batch. This guards against
mistakes; a projection is code the operator chose to run, inside the worker's process.

An exception from `apply` (or a refused statement) rolls the whole batch back, cursor included;
the attempt shows `error: {"kind": "projection_failed", ...}` in `show --json`, and the book is
tried again after a growing wait (docs/how-to/write-a-projection.md).

A projection joins late, or changes its `version`: `platform-ingest rebuild` (`rebuild`) catches
it up from the journals still on disk. A projection whose version can change also has
`reset(session)`, which empties its tables before the rebuild gives it every line again.

Projections are named on the command line as `package.module:object` (an instance, or a class or
function called with no arguments that returns one), or by the name of an entry point of the group
`platform_ingest.projections` offered by an installed package.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from .errors import ProjectionInvalid, ProjectionStatementRefused
from .store.driver import Composable, Connection
from .store.migrations import PLATFORM_TABLES

__all__ = [
    "ENTRY_POINT_GROUP",
    "Event",
    "Projection",
    "ProjectionSession",
    "check_projections",
    "load_projection",
]

ENTRY_POINT_GROUP = "platform_ingest.projections"
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,62}")
"""A projection's name: a lower-case identifier of at most 63 characters (it is a key in
Postgres, in logs and in metric labels)."""
VERSION_MAX = 2**31 - 1


class Event(NamedTuple):
    """One applied line, with the run's context. `data` is the line's `data` object as decoded
    (unknown fields kept); money in it is integer micro-USD. (A named tuple: a batch makes one per
    line, and a tuple is built in C.)"""

    book_id: str
    run_id: int
    attempt_id: int
    engine_run_id: str
    seq: int
    type: str
    time: str
    data: Mapping[str, Any]


@runtime_checkable
class Projection(Protocol):
    """What the platform calls. `name` (see `NAME_PATTERN`) and `version` (an int >= 1) say whose
    data a table holds: a new version is caught up by `platform-ingest rebuild`."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> int: ...

    def setup(self, session: ProjectionSession) -> None:
        """Create the projection's tables if they are not there (called once per process and
        database, in a transaction of its own). Must be idempotent."""

    def apply(self, session: ProjectionSession, events: Sequence[Event]) -> None:
        """Apply one attempt's events of a batch, in seq order, inside the apply transaction."""


_FORBIDDEN_START = re.compile(
    r"\s*(?:COMMIT|ROLLBACK|BEGIN|START|SAVEPOINT|RELEASE|END|ABORT|PREPARE|LISTEN|UNLISTEN"
    r"|RESET|DISCARD|SET\s+(?:SESSION|ROLE|TRANSACTION|LOCAL\s+ROLE))\b",
    re.IGNORECASE,
)
_PLATFORM_TABLE = re.compile(
    r'(?<![\w$"])"?(' + "|".join(sorted(PLATFORM_TABLES)) + r')"?(?![\w$])', re.IGNORECASE
)

_QUOTED_OR_COMMENT = re.compile(
    r"'(?:[^']|'')*'"  # a string literal
    r"|\$(?P<tag>[A-Za-z_]*)\$.*?\$(?P=tag)\$"  # a dollar-quoted body (a DO block, a function)
    r"|--[^\n]*"  # a line comment
    r"|/\*.*?\*/",  # a block comment
    re.DOTALL,
)
"""What is not SQL code at the top level: a `;` or a keyword inside it separates nothing. (A
quoted identifier is kept: it names a table.)"""
_DDL_START = re.compile(
    r"\s*(?:TRUNCATE|ALTER|DROP|CREATE|COMMENT|GRANT|REVOKE|LOCK|VACUUM|CLUSTER|REINDEX"
    r"|SECURITY|ANALYZE)\b",
    re.IGNORECASE,
)
"""Statements the row counts cannot see: refused when they name a platform table."""

Query = str | bytes | Composable


class ProjectionSession:
    """The apply transaction's connection, as a projection may use it (see the module's
    docstring for what it refuses)."""

    def __init__(self, connection: Connection[Any], projection: str) -> None:
        self._connection = connection
        self.projection = projection
        self.statements = 0
        """How many statements the projection ran through this session."""

    def _checked(self, query: Query) -> Query:
        if isinstance(query, Composable):
            text = query.as_string(self._connection)
        elif isinstance(query, bytes):
            text = query.decode("utf-8", "replace")
        else:
            text = query
        code = _QUOTED_OR_COMMENT.sub(" ", text)
        if _FORBIDDEN_START.match(code) or ";" in code.rstrip().rstrip(";"):
            raise ProjectionStatementRefused(
                self.projection, "transaction or session control, or several statements in one"
            )
        found = _PLATFORM_TABLE.search(code) if _DDL_START.match(code) else None
        if found is not None:
            raise ProjectionStatementRefused(
                self.projection, f"it names the platform's table {found.group(1).lower()!r}"
            )
        self.statements += 1
        return query

    def execute(self, query: Query, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Any:
        """Run one statement; return the psycopg cursor (to fetch its rows)."""
        checked = self._checked(query)
        return self._connection.cursor().execute(checked, params)  # type: ignore[arg-type]

    def executemany(
        self, query: Query, params_seq: Iterable[Sequence[Any] | Mapping[str, Any]]
    ) -> None:
        """Run one statement once per parameter set (pipelined by psycopg)."""
        checked = self._checked(query)
        self._connection.cursor().executemany(checked, params_seq)  # type: ignore[arg-type]

    def copy(self, query: Query) -> Any:
        """`COPY ... FROM STDIN` into the projection's own table: a psycopg `Copy` context."""
        checked = self._checked(query)
        return self._connection.cursor().copy(checked)  # type: ignore[arg-type]


def check_projections(projections: Iterable[object]) -> tuple[Projection, ...]:
    """The projections, checked: each has a valid name and version and callable `setup` and
    `apply`, and no two share a name. `ProjectionInvalid` otherwise."""
    checked: list[Projection] = []
    names: set[str] = set()
    for each in projections:
        label = repr(each)[:80]
        name = getattr(each, "name", None)
        version = getattr(each, "version", None)
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            raise ProjectionInvalid(
                f"{label}: its name must be a lower-case identifier of 1 to 63 characters"
            )
        if type(version) is not int or not 1 <= version <= VERSION_MAX:
            raise ProjectionInvalid(f"projection {name}: its version must be an int from 1")
        for method in ("setup", "apply"):
            if not callable(getattr(each, method, None)):
                raise ProjectionInvalid(f"projection {name}: it has no {method}() method")
        if name in names:
            raise ProjectionInvalid(f"projection {name}: two projections have this name")
        names.add(name)
        checked.append(each)  # type: ignore[arg-type]
    return tuple(checked)


def load_projection(spec: str) -> Projection:
    """The projection `spec` names: `package.module:object` (an instance, or a class or function
    called with no arguments), or the name of an entry point of `ENTRY_POINT_GROUP`."""
    if ":" in spec:
        module_name, _, attribute = spec.partition(":")
        try:
            found: object = importlib.import_module(module_name)
            for part in attribute.split("."):
                found = getattr(found, part)
        except (ImportError, AttributeError, ValueError) as error:
            raise ProjectionInvalid(f"projection {spec!r} could not be loaded: {error}") from error
    else:
        found = _entry_point(spec)
    return check_projections([_instance(found, spec)])[0]


def _entry_point(name: str) -> object:
    from importlib.metadata import entry_points  # noqa: PLC0415 - slow; only names need it

    offered = {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}
    point = offered.get(name)
    if point is None:
        known = ", ".join(sorted(offered)) or "none"
        raise ProjectionInvalid(
            f"no projection {name!r}: give package.module:object, or one of the installed "
            f"entry points ({known})"
        )
    try:
        return point.load()
    except Exception as error:  # an installed package's import failure is a config problem
        raise ProjectionInvalid(f"projection {name!r} could not be loaded: {error}") from error


def _instance(found: object, spec: str) -> object:
    """An object with `apply` is the projection; a class or a factory is called once."""
    if isinstance(found, type) or not hasattr(found, "apply"):
        if not callable(found):
            raise ProjectionInvalid(f"projection {spec!r} is neither a projection nor a factory")
        factory: Callable[[], object] = found
        try:
            return factory()
        except Exception as error:
            raise ProjectionInvalid(f"projection {spec!r} could not be made: {error}") from error
    return found

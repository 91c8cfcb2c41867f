"""The host connection's checks and engine_events' forward-only migrations.

Migrations only ever add: version N of the schema is what migrations 1..N made. A database whose
version is newer than this code's is refused before anything is written to it.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from . import _sql
from ._file_mode import DEFAULT_FILE_MODE, require_file_mode
from ._sqlite import translated
from .errors import DurabilityError, SchemaMismatch

SCHEMA_VERSION = len(_sql.MIGRATIONS)
DATABASE_FILE_NAME = "engine.sqlite3"
"""The database's name in a book directory when the host does not name it."""
_SYNCHRONOUS_FULL = 2  # PRAGMA synchronous: 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA


@translated()
def connect(database: Path | str, *, file_mode: int = DEFAULT_FILE_MODE) -> sqlite3.Connection:
    """Open a book's database the way engine_events wants a host to: WAL with synchronous=FULL,
    and no implicit transactions (each one an explicit `BEGIN IMMEDIATE`).

    A database created here takes `file_mode` less the process's umask (by default 0o640), and
    SQLite gives its -wal and -shm files the database's mode."""
    require_file_mode(file_mode)
    if str(database) != ":memory:" and not str(database).startswith("file:"):
        _create_empty(Path(database), file_mode)
    conn = sqlite3.connect(database, isolation_level=None, timeout=10.0)
    conn.execute(_sql.JOURNAL_MODE_WAL_SET)
    conn.execute(_sql.SYNCHRONOUS_FULL_SET)
    return conn


def _create_empty(database: Path, file_mode: int) -> None:
    # SQLite would create it 0o644 less the umask; an empty file is an empty database to it.
    try:
        fd = os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, file_mode)
    except OSError:  # there already, or not to be made: SQLite opens it, or says why not
        return
    os.close(fd)


@translated()
def require_durable(conn: sqlite3.Connection) -> None:
    """Refuse a connection whose commits are not durable when `commit()` returns.

    A line is written only after its row committed; if the commit could still be lost to a power cut,
    the engine would redo the step and the same seq would come back with other bytes: a conflict.
    """
    (journal_mode,) = conn.execute(_sql.JOURNAL_MODE_GET).fetchone()
    (synchronous,) = conn.execute(_sql.SYNCHRONOUS_GET).fetchone()
    if str(journal_mode).lower() != "wal" or int(synchronous) < _SYNCHRONOUS_FULL:
        raise DurabilityError(
            f"the host's SQLite connection uses journal_mode={journal_mode}, "
            f"synchronous={synchronous}; engine_events needs journal_mode=WAL with "
            "synchronous=FULL (or EXTRA) so that a commit is durable before its line is written"
        )


@translated()
def schema_version(conn: sqlite3.Connection) -> int:
    if conn.execute(_sql.META_TABLE_EXISTS).fetchone() is None:
        return 0
    row = conn.execute(_sql.SCHEMA_VERSION_GET).fetchone()
    return 0 if row is None else int(row[0])


def require_known_version(conn: sqlite3.Connection) -> int:
    found = schema_version(conn)
    if found > SCHEMA_VERSION:
        raise SchemaMismatch(found, SCHEMA_VERSION)
    return found


@translated()
def migrate(conn: sqlite3.Connection, *, target: int = SCHEMA_VERSION) -> tuple[int, int]:
    """Bring the schema to `target` (the newest by default) in one transaction; refuse a newer
    database than this code knows, untouched. Never goes back: a database already past `target`
    stays as it is. Returns the versions before and after."""
    if not 0 <= target <= SCHEMA_VERSION:
        raise ValueError(f"target must be 0..{SCHEMA_VERSION}, got {target}")
    if conn.in_transaction:
        raise RuntimeError("migrate() must run outside a transaction")
    require_known_version(conn)  # before BEGIN IMMEDIATE: refusing takes no write lock
    conn.execute(_sql.BEGIN_IMMEDIATE)
    try:
        found = require_known_version(conn)  # again, under the write lock
        for version in range(found + 1, target + 1):
            for statement in _sql.MIGRATIONS[version - 1]:
                conn.execute(statement)
            conn.execute(_sql.SCHEMA_VERSION_SET, {"version": str(version)})
    except BaseException:
        conn.rollback()
        raise
    conn.commit()
    return found, max(found, target)

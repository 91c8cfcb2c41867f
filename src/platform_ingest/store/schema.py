"""Forward-only migrations with a version table, and the check every other command makes.

`migrate` reads the version first: a database already at the target is left as it is, with no
lock and no DDL, so any role that may read the version table hears "nothing to do". Otherwise it
takes a transaction-level advisory lock (two migrators never interleave), reads the version again,
refuses a database written by a newer platform_ingest (`SchemaTooNew`), applies the missing steps
of `migrations.MIGRATIONS` in order, each recorded in `ingest_schema_version` in the same
transaction as its DDL, and tells the running workers (`migrations.SCHEMA_CHANNEL`). There is no
downgrade. A role that may not change the schema (SQLSTATE 42501) is told which role may
(`SchemaNotPermitted`): the one that owns the platform's tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import DatabaseError, SchemaNotPermitted, SchemaTooNew, SchemaTooOld
from . import migrations
from .db import Database

_MIGRATION_LOCK_KEY = 0x706C6174666F726D  # "platform": one key for every migrator of this schema
_INSUFFICIENT_PRIVILEGE = "42501"


def schema_version(db: Database) -> int:
    """The database's schema version; 0 when platform_ingest never migrated it."""
    row = db.fetch_one(migrations.SCHEMA_TABLE_EXISTS)
    if row is None or row["to_regclass"] is None:
        return 0
    version = db.fetch_one(migrations.SCHEMA_VERSION_READ)
    return 0 if version is None else int(version["version"])


def migrate(db: Database, *, target: int | None = None) -> tuple[int, int]:
    """Bring the schema to `target` (default: this code's `SCHEMA_VERSION`, read when called); return
    (version before, version after). A lower target is for tests of an upgrade; nothing is ever
    undone."""
    known = migrations.SCHEMA_VERSION
    target = known if target is None else target
    if not 0 < target <= known:
        raise ValueError(f"no schema version {target}")
    with _permitted(db, target):
        current = schema_version(db)
        if current > known:
            raise SchemaTooNew(current, known)
        if current >= target:
            return current, current
        with db.transaction():
            db.execute(migrations.SCHEMA_LOCK, (_MIGRATION_LOCK_KEY,))
            db.execute(migrations.SCHEMA_TABLE_CREATE)
            row = db.fetch_one(migrations.SCHEMA_VERSION_READ)
            before = 0 if row is None else int(row["version"])
            if before > known:
                raise SchemaTooNew(before, known)
            for version in range(before + 1, target + 1):
                for statement in migrations.MIGRATIONS[version]:
                    db.execute(statement)
                db.execute(migrations.SCHEMA_VERSION_RECORD, (version,))
            if target > before:
                db.execute(migrations.SCHEMA_CHANGED_NOTIFY, (str(target),))
    return before, max(before, target)


@contextmanager
def _permitted(db: Database, target: int) -> Iterator[None]:
    """A refusal for want of privileges becomes `SchemaNotPermitted`, naming the role that may."""
    try:
        yield
    except DatabaseError as error:
        if error.sqlstate != _INSUFFICIENT_PRIVILEGE:
            raise
        raise SchemaNotPermitted(_not_permitted(db, target), sqlstate=error.sqlstate) from error


def _not_permitted(db: Database, target: int) -> str:
    role = db.connection.info.user
    row = db.fetch_one(migrations.SCHEMA_OWNER)
    owner = None if row is None else row["owner"]
    if owner is None:
        schema = "(none: the search path names no schema that exists)"
        if row is not None and row["schema"] is not None:
            schema = row["schema"]
        return (
            f"role {role} may not create the platform's tables in schema {schema}: run "
            "`platform-ingest migrate` as the owner role, a role with CREATE on that schema "
            "(docs/platform/workers.md, Roles)"
        )
    return (
        f"role {role} may not bring the platform's schema to version {target}: run "
        f"`platform-ingest migrate` as {owner}, the owner role (it owns the platform's tables)"
    )


def require_current(db: Database) -> None:
    """Refuse a database that is not at this code's schema version (newer: never touched)."""
    version = schema_version(db)
    if version > migrations.SCHEMA_VERSION:
        raise SchemaTooNew(version, migrations.SCHEMA_VERSION)
    if version < migrations.SCHEMA_VERSION:
        raise SchemaTooOld(version, migrations.SCHEMA_VERSION)

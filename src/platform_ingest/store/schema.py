"""Forward-only migrations with a version table, and the check every other command makes.

`migrate` takes a transaction-level advisory lock (two migrators never interleave), reads the
version, refuses a database written by a newer platform_ingest (`SchemaTooNew`), and applies the
missing steps of `migrations.MIGRATIONS` in order, each recorded in `ingest_schema_version` in the same
transaction as its DDL. There is no downgrade.
"""

from __future__ import annotations

from ..errors import SchemaTooNew, SchemaTooOld
from . import migrations
from .db import Database

_MIGRATION_LOCK_KEY = 0x706C6174666F726D  # "platform": one key for every migrator of this schema


def schema_version(db: Database) -> int:
    """The database's schema version; 0 when platform_ingest never migrated it."""
    row = db.fetch_one(migrations.SCHEMA_TABLE_EXISTS)
    if row is None or row["to_regclass"] is None:
        return 0
    version = db.fetch_one(migrations.SCHEMA_VERSION_READ)
    return 0 if version is None else int(version["version"])


def migrate(db: Database, *, target: int = migrations.SCHEMA_VERSION) -> tuple[int, int]:
    """Bring the schema to `target` (default: this code's `SCHEMA_VERSION`); return (version
    before, version after). A lower target is for tests of an upgrade; nothing is ever undone."""
    if not 0 < target <= migrations.SCHEMA_VERSION:
        raise ValueError(f"no schema version {target}")
    with db.transaction():
        db.execute(migrations.SCHEMA_LOCK, (_MIGRATION_LOCK_KEY,))
        db.execute(migrations.SCHEMA_TABLE_CREATE)
        row = db.fetch_one(migrations.SCHEMA_VERSION_READ)
        before = 0 if row is None else int(row["version"])
        if before > migrations.SCHEMA_VERSION:
            raise SchemaTooNew(before, migrations.SCHEMA_VERSION)
        for version in range(before + 1, target + 1):
            for statement in migrations.MIGRATIONS[version]:
                db.execute(statement)
            db.execute(migrations.SCHEMA_VERSION_RECORD, (version,))
    return before, max(before, target)


def require_current(db: Database) -> None:
    """Refuse a database that is not at this code's schema version (newer: never touched)."""
    version = schema_version(db)
    if version > migrations.SCHEMA_VERSION:
        raise SchemaTooNew(version, migrations.SCHEMA_VERSION)
    if version < migrations.SCHEMA_VERSION:
        raise SchemaTooOld(version, migrations.SCHEMA_VERSION)

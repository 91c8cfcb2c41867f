"""The traps a new operator fell into, each pinned by a test through the CLIs and docs, one file a
subject; here their fixture: a migrated database of the test's own (the helpers that run the
CLIs: `tests/fixtures/cli_runs.py`)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import conninfo

from platform_ingest import Database, migrate

_databases = itertools.count(1)


@pytest.fixture
def dsn(pg_admin_dsn: str) -> Iterator[str]:
    """A migrated database of this test's own."""
    name = f"ingest_traps_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    params = conninfo.conninfo_to_dict(pg_admin_dsn)
    params["dbname"] = name
    url = conninfo.make_conninfo(**{key: str(value) for key, value in params.items()})
    db = Database(url)
    migrate(db)
    db.close()
    yield url
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

"""Fixtures for the platform side: a real Postgres, and a fresh database for every test.

The server is started once per session: an embedded Postgres in a temporary directory, or the one
`PLATFORM_INGEST_TEST_DSN` names (its role needs CREATEDB). A template database is migrated once;
each test gets its own database copied from it (`CREATE DATABASE ... TEMPLATE`), dropped after.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from platform_ingest import Database, migrate


def _register_helpers() -> None:
    """Make `platform_journals` (this directory's helpers) importable by the test modules.

    The suite runs with `--import-mode=importlib`, which puts no test directory on `sys.path`.
    """
    if "platform_journals" in sys.modules:
        return
    path = Path(__file__).with_name("platform_journals.py")
    spec = importlib.util.spec_from_file_location("platform_journals", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["platform_journals"] = module
    spec.loader.exec_module(module)


_register_helpers()

from platform_journals import dsn_for  # noqa: E402 - importable only once registered

_TEMPLATE = f"ingest_template_{os.getpid()}"
_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def pg_template(pg_admin_dsn: str) -> Iterator[str]:
    """A database migrated once, copied for each test."""
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{_TEMPLATE}"')
        admin.execute(f'CREATE DATABASE "{_TEMPLATE}"')
    db = Database(dsn_for(pg_admin_dsn, _TEMPLATE))
    migrate(db)
    db.close()
    yield _TEMPLATE
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{_TEMPLATE}" WITH (FORCE)')


@pytest.fixture
def fresh_dsn(pg_admin_dsn: str, pg_template: str) -> Iterator[str]:
    """The DSN of a database of this test's own, already migrated."""
    name = f"ingest_test_{os.getpid()}_{next(_numbers)}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    yield dsn_for(pg_admin_dsn, name)
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def empty_dsn(pg_admin_dsn: str) -> Iterator[str]:
    """The DSN of an empty database (never migrated)."""
    name = f"ingest_empty_{os.getpid()}_{next(_numbers)}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield dsn_for(pg_admin_dsn, name)
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db(fresh_dsn: str) -> Iterator[Database]:
    database = Database(fresh_dsn)
    yield database
    database.close()


@pytest.fixture
def sql(fresh_dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A plain connection to the test's database, for the test's own look at the tables."""
    with psycopg.connect(fresh_dsn, autocommit=True) as connection:
        yield connection


@pytest.fixture
def make_book(tmp_path: Path) -> Callable[[str], Path]:
    """Make an empty book directory with the given name (the book id)."""

    def make(name: str = "book-1") -> Path:
        path = tmp_path / "books" / name
        path.mkdir(parents=True)
        return path

    return make

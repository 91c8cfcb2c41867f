"""Fixtures for the whole seam: a real Postgres with a fault switch, and the simulation's figures.

The server is started once per session: an embedded Postgres in a directory of its own, or the one
`PLATFORM_INGEST_TEST_DSN` names (its role needs CREATEDB). A template database is migrated once,
with the fault switch of `seam_model.PostgresFaults` installed; each test gets its own copy.

At the end of a session that ran the simulation, its figures are printed (steps, crashes by kind,
duplicates, hint losses, faults, violations).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from platform_ingest import Database, migrate


def _register_helpers() -> None:
    """Make `seam_model` (this directory's helpers) importable: `--import-mode=importlib` puts no
    test directory on `sys.path`."""
    if "seam_model" in sys.modules:
        return
    path = Path(__file__).with_name("seam_model.py")
    spec = importlib.util.spec_from_file_location("seam_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["seam_model"] = module
    spec.loader.exec_module(module)


_register_helpers()

from seam_model import STATS, PostgresFaults, dsn_for  # noqa: E402 - importable once registered

_TEMPLATE = f"seam_template_{os.getpid()}"
_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def seam_admin_dsn(pg_admin_dsn: str) -> str:
    """The session's Postgres server (see tests/conftest.py), shared with the platform tests."""
    return pg_admin_dsn


@pytest.fixture(scope="session")
def seam_template(seam_admin_dsn: str) -> Iterator[str]:
    """A database migrated once, with the fault switch installed, copied for each test."""
    with psycopg.connect(seam_admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{_TEMPLATE}"')
        admin.execute(f'CREATE DATABASE "{_TEMPLATE}"')
    dsn = dsn_for(seam_admin_dsn, _TEMPLATE)
    db = Database(dsn)
    migrate(db)
    db.close()
    PostgresFaults.install(dsn)
    yield _TEMPLATE
    with psycopg.connect(seam_admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{_TEMPLATE}" WITH (FORCE)')


@pytest.fixture
def seam_dsn(seam_admin_dsn: str, seam_template: str) -> Iterator[str]:
    """The DSN of a database of this test's own: migrated, with the fault switch."""
    name = f"seam_test_{os.getpid()}_{next(_numbers)}"
    with psycopg.connect(seam_admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{seam_template}"')
    yield dsn_for(seam_admin_dsn, name)
    with psycopg.connect(seam_admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The simulation's figures, when it ran in this session."""
    if not STATS:
        return
    terminalreporter.section("seam simulation")
    for line in STATS.report_lines():
        terminalreporter.write_line(line)

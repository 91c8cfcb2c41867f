"""The database driver is imported in `store/` only: every other module of the platform reaches
Postgres through the store, and names what it needs of the driver through `store/driver.py`.

`lint-imports` holds the same rule for the modules its contract lists; this test reads every
module's source, so a module added later (or an import hidden in a function, or made by
`importlib`) is held too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import platform_ingest

PACKAGE = Path(platform_ingest.__file__).resolve().parent
DRIVERS = frozenset({"psycopg", "psycopg_binary", "psycopg_c", "psycopg_pool", "pgserver"})
"""The driver's distributions, and the embedded server's: Postgres's own libraries."""


def _is_driver(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in DRIVERS


def driver_imports(source: str) -> list[int]:
    """The lines of `source` that import the driver: `import`, `from ... import` (absolute), and
    a call of `importlib.import_module` or `__import__` with the driver's name."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            if any(_is_driver(alias.name) for alias in node.names):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and _is_driver(node.module):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0]
            if (
                name in {"import_module", "__import__"}
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and _is_driver(first.value)
            ):
                lines.append(node.lineno)
    return lines


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_outside_the_store_imports_the_driver() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE).as_posix()}:{line}"
        for path in _modules()
        if path.relative_to(PACKAGE).parts[0] != "store"
        for line in driver_imports(path.read_text())
    ]
    assert offenders == []


def test_the_store_is_where_the_driver_is_imported() -> None:
    """The check reads the real tree: the store's modules import the driver, and are found to."""
    importing = {
        path.relative_to(PACKAGE).as_posix()
        for path in _modules()
        if driver_imports(path.read_text())
    }
    assert {"store/db.py", "store/driver.py", "store/embedded.py"} <= importing
    assert all(name.startswith("store/") for name in importing)


@pytest.mark.parametrize(
    "source",
    [
        "import psycopg",
        "import psycopg.pq as pq",
        "import os, psycopg_pool",
        "from psycopg.types.json import Jsonb",
        "from psycopg import sql as psycopg_sql",
        "from pgserver import get_server",
        "def f():\n    import psycopg\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from psycopg import Connection\n",
        "import importlib\ndriver = importlib.import_module('psycopg')",
        "driver = __import__('psycopg.errors')",
    ],
)
def test_the_check_sees_every_way_of_importing_the_driver(source: str) -> None:
    assert driver_imports(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "from ..store.driver import jsonb",
        "from .store.db import Database",
        "import psycopgish",
        "from . import psycopg",
        "text = 'import psycopg'",
    ],
)
def test_the_check_leaves_what_is_not_the_driver(source: str) -> None:
    assert driver_imports(source) == []

"""`platform-ingest sweep` imports only what a sweep uses: every other command's modules (and the
worker's libraries) are imported in the branch that runs them, and the package's public names on
first use, so a one-shot command does not pay for them at each start-up. Each check runs in a fresh
interpreter: the test session has imported everything already."""

from __future__ import annotations

import json
import subprocess
import sys

import platform_ingest

NOT_FOR_SWEEP = (
    # Whole layers: the import-linter contract "a sweep's path imports no module of the worker or
    # of the operator's commands" (pyproject.toml) holds it for every import in those modules;
    # this test holds the command line's own lazy branches, at run time.
    "platform_ingest.worker",
    "platform_ingest.operate",
    # Modules of the sweep's layers that only other commands use.
    "platform_ingest.ingest.rebuild",
    "platform_ingest.store.embedded",
    "platform_ingest._version",
    # The worker's libraries.
    "watchdog",
    "prometheus_client",
    "rich",
    # The engine's writer and its commands: a sweep reads by the engine's grammar
    # (`engine_events.grammar`) and shows text by its `plain`, nothing else of it.
    "engine_events._emitter",
    "engine_events._outbox",
    "engine_events._schema",
    "engine_events.readers.decode",
    "engine_events.readers.verify",
    "engine_events.readers.watch",
    "sqlite3",
)
"""Modules (and their submodules) a sweep has no use for."""


def _modules_after(code: str) -> list[str]:
    """The modules in `sys.modules` after `code` runs in a fresh interpreter."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    return list(json.loads(done.stdout.splitlines()[-1]))


def _unwanted(modules: list[str]) -> list[str]:
    return [
        name
        for name in modules
        if any(name == unwanted or name.startswith(unwanted + ".") for unwanted in NOT_FOR_SWEEP)
    ]


def test_the_cli_and_its_parser_for_sweep_import_no_other_command() -> None:
    modules = _modules_after(
        "import platform_ingest.cli.main as cli\n"
        "from platform_ingest.cli.parser import build_parser\n"
        "args = build_parser().parse_args(['--dsn', 'postgresql:///x', 'sweep', '--auto', 'b'])\n"
        "assert args.command == 'sweep'\n"
        "assert cli._handler(args).__name__ == 'sweep'"
    )
    assert "platform_ingest.ingest.book_pass" in modules  # the sweep's own modules are there
    assert _unwanted(modules) == []


def test_importing_the_package_imports_none_of_its_submodules() -> None:
    modules = _modules_after("import platform_ingest")
    assert [name for name in modules if name.startswith("platform_ingest.")] == []


def test_every_public_name_imports_on_first_use() -> None:
    """`from platform_ingest import X` works for every name of `__all__`, in a fresh interpreter
    (where each comes through the package's `__getattr__`), and `dir()` lists them all."""
    names = ", ".join(platform_ingest.__all__)
    modules = _modules_after(
        f"from platform_ingest import {names}\n"
        "import platform_ingest\n"
        "assert set(platform_ingest.__all__) <= set(dir(platform_ingest))\n"
        "for name in platform_ingest.__all__:\n"
        "    assert getattr(platform_ingest, name) is not None, name"
    )
    assert "platform_ingest.worker.loop" in modules
    assert not hasattr(platform_ingest, "NoSuchName")


def test_the_decisions_import_no_database_driver() -> None:
    """The decisions are pure in what they import, not only in what they do: importing every
    module of the package leaves psycopg (and every other I/O library) out of `sys.modules`."""
    modules = _modules_after(
        "import pkgutil, importlib, platform_ingest.decisions as d\n"
        "for m in pkgutil.iter_modules(d.__path__):\n"
        "    importlib.import_module(f'platform_ingest.decisions.{m.name}')"
    )
    assert "platform_ingest.decisions.rules" in modules
    assert "platform_ingest.decisions.runs" in modules
    drivers = ("psycopg", "pgserver", "sqlite3", "watchdog", "prometheus_client")
    loaded = [n for n in modules if any(n == d or n.startswith(d + ".") for d in drivers)]
    assert loaded == []

"""Upgrading a running fleet (docs/platform/workers.md): a newer release's `migrate` under a running
worker, on one database, while real engines write.

The newer release is this code with one more schema step (`next_release`, registered in the test's
processes only). The worker of this release stops taking passes, logs one ERROR naming both
versions and exits 5; the worker of the newer release goes on from the cursors. Nothing is doubled
and nothing lost: a ledger projection with no key records every line each worker applied, and the
runs' totals are compared with the journals. The worker of the newest kept release
(tests/vectors/releases/, built from this checkout's history), which does not look at the schema
while it runs, goes on under the newer schema until stopped, as the upgrade procedure says, and
loses and doubles nothing either.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from next_release import NEXT_VERSION
from platform_ingest import Database
from platform_ingest.errors import SchemaChanged
from platform_ingest.store import migrations
from platform_ingest.store.db import set_statement_hook
from platform_ingest.store.statement import Statement
from platform_ingest.worker.schema_watch import SchemaWatch
from platform_journals import (
    BIN,
    _environment,
    dsn_for,
    log_entries,
    start_worker,
    stop_worker,
    wait_for,
)

pytestmark = [pytest.mark.postgres, pytest.mark.crash]

BOOKS = [f"book-{number}" for number in range(1, 5)]
UNITS = 16
STAGES = ("draft", "edit")
UNIT_COST = 250_000
LEDGER = "projection_fixtures:Ledger"
SCHEMA_CHANGED_EXIT = 5
SAFETY_PASS_S = "60"
"""Longer than the test waits for the old worker to stop: it stops on `migrate`'s word."""


def next_release(*argv: str) -> list[str]:
    return [sys.executable, "-m", "next_release", *argv]


def _next_release_worker(
    dsn: str, root: Path, options: tuple[str, ...], log: Path
) -> subprocess.Popen[bytes]:
    """The next release's worker `w-new` over `root`, logging to `log`."""
    with open(log, "wb") as stderr:
        return subprocess.Popen(
            next_release(
                "--dsn", dsn, "run", str(root), "--auto", *options, "--worker-id", "w-new"
            ),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=_environment(),
        )


def _rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        return connection.execute(query).fetchall()  # type: ignore[arg-type]


@pytest.fixture
def database(pg_admin_dsn: str, pg_template: str) -> Iterator[str]:
    """A database of this test's own at this release's schema (the next release migrates it)."""
    name = f"ingest_upgrade_{os.getpid()}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')  # type: ignore[arg-type]
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')  # type: ignore[arg-type]
    try:
        yield dsn_for(pg_admin_dsn, name)
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


@pytest.fixture
def bare_database(pg_admin_dsn: str) -> Iterator[str]:
    """An empty database of this test's own, for a release of its own to migrate."""
    name = f"ingest_upgrade_bare_{os.getpid()}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')  # type: ignore[arg-type]
        admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    try:
        yield dsn_for(pg_admin_dsn, name)
    finally:
        with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


def _engine(book: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            str(BIN / "engine-events"),
            "--log-level",
            "WARNING",
            "demo",
            str(book),
            "--units",
            str(UNITS),
            "--stages",
            ",".join(STAGES),
            "--unit-cost-micro-usd",
            str(UNIT_COST),
            "--pace-ms",
            "250",
        ],
        env=_environment(),
    )


def _journal(book: Path) -> tuple[set[tuple[str, int]], int, int]:
    """(engine_run_id, seq) of every line of the book's journal, its last committed money and the
    number of its `unit_done` lines, read from the file."""
    lines: set[tuple[str, int]] = set()
    stream = ""
    money = 0
    units = 0
    for text in (book / "events.jsonl").read_bytes().splitlines():
        line = json.loads(text)
        if line["type"] == "hello":
            stream = line["data"]["engine_run_id"]
        lines.add((stream, int(line["seq"])))
        if line["type"] == "spend":
            money = int(line["data"]["committed_micro_usd"])
        units += line["type"] == "unit_done"
    return lines, money, units


def applied_by(dsn: str, worker: str) -> int:
    """The lines the ledger projection recorded as applied by `worker`'s session (0 before the
    first worker set the projection up)."""
    if _rows(dsn, "SELECT to_regclass('applied_lines')") == [(None,)]:
        return 0
    rows = _rows(
        dsn,
        "SELECT count(*) FROM applied_lines"
        f" WHERE applied_by LIKE 'platform-ingest worker {worker} %'",
    )
    return int(rows[0][0])


def _wait_for_every_run(dsn: str) -> None:
    def all_completed() -> bool:
        rows = _rows(
            dsn,
            "SELECT count(*) FROM runs r WHERE state = 'completed' AND"
            f" (SELECT count(*) FROM run_units u WHERE u.run_id = r.run_id) = {UNITS}",
        )
        return int(rows[0][0]) == len(BOOKS)

    wait_for("every run completed in Postgres", all_completed)


def _assert_nothing_doubled_or_lost(dsn: str, root: Path) -> None:
    """Every line of every journal was applied once (the ledger, which has no key, holds it once),
    and each run's totals are its journal's."""
    ledger = Counter(
        (str(book), str(stream), int(seq))
        for book, stream, seq in _rows(dsn, "SELECT book_id, engine_run_id, seq FROM applied_lines")
    )
    assert [key for key, count in ledger.items() if count > 1] == []
    runs = {
        str(book): (int(money), int(units))
        for book, money, units in _rows(
            dsn,
            "SELECT r.book_id, r.committed_micro_usd,"
            " (SELECT count(*) FROM run_units u WHERE u.run_id = r.run_id) FROM runs r",
        )
    }
    for book in BOOKS:
        lines, money, units = _journal(root / book)
        assert {(stream, seq) for b, stream, seq in ledger if b == book} == lines
        assert runs[book] == (money, units)
        assert units == UNITS and money > 0


def test_a_newer_migrate_stops_the_running_worker_and_the_newer_worker_goes_on(
    database: str,
) -> None:
    dsn = database
    with tempfile.TemporaryDirectory(prefix="ingest-upgrade-") as directory:
        root = Path(directory) / "books"
        root.mkdir()
        for book in BOOKS:
            (root / book).mkdir()
        old_log, new_log = Path(directory) / "old.log", Path(directory) / "new.log"
        options = (
            "--projection",
            LEDGER,
            "--safety-pass-s",
            SAFETY_PASS_S,
            "--membership-s",
            "0.3",
        )
        old = start_worker(dsn, root, old_log, *options, worker_id="w-old")
        processes: list[subprocess.Popen[bytes]] = [old]
        try:
            wait_for(
                "the old worker joins",
                lambda: any(entry.get("workers") == 1 for entry in log_entries(old_log)),
            )
            engines = [_engine(root / book) for book in BOOKS]
            processes += engines

            wait_for("the old worker applied lines", lambda: applied_by(dsn, "w-old") > 0)

            # The next release refuses to work a database it has not migrated: side by side
            # with the old workers only once it migrated it.
            refused = subprocess.run(
                next_release("--dsn", dsn, "show"),
                capture_output=True,
                check=False,
                env=_environment(),
            )
            assert refused.returncode == 1
            assert b"run `platform-ingest migrate` first" in refused.stderr

            migrated = subprocess.run(
                next_release("--dsn", dsn, "migrate"),
                capture_output=True,
                check=False,
                env=_environment(),
            )
            assert migrated.returncode == 0, migrated.stderr
            current = migrations.SCHEMA_VERSION
            assert migrated.stdout == f"schema version {current} -> {NEXT_VERSION}\n".encode()
            migrated_at = time.monotonic()

            assert old.wait(timeout=30) == SCHEMA_CHANGED_EXIT
            stopped_after_s = time.monotonic() - migrated_at
            assert stopped_after_s < float(SAFETY_PASS_S) / 2  # on migrate's word, not the timer
            errors = [entry for entry in log_entries(old_log) if entry["level"] == "ERROR"]
            assert len(errors) == 1, errors
            assert f"the database is at schema version {NEXT_VERSION}" in errors[0]["message"]
            assert f"this release was built for {current}" in errors[0]["message"]
            assert (errors[0]["schema_version"], errors[0]["known_schema_version"]) == (
                NEXT_VERSION,
                current,
            )
            assert any(engine.poll() is None for engine in engines), "engines ended too soon"
            old_applied = applied_by(dsn, "w-old")

            # This release's commands are refused by the newer schema from now on.
            too_new = subprocess.run(
                [str(BIN / "platform-ingest"), "--dsn", dsn, "show"],
                capture_output=True,
                check=False,
                env=_environment(),
            )
            assert too_new.returncode == 1
            assert b"is newer than this platform_ingest" in too_new.stderr

            new = _next_release_worker(dsn, root, options, new_log)
            processes.append(new)
            assert [engine.wait(timeout=180) for engine in engines] == [0] * len(engines)

            _wait_for_every_run(dsn)
            assert stop_worker(new) == 0, new_log.read_text()
            assert applied_by(dsn, "w-old") == old_applied  # nothing after it stopped
            assert applied_by(dsn, "w-new") > 0
            assert [e for e in log_entries(new_log) if e["level"] == "ERROR"] == []
            _assert_nothing_doubled_or_lost(dsn, root)
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait(timeout=30)


def test_a_newer_schema_with_no_word_from_migrate_stops_the_worker_at_its_next_look(
    fresh_dsn: str, tmp_path: Path
) -> None:
    """The notification can be missed (the listener was away): the worker's timed look, every
    safety pass, finds the newer version all the same. Here the version row is written by hand,
    with no notification at all."""
    root = tmp_path / "books"
    root.mkdir()
    log = tmp_path / "worker.log"
    worker = start_worker(fresh_dsn, root, log, "--safety-pass-s", "1", "--membership-s", "0.3")
    try:
        wait_for("the worker joins", lambda: any(e.get("workers") == 1 for e in log_entries(log)))
        with psycopg.connect(fresh_dsn, autocommit=True) as connection:
            connection.execute(
                "INSERT INTO ingest_schema_version (version) VALUES (%s)", (NEXT_VERSION,)
            )
        assert worker.wait(timeout=30) == SCHEMA_CHANGED_EXIT
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)
    (error,) = [entry for entry in log_entries(log) if entry["level"] == "ERROR"]
    assert error["schema_version"] == NEXT_VERSION


def test_the_look_at_the_schema_is_one_query_an_interval_not_one_a_turn(fresh_dsn: str) -> None:
    """However often the loop turns, the version is read once an interval, and again at once only
    when a look is asked for (migrate's word, a session made again)."""
    reads: list[str] = []

    def record(statement: Statement) -> None:
        if statement.name == migrations.SCHEMA_VERSION_READ.name:
            reads.append(statement.name)

    db = Database(fresh_dsn)
    watch = SchemaWatch(interval_s=3600.0)
    set_statement_hook(record)
    try:
        for _ in range(1000):
            watch.check(db)
        assert len(reads) == 1
        watch.look_again()
        for _ in range(1000):
            watch.check(db)
        assert len(reads) == 2
        with psycopg.connect(fresh_dsn, autocommit=True) as connection:
            connection.execute(
                "INSERT INTO ingest_schema_version (version) VALUES (%s)", (NEXT_VERSION,)
            )
        watch.check(db)  # not due: the change waits for the next look
        watch.look_again()
        with pytest.raises(SchemaChanged) as raised:
            watch.check(db)
        assert (raised.value.found_version, raised.value.known_version) == (
            NEXT_VERSION,
            migrations.SCHEMA_VERSION,
        )
    finally:
        set_statement_hook(None)
        db.close()


# --- a worker of a release that does not look at the schema while it runs --------------------------

RELEASES = Path(__file__).resolve().parents[1] / "vectors" / "releases"
ROOT = Path(__file__).resolve().parents[2]


def _newest_release() -> tuple[str, str]:
    """(version, commit) of the newest release kept in tests/vectors/releases/ (its README names
    the commit that wrote its files)."""
    versions = sorted(
        (path for path in RELEASES.iterdir() if path.is_dir() and path.name[:1].isdigit()),
        key=lambda path: tuple(int(part) for part in path.name.split(".")),
    )
    newest = versions[-1]
    found = re.search(r"\(commit ([0-9a-f]{40})\)", (newest / "README.md").read_text())
    assert found is not None, f"{newest}/README.md names no commit"
    return newest.name, found.group(1)


@pytest.fixture
def previous_release(tmp_path: Path) -> Path:
    """The source of the newest kept release, from this checkout's git history: its `src`."""
    version, commit = _newest_release()
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip(f"no git history here (a source archive): release {version} cannot be built")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "src"], capture_output=True, check=False
    )
    assert archive.returncode == 0, archive.stderr  # a checkout with history holds its releases
    target = tmp_path / f"release-{version}"
    target.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(target, filter="data")
    return target / "src"


def test_a_worker_of_a_release_before_the_look_goes_on_until_stopped_and_loses_nothing(
    bare_database: str, previous_release: Path, tmp_path: Path
) -> None:
    """The kept release's worker has no look at the schema: under the newer schema it goes on
    applying (harmless: the steps only add) until it is stopped, as workers.md says to; the newer
    worker then goes on from the cursors. Nothing doubled, nothing lost. The database is at the
    kept release's schema, migrated by that release, as on a fleet that has not upgraded yet."""
    dsn = bare_database
    root = tmp_path / "books"
    root.mkdir()
    for book in BOOKS:
        (root / book).mkdir()
    environment = _environment()
    environment["PYTHONPATH"] = os.pathsep.join([str(previous_release), environment["PYTHONPATH"]])
    old_cli = [
        sys.executable,
        "-c",
        "import sys, platform_ingest._cli as cli; sys.exit(cli.main())",
    ]
    migrated_by_old = subprocess.run(
        [*old_cli, "--dsn", dsn, "migrate"], capture_output=True, check=False, env=environment
    )
    assert migrated_by_old.returncode == 0, migrated_by_old.stderr
    options = ("--projection", LEDGER, "--membership-s", "0.3")
    old_log, new_log = tmp_path / "old.log", tmp_path / "new.log"
    processes: list[subprocess.Popen[bytes]] = []
    try:
        with open(old_log, "wb") as stderr:
            old = subprocess.Popen(
                [
                    *old_cli,
                    "--dsn",
                    dsn,
                    "run",
                    str(root),
                    "--auto",
                    *options,
                    "--worker-id",
                    "w-old",
                ],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=environment,
            )
        processes.append(old)
        engines = [_engine(root / book) for book in BOOKS]
        processes += engines
        wait_for("the old release applied lines", lambda: applied_by(dsn, "w-old") > 0)
        migrated = subprocess.run(
            next_release("--dsn", dsn, "migrate"),
            capture_output=True,
            check=False,
            env=_environment(),
        )
        assert migrated.returncode == 0, migrated.stderr
        after_migrate = applied_by(dsn, "w-old")
        wait_for(
            "the old release goes on applying under the newer schema",
            lambda: applied_by(dsn, "w-old") > after_migrate,
        )
        assert any(engine.poll() is None for engine in engines), "engines ended too soon"
        assert stop_worker(old) == 0, old_log.read_text()
        new = _next_release_worker(dsn, root, options, new_log)
        processes.append(new)
        assert [engine.wait(timeout=180) for engine in engines] == [0] * len(engines)
        _wait_for_every_run(dsn)
        assert stop_worker(new) == 0, new_log.read_text()
        assert applied_by(dsn, "w-new") > 0
        _assert_nothing_doubled_or_lost(dsn, root)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)

"""Which database a platform command uses: libpq's PG* variables when no DSN is given, and the
embedded Postgres said aloud, created only by a command that writes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from psycopg import conninfo

from cli_runs import BIN, bare_environment


def _libpq_variables_for(url: str) -> dict[str, str]:
    params = conninfo.conninfo_to_dict(url)
    names = {"host": "PGHOST", "port": "PGPORT", "dbname": "PGDATABASE", "user": "PGUSER"}
    names["password"] = "PGPASSWORD"
    return {names[key]: str(value) for key, value in params.items() if key in names and value}


@pytest.mark.postgres
def test_libpq_variables_name_the_database_when_no_dsn_is_given(dsn: str, tmp_path: Path) -> None:
    """With PGHOST, PGDATABASE, ... set and no DSN, the command uses that server: it does not
    create and start an embedded one in the current directory."""
    migrated = subprocess.run(
        [str(BIN / "platform-ingest"), "migrate"],
        env=bare_environment(**_libpq_variables_for(dsn)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout.endswith("nothing to do\n")  # the fixture's database, migrated before
    assert not (tmp_path / ".platform-ingest").exists()
    assert "embedded" not in migrated.stderr


@pytest.mark.postgres
def test_the_embedded_server_says_its_directory_and_when_it_was_created(tmp_path: Path) -> None:
    """Run from another directory, a command used to create and start a new cluster silently."""

    def migrate_here() -> str:
        completed = subprocess.run(
            [str(BIN / "platform-ingest"), "migrate"],
            env=bare_environment(),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert completed.returncode == 0, completed.stderr
        return completed.stderr

    data_dir = tmp_path / ".platform-ingest"
    first = migrate_here()
    assert f"creating a new embedded Postgres in {data_dir}" in first
    second = migrate_here()
    assert f"using the embedded Postgres in {data_dir}" in second
    assert "creating" not in second


@pytest.mark.parametrize(
    "argv",
    [
        ["show"],
        ["show", "--json", "book-1"],
        ["show", "--follow"],
        ["prune", "--older-than-s", "0", "--dry-run"],
    ],
    ids=["show", "show-json", "follow", "prune-dry-run"],
)
def test_a_command_that_only_reads_creates_no_embedded_postgres(
    tmp_path: Path, argv: list[str]
) -> None:
    """`show` run from another directory created an empty cluster there and showed no books, as
    if the platform had lost them. A command that only reads exits 2 and says where it looked
    and what it wants: a DSN, or the directory of the first run."""
    data_dir = tmp_path / "state"
    done = subprocess.run(
        [str(BIN / "platform-ingest"), "--data-dir", str(data_dir), *argv],
        env=bare_environment(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert not data_dir.exists()
    assert not (tmp_path / ".platform-ingest").exists()
    assert done.stdout == ""
    (said,) = done.stderr.splitlines()
    assert f"no embedded Postgres in {data_dir}" in said
    assert "--dsn" in said and "PLATFORM_INGEST_DSN" in said and "--data-dir" in said


@pytest.mark.postgres
def test_sweep_creates_the_embedded_postgres_and_then_show_reads_it(tmp_path: Path) -> None:
    """The commands that write (`migrate`, `sweep`, `run`) still create the cluster, and say
    where; a `show` given that directory reads it."""
    book = tmp_path / "book-1"
    book.mkdir()
    command = [str(BIN / "platform-ingest"), "--data-dir", str(tmp_path / "state")]

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *argv],
            env=bare_environment(),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )

    swept = run("sweep", "--auto", str(book))
    assert swept.returncode == 0, swept.stderr
    assert f"creating a new embedded Postgres in {tmp_path / 'state'}" in swept.stderr
    shown = run("show", "--json")
    assert shown.returncode == 0, shown.stderr
    assert [each["book_id"] for each in json.loads(shown.stdout)["books"]] == ["book-1"]
    assert f"using the embedded Postgres in {tmp_path / 'state'}" in shown.stderr

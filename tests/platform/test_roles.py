"""The owner role and the worker role of docs/platform/workers.md ("Roles"), on a real server.

The roles are made by the documented SQL itself, read from the page, and every command connects as
one of them (a DSN with `user=`): the owner migrates and sets projections up, the worker runs every
command of its list and creates nothing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo

from platform_ingest import Database, migrate
from platform_ingest.cli.main import main
from platform_ingest.store import migrations, statements
from platform_journals import (
    RUN_A,
    RUN_B,
    RUN_C,
    append,
    hello,
    log_entries,
    spend,
    start_worker,
    stop_worker,
    unit_done,
    wait_for,
    write,
)

pytestmark = pytest.mark.postgres

WORKERS_MD = Path(__file__).resolve().parents[2] / "docs" / "platform" / "workers.md"
NEW_DATABASE = "A new database: a schema of its own"
MIGRATED_BEFORE = "A database migrated before: the tables stay where they are"
PASSWORD = "a-password-for-the-test"
"""Set on the roles: ignored by a server that trusts local connections, used by one that asks."""
RECORDING = "projection_fixtures:Recording"
RUN_D = "7c3d2e1f-0000-4000-8000-00000000000d"
RUN_E = "8e4f3a2b-0000-4000-8000-00000000000e"
_numbers = itertools.count(1)
MakeBook = Callable[[str], Path]


def documented_sql(heading: str) -> list[str]:
    """The statements of the SQL block under the heading `heading` of workers.md."""
    text = WORKERS_MD.read_text()
    start = text.find(f"### {heading}\n")
    assert start >= 0, f"workers.md has no section {heading!r}"
    found = re.search(r"```sql\n(.*?)```", text[start:], flags=re.DOTALL)
    assert found is not None, f"no SQL block under {heading!r}"
    return [statement.strip() for statement in found.group(1).split(";") if statement.strip()]


@dataclass(frozen=True)
class Roles:
    owner: str
    worker: str
    owner_dsn: str
    worker_dsn: str
    admin_dsn: str
    """The test's database as the superuser: to look, never to do a role's work."""


def dsn_as(dsn: str, role: str) -> str:
    params = conninfo.conninfo_to_dict(dsn)
    params.update(user=role, password=PASSWORD)
    return conninfo.make_conninfo(**{key: str(value) for key, value in params.items()})


def make_roles(database_dsn: str, sql: list[str], *, owner: str | None = None) -> Iterator[Roles]:
    """The documented statements run as the superuser on the test's database, with role names of
    this test's own (roles belong to the whole server); the roles dropped after."""
    number = f"{os.getpid()}_{next(_numbers)}"
    worker = f"ingest_worker_{number}"
    owner = owner or f"ingest_owner_{number}"
    database = conninfo.conninfo_to_dict(database_dsn)["dbname"]
    made = [f"ingest_owner_{number}", worker]
    with psycopg.connect(database_dsn, autocommit=True) as admin:
        for documented in sql:
            statement = re.sub(r"\bingest_owner\b", owner, documented)
            statement = re.sub(r"\bingest_worker\b", worker, statement)
            statement = re.sub(r"\bDATABASE ingest\b", f'DATABASE "{database}"', statement)
            admin.execute(statement)  # type: ignore[arg-type]
        made = [role for role in made if _exists(admin, role)]
        for role in made:
            admin.execute(f"ALTER ROLE {role} PASSWORD '{PASSWORD}'")  # type: ignore[arg-type]
    try:
        yield Roles(
            owner, worker, dsn_as(database_dsn, owner), dsn_as(database_dsn, worker), database_dsn
        )
    finally:
        with psycopg.connect(database_dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = ANY(%s)",
                (made,),
            )
            for role in made:
                admin.execute(f"DROP OWNED BY {role} CASCADE")  # type: ignore[arg-type]
                admin.execute(f"DROP ROLE {role}")  # type: ignore[arg-type]


def _exists(admin: psycopg.Connection[tuple[object, ...]], role: str) -> bool:
    return (
        admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is not None
    )


@pytest.fixture
def roles(empty_dsn: str) -> Iterator[Roles]:
    """An empty database with the roles of "a new database: a schema of its own"."""
    yield from make_roles(empty_dsn, documented_sql(NEW_DATABASE))


def cli(capsys: pytest.CaptureFixture[str], dsn: str, *argv: str) -> tuple[int, str, str]:
    code = main(["--dsn", dsn, *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def ok(capsys: pytest.CaptureFixture[str], dsn: str, *argv: str) -> str:
    code, out, err = cli(capsys, dsn, *argv)
    assert code == 0, f"{argv}: exit {code}: {err}"
    return out


def version_of(admin_dsn: str) -> int:
    with psycopg.connect(admin_dsn) as connection:
        row = connection.execute("SELECT max(version) FROM ingest.ingest_schema_version").fetchone()
    assert row is not None
    return int(str(row[0]))


def last_seq(admin_dsn: str, schema: str, engine_run_id: str) -> int:
    with psycopg.connect(admin_dsn) as connection:
        row = connection.execute(
            f"SELECT last_seq FROM {schema}.attempts WHERE engine_run_id = %s",  # type: ignore[arg-type]
            (engine_run_id,),
        ).fetchone()
    return -1 if row is None else int(str(row[0]))


def _status_command(tmp_path: Path, payload: dict[str, object]) -> str:
    script = tmp_path / "status.py"
    script.write_text(f"import json\nprint(json.dumps({payload!r}))\n")
    return f"{sys.executable} {script}"


# --- the worker role's commands -------------------------------------------------------------------


def test_the_worker_role_runs_every_command_of_its_list(
    roles: Roles, make_book: MakeBook, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Migrated by the owner, every command the page lists for the worker role runs as it (exit
    0), and the worker role owns nothing afterwards."""
    assert "0 -> " in ok(capsys, roles.owner_dsn, "migrate")
    worker = roles.worker_dsn

    repaired = make_book("book-1")
    write(repaired, hello(), unit_done(2, "u-1", 0), spend(3, 1000), spend(4, "bad"))
    ok(capsys, worker, "sweep", "--auto", str(repaired))
    status = {
        "book_id": "book-1",
        "engine_run_id": RUN_A,
        "streams": [{"engine_run_id": RUN_A, "last_seq": 4, "projected_seq": 4}],
        "journal": "ok",
        "progress": {},
        "money": {"committed_micro_usd": 1800},
        "ceiling": None,
        "finished": {
            "outcome": "clean",
            "exit_code": 0,
            "stop": None,
            "refusal": None,
            "volume": {"units_done": 1, "units_total": 1},
            "money": {"committed_micro_usd": 1800},
        },
    }
    command = _status_command(tmp_path, status)
    assert json.loads(ok(capsys, worker, "repair", str(repaired), "--status-command", command))

    skipped = make_book("book-2")
    bad = spend(3, "12")
    write(skipped, hello(RUN_B, "book-2"), spend(2, 10), bad, spend(4, 20))
    ok(capsys, worker, "sweep", "--auto", str(skipped))
    ok(capsys, worker, "release", str(skipped), RUN_B, "--reason", "looked at it")
    ok(capsys, worker, "sweep", "--auto", str(skipped))  # quarantined again: the line is as it was
    sha = hashlib.sha256(bad).hexdigest()
    ok(capsys, worker, "skip", str(skipped), RUN_B, "3", "--sha256", sha, "--reason", "bad amount")
    ok(capsys, worker, "sweep", "--auto", str(skipped))
    assert last_seq(roles.admin_dsn, "ingest", RUN_B) == 4

    named = make_book("book-3")
    write(named, hello(RUN_C, "book-3"), spend(2, 10))
    ok(capsys, worker, "sweep", str(named))
    ok(capsys, worker, "name", str(named), RUN_C)
    ok(capsys, worker, "sweep", str(named))
    assert last_seq(roles.admin_dsn, "ingest", RUN_C) == 2
    append(named, hello(RUN_D, "book-3"))
    ok(capsys, worker, "sweep", str(named))
    ok(capsys, worker, "disown", str(named), RUN_D, "--reason", "another tenant")
    ok(capsys, worker, "undisown", str(named), RUN_D, "--reason", "ours after all")
    ok(capsys, worker, "exited", str(named), RUN_C, "0")

    stalled = make_book("book-4")
    write(stalled, hello(RUN_A, "book-4"), spend(2, 10), spend(5, 50))
    ok(capsys, worker, "sweep", "--auto", str(stalled))
    ok(capsys, worker, "abandon", str(stalled), RUN_A, "--reason", "journal lost")

    ok(capsys, worker, "show", "--json")
    ok(capsys, worker, "compact", "--quiet-for-s", "0")
    ok(capsys, worker, "prune", "--older-than-s", "0", "--reason", "retention")

    live = make_book("book-5")
    write(live, hello(RUN_E, "book-5"))
    log = tmp_path / "worker.log"
    process = start_worker(worker, live.parent, log)
    try:
        wait_for("book-5's hello applied", lambda: last_seq(roles.admin_dsn, "ingest", RUN_E) >= 1)
        append(live, spend(2, 30))
        wait_for("a new line applied", lambda: last_seq(roles.admin_dsn, "ingest", RUN_E) >= 2)
    finally:
        assert stop_worker(process) == 0, log.read_text()
    assert [e for e in log_entries(log) if e["level"] in ("ERROR", "CRITICAL")] == []

    with psycopg.connect(roles.admin_dsn) as connection:
        owned = connection.execute(
            "SELECT count(*) FROM pg_class WHERE relowner = %s::regrole", (roles.worker,)
        ).fetchone()
    assert owned == (0,)


MIGRATE_ONLY = frozenset(
    {"schema_lock", "schema_table_create", "schema_version_record", "schema_changed_notify"}
)
"""The statements only `migrate` runs once it found work to do: the owner role's."""


def _explain_params() -> dict[str, tuple[object, ...] | dict[str, object]]:
    """The parameters test_sql_statements.py plans each listed query with."""
    path = Path(__file__).with_name("test_sql_statements.py")
    spec = importlib.util.spec_from_file_location("listed_statements_plans", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    params: dict[str, tuple[object, ...] | dict[str, object]] = module.EXPLAIN_PARAMS
    return params


def test_every_statement_of_the_worker_role_is_granted(
    roles: Roles, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every listed statement but `migrate`'s own is permitted to the worker role by the
    documented grants: Postgres checks a query's privileges when it plans it (EXPLAIN), a COPY's
    target takes inserts, and a session statement needs none."""
    ok(capsys, roles.owner_dsn, "migrate")
    params = _explain_params()
    refused: list[str] = []
    with psycopg.connect(roles.worker_dsn, autocommit=True) as connection:
        for statement in statements.STATEMENTS:
            if statement.kind == "ddl" or statement.name in MIGRATE_ONLY:
                continue
            try:
                if statement.kind == "query":
                    text = f"EXPLAIN {statement.text}"
                    connection.execute(text, params[statement.name])  # type: ignore[arg-type]
                elif statement.kind == "copy":
                    found = re.match(r"COPY (\w+)", statement.text)
                    assert found is not None
                    row = connection.execute(
                        "SELECT has_table_privilege(%s, 'INSERT')", (found.group(1),)
                    ).fetchone()
                    if row != (True,):
                        refused.append(statement.name)
                else:
                    connection.execute(statement.text)  # type: ignore[arg-type]
            except psycopg.errors.InsufficientPrivilege:
                refused.append(statement.name)
    assert refused == []
    assert len(statements.STATEMENTS) > len(MIGRATE_ONLY) + 60  # the list, not an empty one


def test_the_worker_role_may_not_create_tables(
    roles: Roles, capsys: pytest.CaptureFixture[str]
) -> None:
    """The documented grants give the worker role rows, never a table of its own."""
    ok(capsys, roles.owner_dsn, "migrate")
    with (
        psycopg.connect(roles.worker_dsn) as connection,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        connection.execute("CREATE TABLE mine (x int)")


# --- migrate as either role ------------------------------------------------------------------


def test_migrate_as_the_worker_role_on_a_current_schema_is_a_no_op(
    roles: Roles, capsys: pytest.CaptureFixture[str]
) -> None:
    ok(capsys, roles.owner_dsn, "migrate")
    code, out, err = cli(capsys, roles.worker_dsn, "migrate")
    assert (code, out, err) == (
        0,
        f"schema version {migrations.SCHEMA_VERSION}: nothing to do\n",
        "",
    )


def test_migrate_as_the_worker_role_on_an_old_schema_names_the_owner_role(
    roles: Roles, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    owner_db = Database(roles.owner_dsn)
    migrate(owner_db, target=migrations.SCHEMA_VERSION - 1)
    owner_db.close()
    code, out, err = cli(capsys, roles.worker_dsn, "migrate")
    assert (code, out) == (1, "")
    assert f"run `platform-ingest migrate` as {roles.owner}, the owner role" in err
    assert f"role {roles.worker} may not bring the platform's schema" in err
    assert "Traceback" not in err
    assert version_of(roles.admin_dsn) == migrations.SCHEMA_VERSION - 1

    out = ok(capsys, roles.owner_dsn, "migrate")
    assert out == f"schema version {migrations.SCHEMA_VERSION - 1} -> {migrations.SCHEMA_VERSION}\n"
    book = make_book("book-1")
    write(book, hello(), spend(2, 10))
    ok(capsys, roles.worker_dsn, "sweep", "--auto", str(book))  # the new step's tables: granted
    assert last_seq(roles.admin_dsn, "ingest", RUN_A) == 2


def test_migrate_as_the_worker_role_on_an_empty_database_says_who_may(
    roles: Roles, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, roles.worker_dsn, "migrate")
    assert code == 1
    assert f"role {roles.worker} may not create the platform's tables in schema ingest" in err
    assert "as the owner role" in err


# --- projections -----------------------------------------------------------------------------


def test_a_projection_set_up_by_the_owner_runs_as_the_worker_role(
    roles: Roles, make_book: MakeBook, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = ok(capsys, roles.owner_dsn, "migrate", "--projection", RECORDING)
    assert out.splitlines()[-1] == "projection recording version 1: set up"
    book = make_book("book-1")
    write(book, hello(), spend(2, 10), spend(3, 20))
    ok(capsys, roles.worker_dsn, "sweep", "--auto", "--projection", RECORDING, str(book))

    live = make_book("book-2")
    write(live, hello(RUN_B, "book-2"))
    log = tmp_path / "worker.log"
    process = start_worker(roles.worker_dsn, live.parent, log, "--projection", RECORDING)
    try:
        append(live, spend(2, 30))
        wait_for(
            "the worker as the worker role applies book-2 through the projection",
            lambda: last_seq(roles.admin_dsn, "ingest", RUN_B) >= 2,
        )
    finally:
        assert stop_worker(process) == 0, log.read_text()
    with psycopg.connect(roles.admin_dsn) as connection:
        recorded = connection.execute(
            "SELECT engine_run_id, seq FROM ingest.recorded_events ORDER BY engine_run_id, seq"
        ).fetchall()
    assert recorded == [(RUN_A, 1), (RUN_A, 2), (RUN_A, 3), (RUN_B, 1), (RUN_B, 2)]
    told = [e["message"] for e in log_entries(log) if "may not run its setup" in e["message"]]
    assert len(told) == 1 and "set it up at version 1" in told[0]


def test_a_projection_the_owner_never_set_up_names_the_remedy(
    roles: Roles, make_book: MakeBook, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ok(capsys, roles.owner_dsn, "migrate")
    book = make_book("book-1")
    write(book, hello(), spend(2, 10))
    code, _, err = cli(
        capsys, roles.worker_dsn, "sweep", "--auto", "--projection", RECORDING, str(book)
    )
    assert code == 2
    assert "run `platform-ingest migrate --projection SPEC`" in err
    assert "as the owner role" in err
    assert "InsufficientPrivilege" not in err and "Traceback" not in err
    assert last_seq(roles.admin_dsn, "ingest", RUN_A) == -1  # no journal was read

    log = tmp_path / "worker.log"
    process = start_worker(roles.worker_dsn, book.parent, log, "--projection", RECORDING)
    assert process.wait(timeout=60) == 2
    text = log.read_text()
    assert "run `platform-ingest migrate --projection SPEC`" in text
    assert "InsufficientPrivilege" not in text and "Traceback" not in text


# --- a database migrated before -------------------------------------------------------------------


def test_a_database_migrated_before_keeps_its_tables_and_the_worker_role_works_it(
    fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """A database migrated by an earlier release (its tables in `public`, owned by the role that
    migrated it): the documented grants, nothing moved, and the worker role works it."""
    with psycopg.connect(fresh_dsn) as connection:
        row = connection.execute("SELECT current_user").fetchone()
    assert row is not None
    admin = str(row[0])
    for roles in make_roles(fresh_dsn, documented_sql(MIGRATED_BEFORE), owner=admin):
        code, out, _ = cli(capsys, roles.worker_dsn, "migrate")
        assert (code, out) == (0, f"schema version {migrations.SCHEMA_VERSION}: nothing to do\n")
        book = make_book("book-1")
        write(book, hello(), spend(2, 10))
        ok(capsys, roles.worker_dsn, "sweep", "--auto", str(book))
        assert last_seq(roles.admin_dsn, "public", RUN_A) == 2

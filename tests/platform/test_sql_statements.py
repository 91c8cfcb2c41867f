"""Every SQL statement is listed in `_sql`, each one's plan avoids full scans of growing tables, and
nothing unlisted ever runs."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo
from psycopg.types.json import Jsonb

import platform_ingest
from platform_ingest import Database, migrate, sweep_book
from platform_ingest.errors import ProjectionSetupNotPermitted, SchemaNotPermitted
from platform_ingest.ingest.books import register_book
from platform_ingest.ingest.group_pass import GroupPass
from platform_ingest.ingest.projection_step import install, projections_behind
from platform_ingest.ingest.rebuild import rebuild
from platform_ingest.operate.compact import compact_quiet
from platform_ingest.operate.follow import follow
from platform_ingest.operate.forget import forget_book
from platform_ingest.operate.naming import name_stream, release_attempt, release_book_error
from platform_ingest.operate.prune import prune_runs
from platform_ingest.operate.remedies import (
    abandon_attempt,
    disown_stream,
    report_exit,
    skip_line,
    undisown_stream,
)
from platform_ingest.operate.repair import repair_book
from platform_ingest.operate.show import show_state
from platform_ingest.store import statements as _sql
from platform_ingest.store.db import set_statement_hook
from platform_ingest.store.schema import require_current
from platform_ingest.worker.membership import live_workers
from platform_journals import (
    RUN_A,
    RUN_B,
    append,
    dsn_for,
    hello,
    refuse_poison_units,
    spend,
    sweep,
    unit_done,
    write,
)
from projection_fixtures import FailingFor, Recording

pytestmark = pytest.mark.postgres

VECTORS = Path(__file__).resolve().parent.parent / "vectors"
GROWING_TABLES = {
    "books",
    "runs",
    "attempts",
    "line_hashes",
    "run_units",
    "book_problems",
    "operator_actions",
    "line_skips",
    "stream_starts",
    "pruned_streams",
    "projection_tracking",
    "projection_failures",
}
SHA = hashlib.sha256(b"x").digest()

# Representative parameters for EXPLAIN, one entry per listed query (a new statement must add one):
# by position, or by name for a statement that names its parameters.
EXPLAIN_PARAMS: dict[str, tuple[Any, ...] | dict[str, Any]] = {
    "schema_table_exists": (),
    "schema_lock": (1,),
    "schema_version_read": (),
    "schema_version_record": (9,),
    "schema_changed_notify": ("9",),
    "schema_owner": (),
    "books_insert": (["book-00042", "book-09999"], ["/books/book-00042", "/books/book-09999"]),
    "book_select": ("book-00042",),
    "book_select_by_path": ("/books/book-00042",),
    "book_lock": (1,),
    "books_select": (["book-00042", "book-00043"],),
    "books_scan_advance": {
        "scan_offset": [1],
        "scan_line_bytes": [0],
        "scan_sha256": [SHA],
        "scan_file": ["f"],
        "scan_stream": [None],
        "scan_mode": ["auto"],
        "error_kind": [None],
        "error_seq": [None],
        "error_offset": [None],
        "error_detail": [None],
        "starts_from_zero": [False],
        "book_id": ["book-00042"],
        "scan_epoch": [0],
    },
    "runs_update": {
        "state": ["running"],
        "reason": [None],
        "stop": [None],
        "refusal": [None],
        "outcome": [None],
        "exit_code": [None],
        "committed_micro_usd": [5],
        "shortfall_micro_usd": [None],
        "settled_micro_usd": [None],
        "progress": ["[]"],
        "run_id": [42],
    },
    "books_lock_for_transaction": ([1, 2],),
    "books_row_lock_skip": (["book-00042", "book-00043"],),
    "book_unlock": (1,),
    "book_scan_advance": {
        "scan_offset": 10,
        "scan_line_bytes": 5,
        "scan_sha256": SHA,
        "scan_file": "1:2",
        "scan_stream": "s",
        "scan_mode": "auto",
        "error_kind": None,
        "error_seq": None,
        "error_offset": None,
        "error_detail": None,
        "starts_from_zero": True,
        "book_id": "book-00042",
        "scan_epoch": 0,
    },
    "book_scan_back": {
        "hint_offset": 10,
        "hint_line_bytes": 5,
        "hint_sha256": SHA,
        "hint_file": "1:2",
        "hint_stream": "s",
        "book_id": "book-00042",
    },
    "book_scan_reset": ("book-00042",),
    "book_problem_set": ("book-00042", "journal_not_regular", "a FIFO", None),
    "book_problems_clear": ("book-00042", ["journal_not_regular", "database_refused"]),
    "book_journal_missing_ended": ("book-00042", "book-00042", ["active", "parked", "pending"]),
    "book_problems_of_books": (["book-00042", "book-00043"],),
    "books_page": ("book-00042", 500),
    "books_by_id": (["book-00042", "book-00043"],),
    "run_insert": ("book-00042",),
    "runs_of_book": ("book-00042",),
    "run_current_lock": ("book-00042",),
    "runs_lock": ([42, 43],),
    "runs_lock_skip": ([42, 43],),
    "run_update": {
        "state": "running",
        "reason": None,
        "stop": None,
        "refusal": None,
        "outcome": None,
        "exit_code": None,
        "committed_micro_usd": 5,
        "shortfall_micro_usd": None,
        "settled_micro_usd": None,
        "progress": "[]",
        "run_id": 42,
    },
    "runs_of_books": (["book-00042", "book-00043"],),
    "attempt_insert": ("book-00042", 42, "stream-new", "pending"),
    "attempts_of_book": ("book-00042",),
    "attempt_by_stream_lock": ("book-00042", "stream-00042"),
    "attempts_lock": ([42, 43],),
    "attempts_lock_skip": ([42, 43],),
    "attempts_of_books": (["book-00042", "book-00043"],),
    "attempt_advance": {
        "state": "active",
        "last_seq": 8,
        "last_line_sha256": SHA,
        "hint_offset": 100,
        "hint_line_bytes": 10,
        "hint_file": "1:2",
        "stream_index": 1,
        "stream_version": "1.3",
        "chunker_version": "c1",
        "error_kind": None,
        "error_seq": None,
        "error_offset": None,
        "error_detail": None,
        "last_line_time": "t",
        "applied": True,
        "attempt_id": 42,
        "expected_seq": 7,
    },
    "attempts_advance": {
        "state": ["active"],
        "last_seq": [8],
        "last_line_sha256": [SHA],
        "hint_offset": [100],
        "hint_line_bytes": [10],
        "hint_file": ["1:2"],
        "stream_index": [1],
        "stream_version": ["1.3"],
        "chunker_version": ["c1"],
        "error_kind": [None],
        "error_seq": [None],
        "error_offset": [None],
        "error_detail": [None],
        "last_line_time": ["t"],
        "applied": [True],
        "attempt_id": [42],
        "expected_seq": [7],
    },
    "attempt_release": ("active", 42, "quarantined"),
    "attempt_quarantine": {
        "error_kind": "database_refused",
        "error_seq": 8,
        "error_offset": 100,
        "error_detail": "SQLSTATE 54000",
        "attempt_id": 42,
        "state": "active",
    },
    "attempt_exited": (-9, 42),
    "attempt_set_state": ("abandoned", 42, "stalled"),
    "attempt_insert_disowned": ("book-00042", 42, "stream-foreign"),
    "attempt_delete_disowned": (42,),
    "attempts_unpark": ("book-00042",),
    "action_insert": ("book-00042", "stream-00042", "skip", "ops", "why", Jsonb({})),
    "actions_of_books": (["book-00042", "book-00043"],),
    "line_skip_insert": (42, 8, SHA, 1),
    "line_skips_of_attempts": ([42, 43],),
    "book_epoch_bump": ("book-00042",),
    "book_error_clear": ("book-00042",),
    "book_select_lock": ("book-00042",),
    "book_holdings": ("book-00042", "book-00042", "book-00042"),
    "book_forget_actions": ("book-00042",),
    "book_forget_problems": ("book-00042",),
    "book_forget_starts": ("book-00042",),
    "book_forget_failures": ("book-00042",),
    "book_forget": ("book-00042",),
    "forgotten_insert": ("book-00042", "/books/book-00042", "ops", "why", Jsonb({})),
    "attempts_of_runs": ([42, 43],),
    "line_hashes_window": (42, 10, 4106),
    "units_insert": ([42], ["u-x"], [1], [42], [3]),
    "line_hashes_insert": ([42], [8], [SHA]),
    "units_of_runs": ([42, 43],),
    "workers_live": (),
    "stream_starts_insert": {
        "book_id": "book-00042",
        "engine_run_id": ["s-1"],
        "hint_offset": [10],
        "hint_line_bytes": [5],
        "hint_sha256": [SHA],
        "hint_file": ["1:2"],
        "hint_stream": [None],
    },
    "stream_starts_forget": ("book-00042",),
    "stream_start_of": ("book-00042", "stream-00042"),
    "pruned_stream_exists": ("book-00042", "stream-00042"),
    "pruned_streams_of_book": ("book-00042",),
    "quiet_attempts": (60.0, 64),
    "compactions_pending": (64,),
    "attempt_for_compaction": (60.0, 42),
    "line_hashes_page": (42, 0, 500, 50000),
    "book_lock_for_transaction": (1,),
    "attempt_compacted": (8, SHA, 42, 8),
    "line_hashes_delete_range": (42, 0, 10000),
    "attempt_compaction_done": (42,),
    "runs_to_prune": (60.0, 60.0, 256),
    "run_for_pruning": (42,),
    "attempts_of_run_lock": (60.0, 42),
    "pruned_stream_insert": ("book-00042", "stream-x", 42, 42, 8),
    "line_skips_of_run_delete": (42,),
    "attempts_of_run_delete": (42,),
    "run_delete": (42,),
    "prune_cleanup_pending": (256,),
    "run_units_delete_some": (42, 42, 10000),
    "run_units_count": (42,),
    "prune_cleanup_done": (42,),
    "attempts_lag_of_books": (["book-00042", "book-00043"],),
    "unnamed_starts_of_books": (["book-00042", "book-00043"],),
    "projection_lag_of_books": (["book-00042", "book-00043"], ["ledger", "usage"]),
    "projection_register": ("ledger", 1),
    "projections_lock": (["ledger", "usage"],),
    "projection_tracking_lock": (["ledger", "usage"], [42, 43]),
    "projection_tracking_write": {
        "projection": ["ledger", "usage"],
        "attempt_id": [42, 42],
        "last_seq": [10, 10],
    },
    "projection_failure_set": ("book-00042", "stream-42", "ledger", 10, "ValueError: no"),
    "projection_failures_clear": ("book-00042", ["stream-42", "stream-43"]),
    "projection_failures_of_books": (["book-00042", "book-00043"],),
    "platform_writes_of_transaction": (["runs", "attempts"],),
    "projection_lock_for_rebuild": ("ledger",),
    "projection_version_of": ("ledger",),
    "projection_version_set": (2, "ledger"),
    "projection_rebuilt": ("ledger",),
    "projection_tracking_forget": ("ledger",),
    "projection_tracking_of_attempts": ("ledger", [42, 43]),
    "projection_tracking_start": ("ledger", 42),
    "projection_tracking_one_lock": ("ledger", 42),
    "projection_tracking_advance": (10, "ledger", 42, 9),
    "attempt_cursor_share": (42,),
    "pruned_streams_for_rebuild": ("ledger", "book-00042"),
    "books_of_runs": ([42, 43],),
    "application_name_set": ("platform-ingest worker w-1 0123456789",),
    "changes_notify": (['{"run_id":1}'],),
}


@pytest.fixture(scope="module")
def filled(pg_admin_dsn: str, pg_template: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """The schema with enough rows that the planner would pick an index over a full scan."""
    name = f"ingest_plans_{os.getpid()}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    with psycopg.connect(dsn_for(pg_admin_dsn, name), autocommit=True) as connection:
        connection.execute(
            "INSERT INTO books (book_id, path) SELECT 'book-' || lpad(n::text, 5, '0'),"
            " '/books/book-' || lpad(n::text, 5, '0') FROM generate_series(1, 5000) n"
        )
        connection.execute(
            "INSERT INTO runs (book_id, state) SELECT 'book-' || lpad((1 + n % 5000)::text, 5,"
            " '0'), 'running' FROM generate_series(1, 10000) n"
        )
        connection.execute(
            "INSERT INTO attempts (book_id, run_id, engine_run_id, state) SELECT"
            " r.book_id, r.run_id, 'stream-' || lpad(r.run_id::text, 5, '0'), 'active'"
            " FROM runs r"
        )
        connection.execute(
            "INSERT INTO line_hashes SELECT a, s, '\\x00'::bytea FROM generate_series(1, 400) a,"
            " generate_series(1, 500) s"
        )
        connection.execute(
            "INSERT INTO run_units (run_id, unit, unit_index, attempt_id, seq) SELECT"
            " 1 + n % 10000, 'u-' || n, n, 1, n FROM generate_series(1, 50000) n"
        )
        connection.execute(
            "INSERT INTO book_problems (book_id, kind, detail) SELECT 'book-' ||"
            " lpad(n::text, 5, '0'), 'journal_not_regular', 'a FIFO'"
            " FROM generate_series(1, 5000, 2) n"
        )
        connection.execute(
            "INSERT INTO operator_actions (book_id, engine_run_id, action, by_whom, reason)"
            " SELECT 'book-' || lpad((1 + n % 5000)::text, 5, '0'), 'stream-x', 'release',"
            " 'ops', 'why' FROM generate_series(1, 20000) n"
        )
        connection.execute(
            "INSERT INTO line_skips SELECT a, 7, '\\x00'::bytea, 1 FROM generate_series(1, 5000) a"
        )
        connection.execute(
            "INSERT INTO stream_starts SELECT 'book-' || lpad((1 + n % 5000)::text, 5, '0'),"
            " 'stream-' || n, n, 5, '\\x00'::bytea, '1:2', NULL FROM generate_series(1, 20000) n"
        )
        connection.execute(
            "INSERT INTO pruned_streams (book_id, engine_run_id, run_id, attempt_id, last_seq,"
            " cleanup_pending) SELECT 'book-' || lpad((1 + n % 5000)::text, 5, '0'),"
            " 'pruned-' || n, n, n, 9, n % 100 = 0 FROM generate_series(1, 20000) n"
        )
        connection.execute(
            "INSERT INTO projections (name, version) VALUES ('ledger', 1), ('usage', 1)"
        )
        connection.execute(  # many projections: a rebuild's reset touches one projection's rows
            "INSERT INTO projection_tracking SELECT CASE WHEN n % 50 = 0 THEN 'ledger'"
            " ELSE 'usage' END, n, 9 FROM generate_series(1, 20000) n"
        )
        connection.execute(
            "INSERT INTO projection_failures (book_id, engine_run_id, projection, detail) SELECT"
            " 'book-' || lpad((1 + n % 5000)::text, 5, '0'), 'stream-' || n, 'ledger', 'no'"
            " FROM generate_series(1, 20000, 10) n"
        )
        connection.execute("ANALYZE")
        yield connection
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _scans(plan: dict[str, Any]) -> Iterator[tuple[str, str | None]]:
    yield plan["Node Type"], plan.get("Relation Name")
    for child in plan.get("Plans", []):
        yield from _scans(child)


def test_every_query_has_explain_parameters() -> None:
    """The plan check covers every listed query, and only listed ones."""
    queries = {statement.name for statement in _sql.STATEMENTS if statement.kind == "query"}
    assert queries == set(EXPLAIN_PARAMS)
    names = [statement.name for statement in _sql.STATEMENTS]
    assert len(names) == len(set(names)), "two statements share a name"


@pytest.mark.parametrize(
    "statement",
    [statement for statement in _sql.STATEMENTS if statement.kind == "query"],
    ids=lambda statement: statement.name,
)
def test_query_plan_scans_no_growing_table_in_full(
    statement: _sql.Statement, filled: psycopg.Connection[tuple[object, ...]]
) -> None:
    """EXPLAIN on a filled database: no sequential scan of a table that grows with books or events."""
    row = filled.execute(
        f"EXPLAIN (FORMAT JSON) {statement.text}", EXPLAIN_PARAMS[statement.name]
    ).fetchone()
    assert row is not None
    explained: Any = row[0]
    plan = explained[0]["Plan"]
    full_scans = [
        relation
        for node, relation in _scans(plan)
        if node == "Seq Scan" and relation in GROWING_TABLES
    ]
    assert full_scans == [], json.dumps(plan, indent=1)


COPY_STATEMENT = re.compile(
    r"COPY (?P<table>\w+) \((?P<columns>[\w, ]+)\) FROM STDIN \(FORMAT BINARY\)"
)


def _copy_statements() -> list[_sql.Statement]:
    return [statement for statement in _sql.STATEMENTS if statement.kind == "copy"]


def test_every_copy_is_a_binary_copy_from_stdin_with_a_type_a_column() -> None:
    """A COPY is listed with its table, its columns and one type a column (its rows' format)."""
    assert _copy_statements(), "no COPY statement is listed"
    for statement in _copy_statements():
        match = COPY_STATEMENT.fullmatch(statement.text)
        assert match is not None, statement.text
        columns = match["columns"].split(", ")
        assert len(statement.types) == len(columns), statement.name
    for statement in _sql.STATEMENTS:
        assert (statement.kind == "copy") == statement.text.startswith("COPY"), statement.name


@pytest.mark.parametrize("statement", _copy_statements(), ids=lambda statement: statement.name)
def test_copy_target_has_its_columns_of_their_types(
    statement: _sql.Statement, filled: psycopg.Connection[tuple[object, ...]]
) -> None:
    """A COPY has no plan to check; its target is checked instead: the table exists in the
    migrated schema and has every column the COPY names, of the type its rows are sent as."""
    match = COPY_STATEMENT.fullmatch(statement.text)
    assert match is not None
    rows = filled.execute(
        "SELECT a.attname, format_type(a.atttypid, NULL) FROM pg_attribute a"
        " WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped",
        (match["table"],),
    ).fetchall()
    assert rows, f"table {match['table']} does not exist"
    types = {str(name): str(kind) for name, kind in rows}
    sent = dict(zip(match["columns"].split(", "), statement.types, strict=True))
    type_names = {"int8": "bigint", "int4": "integer", "text": "text", "bytea": "bytea"}
    assert {column: types.get(column) for column in sent} == {
        column: type_names[kind] for column, kind in sent.items()
    }


def test_a_copy_runs_only_through_the_copy_helper(db: Database) -> None:
    """The copy helper refuses an unlisted COPY and a listed query; the execute helper a COPY."""
    rogue = _sql.Statement("rogue", "COPY books (book_id) FROM STDIN", kind="copy", types=("text",))
    with pytest.raises(platform_ingest.IngestError, match="not in the listed statements"):
        db.copy(rogue, [["book-x"]])
    with pytest.raises(platform_ingest.IngestError, match="cannot run here"):
        db.copy(_sql.BOOK_SELECT, [["book-x"]])
    with pytest.raises(platform_ingest.IngestError, match="cannot run here"):
        db.execute(_sql.LINE_HASHES_COPY)


def test_plan_check_sees_a_full_scan(filled: psycopg.Connection[tuple[object, ...]]) -> None:
    """The check can fail: a lookup by an unindexed column shows as a Seq Scan of its table."""
    row = filled.execute(
        "EXPLAIN (FORMAT JSON) SELECT seq FROM line_hashes WHERE sha256 = %s", (SHA,)
    ).fetchone()
    assert row is not None
    explained: Any = row[0]
    assert ("Seq Scan", "line_hashes") in set(_scans(explained[0]["Plan"]))


def test_only_the_execute_helper_talks_to_the_driver() -> None:
    """Only `store/db.py` talks to the driver for the platform: every platform statement passes the helper
    that refuses unlisted text. The one other module is `projections`, the projections' own
    channel (its `ProjectionSession`), which refuses writes to the platform's tables
    (tests/platform/test_projections.py)."""
    package = Path(platform_ingest.__file__).parent
    offenders = []
    paths = sorted(package.rglob("*.py"))
    assert package / "ingest" / "apply.py" in paths
    for path in paths:
        if path.relative_to(package).as_posix() in ("store/db.py", "projections.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"executemany", "cursor", "pipeline"}
            ):
                offenders.append(f"{path.relative_to(package)}:{node.lineno}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "execute"
                and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "db")
                and not (
                    isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "db"
                )
            ):
                offenders.append(f"{path.relative_to(package)}:{node.lineno}")
    assert offenders == []


def test_unlisted_text_is_refused(db: Database) -> None:
    """The execute helper refuses a statement whose text is not in the list."""
    rogue = _sql.Statement("rogue", "SELECT 1")
    with pytest.raises(platform_ingest.IngestError, match="not in the listed statements"):
        db.execute(rogue)


def _fake_status(tmp_path: Path, status: dict[str, Any]) -> str:
    script = tmp_path / "fake_status.py"
    script.write_text(f"import json, sys\nprint(json.dumps({status!r}))\n")
    return f"{sys.executable} {script}"


def _follow_once(db: Database, dsn: str, book: Path) -> None:
    """`show --follow` through one change: a line applied while it listens."""
    calls = 0

    def stopping() -> bool:
        nonlocal calls
        calls += 1
        if calls == 2:
            append(book, spend(3, 9))
            sweep_book(db, book, mode="auto")
        return calls > 2

    listener = Database(dsn)
    printed: list[str] = []
    try:
        follow(db, listener, None, as_json=True, write=printed.append, stopping=stopping)
    finally:
        listener.close()
    assert len(printed) > 1, "the change was not printed"


class _RecordingV2(Recording):
    version = 2

    def reset(self, session: Any) -> None:
        session.execute("DROP TABLE recorded_events")


@contextmanager
def _unprivileged(dsn: str, *rows_of: str) -> Iterator[Database]:
    """The database as a role of its own that may create nothing and holds the rows of the tables
    `rows_of` only: what a command refused for want of privileges runs."""
    role = f"unprivileged_{os.getpid()}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'x'")  # type: ignore[arg-type]
        admin.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")  # as since Postgres 15
        for table in rows_of:
            admin.execute(f"GRANT SELECT, INSERT, UPDATE ON {table} TO {role}")  # type: ignore[arg-type]
    params = conninfo.conninfo_to_dict(dsn)
    params.update(user=role, password="x")
    db = Database(conninfo.make_conninfo(**{key: str(value) for key, value in params.items()}))
    try:
        yield db
    finally:
        db.close()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")  # type: ignore[arg-type]
            admin.execute(f"DROP ROLE {role}")  # type: ignore[arg-type]


def test_a_full_workload_runs_every_listed_statement_and_nothing_else(
    empty_dsn: str, tmp_path: Path, make_book: Callable[[str], Path]
) -> None:
    """A full workload runs only listed statements, and uses every listed statement."""
    seen: set[str] = set()

    def record(statement: _sql.Statement) -> None:
        assert statement.text in _sql.LISTED_TEXTS
        seen.add(statement.name)

    set_statement_hook(record)
    db = Database(empty_dsn)
    try:
        with _unprivileged(empty_dsn) as unprivileged, pytest.raises(SchemaNotPermitted):
            migrate(unprivileged)
        migrate(db)
        require_current(db)
        book = make_book("book-vectors")
        for index, entry in enumerate(json.loads((VECTORS / "journals.json").read_text())):
            shutil.copy(VECTORS / entry["file"], book / "events.jsonl")
            sweep(db, book)
            sweep(db, book)
            if index == 0:
                db.execute(_sql.BOOK_SCAN_RESET, ("book-vectors",))
        named = make_book("book-named")
        name_stream(db, str(named), RUN_A)
        write(named, hello(RUN_A, book="book-named"), spend(2, "bad"), hello(RUN_B, "book-named"))
        sweep(db, named, auto=False)
        release_attempt(db, str(named), RUN_A)
        write(
            named,
            hello(RUN_A, book="book-named"),
            spend(2, 5),
            unit_done(3, "u-1", 0),
            hello(RUN_B, "book-named"),
        )
        sweep(db, named, auto=False)
        status = {
            "book_id": "book-named",
            "engine_run_id": RUN_A,
            "streams": [{"engine_run_id": RUN_A, "last_seq": 2, "projected_seq": 2}],
            "journal": "ok",
            "progress": {},
            "money": {"committed_micro_usd": 7},
            "ceiling": None,
            "finished": None,
        }
        repair_book(db, str(named), status_command=_fake_status(tmp_path, status))
        fifo = make_book("book-fifo")
        os.mkfifo(fifo / "events.jsonl")
        with pytest.raises(platform_ingest.errors.JournalNotRegular):
            sweep(db, fifo)
        show_state(db)
        (fifo / "events.jsonl").unlink()
        write(fifo, hello(book="book-fifo"), unit_done(2, "u-1", 0), unit_done(3, "poison", 1))
        with psycopg.connect(empty_dsn, autocommit=True) as admin:
            refuse_poison_units(admin)
        sweep(db, fifo)
        again = make_book("book-unit-again")
        write(again, hello(book="book-unit-again"), unit_done(2, "u-1", 0), unit_done(3, "u-1", 0))
        sweep(db, again)
        remedied = make_book("book-remedies")
        name_stream(db, str(remedied), RUN_A)
        report_exit(db, str(remedied), RUN_A, -9)
        bad = b'{"seq":2,"type":"spend","time":"x"}\n'
        write(
            remedied,
            hello(RUN_A, book="book-remedies"),
            bad,
            spend(3, 5),
            hello(RUN_B, "book-remedies"),
        )
        sweep(db, remedied, auto=False)
        skip_line(db, str(remedied), RUN_A, 2, sha256=hashlib.sha256(bad).hexdigest(), reason="r")
        sweep(db, remedied, auto=False)
        disown_stream(db, str(remedied), RUN_B, reason="not ours")
        undisown_stream(db, str(remedied), RUN_B, reason="ours after all")
        disown_stream(db, str(remedied), RUN_B, reason="not ours")
        stray = make_book("book-stray")  # a line of no stream, released; then the book forgotten
        write(stray, b"no stream\n")
        sweep(db, stray)
        release_book_error(db, str(stray), reason="looked")
        forget_book(db, str(stray), reason="registered by mistake")
        abandoned = make_book("book-abandoned")
        name_stream(db, str(abandoned), RUN_A)
        abandon_attempt(db, str(abandoned), RUN_A, reason="never started")
        started = make_book("book-started")  # a foreign stream passed, then named: read from it
        name_stream(db, str(started), RUN_A)
        write(started, hello(RUN_A, book="book-started"), hello(RUN_B, book="book-started"))
        sweep(db, started, auto=False)
        name_stream(db, str(started), RUN_B)
        sweep(db, started, auto=False)
        compact_quiet(db, quiet_for_s=0.0)
        prune_runs(db, older_than_s=0.0)
        db.execute(_sql.BOOK_SCAN_RESET, ("book-vectors",))
        sweep(db, book)  # from byte 0: the pruned streams are skipped
        show_state(db, [str(named)])
        projected = make_book("book-projected")
        write(projected, hello(book="book-projected"))
        sweep_book(db, projected, mode="auto", projections=[FailingFor()])
        append(projected, spend(2, 5))
        with pytest.raises(platform_ingest.ProjectionFailed):
            sweep_book(db, projected, mode="auto", projections=[FailingFor(["book-projected"])])
        show_state(db, [str(projected)])
        sweep_book(db, projected, mode="auto", projections=[FailingFor()])
        rebuild(db, _RecordingV2())  # a new version: reset, then caught up from the journals
        projections_behind(db, ["book-projected"], [_RecordingV2.name])  # a survey's, a sweep's
        _follow_once(db, empty_dsn, projected)
        grouped = [make_book(f"book-group-{number}") for number in (1, 2)]
        for number, directory in enumerate(grouped, 1):
            write(directory, hello(book=f"book-group-{number}"), unit_done(2, "u-1", 0))
            register_book(db, directory, [directory.parent])
        group = GroupPass(db, mode="auto")
        group.run(["book-group-1", "book-group-2"])  # new streams
        for directory in grouped:
            append(directory, unit_done(3, "u-2", 1))
        group.run(["book-group-1", "book-group-2"])  # their cursors moved, their rows locked
        with (
            _unprivileged(empty_dsn, "projections") as unprivileged,
            pytest.raises(ProjectionSetupNotPermitted),  # set up at version 2 only
        ):
            install(unprivileged, [Recording()])
        db.execute(_sql.APPLICATION_NAME_SET, ("platform-ingest worker w-1 0123456789",))
        live_workers(db)
        db.discard_plans()  # each survey's first statement (tests/platform/test_plans.py)
        db.listen(_sql.LISTEN_SCHEMA)  # the worker's control listener, after its own channel
    finally:
        set_statement_hook(None)
        db.close()
    listed = {statement.name for statement in _sql.STATEMENTS}
    assert seen <= listed
    assert listed - seen == set(), "listed statements no workload uses"

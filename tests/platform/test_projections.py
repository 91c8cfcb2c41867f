"""Projections: their effects commit with the cursor or not at all, a failing one stalls only its
book and shows on its attempt, their SQL cannot reach the platform's tables, and every commit is
announced by `pg_notify` without a book id or money."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platform_ingest import Database, sweep_book
from platform_ingest.cli.main import main
from platform_ingest.errors import (
    ProjectionFailed,
    ProjectionInvalid,
    ProjectionStatementRefused,
)
from platform_ingest.ingest.projection_step import install
from platform_ingest.operate.show import show_state
from platform_ingest.projections import Event, ProjectionSession, check_projections, load_projection
from platform_journals import (
    RUN_A,
    RUN_B,
    append,
    hello,
    spend,
    sweep,
    unit_done,
    write,
)
from projection_fixtures import FailingFor, Recording, recorded

pytestmark = pytest.mark.postgres


def _attempt(db: Database, book: Path) -> dict[str, Any]:
    state = show_state(db, [str(book)])
    (run,) = state["books"][0]["runs"]
    attempt: dict[str, Any] = run["attempts"][0]
    return attempt


def test_events_reach_the_projection_once_per_attempt_in_seq_order_with_their_context(
    db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    book = make_book("book-1")
    write(book, hello(RUN_A), spend(2, 10), unit_done(3, "u-1", 0), hello(RUN_B), spend(2, 30))
    projection = Recording()
    report = sweep_book(db, book, mode="auto", projections=[projection])
    assert report.lines_applied == 5
    assert [[(e.engine_run_id, e.seq, e.type) for e in call] for call in projection.calls] == [
        [(RUN_A, 1, "hello"), (RUN_A, 2, "spend"), (RUN_A, 3, "unit_done")],
        [(RUN_B, 1, "hello"), (RUN_B, 2, "spend")],
    ]
    first = projection.calls[0][1]
    run_id, attempt_id = sql.execute(
        "SELECT run_id, attempt_id FROM attempts WHERE engine_run_id = %s", (RUN_A,)
    ).fetchone() or (None, None)
    assert (first.book_id, first.run_id, first.attempt_id) == ("book-1", run_id, attempt_id)
    assert first.data == {"committed_micro_usd": 10}
    assert first.time.endswith("Z")
    tracking = sql.execute(
        "SELECT t.last_seq, a.last_seq FROM projection_tracking t JOIN attempts a USING"
        " (attempt_id) WHERE t.projection = 'recording'"
    ).fetchall()
    assert sorted(tracking) == [(2, 2), (3, 3)]


def test_duplicates_and_new_passes_never_give_an_event_twice(
    db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 10), spend(3, 20))
    sweep_book(db, book, mode="auto", projections=[Recording()])
    append(book, spend(2, 10), spend(3, 20), spend(4, 25))  # at-least-once: seqs 2, 3 again
    sweep_book(db, book, mode="auto", projections=[Recording()])
    sweep_book(db, book, mode="auto", projections=[Recording()])
    assert [row[2] for row in recorded(sql)] == [1, 2, 3, 4]


def test_a_failing_projection_rolls_the_batch_back_and_shows_on_the_attempt(
    db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 10))
    sweep_book(db, book, mode="auto", projections=[Recording()])
    append(book, spend(3, 99), unit_done(4, "u-1", 0))
    with pytest.raises(ProjectionFailed) as raised:
        sweep_book(db, book, mode="auto", projections=[FailingFor(["book-1"])])
    assert (raised.value.projection, raised.value.seq) == ("recording", 4)
    # Nothing of the batch: the platform's effects, the cursor and the projection's rows.
    attempt = _attempt(db, book)
    assert attempt["last_seq"] == 2
    assert attempt["error"]["kind"] == "projection_failed"
    assert attempt["error"]["projection"] == "recording"
    assert "RuntimeError" in attempt["error"]["detail"]
    assert sql.execute("SELECT committed_micro_usd FROM runs").fetchone() == (10,)
    assert sql.execute("SELECT count(*) FROM run_units").fetchone() == (0,)
    assert [row[2] for row in recorded(sql)] == [1, 2]
    with pytest.raises(ProjectionFailed):
        sweep_book(db, book, mode="auto", projections=[FailingFor(["book-1"])])
    assert _attempt(db, book)["error"]["failures"] == 2
    # Fixed: the same lines go through, once, and the failure is gone.
    report = sweep_book(db, book, mode="auto", projections=[Recording()])
    assert report.lines_applied == 2
    attempt = _attempt(db, book)
    assert (attempt["last_seq"], attempt["error"]) == (4, None)
    assert [row[2] for row in recorded(sql)] == [1, 2, 3, 4]


def test_a_failing_projection_stalls_only_its_own_book(
    db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    bad, good = make_book("book-bad"), make_book("book-good")
    write(bad, hello(book="book-bad"), spend(2, 5))
    write(good, hello(book="book-good"), spend(2, 7))
    projection = FailingFor(["book-bad"])
    with pytest.raises(ProjectionFailed):
        sweep_book(db, bad, mode="auto", projections=[projection])
    sweep_book(db, good, mode="auto", projections=[projection])
    assert {row[0] for row in recorded(sql)} == {"book-good"}
    assert _attempt(db, good)["last_seq"] == 2
    # The bad book's first batch was refused: its stream is not in Postgres, the book shows it.
    (shown,) = show_state(db, [str(bad)])["books"]
    assert shown["runs"] == []
    assert [problem["kind"] for problem in shown["problems"]] == ["projection_failed"]
    assert RUN_A in shown["problems"][0]["detail"]
    assert "RuntimeError" in shown["problems"][0]["detail"]
    sweep_book(db, bad, mode="auto", projections=[Recording()])
    assert show_state(db, [str(bad)])["books"][0]["problems"] == []
    assert _attempt(db, bad)["last_seq"] == 2


class _Statement:
    """A projection that runs one given statement on each `spend` event."""

    name = "statement"
    version = 1

    def __init__(self, statement: str) -> None:
        self.statement = statement

    def setup(self, session: ProjectionSession) -> None:
        pass

    def apply(self, session: ProjectionSession, events: Sequence[Event]) -> None:
        if any(event.type == "spend" for event in events):
            session.execute(self.statement)


@pytest.mark.parametrize(
    "statement",
    [
        "COMMIT",
        "rollback",
        "  SAVEPOINT s",
        "SET ROLE postgres",
        "SET SESSION statement_timeout = 0",
        "RESET ALL",
        "SELECT 1; COMMIT",
        "TRUNCATE line_hashes",
        'ALTER TABLE "runs" ADD COLUMN x int',
        "DROP TABLE public.attempts",
        "LOCK TABLE books",
        "UPDATE runs SET committed_micro_usd = committed_micro_usd + 1",
        "DELETE FROM line_hashes",
        "INSERT INTO operator_actions (book_id, action, by_whom, reason)"
        " VALUES ('book-1', 'x', 'y', 'z')",
        "DO $$BEGIN UPDATE attempts SET last_seq = 0; END$$",
        "WITH gone AS (DELETE FROM line_hashes RETURNING 1) SELECT count(*) FROM gone",
        "/* a comment; */ COMMIT",
        "SELECT ';'; ROLLBACK",
        "UPDATE projection_tracking SET last_seq = 0",
    ],
)
def test_a_projection_cannot_end_the_transaction_or_write_the_platforms_tables(
    db: Database, make_book: Any, sql: psycopg.Connection[Any], statement: str
) -> None:
    """Whatever route a write takes (a statement, a DO block, a CTE), Postgres's own count of the
    rows the transaction wrote to a platform table refuses it; the batch is rolled back."""
    book = make_book("book-1")
    write(book, hello())
    sweep_book(db, book, mode="auto", projections=[_Statement(statement)])
    append(book, spend(2, 10))
    with pytest.raises(ProjectionStatementRefused):
        sweep_book(db, book, mode="auto", projections=[_Statement(statement)])
    attempt = _attempt(db, book)
    assert attempt["last_seq"] == 1
    assert attempt["error"]["kind"] == "projection_failed"
    assert attempt["error"]["detail"].startswith("statement refused")
    assert sql.execute("SELECT count(*) FROM line_hashes").fetchone() == (1,)
    assert sql.execute("SELECT committed_micro_usd FROM runs").fetchone() == (0,)


def test_a_projection_may_read_and_write_its_own_tables_freely(
    db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    """The guard is not a blanket refusal: its own DDL, reads, a CTE and a DO block that writes
    only its own tables go through (the check above can fail only for the platform's tables)."""
    sql.execute("CREATE TABLE mine (attempts int, runs text)")
    statement = "DO $$BEGIN INSERT INTO mine (attempts, runs) VALUES (1, 'runs'); END$$"  # names, not tables
    book = make_book("book-1")
    write(book, hello(), spend(2, 10))
    sweep_book(db, book, mode="auto", projections=[_Statement(statement)])
    assert sql.execute("SELECT count(*) FROM mine").fetchone() == (1,)
    assert _attempt(db, book)["last_seq"] == 2


def test_a_projection_added_late_is_left_behind_until_rebuilt_and_follows_new_streams(
    db: Database, make_book: Any, sql: psycopg.Connection[Any]
) -> None:
    book = make_book("book-1")
    write(book, hello(RUN_A), spend(2, 10))
    sweep(db, book)  # no projection yet
    append(book, spend(3, 20), hello(RUN_B), spend(2, 40))
    sweep_book(db, book, mode="auto", projections=[Recording()])
    # RUN_A began before the projection: not given seq 3 alone (it never saw 1 and 2).
    assert [(row[1], row[2]) for row in recorded(sql)] == [(RUN_B, 1), (RUN_B, 2)]


def test_a_projection_registered_at_another_version_is_left_behind(
    db: Database, make_book: Any, sql: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 10))
    install(db, [Recording()])
    sql.execute("UPDATE projections SET version = 2 WHERE name = 'recording'")
    sweep_book(db, book, mode="auto", projections=[Recording()])
    assert recorded(sql) == []
    assert "is at version 2 in Postgres and 1 here" in caplog.text
    assert _attempt(db, book)["last_seq"] == 2


def _notifications(connection: psycopg.Connection[Any]) -> Iterator[dict[str, Any]]:
    for notify in connection.notifies(timeout=0.5, stop_after=100):
        yield {"channel": notify.channel, **json.loads(notify.payload)}


def test_each_commit_notifies_its_attempts_without_book_id_or_money(
    db: Database, make_book: Any, fresh_dsn: str
) -> None:
    book = make_book("book-secret-customer")
    write(book, hello(book="book-secret-customer"), spend(2, 123456789))
    with psycopg.connect(fresh_dsn, autocommit=True) as listener:
        listener.execute("LISTEN platform_ingest")
        sweep(db, book)
        received = list(_notifications(listener))
    assert received, "no notification arrived"
    assert {tuple(sorted(each)) for each in received} == {
        ("attempt_id", "channel", "last_seq", "run_id", "state")
    }
    assert received[-1]["last_seq"] == 2
    assert received[-1]["state"] == "active"
    for each in received:
        assert "secret" not in json.dumps(each)
        assert "123456789" not in json.dumps(each)


def test_a_rolled_back_batch_notifies_nothing(db: Database, make_book: Any, fresh_dsn: str) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 10))
    with psycopg.connect(fresh_dsn, autocommit=True) as listener:
        listener.execute("LISTEN platform_ingest")
        with pytest.raises(ProjectionFailed):
            sweep_book(db, book, mode="auto", projections=[FailingFor(["book-1"])])
        assert list(_notifications(listener)) == []
        sweep_book(db, book, mode="auto", projections=[Recording()])  # the check can fail
        assert [each["last_seq"] for each in _notifications(listener)] == [2]


# --- loading ------------------------------------------------------------------------------


def test_load_projection_takes_an_instance_a_class_or_a_factory() -> None:
    assert load_projection("projection_fixtures:Recording").name == "recording"
    assert isinstance(load_projection("projection_fixtures:FailingFor"), FailingFor)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no_such_module_here:Thing", "could not be loaded"),
        ("projection_fixtures:NoSuchThing", "could not be loaded"),
        ("projection_fixtures:recorded", "could not be made"),
        ("projection_fixtures:FAIL_FILE_VARIABLE", "neither a projection nor a factory"),
        ("no-such-entry-point", "installed entry points"),
        ("json:dumps", "could not be made"),
    ],
)
def test_a_spec_that_names_no_projection_is_a_usage_error(spec: str, says: str) -> None:
    with pytest.raises(ProjectionInvalid, match=says):
        load_projection(spec)


class _Bad:
    def __init__(self, name: object, version: object) -> None:
        self.name, self.version = name, version

    def setup(self, session: ProjectionSession) -> None:
        pass

    def apply(self, session: ProjectionSession, events: Sequence[Event]) -> None:
        pass


@pytest.mark.parametrize(
    ("name", "version"),
    [("", 1), ("Ledger", 1), ("a" * 64, 1), ("x;y", 1), ("ok", 0), ("ok", True), ("ok", "1")],
)
def test_a_projection_with_a_bad_name_or_version_is_refused(
    db: Database, make_book: Any, name: object, version: object
) -> None:
    book = make_book("book-1")
    write(book, hello())
    with pytest.raises(ProjectionInvalid):
        sweep_book(db, book, projections=[_Bad(name, version)])


def test_two_projections_of_one_name_are_refused(db: Database, make_book: Any) -> None:
    with pytest.raises(ProjectionInvalid, match="two projections"):
        sweep_book(db, make_book("book-1"), projections=[Recording(), Recording()])


def test_the_command_line_refuses_a_bad_projection_before_any_database(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    unreachable = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"
    code = main(["--dsn", unreachable, "sweep", str(tmp_path), "--projection", "nope:Nothing"])
    assert code == 2
    assert "could not be loaded" in capsys.readouterr().err


def test_an_installed_packages_entry_point_names_a_projection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group `platform_ingest.projections`, read from an installed distribution's metadata
    (a real dist-info directory on the path, found by importlib.metadata)."""
    dist = tmp_path / "usage_projections-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: usage-projections\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[platform_ingest.projections]\nrecorder = projection_fixtures:Recording\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_projection("recorder").name == "recording"
    with pytest.raises(ProjectionInvalid, match="recorder"):  # the message lists what is offered
        load_projection("no-such-one")


# --- any statement, by any route ------------------------------------------------------------

_COLUMN = {
    "runs": "reason",
    "attempts": "error_detail",
    "books": "error_detail",
    "line_hashes": "seq",
    "run_units": "unit",
    "operator_actions": "reason",
    "projection_tracking": "last_seq",
    "projections": "version",
    "book_problems": "detail",
    "mine": "x",
}


@st.composite
def _statements(draw: st.DrawFn) -> str:
    table = draw(st.sampled_from(sorted(_COLUMN)))
    column = _COLUMN[table]
    name = draw(
        st.sampled_from([table, f'"{table}"', f"public.{table}", table.upper(), f"public.{table}"])
    )
    condition = draw(st.sampled_from(["true", "false", f"{column} IS NOT NULL"]))
    dml = draw(
        st.sampled_from(
            [
                f"UPDATE {name} SET {column} = {column} WHERE {condition}",
                f"DELETE FROM {name} WHERE {condition}",
                f"INSERT INTO {name} SELECT * FROM {name} WHERE false",
            ]
        )
    )
    wrapped = draw(
        st.sampled_from(
            [
                dml,
                f"WITH w AS ({dml} RETURNING 1) SELECT count(*) FROM w",
                f"DO $$BEGIN {dml}; END$$",
                f"DO $body$ BEGIN EXECUTE '{dml}'; END $body$",
            ]
        )
    )
    prefix = draw(st.sampled_from(["", "/* ; COMMIT */ ", "-- a comment\n", "  "]))
    return prefix + wrapped


def _platform_rows(sql: psycopg.Connection[Any], book_id: str, *, of_book: bool) -> Any:
    """The platform's rows of one book (`of_book`) or of every other book, without ids or clocks."""
    match = "=" if of_book else "<>"
    queries = {
        "runs": f"SELECT state, reason, committed_micro_usd FROM runs WHERE book_id {match} %s",
        "attempts": "SELECT engine_run_id, state, last_seq, error_kind, error_detail FROM attempts"
        f" WHERE book_id {match} %s",
        "books": f"SELECT book_id, scan_epoch, error_detail FROM books WHERE book_id {match} %s",
        "line_hashes": "SELECT h.seq, h.sha256 FROM line_hashes h JOIN attempts a USING"
        f" (attempt_id) WHERE a.book_id {match} %s",
        "run_units": "SELECT u.unit FROM run_units u JOIN runs r USING (run_id)"
        f" WHERE r.book_id {match} %s",
        "operator_actions": f"SELECT action, reason FROM operator_actions WHERE book_id {match} %s",
        "book_problems": f"SELECT kind, detail FROM book_problems WHERE book_id {match} %s",
        "tracking": "SELECT t.projection, t.last_seq FROM projection_tracking t JOIN attempts a"
        f" USING (attempt_id) WHERE a.book_id {match} %s",
    }
    return {
        table: sorted(map(tuple, sql.execute(query, (book_id,)).fetchall()))  # type: ignore[arg-type]
        for table, query in queries.items()
    } | {"projections": sql.execute("SELECT name, version FROM projections").fetchall()}


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(statement=_statements())
def test_no_statement_writes_the_platforms_tables_and_commits(
    db: Database, make_book: Any, sql: psycopg.Connection[Any], statement: str
) -> None:
    """Whatever route a projection's statement takes to a platform table (quoting, schema,
    comments, a CTE, a DO block, dynamic SQL), either the batch commits and the platform's rows
    are exactly what they would be without the projection, or it is refused and they are as they
    were; the rows of every other book never change."""
    sql.execute("CREATE TABLE IF NOT EXISTS mine (x int)")
    reference, book = (
        make_book(f"ref-{uuid.uuid4().hex[:8]}"),
        make_book(f"b-{uuid.uuid4().hex[:8]}"),
    )
    for each in (reference, book):
        write(each, hello(book=each.name))
        sweep_book(db, each, mode="auto", projections=[_Statement(statement)])
    append(reference, spend(2, 10))
    sweep_book(db, reference, mode="auto", projections=[_Statement("SELECT 1")])
    append(book, spend(2, 10))
    others = _platform_rows(sql, book.name, of_book=False)
    before = _platform_rows(sql, book.name, of_book=True)
    try:
        sweep_book(db, book, mode="auto", projections=[_Statement(statement)])
    except ProjectionFailed:
        after = _platform_rows(sql, book.name, of_book=True)
        after["book_problems"] = before["book_problems"]  # the platform's own record of it
        assert after == before
    else:
        expected = _platform_rows(sql, reference.name, of_book=True)
        got = _platform_rows(sql, book.name, of_book=True)
        for rows in (expected, got):  # the books' ids differ, hence their hellos' bytes
            rows["books"] = [row[1:] for row in rows["books"]]
            rows["line_hashes"] = [
                (seq, digest if seq > 1 else None) for seq, digest in rows["line_hashes"]
            ]
        assert got == expected
    assert _platform_rows(sql, book.name, of_book=False) == others


def test_every_table_the_migrations_create_is_guarded() -> None:
    """The guarded tables are read from the migrations: a table a new step creates is guarded
    with no list to remember."""
    from platform_ingest.store.migrations import PLATFORM_TABLES

    assert {
        "ingest_schema_version",
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
        "projections",
        "projection_tracking",
        "projection_failures",
        "forgotten_books",
    } == PLATFORM_TABLES


@given(
    name=st.one_of(st.text(max_size=80), st.binary(max_size=8), st.none(), st.integers()),
    version=st.one_of(st.integers(), st.booleans(), st.floats(), st.text(max_size=4), st.none()),
)
def test_any_name_and_version_is_accepted_exactly_when_valid(name: object, version: object) -> None:
    """Any value in either field: a usage error unless the name is a lower-case identifier of
    1 to 63 characters and the version an int from 1 to 2**31 - 1 (a bool is not an int here)."""
    valid = (
        isinstance(name, str)
        and re.fullmatch(r"[a-z][a-z0-9_]{0,62}", name) is not None
        and type(version) is int
        and 1 <= version <= 2**31 - 1
    )
    try:
        check_projections([_Bad(name, version)])
    except ProjectionInvalid:
        assert not valid
    else:
        assert valid

"""A plan Postgres cached while a table was nearly empty is made again once the table has grown.

Postgres keeps a prepared statement's generic plan until the table is analyzed, whatever rows
arrive meanwhile. A worker's start over many new books runs the survey's statements while
`books` and `attempts` are still empty; without `Database.discard_plans` at each survey, every
page of later surveys went on scanning the whole table until autovacuum's first ANALYZE, and a
survey's cost grew with the square of the books (docs/performance.md, "How cost grows with the
work"). These tests read the plan the session would use, with `EXPLAIN EXECUTE` on the session's
own prepared statement."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from platform_ingest import Database, migrate
from platform_ingest._logs import FieldsLogger
from platform_ingest.store import statements
from platform_ingest.store.db import set_statement_hook
from platform_ingest.worker.membership import roots_digest
from platform_ingest.worker.metrics import Metrics
from platform_ingest.worker.schedule import Schedule
from platform_ingest.worker.survey import Survey

pytestmark = pytest.mark.postgres

PAGE = [f"book-{index:06d}" for index in range(0, 100_000, 200)]
"""A page of 500 book ids, as a survey asks for (`BOOKS_BY_ID_PAGE`)."""


def _scans(plan: dict[str, Any]) -> set[str]:
    found = {plan["Node Type"]}
    for child in plan.get("Plans", []):
        found |= _scans(child)
    return found


def _plan_of_the_session(db: Database) -> set[str]:
    """The node types of the plan this session would run `BOOKS_BY_ID` with for `PAGE`."""
    connection = db.connection
    row = connection.execute(
        "SELECT name FROM pg_prepared_statements WHERE statement = %s",
        (statements.BOOKS_BY_ID.text.replace("%s", "$1"),),
    ).fetchone()
    assert row is not None, "BOOKS_BY_ID was not prepared by this session"
    explain = sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE {}({})").format(
        sql.Identifier(row[0]), sql.Literal(PAGE)
    )
    (plan,) = connection.execute(explain).fetchone()  # type: ignore[misc]
    return _scans(plan[0]["Plan"])


def _grow(db: Database, books: int) -> None:
    ids = [f"book-{index:06d}" for index in range(books)]
    db.execute(statements.BOOKS_INSERT, (ids, [f"/books/{book_id}" for book_id in ids]))


def test_a_plan_cached_over_an_empty_table_scans_it_whole_until_the_plans_are_discarded(
    fresh_dsn: str,
) -> None:
    db = Database(fresh_dsn)
    try:
        migrate(db)
        for _ in range(12):  # prepared by psycopg, then a generic plan cached by Postgres
            db.fetch_all(statements.BOOKS_BY_ID, (PAGE,))
        _grow(db, 100_000)
        assert "Seq Scan" in _plan_of_the_session(db)  # the plan made for an empty table
        db.discard_plans()
        for _ in range(12):
            assert len(db.fetch_all(statements.BOOKS_BY_ID, (PAGE,))) == len(PAGE)
        after = _plan_of_the_session(db)
        assert "Seq Scan" not in after, after
        assert after & {"Index Scan", "Bitmap Index Scan", "Index Only Scan"}, after
    finally:
        db.close()


def test_every_survey_begins_by_discarding_the_session_s_plans(
    fresh_dsn: str, tmp_path: Path
) -> None:
    """The worker's survey makes its plans again each time, before its first statement."""
    root = tmp_path / "books"
    (root / "book-1").mkdir(parents=True)
    db = Database(fresh_dsn)
    seen: list[str] = []
    try:
        migrate(db)
        survey = Survey(
            db,
            [root],
            worker_id="w-plans",
            digest=roots_digest([root]),
            membership_interval_s=1.0,
            survey_interval_s=15.0,
            schedule=Schedule(),
            metrics=Metrics(),
            log=FieldsLogger(logging.getLogger("platform_ingest"), {}),
            stopping=lambda: False,
        )
        set_statement_hook(lambda statement: seen.append(statement.name))
        for _ in range(2):
            survey.run()
            while survey.surveying:
                survey.step()
    finally:
        set_statement_hook(None)
        db.close()
    assert seen.count("plans_discard") == 2
    assert seen[0] == "plans_discard"
    later = seen.index("plans_discard", 1)
    assert seen[later - 1] != "plans_discard" and later > 1  # the first survey ran statements

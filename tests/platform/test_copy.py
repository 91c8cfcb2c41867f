"""A batch's line hashes are written by COPY in the apply transaction: all or nothing with the
cursor, a key already there read as another pass's work (start over), a refused row still found
alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platform_ingest import Database
from platform_ingest.errors import CursorMoved, DataRefused
from platform_ingest.store import statements as _sql
from platform_ingest.store.copy_data import copy_data
from platform_journals import (
    RUN_A,
    append,
    attempts,
    hello,
    only_run,
    refuse_rows,
    spend,
    sweep,
    unit_done,
    write,
)

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]


def _attempt_id(sql: psycopg.Connection[tuple[object, ...]]) -> int:
    row = sql.execute("SELECT attempt_id FROM attempts").fetchone()
    assert row is not None
    return int(str(row[0]))


def test_copy_writes_in_the_transaction_and_rolls_back_with_it(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[tuple[object, ...]]
) -> None:
    """The copy helper's rows are part of the transaction around it: gone when it fails."""
    book = make_book("book-1")
    write(book, hello())
    sweep(db, book)
    attempt_id = _attempt_id(sql)
    with pytest.raises(RuntimeError, match="the batch fails after its COPY"), db.transaction():
        assert db.copy(_sql.LINE_HASHES_COPY, [[attempt_id] * 2, [7, 8], [b"h", b"h"]]) == 2
        raise RuntimeError("the batch fails after its COPY")
    assert sql.execute("SELECT count(*) FROM line_hashes WHERE seq > 1").fetchone() == (0,)
    with db.transaction():
        db.copy(_sql.LINE_HASHES_COPY, [[attempt_id], [7], [b"h"]])
    assert sql.execute("SELECT count(*) FROM line_hashes WHERE seq > 1").fetchone() == (1,)


def test_a_duplicate_key_in_the_copy_is_cursor_moved_and_the_pass_starts_over(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[tuple[object, ...]]
) -> None:
    """A line hash already in Postgres when the batch's COPY writes it (another writer put it
    there after the batch locked its attempt) fails the batch as `CursorMoved`: rolled back whole,
    the pass starts over from Postgres, the stream is never quarantined (a unique violation read
    as `DataRefused` would have quarantined it for a race)."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 10))
    sweep(db, book)
    attempt_id = _attempt_id(sql)
    append(book, unit_done(3, "u-3", 0), spend(4, 25))
    stages: list[str] = []

    def hook(stage: str) -> None:
        stages.append(stage)
        if stage == "locked" and stages.count("locked") == 1:
            sql.execute(
                "INSERT INTO line_hashes (attempt_id, seq, sha256) VALUES (%s, 4, 'x')",
                (attempt_id,),
            )
        elif stage == "before" and stages.count("before") == 2:
            sql.execute("DELETE FROM line_hashes WHERE sha256 = 'x'")

    report = sweep(db, book, commit_hook=hook)
    assert report.restarts == 1
    assert report.lines_applied == 2
    attempt = attempts(db, book)[RUN_A]
    assert attempt["state"] == "active"
    assert attempt["last_seq"] == 4
    run = only_run(db, book)
    assert run["units"] == ["u-3"]
    assert run["committed_micro_usd"] == 25
    assert sql.execute("SELECT count(*) FROM line_hashes").fetchone() == (4,)


def test_the_unique_violation_of_the_copy_raises_cursor_moved(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[tuple[object, ...]]
) -> None:
    """What the pass sees of that duplicate: `CursorMoved`, with Postgres' unique violation as its
    cause; every other refusal of a row stays `DataRefused`."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 10))
    sweep(db, book)
    attempt_id = _attempt_id(sql)
    append(book, spend(3, 5))
    sql.execute(
        "INSERT INTO line_hashes (attempt_id, seq, sha256) VALUES (%s, 3, 'x')", (attempt_id,)
    )
    with pytest.raises(CursorMoved) as caught:
        sweep(db, book)
    assert isinstance(caught.value.__cause__, DataRefused)
    assert caught.value.__cause__.sqlstate == "23505"
    attempt = attempts(db, book)[RUN_A]
    assert (attempt["state"], attempt["last_seq"]) == ("active", 2)
    assert only_run(db, book)["committed_micro_usd"] == 10


def test_a_line_hash_postgres_refuses_is_found_alone(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[tuple[object, ...]]
) -> None:
    """A row the COPY cannot write (a value Postgres refuses) fails its batch; the pass replays it
    one line a transaction, finds the line, quarantines its stream there, and keeps the lines
    before it."""
    refuse_rows(sql, "line_hashes", "seq", "4")
    book = make_book("book-1")
    lines = [hello(), unit_done(2, "u-1", 0), spend(3, 40), spend(4, 7), spend(5, 90)]
    write(book, *lines)
    report = sweep(db, book)
    assert report.restarts >= 1
    attempt = attempts(db, book)[RUN_A]
    assert attempt["state"] == "quarantined"
    assert attempt["last_seq"] == 3
    assert attempt["error"]["kind"] == "database_refused"
    offset = sum(len(line) for line in lines[:3])
    assert (attempt["error"]["seq"], attempt["error"]["offset"]) == (4, offset)
    assert "SQLSTATE 54000" in attempt["error"]["detail"]
    assert only_run(db, book)["committed_micro_usd"] == 40
    assert sql.execute("SELECT count(*) FROM line_hashes").fetchone() == (3,)


def test_a_unit_done_again_is_kept_once_and_the_batch_goes_on(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[tuple[object, ...]]
) -> None:
    """Units go in by COPY in a savepoint. A unit the run already has, from an earlier batch or
    twice in one batch, fails that COPY on the run's key: the savepoint alone is rolled back and
    the units go in by the statement that keeps each once. The batch's line hashes, cursor and
    money (written before and after it in the same transaction) are all there, and nothing is
    quarantined."""
    book = make_book("book-1")
    write(book, hello(), unit_done(2, "u-1", 0), spend(3, 10))
    sweep(db, book)
    append(book, unit_done(4, "u-1", 0), unit_done(5, "u-2", 1), unit_done(6, "u-2", 1))
    append(book, spend(7, 25))
    report = sweep(db, book)
    assert report.lines_applied == 4
    assert report.problems == []
    assert sql.execute("SELECT unit, seq FROM run_units ORDER BY unit").fetchall() == [
        ("u-1", 2),
        ("u-2", 5),
    ]
    assert sql.execute("SELECT count(*), max(seq) FROM line_hashes").fetchone() == (7, 7)
    assert attempts(db, book)[RUN_A]["last_seq"] == 7
    assert attempts(db, book)[RUN_A]["state"] == "active"
    assert only_run(db, book)["committed_micro_usd"] == 25


int8s = st.integers(-(2**63), 2**63 - 1)
texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))


def _read_back(
    sql: psycopg.Connection[tuple[object, ...]], types: tuple[str, ...], rows: list[Any]
) -> list[tuple[object, ...]]:
    """COPY the data built from `rows` into a temporary table of columns of `types`, and read
    the rows back in the order they were sent."""
    columns = [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in types]
    data = copy_data(types, columns)
    names = [f"c{number}" for number in range(len(types))]
    declared = ", ".join(f"{name} {kind}" for name, kind in zip(names, types, strict=True))
    sql.execute("DROP TABLE IF EXISTS copied")
    sql.execute(f"CREATE TEMP TABLE copied ({declared}, i serial)")
    with (
        sql.cursor() as cursor,
        cursor.copy(f"COPY copied ({', '.join(names)}) FROM STDIN (FORMAT BINARY)") as copy,
    ):
        copy.write(data)
    return sql.execute(f"SELECT {', '.join(names)} FROM copied ORDER BY i").fetchall()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(st.lists(st.tuples(int8s, texts, st.binary()), max_size=40))
def test_copy_data_is_what_postgres_reads(
    sql: psycopg.Connection[tuple[object, ...]], rows: list[tuple[int, str, bytes]]
) -> None:
    """The binary COPY data built in one piece is read by Postgres as exactly the rows it was
    built from: any 64-bit integer, any text Postgres can hold, any bytes, any number of rows."""
    assert _read_back(sql, ("int8", "text", "bytea"), rows) == rows


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    st.integers(0, 40).flatmap(
        lambda width: st.lists(
            st.tuples(int8s, int8s, st.binary(min_size=width, max_size=width)), max_size=40
        )
    )
)
def test_copy_data_of_one_width_a_row_is_what_postgres_reads(
    sql: psycopg.Connection[tuple[object, ...]], rows: list[tuple[int, int, bytes]]
) -> None:
    """Rows whose every field has one width (a batch's line hashes: two integers and a digest)
    are packed a row at a time; Postgres reads exactly the rows they were built from."""
    assert _read_back(sql, ("int8", "int8", "bytea"), rows) == rows


def test_copy_data_refuses_what_it_cannot_encode(db: Database) -> None:
    """An integer past 64 bits or text that is not UTF-8 is refused before anything is sent
    (`DataRefused`, the refusal of a value); columns of unequal lengths are a caller's error."""
    with pytest.raises(DataRefused, match="not encodable"):
        db.copy(_sql.LINE_HASHES_COPY, [[2**63], [1], [b"h"]])
    with pytest.raises(DataRefused, match="not encodable"):
        db.copy(_sql.UNITS_COPY, [[1], ["\ud800"], [0], [1], [2]])
    with pytest.raises(ValueError, match="one length"):
        copy_data(("int8", "int8"), [[1, 2], [1]])
    with pytest.raises(ValueError, match="no binary encoding"):
        copy_data(("jsonb",), [[{}]])

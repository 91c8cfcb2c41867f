"""Property: any at-least-once journal, read in any number of passes, lands in one Postgres state.

A journal is built from random committed events of one or more streams, with the duplicates and
re-projections at-least-once delivery allows, then read in passes cut at random bytes (a growing
file), with the hints lost at random (the file replaced, or the book's hint spoiled). The state in
Postgres must equal the model: each committed event applied exactly once, in auto mode.
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platform_ingest import Database
from platform_journals import book_state, finished, hello, spend, sweep, unit_done
from rule_model import build_journal, expected, journal_plans, model_state, observed

pytestmark = pytest.mark.postgres

_books = itertools.count(1)


def _check(data: st.DataObject, plan: Any, db: Database, fresh_dsn: str, root: Path) -> None:
    book_id = f"book-h{next(_books):06d}"  # one length: the draws stay stable
    book = root / book_id
    book.mkdir(parents=True)
    built, committed = build_journal(data, book_id, plan)
    content = built.content
    cuts = sorted(data.draw(st.lists(st.integers(0, len(content)), max_size=4)))
    journal = book / "events.jsonl"
    journal.write_bytes(b"")
    written = 0
    for cut in [*cuts, len(content)]:
        with open(journal, "ab") as file:
            file.write(content[written:cut])
        written = max(written, cut)
        loss = data.draw(st.sampled_from(["none", "none", "replace", "spoil"]))
        if loss == "replace":
            copy = book / "events.jsonl.copy"
            shutil.copyfile(journal, copy)
            os.replace(copy, journal)
        elif loss == "spoil":
            with psycopg.connect(fresh_dsn, autocommit=True) as sql:
                sql.execute(
                    "UPDATE books SET scan_sha256 = '\\x00' WHERE book_id = %s AND scan_offset > 0",
                    (book_id,),
                )
                sql.execute("UPDATE attempts SET hint_file = 'gone' WHERE book_id = %s", (book_id,))
        sweep(db, book, batch_lines_max=data.draw(st.integers(1, 6)))
    assert observed(book_state(db, book)) == expected(
        model_state(committed, built.lines_per_stream)
    )
    with psycopg.connect(fresh_dsn, autocommit=True) as sql:
        row = sql.execute(
            "SELECT count(*) FROM line_hashes h JOIN attempts a USING (attempt_id)"
            " WHERE a.book_id = %s",
            (book_id,),
        ).fetchone()
    assert row == (sum(built.lines_per_stream),)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), plan=journal_plans)
def test_any_at_least_once_journal_ends_in_the_model_state(
    data: st.DataObject, plan: Any, db: Database, fresh_dsn: str, tmp_path: Path
) -> None:
    """Any at-least-once journal, read in any passes with hints lost, ends in the model state."""
    _check(data, plan, db, fresh_dsn, tmp_path)


@pytest.mark.slow
@settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), plan=journal_plans)
def test_any_at_least_once_journal_ends_in_the_model_state_thorough(
    data: st.DataObject, plan: Any, db: Database, fresh_dsn: str, tmp_path: Path
) -> None:
    """The same property over many more journals (a long profile)."""
    _check(data, plan, db, fresh_dsn, tmp_path)


_HELLO = b"<hello>\n"
_FOREIGN_HELLO = b"<hello of another major>\n"

garbage_lines = st.one_of(
    st.binary(max_size=80).map(lambda raw: raw.replace(b"\n", b"") + b"\n"),
    st.sampled_from(
        [
            _HELLO,
            _FOREIGN_HELLO,
            spend(2, 10),
            spend(2, "12"),
            spend(3, 20),
            unit_done(3, "u", 1),
            finished(4),
            b"{}\n",
            b"\n",
        ]
    ),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(lines=st.lists(garbage_lines, max_size=12), tail=st.binary(max_size=30))
def test_whatever_the_file_holds_the_pass_does_not_crash(
    lines: list[bytes], tail: bytes, db: Database, tmp_path: Path
) -> None:
    """Random bytes never crash a pass; problems are state, and a second pass changes nothing."""
    book_id = f"book-g{next(_books)}"
    book = tmp_path / book_id
    book.mkdir()
    streams = itertools.count()
    content = [
        hello(f"00000000-0000-4000-8000-{next(streams):012d}", book=book_id)
        if raw == _HELLO
        else hello(book=book_id, version="7.0")
        if raw == _FOREIGN_HELLO
        else raw
        for raw in lines
    ]
    data = b"".join(content) + tail
    (book / "events.jsonl").write_bytes(data)
    first = sweep(db, book)
    before = book_state(db, book)
    second = sweep(db, book)
    assert second.lines_applied == 0
    assert book_state(db, book) == before
    assert first.lines_read <= data.count(b"\n")  # complete lines only (the tail may hold some)

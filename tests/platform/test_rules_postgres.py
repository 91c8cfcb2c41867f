"""The contract: the rule cases (rule_cases.py) against a real Postgres give what the pure rules
give in memory, and any journal ends in the same state both ways. Also what only a pass over a
file with Postgres has: where reading starts (hints) and how much it reads."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_platform import MemoryPlatform, PostgresPlatform, shown_keys
from platform_ingest import Database
from platform_journals import append, book_state, hello, spend, sweep, unit_done, write
from rule_cases import RuleCases
from rule_model import build_journal, journal_plans

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]
_books = itertools.count(1)


class TestRulesInPostgres(RuleCases):
    @pytest.fixture
    def platform(
        self, db: Database, sql: psycopg.Connection[tuple[object, ...]]
    ) -> PostgresPlatform:
        return PostgresPlatform(db, sql)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), plan=journal_plans)
def test_postgres_ends_where_the_rules_in_memory_end(
    data: st.DataObject,
    plan: list,
    db: Database,
    sql: psycopg.Connection[tuple[object, ...]],
    tmp_path: Path,
) -> None:
    """Any at-least-once journal, read in the same passes, in either mode: `show --json` of the
    book in Postgres equals the state the pure rules left in memory."""
    auto = data.draw(st.booleans(), label="auto mode")
    book_id = f"book-c{next(_books):06d}"  # one length: the draws stay stable
    book = tmp_path / book_id
    book.mkdir()
    built, _ = build_journal(data, book_id, plan)
    content = built.content
    memory = MemoryPlatform()
    postgres = PostgresPlatform(db, sql)
    if not auto:  # the first stream named for the book; the others are foreign
        for each in (memory, postgres):
            each.name_stream(book, "00000000-0000-4000-8000-000000000000")
    journal = book / "events.jsonl"
    cuts = sorted(data.draw(st.lists(st.integers(0, len(content)), max_size=3)))
    for cut in [*cuts, len(content)]:
        journal.write_bytes(content[:cut])
        batch_lines_max = data.draw(st.integers(1, 6))
        memory.sweep(book, auto=auto, batch_lines_max=batch_lines_max)
        postgres.sweep(book, auto=auto, batch_lines_max=batch_lines_max)
    kept = memory.book_state(book)
    assert shown_keys(postgres.book_state(book), kept) == shown_keys(kept, kept)


# --- where reading starts: the pass's hints ----------------------------------------------------


def test_a_replaced_file_throws_the_hint_away(db: Database, make_book: MakeBook) -> None:
    """A new inode at the journal's path fails the hint: the pass reads from byte 0."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 1000), spend(3, 2000))
    sweep(db, book)
    write(book, hello(), spend(2, 1000), spend(3, 2000), spend(4, 3000))
    report = sweep(db, book)
    assert (report.hint_discarded, report.start_offset) == (True, 0)
    assert (report.duplicates, report.lines_applied) == (3, 1)


def test_a_truncated_file_throws_the_hint_away(db: Database, make_book: MakeBook) -> None:
    """A file shorter than the hint fails it as well."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 1000), spend(3, 2000))
    sweep(db, book)
    with open(book / "events.jsonl", "r+b") as file:
        file.truncate(len(hello()))
    assert sweep(db, book).hint_discarded


def test_an_unterminated_line_is_read_again_from_its_start(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[tuple[object, ...]]
) -> None:
    """The hint stays just before an unterminated last line; the next pass starts there."""
    book = make_book("book-1")
    tail = unit_done(3, "u-1", 0)
    write(book, hello(), spend(2, 1000), tail[:17])
    sweep(db, book)
    append(book, tail[17:])
    second = sweep(db, book)
    assert second.start_offset == len(hello() + spend(2, 1000))
    assert second.lines_applied == 1
    assert sql.execute("SELECT count(*) FROM run_units").fetchone() == (1,)


def test_resume_reads_only_past_the_hint(db: Database, make_book: MakeBook) -> None:
    """A pass over a book whose cursor is at the end reads only the new bytes (and the hint's line)."""
    book = make_book("book-1")
    write(book, hello(), *[spend(seq, seq) for seq in range(2, 2000)])
    sweep(db, book)
    size = (book / "events.jsonl").stat().st_size
    new = spend(2000, 5000)
    append(book, new)
    report = sweep(db, book)
    assert report.start_offset == size
    assert report.lines_applied == 1
    assert report.bytes_read <= len(new) + 2 * len(spend(1999, 1999)) + 1
    assert book_state(db, book)["runs"][0]["committed_micro_usd"] == 5000

"""A bad hello after a finished stream is its own stream's problem, and the remedies reach it
(docs/platform/cli.md: `skip`, `release`, `abandon`), against a real Postgres: the finished
stream before it is never touched, by the pass or by a remedy."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from platform_ingest import ConfigError, Database
from platform_ingest.operate.naming import release_attempt
from platform_ingest.operate.remedies import abandon_attempt, skip_line
from platform_journals import RUN_A, RUN_B, book_state, finished, hello, line, spend, sweep
from platform_journals import unit_done as unit_done_line
from platform_journals import write as write_journal

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]


def _bad_hello(version: str) -> bytes:
    """A hello of RUN_B whose id can be read, with a key after `data`."""
    data = {"stream_version": version, "engine_run_id": RUN_B, "book_id": "book-1"}
    return line(1, "hello", {**data, "chunker_version": "c1"})[:-2] + b',"trace":"t-2"}\n'


def _book(make_book: MakeBook, version: str) -> tuple[Path, bytes, int]:
    """r1 (RUN_A) finished with 100 spent, then RUN_B's bad hello and its lines (900 spent)."""
    book = make_book("book-1")
    earlier = [hello(RUN_A), spend(2, 100), finished(3, money=100)]
    bad = _bad_hello(version)
    write_journal(
        book, *earlier, bad, spend(2, 900), unit_done_line(3, "u-9", 9), finished(4, money=900)
    )
    return book, bad, sum(len(each) for each in earlier)


def _attempts(db: Database, book: Path) -> dict[str, dict[str, Any]]:
    return {
        attempt["engine_run_id"]: attempt
        for run in book_state(db, book)["runs"]
        for attempt in run["attempts"]
    }


def _money(db: Database, book: Path) -> list[int]:
    return [run["committed_micro_usd"] for run in book_state(db, book)["runs"]]


def _first_stream_untouched(db: Database, book: Path) -> None:
    first = _attempts(db, book)[RUN_A]
    assert (first["state"], first["last_seq"], first["error"]) == ("finished", 3, None)


def test_skip_of_the_bad_hello_starts_its_stream_with_no_effect(
    db: Database, make_book: MakeBook
) -> None:
    """`skip RUN_B 1 --sha256 <the bad hello>` passes the hello; RUN_B's lines are then applied
    (900 spent, its unit, its finished). Before, RUN_A was quarantined, and a skip on it turned
    the next line into a payload_conflict of RUN_A."""
    book, bad, offset = _book(make_book, "1.4")
    sweep(db, book)
    quarantined = _attempts(db, book)[RUN_B]
    assert quarantined["state"] == "quarantined"
    assert (quarantined["error"]["kind"], quarantined["error"]["seq"]) == ("malformed", 1)
    assert quarantined["error"]["offset"] == offset
    _first_stream_untouched(db, book)
    with pytest.raises(ConfigError, match="finished"):
        skip_line(db, str(book), RUN_A, 1, sha256=None, reason="not this one", by="op")
    digest = hashlib.sha256(bad).hexdigest()
    shown = skip_line(db, str(book), RUN_B, 1, sha256=None, reason="look", by="op")
    assert shown.detail["sha256"] == digest
    skip_line(db, str(book), RUN_B, 1, sha256=digest, reason="a writer's stray key", by="op")
    sweep(db, book)
    sweep(db, book)  # the skipped hello read again is a duplicate
    second = _attempts(db, book)[RUN_B]
    assert (second["state"], second["last_seq"], second["error"]) == ("finished", 4, None)
    assert 900 in _money(db, book)
    units = [unit for run in book_state(db, book)["runs"] for unit in run["units"]]
    assert units == ["u-9"]
    _first_stream_untouched(db, book)


@pytest.mark.parametrize(("version", "state"), [("1.4", "quarantined"), ("2.0", "refused")])
def test_release_of_the_bad_stream_finds_its_hello_again(
    db: Database, make_book: MakeBook, version: str, state: str
) -> None:
    """`release RUN_B` reads the stream again: its hello, still there, stops it again, at the
    same place; RUN_A is never touched (before, `release r1` quarantined r1 again)."""
    book, _, offset = _book(make_book, version)
    sweep(db, book)
    assert _attempts(db, book)[RUN_B]["state"] == state
    assert release_attempt(db, str(book), RUN_B, by="op", reason="looked") == "pending"
    sweep(db, book)
    again = _attempts(db, book)[RUN_B]
    assert again["state"] == state
    assert (again["error"]["seq"], again["error"]["offset"]) == (1, offset)
    _first_stream_untouched(db, book)
    assert 900 not in _money(db, book)


@pytest.mark.parametrize("version", ["1.4", "2.0"])
def test_abandon_of_the_bad_stream_ends_it(db: Database, make_book: MakeBook, version: str) -> None:
    """`abandon RUN_B` finds its attempt (before: "no attempt") and ends it; later passes leave
    it abandoned and apply nothing of it."""
    book, _, _ = _book(make_book, version)
    sweep(db, book)
    action = abandon_attempt(db, str(book), RUN_B, reason="a broken writer", by="op")
    assert action.state == "abandoned"
    sweep(db, book)
    assert _attempts(db, book)[RUN_B]["state"] == "abandoned"
    _first_stream_untouched(db, book)
    assert 900 not in _money(db, book)

"""`show` for a fleet: filters by attempt state, by problem, by lag, the top N by lag age, and the
book behind a log's opaque reference."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from platform_ingest import Database
from platform_ingest.cli.exit_status import Exit
from platform_ingest.cli.main import main
from platform_ingest.ingest.books import book_ref, register_book
from platform_journals import RUN_B, append, hello, spend, sweep, unit_done, write

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]
BROKEN = b'{"seq":3,"type":"spend","time":"2026-11-30T02:08:57.213Z","data":{"committed\n'


@pytest.fixture
def fleet(db: Database, make_book: MakeBook) -> dict[str, Path]:
    """Four books: quarantined, waiting to be named, caught up, and behind (never passed)."""
    books = {name: make_book(name) for name in ("book-q", "book-u", "book-ok", "book-behind")}
    write(books["book-q"], hello(book="book-q"), spend(2, 5), BROKEN, spend(4, 9))
    sweep(db, books["book-q"])
    write(books["book-u"], hello(RUN_B, book="book-u"), spend(2, 5))
    sweep(db, books["book-u"], auto=False)
    write(books["book-ok"], hello(book="book-ok"), unit_done(2, "u-2", 0))
    sweep(db, books["book-ok"])
    write(books["book-behind"], hello(book="book-behind"))
    sweep(db, books["book-behind"])
    append(books["book-behind"], spend(2, 7), spend(3, 8))
    register_book(db, books["book-behind"])
    return books


def _shown(dsn: str, capsys: pytest.CaptureFixture[str], *options: str) -> list[str]:
    assert main(["--dsn", dsn, "show", "--json", *options]) == Exit.OK
    return [book["book_id"] for book in json.loads(capsys.readouterr().out)["books"]]


def test_filters_narrow_the_fleet(
    fresh_dsn: str, fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _shown(fresh_dsn, capsys) == ["book-behind", "book-ok", "book-q", "book-u"]
    assert _shown(fresh_dsn, capsys, "--state", "quarantined") == ["book-q"]
    assert _shown(fresh_dsn, capsys, "--state", "quarantined", "--state", "active") == [
        "book-behind",
        "book-ok",
        "book-q",
    ]
    assert _shown(fresh_dsn, capsys, "--problem", "malformed") == ["book-q"]
    assert _shown(fresh_dsn, capsys, "--problem", "unnamed_stream") == ["book-u"]
    assert _shown(fresh_dsn, capsys, "--lagging") == ["book-behind", "book-q", "book-u"]
    assert _shown(fresh_dsn, capsys, "--lagging", "--state", "active") == ["book-behind"]


def test_the_top_n_by_lag_age_puts_the_longest_wait_first(
    fresh_dsn: str, fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Never applied first (the unnamed stream), then by the time of the last applied line
    (book-q's was applied before book-behind's), books with no lag last."""
    assert _shown(fresh_dsn, capsys, "--limit", "3") == ["book-u", "book-q", "book-behind"]
    assert _shown(fresh_dsn, capsys, "--limit", "1", "--state", "active") == ["book-behind"]


def test_a_logs_reference_finds_its_book(
    fresh_dsn: str, fleet: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _shown(fresh_dsn, capsys, "--ref", book_ref("book-q")) == ["book-q"]
    assert main(["--dsn", fresh_dsn, "show", "--ref", "b-0000000000"]) == Exit.USAGE
    assert "no registered book has the reference 'b-0000000000'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "options",
    [["--follow", "--state", "quarantined"], ["--ref", "b-0000000000", "some/book"]],
)
def test_filters_that_cannot_be_met_together_are_refused(
    fresh_dsn: str, options: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--dsn", fresh_dsn, "show", *options]) == Exit.USAGE
    assert "with it" in capsys.readouterr().err


@pytest.mark.parametrize("options", [["--limit", "0"], ["--state", "nonsense"]])
def test_a_filter_of_no_meaning_is_a_usage_error(
    fresh_dsn: str, options: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--dsn", fresh_dsn, "show", *options])
    assert exited.value.code == Exit.USAGE
    assert options[0] in capsys.readouterr().err

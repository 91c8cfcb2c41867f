"""Logs carry no money amount and no book id at INFO or above: an opaque reference instead."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from platform_journals import RUN_A, RUN_B, ceiling, hello, spend, sweep, write

from platform_ingest import Database, book_ref
from platform_ingest._operate import name_stream, release_attempt
from platform_ingest._repair import repair_book

pytestmark = pytest.mark.postgres

BOOK = "book-the-secret-title"
AMOUNTS = ("987654321", "123123123", "55555555", "4242")


def test_no_money_and_no_book_id_in_logs_at_info_or_above(
    db: Database,
    make_book: Callable[[str], Path],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No INFO+ log record holds the book id or an amount; the book is named by its reference."""
    book = make_book(BOOK)
    caplog.set_level(logging.DEBUG, logger="platform_ingest")
    write(
        book,
        hello(RUN_A, book=BOOK),
        spend(2, 987654321),
        ceiling(3, shortfall=4242),
        spend(4, 123123123),
        spend(4, 123123124),
    )
    sweep(db, book)
    release_attempt(db, str(book), RUN_A)
    sweep(db, book)
    write(book, hello(RUN_A, book=BOOK), spend(2, 987654321), hello(RUN_B, book="another"))
    name_stream(db, str(book), "named-later")
    sweep(db, book, auto=False)
    script = tmp_path / "status.py"
    status: dict[str, object] = {
        "book_id": BOOK,
        "engine_run_id": RUN_A,
        "streams": [],
        "money": {"committed_micro_usd": 55555555},
        "ceiling": None,
        "finished": {"exit_code": 0, "stop": None, "refusal": None},
    }
    script.write_text(f"import json\nprint(json.dumps({status!r}))\n")
    repair_book(db, str(book), status_command=f"{sys.executable} {script}")
    sweep(db, book)
    loud = [record for record in caplog.records if record.levelno >= logging.INFO]
    assert len(loud) >= 4
    for record in loud:
        message = record.getMessage()
        assert BOOK not in message, message
        assert str(book) not in message, message
        for amount in AMOUNTS:
            assert amount not in message, message
    assert any(book_ref(BOOK) in record.getMessage() for record in loud)

"""Logs carry no money amount and no book id at INFO or above: an opaque reference instead."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from platform_ingest import Database, book_ref
from platform_ingest._logs import FieldsLogger, configure
from platform_ingest.operate.naming import name_stream, release_attempt
from platform_ingest.operate.repair import repair_book
from platform_journals import RUN_A, RUN_B, ceiling, hello, spend, sweep, write

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


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_a_fields_logger_line_in_both_styles(
    log_format: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`configure` writes the adapter's fields and the call's in either style, with the keys the
    worker's readers use and the stream's time; a second call replaces the first handler."""
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    try:
        configure(logging.INFO, "text")
        configure(logging.INFO, log_format)
        log = FieldsLogger(logging.getLogger("platform_ingest.test"), {"worker": "w-1"})
        log.debug("not shown")
        log.info("pass over %s", "b-1", fields={"book_ref": "b-1", "workers": 2})
        (line,) = capsys.readouterr().err.splitlines()
    finally:
        for handler in root.handlers[:]:
            if handler not in before[0]:
                root.removeHandler(handler)
        root.setLevel(before[1])
    if log_format == "json":
        entry = json.loads(line)
        keys = ("time", "level", "logger", "message", "worker", "book_ref", "workers")
        assert tuple(entry) == keys
        assert (entry["level"], entry["message"], entry["workers"]) == ("INFO", "pass over b-1", 2)
        stamp = entry["time"]
    else:
        stamp, rest = line.split(" ", 1)
        assert rest == "INFO platform_ingest.test: pass over b-1 worker=w-1 book_ref=b-1 workers=2"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", stamp)

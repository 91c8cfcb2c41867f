"""Runs that end badly still end somewhere: a later stream's bad hello is that stream's, a stream
of a major the platform does not read leaves no live run and is read again after an upgrade."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from engine_events.grammar import rules
from platform_ingest import Database
from platform_ingest.operate.naming import release_attempt
from platform_journals import (
    RUN_A,
    RUN_B,
    book_state,
    finished,
    hello,
    line,
    progress,
    spend,
    sweep,
    write,
)

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]


def _attempts(db: Database, book: Path) -> dict[str, tuple[int, dict[str, object]]]:
    """engine_run_id -> (its run's id, the attempt as `show --json` prints it)."""
    return {
        attempt["engine_run_id"]: (run["run_id"], attempt)
        for run in book_state(db, book)["runs"]
        for attempt in run["attempts"]
    }


def test_a_new_streams_bad_hello_is_that_streams_problem(db: Database, make_book: MakeBook) -> None:
    """hello A, finished A, then B's hello with seq 2 and a progress of B. Before, A (finished,
    its run completed) was quarantined and B had no attempt at all."""
    book = make_book("book-1")
    lines = [
        hello(RUN_A),
        finished(2, money=10),
        line(2, "hello", {**_hello_data(RUN_B)}),
        progress(3, draft=(1, 4)),
    ]
    write(book, *lines)
    sweep(db, book)
    found = _attempts(db, book)
    run_a, a = found[RUN_A]
    run_b, b = found[RUN_B]
    assert (a["state"], a["error"]) == ("finished", None)
    assert b["state"] == "quarantined"
    assert b["error"] == {
        "kind": "malformed",
        "seq": 2,
        "offset": len(lines[0]) + len(lines[1]),
        "detail": "a hello must carry seq 1, found seq 2",
    }
    runs = {run["run_id"]: run for run in book_state(db, book)["runs"]}
    assert runs[run_a]["state"] == "completed"
    assert run_b != run_a


def test_an_unreadable_line_after_finished_never_changes_the_finished_stream(
    db: Database, make_book: MakeBook
) -> None:
    book = make_book("book-1")
    write(book, hello(RUN_A), finished(2), b"{not json\n", hello(RUN_B), spend(2, 5))
    sweep(db, book)
    found = _attempts(db, book)
    assert found[RUN_A][1]["state"] == "finished"
    assert found[RUN_B][1]["state"] == "active"
    error = book_state(db, book)["error"]
    assert error is not None and error["kind"] == "malformed"
    assert "after a finished stream" in error["detail"]


def test_a_finished_streams_line_changed_into_a_malformed_one_quarantines_it(
    db: Database, make_book: MakeBook
) -> None:
    """A line whose seq can be read lies in the finished stream's part of the file. Kept as the
    book's evidence instead, it passed unseen once the book already held an earlier one."""
    book = make_book("book-1")
    lines = [hello(RUN_A), spend(2, 10), finished(3, money=10)]
    write(book, *lines, b"{not json\n")
    sweep(db, book)
    assert book_state(db, book)["error"]["offset"] == sum(map(len, lines))
    changed = lines[2].replace(b'"time":"', b'"time":"x', 1)
    replaced = book / "events.jsonl.new"
    replaced.write_bytes(b"".join([*lines[:2], changed, b"{not json\n"]))
    replaced.replace(book / "events.jsonl")
    sweep(db, book)
    attempt = _attempts(db, book)[RUN_A][1]
    assert attempt["state"] == "quarantined"
    assert (attempt["error"]["kind"], attempt["error"]["seq"]) == ("malformed", 3)


def _hello_data(run: str, version: str = "1.3") -> dict[str, str]:
    return {
        "stream_version": version,
        "engine_run_id": run,
        "book_id": "book-1",
        "chunker_version": "c1",
    }


def test_a_stream_of_an_unread_major_pauses_its_run_and_is_read_after_an_upgrade(
    db: Database, make_book: MakeBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, the run stayed `running` forever and `refused` was terminal: an upgraded platform
    never read the stream again."""
    book = make_book("book-1")
    write(book, line(1, "hello", _hello_data(RUN_A, "2.0")), spend(2, 30), finished(3, money=30))
    sweep(db, book)
    (run,) = book_state(db, book)["runs"]
    (attempt,) = run["attempts"]
    assert (attempt["state"], attempt["error"]["kind"]) == ("refused", "unsupported_version")
    assert (run["state"], run["reason"]) == ("paused", "unsupported_version")
    assert run["committed_micro_usd"] == 0
    # The platform learns major 2 (its reader here: the same checks as 1.x).
    monkeypatch.setattr(rules, "SUPPORTED_MAJORS", frozenset({1, 2}))
    report = sweep(db, book)
    assert report.lines_applied == 3
    (run,) = book_state(db, book)["runs"]
    assert (run["state"], run["committed_micro_usd"]) == ("completed", 30)
    assert run["attempts"][0]["state"] == "finished"


def test_release_reads_a_refused_stream_again(db: Database, make_book: MakeBook) -> None:
    book = make_book("book-1")
    write(book, line(1, "hello", _hello_data(RUN_A, "2.0")))
    sweep(db, book)
    assert release_attempt(db, str(book), RUN_A) == "pending"
    sweep(db, book)  # still unread here: refused again, with the same evidence
    (run,) = book_state(db, book)["runs"]
    assert run["attempts"][0]["state"] == "refused"

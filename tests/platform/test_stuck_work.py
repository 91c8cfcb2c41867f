"""Stuck work shows and pages: a quarantined stream, a stream nobody named and a projection added
later each count as lag, say which hold keeps them, and are logged; the worker's gauges of what is
true now are rebuilt from Postgres at start, so that a restarted worker still shows them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from platform_ingest import Database
from platform_ingest.cli.main import main
from platform_ingest.operate.show import render_text
from platform_journals import (
    RUN_A,
    append,
    book_state,
    hello,
    log_entries,
    serves_metrics,
    spend,
    start_worker,
    stop_worker,
    sweep,
    unit_done,
    wait_for,
    worker_metrics,
    write,
)

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]
BROKEN = b'{"seq":5,"type":"unit_done","time":"2026-11-30T02:08:57.213Z","data":{"unit":\n'


def _quarantined_at_line_5(book: Path) -> list[bytes]:
    """A journal of 13 lines whose line 5 does not decode: seqs 1-4 applied, 9 lines held."""
    lines = [hello(), *(unit_done(seq, f"u-{seq}", seq) for seq in range(2, 5)), BROKEN]
    lines += [unit_done(seq, f"u-{seq}", seq) for seq in range(6, 14)]
    write(book, *lines)
    return lines


def test_a_quarantined_stream_counts_its_lines_as_lag_held_by_the_quarantine(
    db: Database, make_book: MakeBook
) -> None:
    book = make_book("book-1")
    lines = _quarantined_at_line_5(book)
    sweep(db, book)
    shown = book_state(db, book)
    (attempt,) = shown["runs"][0]["attempts"]
    assert (attempt["state"], attempt["last_seq"]) == ("quarantined", 4)
    lag = shown["lag"]
    held_at = sum(map(len, lines[:4]))
    assert (lag["lines"], lag["bytes"], lag["lines_unread"]) == (9, sum(map(len, lines[4:])), 0)
    assert lag["held_by"]["kind"] == "quarantined"
    assert (lag["held_by"]["engine_run_id"], lag["held_by"]["offset"]) == (RUN_A, held_at)
    assert lag["held_by"]["since"] is not None
    text = render_text({"books": [shown]})
    assert f"lag: 9 lines, {lag['bytes']} bytes past the cursor, held by stream {RUN_A}" in text
    assert "quarantined: look, then release or skip" in text


def test_a_stream_nobody_named_waits_with_its_lines_as_lag_and_is_logged(
    fresh_dsn: str, db: Database, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    book = make_book("book-1")
    lines = [hello(), unit_done(2, "u-2", 0), spend(3, 40)]
    write(book, *lines)
    for lines_read in (3, 0):  # the second sweep reads nothing new, and says it again
        assert main(["--dsn", fresh_dsn, "sweep", str(book), "--json"]) == 0
        captured = capsys.readouterr()
        report = json.loads(captured.out)
        assert (report["lines_read"], report["lines_applied"]) == (lines_read, 0)
        assert report["waiting_to_be_named"] == [RUN_A]
        told = [line for line in captured.err.splitlines() if "waiting to be named" in line]
        assert len(told) == 1, captured.err  # once a stream, at every sweep
        assert "WARNING" in told[0] and "--auto" in told[0] and RUN_A in told[0]
        assert "book-1" not in told[0]  # logs name books by an opaque reference only
    shown = book_state(db, book)
    (waiting,) = shown["waiting_to_be_named"]
    assert (waiting["engine_run_id"], waiting["offset"]) == (RUN_A, 0)
    assert waiting["since"] == "2026-11-30T02:08:57.213000+00:00"
    assert shown["runs"] == []
    assert (shown["lag"]["lines"], shown["lag"]["lines_unread"]) == (3, 0)
    assert shown["lag"]["held_by"]["kind"] == "unnamed"
    assert f"stream {RUN_A}: waiting to be named" in render_text({"books": [shown]})
    assert main(["--dsn", fresh_dsn, "name", str(book), RUN_A]) == 0
    capsys.readouterr()
    assert main(["--dsn", fresh_dsn, "sweep", str(book), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["lines_applied"], report["waiting_to_be_named"]) == (3, [])
    shown = book_state(db, book)
    assert (shown["waiting_to_be_named"], shown["lag"]["lines"], shown["lag"]["held_by"]) == (
        [],
        0,
        None,
    )


def test_a_projection_added_later_says_how_far_behind_it_is(
    fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 10), unit_done(3, "u-3", 0))
    assert main(["--dsn", fresh_dsn, "sweep", "--auto", str(book)]) == 0
    capsys.readouterr()
    spec = "projection_fixtures:Recording"
    assert main(["--dsn", fresh_dsn, "sweep", "--auto", str(book), "--projection", spec]) == 0
    told = [line for line in capsys.readouterr().err.splitlines() if "behind" in line]
    assert len(told) == 1
    assert "projection recording is 3 lines behind" in told[0]
    assert "platform-ingest rebuild --projection recording" in told[0]
    assert main(["--dsn", fresh_dsn, "rebuild", "--projection", spec, str(book)]) == 0
    capsys.readouterr()
    append(book, spend(4, 20))
    assert main(["--dsn", fresh_dsn, "sweep", "--auto", str(book), "--projection", spec]) == 0
    assert "behind" not in capsys.readouterr().err


def _labelled(metrics: dict[str, float], name: str) -> dict[str, float]:
    """`name{label="value"}` samples by the label's value."""
    prefix = f"platform_ingest_{name}{{"
    return {
        sample.split('"')[1]: value
        for sample, value in metrics.items()
        if sample.startswith(prefix)
    }


def test_a_restarted_worker_shows_the_quarantine_it_did_not_see_happen(
    fresh_dsn: str, db: Database, tmp_path: Path
) -> None:
    """The quarantine was met by a sweep before the worker started: its gauges show it from
    the first survey (a counter of problems met would start empty and page nobody)."""
    root = tmp_path / "books"
    book = root / "book-1"
    book.mkdir(parents=True)
    _quarantined_at_line_5(book)
    sweep(db, book)
    log = tmp_path / "worker.log"
    worker = start_worker(fresh_dsn, root, log, "--metrics-port", "0")
    try:
        wait_for("the metrics served", lambda: serves_metrics(log))
        wait_for(
            "a survey done",
            lambda: worker_metrics(log)["platform_ingest_last_survey_timestamp_seconds"] > 0,
        )
        metrics = worker_metrics(log)
        attempts = _labelled(metrics, "attempts")
        assert attempts["quarantined"] == 1
        assert sum(attempts.values()) == 1  # every state shown, the others 0
        problems = _labelled(metrics, "books_with_problem")
        assert problems["malformed"] == 1
        assert problems["unnamed_stream"] == 0 and problems["journal_missing"] == 0
        assert _labelled(metrics, "lag_lines_held") == {
            "quarantined": 9,
            "stalled": 0,
            "refused": 0,
            "parked": 0,
            "unnamed": 0,
        }
        assert _labelled(metrics, "oldest_hold_age_seconds")["quarantined"] > 0
        assert metrics["platform_ingest_lag_lines"] == 9
        assert metrics["platform_ingest_books_behind"] == 1
        assert stop_worker(worker) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)


def test_a_worker_logs_a_stream_waiting_to_be_named_once(fresh_dsn: str, tmp_path: Path) -> None:
    root = tmp_path / "books"
    book = root / "book-1"
    book.mkdir(parents=True)
    write(book, hello(), spend(2, 10))
    log = tmp_path / "worker.log"
    worker = start_worker(
        fresh_dsn, root, log, "--metrics-port", "0", "--safety-pass-s", "0.2", auto=False
    )
    try:
        wait_for("the metrics served", lambda: serves_metrics(log))
        wait_for(
            "the unnamed stream counted",
            lambda: _labelled(worker_metrics(log), "lag_lines_held").get("unnamed") == 2,
        )
        surveyed = worker_metrics(log)["platform_ingest_last_survey_timestamp_seconds"]
        wait_for(  # two more surveys at least (one each 0.2 s): the warning is still one
            "later surveys",
            lambda: (
                worker_metrics(log)["platform_ingest_last_survey_timestamp_seconds"]
                > surveyed + 0.5
            ),
        )
        told = [e for e in log_entries(log) if "waiting to be named" in e["message"]]
        assert len(told) == 1
        assert told[0]["level"] == "WARNING" and RUN_A in told[0]["message"]
        metrics = worker_metrics(log)
        assert _labelled(metrics, "books_with_problem")["unnamed_stream"] == 1
        assert _labelled(metrics, "oldest_hold_age_seconds")["unnamed"] > 0
        assert stop_worker(worker) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)


HOSTILE_RUN = "r-1\n2026-12-04T00:00:00.000Z ERROR platform_ingest: forged\x1b[31m\u202e"


def test_a_hostile_stream_id_waiting_to_be_named_is_logged_on_one_plain_line(
    fresh_dsn: str, db: Database, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stream id is a journal's text: a newline, a terminal escape or a direction override in
    it is shown escaped in the warning (one line, nothing forged), kept exact in the JSON."""
    book = make_book("book-1")
    write(book, hello(HOSTILE_RUN), spend(2, 5))
    assert main(["--dsn", fresh_dsn, "sweep", str(book), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["waiting_to_be_named"] == [HOSTILE_RUN]
    (told,) = [line for line in captured.err.splitlines() if "waiting to be named" in line]
    assert "forged" in told and "\\x0a" in told and "\\x1b" in told and "\\u202e" in told
    assert not any(
        line.startswith("2026-12-04T00:00:00.000Z") for line in captured.err.splitlines()
    )
    assert "\x1b" not in captured.err and "\u202e" not in captured.err
    shown = book_state(db, book)
    assert shown["waiting_to_be_named"][0]["engine_run_id"] == HOSTILE_RUN
    text = render_text({"books": [shown]})
    assert "\x1b" not in text and "\n2026-12-04" not in text

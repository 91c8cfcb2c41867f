"""The launcher's `exited` and the operator's remedies (`skip`, `disown`, `abandon`, `release`),
against a real Postgres and under a running worker: each ends its stopped state, audited."""

from __future__ import annotations

import hashlib
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from platform_ingest import ConfigError, Database, NotFound
from platform_ingest.cli.main import main
from platform_ingest.errors import StreamDisowned
from platform_ingest.operate.naming import name_stream
from platform_ingest.operate.remedies import abandon_attempt, disown_stream, report_exit, skip_line
from platform_ingest.operate.repair import repair_book
from platform_ingest.operate.show import show_state
from platform_journals import (
    RUN_A,
    RUN_B,
    RUN_C,
    append,
    book_state,
    ceiling,
    finished,
    hello,
    spend,
    start_worker,
    sweep,
    unit_done,
    wait_for,
    write,
)

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]


def _attempt(db: Database, book: Path, stream: str) -> dict[str, Any]:
    for run in book_state(db, book)["runs"]:
        for attempt in run["attempts"]:
            if attempt["engine_run_id"] == stream:
                found: dict[str, Any] = attempt
                return found
    raise AssertionError(f"no attempt {stream}")


def _run_of(db: Database, book: Path, stream: str) -> dict[str, Any]:
    for run in book_state(db, book)["runs"]:
        if any(attempt["engine_run_id"] == stream for attempt in run["attempts"]):
            found: dict[str, Any] = run
            return found
    raise AssertionError(f"no run of {stream}")


def _actions(db: Database, book: Path) -> list[tuple[str, str | None, str]]:
    return [
        (action["action"], action["engine_run_id"], action["by"])
        for action in book_state(db, book)["actions"]
    ]


# --- exited ----------------------------------------------------------------------------------


def test_a_refusal_before_hello_ends_the_pending_attempt_and_its_run(
    db: Database, make_book: MakeBook
) -> None:
    """The engine refused before its hello (exit 13): nothing is in the journal, and before,
    the named attempt stayed `pending` and its run `running` forever."""
    book = make_book("book-1")
    name_stream(db, str(book), RUN_A)
    sweep(db, book, auto=False)
    action = report_exit(db, str(book), RUN_A, 13, by="launcher")
    assert action.state == "exited"
    attempt = _attempt(db, book, RUN_A)
    assert (attempt["state"], attempt["exit_status"]) == ("exited", 13)
    run = _run_of(db, book, RUN_A)
    assert (run["state"], run["refusal"], run["exit_code"]) == ("refused", "schema_mismatch", 13)
    assert _actions(db, book) == [("exited", RUN_A, "launcher")]


def test_a_signal_fails_the_run_and_a_later_finished_wins(
    db: Database, make_book: MakeBook
) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 40))
    sweep(db, book)
    report_exit(db, str(book), RUN_A, -signal.SIGKILL)
    run = _run_of(db, book, RUN_A)
    assert (run["state"], run["reason"]) == ("failed", "signal_9")
    append(book, finished(3, money=40))  # the finished was in flight: it arrives after the report
    sweep(db, book)
    run = _run_of(db, book, RUN_A)
    assert (run["state"], run["outcome"], run["exit_code"]) == ("completed", "completed", 0)
    attempt = _attempt(db, book, RUN_A)
    assert (attempt["state"], attempt["exit_status"]) == ("finished", -9)  # both are kept


def test_an_exit_reported_before_the_lines_are_read_keeps_the_last_word(
    db: Database, make_book: MakeBook
) -> None:
    """SIGKILL after a ceiling line, reported before any pass read the stream: the hello and the
    ceiling read later do not make the run live again; the exit status ends it."""
    book = make_book("book-1")
    name_stream(db, str(book), RUN_A)
    write(book, hello(), spend(2, 40), ceiling(3))
    report_exit(db, str(book), RUN_A, -signal.SIGKILL)
    sweep(db, book, auto=False)
    attempt = _attempt(db, book, RUN_A)
    assert (attempt["state"], attempt["last_seq"]) == ("exited", 3)
    run = _run_of(db, book, RUN_A)
    assert (run["state"], run["reason"], run["committed_micro_usd"]) == ("failed", "signal_9", 40)


def test_exited_needs_a_known_stream(db: Database, make_book: MakeBook) -> None:
    book = make_book("book-1")
    with pytest.raises(NotFound, match="name or sweep"):
        report_exit(db, str(book), RUN_A, 0)


# --- skip ------------------------------------------------------------------------------------


def test_skip_passes_exactly_the_named_line(db: Database, make_book: MakeBook) -> None:
    book = make_book("book-1")
    bad = b'{"seq":3,"type":"spend","time":"x"}\n'
    write(book, hello(), spend(2, 10), bad, unit_done(4, "u-1", 0), spend(5, 30))
    sweep(db, book)
    attempt = _attempt(db, book, RUN_A)
    assert (attempt["state"], attempt["error"]["seq"]) == ("quarantined", 3)
    dry = skip_line(db, str(book), RUN_A, 3, sha256=None, reason="bad time")
    assert dry.action_id is None
    assert dry.detail["sha256"] == hashlib.sha256(bad).hexdigest()
    assert _attempt(db, book, RUN_A)["state"] == "quarantined"
    with pytest.raises(ConfigError, match="has sha256"):
        skip_line(db, str(book), RUN_A, 3, sha256="00" * 32, reason="bad time")
    with pytest.raises(ConfigError, match="at seq 3"):
        skip_line(db, str(book), RUN_A, 4, sha256=dry.detail["sha256"], reason="bad time")
    done = skip_line(db, str(book), RUN_A, 3, sha256=dry.detail["sha256"], reason="bad time")
    assert done.state == "active"
    sweep(db, book)
    attempt = _attempt(db, book, RUN_A)
    assert (attempt["state"], attempt["last_seq"]) == ("active", 5)
    run = _run_of(db, book, RUN_A)
    assert (run["units"], run["committed_micro_usd"]) == (["u-1"], 30)
    assert sweep(db, book).lines_applied == 0  # a re-read passes the skipped line again, quietly
    (action,) = book_state(db, book)["actions"]
    assert (action["action"], action["reason"], action["evidence"]["seq"]) == (
        "skip",
        "bad time",
        3,
    )
    assert action["evidence"]["error"]["kind"] == "malformed"


def test_a_skip_is_of_one_line_only(db: Database, make_book: MakeBook) -> None:
    """Another line at the skipped seq is still a problem: the skip names bytes, not a seq."""
    book = make_book("book-1")
    bad = b'{"seq":3,"type":"spend","time":"x"}\n'
    write(book, hello(), spend(2, 10), bad)
    sweep(db, book)
    dry = skip_line(db, str(book), RUN_A, 3, sha256=None, reason="r")
    skip_line(db, str(book), RUN_A, 3, sha256=dry.detail["sha256"], reason="r")
    write(book, hello(), spend(2, 10), b'{"seq":3,"type":"spend","time":"y"}\n')
    sweep(db, book)
    assert _attempt(db, book, RUN_A)["state"] == "quarantined"


def test_skip_accepts_a_conflicting_line_as_not_applied(db: Database, make_book: MakeBook) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 10), spend(3, 20))
    sweep(db, book)
    other = spend(2, 11)
    append(book, other, spend(4, 30))
    sweep(db, book)
    attempt = _attempt(db, book, RUN_A)
    assert (attempt["state"], attempt["error"]["kind"]) == ("quarantined", "payload_conflict")
    skip_line(db, str(book), RUN_A, 2, sha256=hashlib.sha256(other).hexdigest(), reason="re-sent")
    sweep(db, book)
    attempt = _attempt(db, book, RUN_A)
    assert (attempt["state"], attempt["last_seq"]) == ("active", 4)
    assert _run_of(db, book, RUN_A)["committed_micro_usd"] == 30


# --- disown and abandon ------------------------------------------------------------------------


def test_disown_unparks_the_book_and_applies_none_of_the_foreign_stream(
    db: Database, make_book: MakeBook
) -> None:
    book = make_book("book-1")
    name_stream(db, str(book), RUN_A)
    write(book, hello(RUN_A), spend(2, 10), hello(RUN_C), spend(2, 999), ceiling(3))
    sweep(db, book, auto=False)
    assert _attempt(db, book, RUN_A)["state"] == "parked"
    action = disown_stream(db, str(book), RUN_C, reason="another tenant", by="ops")
    assert (action.state, action.detail["attempts_unparked"]) == ("disowned", 1)
    name_stream(db, str(book), RUN_B)
    append(book, hello(RUN_B), spend(2, 25))
    sweep(db, book, auto=False)
    assert _attempt(db, book, RUN_A)["state"] == "superseded"
    assert _attempt(db, book, RUN_B)["state"] == "active"
    foreign = _attempt(db, book, RUN_C)
    assert (foreign["state"], foreign["last_seq"]) == ("disowned", 0)
    run = _run_of(db, book, RUN_A)
    assert (run["state"], run["committed_micro_usd"]) == ("running", 25)
    assert _actions(db, book) == [("disown", RUN_C, "ops")]
    with pytest.raises(ConfigError, match="abandon"):
        disown_stream(db, str(book), RUN_B, reason="x")


def test_abandon_a_stalled_attempt_fails_its_run(db: Database, make_book: MakeBook) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 10), spend(5, 50))
    sweep(db, book)
    assert _attempt(db, book, RUN_A)["state"] == "stalled"
    with pytest.raises(ConfigError, match="--reason"):
        abandon_attempt(db, str(book), RUN_A, reason=" ")
    abandon_attempt(db, str(book), RUN_A, reason="journal lost", by="ops")
    assert _attempt(db, book, RUN_A)["state"] == "abandoned"
    run = _run_of(db, book, RUN_A)
    assert (run["state"], run["reason"]) == ("failed", "abandoned")
    (action,) = book_state(db, book)["actions"]
    assert action["evidence"]["attempt_state"] == "stalled"
    assert action["evidence"]["error"]["kind"] == "gap"
    assert sweep(db, book).lines_applied == 0


def test_an_active_attempt_cannot_be_abandoned(db: Database, make_book: MakeBook) -> None:
    book = make_book("book-1")
    write(book, hello())
    sweep(db, book)
    with pytest.raises(ConfigError, match="only a"):
        abandon_attempt(db, str(book), RUN_A, reason="r")


# --- repair reads exit 13 ------------------------------------------------------------------------


def test_repair_reads_a_status_exit_13_as_schema_mismatch(
    fresh_dsn: str, make_book: MakeBook, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 10))
    assert main(["--dsn", fresh_dsn, "sweep", "--auto", str(book)]) == 0
    script = tmp_path / "status.py"
    script.write_text('import sys\nprint(\'{"error": "schema_mismatch"}\')\nsys.exit(13)\n')
    capsys.readouterr()
    code = main(
        ["--dsn", fresh_dsn, "repair", str(book), "--status-command", f"{sys.executable} {script}"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert '"reading": "schema_mismatch"' in out
    db = Database(fresh_dsn)
    try:
        run = _run_of(db, book, RUN_A)
        assert (run["state"], run["settled_micro_usd"]) == ("running", None)
        assert [action["evidence"] for action in book_state(db, book)["actions"]] == [
            {"reading": "schema_mismatch"}
        ]
    finally:
        db.close()


def test_repair_of_a_process_without_finished_takes_the_reported_exit(
    db: Database, make_book: MakeBook, tmp_path: Path
) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 10))
    sweep(db, book)
    report_exit(db, str(book), RUN_A, 1)
    status = {
        "book_id": "book-1",
        "engine_run_id": RUN_A,
        "streams": [],
        "journal": "ok",
        "progress": {},
        "money": {"committed_micro_usd": 12},
        "ceiling": None,
        "finished": None,
    }
    script = tmp_path / "status.py"
    script.write_text(f"import json\nprint(json.dumps({status!r}))\n")
    repaired = repair_book(db, str(book), status_command=f"{sys.executable} {script}")
    assert (repaired.state, repaired.settled_micro_usd) == ("failed", 12)
    run = _run_of(db, book, RUN_A)
    assert (run["state"], run["reason"], run["exit_code"]) == ("failed", None, 1)


# --- under a running worker ------------------------------------------------------------------------


def test_a_remedy_reaches_a_running_worker(fresh_dsn: str, tmp_path: Path) -> None:
    """A skip through the CLI while a worker runs: the worker's next pass goes on past the line."""
    root = tmp_path / "books"
    book = root / "book-1"
    book.mkdir(parents=True)
    bad = b'{"seq":3,"type":"spend","time":"x"}\n'
    write(book, hello(), spend(2, 10), bad, spend(4, 30))
    log = tmp_path / "worker.log"
    worker = start_worker(fresh_dsn, root, log, "--safety-pass-s", "1")
    db = Database(fresh_dsn)
    try:
        wait_for(
            "the bad line quarantined the stream",
            lambda: _state_of(db, book) == "quarantined",
        )
        digest = hashlib.sha256(bad).hexdigest()
        assert (
            main(
                [
                    "--dsn",
                    fresh_dsn,
                    "skip",
                    str(book),
                    RUN_A,
                    "3",
                    "--sha256",
                    digest,
                    "--reason",
                    "a bad time",
                    "--by",
                    "ops",
                ]
            )
            == 0
        )
        wait_for("the worker passed the skipped line", lambda: _last_seq(db, book) == 4)
        assert _run_of(db, book, RUN_A)["committed_micro_usd"] == 30
    finally:
        db.close()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0


def _state_of(db: Database, book: Path) -> str | None:
    runs = book_state(db, book)["runs"] if _registered(db, book) else []
    return runs[0]["attempts"][0]["state"] if runs and runs[0]["attempts"] else None


def _last_seq(db: Database, book: Path) -> int:
    return int(_attempt(db, book, RUN_A)["last_seq"])


def _registered(db: Database, book: Path) -> bool:
    return any(shown["book_id"] == book.name for shown in show_state(db)["books"])


def test_repair_refuses_when_the_engines_latest_stream_was_disowned(
    db: Database, make_book: MakeBook, tmp_path: Path
) -> None:
    """Before, repair settled our run with the disowned stream's outcome (a foreign ceiling
    paused our failed run)."""
    book = make_book("book-1")
    name_stream(db, str(book), RUN_A)
    write(book, hello(RUN_A), spend(2, 10), hello(RUN_C), ceiling(2))
    sweep(db, book, auto=False)
    report_exit(db, str(book), RUN_A, -9)
    disown_stream(db, str(book), RUN_C, reason="not ours")
    status = {
        "book_id": "book-1",
        "engine_run_id": RUN_C,
        "streams": [],
        "journal": "ok",
        "progress": {},
        "money": {"committed_micro_usd": 10},
        "ceiling": {"halted": True, "scope": "book", "shortfall_micro_usd": 5},
        "finished": None,
    }
    script = tmp_path / "status.py"
    script.write_text(f"import json\nprint(json.dumps({status!r}))\n")
    with pytest.raises(StreamDisowned):
        repair_book(db, str(book), status_command=f"{sys.executable} {script}")
    run = _run_of(db, book, RUN_A)
    assert (run["state"], run["reason"]) == ("failed", "signal_9")


def test_a_released_finished_stream_is_finished_again_and_never_parks(
    db: Database, make_book: MakeBook
) -> None:
    """Before, release (or a skip) left a finished attempt `active` for good, and a later
    foreign stream parked its completed run."""
    book = make_book("book-1")
    name_stream(db, str(book), RUN_A)
    write(book, hello(RUN_A), spend(2, 10), finished(3, money=10))
    sweep(db, book, auto=False)
    conflict = spend(2, 11)
    append(book, conflict)
    sweep(db, book, auto=False)
    assert _attempt(db, book, RUN_A)["state"] == "quarantined"
    skip_line(
        db, str(book), RUN_A, 2, sha256=hashlib.sha256(conflict).hexdigest(), reason="re-sent"
    )
    append(book, hello(RUN_C), spend(2, 99))
    sweep(db, book, auto=False)
    assert _attempt(db, book, RUN_A)["state"] == "finished"
    assert _run_of(db, book, RUN_A)["state"] == "completed"


def test_disown_unparks_an_exited_attempt_as_exited(db: Database, make_book: MakeBook) -> None:
    book = make_book("book-1")
    name_stream(db, str(book), RUN_A)
    write(book, hello(RUN_A), spend(2, 10), hello(RUN_C))
    sweep(db, book, auto=False)
    report_exit(db, str(book), RUN_A, -9)
    assert _attempt(db, book, RUN_A)["state"] == "parked"
    disown_stream(db, str(book), RUN_C, reason="not ours")
    assert _attempt(db, book, RUN_A)["state"] == "exited"


@pytest.mark.parametrize(
    "stream", ["", "a\x00b", "x" * 256, "é" * 128], ids=["empty", "nul", "long", "long-utf8"]
)
@pytest.mark.parametrize(
    "command",
    [
        ["name"],
        ["release"],
        ["exited", "_", "0"],
        ["skip", "_", "3", "--reason", "r"],
        ["disown", "_", "--reason", "r"],
        ["abandon", "_", "--reason", "r"],
    ],
    ids=lambda command: command[0],
)
def test_a_stream_id_no_hello_could_carry_is_a_usage_error(
    fresh_dsn: str,
    make_book: MakeBook,
    capsys: pytest.CaptureFixture[str],
    stream: str,
    command: list[str],
) -> None:
    """Every operator command refuses such an id at once (exit 2), before Postgres is asked to
    store or look up a value it cannot hold."""
    book = make_book("book-1")
    name, *rest = command
    argv = [name, str(book), stream, *[arg for arg in rest if arg != "_"]]
    with pytest.raises(SystemExit) as exited:
        main(["--dsn", fresh_dsn, *argv])
    assert exited.value.code == 2
    assert "1 to 255 bytes" in capsys.readouterr().err

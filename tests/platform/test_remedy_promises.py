"""The promises of the remedies and of retention, each held where it once broke: a pruned run's
money, a skip over a compacted range, an undo for `disown`, a book whose directory is gone."""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from platform_ingest import ConfigError, Database, NotFound
from platform_ingest.cli.main import main
from platform_ingest.errors import JournalMissing
from platform_ingest.ingest.book_pass import BookPass
from platform_ingest.ingest.rebuild import rebuild
from platform_ingest.operate.compact import compact_quiet
from platform_ingest.operate.naming import name_stream, release_attempt
from platform_ingest.operate.prune import prune_runs
from platform_ingest.operate.remedies import (
    abandon_attempt,
    disown_stream,
    report_exit,
    skip_line,
    undisown_stream,
)
from platform_ingest.worker.loop import Worker, WorkerSettings
from platform_journals import (
    RUN_A,
    RUN_B,
    RUN_C,
    append,
    attempts,
    book_state,
    ceiling,
    finished,
    hello,
    spend,
    sweep,
    unit_done,
    write,
)
from projection_fixtures import Recording

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]


def replace_journal(book: Path, lines: list[bytes]) -> None:
    """Put a new file (a new inode) in the journal's place, as a restore or an editor does."""
    staged = book / "events.jsonl.new"
    staged.write_bytes(b"".join(lines))
    staged.replace(book / "events.jsonl")


def _runs(db: Database, book: Path) -> dict[int, dict[str, Any]]:
    return {run["run_id"]: run for run in book_state(db, book)["runs"]}


def _pruned_parts(db: Database, book: Path) -> int:
    return sum(
        action["evidence"]["spent_micro_usd"]
        for action in book_state(db, book)["actions"]
        if action["action"] == "prune"
    )


# --- a pruned run's money ---------------------------------------------------------------------


def test_prune_changes_no_surviving_runs_money(db: Database, make_book: MakeBook) -> None:
    """Run 1 paused at its ceiling, was resumed and completed (1,000,000 spent); run 2 spent
    nothing. Pruning run 1 once made run 2 say it spent 1,000,000: a biller charged it twice."""
    book = make_book("book-1")
    write(
        book,
        hello(RUN_A),
        spend(2, 600_000),
        unit_done(3, "u-1", 1),
        ceiling(4),
        finished(5, 4, money=600_000),
    )
    sweep(db, book)
    append(
        book,
        hello(RUN_B),
        spend(2, 1_000_000),
        unit_done(3, "u-2", 2),
        finished(4, money=1_000_000),
    )
    sweep(db, book)
    append(book, hello(RUN_C), finished(2, money=1_000_000))
    sweep(db, book)
    before = _runs(db, book)
    assert [run["spent_micro_usd"] for run in before.values()] == [1_000_000, 0]

    report = prune_runs(db, older_than_s=0)

    assert [entry["run_id"] for entry in report.pruned] == [1]
    after = _runs(db, book)
    assert list(after) == [2]
    assert after[2]["spent_micro_usd"] == before[2]["spent_micro_usd"] == 0
    assert after[2]["units"] == before[2]["units"]
    (action,) = [a for a in book_state(db, book)["actions"] if a["action"] == "prune"]
    assert action["evidence"]["spent_micro_usd"] == 1_000_000
    assert action["evidence"]["units"] == 2
    ledger = max(run["committed_micro_usd"] for run in after.values())
    assert _pruned_parts(db, book) + after[2]["spent_micro_usd"] == ledger


def test_a_run_pruned_between_two_survivors_keeps_both_parts(
    db: Database, sql: psycopg.Connection[tuple[object, ...]], make_book: MakeBook
) -> None:
    """A middle run pruned: the run after it still counts the pruned run's ledger among the runs
    before it, and the run before it keeps its own part."""
    book = make_book("book-1")
    write(book, hello(RUN_A), spend(2, 100), finished(3, 1, money=100))
    sweep(db, book)
    append(book, hello(RUN_B), spend(2, 300), finished(3, money=300))
    sweep(db, book)
    append(book, hello(RUN_C), spend(2, 700), finished(3, money=700))
    sweep(db, book)
    before = {run_id: run["spent_micro_usd"] for run_id, run in _runs(db, book).items()}
    assert before == {1: 100, 2: 200, 3: 400}
    # Only run 2 is old enough: runs 1 and 3 are touched now.
    for table, column in (("runs", "updated_at"), ("attempts", "changed_at")):
        sql.execute(
            f"UPDATE {table} SET {column} = now() + CASE WHEN run_id = 2"
            " THEN interval '-1 hour' ELSE interval '1 hour' END"
        )

    report = prune_runs(db, older_than_s=60)

    assert [entry["run_id"] for entry in report.pruned] == [2]
    after = {run_id: run["spent_micro_usd"] for run_id, run in _runs(db, book).items()}
    assert after == {1: 100, 3: 400}
    assert _pruned_parts(db, book) == 200
    assert sum(after.values()) + _pruned_parts(db, book) == 700


# --- a skip over a compacted range -------------------------------------------------------------


def _paused_then_resumed(book: Path) -> list[bytes]:
    """Stream A pauses at the ceiling (seqs 1..6); stream B resumes the run."""
    return [
        hello(RUN_A),
        spend(2, 100),
        unit_done(3, "u-1", 1),
        spend(4, 200),
        ceiling(5),
        finished(6, 4, money=200),
    ]


def test_a_conflict_of_a_compacted_range_cannot_be_skipped(
    db: Database, make_book: MakeBook
) -> None:
    """A changed line of a compacted range is found at the range's last seq, whose own line did
    not change. A skip of that line was once accepted and then passed the whole range: every
    later sweep counted the changed line a duplicate, while `rebuild` said `lines_differ`."""
    book = make_book("book-1")
    first = _paused_then_resumed(book)
    write(book, *first)
    sweep(db, book)
    assert compact_quiet(db, quiet_for_s=0).compacted != []
    resumed = [hello(RUN_B), spend(2, 300), finished(3, money=300)]
    append(book, *resumed)
    sweep(db, book)
    changed = [first[0], first[1], first[2], spend(4, 250), *first[4:], *resumed]
    replace_journal(book, changed)
    sweep(db, book)
    error = attempts(db, book)[RUN_A]["error"]
    assert (error["kind"], error["seq"]) == ("payload_conflict", 6)

    with pytest.raises(ConfigError, match="compacted range"):
        skip_line(
            db,
            str(book),
            RUN_A,
            6,
            sha256=hashlib.sha256(first[5]).hexdigest(),
            reason="the last line is fine",
        )

    assert all(action["action"] != "skip" for action in book_state(db, book)["actions"])
    for _ in range(2):  # read again, the changed line is still a conflict
        release_attempt(db, str(book), RUN_A, reason="read it again")
        sweep(db, book)
        error = attempts(db, book)[RUN_A]["error"]
        assert attempts(db, book)[RUN_A]["state"] == "quarantined"
        assert (error["kind"], error["seq"]) == ("payload_conflict", 6)
    report = rebuild(db, Recording(), ["book-1"])
    assert [entry["reason"] for entry in report.as_json()["cannot_replay"]] == ["lines_differ"]


def test_a_skip_refuses_a_journal_rewritten_since_the_quarantine(
    db: Database, make_book: MakeBook
) -> None:
    """The quarantine names a byte offset; when the journal was rewritten, another seq's line
    can start there now. Its hash, given back, once made a skip of it: that line then passed as
    a duplicate at the quarantined seq, whatever its bytes."""
    book = make_book("book-1")
    lines = [hello(RUN_A), spend(2, 100), spend(3, 200), spend(4, 300)]
    write(book, *lines)
    sweep(db, book)
    write(book, *lines[:3], spend(4, 999))
    sweep(db, book)
    error = attempts(db, book)[RUN_A]["error"]
    assert (error["kind"], error["seq"]) == ("payload_conflict", 4)
    # Rewritten: the quarantined offset now starts a changed seq 3, of the same length.
    rewritten = [lines[0], lines[1], spend(2, 555), spend(3, 777), spend(4, 999)]
    assert sum(map(len, rewritten[:3])) == error["offset"]
    replace_journal(book, rewritten)
    with pytest.raises(ConfigError, match="rewritten"):
        skip_line(
            db,
            str(book),
            RUN_A,
            4,
            sha256=hashlib.sha256(spend(3, 777)).hexdigest(),
            reason="skip what is there",
        )
    assert all(action["action"] != "skip" for action in book_state(db, book)["actions"])


# --- an undo for disown --------------------------------------------------------------------------


def test_a_disown_made_by_mistake_is_taken_back_and_the_stream_applies_once(
    db: Database, fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """`disown` of a real resume once had no way back: `name` said "already named" and exited 0
    while the stream stayed disowned, and its units and money were never applied."""
    book = make_book("book-1")
    name_stream(db, str(book), RUN_A)
    write(book, hello(RUN_A), spend(2, 100), ceiling(3))
    resume = [hello(RUN_B), spend(2, 400), unit_done(3, "u-1", 1), finished(4, money=400)]
    append(book, *resume)
    sweep(db, book, auto=False)
    assert attempts(db, book)[RUN_A]["state"] == "parked"
    disown_stream(db, str(book), RUN_B, reason="looked foreign")
    for _ in range(2):  # passes walk past the disowned stream meanwhile
        sweep(db, book, auto=False)

    capsys.readouterr()
    assert main(["--dsn", fresh_dsn, "name", str(book), RUN_B]) == 2
    assert "undisown" in capsys.readouterr().err
    assert attempts(db, book)[RUN_B]["state"] == "disowned"

    assert main(["--dsn", fresh_dsn, "undisown", str(book), RUN_B, "--reason", "ours"]) == 0
    assert RUN_B not in attempts(db, book)
    sweep(db, book, auto=False)
    # Foreign again, as before the disown; its hello, read while it was disowned, told that A's
    # process is gone (A is superseded), so it is walked past until it is named.
    assert RUN_B not in attempts(db, book)
    assert attempts(db, book)[RUN_A]["state"] == "superseded"
    assert main(["--dsn", fresh_dsn, "name", str(book), RUN_B]) == 0
    for _ in range(2):
        sweep(db, book, auto=False)
    (run,) = book_state(db, book)["runs"]
    assert (run["state"], run["units"], run["committed_micro_usd"]) == ("completed", ["u-1"], 400)
    assert attempts(db, book)[RUN_B]["state"] == "finished"
    assert [a["action"] for a in book_state(db, book)["actions"]] == ["disown", "undisown"]
    with pytest.raises(ConfigError, match="not disowned"):
        undisown_stream(db, str(book), RUN_B, reason="again")


def test_undisown_in_auto_mode_starts_the_streams_attempt(
    db: Database, make_book: MakeBook
) -> None:
    book = make_book("book-1")
    write(book, hello(RUN_A), spend(2, 100))
    sweep(db, book)
    disown_stream(db, str(book), RUN_B, reason="not ours")
    append(book, hello(RUN_B), spend(2, 300), unit_done(3, "u-9", 9))
    sweep(db, book)
    assert attempts(db, book)[RUN_B]["state"] == "disowned"
    undisown_stream(db, str(book), RUN_B, reason="ours after all")
    sweep(db, book)
    sweep(db, book)
    (run,) = book_state(db, book)["runs"]
    assert (run["units"], run["committed_micro_usd"]) == (["u-9"], 300)
    assert attempts(db, book)[RUN_B]["last_seq"] == 3


def test_name_refuses_an_abandoned_stream(db: Database, make_book: MakeBook) -> None:
    book = make_book("book-1")
    write(book, hello(RUN_A), spend(2, 10), spend(5, 50))
    sweep(db, book)
    abandon_attempt(db, str(book), RUN_A, reason="lost lines")
    with pytest.raises(ConfigError, match="abandoned"):
        name_stream(db, str(book), RUN_A)


# --- a book whose directory is gone -------------------------------------------------------------


def _problem_kinds(db: Database, book: Path) -> list[str]:
    return [problem["kind"] for problem in book_state(db, book)["problems"]]


def _gone_after_release(db: Database, book: Path) -> None:
    """The issue's book: quarantined, released, then its directory deleted."""
    write(book, hello(RUN_A), spend(2, 100), b'{"seq":3,"type":"spend"}\n')
    sweep(db, book)
    assert attempts(db, book)[RUN_A]["state"] == "quarantined"
    release_attempt(db, str(book), RUN_A, reason="the journal was restored")
    write(book, hello(RUN_A), spend(2, 100))
    sweep(db, book)
    assert attempts(db, book)[RUN_A]["state"] == "active"
    shutil.rmtree(book)


def test_a_gone_directory_is_the_books_journal_missing_until_abandon_by_its_path(
    db: Database, fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """A deleted book directory once left `show` saying "running, stream active" with no
    problem, and `abandon` and `exited` refused the path ("not a directory"): no remedy ended it."""
    book = make_book("book-1")
    _gone_after_release(db, book)
    with pytest.raises(JournalMissing):
        BookPass(db, "book-1").run()  # a worker passes a registered book by its id
    shown = book_state(db, book)
    assert _problem_kinds(db, book) == ["journal_missing"]
    assert shown["lag"]["journal"] == "missing"
    assert shown["runs"][0]["state"] == "running"
    report = rebuild(db, Recording(), ["book-1"])
    assert [entry["reason"] for entry in report.as_json()["cannot_replay"]] == ["journal_missing"]

    capsys.readouterr()
    argv = ["--dsn", fresh_dsn, "abandon", str(book), RUN_A, "--reason", "the book was deleted"]
    assert main(argv) == 0, capsys.readouterr().err
    shown = book_state(db, book)
    assert shown["problems"] == []
    assert attempts(db, book)[RUN_A]["state"] == "abandoned"
    assert shown["runs"][0]["state"] == "failed"
    assert [action["action"] for action in shown["actions"]] == ["release", "abandon"]
    assert shown["actions"][-1]["evidence"]["journal_gone"] is True


def test_exited_ends_a_gone_books_journal_missing_by_its_id(
    db: Database, make_book: MakeBook
) -> None:
    book = make_book("book-1")
    _gone_after_release(db, book)
    with pytest.raises(JournalMissing):
        BookPass(db, "book-1").run()
    report_exit(db, "book-1", RUN_A, -9)
    shown = book_state(db, book)
    assert shown["problems"] == []
    assert (shown["runs"][0]["state"], shown["runs"][0]["reason"]) == ("failed", "signal_9")
    with pytest.raises(NotFound, match="neither a directory nor"):
        report_exit(db, "no-such-book", RUN_A, 0)


def test_a_deleted_journal_is_missing_while_an_attempt_awaits_its_lines(
    db: Database, make_book: MakeBook
) -> None:
    """The directory stays, `events.jsonl` is deleted under an active attempt: `journal_missing`
    until the journal is put back, and then the lines after the cursor apply."""
    book = make_book("book-1")
    lines = [hello(RUN_A), spend(2, 100)]
    write(book, *lines)
    sweep(db, book)
    (book / "events.jsonl").unlink()
    with pytest.raises(JournalMissing, match="awaits"):
        sweep(db, book)
    assert _problem_kinds(db, book) == ["journal_missing"]
    write(book, *lines, spend(3, 300))
    sweep(db, book)
    assert _problem_kinds(db, book) == []
    assert book_state(db, book)["runs"][0]["committed_micro_usd"] == 300


def test_no_journal_yet_or_a_finished_book_cleaned_away_is_no_problem(
    db: Database, make_book: MakeBook
) -> None:
    """A stream named before its engine wrote anything has no journal to miss; nor has a book
    whose streams all ended, when its directory is cleaned away."""
    waiting = make_book("book-1")
    name_stream(db, str(waiting), RUN_A)
    sweep(db, waiting, auto=False)
    assert _problem_kinds(db, waiting) == []
    assert book_state(db, waiting)["lag"]["journal"] == "missing"

    done = make_book("book-2")
    write(done, hello(RUN_B, book="book-2"), spend(2, 5), finished(3, money=5))
    sweep(db, done)
    shutil.rmtree(done)
    BookPass(db, "book-2").run()
    assert _problem_kinds(db, done) == []


def test_a_worker_records_journal_missing_for_a_directory_gone_from_its_root(
    fresh_dsn: str, db: Database, tmp_path: Path
) -> None:
    """The worker once forgot a book whose directory left its root, so nothing recorded the
    problem: it passes such a book once more, then forgets it."""
    root = tmp_path / "books"
    book = root / "book-1"
    book.mkdir(parents=True)
    write(book, hello(RUN_A), spend(2, 100))
    worker = Worker(
        fresh_dsn,
        WorkerSettings(roots=[root], survey_interval_s=0.1, compact_quiet_s=None),
        worker_id="w-gone",
    )
    thread = threading.Thread(target=worker.run, name="worker")
    thread.start()
    try:
        _wait_for(lambda: _applied_by_the_worker(db, book))
        shutil.rmtree(book)
        _wait_for(lambda: _problem_kinds(db, book) == ["journal_missing"])
        _wait_for(lambda: root / "book-1" not in worker.survey.books)
        assert worker.metrics.registry.get_sample_value(
            "platform_ingest_problems_total", {"kind": "journal_missing"}
        )
    finally:
        worker.request_stop()
        thread.join(timeout=60)
    assert not thread.is_alive()


def _applied_by_the_worker(db: Database, book: Path) -> bool:
    try:
        return attempts(db, book)[RUN_A]["last_seq"] == 2
    except (NotFound, KeyError):  # not registered, or not passed, yet
        return False


def _wait_for(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)


def test_show_lists_a_disowned_stream_in_the_file_order_of_its_hello(
    db: Database, make_book: MakeBook
) -> None:
    """A disowned attempt was stored with no place in the book, and `show` listed it after every
    other, though its hello stands between two of ours."""
    book = make_book("book-1")
    name_stream(db, str(book), RUN_A)
    name_stream(db, str(book), RUN_B)
    write(book, hello(RUN_A), spend(2, 100), ceiling(3))
    sweep(db, book, auto=False)
    disown_stream(db, str(book), RUN_C, reason="another tenant")
    append(book, hello(RUN_C), spend(2, 999), hello(RUN_B), spend(2, 300), finished(3, money=300))
    for _ in range(2):
        sweep(db, book, auto=False)
    assert list(attempts(db, book)) == [RUN_A, RUN_C, RUN_B]
    assert attempts(db, book)[RUN_C]["state"] == "disowned"
    assert attempts(db, book)[RUN_A]["state"] == "superseded"
    (run,) = book_state(db, book)["runs"]
    assert (run["state"], run["committed_micro_usd"]) == ("completed", 300)


def test_a_compacted_range_left_before_its_end_counts_its_lines_unverified(
    db: Database, make_book: MakeBook
) -> None:
    """A compacted range read from its seq 1 but left for another stream before its last seq
    cannot be judged: the lines read of it were compared with nothing. They once counted as
    verified duplicates, so a changed line among them passed unseen in the pass's report."""
    book = make_book("book-1")
    first = [hello(RUN_A), spend(2, 100), spend(3, 200), spend(4, 300), finished(5, money=300)]
    write(book, *first)
    sweep(db, book)
    assert compact_quiet(db, quiet_for_s=0).compacted != []
    replace_journal(book, [first[0], spend(2, 150), hello(RUN_B), spend(2, 400)])
    report = sweep(db, book)
    assert report.unverified_duplicates == 2  # seq 1 and the changed seq 2
    assert attempts(db, book)[RUN_B]["last_seq"] == 2


def test_a_disowned_stream_leaves_no_lag_behind_it(db: Database, make_book: MakeBook) -> None:
    """Disowned after it parked our live stream, the foreign stream's lines once stayed lag for
    good: our attempt stayed active with its cursor before them, and every pass read them again.
    Its hello ends our attempt before it, as any later hello does (one engine holds the book)."""
    book = make_book("book-1")
    name_stream(db, str(book), RUN_A)
    write(book, hello(RUN_A), spend(2, 100), hello(RUN_C), spend(2, 999))
    sweep(db, book, auto=False)
    assert attempts(db, book)[RUN_A]["state"] == "parked"
    disown_stream(db, str(book), RUN_C, reason="another tenant")
    for _ in range(2):
        sweep(db, book, auto=False)
    lag = book_state(db, book)["lag"]
    assert (lag["bytes"], lag["lines"]) == (0, 0)
    assert attempts(db, book)[RUN_A]["state"] == "superseded"
    report = sweep(db, book, auto=False)
    assert report.lines_read == 0
    (run,) = book_state(db, book)["runs"]
    assert (run["state"], run["committed_micro_usd"]) == ("running", 100)


def test_a_second_line_at_a_skipped_seq_is_refused_not_a_database_error(
    db: Database, make_book: MakeBook
) -> None:
    """A seq whose line was skipped, changed once more: its second skip once failed in Postgres
    (a unique key of the skips) with a `DataRefused` nobody expected. It is a refusal (exit 2)
    that names the remedies that fit."""
    book = make_book("book-1")
    lines = [hello(RUN_A), spend(2, 100), spend(3, 200)]
    write(book, *lines)
    sweep(db, book)
    for amount in (150, 175):
        changed = spend(2, amount)
        replace_journal(book, [lines[0], changed, lines[2]])
        sweep(db, book)
        assert attempts(db, book)[RUN_A]["error"]["kind"] == "payload_conflict"
        sha = hashlib.sha256(changed).hexdigest()
        if amount == 150:
            skip_line(db, str(book), RUN_A, 2, sha256=sha, reason="a retimed copy")
            continue
        with pytest.raises(ConfigError, match="already has a skipped line"):
            skip_line(db, str(book), RUN_A, 2, sha256=sha, reason="and again")
    assert attempts(db, book)[RUN_A]["state"] == "quarantined"
    assert [a["action"] for a in book_state(db, book)["actions"]] == ["skip"]


def test_disown_refuses_a_stream_whose_run_was_pruned(db: Database, make_book: MakeBook) -> None:
    """A pruned stream is never applied again: a disown of it changed nothing, and left a
    disowned attempt that `name` then refused for a reason `undisown` could not mend."""
    book = make_book("book-1")
    write(book, hello(RUN_A), spend(2, 10), finished(3, money=10))
    sweep(db, book)
    append(book, hello(RUN_B), spend(2, 20), finished(3, money=20))
    sweep(db, book)
    assert [entry["run_id"] for entry in prune_runs(db, older_than_s=0).pruned] == [1]
    with pytest.raises(ConfigError, match="pruned"):
        disown_stream(db, str(book), RUN_A, reason="not ours")
    assert RUN_A not in attempts(db, book)


def test_a_line_written_after_a_cut_is_not_applied_to_the_stream_before_the_cut(
    db: Database, make_book: MakeBook
) -> None:
    """A journal cut in the middle of stream B, then written on by the live engine of stream C:
    C's next line stood in B's part of the file at B's next seq, and was applied as B's, money
    and all. Read from B's hello, the file lacks seqs B had applied: that is a hole (`gap`)."""
    book = make_book("book-1")
    b_lines = [hello(RUN_B), spend(2, 100), spend(3, 200)]
    write(book, hello(RUN_A), finished(2), *b_lines)
    sweep(db, book)
    assert attempts(db, book)[RUN_B]["last_seq"] == 3
    replace_journal(book, [hello(RUN_A), finished(2), b_lines[0], spend(4, 9_999)])
    sweep(db, book)
    attempt = attempts(db, book)[RUN_B]
    assert (attempt["state"], attempt["last_seq"]) == ("stalled", 3)
    assert (attempt["error"]["kind"], attempt["error"]["seq"]) == ("gap", 4)
    (run_of_b,) = [
        run
        for run in book_state(db, book)["runs"]
        if any(a["engine_run_id"] == RUN_B for a in run["attempts"])
    ]
    assert run_of_b["committed_micro_usd"] == 200


@pytest.mark.parametrize("ref", ["a\x00b", "x" * 5000, "é" * 300, "no-such-book"])
def test_a_remedy_given_a_hostile_book_reference_refuses_it_typed(db: Database, ref: str) -> None:
    """A book named by a path that is gone or by its id: a reference no path or id can be (U+0000),
    or a name the system refuses (too long), is a typed refusal, never an OSError or ValueError."""
    with pytest.raises((ConfigError, NotFound)):
        report_exit(db, ref, RUN_A, 0)
    with pytest.raises((ConfigError, NotFound)):
        abandon_attempt(db, ref, RUN_A, reason="hostile")

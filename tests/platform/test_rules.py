"""SPEC § 6, one rule at a time, on hand-made journals swept into a real Postgres."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from platform_ingest import LINE_BYTES_MAX, Database
from platform_ingest._operate import name_stream, release_attempt
from platform_journals import (
    RUN_A,
    RUN_B,
    RUN_C,
    append,
    attempts,
    bank_stop,
    book_state,
    ceiling,
    finished,
    hello,
    line,
    only_run,
    progress,
    spend,
    sweep,
    unit_done,
    write,
)

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]


def _sha(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def test_clean_stream_applies_every_effect(db: Database, make_book: MakeBook) -> None:
    """A clean stream is applied in full: attempt finished, run completed with its effects."""
    book = make_book("book-1")
    write(
        book,
        hello(),
        progress(2, draft=(1, 4)),
        unit_done(3, "u-1", 0),
        spend(4, 1000),
        unit_done(5, "u-2", 1),
        progress(6, draft=(2, 4), review=(0, 4)),
        spend(7, 2500),
        finished(8, money=2500),
    )
    report = sweep(db, book)
    assert report.lines_applied == 8
    run = only_run(db, book)
    assert run["state"] == "completed"
    assert run["outcome"] == "completed"
    assert run["exit_code"] == 0
    assert run["units"] == ["u-1", "u-2"]
    assert run["progress"] == {"draft": {"done": 2, "total": 4}, "review": {"done": 0, "total": 4}}
    assert run["committed_micro_usd"] == 2500
    assert run["attempts"] == [
        {
            "engine_run_id": RUN_A,
            "state": "finished",
            "last_seq": 8,
            "exit_status": None,
            "error": None,
        }
    ]


def test_duplicates_of_any_earlier_seq_are_skipped(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[tuple[object, ...]]
) -> None:
    """Byte-identical repeats of any earlier seq (not only the last) are skipped, effects once."""
    book = make_book("book-1")
    lines = [hello(), unit_done(2, "u-1", 0), spend(3, 1000), unit_done(4, "u-2", 1)]
    write(book, *lines, lines[1], lines[0], lines[2], lines[3], spend(5, 1500))
    report = sweep(db, book)
    assert report.lines_applied == 5
    assert report.duplicates == 4
    run = only_run(db, book)
    assert run["units"] == ["u-1", "u-2"]
    assert run["committed_micro_usd"] == 1500
    assert run["attempts"][0]["last_seq"] == 5
    count = sql.execute("SELECT count(*) FROM line_hashes").fetchone()
    assert count == (5,)


def test_gap_stalls_and_applies_nothing_after_the_hole(db: Database, make_book: MakeBook) -> None:
    """A seq beyond last+1 stalls the attempt with the gap recorded; nothing after it applies."""
    book = make_book("book-1")
    first = hello() + spend(2, 1000)
    write(book, first, unit_done(4, "u-lost", 0), unit_done(5, "u-after", 1))
    sweep(db, book)
    run = only_run(db, book)
    (attempt,) = run["attempts"]
    assert attempt["state"] == "stalled"
    assert attempt["last_seq"] == 2
    assert attempt["error"]["kind"] == "gap"
    assert attempt["error"]["seq"] == 4
    assert attempt["error"]["offset"] == len(first)
    assert run["units"] == []
    append(book, spend(3, 5000))
    sweep(db, book)
    assert only_run(db, book)["committed_micro_usd"] == 1000  # a stalled stream reads no more


def test_conflict_on_the_last_line_quarantines_with_both_hashes(
    db: Database, make_book: MakeBook
) -> None:
    """The last seq again with other bytes quarantines the attempt with both hashes as evidence."""
    book = make_book("book-1")
    applied, other = spend(2, 1000), spend(2, 9999)
    write(book, hello(), applied, other, spend(3, 3000))
    sweep(db, book)
    attempt = attempts(db, book)[RUN_A]
    assert attempt["state"] == "quarantined"
    assert attempt["last_seq"] == 2
    error = attempt["error"]
    assert (error["kind"], error["seq"], error["offset"]) == (
        "payload_conflict",
        2,
        len(hello() + applied),
    )
    assert _sha(applied) in error["detail"]
    assert _sha(other) in error["detail"]
    assert only_run(db, book)["committed_micro_usd"] == 1000


def test_conflict_on_an_earlier_line_is_found(db: Database, make_book: MakeBook) -> None:
    """A repeat of an EARLIER seq (not the last) with other bytes is a conflict too."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 1000), spend(3, 2000), spend(4, 3000))
    sweep(db, book)
    before = (book / "events.jsonl").stat().st_size
    append(book, spend(2, 9999), spend(5, 4000))
    sweep(db, book)
    attempt = attempts(db, book)[RUN_A]
    assert attempt["state"] == "quarantined"
    assert attempt["last_seq"] == 4
    assert attempt["error"]["seq"] == 2
    assert attempt["error"]["offset"] == before
    assert _sha(spend(2, 1000)) in attempt["error"]["detail"]


def test_conflict_found_after_the_hint_was_thrown_away(db: Database, make_book: MakeBook) -> None:
    """File replaced: the hint is thrown away, and a changed earlier line is still a conflict."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 1000), spend(3, 2000))
    sweep(db, book)
    write(book, hello(), spend(2, 1001), spend(3, 2000), spend(4, 3000))  # a new inode
    report = sweep(db, book)
    assert report.hint_discarded
    assert report.start_offset == 0
    attempt = attempts(db, book)[RUN_A]
    assert attempt["state"] == "quarantined"
    assert attempt["last_seq"] == 3
    assert attempt["error"]["kind"] == "payload_conflict"
    assert attempt["error"]["seq"] == 2
    assert attempt["error"]["offset"] == len(hello())


def test_replaced_identical_file_applies_nothing_twice(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[tuple[object, ...]]
) -> None:
    """A replaced file with the same lines: hint thrown away, reread from 0, nothing applied twice."""
    book = make_book("book-1")
    lines = [hello(), unit_done(2, "u-1", 0), spend(3, 2000)]
    write(book, *lines)
    sweep(db, book)
    write(book, *lines, unit_done(4, "u-2", 1))
    report = sweep(db, book)
    assert report.hint_discarded
    assert report.duplicates == 3
    assert report.lines_applied == 1
    assert only_run(db, book)["units"] == ["u-1", "u-2"]
    assert sql.execute("SELECT count(*) FROM run_units").fetchone() == (2,)


def test_truncated_file_discards_the_hint(db: Database, make_book: MakeBook) -> None:
    """A file shorter than the hint: the hint fails, the cursor still decides (nothing undone)."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 1000), spend(3, 2000))
    sweep(db, book)
    write(book, hello())
    report = sweep(db, book)
    assert report.hint_discarded
    assert attempts(db, book)[RUN_A]["last_seq"] == 3
    assert only_run(db, book)["committed_micro_usd"] == 2000


def test_unterminated_last_line_is_applied_once_completed(
    db: Database, make_book: MakeBook
) -> None:
    """An unterminated last line is left alone, and applied by the pass after it is completed."""
    book = make_book("book-1")
    tail = unit_done(3, "u-1", 0)
    write(book, hello(), spend(2, 1000), tail[:17])
    first = sweep(db, book)
    assert first.lines_applied == 2
    assert only_run(db, book)["units"] == []
    append(book, tail[17:])
    second = sweep(db, book)
    assert second.lines_applied == 1
    assert second.start_offset == len(hello() + spend(2, 1000))
    assert only_run(db, book)["units"] == ["u-1"]


def test_major_version_is_refused_with_nothing_applied(db: Database, make_book: MakeBook) -> None:
    """A hello of major 2 refuses the stream (unsupported_version): nothing of it is applied."""
    book = make_book("book-1")
    write(book, hello(version="2.0"), unit_done(2, "u-1", 0), spend(3, 1000))
    sweep(db, book)
    run = only_run(db, book)
    (attempt,) = run["attempts"]
    assert attempt["state"] == "refused"
    assert attempt["last_seq"] == 0
    assert (attempt["error"]["kind"], attempt["error"]["seq"], attempt["error"]["offset"]) == (
        "unsupported_version",
        1,
        0,
    )
    assert run["units"] == []
    assert run["committed_micro_usd"] == 0


def test_newer_minor_is_read_and_unknowns_ignored(db: Database, make_book: MakeBook) -> None:
    """A newer minor is read: unknown types and fields are ignored and the cursor passes them."""
    book = make_book("book-1")
    write(
        book,
        hello(version="1.9"),
        line(2, "heartbeat", {"nested": {"a": [1, 2, {"b": None}]}}),
        line(3, "spend", {"committed_micro_usd": 700, "currency": "USD"}),
        line(4, "unit_done", {"unit": "u-1", "index": 0, "chapter_title": "One"}),
    )
    sweep(db, book)
    run = only_run(db, book)
    assert run["attempts"][0]["state"] == "active"
    assert run["attempts"][0]["last_seq"] == 4
    assert run["committed_micro_usd"] == 700
    assert run["units"] == ["u-1"]


MALFORMED = {
    "invalid_utf8": (b'{"seq":2,"type":"x\xff","time":"T","data":{}}\n', None),
    "bad_json": (b'{"seq":2,"type":\n', None),
    "not_an_object": (b"[1,2,3]\n", None),
    "byte_order_mark": (b"\xef\xbb\xbf" + spend(2, 1), None),
    "carriage_return": (spend(2, 1)[:-1] + b"\r\n", None),
    "empty_line": (b"\n", None),
    "nesting_too_deep": (
        line(2, "heartbeat", {}).replace(b"{}}", b"[" * 100 + b"]" * 100 + b"}"),
        None,
    ),
    "wrong_type_seq": (spend(2, 1).replace(b'"seq":2', b'"seq":"2"'), None),
    "wrong_type_time": (spend(2, 1).replace(b".213Z", b"Z"), 2),
    "wrong_type_data": (
        b'{"seq":2,"type":"spend","time":"2026-11-30T02:08:57.213Z","data":[]}\n',
        2,
    ),
    "wrong_type_unit_index": (line(2, "unit_done", {"unit": "u", "index": "0"}), 2),
    "wrong_type_stop": (finished(2, 5, "graceful_stop", stop="gentle"), 2),
    "hello_not_seq_1": (hello().replace(b'"seq":1', b'"seq":2'), 2),
    "line_too_long": (line(2, "heartbeat", {"pad": "x" * LINE_BYTES_MAX}), None),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_each_malformed_kind_quarantines_the_stream(
    kind: str, db: Database, make_book: MakeBook
) -> None:
    """Each kind of bad line quarantines its stream as malformed, with its offset and seq."""
    raw, seq = MALFORMED[kind]
    book = make_book("book-1")
    write(book, hello(), raw, unit_done(3, "u-after", 0))
    sweep(db, book)
    run = only_run(db, book)
    (attempt,) = run["attempts"]
    assert attempt["state"] == "quarantined"
    assert attempt["last_seq"] == 1
    error = attempt["error"]
    assert (error["kind"], error["seq"], error["offset"]) == ("malformed", seq, len(hello()))
    assert error["detail"]
    assert run["units"] == []


@pytest.mark.parametrize("amount", [1.5, 12.0, "null", "12", None, -3, True, 2**63], ids=repr)
def test_each_money_violation_is_malformed_never_zero(
    amount: object, db: Database, make_book: MakeBook
) -> None:
    """Each money violation is malformed, never read as zero; spend keeps its last good value."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 4000), spend(3, amount), spend(4, 5000))
    sweep(db, book)
    run = only_run(db, book)
    attempt = run["attempts"][0]
    assert attempt["state"] == "quarantined"
    assert (attempt["error"]["kind"], attempt["error"]["seq"]) == ("malformed", 3)
    assert "committed_micro_usd" in attempt["error"]["detail"]
    assert run["committed_micro_usd"] == 4000


def test_money_violation_in_ceiling_and_finished(db: Database, make_book: MakeBook) -> None:
    """A float shortfall or a string in finished.money is malformed as well."""
    book = make_book("book-1")
    bad_finished = finished(2).replace(
        b'"committed_micro_usd":2000', b'"committed_micro_usd":"2000"'
    )
    write(book, hello(), bad_finished)
    sweep(db, book)
    assert attempts(db, book)[RUN_A]["error"]["kind"] == "malformed"
    other = make_book("book-2")
    write(
        other,
        hello(book="book-2"),
        line(2, "ceiling", {"halted": True, "scope": "book", "shortfall_micro_usd": 2.5}),
    )
    sweep(db, other)
    assert attempts(db, other)[RUN_A]["error"]["kind"] == "malformed"
    assert only_run(db, other)["state"] == "running"


def test_spend_is_cumulative_greatest_value_wins(db: Database, make_book: MakeBook) -> None:
    """`spend` is cumulative: the run holds the greatest value seen, across its streams too."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 3000), spend(3, 1000), finished(4, 4, "ceiling", money=3000))
    sweep(db, book)
    assert only_run(db, book)["committed_micro_usd"] == 3000
    append(book, hello(RUN_B), spend(2, 2500), spend(3, 4200))
    sweep(db, book)
    run = only_run(db, book)
    assert run["committed_micro_usd"] == 4200
    assert [a["engine_run_id"] for a in run["attempts"]] == [RUN_A, RUN_B]


def test_ceiling_pauses_the_run_never_fails_it(db: Database, make_book: MakeBook) -> None:
    """A ceiling pauses the run (reason ceiling, with the shortfall) and exit 4 keeps it paused."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 1000), ceiling(3, shortfall=750))
    sweep(db, book)
    run = only_run(db, book)
    assert (run["state"], run["reason"], run["shortfall_micro_usd"]) == ("paused", "ceiling", 750)
    append(book, finished(4, 4, "ceiling", money=1000))
    sweep(db, book)
    run = only_run(db, book)
    assert (run["state"], run["reason"], run["exit_code"]) == ("paused", "ceiling", 4)
    assert run["shortfall_micro_usd"] == 750
    assert run["outcome"] is None


def test_bank_stop_pauses_the_run(db: Database, make_book: MakeBook) -> None:
    """A bank_stop pauses the run with reason bank_stop."""
    book = make_book("book-1")
    write(book, hello(), bank_stop(2))
    sweep(db, book)
    run = only_run(db, book)
    assert (run["state"], run["reason"]) == ("paused", "bank_stop")


@pytest.mark.parametrize("stop", ["soft", "hard"])
def test_soft_and_hard_stops_pause_with_their_kind(
    stop: str, db: Database, make_book: MakeBook
) -> None:
    """Exit 5 pauses the run (reason stop); soft or hard is kept from finished.stop."""
    book = make_book("book-1")
    write(book, hello(), finished(2, 5, "graceful_stop", stop=stop))
    sweep(db, book)
    run = only_run(db, book)
    assert (run["state"], run["reason"], run["stop"], run["exit_code"]) == (
        "paused",
        "stop",
        stop,
        5,
    )


EXIT_CODE_READINGS = {
    0: ("completed", "completed", None, None),
    1: ("failed", None, None, None),
    2: ("completed", "completed_with_flags", None, None),
    3: ("paused", None, "bank_stop", None),
    4: ("paused", None, "ceiling", None),
    5: ("paused", None, "stop", None),
    10: ("refused", None, None, "config_invalid"),
    11: ("refused", None, None, "source_unreadable"),
    12: ("refused", None, None, "project_locked"),
    13: ("refused", None, None, "schema_mismatch"),
    14: ("refused", None, None, "decisions_rejected"),
    15: ("refused", None, None, "write_incomplete"),
    16: ("refused", None, None, "book_incomplete"),
    17: ("refused", None, None, "refusal_17"),
    9: ("failed", None, None, None),
    137: ("failed", None, None, None),
}


@pytest.mark.parametrize("code", sorted(EXIT_CODE_READINGS))
def test_every_exit_code_moves_the_run_as_section_4_says(
    code: int, db: Database, make_book: MakeBook
) -> None:
    """finished.exit_code moves the run to its § 4 state, outcome, reason or refusal class."""
    book = make_book("book-1")
    write(book, hello(), finished(2, code, "whatever"))
    sweep(db, book)
    run = only_run(db, book)
    assert (run["state"], run["outcome"], run["reason"], run["refusal"]) == EXIT_CODE_READINGS[code]
    assert run["exit_code"] == code
    assert run["attempts"][0]["state"] == "finished"


def test_refusal_class_from_finished_wins_over_the_code_name(
    db: Database, make_book: MakeBook
) -> None:
    """A refusal's class is finished.refusal when the engine gives one."""
    book = make_book("book-1")
    write(book, hello(), finished(2, 14, "decisions_rejected", refusal="unit_missing"))
    sweep(db, book)
    assert only_run(db, book)["refusal"] == "unit_missing"


def test_auto_mode_resumes_a_paused_run_and_starts_a_new_one_after_the_end(
    db: Database, make_book: MakeBook
) -> None:
    """Auto mode: a new stream resumes a paused run; after a completed run it starts a new run."""
    book = make_book("book-1")
    write(book, hello(RUN_A), unit_done(2, "u-1", 0), finished(3, 4, "ceiling"))
    sweep(db, book)
    assert only_run(db, book)["state"] == "paused"
    append(book, hello(RUN_B))
    sweep(db, book)
    run = only_run(db, book)
    assert run["state"] == "running"
    assert run["reason"] is None
    append(book, unit_done(2, "u-2", 1), finished(3))
    sweep(db, book)
    run = only_run(db, book)
    assert (run["state"], run["units"]) == ("completed", ["u-1", "u-2"])
    assert [(a["engine_run_id"], a["state"]) for a in run["attempts"]] == [
        (RUN_A, "finished"),
        (RUN_B, "finished"),
    ]
    append(book, hello(RUN_C), unit_done(2, "u-1", 0))
    sweep(db, book)
    runs = book_state(db, book)["runs"]
    assert [run["state"] for run in runs] == ["completed", "running"]
    assert runs[1]["attempts"][0]["engine_run_id"] == RUN_C
    assert runs[1]["units"] == ["u-1"]


def test_a_later_stream_supersedes_an_unfinished_one(db: Database, make_book: MakeBook) -> None:
    """A stream that never finished (its process died) is superseded when the next one begins."""
    book = make_book("book-1")
    write(book, hello(RUN_A), spend(2, 100))
    sweep(db, book)
    append(book, hello(RUN_B), spend(2, 200))
    sweep(db, book)
    states = {run_id: a["state"] for run_id, a in attempts(db, book).items()}
    assert states == {RUN_A: "superseded", RUN_B: "active"}


def test_only_the_latest_stream_moves_the_run_state(db: Database, make_book: MakeBook) -> None:
    """A line of an earlier stream (re-entered after a later hello) does not move the run's state."""
    book = make_book("book-1")
    write(book, hello(RUN_A), spend(2, 100), hello(RUN_B), spend(2, 200), hello(RUN_A), ceiling(3))
    sweep(db, book)
    run = only_run(db, book)
    assert run["state"] == "running"
    assert attempts(db, book)[RUN_A]["last_seq"] == 3


def test_named_mode_skips_foreign_streams_before_ours(db: Database, make_book: MakeBook) -> None:
    """Named mode: while our first line is not applied, a foreign stream is skipped."""
    book = make_book("book-1")
    name_stream(db, str(book), RUN_B)
    write(book, hello(RUN_A), unit_done(2, "u-foreign", 0), hello(RUN_B), unit_done(2, "u-ours", 0))
    sweep(db, book, auto=False)
    run = only_run(db, book)
    assert run["units"] == ["u-ours"]
    assert [(a["engine_run_id"], a["state"]) for a in run["attempts"]] == [(RUN_B, "active")]


def test_named_mode_parks_on_a_foreign_hello_after_ours(db: Database, make_book: MakeBook) -> None:
    """Named mode parks on a foreign hello after our lines; naming it lets the pass go on."""
    book = make_book("book-1")
    name_stream(db, str(book), RUN_A)
    ours = hello(RUN_A) + spend(2, 100)
    write(book, ours, hello(RUN_B), ceiling(2), unit_done(3, "u-foreign", 0))
    report = sweep(db, book, auto=False)
    assert report.parked
    run = only_run(db, book)
    (attempt,) = run["attempts"]
    assert attempt["state"] == "parked"
    assert attempt["last_seq"] == 2
    assert (attempt["error"]["kind"], attempt["error"]["offset"], attempt["error"]["seq"]) == (
        "foreign_stream_ahead",
        len(ours),
        1,
    )
    assert run["state"] == "running"  # the foreign ceiling paused nothing
    assert run["units"] == []
    again = sweep(db, book, auto=False)
    assert again.parked
    assert attempts(db, book)[RUN_A]["state"] == "parked"
    name_stream(db, str(book), RUN_B)
    sweep(db, book, auto=False)
    run = only_run(db, book)
    assert [(a["engine_run_id"], a["state"], a["error"]) for a in run["attempts"]] == [
        (RUN_A, "superseded", None),
        (RUN_B, "active", None),
    ]
    assert (run["state"], run["reason"], run["units"]) == ("paused", "ceiling", ["u-foreign"])


def test_named_pending_attempt_is_shown_pending(db: Database, make_book: MakeBook) -> None:
    """A named stream with nothing applied yet is `pending`; no journal is not an error."""
    book = make_book("book-1")
    name_stream(db, str(book), RUN_A)
    sweep(db, book, auto=False)
    assert attempts(db, book)[RUN_A] == {
        "engine_run_id": RUN_A,
        "state": "pending",
        "last_seq": 0,
        "exit_status": None,
        "error": None,
    }


def test_book_mismatch_quarantines_with_no_effects(db: Database, make_book: MakeBook) -> None:
    """A hello of another book quarantines that stream (book_mismatch); none of it is applied."""
    book = make_book("book-1")
    write(book, hello(RUN_A, book="another-book"), unit_done(2, "u-1", 0), spend(3, 100))
    sweep(db, book)
    run = only_run(db, book)
    (attempt,) = run["attempts"]
    assert attempt["state"] == "quarantined"
    assert (attempt["error"]["kind"], attempt["error"]["offset"]) == ("book_mismatch", 0)
    assert run["units"] == []
    assert run["committed_micro_usd"] == 0


def test_line_before_any_hello_is_recorded_on_the_book(db: Database, make_book: MakeBook) -> None:
    """A line before any hello belongs to no stream: it is kept on the book, and the pass goes on."""
    book = make_book("book-1")
    write(book, spend(2, 1000), b"not json\n", hello(), spend(2, 1000))
    sweep(db, book)
    state = book_state(db, book)
    assert state["error"]["kind"] == "malformed"
    assert (state["error"]["seq"], state["error"]["offset"]) == (2, 0)
    assert "before any hello" in state["error"]["detail"]
    assert attempts(db, book)[RUN_A]["state"] == "active"


def test_release_lifts_a_quarantine_and_goes_on_from_the_cursor(
    db: Database, make_book: MakeBook
) -> None:
    """release goes on from the cursor: a bad line still there quarantines again, a fix applies."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 1000), spend(3, "12"), unit_done(4, "u-1", 0))
    sweep(db, book)
    assert attempts(db, book)[RUN_A]["state"] == "quarantined"
    assert release_attempt(db, str(book), RUN_A) == "active"
    assert attempts(db, book)[RUN_A]["state"] == "active"
    sweep(db, book)
    assert attempts(db, book)[RUN_A]["state"] == "quarantined"
    release_attempt(db, str(book), RUN_A)
    write(book, hello(), spend(2, 1000), spend(3, 1200), unit_done(4, "u-1", 0))
    sweep(db, book)
    attempt = attempts(db, book)[RUN_A]
    assert (attempt["state"], attempt["last_seq"], attempt["error"]) == ("active", 4, None)
    assert only_run(db, book)["units"] == ["u-1"]


def test_release_refuses_an_attempt_that_is_not_quarantined(
    db: Database, make_book: MakeBook
) -> None:
    """Only a quarantined or stalled attempt can be released."""
    from platform_ingest import ConfigError, NotFound

    book = make_book("book-1")
    write(book, hello())
    sweep(db, book)
    with pytest.raises(ConfigError, match="active"):
        release_attempt(db, str(book), RUN_A)
    with pytest.raises(NotFound):
        release_attempt(db, str(book), RUN_B)


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


def test_batches_are_bounded_and_all_lines_arrive(
    db: Database, make_book: MakeBook, sql: psycopg.Connection[tuple[object, ...]]
) -> None:
    """With a tiny batch bound the pass commits many times and still applies every line once."""
    book = make_book("book-1")
    write(book, hello(), *[unit_done(seq, f"u-{seq}", seq) for seq in range(2, 60)])
    report = sweep(db, book, batch_lines_max=7)
    assert report.lines_applied == 59
    assert len(only_run(db, book)["units"]) == 58
    assert sql.execute("SELECT count(*) FROM line_hashes").fetchone() == (59,)

"""Property: any at-least-once journal, read in any number of passes, lands in one Postgres state.

A journal is built from random committed events of one or more streams, with the duplicates and
re-projections at-least-once delivery allows, then read in passes cut at random bytes (a growing
file), with the hints lost at random (the file replaced, or the book's hint spoiled). The state in
Postgres must equal the model: each committed event applied exactly once, in auto mode.
"""

from __future__ import annotations

import itertools
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platform_ingest import Database
from platform_ingest._exit_codes import read_exit_code
from platform_journals import (
    bank_stop,
    book_state,
    ceiling,
    finished,
    hello,
    line,
    progress,
    spend,
    sweep,
    unit_done,
)

pytestmark = pytest.mark.postgres

_books = itertools.count(1)

EXIT_CODES = [0, 1, 2, 3, 4, 5, 10, 17]


@dataclass
class Event:
    kind: str
    value: Any = None


events = st.one_of(
    st.builds(Event, st.just("spend"), st.integers(0, 5)),
    st.builds(Event, st.just("unit_done"), st.integers(0, 6)),
    st.builds(
        Event,
        st.just("progress"),
        st.dictionaries(st.sampled_from(["draft", "review"]), st.integers(0, 9), max_size=2),
    ),
    st.builds(Event, st.just("ceiling"), st.integers(0, 900)),
    st.builds(Event, st.just("bank_stop")),
    st.builds(Event, st.just("heartbeat")),
)
streams = st.lists(
    st.tuples(st.lists(events, max_size=8), st.one_of(st.none(), st.sampled_from(EXIT_CODES))),
    min_size=1,
    max_size=3,
)


@dataclass
class Built:
    content: bytes
    lines_per_stream: list[int]


def build_journal(
    data: st.DataObject, book_id: str, plan: list[tuple[list[Event], int | None]]
) -> tuple[Built, list[list[tuple[Event, int]]]]:
    """Lines of each stream in order; re-projections (a repeat of a run of earlier lines of the
    current stream, as a crash between write and watermark leaves) inserted at random."""
    out: list[bytes] = []
    committed: list[list[tuple[Event, int]]] = []
    counts: list[int] = []
    spent = 0
    for number, (body, exit_code) in enumerate(plan):
        run_id = f"00000000-0000-4000-8000-{number:012d}"
        stream_lines = [hello(run_id, book=book_id)]
        stream_events: list[tuple[Event, int]] = []
        seq = 1
        for event in [*body, *([Event("finished", exit_code)] if exit_code is not None else [])]:
            seq += 1
            if event.kind == "spend":
                spent += event.value
                raw = spend(seq, spent)
            elif event.kind == "unit_done":
                raw = unit_done(seq, f"u-{event.value}", event.value)
            elif event.kind == "progress":
                raw = progress(seq, **{name: (done, 9) for name, done in event.value.items()})
            elif event.kind == "ceiling":
                raw = ceiling(seq, shortfall=event.value)
            elif event.kind == "bank_stop":
                raw = bank_stop(seq)
            elif event.kind == "heartbeat":
                raw = line(seq, "heartbeat", {"minor": "1.9"})
            else:
                raw = finished(seq, event.value, "x", money=spent)
            stream_lines.append(raw)
            stream_events.append((event, spent))
        written: list[bytes] = []
        for raw in stream_lines:
            written.append(raw)
            if data.draw(st.integers(0, 5)) == 0:
                start = data.draw(st.integers(0, len(written) - 1))
                written.extend(written[start:])
        out.extend(written)
        committed.append(stream_events)
        counts.append(len(stream_lines))
    return Built(b"".join(out), counts), committed


def model_state(
    plan_events: list[list[tuple[Event, int]]], counts: list[int]
) -> list[dict[str, Any]]:
    """Each committed event applied once, in order, the way § 6 says (auto mode)."""
    runs: list[dict[str, Any]] = []
    for number, stream in enumerate(plan_events):
        current = runs[-1] if runs else None
        if current is None or current["state"] in ("completed", "failed", "refused"):
            current = {
                "state": "running",
                "reason": None,
                "committed_micro_usd": 0,
                "units": {},
                "progress": {},
                "shortfall": None,
                "exit_code": None,
                "attempts": [],
            }
            runs.append(current)
        current.update(state="running", reason=None, shortfall=None, exit_code=None)
        run_id = f"00000000-0000-4000-8000-{number:012d}"
        attempt = {"engine_run_id": run_id, "state": "active", "last_seq": counts[number]}
        for attempt_before in (a for run in runs for a in run["attempts"]):
            if attempt_before["state"] == "active":
                attempt_before["state"] = "superseded"
        current["attempts"].append(attempt)
        for event, spent in stream:
            if event.kind == "spend":
                current["committed_micro_usd"] = max(current["committed_micro_usd"], spent)
            elif event.kind == "unit_done":
                current["units"].setdefault(f"u-{event.value}", event.value)
            elif event.kind == "progress":
                current["progress"] = {
                    name: {"done": done, "total": 9} for name, done in event.value.items()
                }
            elif event.kind == "ceiling":
                current.update(state="paused", reason="ceiling", shortfall=event.value)
            elif event.kind == "bank_stop":
                current.update(state="paused", reason="bank_stop")
            elif event.kind == "finished":
                reading = read_exit_code(event.value)
                current.update(state=reading.state, reason=reading.reason, exit_code=event.value)
                current["committed_micro_usd"] = max(current["committed_micro_usd"], spent)
                attempt["state"] = "finished"
    return runs


def observed(db: Database, book: Path) -> list[dict[str, Any]]:
    found = []
    for run in book_state(db, book)["runs"]:
        found.append(
            {
                "state": run["state"],
                "reason": run["reason"],
                "committed_micro_usd": run["committed_micro_usd"],
                "units": run["units"],
                "progress": run["progress"],
                "shortfall": run["shortfall_micro_usd"],
                "exit_code": run["exit_code"],
                "attempts": [
                    {k: a[k] for k in ("engine_run_id", "state", "last_seq")}
                    for a in run["attempts"]
                ],
            }
        )
    return found


def expected(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for run in runs:
        run["units"] = [unit for unit, _ in sorted(run["units"].items(), key=lambda u: u[1])]
    return runs


def _check(data: st.DataObject, plan: Any, db: Database, fresh_dsn: str, root: Path) -> None:
    book_id = f"book-h{next(_books)}"
    book = root / book_id
    book.mkdir(parents=True)
    built, committed = build_journal(data, book_id, plan)
    content = built.content
    cuts = sorted(data.draw(st.lists(st.integers(0, len(content)), max_size=4)))
    journal = book / "events.jsonl"
    journal.write_bytes(b"")
    written = 0
    for cut in [*cuts, len(content)]:
        with open(journal, "ab") as file:
            file.write(content[written:cut])
        written = max(written, cut)
        loss = data.draw(st.sampled_from(["none", "none", "replace", "spoil"]))
        if loss == "replace":
            copy = book / "events.jsonl.copy"
            shutil.copyfile(journal, copy)
            os.replace(copy, journal)
        elif loss == "spoil":
            with psycopg.connect(fresh_dsn, autocommit=True) as sql:
                sql.execute(
                    "UPDATE books SET scan_sha256 = '\\x00' WHERE book_id = %s AND scan_offset > 0",
                    (book_id,),
                )
                sql.execute("UPDATE attempts SET hint_file = 'gone' WHERE book_id = %s", (book_id,))
        sweep(db, book, batch_lines_max=data.draw(st.integers(1, 6)))
    assert observed(db, book) == expected(model_state(committed, built.lines_per_stream))
    with psycopg.connect(fresh_dsn, autocommit=True) as sql:
        row = sql.execute(
            "SELECT count(*) FROM line_hashes h JOIN attempts a USING (attempt_id)"
            " WHERE a.book_id = %s",
            (book_id,),
        ).fetchone()
    assert row == (sum(built.lines_per_stream),)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), plan=streams)
def test_any_at_least_once_journal_ends_in_the_model_state(
    data: st.DataObject, plan: Any, db: Database, fresh_dsn: str, tmp_path: Path
) -> None:
    """Any at-least-once journal, read in any passes with hints lost, ends in the model state."""
    _check(data, plan, db, fresh_dsn, tmp_path)


@pytest.mark.slow
@settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), plan=streams)
def test_any_at_least_once_journal_ends_in_the_model_state_thorough(
    data: st.DataObject, plan: Any, db: Database, fresh_dsn: str, tmp_path: Path
) -> None:
    """The same property over many more journals (a long profile)."""
    _check(data, plan, db, fresh_dsn, tmp_path)


_HELLO = b"<hello>\n"
_FOREIGN_HELLO = b"<hello of another major>\n"

garbage_lines = st.one_of(
    st.binary(max_size=80).map(lambda raw: raw.replace(b"\n", b"") + b"\n"),
    st.sampled_from(
        [
            _HELLO,
            _FOREIGN_HELLO,
            spend(2, 10),
            spend(2, "12"),
            spend(3, 20),
            unit_done(3, "u", 1),
            finished(4),
            b"{}\n",
            b"\n",
        ]
    ),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(lines=st.lists(garbage_lines, max_size=12), tail=st.binary(max_size=30))
def test_whatever_the_file_holds_the_pass_does_not_crash(
    lines: list[bytes], tail: bytes, db: Database, tmp_path: Path
) -> None:
    """Random bytes never crash a pass; problems are state, and a second pass changes nothing."""
    book_id = f"book-g{next(_books)}"
    book = tmp_path / book_id
    book.mkdir()
    streams = itertools.count()
    content = [
        hello(f"00000000-0000-4000-8000-{next(streams):012d}", book=book_id)
        if raw == _HELLO
        else hello(book=book_id, version="7.0")
        if raw == _FOREIGN_HELLO
        else raw
        for raw in lines
    ]
    (book / "events.jsonl").write_bytes(b"".join(content) + tail)
    first = sweep(db, book)
    before = book_state(db, book)
    second = sweep(db, book)
    assert second.lines_applied == 0
    assert book_state(db, book) == before
    assert first.lines_read <= len(lines) + 1

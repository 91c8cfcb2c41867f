"""The seam's world (`test_world.SeamWorld`) with projections installed: the example spend ledger
and a recording projection that fails, when the simulation says so, for one book's next pass.

A second, quiet book (hand-written streams of spends, units and progress, ended or superseded)
lives beside the engine's: every `tail` step passes both, in a drawn order, with the same
projections. Each pass draws whether the recording projection fails for one book's events (the
rule `projection_fails(book)` is such a pass, so that failures come as often as passes).

After every step, for each book, on top of the world's own invariants:

- the ledger holds exactly the postings the model derives from the applied prefix of the book's
  committed lines (one per increase of the cumulative spend, on the stream and seq that carried
  it), its book total is the greatest applied spend, `check_ledger` finds nothing, each run's
  postings sum to the run's `spent_micro_usd` in `show --json`, and (at rest) the book total is
  the engine's own SQLite ledger;
- the recording projection holds each applied line exactly once: the model's applied lines, and
  Postgres's own (line hashes, compacted ranges, less skipped lines), per attempt; both
  projections' tracking is at every attempt's cursor;
- a failed pass moved no cursor of its book, the stream the model names shows `projection_failed`
  (on its attempt, or among the book's problems when it was the stream's first batch) with the
  count of failures in a row, the other book's pass applied all its lines, and the first commit
  that moves the stream clears the failure.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import psycopg
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule, run_state_machine_as_test

from platform_ingest import Database, DatabaseError, sweep_book
from platform_ingest.errors import ProjectionFailed
from platform_ingest.ingest.book_pass import BookPass
from platform_ingest.ingest.books import register_book
from platform_ingest.ingest.projection_step import install
from platform_ingest.operate.show import show_state
from platform_ingest.projections import Event, ProjectionSession
from platform_journals import (
    RUN_A,
    RUN_B,
    append,
    finished,
    hello,
    progress,
    spend,
    unit_done,
    write,
)
from projection_fixtures import FailingFor, Recording
from seam_model import (
    COMMIT_FAULTS,
    RUN_KEYS,
    STATS,
    Committed,
    applied_prefix,
    expected_runs,
    sha256,
)

pytestmark = pytest.mark.postgres

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _world_module() -> ModuleType:
    """`test_world.py`, whose machine this one extends (test modules are not importable by name
    under `--import-mode=importlib`: it is loaded from its file, once)."""
    name = "seam_world_machine"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("test_world.py")
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


SeamWorld: Any = _world_module().SeamWorld
ENGINE, QUIET = "engine", "quiet"
RECORDING = Recording.name


@pytest.fixture
def ledger(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The example ledger (`examples/` is not a package: it is put on the path, as its own
    tests do)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import ledger_projection

    return ledger_projection


# --- the checks (module functions: the tests at the end show each can fail) -----------------


def committed_spend(kind: str, data: dict[str, Any]) -> int | None:
    """The book's cumulative committed spend a line carries (the stream format: `spend`, and `finished`'s
    money), if any."""
    if kind == "spend":
        return int(data["committed_micro_usd"])
    if kind == "finished" and data.get("money") is not None:
        return int(data["money"]["committed_micro_usd"])
    return None


def expected_postings(applied: Iterable[Committed]) -> tuple[dict[tuple[str, int], int], int]:
    """What a spend ledger must hold after `applied` (in file order): one `run_spend` posting per
    increase of the cumulative spend, keyed by the (stream, seq) that carried it, and the total."""
    spent = 0
    postings: dict[tuple[str, int], int] = {}
    for run_id, seq, kind, data in applied:
        amount = committed_spend(kind, data)
        if amount is not None and amount > spent:
            postings[run_id, seq] = amount - spent
            spent = amount
    return postings, spent


Applied = Mapping[str, Sequence[Committed]]
"""Each book's applied lines (book_id -> the applied prefix of its committed lines)."""


def check_ledger_against_model(connection: psycopg.Connection[Any], applied: Applied) -> None:
    """Each book's ledger is exactly what the model derives from its applied lines: the same
    postings (each balanced by its `provider_owed` twin, on the run of its stream) and the same
    book total; nothing posted for a line that is not applied, or for another book."""
    found: dict[str, dict[str, dict[tuple[str, int], int]]] = {
        book_id: {"run_spend": {}, "provider_owed": {}} for book_id in applied
    }
    for book_id, run_id, seq, account, amount, same_run in connection.execute(
        "SELECT a.book_id, a.engine_run_id, e.seq, e.account, e.amount_micro_usd,"
        " e.run_id = a.run_id FROM ledger_entries e LEFT JOIN attempts a USING (attempt_id)"
        " WHERE a.book_id = ANY(%s) OR a.attempt_id IS NULL",
        (list(applied),),
    ).fetchall():
        assert book_id in found, f"a posting of an attempt of no book here: {run_id} seq {seq}"
        assert same_run, f"a posting of {run_id} seq {seq} is on another run"
        postings = found[book_id][account]
        assert (run_id, seq) not in postings, f"posted twice: {run_id} seq {seq} {account}"
        postings[run_id, seq] = amount
    totals = dict(
        connection.execute(
            "SELECT book_id, spent_micro_usd FROM ledger_books WHERE book_id = ANY(%s)",
            (list(applied),),
        ).fetchall()
    )
    for book_id, lines in applied.items():
        postings, spent = expected_postings(lines)
        assert found[book_id]["run_spend"] == postings, f"book {book_id}: ledger postings"
        assert found[book_id]["provider_owed"] == {key: -value for key, value in postings.items()}
        assert totals.get(book_id, 0) == spent, f"book {book_id}: ledger total"


def check_ledger_per_run(
    connection: psycopg.Connection[Any], shown_books: Iterable[dict[str, Any]]
) -> None:
    """Each run's postings sum to the run's own spend as `show --json` computes it."""
    runs = [run for book in shown_books for run in book["runs"]]
    totals = dict(
        connection.execute(
            "SELECT run_id, sum(amount_micro_usd) FROM ledger_entries"
            " WHERE account = 'run_spend' AND run_id = ANY(%s) GROUP BY run_id",
            ([run["run_id"] for run in runs],),
        ).fetchall()
    )
    for run in runs:
        assert totals.get(run["run_id"], 0) == run["spent_micro_usd"], (
            f"run {run['run_id']}: ledger {totals.get(run['run_id'], 0)},"
            f" show {run['spent_micro_usd']}"
        )


def check_recorded_against_model(connection: psycopg.Connection[Any], applied: Applied) -> None:
    """The recording projection holds each applied line once: exactly the model's applied lines
    (stream, seq, type) per book, and exactly what Postgres counts as applied per attempt (its
    line hashes, the range a compaction replaced by a digest, less lines an operator skipped)."""
    rows = connection.execute(
        "SELECT a.book_id, r.engine_run_id, r.seq, r.type, r.attempt_id, r.run_id = a.run_id"
        " AND r.engine_run_id = a.engine_run_id AND r.book_id = a.book_id"
        " FROM recorded_events r LEFT JOIN attempts a USING (attempt_id)"
        " WHERE a.book_id = ANY(%s) OR a.attempt_id IS NULL",
        (list(applied),),
    ).fetchall()
    assert all(row[5] for row in rows), "an event was recorded with another attempt's context"
    for book_id, lines in applied.items():
        recorded = sorted(
            (run_id, seq, kind) for book, run_id, seq, kind, *_ in rows if book == book_id
        )
        assert len(recorded) == len(set(recorded)), "an event was recorded twice"
        assert recorded == sorted((run_id, seq, kind) for run_id, seq, kind, _ in lines), (
            f"book {book_id}: the recorded events are not the applied lines"
        )
    by_postgres = connection.execute(
        """SELECT attempt_id, generate_series(1, compacted_seq) FROM attempts
           WHERE book_id = ANY(%(books)s)
           UNION ALL
           SELECT h.attempt_id, h.seq FROM line_hashes h JOIN attempts a USING (attempt_id)
           WHERE a.book_id = ANY(%(books)s) AND h.seq > a.compacted_seq
           EXCEPT ALL
           SELECT attempt_id, seq FROM line_skips""",
        {"books": list(applied)},
    ).fetchall()
    assert sorted((row[4], row[2]) for row in rows) == sorted(by_postgres), (
        "the recorded events are not Postgres's applied lines"
    )


def check_projections_in_step(
    connection: psycopg.Connection[Any], book_ids: Sequence[str], names: Sequence[str]
) -> None:
    """Every projection's cursor is at every attempt's: none was left behind."""
    behind = connection.execute(
        "SELECT a.engine_run_id, n.name, t.last_seq, a.last_seq FROM attempts a"
        " CROSS JOIN unnest(%s::text[]) AS n(name) LEFT JOIN projection_tracking t"
        " ON t.attempt_id = a.attempt_id AND t.projection = n.name"
        " WHERE a.book_id = ANY(%s) AND t.last_seq IS DISTINCT FROM a.last_seq",
        (list(names), list(book_ids)),
    ).fetchall()
    assert behind == [], f"a projection is not at its attempt's cursor: {behind}"


@dataclass
class Failure:
    """A projection's failure the model expects `show --json` to print for a book."""

    stream: str
    cursor: int
    """The stream's cursor when it failed: a commit that moves it past this clears the failure."""
    first_seq: int
    """The first seq the failed batch held for the stream (the failure's seq is at least it)."""
    last_seq: int
    """The stream's last committed seq then (the failure's seq is at most it)."""
    failures: int = 1


def shown_failures(shown_book: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every `projection_failed` a book shows: (stream, error) on an attempt, or ("", problem)
    among the book's problems (its detail names the stream)."""
    found = [
        (attempt["engine_run_id"], attempt["error"])
        for run in shown_book["runs"]
        for attempt in run["attempts"]
        if attempt["error"] is not None and attempt["error"]["kind"] == "projection_failed"
    ]
    found += [
        ("", problem)
        for problem in shown_book["problems"]
        if problem["kind"] == "projection_failed"
    ]
    return found


def check_failure_shown(shown_book: dict[str, Any], expected: Failure | None) -> None:
    """The book shows the failure the model expects, where the docs say (its stream's attempt, or the
    book's problems when the stream is not in Postgres yet), and nothing else."""
    found = shown_failures(shown_book)
    if expected is None:
        assert found == [], f"a projection failure is shown that the model does not expect: {found}"
        return
    assert len(found) == 1, f"expected one projection failure, found {found}"
    ((stream, error),) = found
    detail = error["detail"]
    assert "RuntimeError: refusing the events of" in detail, detail
    if stream:
        assert stream == expected.stream, (stream, expected)
        assert error["projection"] == RECORDING
        assert error["failures"] == expected.failures, (error, expected)
        assert expected.first_seq <= error["seq"] <= expected.last_seq, (error, expected)
    else:
        assert expected.cursor == 0, "a stream in Postgres shows its failure on the book"
        assert f"stream {expected.stream} " in detail and f"projection {RECORDING}:" in detail


def check_stalled(
    before: dict[str, int], after: dict[str, int], shown_book: dict[str, Any], stream: str
) -> None:
    """A failed pass moved no cursor of its book, and the book shows the failure on `stream`."""
    assert after == before, f"a failed pass moved cursors: {before} -> {after}"
    streams = [found for found, _ in shown_failures(shown_book)]
    assert streams in ([stream], [""]), f"the failure is not shown on {stream}: {streams}"


def cursors_of(shown_book: dict[str, Any]) -> dict[str, int]:
    return {
        attempt["engine_run_id"]: attempt["last_seq"]
        for run in shown_book["runs"]
        for attempt in run["attempts"]
    }


def runs_of(shown_book: dict[str, Any]) -> list[dict[str, Any]]:
    """The book's runs with the model's keys (`seam_model.observed_runs`), errors left out: they
    are `check_failure_shown`'s to judge."""
    return [
        {
            **{key: run[key] for key in RUN_KEYS},
            "attempts": [
                {key: attempt[key] for key in ("engine_run_id", "state", "last_seq")}
                for attempt in run["attempts"]
            ],
        }
        for run in shown_book["runs"]
    ]


def host_spent(database: Path) -> int:
    """The engine host's own ledger (`test_world.HOST_LEDGER`): what it committed spending."""
    if not database.exists():
        return 0
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        row = connection.execute("SELECT spent FROM host_ledger WHERE id = 1").fetchone()
    except sqlite3.OperationalError:  # no process got as far as creating it
        return 0
    finally:
        connection.close()
    return 0 if row is None else int(row[0])


# --- the quiet book ---------------------------------------------------------------------------


@dataclass
class Book:
    """One book the passes apply, as the model sees it."""

    key: str
    book_dir: Path
    book_id: str
    committed: list[Committed]
    """The lines written (or committed by the engine), in file order; the engine's list is the
    world's own, extended in place."""
    lines: dict[tuple[str, int], bytes]
    failure: Failure | None = None
    streams: int = 0
    open_stream: str | None = None
    seq: int = 0
    spent: int = 0
    units: int = 0


def quiet_write(book: Book, kinds: Sequence[str]) -> None:
    """Append a few valid lines to the quiet book: a new stream when none is open (a new run after
    a `finished`, a new attempt of the same run after `supersede`), then the lines of `kinds`."""
    written: list[bytes] = []

    def put(raw: bytes) -> None:
        assert book.open_stream is not None
        value = orjson.loads(raw)
        book.committed.append((book.open_stream, value["seq"], value["type"], value["data"]))
        book.lines[book.open_stream, value["seq"]] = raw
        written.append(raw)

    for kind in kinds:
        if book.open_stream is None or kind == "supersede":
            book.streams += 1
            book.open_stream = f"00000000-0000-4000-9000-{book.streams:012d}"
            book.seq = 1
            put(hello(book.open_stream, book=book.book_id))
            if kind == "supersede":
                continue
        book.seq += 1
        if kind == "spend":
            book.spent += 100 + book.seq
            put(spend(book.seq, book.spent))
        elif kind == "unit_done":
            put(unit_done(book.seq, f"quiet-{book.units:04d}", book.units))
            book.units += 1
        elif kind == "progress":
            put(progress(book.seq, draft=(min(book.units, 5), 5)))
        else:
            put(finished(book.seq, money=book.spent))
            book.open_stream = None
    with open(book.book_dir / "events.jsonl", "ab") as file:
        file.write(b"".join(written))


# --- the machine ------------------------------------------------------------------------------


class ProjectedSeamWorld(SeamWorld):
    """`SeamWorld` with the ledger and a randomly failing recording projection over two books."""

    ledger: Any = None
    """The example's module (`ledger_projection`), set by the test."""

    def __init__(self) -> None:
        super().__init__()
        quiet_dir = self.root / f"{self.book_id}-quiet"
        quiet_dir.mkdir()
        register_book(self.db, quiet_dir)
        self.books = {
            ENGINE: Book(ENGINE, self.book, self.book_id, self.committed, self.lines),
            QUIET: Book(QUIET, quiet_dir, quiet_dir.name, [], {}),
        }
        self.recording = FailingFor()
        self.projections = [self.ledger.LedgerProjection(), self.recording]
        self.names = [projection.name for projection in self.projections]
        install(self.db, self.projections)
        self.reader = psycopg.connect(self.dsn, autocommit=True)

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            self.reader.close()

    # -- the quiet book and the failing projection -----------------------------------------

    @rule(
        kinds=st.lists(
            st.sampled_from(["spend", "spend", "unit_done", "progress", "finished", "supersede"]),
            min_size=1,
            max_size=4,
        )
    )
    def quiet_writes(self, kinds: list[str]) -> None:
        """The quiet book gets a few lines: a stream begins, spends, ends or is superseded."""
        self._count("quiet_writes")
        quiet_write(self.books[QUIET], kinds)

    # -- the tailer --------------------------------------------------------------------------

    @rule(
        fault=st.sampled_from(
            [None, None, *sorted(COMMIT_FAULTS), "connection_killed_in_batch", "connection_killed"]
        ),
        batch_lines_max=st.integers(1, 8),
        nth=st.integers(1, 3),
        quiet_first=st.booleans(),
        failing=st.sampled_from([None, None, ENGINE, QUIET]),
    )
    def tail(
        self,
        fault: str | None,
        batch_lines_max: int,
        nth: int,
        quiet_first: bool,
        failing: str | None = None,
    ) -> None:
        """One pass over each book, in a drawn order, with a Postgres fault in the engine book's
        pass or none, and the recording projection failing in one book's pass or in none."""
        self._count("tail")
        self._passes(fault, batch_lines_max, nth, quiet_first, failing)

    def _passes(
        self,
        fault: str | None,
        batch_lines_max: int,
        nth: int,
        quiet_first: bool,
        failing: str | None,
    ) -> None:
        """A pass over each book (see `_pass`); when one stalls, the other went on: its pass
        applied all its lines (checked by `_pass`), or only the Postgres fault stopped it."""
        outcomes: dict[str, str] = {}
        for key in (QUIET, ENGINE) if quiet_first else (ENGINE, QUIET):
            outcomes[key] = self._pass(
                self.books[key],
                fault=fault if key == ENGINE else None,
                failing=failing == key,
                batch_lines_max=batch_lines_max,
                nth=nth,
            )
        stalled = [key for key, outcome in outcomes.items() if outcome == "stalled"]
        assert stalled in ([], [failing]), f"a pass stalled that was not to fail: {outcomes}"
        if stalled:
            other = QUIET if failing == ENGINE else ENGINE
            STATS["projections: passes stalled by a failing projection"] += 1
            STATS[f"projections: the other book, stalled beside: {outcomes[other]}"] += 1
            event(f"projection failed: {failing} book; the other {outcomes[other]}")

    @rule(
        book=st.sampled_from([ENGINE, QUIET]),
        quiet_kinds=st.lists(st.sampled_from(["spend", "unit_done", "finished"]), max_size=3),
        engine_kinds=st.lists(st.sampled_from(["spend", "unit_done", "progress"]), max_size=3),
        batch_lines_max=st.integers(1, 8),
        quiet_first=st.booleans(),
    )
    def projection_fails(
        self,
        book: str,
        quiet_kinds: list[str],
        engine_kinds: list[str],
        batch_lines_max: int,
        quiet_first: bool,
    ) -> None:
        """A pass over each book in which the recording projection raises for `book`'s events (a
        rule of its own, so that failures are as frequent as passes). First each book may get a
        few lines (the running engine, a checkpoint after a clean pass): else most failures would
        meet a new stream's hello, the engine's streams being short, and the other book would
        have nothing to apply."""
        self._count("projection_fails")
        if engine_kinds and self.world.running:
            # The engine's stream in Postgres first, then a checkpoint of it to fail on.
            self._passes(None, batch_lines_max, 1, quiet_first, None)
            self.commit(engine_kinds, None)
            for run_id, seq, raw in self.world.committed():
                self.lines.setdefault((run_id, seq), raw)  # as the world's invariant keeps them
        if quiet_kinds:
            quiet_write(self.books[QUIET], quiet_kinds)
        self._passes(None, batch_lines_max, 1, quiet_first, book)

    def _pass(
        self, book: Book, *, fault: str | None, failing: bool, batch_lines_max: int, nth: int
    ) -> str:
        """One pass over `book`, and how it ended: "stalled" (the projection failed it; it moved
        no cursor of the book, and the book shows the failure on the stream the model names),
        "applied lines" or "nothing to apply" (it applied every complete line), or "faulted" (the
        Postgres fault failed it)."""
        complete = (
            len(self.world.check_journal().keys) if book.key == ENGINE else len(book.committed)
        )
        changed_before = self._changed_at(book)
        before = self._cursors_of(book)
        pending, _ = applied_prefix(book.committed, before)
        hook = self._arm(fault, nth)
        self.recording.fail_books = {book.book_id} if failing else set()
        try:
            report = BookPass(
                self.db,
                book.book_id,
                mode="auto",
                batch_lines_max=batch_lines_max,
                commit_hook=hook,
                projections=self.projections,
            ).run()
        except ProjectionFailed as error:
            assert failing, f"a projection failed unasked: {error}"
            assert pending < complete, "the projection failed with nothing to apply"
            stream = book.committed[pending][0]
            assert (error.projection, error.engine_run_id) == (RECORDING, stream), error
            shown = self._shown()[book.book_id]
            check_stalled(before, cursors_of(shown), shown, stream)
            last_seq = max(seq for run_id, seq, _, _ in book.committed if run_id == stream)
            self._forget_cleared_failure(book, changed_before)
            if book.failure is not None and book.failure.stream == stream:
                book.failure.failures += 1
                book.failure.last_seq = last_seq  # the stream may have grown since
                STATS["projections: failures in a row on one stream"] += 1
            else:
                assert book.failure is None, "two streams of one book failed"
                book.failure = Failure(
                    stream, before.get(stream, 0), book.committed[pending][1], last_seq
                )
            STATS[f"projections: {book.key} book stalled"] += 1
            first = "its first batch" if stream not in before else "a stream in Postgres"
            STATS[f"projections: {book.key} book failed on {first}"] += 1
            event(f"projection failed on {first}")
            return "stalled"
        except DatabaseError as error:
            assert fault is not None, f"a pass without a fault failed: {error}"
            STATS[f"postgres faults: {fault}: pass failed ({type(error).__name__})"] += 1
            self.db.reconnect()
            self._forget_cleared_failure(book, changed_before)
            return "faulted"
        finally:
            self.recording.fail_books = set()
            self.faults.disarm()
        if fault is not None:
            STATS[f"postgres faults: {fault}"] += 1
        if failing:
            STATS["projections: failure asked for with nothing to apply"] += 1
        STATS["passes"] += 1
        STATS["lines applied"] += report.lines_applied
        STATS[f"projections: lines applied to the {book.key} book"] += report.lines_applied
        assert report.problems == [], report.problems
        # The pass ran to its end: every complete line is applied, a stall is over.
        applied, _ = applied_prefix(book.committed, self._cursors_of(book))
        assert applied == complete, f"the {book.key} book's pass left lines unapplied"
        if book.failure is not None:
            STATS["projections: failures cleared by the next pass"] += 1
        self._forget_cleared_failure(book, changed_before)
        assert book.failure is None, "a pass that applied everything left a failure standing"
        return "applied lines" if report.lines_applied else "nothing to apply"

    def _forget_cleared_failure(self, book: Book, changed_before: dict[str, Any]) -> None:
        """The model's side of the commit that next moves the failed stream's cursor: it clears
        the failure. A commit that touched the stream's attempt without moving it (its hint moved
        past repeated lines) leaves it standing, with its count."""
        failure = book.failure
        if failure is None:
            return
        if self._cursors_of(book).get(failure.stream, 0) > failure.cursor:
            book.failure = None
        elif self._changed_at(book).get(failure.stream) != changed_before.get(failure.stream):
            STATS["projections: failure kept through a commit that moved only a hint"] += 1

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def postgres_holds_a_prefix_applied_once(self) -> None:
        """The world's invariant for both books, projection failures judged by the model, and
        the projections' (one invariant: one `show --json` a step)."""
        shown = self._shown()
        applied: dict[str, list[Committed]] = {}
        for book in self.books.values():
            book_shown = shown[book.book_id]
            assert book_shown["error"] is None
            _, applied[book.book_id] = applied_prefix(book.committed, cursors_of(book_shown))
            assert runs_of(book_shown) == _without_errors(expected_runs(applied[book.book_id]))
            check_failure_shown(book_shown, book.failure)
            compacted = self.faults.compacted_ranges(book.book_id)
            assert self.faults.applied_hashes(book.book_id) == {
                (run_id, seq): sha256(book.lines[run_id, seq])
                for run_id, seq, *_ in applied[book.book_id]
                if seq > compacted.get(run_id, (0, b""))[0]
            }
        broken = self.ledger.check_ledger(self.reader)
        assert broken == [], broken
        check_ledger_against_model(self.reader, applied)
        check_ledger_per_run(self.reader, shown.values())
        check_recorded_against_model(self.reader, applied)
        check_projections_in_step(self.reader, list(applied), self.names)
        _, most = expected_postings(self.committed)
        assert host_spent(self.world.database) == most, "the host's ledger is not its spends"
        STATS["projections: invariant checks"] += 1

    # -- helpers -----------------------------------------------------------------------------

    def _shown(self) -> dict[str, dict[str, Any]]:
        """`show --json` of both books (the database holds earlier examples' books too)."""
        dirs = [str(book.book_dir) for book in self.books.values()]
        return {book["book_id"]: book for book in show_state(self.db, dirs)["books"]}

    def _changed_at(self, book: Book) -> dict[str, Any]:
        """When each attempt of the book was last written by a commit of a pass."""
        return dict(
            self.reader.execute(
                "SELECT engine_run_id, changed_at FROM attempts WHERE book_id = %s",
                (book.book_id,),
            ).fetchall()
        )

    def _cursors_of(self, book: Book) -> dict[str, int]:
        return dict(
            self.reader.execute(
                "SELECT engine_run_id, last_seq FROM attempts WHERE book_id = %s", (book.book_id,)
            ).fetchall()
        )

    def _settle(self) -> None:
        """At rest (the world's, and no projection failing): one clean pass over each book applies
        every committed line, clears every failure, and the ledger is the host's own."""
        self.world.disarm()
        self.world.disk_heals()
        self.faults.disarm()
        if self.world.running:
            self.world.exit()
        self.world.repair()
        self.world.check_journal(complete=True)
        for book in self.books.values():
            self._pass(book, fault=None, failing=False, batch_lines_max=1000, nth=1)
            heads: dict[str, int] = {}
            for run_id, seq, _, _ in book.committed:
                heads[run_id] = seq
            assert self._cursors_of(book) == heads, "a line never reached Postgres"
        self.postgres_holds_a_prefix_applied_once()
        total = self.reader.execute(
            "SELECT spent_micro_usd FROM ledger_books WHERE book_id = %s", (self.book_id,)
        ).fetchone()
        assert (0 if total is None else total[0]) == host_spent(self.world.database)
        STATS["settled at rest"] += 1


def _without_errors(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The model's runs without their attempts' `error` (never one in the model: what `show`
    prints there is `check_failure_shown`'s to judge)."""
    for run in runs:
        for attempt in run["attempts"]:
            assert attempt.pop("error") is None
    return runs


def _settings(**overrides: Any) -> settings:
    """The profile's examples at half its steps (the CI profile's 50 become 25): a step here
    passes two books with two projections and checks both, about twice a `SeamWorld` step."""
    steps = overrides.pop("stateful_step_count", settings.default.stateful_step_count // 2)
    return settings(settings.default, stateful_step_count=steps, **overrides)


def test_the_projections_follow_the_seam_exactly_once_and_a_failure_stalls_only_its_book(
    seam_dsn: str, ledger: ModuleType
) -> None:
    """Every fault of the seam, a second book, and a projection failing at random: the ledger is
    the engine's committed spend as far as it is applied, every applied line reaches each
    projection once, and a failure holds back only its own book until the next pass."""
    ProjectedSeamWorld.dsn = seam_dsn
    ProjectedSeamWorld.ledger = ledger
    run_state_machine_as_test(ProjectedSeamWorld, settings=_settings())


@pytest.mark.slow
def test_the_projections_follow_the_seam_long(seam_dsn: str, ledger: ModuleType) -> None:
    """The same machine over many more and longer examples (`--run-slow`)."""
    ProjectedSeamWorld.dsn = seam_dsn
    ProjectedSeamWorld.ledger = ledger
    run_state_machine_as_test(
        ProjectedSeamWorld,
        settings=_settings(
            max_examples=max(settings.default.max_examples, 500),
            stateful_step_count=max(settings.default.stateful_step_count, 80),
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


# --- the checks can fail ----------------------------------------------------------------------


class _ForgetfulLedger:
    """The example ledger with a bug: it forgets the book's high-water mark after each batch, so
    the next batch posts again the increase an earlier one posted."""

    def __init__(self, ledger: ModuleType) -> None:
        self.inner = ledger.LedgerProjection()
        self.name, self.version = self.inner.name, self.inner.version

    def setup(self, session: ProjectionSession) -> None:
        self.inner.setup(session)

    def apply(self, session: ProjectionSession, events: Sequence[Event]) -> None:
        self.inner.apply(session, events)
        session.execute("DELETE FROM ledger_books WHERE book_id = %s", (events[0].book_id,))


class _SkippingRecording(Recording):
    """`Recording` with a bug: it drops the `unit_done` events."""

    def apply(self, session: ProjectionSession, events: Sequence[Event]) -> None:
        kept = [each for each in events if each.type != "unit_done"]
        if kept:
            super().apply(session, kept)


class _DoublingRecording(Recording):
    """`Recording` with a bug: it records each batch's events twice."""

    def apply(self, session: ProjectionSession, events: Sequence[Event]) -> None:
        super().apply(session, events)
        super().apply(session, events)


def _applied_lines(book_dir: Path) -> list[Committed]:
    """The journal's lines as the model holds them (every line applied: no fault here)."""
    lines: list[Committed] = []
    stream = ""
    for raw in (book_dir / "events.jsonl").read_bytes().splitlines():
        value = orjson.loads(raw)
        if value["type"] == "hello":
            stream = value["data"]["engine_run_id"]
        lines.append((stream, value["seq"], value["type"], value["data"]))
    return lines


def _two_passes(dsn: str, book_dir: Path, projections: Sequence[Any]) -> list[Committed]:
    """Two passes with `projections` over a book that spends across two batches and two runs."""
    book_id = book_dir.name
    book_dir.mkdir()
    db = Database(dsn)
    try:
        write(book_dir, hello(RUN_A, book=book_id), spend(2, 100), unit_done(3, "u-1", 0))
        sweep_book(db, book_dir, mode="auto", projections=projections)
        append(book_dir, spend(4, 250), finished(5, money=250), hello(RUN_B, book=book_id))
        append(book_dir, spend(2, 400), unit_done(3, "u-2", 1))
        sweep_book(db, book_dir, mode="auto", projections=projections)
    finally:
        db.close()
    return _applied_lines(book_dir)


@pytest.mark.parametrize("broken", [False, True])
def test_the_ledger_check_fails_on_a_ledger_that_posts_an_increase_twice(
    seam_dsn: str, ledger: ModuleType, tmp_path: Path, broken: bool
) -> None:
    """The model's ledger check passes on the example's ledger, and fails on one that posts an
    increase a second time (as the example's own `check_ledger` does: the book's sum is off)."""
    book_dir = tmp_path / "book-ledger"
    projection = _ForgetfulLedger(ledger) if broken else ledger.LedgerProjection()
    applied = _two_passes(seam_dsn, book_dir, [projection, Recording()])
    with psycopg.connect(seam_dsn, autocommit=True) as connection:
        if broken:
            with pytest.raises(AssertionError, match="ledger postings"):
                check_ledger_against_model(connection, {book_dir.name: applied})
            assert ledger.check_ledger(connection) != []
        else:
            check_ledger_against_model(connection, {book_dir.name: applied})
            assert ledger.check_ledger(connection) == []
        check_recorded_against_model(connection, {book_dir.name: applied})


@pytest.mark.parametrize("broken", [False, True])
def test_the_recording_check_fails_on_a_projection_that_skips_an_event(
    seam_dsn: str, ledger: ModuleType, tmp_path: Path, broken: bool
) -> None:
    """The exactly-once check passes on `Recording`, and fails on one that skips events: against
    the model's applied lines and against Postgres's own."""
    book_dir = tmp_path / "book-recording"
    projection = _SkippingRecording() if broken else Recording()
    applied = _two_passes(seam_dsn, book_dir, [ledger.LedgerProjection(), projection])
    with psycopg.connect(seam_dsn, autocommit=True) as connection:
        if broken:
            with pytest.raises(AssertionError, match="recorded events are not the applied lines"):
                check_recorded_against_model(connection, {book_dir.name: applied})
            kept = [line for line in applied if line[2] != "unit_done"]
            with pytest.raises(AssertionError, match="not Postgres's applied lines"):
                check_recorded_against_model(connection, {book_dir.name: kept})
        else:
            check_recorded_against_model(connection, {book_dir.name: applied})
        check_ledger_against_model(connection, {book_dir.name: applied})
        check_projections_in_step(connection, [book_dir.name], ["spend_ledger", RECORDING])


def test_an_event_recorded_twice_fails_the_pass_and_shows(
    seam_dsn: str, ledger: ModuleType, tmp_path: Path
) -> None:
    """A doubled delivery cannot pass unnoticed in the simulation: `recorded_events`'s key refuses
    it, the pass fails with `projection_failed` on the stream, and nothing of the batch stays."""
    book_dir = tmp_path / "book-doubling"
    book_dir.mkdir()
    write(book_dir, hello(RUN_A, book=book_dir.name), spend(2, 100))
    db = Database(seam_dsn)
    try:
        with pytest.raises(ProjectionFailed, match="UniqueViolation"):
            sweep_book(
                db,
                book_dir,
                mode="auto",
                projections=[ledger.LedgerProjection(), _DoublingRecording()],
            )
        (shown,) = show_state(db, [str(book_dir)])["books"]
    finally:
        db.close()
    assert shown["runs"] == []
    assert [problem["kind"] for problem in shown["problems"]] == ["projection_failed"]
    assert "UniqueViolation" in shown["problems"][0]["detail"]
    with psycopg.connect(seam_dsn, autocommit=True) as connection:
        check_recorded_against_model(connection, {book_dir.name: []})
        check_ledger_against_model(connection, {book_dir.name: []})


def test_a_failure_is_cleared_only_when_its_stream_moves(seam_dsn: str, tmp_path: Path) -> None:
    """Regression: the commit that next moves the attempt clears the failure, and `failures`
    counts them in a row (docs/how-to/write-a-projection.md). Here the second failing pass first
    commits a batch holding only a repeat of an applied line (the stream's hint moves, its cursor
    stays at 2): the failure used to be cleared by it, its count and `since` starting over."""
    book_dir = tmp_path / "book-1"
    book_dir.mkdir()
    db = Database(seam_dsn)
    try:
        write(book_dir, hello(RUN_A), spend(2, 10))
        sweep_book(db, book_dir, mode="auto", projections=[Recording()])
        append(book_dir, spend(2, 10), spend(3, 20))  # a repeat of seq 2, then a new line
        shown = []
        for batch_lines_max in (8, 1):
            with pytest.raises(ProjectionFailed):
                sweep_book(
                    db,
                    book_dir,
                    mode="auto",
                    batch_lines_max=batch_lines_max,
                    projections=[FailingFor(["book-1"])],
                )
            (run,) = show_state(db, [str(book_dir)])["books"][0]["runs"]
            shown.append(run["attempts"][0])
    finally:
        db.close()
    assert [attempt["last_seq"] for attempt in shown] == [2, 2]
    assert [attempt["error"]["failures"] for attempt in shown] == [1, 2]
    assert shown[1]["error"]["since"] == shown[0]["error"]["since"]


def test_the_stall_check_fails_when_the_pass_went_on(seam_dsn: str, tmp_path: Path) -> None:
    """The stall checks pass after a failed pass, and fail after one that applied its lines (a
    projection that did not fail): the cursor moved, and no failure is shown."""
    book_dir = tmp_path / "book-stall"
    book_dir.mkdir()
    db = Database(seam_dsn)
    try:
        write(book_dir, hello(RUN_A, book=book_dir.name), spend(2, 100))
        sweep_book(db, book_dir, mode="auto", projections=[Recording()])
        append(book_dir, spend(3, 200))
        before = {RUN_A: 2}
        with pytest.raises(ProjectionFailed):
            sweep_book(db, book_dir, mode="auto", projections=[FailingFor([book_dir.name])])
        (shown,) = show_state(db, [str(book_dir)])["books"]
        check_stalled(before, cursors_of(shown), shown, RUN_A)
        check_failure_shown(shown, Failure(RUN_A, cursor=2, first_seq=3, last_seq=3))
        with pytest.raises(AssertionError, match="failures"):
            check_failure_shown(
                shown, Failure(RUN_A, cursor=2, first_seq=3, last_seq=3, failures=2)
            )
        sweep_book(db, book_dir, mode="auto", projections=[FailingFor()])
        (shown,) = show_state(db, [str(book_dir)])["books"]
        with pytest.raises(AssertionError, match="a failed pass moved cursors"):
            check_stalled(before, cursors_of(shown), shown, RUN_A)
        with pytest.raises(AssertionError, match="expected one projection failure"):
            check_failure_shown(shown, Failure(RUN_A, cursor=2, first_seq=3, last_seq=3))
        check_failure_shown(shown, None)
    finally:
        db.close()

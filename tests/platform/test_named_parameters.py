"""The statements that write a view take named parameters, built where they run from typed
values: each builder gives exactly the names its statement uses, for any view, and the positional
tuples that crossed from the decisions into the writer are gone."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from platform_ingest.decisions import runs, views
from platform_ingest.decisions.runs import RunView
from platform_ingest.decisions.views import AttemptView, BookView, CursorAdvance, ProblemRecord
from platform_ingest.ingest.apply import (
    advance_params,
    columns,
    problem_params,
    run_params,
    scan_params,
)
from platform_ingest.journal.hint import Hint
from platform_ingest.store import statements
from platform_ingest.store.statement import Statement

NAMED = re.compile(r"%\((\w+)\)[sbt]")
POSITIONAL = re.compile(r"%[sbt]")

VIEW_STATEMENTS = (
    statements.ATTEMPT_ADVANCE,
    statements.ATTEMPTS_ADVANCE,
    statements.BOOK_SCAN_ADVANCE,
    statements.BOOKS_SCAN_ADVANCE,
    statements.RUN_UPDATE,
    statements.RUNS_UPDATE,
    statements.ATTEMPT_QUARANTINE,
    statements.STREAM_STARTS_INSERT,
    statements.BOOK_SCAN_BACK,
    statements.PROJECTION_TRACKING_WRITE,
)


def _names(statement: Statement) -> set[str]:
    return set(NAMED.findall(statement.text))


def test_the_statements_that_write_a_view_name_every_parameter() -> None:
    """No placeholder of these statements is positional: a value is bound by its column's name."""
    for statement in VIEW_STATEMENTS:
        assert _names(statement), statement.name
        assert POSITIONAL.findall(NAMED.sub("", statement.text)) == [], statement.name


def test_the_positional_shapes_are_gone() -> None:
    """What built a statement's tuple in the decisions is no longer there to call."""
    assert not hasattr(views, "NO_PROBLEM_PARAMS")
    assert not hasattr(ProblemRecord, "as_params")
    assert not hasattr(BookView, "scan_params")
    assert not hasattr(RunView, "update_params")
    assert not hasattr(runs, "update_params")


_text = st.none() | st.text(max_size=8)
_count = st.none() | st.integers(min_value=0, max_value=2**63 - 1)
_problems = st.none() | st.builds(
    ProblemRecord,
    st.sampled_from(
        ["gap", "payload_conflict", "malformed", "database_refused", "journal_missing"]
    ),
    _count,
    _count,
    st.text(max_size=20),
)
_hints = st.builds(
    Hint,
    st.integers(min_value=0, max_value=2**40),
    st.integers(min_value=0, max_value=2**20),
    st.none() | st.binary(min_size=32, max_size=32),
    _text,
)


@st.composite
def _attempts(draw: st.DrawFn) -> AttemptView:
    attempt = AttemptView(
        engine_run_id=draw(st.text(min_size=1, max_size=8)),
        run=RunView(book_id="book-x", run_id=draw(_count)),
        attempt_id=draw(_count),
        state=draw(st.sampled_from(views.ATTEMPT_STATES)),
        last_seq=draw(st.integers(min_value=0, max_value=2**40)),
        sealed_last_seq=draw(st.integers(min_value=0, max_value=2**40)),
        last_line_sha256=draw(st.none() | st.binary(min_size=32, max_size=32)),
        hint_offset=draw(st.integers(min_value=0, max_value=2**40)),
        hint_line_bytes=draw(st.integers(min_value=0, max_value=2**20)),
        hint_file=draw(_text),
        stream_index=draw(st.none() | st.integers(min_value=0, max_value=2**31 - 1)),
        stream_version=draw(_text),
        chunker_version=draw(_text),
        error=draw(_problems),
        last_line_time=draw(_text),
        applied_in_batch=draw(st.booleans()),
    )
    return attempt


@given(_attempts())
def test_an_attempts_advance_binds_its_sealed_values_by_name(attempt: AttemptView) -> None:
    """The builder gives exactly the names of the book's and the group's statement, each bound
    to the value sealed; sealing moves the attempt's expected seq on to its cursor."""
    expected_seq, applied = attempt.sealed_last_seq, attempt.applied_in_batch
    advance = attempt.seal()
    params = advance_params(advance)
    assert set(params) == _names(statements.ATTEMPT_ADVANCE)
    assert set(params) == _names(statements.ATTEMPTS_ADVANCE)
    assert params["attempt_id"] == attempt.attempt_id
    assert (params["last_seq"], params["expected_seq"]) == (attempt.last_seq, expected_seq)
    assert params["applied"] is applied
    assert params["hint_offset"] == attempt.hint_offset
    assert params["error_kind"] == (None if attempt.error is None else attempt.error.kind)
    assert advance.moved == (attempt.last_seq > expected_seq)
    assert (attempt.sealed_last_seq, attempt.applied_in_batch) == (attempt.last_seq, False)
    assert isinstance(advance, CursorAdvance)


@given(_hints, _text, st.sampled_from([None, "auto", "named"]), _problems, st.booleans())
def test_a_books_scan_binds_its_sealed_values_by_name(
    scan: Hint, stream: str | None, mode: Any, problem: ProblemRecord | None, from_zero: bool
) -> None:
    book = BookView("book-x", "/b/book-x", scan, stream, mode, 7, problem)
    book.starts_from_zero = from_zero
    params = scan_params(book.seal_scan())
    assert set(params) == _names(statements.BOOK_SCAN_ADVANCE)
    assert set(params) == _names(statements.BOOKS_SCAN_ADVANCE)
    assert (params["book_id"], params["scan_epoch"]) == ("book-x", 7)
    assert (params["scan_offset"], params["scan_sha256"]) == (scan.offset, scan.sha256)
    assert params["starts_from_zero"] is from_zero
    assert params["error_detail"] == (None if problem is None else problem.detail)


@given(
    st.builds(
        RunView,
        book_id=st.just("book-x"),
        run_id=_count,
        committed_micro_usd=st.integers(min_value=0, max_value=2**63 - 1),
        shortfall_micro_usd=_count,
    )
)
def test_a_run_binds_its_values_by_name(run: RunView) -> None:
    params = run_params(run)
    assert set(params) == _names(statements.RUN_UPDATE) == _names(statements.RUNS_UPDATE)
    assert (params["run_id"], params["committed_micro_usd"]) == (
        run.run_id,
        run.committed_micro_usd,
    )


@given(_problems)
def test_a_problem_binds_the_four_columns_a_quarantine_names(
    problem: ProblemRecord | None,
) -> None:
    params = {**problem_params(problem), "attempt_id": 1, "state": "active"}
    assert set(params) == _names(statements.ATTEMPT_QUARANTINE)


@given(st.lists(_attempts(), min_size=1, max_size=5))
def test_a_groups_columns_keep_each_rows_values_in_order(attempts: list[AttemptView]) -> None:
    """A group's statement takes the same names, each a column of its rows' values in order."""
    rows = [advance_params(attempt.seal()) for attempt in attempts]
    gathered = columns(rows)
    assert set(gathered) == _names(statements.ATTEMPTS_ADVANCE)
    for key, values in gathered.items():
        assert values == [row[key] for row in rows]

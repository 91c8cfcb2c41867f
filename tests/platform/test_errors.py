"""The errors are built whole and never changed once made; the hierarchy says what found them.

A later step that learns more about a failure (the offset of a line the decoder refused, the
events a projection failed on, the line a refusal of Postgres belongs to) makes a new error of
the same class; the one it caught stays as it was, since a log, a test or a report may hold it.

What the rules, the replay of a compacted range and the scrub find is no error: a record
(`decisions.problems`), built where it is found, whose kind, seq, offset and detail are what
Postgres keeps and `show` prints.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine_events import grammar
from platform_ingest import errors
from platform_ingest.decisions import problems
from platform_ingest.decisions.problems import ProblemRecord
from platform_ingest.decisions.views import state_for_problem
from platform_ingest.errors import (
    DataRefused,
    LineRefused,
    ProjectionFailed,
    ProjectionStatementRefused,
)

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "src" / "platform_ingest", ROOT / "src" / "engine_events"]

H = "ab" * 32
SAMPLES: dict[type[LineRefused], LineRefused] = {
    errors.LineRefused: errors.LineRefused("a problem", seq=3),
    errors.MalformedLine: errors.MalformedLine.wrong_type("seq", "an integer >= 1", seq=3),
    errors.UnsupportedVersion: errors.UnsupportedVersion(
        "2.0", engine_run_id="r-1", book_id="b", seq=1
    ),
}
"""One of each refusal the decoder raises (the problems found from a line's own bytes): the
grammar's, and the platform's `UnsupportedVersion`."""

H2 = H[::-1]
RECORDS: dict[str, tuple[ProblemRecord, tuple[str, int | None, int | None, str]]] = {
    "sequence_gap": (
        problems.sequence_gap(expected_seq=4, seq=6, offset=40),
        ("gap", 6, 40, "expected seq 4, found seq 6"),
    ),
    "payload_conflict": (
        problems.payload_conflict(seq=3, offset=40, applied_sha256=H, line_sha256=H2),
        (
            "payload_conflict",
            3,
            40,
            f"seq 3 was applied with sha256 {H}; this line has sha256 {H2}",
        ),
    ),
    "compacted_conflict": (
        problems.compacted_conflict(last_seq=8, offset=40, applied_sha256=H, read_sha256=H2),
        (
            "payload_conflict",
            8,
            40,
            f"seqs 1..8 were compacted to the digest {H}; the lines read again hash to {H2} (a "
            "line of them changed; which one is no longer known)",
        ),
    ),
    "compacted_range_broken": (
        problems.compacted_range_broken(last_seq=8, missing_seq=5, offset=40, applied_sha256=H),
        (
            "payload_conflict",
            8,
            40,
            f"seqs 1..8 were compacted to the digest {H}; the journal no longer holds seq 5 of them "
            "as it was applied (found at byte 40; a line of them changed or was cut away)",
        ),
    ),
    "applied_line_missing": (
        problems.applied_line_missing(seq=5, applied_sha256=H, read_to=400),
        (
            "payload_conflict",
            5,
            None,
            f"seq 5 was applied with sha256 {H}; the journal holds no line of seq 5 with those "
            "bytes before byte 400 (it changed, or was cut away)",
        ),
    ),
    "book_mismatch": (
        problems.book_mismatch(offset=0),
        (
            "book_mismatch",
            1,
            0,
            "the hello's book_id is not the book this directory is registered for",
        ),
    ),
    "foreign_stream_ahead": (
        problems.foreign_stream_ahead(offset=0, engine_run_id="r-2"),
        (
            "foreign_stream_ahead",
            1,
            0,
            "stream r-2 is not named for this book; waiting for it to be named",
        ),
    ),
    "line_before_hello": (
        problems.line_before_hello(seq=3, offset=0, refused=None),
        ("malformed", 3, 0, "a line before any hello"),
    ),
    "line_outside_stream": (
        problems.line_outside_stream(seq=None, offset=90, refused="not JSON"),
        ("malformed", None, 90, "a line after a finished stream: not JSON"),
    ),
    "line_after_finished": (
        problems.line_after_finished(seq=9, finished_seq=8, offset=40),
        ("malformed", 9, 40, "seq 9 comes after the stream's finished (seq 8)"),
    ),
}
"""One of each problem the rules, the replay and the scrub find, with what Postgres keeps of it
and `show` prints (kind, seq, offset, detail), to the byte."""
OUT_OF_PLACE = ("line_before_hello", "line_outside_stream", "line_after_finished")
REMOVED = (
    "LineOutOfPlace",
    "LineBeforeHello",
    "LineOutsideStream",
    "LineAfterFinished",
    "PayloadConflict",
    "CompactedConflict",
    "CompactedRangeBroken",
    "AppliedLineMissing",
    "SequenceGap",
    "BookMismatch",
    "ForeignStreamAhead",
)
"""The exceptions these problems once were, made only to be stored."""


def _subclasses(root: type[LineRefused]) -> Iterator[type[LineRefused]]:
    yield root
    for child in root.__subclasses__():
        yield from _subclasses(child)


def _refusals() -> set[type[LineRefused]]:
    """The refusals of a line the platform may raise: the grammar's and its own."""
    modules = {errors.__name__, LineRefused.__module__}
    return {kind for kind in _subclasses(LineRefused) if kind.__module__ in modules}


def test_every_stream_problem_has_a_sample_here() -> None:
    """A new problem class is held by the tests below too: it needs a sample in `SAMPLES`."""
    found = _refusals() - {grammar.UnsupportedVersion}  # the platform's names the stream
    assert found == set(SAMPLES)


@pytest.mark.parametrize("kind", sorted(SAMPLES, key=lambda kind: kind.__name__))
def test_a_problem_found_at_an_offset_is_a_new_error(kind: type[LineRefused]) -> None:
    """`at(offset)` gives an error of the same class, message, fields and cause, at `offset`;
    the error it was made from is unchanged."""
    original = SAMPLES[kind]
    cause = ValueError("the decoder's own")
    original.__cause__ = cause
    before = dict(vars(original))
    found = original.at(1234)
    assert type(found) is kind
    assert found is not original
    assert str(found) == str(original)
    assert found.args == original.args
    assert found.offset == 1234
    assert {**vars(found), "offset": before["offset"]} == before
    assert found.__cause__ is cause
    assert vars(original) == before


@pytest.mark.parametrize(
    "kind", [k for k in sorted(SAMPLES, key=lambda k: k.__name__) if issubclass(k, LineRefused)]
)
def test_a_refusal_of_a_readable_hello_names_its_stream_in_a_new_error(
    kind: type[LineRefused],
) -> None:
    """`of_hello` gives an error of the same class and message naming the stream the line
    starts; the refusal it was made from names none."""
    original = SAMPLES[kind]
    assert isinstance(original, LineRefused)
    before = dict(vars(original))
    named = original.of_hello("r-2", "1.4")
    assert type(named) is kind
    assert (named.engine_run_id, named.stream_version, str(named)) == ("r-2", "1.4", str(original))
    assert vars(original) == before


def test_a_refusal_of_postgres_that_belongs_to_one_line_is_a_new_error() -> None:
    refused = DataRefused("Postgres cannot store a value of this book", sqlstate="22021")
    named = refused.of_line(("r-1", 4, 120))
    assert type(named) is DataRefused
    assert (named.evidence, named.sqlstate, str(named)) == (("r-1", 4, 120), "22021", str(refused))
    assert refused.evidence is None


@pytest.mark.parametrize(
    "failure",
    [
        ProjectionFailed("ledger", "ValueError: no"),
        ProjectionStatementRefused("ledger", "it wrote to the platform's table 'runs'"),
    ],
)
def test_a_projection_failure_known_to_be_on_some_events_is_a_new_error(
    failure: ProjectionFailed,
) -> None:
    placed = failure.of_events(attempt_id=7, engine_run_id="r-1", seq=12)
    assert type(placed) is type(failure)
    assert (placed.attempt_id, placed.engine_run_id, placed.seq) == (7, "r-1", 12)
    assert (placed.projection, placed.detail, str(placed)) == (
        failure.projection,
        failure.detail,
        str(failure),
    )
    assert (failure.attempt_id, failure.engine_run_id, failure.seq) == (None, None, None)


@pytest.mark.parametrize("builder", OUT_OF_PLACE)
def test_a_line_out_of_place_is_not_a_line_refused(builder: str) -> None:
    """A line before any hello, after a finished stream, or a new seq after its finished is
    found by the rules from the line's place, never by the decoder: a record, not a refusal,
    shown and stopped as a malformed line is."""
    record, _ = RECORDS[builder]
    assert type(record) is ProblemRecord
    assert not isinstance(record, LineRefused)
    assert record.kind == "malformed"
    assert state_for_problem(record.kind) == "quarantined"


# -- the problems found from a line's place or the cursor: records, never raised ----------------


def _builders() -> set[str]:
    """The functions of `decisions.problems` that build a problem's record."""
    return {
        name
        for name, function in inspect.getmembers(problems, inspect.isfunction)
        if function.__module__ == problems.__name__
        and inspect.signature(function).return_annotation == "ProblemRecord"
    }


def test_every_problem_builder_has_a_sample_here() -> None:
    """A new kind of problem is held by the tests below too: it needs a sample in `RECORDS`."""
    assert _builders() == set(RECORDS)


@pytest.mark.parametrize("builder", sorted(RECORDS))
def test_a_problem_keeps_the_kind_seq_offset_and_detail_shown(builder: str) -> None:
    """What Postgres stores and `show` prints of each problem, to the byte."""
    record, stored = RECORDS[builder]
    assert dataclasses.astuple(record) == stored
    kind, seq, offset, detail = stored
    assert record.as_json() == {"kind": kind, "seq": seq, "offset": offset, "detail": detail}
    row = {"error_kind": kind, "error_seq": seq, "error_offset": offset, "error_detail": detail}
    assert ProblemRecord.from_row(row) == record


@pytest.mark.parametrize("builder", sorted(RECORDS))
def test_a_problem_is_never_changed_once_made(builder: str) -> None:
    record, stored = RECORDS[builder]
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.detail = "changed"  # type: ignore[misc]
    assert dataclasses.astuple(record) == stored


def test_only_what_the_decoder_refuses_is_an_exception() -> None:
    """Every problem the platform raises for a line is a refusal of the decoder (a
    `LineRefused`), caught by the reader of the line; what is found from a line's place or from
    the cursor is a record. The exceptions those problems once were are gone, and so is the class
    they had in common."""
    assert errors.UnsupportedVersion in _refusals()
    assert not hasattr(errors, "StreamProblem")
    assert [name for name in REMOVED if hasattr(errors, name)] == []


def test_a_refused_line_becomes_the_record_of_its_problem() -> None:
    refused = errors.MalformedLine.wrong_type("seq", "an integer >= 1", seq=3).at(40)
    assert dataclasses.astuple(ProblemRecord.of(refused)) == (
        "malformed",
        3,
        40,
        "seq must be an integer >= 1",
    )


_hash = st.text("0123456789abcdef", min_size=64, max_size=64)


@given(st.integers(1, 2**62), st.integers(0, 2**62), _hash, _hash, st.integers(0, 2**62))
def test_only_a_problem_of_a_whole_compacted_range_names_it(
    last_seq: int, offset: int, applied: str, read: str, other_seq: int
) -> None:
    """`skip` passes one line: a problem of a compacted range (which line of it changed is no
    longer known) names the range, so that no skip is offered for it; a conflict of one line,
    even at the range's last seq, names none."""
    whole = [
        problems.compacted_conflict(
            last_seq=last_seq, offset=offset, applied_sha256=applied, read_sha256=read
        ),
        problems.compacted_range_broken(
            last_seq=last_seq, missing_seq=1, offset=offset, applied_sha256=applied
        ),
    ]
    one_line = [
        problems.payload_conflict(
            seq=last_seq, offset=offset, applied_sha256=applied, line_sha256=read
        ),
        problems.applied_line_missing(seq=last_seq, applied_sha256=applied, read_to=offset),
    ]
    for record in whole:
        assert record.names_compacted_range(last_seq)
        assert not record.names_compacted_range(0)
        if other_seq != last_seq:
            assert not record.names_compacted_range(other_seq)
    for record in one_line:
        assert not record.names_compacted_range(last_seq)


# -- the rule held over the code --------------------------------------------------------------


def mutated_exceptions(source: str) -> list[tuple[int, str]]:
    """(line, name) of every assignment to an attribute of a name bound by `except ... as`,
    inside that handler: an error changed after it was made."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ExceptHandler) or node.name is None:
            continue
        for inner in ast.walk(node):
            targets: list[ast.expr] = []
            if isinstance(inner, ast.Assign):
                targets = list(inner.targets)
            elif isinstance(inner, (ast.AugAssign, ast.AnnAssign)):
                targets = [inner.target]
            for target in targets:
                for part in ast.walk(target):
                    if (
                        isinstance(part, ast.Attribute)
                        and isinstance(part.value, ast.Name)
                        and part.value.id == node.name
                    ):
                        found.append((part.lineno, node.name))
    return found


def test_the_check_finds_a_changed_error() -> None:
    planted = (
        "try:\n    f()\nexcept ValueError as error:\n    error.offset = 3\n"
        "    error.a, error.b = 1, 2\n    raise\n"
    )
    assert mutated_exceptions(planted) == [(4, "error"), (5, "error"), (5, "error")]
    assert (
        mutated_exceptions("try:\n    f()\nexcept ValueError as error:\n    x.offset = 3\n") == []
    )


@pytest.mark.parametrize("path", sorted(p for root in SOURCES for p in root.rglob("*.py")))
def test_no_caught_error_is_changed(path: Path) -> None:
    where = [f"{path.relative_to(ROOT)}:{line}" for line, _ in mutated_exceptions(path.read_text())]
    assert where == [], "make a new error instead (`errors._with`)"


def test_the_platform_refuses_a_version_as_the_engine_does() -> None:
    """One `except engine_events.errors.UnsupportedVersion` catches either side's refusal."""
    from engine_events import errors as engine_errors

    refused = errors.UnsupportedVersion("2.0", engine_run_id="r-1", book_id="b-1")
    assert isinstance(refused, engine_errors.UnsupportedVersion)
    assert isinstance(refused, errors.LineRefused)
    assert isinstance(refused, errors.IngestError)
    assert refused.kind == "unsupported_version"

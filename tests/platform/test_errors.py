"""The errors are built whole and never changed once made; the hierarchy says what found them.

A later step that learns more about a failure (the offset of a line the decoder refused, the
events a projection failed on, the line a refusal of Postgres belongs to) makes a new error of
the same class; the one it caught stays as it was, since a log, a test or a report may hold it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from platform_ingest import errors
from platform_ingest.decisions.views import state_for_problem
from platform_ingest.errors import (
    DataRefused,
    LineAfterFinished,
    LineBeforeHello,
    LineOutOfPlace,
    LineOutsideStream,
    LineRefused,
    ProjectionFailed,
    ProjectionStatementRefused,
    StreamProblem,
)

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "src" / "platform_ingest", ROOT / "src" / "engine_events"]

H = "ab" * 32
SAMPLES: dict[type[StreamProblem], StreamProblem] = {
    errors.StreamProblem: errors.StreamProblem("a problem", seq=3),
    errors.UnsupportedVersion: errors.UnsupportedVersion(
        "2.0", engine_run_id="r-1", book_id="b", seq=1
    ),
    errors.LineOutOfPlace: errors.LineOutOfPlace("out of place", seq=3),
    errors.LineBeforeHello: errors.LineBeforeHello("a line before any hello", seq=3),
    errors.LineOutsideStream: errors.LineOutsideStream("after a finished stream"),
    errors.LineAfterFinished: errors.LineAfterFinished(seq=9, finished_seq=8, offset=40),
    errors.PayloadConflict: errors.PayloadConflict(
        seq=3, offset=40, applied_sha256=H, line_sha256=H[::-1]
    ),
    errors.CompactedConflict: errors.CompactedConflict(
        last_seq=8, offset=40, applied_sha256=H, read_sha256=H[::-1]
    ),
    errors.CompactedRangeBroken: errors.CompactedRangeBroken(
        last_seq=8, missing_seq=5, offset=40, applied_sha256=H
    ),
    errors.AppliedLineMissing: errors.AppliedLineMissing(seq=5, applied_sha256=H, read_to=400),
    errors.SequenceGap: errors.SequenceGap(expected_seq=4, seq=6, offset=40),
    errors.BookMismatch: errors.BookMismatch(offset=0),
    errors.ForeignStreamAhead: errors.ForeignStreamAhead(offset=0, engine_run_id="r-2"),
}


def _subclasses(root: type[StreamProblem]) -> Iterator[type[StreamProblem]]:
    yield root
    for child in root.__subclasses__():
        yield from _subclasses(child)


def test_every_stream_problem_has_a_sample_here() -> None:
    """A new problem class is held by the tests below too: it needs a sample in `SAMPLES`."""
    found = {kind for kind in _subclasses(StreamProblem) if kind.__module__ == errors.__name__}
    assert found == set(SAMPLES)


@pytest.mark.parametrize("kind", sorted(SAMPLES, key=lambda kind: kind.__name__))
def test_a_problem_found_at_an_offset_is_a_new_error(kind: type[StreamProblem]) -> None:
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
    kind: type[StreamProblem],
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


@pytest.mark.parametrize("kind", [LineBeforeHello, LineOutsideStream, LineAfterFinished])
def test_a_line_out_of_place_is_not_a_line_refused(kind: type[StreamProblem]) -> None:
    """A line before any hello, after a finished stream, or a new seq after its finished is
    found by the rules from the line's place, never by the decoder: its own branch, shown and
    stopped as a malformed line is."""
    assert issubclass(kind, LineOutOfPlace)
    assert not issubclass(kind, LineRefused)
    assert kind.kind == "malformed"
    assert state_for_problem(kind.kind) == "quarantined"


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

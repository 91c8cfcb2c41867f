"""A pass's batches are bounded by bytes as well as by lines: a batch is sealed when it holds
`batch_bytes_max` bytes of lines or `batch_lines_max` lines, whichever comes first, and every line
is still applied exactly once. A line longer than the byte bound makes a batch of its own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from platform_ingest import Database
from platform_ingest.ingest import apply as _apply
from platform_ingest.ingest.apply import SealedBatch
from platform_ingest.ingest.book_pass import BookPass
from platform_ingest.ingest.books import register_book
from platform_ingest.journal.decode import LINE_BYTES_MAX
from platform_journals import hello, line, only_run, progress, spend, sweep, unit_done, write

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]


@pytest.fixture
def committed(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The seqs of the lines each committed batch applied, in commit order."""
    batches: list[list[int]] = []
    commit = _apply.commit_sealed

    def recording(db: Database, book_id: str, sealed: SealedBatch, *args: object) -> None:
        commit(db, book_id, sealed, *args)  # type: ignore[arg-type]
        batches.append(list(sealed.hash_seqs))

    monkeypatch.setattr(_apply, "commit_sealed", recording)
    return batches


def _mixed_lines(count: int) -> list[bytes]:
    """hello, then spend / unit_done / progress in turn: lines of different lengths."""
    lines = [hello()]
    for seq in range(2, count + 1):
        if seq % 3 == 0:
            lines.append(spend(seq, 1000 * seq))
        elif seq % 3 == 1:
            lines.append(unit_done(seq, f"unit-{seq:05d}", seq))
        else:
            phases = {f"phase-{index}": (seq, 10 * seq) for index in range(seq % 7)}
            lines.append(progress(seq, **phases))
    return lines


def _hashes(sql: psycopg.Connection[tuple[object, ...]]) -> tuple[object, ...]:
    row = sql.execute("SELECT count(*), count(DISTINCT seq), max(seq) FROM line_hashes").fetchone()
    assert row is not None
    return row


def test_a_tiny_byte_bound_commits_many_batches_and_applies_every_line_once(
    db: Database,
    make_book: MakeBook,
    sql: psycopg.Connection[tuple[object, ...]],
    committed: list[list[int]],
) -> None:
    """With a byte bound of a few lines (and a line bound far away) each batch is sealed by the
    line that reaches the bytes, never later; all lines are applied, each once."""
    book = make_book("book-1")
    lines = _mixed_lines(200)
    write(book, *lines)
    size = {seq: len(each) for seq, each in enumerate(lines, start=1)}
    bound = 400
    report = sweep(db, book, batch_lines_max=100_000, batch_bytes_max=bound)
    assert report.lines_applied == len(lines)
    applied = [seq for batch in committed for seq in batch]
    assert applied == list(range(1, len(lines) + 1))
    with_lines = [batch for batch in committed if batch]
    assert len(with_lines) >= sum(size.values()) // (bound + max(size.values()))
    for batch in with_lines[:-1]:
        held = sum(size[seq] for seq in batch)
        assert held >= bound, "sealed before the bound"
        assert held - size[batch[-1]] < bound, "sealed after the bound"
    assert _hashes(sql) == (len(lines), len(lines), len(lines))
    row = sql.execute("SELECT count(*), count(DISTINCT unit) FROM run_units").fetchone()
    units = sum(1 for seq in range(2, len(lines) + 1) if seq % 3 == 1)
    assert row == (units, units)
    last_spend = max(seq for seq in range(2, len(lines) + 1) if seq % 3 == 0)
    assert only_run(db, book)["committed_micro_usd"] == 1000 * last_spend

    # A second pass from byte 0 (a new file, the same bytes) finds every line a duplicate.
    committed.clear()
    write(book, *lines)
    again = sweep(db, book, batch_lines_max=100_000, batch_bytes_max=bound)
    assert (again.lines_applied, again.duplicates) == (0, len(lines))
    assert _hashes(sql) == (len(lines), len(lines), len(lines))


def test_the_line_bound_still_seals_short_lines(
    db: Database, make_book: MakeBook, committed: list[list[int]]
) -> None:
    """Whichever bound comes first: with a byte bound far away, the line bound seals."""
    book = make_book("book-1")
    lines = _mixed_lines(50)
    write(book, *lines)
    report = sweep(db, book, batch_lines_max=7, batch_bytes_max=10 * 1024 * 1024)
    assert report.lines_applied == len(lines)
    assert [len(batch) for batch in committed if batch] == [7] * 7 + [1]


def test_a_batch_of_one_huge_line_commits(
    db: Database,
    make_book: MakeBook,
    sql: psycopg.Connection[tuple[object, ...]],
    committed: list[list[int]],
) -> None:
    """Lines of about 1 MiB (a progress of many phases, a line of a type without an effect
    padded to exactly the line limit), each larger than the byte bound: each is a batch of its
    own, committed; the lines around them are applied as well."""
    book = make_book("book-1")
    phases = {f"phase-{index:06d}": (index, index + 1) for index in range(24_000)}
    huge_progress = progress(3, **phases)
    base = line(5, "x", {"pad": ""})
    huge_other = base.replace(b'"pad":""', b'"pad":"' + b"y" * (LINE_BYTES_MAX - len(base)) + b'"')
    assert 900 * 1024 < len(huge_progress) <= LINE_BYTES_MAX
    assert len(huge_other) == LINE_BYTES_MAX
    write(book, hello(), spend(2, 1000), huge_progress, spend(4, 2000), huge_other, spend(6, 3000))
    report = sweep(db, book, batch_bytes_max=64 * 1024)
    assert report.lines_applied == 6
    assert report.problems == []
    assert [batch for batch in committed if batch] == [[1, 2, 3], [4, 5], [6]]
    assert _hashes(sql) == (6, 6, 6)
    run = only_run(db, book)
    assert run["committed_micro_usd"] == 3000
    assert len(run["progress"]) == len(phases)


def test_huge_lines_under_the_default_bounds(
    db: Database,
    make_book: MakeBook,
    sql: psycopg.Connection[tuple[object, ...]],
    committed: list[list[int]],
) -> None:
    """With the default bounds, lines of 1 MiB make batches of a few lines, not thousands."""
    book = make_book("book-1")
    base = line(2, "x", {"pad": ""})
    pad = b"y" * (LINE_BYTES_MAX - len(base))
    count = 2 * _apply.BATCH_BYTES_MAX // LINE_BYTES_MAX + 3
    huge = [
        line(seq, "x", {"pad": ""}).replace(b'"pad":""', b'"pad":"' + pad[: -len(str(seq))] + b'"')
        for seq in range(2, count + 2)
    ]
    write(book, hello(), *huge)
    report = sweep(db, book)
    assert report.lines_applied == count + 1
    per_batch = _apply.BATCH_BYTES_MAX // LINE_BYTES_MAX
    assert max(len(batch) for batch in committed) <= per_batch + 1
    assert len([batch for batch in committed if batch]) >= 3
    assert _hashes(sql) == (count + 1, count + 1, count + 1)


@pytest.mark.parametrize("option", ["batch_lines_max", "batch_bytes_max"])
def test_a_bound_below_one_is_refused(db: Database, make_book: MakeBook, option: str) -> None:
    book = register_book(db, make_book("book-1"))
    with pytest.raises(ValueError, match=f"{option} must be at least 1"):
        BookPass(db, book.book_id, **{option: 0})  # type: ignore[arg-type]

"""The engine side's bounded line reader (`_lines.LineReader`), shared by `verify` and `watch`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_events.readers import lines as _lines
from engine_events.readers.lines import LineReader, RawLine


def reference(data: bytes, limit: int) -> tuple[list[RawLine], int]:
    """Every complete line of `data` (over `limit`: a marker), and where the unread tail starts."""
    lines = []
    offset = 0
    while (newline := data.find(b"\n", offset)) >= 0:
        raw = data[offset : newline + 1]
        lines.append(RawLine(offset, len(raw), None if len(raw) > limit else raw))
        offset = newline + 1
    return lines, offset


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 3 bytes and a line limit of 8: every boundary case in a few bytes."""
    monkeypatch.setattr(_lines, "CHUNK_BYTES", 3)
    monkeypatch.setattr(_lines, "LINE_LIMIT_BYTES", 8)


@given(
    data=st.lists(st.sampled_from([b"a", b"\n", b"bcd", b"x" * 9]), max_size=30).map(b"".join),
    budgets=st.lists(st.one_of(st.none(), st.integers(1, 12)), min_size=1, max_size=8),
)
@settings(max_examples=300, deadline=None)
def test_lines_match_a_plain_split_whatever_the_reads(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, budgets: list[int | None]
) -> None:
    """Read in any number of calls of any budget, the lines are those of a plain split."""
    _lines.CHUNK_BYTES, _lines.LINE_LIMIT_BYTES = 3, 8
    try:
        path = tmp_path_factory.mktemp("lines") / "events.jsonl"
        path.write_bytes(data)
        expected, tail_start = reference(data, 8)
        reader = LineReader()
        got: list[RawLine] = []
        fd = os.open(path, os.O_RDONLY)
        try:
            for budget in budgets:
                got.extend(reader.read(fd, bytes_max=budget))
            got.extend(reader.read(fd))  # then to the end
        finally:
            os.close(fd)
        assert got == expected
        assert reader.offset == tail_start
        assert reader.seen_to == len(data)
    finally:
        _lines.CHUNK_BYTES, _lines.LINE_LIMIT_BYTES = 256 * 1024, _lines.LINE_BYTES_MAX + 1


def test_an_unterminated_tail_is_read_again_once_it_is_whole(tmp_path: Path, small: None) -> None:
    """The tail is never consumed: the next read returns the line once its newline is there."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"ab\ncd")
    reader = LineReader()
    fd = os.open(path, os.O_RDONLY)
    try:
        assert list(reader.read(fd)) == [RawLine(0, 3, b"ab\n")]
        assert (reader.offset, reader.tail_bytes) == (3, 2)
        with open(path, "ab") as file:
            file.write(b"e\n")
        assert list(reader.read(fd)) == [RawLine(3, 4, b"cde\n")]
        assert reader.tail_bytes == 0
    finally:
        os.close(fd)


def test_an_over_long_line_is_a_marker_across_reads(tmp_path: Path, small: None) -> None:
    """A line over the limit is skipped while it grows, then yielded once as a marker."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"x" * 20)
    reader = LineReader(offset=0)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert list(reader.read(fd)) == []
        assert reader.skipping
        assert reader.tail_bytes == 20
        with open(path, "ab") as file:
            file.write(b"y\nok\n")
        assert list(reader.read(fd)) == [RawLine(0, 22, None), RawLine(22, 3, b"ok\n")]
        assert not reader.skipping
    finally:
        os.close(fd)

"""Which stream a journal line belongs to is answered once (`journal.sections`), for the pass's
rules, `rebuild`, `skip`, the scrub and lag: a line belongs to the stream of the latest hello
above it that names its stream (decoded, or refused but readable), and is read as that stream's
line (a newer minor's envelope key after `data`)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from engine_events.grammar import LINE_BYTES_MAX, MalformedLine
from platform_ingest.journal.reader import complete_lines
from platform_ingest.journal.sections import SectionLine, line_at, section_lines
from platform_journals import RUN_A, RUN_B, RUN_C, T, hello, line, spend

RUNS = (RUN_A, RUN_B, RUN_C)
VERSIONS = {RUN_A: "1.3", RUN_B: "1.9", RUN_C: "1.3"}
"""Each stream's version: RUN_B's is a minor newer than this reader knows."""


def _hello_not_first(run: str) -> bytes:
    data = {"stream_version": VERSIONS[run], "engine_run_id": run, "book_id": "book-1"}
    return line(2, "hello", {**data, "chunker_version": "c1"})


def _envelope_key(seq: int) -> bytes:
    """A line of a newer minor: a key after `data` in its envelope."""
    value = {"seq": seq, "type": "spend", "time": T, "data": {"committed_micro_usd": 5}, "x": 1}
    return (json.dumps(value, separators=(",", ":")) + "\n").encode()


HELLOS = {
    "decoded": lambda run: hello(run, version=VERSIONS[run]),
    "another major": lambda run: hello(run, version="2.0"),
    "not seq 1": _hello_not_first,
}
"""Hellos that name their stream: decoded, or refused with their stream id readable."""
BODY = {
    "spend": lambda seq: spend(seq, 10 * seq),
    "not JSON": lambda seq: b"not json\n",
    "envelope key": _envelope_key,
    "too long": lambda seq: b"x" * (LINE_BYTES_MAX + 1) + b"\n",
}


@dataclass(frozen=True, repr=False)
class Journal:
    data: bytes
    owners: list[tuple[int, str | None, str]]
    """(offset, the stream the line belongs to, what the line is) of each line."""

    def __repr__(self) -> str:  # an over-long line would make a megabyte of it
        return f"Journal({self.owners!r})"

    def lines(self, start: int = 0) -> list[SectionLine]:
        read = complete_lines(lambda size, at: self.data[at : at + size], start)
        return list(section_lines(read, version_of=lambda run: VERSIONS.get(run or "")))


@st.composite
def journals(draw: st.DrawFn) -> Journal:
    """Lines of no stream, then parts of streams (a stream may come back), each from a hello
    that names it."""
    data, owners = b"", []
    parts = [(None, None)] + [
        (draw(st.sampled_from(RUNS)), draw(st.sampled_from(sorted(HELLOS))))
        for _ in range(draw(st.integers(0, 4)))
    ]
    for run, how in parts:
        if run is not None and how is not None:
            owners.append((len(data), run, f"hello {how}"))
            data += HELLOS[how](run)
        for seq in range(2, 2 + draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(sorted(BODY)))
            owners.append((len(data), run, kind))
            data += BODY[kind](seq)
    return Journal(data, owners)


@given(journals())
def test_each_line_belongs_to_the_stream_of_the_latest_hello_that_names_one(
    journal: Journal,
) -> None:
    found = journal.lines()
    assert [(each.offset, each.stream) for each in found] == [
        (offset, run) for offset, run, _ in journal.owners
    ]


@given(journals())
def test_a_line_is_read_as_a_line_of_its_stream(journal: Journal) -> None:
    """A key after `data` is read in a stream of a newer minor, refused in any other."""
    for each, (_, run, kind) in zip(journal.lines(), journal.owners, strict=True):
        if kind == "envelope key":
            assert (each.line is not None) == (run == RUN_B), (run, each.refused)
        if kind in ("spend", "hello decoded"):
            assert each.line is not None
        if kind in ("not JSON", "hello another major", "hello not seq 1"):
            assert each.refused is not None
        if kind == "too long":  # refused by the reader, or by the decoder when read whole
            assert isinstance(each.refused, MalformedLine)
            assert each.refused.reason == "line_too_long"
            assert each.seq is None


@given(journals(), st.data())
def test_reading_from_a_part_of_a_stream_gives_its_lines_to_it(
    journal: Journal, data: st.DataObject
) -> None:
    """A reading that begins inside a stream's part of the file (a pass resumed from its hint)
    gives every line from there the stream it gives them read from byte 0."""
    whole = journal.lines()
    if not whole:
        return
    at = data.draw(st.integers(0, len(whole) - 1))
    before = None if at == 0 else whole[at - 1].stream
    read = complete_lines(lambda size, o: journal.data[o : o + size], whole[at].offset)
    resumed = section_lines(read, stream=before, version_of=lambda run: VERSIONS.get(run or ""))
    assert [(e.offset, e.stream, e.seq) for e in resumed] == [
        (e.offset, e.stream, e.seq) for e in whole[at:]
    ]


@given(journals())
def test_the_line_at_an_offset_is_the_line_read_there(journal: Journal) -> None:
    """`line_at` (what `skip` checks and lag reads a waiting stream's hello from) reads the line
    that starts there as the walk over the whole file does."""
    for each in journal.lines():
        read = complete_lines(lambda size, o: journal.data[o : o + size], each.offset)
        version = None if each.stream is None else VERSIONS[each.stream]
        alone = line_at(read, each.offset, stream_version=version)
        assert alone is not None
        assert (alone.seq, alone.size, alone.sha256, alone.line) == (
            each.seq,
            each.size,
            each.sha256,
            each.line,
        )
        assert type(alone.refused) is type(each.refused)


def test_no_line_starts_inside_a_line_or_past_the_end() -> None:
    data = hello(RUN_A) + spend(2, 5)
    for offset in (1, len(data) - 1, len(data)):
        read = complete_lines(lambda size, o: data[o : o + size], offset)
        assert line_at(read, offset + 1) is None
    unterminated = b"x" * (LINE_BYTES_MAX + 10)
    read = complete_lines(lambda size, o: unterminated[o : o + size], 0)
    assert line_at(read, 0) is None

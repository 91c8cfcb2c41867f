"""Which stream a journal line belongs to, and how it is read there.

A book's journal holds its streams one after the other, each from its hello. A line belongs to the
stream of the latest hello above it that names its stream: a hello that decodes, or one the
decoder refuses whose `engine_run_id` can still be read (docs/reference/stream-format.md, "A hello
that starts its stream"). A line before any hello belongs to none. A line is read as a line of its
stream: one of a minor newer than this reader knows may carry envelope keys after `data`.

The pass's rules, `rebuild`, `skip`, the scrub and lag all ask these questions here, so that each
gives a line to the same stream and reads it alike. Nothing here opens a file: the lines come
from a `Journal` (or `complete_lines`) the caller holds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from engine_events.grammar import MalformedLine

from ..errors import LineRefused
from .decode import decode_line, decode_stream_line
from .line import Line

Lines = Iterable[tuple[int, bytes | MalformedLine]]
"""A journal's lines as the reader yields them: (offset, bytes with the newline, or the refusal
of a line over the bound)."""


def read_line(raw: bytes, stream_version: Callable[[], str | None]) -> Line:
    """`raw` decoded as a line of the stream it lies in, or a `LineRefused` raised.

    `stream_version` gives that stream's version (None: not known); it is asked only for a line
    whose envelope has keys past `data`, which a newer minor may add. A hello names its own."""
    try:
        return decode_line(raw)
    except MalformedLine as refused:
        if refused.reason != "wrong_keys":
            raise
        return decode_stream_line(raw, stream_version())


def stream_started(judged: Line | LineRefused) -> str | None:
    """The stream a line starts: the `engine_run_id` of a hello, decoded or refused but readable
    (`LineRefused.engine_run_id`); None for any other line."""
    if isinstance(judged, LineRefused):
        return judged.engine_run_id
    if judged.type == "hello":
        started: str = judged.data["engine_run_id"]
        return started
    return None


@dataclass(frozen=True, slots=True)
class SectionLine:
    """A complete line of a journal, read as a line of the stream it belongs to."""

    offset: int
    raw: bytes | MalformedLine
    """Its bytes with the newline; a `MalformedLine` for a line over the bound (never gathered)."""
    line: Line | None
    """The line decoded; None when it was refused (`refused`)."""
    refused: LineRefused | None
    stream: str | None
    """The stream it belongs to (a hello: the one it starts); None before any hello."""

    @property
    def seq(self) -> int | None:
        """Its seq, when one can be read."""
        if self.line is not None:
            return self.line.seq
        return None if self.refused is None else self.refused.seq

    @property
    def size(self) -> int:
        raw = self.raw
        return raw.size_bytes if isinstance(raw, MalformedLine) else len(raw)

    @property
    def sha256(self) -> bytes | None:
        """The sha256 of its bytes (None: a line over the bound with no newline yet)."""
        raw = self.raw
        return raw.line_sha256 if isinstance(raw, MalformedLine) else hashlib.sha256(raw).digest()


def _read(
    offset: int,
    raw: bytes | MalformedLine,
    stream: str | None,
    version_of: Callable[[str | None], str | None],
) -> SectionLine:
    """The line at `offset`, which lies in `stream`'s part of the file unless it starts one."""
    if isinstance(raw, MalformedLine):
        return SectionLine(offset, raw, None, raw, stream)
    try:
        line = read_line(raw, lambda: version_of(stream))
    except LineRefused as refused:
        started = stream_started(refused)
        return SectionLine(offset, raw, None, refused, stream if started is None else started)
    started = stream_started(line)
    return SectionLine(offset, raw, line, None, stream if started is None else started)


def section_lines(
    lines: Lines,
    *,
    stream: str | None = None,
    version_of: Callable[[str | None], str | None] = lambda stream: None,
) -> Iterator[SectionLine]:
    """Each line of `lines` with the stream it belongs to, read as that stream's line.

    `stream` is the stream whose part of the file the first line lies in (None: before any
    hello, or not known); `version_of` gives a stream's version (None: not known)."""
    for offset, raw in lines:
        found = _read(offset, raw, stream, version_of)
        stream = found.stream
        yield found


def line_at(lines: Lines, offset: int, *, stream_version: str | None = None) -> SectionLine | None:
    """The complete line that starts at `offset`, `lines` read from there, as a line of a stream
    of `stream_version`; None when no complete line starts there (the file ends before its
    newline, or `offset` is not where a line starts). Its `stream` is the one it starts, if any."""
    for start, raw in lines:
        found = _read(start, raw, None, lambda _: stream_version)
        return found if start == offset and found.sha256 is not None else None
    return None

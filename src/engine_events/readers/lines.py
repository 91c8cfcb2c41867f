"""The engine side's one reader of journal lines, in bounded memory (`verify` and `watch`).

`LineReader` reads a file from an offset, in chunks of `CHUNK_BYTES`, and yields its complete
lines in order, each with the byte offset where it starts:

- a line is complete when its `\\n` has been read; the newline is part of its bytes;
- a line longer than `LINE_LIMIT_BYTES` (a stream line's `LINE_BYTES_MAX` plus one byte, so that a
  reader can tell "exactly at the limit" from "over it") is never gathered: it is yielded once its
  newline is found, as a marker (`raw` None) with its size;
- an unterminated tail is never consumed: `offset` stays at its start, so the next `read` reads it
  again once it has grown (a live writer), and `tail_bytes` says how much of it was seen.

At most one line of `LINE_LIMIT_BYTES` and one chunk are held at once, whatever the file's size.
The reader keeps its place between calls, so a journal that grows is followed without rereading
(`watch`), and one call can read a file to its end (`verify`). Opening the file is the caller's:
both commands go through `regular_file.open_regular`. The platform has its own reader, by design.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NamedTuple

from .._line import LINE_BYTES_MAX

CHUNK_BYTES = 256 * 1024
"""The most read from the file at once."""
LINE_LIMIT_BYTES = LINE_BYTES_MAX + 1
"""The longest line yielded with its bytes; a longer one is yielded as a marker."""


class RawLine(NamedTuple):
    """One complete line of the file as read."""

    offset: int
    """Byte offset where the line starts."""
    size_bytes: int
    """Its length, newline included."""
    raw: bytes | None
    """Its bytes (newline included); None for a line over `LINE_LIMIT_BYTES` (never kept)."""


class LineReader:
    """The complete lines of one file from `offset` on, read in bounded memory (see the module)."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset
        """Where the next unconsumed line starts."""
        self._seen_to = offset
        self._skipping = False

    @property
    def skipping(self) -> bool:
        """True while inside an over-long line whose newline has not been read yet."""
        return self._skipping

    @property
    def seen_to(self) -> int:
        """The end of the bytes read so far: `offset` plus `tail_bytes`."""
        return max(self._seen_to, self.offset)

    @property
    def tail_bytes(self) -> int:
        """Bytes read after `offset` that end no line yet: an unterminated tail, or the part of an
        over-long line read so far."""
        return self.seen_to - self.offset

    def read(self, fd: int, *, bytes_max: int | None = None) -> Iterator[RawLine]:
        """Yield the complete lines readable now from `fd` (read with `pread`: its position is
        untouched), stopping at the end of the file or once about `bytes_max` bytes were read.

        Raises `OSError` when the file cannot be read. `offset` is past each line when it is
        yielded, so a caller may stop early and read on later.
        """
        position = self.seen_to if self._skipping else self.offset
        self._seen_to = position
        pieces: list[bytes] = []  # the start of the next line (never over `LINE_LIMIT_BYTES`)
        pending = 0
        budget = bytes_max
        while budget is None or budget > 0:
            size = CHUNK_BYTES if budget is None else min(CHUNK_BYTES, budget)
            data = os.pread(fd, size, position)
            if not data:
                break
            position += len(data)
            self._seen_to = position
            if budget is not None:
                budget -= len(data)
            start = 0
            if self._skipping:
                newline = data.find(b"\n")
                if newline < 0:
                    continue
                end = position - len(data) + newline + 1
                line = RawLine(self.offset, end - self.offset, None)
                self.offset = end
                self._skipping = False
                start = newline + 1
                yield line
            while (newline := data.find(b"\n", start)) >= 0:
                size_bytes = pending + newline + 1 - start
                if size_bytes > LINE_LIMIT_BYTES:
                    line = RawLine(self.offset, size_bytes, None)
                elif pieces:
                    pieces.append(data[start : newline + 1])
                    line = RawLine(self.offset, size_bytes, b"".join(pieces))
                else:
                    line = RawLine(self.offset, size_bytes, data[start : newline + 1])
                pieces.clear()
                pending = 0
                self.offset += size_bytes
                start = newline + 1
                yield line
            rest = len(data) - start
            if pending + rest >= LINE_LIMIT_BYTES:  # no newline within a line's limit
                pieces.clear()
                pending = 0
                self._skipping = True
            elif rest:
                pieces.append(data[start:] if start else data)
                pending += rest

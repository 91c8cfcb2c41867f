"""Reading `<book>/events.jsonl`: complete lines only, in bounded memory, and hints verified.

The reader never holds more than `LINE_BYTES_MAX + READ_CHUNK_BYTES` bytes of the file: a line
that grows past the limit without a newline is skipped to its end and reported as `LineTooLong`
(its bytes are never gathered). An unterminated last line is left for a later pass: it may be an
append in progress, and the engine cuts a torn one back when it next starts.

A `Hint` is a byte offset just past a line, with that line's length and sha256 and the identity of
the file it was taken in. It is only a place to start reading: `verify_hint` checks that the bytes
just before it are still that line, and a hint that fails is thrown away by the caller, who then
reads from byte 0 (the cursor in Postgres decides what is applied, never the hint).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ._decode import LINE_BYTES_MAX
from .errors import LineTooLong

READ_CHUNK_BYTES = 256 * 1024
"""How much one read() asks for."""

JOURNAL_NAME = "events.jsonl"


@dataclass(frozen=True, slots=True)
class Hint:
    """Where a pass may start: just past a line of `line_bytes` bytes hashing to `sha256`."""

    offset: int
    line_bytes: int
    sha256: bytes | None
    file: str | None

    NONE: ClassVar[Hint]
    """No hint: read from byte 0."""

    @classmethod
    def start(cls) -> Hint:
        return cls.NONE


Hint.NONE = Hint(0, 0, None, None)


def file_identity(stat: os.stat_result) -> str:
    """The identity a hint is bound to: a replaced file (new inode) invalidates every hint."""
    return f"{stat.st_dev}:{stat.st_ino}"


class Journal:
    """One open journal file. Reads go through `os.pread` on one descriptor, so the identity
    checked at open is the identity of every byte read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        stat = os.fstat(self._fd)
        self.identity = file_identity(stat)
        self.bytes_read = 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def _pread(self, length: int, offset: int) -> bytes:
        data = os.pread(self._fd, length, offset)
        self.bytes_read += len(data)
        return data

    def verify_hint(self, hint: Hint) -> bool:
        """True when the bytes just before `hint.offset` are still the line the hint names."""
        if hint.offset == 0:
            return True
        if hint.file != self.identity or hint.sha256 is None or hint.line_bytes <= 0:
            return False
        line_start = hint.offset - hint.line_bytes
        if line_start < 0 or hint.offset > self.size():
            return False
        before = 1 if line_start > 0 else 0
        data = self._pread(hint.line_bytes + before, line_start - before)
        if len(data) != hint.line_bytes + before or not data.endswith(b"\n"):
            return False
        if before and data[0:1] != b"\n":
            return False
        return hashlib.sha256(data[before:]).digest() == hint.sha256

    def lines(self, start: int) -> Iterator[tuple[int, bytes | LineTooLong]]:
        """Yield (offset, line bytes with their newline) for each complete line from `start`.

        A line longer than `LINE_BYTES_MAX` is yielded as a `LineTooLong` at its offset instead:
        hashed while it is skipped, never gathered. One that has no newline yet is yielded with
        `terminated=False` at the end (it is malformed whatever comes, but not consumed).
        """
        read_at = start
        buffer = b""
        buffer_offset = start  # file offset of buffer[0]
        skipping_from = -1  # offset of an over-long line being skipped, or -1
        skipped_bytes = 0
        skipped_hash = hashlib.sha256()
        while True:
            chunk = self._pread(READ_CHUNK_BYTES, read_at)
            if not chunk:
                break
            read_at += len(chunk)
            if skipping_from >= 0:
                newline = chunk.find(b"\n")
                if newline < 0:
                    skipped_bytes += len(chunk)
                    skipped_hash.update(chunk)
                    continue
                skipped_hash.update(chunk[: newline + 1])
                yield (
                    skipping_from,
                    LineTooLong(
                        skipped_bytes + newline + 1,
                        LINE_BYTES_MAX,
                        offset=skipping_from,
                        line_sha256=skipped_hash.digest(),
                    ),
                )
                buffer = chunk[newline + 1 :]
                buffer_offset = read_at - len(buffer)
                skipping_from = -1
            else:
                buffer = buffer + chunk if buffer else chunk
            position = 0
            while True:
                newline = buffer.find(b"\n", position)
                if newline < 0:
                    break
                yield buffer_offset + position, buffer[position : newline + 1]
                position = newline + 1
            if position:
                buffer = buffer[position:]
                buffer_offset += position
            if len(buffer) >= LINE_BYTES_MAX:
                skipping_from = buffer_offset
                skipped_bytes = len(buffer)
                skipped_hash = hashlib.sha256(buffer)
                buffer = b""
        if skipping_from >= 0:
            yield (
                skipping_from,
                LineTooLong(skipped_bytes, LINE_BYTES_MAX, offset=skipping_from, terminated=False),
            )

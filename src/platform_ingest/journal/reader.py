"""Reading `<book>/events.jsonl`: complete lines only, in bounded memory, and hints verified.

The reader never holds more than `LINE_BYTES_MAX + READ_CHUNK_BYTES` bytes of the file (and, while
they are cut into lines, those lines: twice that at most): a line that grows past the limit
without a newline is skipped to its end and reported as a `MalformedLine` (`line_too_long`: its bytes are never
gathered). An unterminated last line is left for a later pass: it may be an append in progress,
and the engine cuts a torn one back when it next starts.

A `Hint` (`hint`) is a byte offset just past a line, with that line's length and sha256 and the identity of
the file it was taken in. It is only a place to start reading: `verify_hint` checks that the bytes
just before it are still that line, and a hint that fails is thrown away by the caller, who then
reads from byte 0 (the cursor in Postgres decides what is applied, never the hint).

Opening (`open_journal`) never blocks and never leaves the book directory: the directory is
opened without following a symlink and must still be the real path it was registered at (a
directory swapped for a symlink after registration is refused, `JournalOutsideRoots`); the journal
is opened relative to that directory's descriptor with `O_NOFOLLOW | O_NONBLOCK`, and it must be a
regular file (`JournalNotRegular`: a FIFO, socket, device, directory or symlink). A FIFO opened
non-blocking returns at once, and nothing is read from it: `fstat` is checked first.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from errno import ELOOP as errno_ELOOP
from errno import ENOTDIR as errno_ENOTDIR
from errno import ENXIO as errno_ENXIO
from itertools import accumulate
from pathlib import Path

from engine_events.grammar import LINE_BYTES_MAX, MalformedLine

from ..errors import (
    JournalMissing,
    JournalNotRegular,
    JournalOutsideRoots,
    JournalUnreadable,
)
from .hint import Hint

READ_CHUNK_BYTES = 256 * 1024
"""How much one read() asks for."""
READ_PAST_SIZE_BYTES = 64 * 1024
"""How much a read asks for past the size the file had when it was opened (lines appended
since). A read is given a buffer of the length it asks for, whatever comes back, and a buffer of
128 KiB or more is a mapping of its own for the allocator (about 17 µs on the machine measured):
more than reading a book's one line of news. So a read asks for no more than the file held, and
this much past it, which stays under that threshold; a file that grew reads on in reads of this
size."""

JOURNAL_NAME = "events.jsonl"


def file_identity(stat: os.stat_result) -> str:
    """The identity a hint is bound to: a replaced file (new inode) invalidates every hint."""
    return f"{stat.st_dev}:{stat.st_ino}"


_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_DIRECTORY


def _file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _opened_path(fd: int) -> str | None:
    """The path the kernel holds for an open descriptor (Linux); None where it cannot tell."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def open_journal(book_dir: str) -> Journal | None:
    """Open `<book_dir>/events.jsonl` for a pass; None when there is no journal yet.

    `book_dir` is the book's registered real path. Raises `JournalOutsideRoots` when that
    directory is no longer what was registered (swapped for a symlink, moved), `JournalMissing`
    when the directory is gone, `JournalNotRegular` when the journal is not a regular file,
    `JournalUnreadable` for any other failure to open it.
    """
    try:
        dir_fd = os.open(book_dir, _DIRECTORY_FLAGS)
    except FileNotFoundError as error:
        raise JournalMissing(f"the book directory is gone: {error.strerror}") from error
    except OSError as error:
        if error.errno in (errno_ELOOP, errno_ENOTDIR):
            raise JournalOutsideRoots(
                "the book directory was replaced by a symbolic link or a file after it was "
                "registered"
            ) from error
        raise JournalUnreadable(f"the book directory cannot be opened: {error.strerror}") from error
    try:
        held = _opened_path(dir_fd)
        if held is not None and held != book_dir:
            raise JournalOutsideRoots(
                "the book directory no longer is the directory registered for it (a parent was "
                "swapped or moved)"
            )
        try:
            # Looked at before it is opened: opening a device can have effects of its own.
            found = os.stat(JOURNAL_NAME, dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISREG(found.st_mode):
                raise JournalNotRegular(f"the journal is {_file_kind(found.st_mode)}")
            fd = os.open(JOURNAL_NAME, _OPEN_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except JournalUnreadable:
            raise  # an OSError too: already the typed refusal
        except OSError as error:
            if error.errno == errno_ELOOP:
                raise JournalNotRegular("the journal is a symbolic link") from error
            if error.errno == errno_ENXIO:  # a socket, or a FIFO/device with no peer
                raise JournalNotRegular("the journal is not a regular file") from error
            raise JournalUnreadable(f"the journal cannot be opened: {error.strerror}") from error
    finally:
        os.close(dir_fd)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise JournalNotRegular(f"the journal is {_file_kind(status.st_mode)}")
    except BaseException:
        os.close(fd)
        raise
    return Journal(fd, status)


class Journal:
    """One open journal file. Reads go through `os.pread` on one descriptor, so the identity
    checked at open is the identity of every byte read."""

    def __init__(self, source: Path | int, status: os.stat_result | None = None) -> None:
        if isinstance(source, int):
            self._fd = source
        else:
            self._fd = os.open(source, _OPEN_FLAGS)
            status = os.fstat(self._fd)
            if not stat.S_ISREG(status.st_mode):
                os.close(self._fd)
                raise JournalNotRegular(f"the journal is {_file_kind(status.st_mode)}")
        assert status is not None
        self.identity = file_identity(status)
        self.size_at_open = status.st_size
        """The file's size when it was opened (its `fstat`, already made): news past it are read
        all the same, up to the end as it is when they are read."""
        self.bytes_read = 0
        self._ahead_at = -1
        self._ahead = b""
        """Bytes read past a verified hint with its line (`verify_hint(read_ahead=True)`), served
        to the read at `_ahead_at` that follows instead of a second `pread`."""
        self._ahead_ends_file = False
        """The read ahead came back short: it reached the end of the file, so the one read that
        follows its bytes answers "nothing more" without a `pread`, as if made with it. Only that
        one: a journal read again later (a rebuild's) sees what was appended since."""

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
        if offset == self._ahead_at:
            data, rest = self._ahead[:length], self._ahead[length:]
            if rest or (data and self._ahead_ends_file):
                self._ahead_at, self._ahead = offset + len(data), rest
            else:
                self._ahead_at, self._ahead = -1, b""
            return data
        data = os.pread(self._fd, self._asked(length, offset), offset)
        self.bytes_read += len(data)
        return data

    def _asked(self, length: int, offset: int) -> int:
        """What a read of `length` at `offset` asks for (`READ_PAST_SIZE_BYTES`)."""
        return min(length, max(self.size_at_open - offset, 0) + READ_PAST_SIZE_BYTES)

    def verify_hint(self, hint: Hint, *, read_ahead: bool = False) -> bool:
        """True when the bytes just before `hint.offset` are still the line the hint names.

        With `read_ahead`, the same read takes the bytes past the hint too (up to a chunk), kept
        for `lines(hint.offset)`: a book with a line of news costs one read, not three (the size,
        the hint's line, the news)."""
        if hint.offset == 0:
            return True
        if hint.file != self.identity or hint.sha256 is None or hint.line_bytes <= 0:
            return False
        line_start = hint.offset - hint.line_bytes
        if line_start < 0:
            return False
        before = 1 if line_start > 0 else 0
        length = hint.line_bytes + before
        # A file shorter than the hint reads short: the length compared below refuses it.
        wanted = self._asked(length + (READ_CHUNK_BYTES if read_ahead else 0), line_start - before)
        data = self._pread(wanted, line_start - before)
        if read_ahead and len(data) > length:
            self._ahead_at, self._ahead = hint.offset, data[length:]
            self._ahead_ends_file = len(data) < wanted
            data = data[:length]
        if len(data) != length or not data.endswith(b"\n"):
            return False
        if before and data[0:1] != b"\n":
            return False
        return hashlib.sha256(data[before:]).digest() == hint.sha256

    def lines(self, start: int) -> Iterator[tuple[int, bytes | MalformedLine]]:
        """The file's complete lines from `start` (`complete_lines`)."""
        return complete_lines(self._pread, start)


def complete_lines(
    read: Callable[[int, int], bytes], start: int
) -> Iterator[tuple[int, bytes | MalformedLine]]:
    """Yield (offset, line bytes with their newline) for each complete line from `start`, where
    `read(length, offset)` returns up to `length` bytes at `offset` (b"" at the end).

    A line longer than `LINE_BYTES_MAX` is yielded as a `MalformedLine` (`line_too_long`) at its offset instead:
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
        chunk = read(READ_CHUNK_BYTES, read_at)
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
                MalformedLine.too_long(
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
        if buffer.find(b"\r") < 0:
            # Without a carriage return (which `splitlines` also ends a line at), the lines are
            # cut in one call, and their offsets summed in C: no `find` and slice a line.
            lines = buffer.splitlines(keepends=True)
            buffer = lines.pop() if lines and lines[-1][-1:] != b"\n" else b""
            starts = accumulate(map(len, lines), initial=buffer_offset)  # and the last's end
            yield from zip(starts, lines, strict=False)
            buffer_offset = read_at - len(buffer)
            del lines
        else:
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
            MalformedLine.too_long(
                skipped_bytes, LINE_BYTES_MAX, offset=skipping_from, terminated=False
            ),
        )

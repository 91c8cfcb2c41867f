"""The journal file `<book>/events.jsonl`: opened O_APPEND, appended with write()+fsync, cut back.

Every system call on the file goes through a `JournalIO`, the one seam where tests inject faults
(ENOSPC, EIO, a crash between two calls). Only the engine holding the book lock writes the file.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from ._file_mode import DEFAULT_FILE_MODE
from ._line import LINE_BYTES_MAX

JOURNAL_FILE_NAME = "events.jsonl"
_TAIL_CHUNK_BYTES = 64 * 1024
_TAIL_WINDOW_BYTES = 1024 * 1024
"""How much of the file a `TailReader` holds at a time (more only for one longer expected piece;
a line is at most 1 MiB)."""

log = logging.getLogger("engine_events.journal")


class JournalIO(Protocol):
    """The system calls the journal makes. `OsJournalIO` is the real one."""

    def open(self, path: Path, flags: int, mode: int) -> int: ...
    def write(self, fd: int, data: memoryview) -> int: ...
    def fsync(self, fd: int) -> None: ...
    def ftruncate(self, fd: int, length: int) -> None: ...
    def fsync_directory(self, path: Path) -> None: ...


class OsJournalIO:
    def open(self, path: Path, flags: int, mode: int) -> int:
        return os.open(path, flags, mode)

    def write(self, fd: int, data: memoryview) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def fsync_directory(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class JournalFile:
    """The append side of the journal. `size` is where the next line starts: the end of the last
    line known to be whole in the file."""

    def __init__(
        self, book_dir: Path, io: JournalIO, *, file_mode: int = DEFAULT_FILE_MODE
    ) -> None:
        self.path = Path(book_dir) / JOURNAL_FILE_NAME
        self._io = io
        self._file_mode = file_mode  # a new journal's, less the umask
        self._fd: int | None = None
        self.size = 0

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def open(self) -> None:
        """Open (creating it if needed), fsync the directory and cut any torn tail."""
        if self._fd is not None:
            return
        # Never blocks, never follows: a FIFO or a device at the journal's path (opening a FIFO
        # for writing waits for a reader) or a symbolic link is a journal that cannot be written,
        # handled like ENOSPC or EIO by the host's policy. O_NONBLOCK changes nothing for a
        # regular file.
        flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW
        try:
            fd = self._io.open(self.path, flags | os.O_CREAT | os.O_EXCL, self._file_mode)
        except FileExistsError:
            fd = self._io.open(self.path, flags, self._file_mode)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "the journal is not a regular file", str(self.path))
        try:
            # The name must survive a power cut before any line counts as durable in the file. On
            # every open, not only after a create: a process that died between its create and
            # this fsync left a name that a power cut can still take away, lines and all.
            self._io.fsync_directory(self.path.parent)
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        self.size = os.fstat(fd).st_size
        try:
            self.cut_torn_tail()
        except OSError:
            self.close()  # not open until a torn tail is known to be gone: the next open() cuts it
            raise

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def cut_torn_tail(self) -> int:
        """Cut a last line that has no `\\n` (left by a crash mid-write) back to the last `\\n`.

        Safe because only the lock holder writes the file and readers never consume an
        unterminated line. Returns the number of bytes cut.
        """
        fd = self._require_fd()
        size = os.fstat(fd).st_size
        keep = self._end_of_last_line(size)
        if keep < size:
            self._io.ftruncate(fd, keep)
            self.size = keep  # before fsync: if fsync fails, the file already ends here
            self._io.fsync(fd)
            log.warning("journal: cut a torn tail of %d bytes", size - keep)
        self.size = keep
        return size - keep

    def append(self, data: bytes) -> None:
        """Append whole lines and make them durable.

        What stays true after a crash at each point:
        - before the write: the lines exist only as committed outbox rows; the next start (or a
          repair) appends them.
        - mid-write: the file ends in a torn line; the next start cuts it back to the last `\\n`
          and appends the rows again, byte-identical.
        - after the write, before fsync: the lines are in the page cache (a process crash keeps
          them) or gone (a power cut); the watermark was not recorded, so the next start appends
          whichever rows it does not find at the end of the file.
        - after fsync: the lines are durable; the watermark may lag, and the next start only
          records it.
        On an OSError the file is cut back to its size before the call, so no partial line is
        left behind for a reader; if even that fails, the next append cuts it first.
        """
        if not data or not data.endswith(b"\n"):
            raise ValueError("append() takes whole lines")
        fd = self._require_fd()
        self._settle_size(fd)
        start = self.size
        view = memoryview(data)
        try:
            written = 0
            while written < len(data):
                count = self._io.write(fd, view[written:])
                if count <= 0:
                    raise OSError(errno.EIO, "write() made no progress")
                written += count
            self._io.fsync(fd)
        except OSError:
            try:
                self._io.ftruncate(fd, start)
            except OSError as truncate_error:
                log.error(
                    "journal: could not cut back a failed write (errno %s)", truncate_error.errno
                )
            raise
        # Paired check: the file must now end exactly where the lines we just made durable end.
        actual = os.fstat(fd).st_size
        if actual != start + len(data):
            raise OSError(
                errno.EIO, f"journal is {actual} bytes after append, not {start + len(data)}"
            )
        self.size = actual

    def sync(self) -> None:
        """Make everything the file holds durable, whoever wrote it (a process that died before
        its fsync left its lines in the page cache only)."""
        self._io.fsync(self._require_fd())

    def last_line(self) -> bytes | None:
        """The last whole line of the file (newline included), or None for an empty file or a
        last line longer than any line the emitter writes (it is not one of ours: not read)."""
        if self.size == 0:
            return None
        start = self._end_of_last_line(self.size - 1)
        if self.size - start > LINE_BYTES_MAX:
            return None
        return self.read_range(start, self.size)

    def last_line_starting_with(self, prefix: bytes) -> bytes | None:
        """The last whole line of the file that starts with `prefix` (newline included), or None:
        no such line, or one longer than any line the emitter writes. Reads backwards from the
        end in chunks, so the cost is the bytes after that line, and memory stays bounded."""
        needle = b"\n" + prefix
        with open(self.path, "rb") as reader:
            start: int | None = None
            end = self.size
            while end > 0:
                chunk_start = max(0, end - _TAIL_CHUNK_BYTES)
                reader.seek(chunk_start)
                # Overlap the chunk read before by a needle's length less one: a needle across
                # the boundary is seen, none is seen twice.
                chunk = reader.read(min(self.size, end + len(needle) - 1) - chunk_start)
                index = chunk.rfind(needle)
                if index >= 0:
                    start = chunk_start + index + 1
                    break
                end = chunk_start
            if start is None:
                reader.seek(0)
                if reader.read(len(prefix)) != prefix:
                    return None
                start = 0
            reader.seek(start)
            line = reader.read(min(self.size - start, LINE_BYTES_MAX))
        newline = line.find(b"\n")
        return None if newline < 0 else line[: newline + 1]

    @contextlib.contextmanager
    def tail(self) -> Iterator[TailReader]:
        """A reader that walks the file backwards from its end (`size`)."""
        with open(self.path, "rb") as reader:
            yield TailReader(reader, self.size)

    def read_range(self, start: int, end: int) -> bytes:
        with open(self.path, "rb") as reader:
            reader.seek(start)
            return reader.read(end - start)

    def _settle_size(self, fd: int) -> None:
        """Paired check before writing: the file must end where our last durable line ends."""
        actual = os.fstat(fd).st_size
        if actual > self.size:  # a failed append whose cut-back failed too
            self._io.ftruncate(fd, self.size)
        elif actual < self.size:
            log.error(
                "journal: the file shrank under the engine (%d < %d bytes)", actual, self.size
            )
            self.cut_torn_tail()

    def _end_of_last_line(self, size: int) -> int:
        """Offset just past the last `\\n` at or before `size`, scanning backwards in chunks."""
        with open(self.path, "rb") as reader:
            end = size
            while end > 0:
                start = max(0, end - _TAIL_CHUNK_BYTES)
                reader.seek(start)
                chunk = reader.read(end - start)
                index = chunk.rfind(b"\n")
                if index >= 0:
                    return start + index + 1
                end = start
        return 0

    def _require_fd(self) -> int:
        if self._fd is None:
            raise OSError(errno.EBADF, "the journal is not open", str(self.path))
        return self._fd


class TailReader:
    """Steps backwards through a file from a position, checking that the bytes just before it
    are the ones expected. It reads the file in windows of about `_TAIL_WINDOW_BYTES` (more only
    for one longer expected piece), so walking back over any length holds a bounded amount."""

    def __init__(self, reader: BinaryIO, end: int) -> None:
        self._reader = reader
        self.position = end
        self._window = b""
        self._window_start = end

    def step_back_over(self, expected: bytes) -> bool:
        """If the bytes just before the position are `expected`, move the position to their
        start and return True; otherwise return False and stay."""
        start = self.position - len(expected)
        if start < 0:
            return False
        if start < self._window_start:
            window_start = max(0, min(start, self.position - _TAIL_WINDOW_BYTES))
            self._reader.seek(window_start)
            self._window = self._reader.read(self.position - window_start)
            self._window_start = window_start
            if len(self._window) != self.position - window_start:
                return False  # the file is shorter than it was: nothing there to match
        offset = start - self._window_start
        if memoryview(self._window)[offset : offset + len(expected)] != expected:
            return False
        self.position = start
        return True

    def at_line_start(self) -> bool:
        """Whether the position is the start of the file or just after a `\\n`."""
        if self.position == 0:
            return True
        if self.position > self._window_start:
            return self._window[self.position - self._window_start - 1] == ord("\n")
        self._reader.seek(self.position - 1)
        return self._reader.read(1) == b"\n"

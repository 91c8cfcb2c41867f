"""The book lock: `flock(LOCK_EX | LOCK_NB)` on `<book>/.engine.lock`, held for a process's life.

The kernel releases a flock when its holder dies, however it dies, so a stale lock cannot outlive a
crash; and checking that a pid is gone is not mutual exclusion, so nothing here looks at pids (the
pid written into the file is for a person reading it).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path
from types import TracebackType

from ._file_mode import DEFAULT_FILE_MODE, require_file_mode
from .errors import BookDirectoryError, ProjectLocked

LOCK_FILE_NAME = ".engine.lock"
_LOCK_FLAGS = os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW
"""Opening the lock never blocks (a FIFO put in its place would wait for a peer) nor follows a
symbolic link out of the book directory."""


class BookLock:
    """An exclusive, non-blocking lock on a book directory. Use as a context manager or `close()`.

    The lock file, when it is created here, takes `file_mode` less the process's umask."""

    def __init__(self, book_dir: Path, *, file_mode: int = DEFAULT_FILE_MODE) -> None:
        require_file_mode(file_mode)
        self.path = Path(book_dir) / LOCK_FILE_NAME
        if not Path(book_dir).is_dir():
            raise BookDirectoryError(errno.ENOENT, "book directory does not exist", str(book_dir))
        try:
            fd = os.open(self.path, _LOCK_FLAGS | os.O_RDWR | os.O_CREAT, file_mode)
        except OSError as error:
            raise BookDirectoryError(
                error.errno, f"cannot create the book lock: {error.strerror}", str(self.path)
            ) from error
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise BookDirectoryError(
                errno.EINVAL, "the book lock is not a regular file", str(self.path)
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            os.close(fd)
            raise ProjectLocked("another process holds the book lock") from error
        self._fd: int | None = fd
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())

    @property
    def held(self) -> bool:
        return self._fd is not None

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> BookLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def is_locked(book_dir: Path) -> bool:
    """True when a live process holds the book's lock (probes with a shared, non-blocking flock)."""
    try:
        fd = os.open(Path(book_dir) / LOCK_FILE_NAME, _LOCK_FLAGS | os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False

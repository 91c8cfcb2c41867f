"""The mode the engine creates a book's files with.

`DEFAULT_FILE_MODE`, 0o640: the owner reads and writes, the owner's group reads (a platform worker
of that group can tail the journal), others get nothing. The process's umask narrows it further,
as it does every file a process creates (umask 077 makes 0o600). A host chooses another mode with
`Emitter.open(..., file_mode=...)`, `BookLock(..., file_mode=...)` and
`connect(..., file_mode=...)`. Only files the engine creates take it: an existing file keeps its own.
"""

from __future__ import annotations

from .errors import FileModeInvalid

DEFAULT_FILE_MODE = 0o640
_OWNER_READ_WRITE = 0o600
_READ_WRITE_BITS = 0o666


def require_file_mode(mode: object) -> int:
    """`mode` if it is an `int` of read and write bits only that keeps the owner's read and
    write; else `FileModeInvalid`."""
    if not isinstance(mode, int) or isinstance(mode, bool):
        raise FileModeInvalid(f"file_mode must be an int such as 0o640, got {mode!r}")
    if mode & ~_READ_WRITE_BITS or mode & _OWNER_READ_WRITE != _OWNER_READ_WRITE:
        raise FileModeInvalid(
            f"file_mode must give the owner read and write and hold only read and write bits "
            f"(0o600 to 0o666), got {mode:#o}"
        )
    return mode

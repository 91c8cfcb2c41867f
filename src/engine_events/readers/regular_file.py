"""Opening a file the engine's commands read (`verify`, `watch`): a regular file or a refusal.

A FIFO at a journal's path blocks an ordinary open until a writer comes; a device such as
`/dev/zero` never ends; opening some devices has effects of its own. So the path's type is looked
at before it is opened, the open never blocks (`O_NONBLOCK`, which changes nothing for a regular
file), and the type is checked again on the descriptor, which is what is read: the file cannot be
swapped between the check and the read.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..errors import NotARegularFile

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def not_regular(mode: int) -> str | None:
    """What a file of this mode is when it is not a regular file ("a FIFO", ...); None when it is."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def open_regular(path: Path) -> int:
    """A read-only descriptor on the regular file at `path` (a symbolic link to one is followed).

    Raises `NotARegularFile` for anything else, `FileNotFoundError` when nothing is there, and
    `OSError` when it cannot be opened.
    """
    kind = not_regular(os.stat(path).st_mode)
    if kind is not None:
        raise NotARegularFile(errno.EINVAL, f"{kind}, not a regular file", str(path))
    fd = os.open(path, _OPEN_FLAGS)
    try:
        kind = not_regular(os.fstat(fd).st_mode)
        if kind is not None:
            raise NotARegularFile(errno.EINVAL, f"{kind}, not a regular file", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd

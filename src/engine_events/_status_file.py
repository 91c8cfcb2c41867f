"""`<book>/status.json`: a cosmetic snapshot for people, replaced by atomic rename.

Never used for money: the journal and `engine-events status --json` are the record.
"""

from __future__ import annotations

import os
from pathlib import Path

STATUS_FILE_NAME = "status.json"


def write_status_file(book_dir: Path, content: bytes, file_mode: int) -> None:
    """Write to a temporary file (mode `file_mode` less the umask), fsync it, rename it over
    status.json: a reader sees the old snapshot or the new one, never half of one."""
    target = Path(book_dir) / STATUS_FILE_NAME
    temporary = target.with_name(f".{STATUS_FILE_NAME}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, file_mode)
    try:
        view = memoryview(content + b"\n")
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, target)

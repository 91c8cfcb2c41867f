"""The progress of a long command (`rebuild`, `compact`, `prune`) for a person at a terminal.

One line on stderr, rewritten in place (a carriage return, then the new text padded over the old)
as the command goes, and erased when it ends: the report on stdout is all that stays. When stderr
is not a terminal (a pipe, a file, a service's log collector) nothing of it is written at all.

A plain line rather than `rich`: the `platform-ingest` distribution does not depend on `rich`
(packaging/platform-ingest/pyproject.toml), and a production host should not install it, with what
it brings, for one line of progress. A log record written meanwhile erases the line first, so that
the two never share a line; the next update draws it again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from typing import TextIO

from .._logs import HANDLER_NAME
from .._plain import plain

REDRAW_INTERVAL_S = 0.1
"""The least time between two drawings: a terminal is not written to at every step."""
COLUMNS_DEFAULT = 80
"""The width assumed of a terminal that does not say its own."""


class ProgressLine:
    """The line; `update(text)` draws it (at most every `REDRAW_INTERVAL_S`), `erase()` clears it.
    On a stream that is not a terminal both do nothing."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.shown = stream.isatty()
        self._width = 0
        self._drawn_at: float | None = None

    def _columns(self) -> int:
        try:
            columns = os.get_terminal_size(self._stream.fileno()).columns
        except (OSError, ValueError):
            columns = 0
        return columns or COLUMNS_DEFAULT

    def update(self, text: str) -> None:
        if not self.shown:
            return
        now = time.monotonic()
        if self._drawn_at is not None and now - self._drawn_at < REDRAW_INTERVAL_S:
            return
        self._drawn_at = now
        # One column short of the width: a line that fills it would wrap on some terminals.
        line = plain(text, max_chars=self._columns() - 1)
        self._stream.write("\r" + line.ljust(self._width))
        self._stream.flush()
        self._width = len(line)

    def erase(self) -> None:
        if not self.shown or not self._width:
            return
        self._stream.write("\r" + " " * self._width + "\r")
        self._stream.flush()
        self._width = 0
        self._drawn_at = None  # the next update draws at once


class _EraseBeforeLogging(logging.Filter):
    def __init__(self, line: ProgressLine) -> None:
        super().__init__()
        self._line = line

    def filter(self, record: logging.LogRecord) -> bool:
        self._line.erase()
        return True


@contextlib.contextmanager
def progress_line() -> Iterator[ProgressLine]:
    """A progress line on stderr for the `with` block, erased at its end (and before each log
    record the command's handler writes)."""
    line = ProgressLine(sys.stderr)
    handlers = [
        handler for handler in logging.getLogger().handlers if handler.get_name() == HANDLER_NAME
    ]
    eraser = _EraseBeforeLogging(line)
    for handler in handlers:
        handler.addFilter(eraser)
    try:
        yield line
    finally:
        for handler in handlers:
            handler.removeFilter(eraser)
        line.erase()

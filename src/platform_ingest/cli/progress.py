"""The progress of a long command (`rebuild`, `compact`, `prune`) for a person at a terminal.

One line on stderr, drawn by `rich.progress` and redrawn in place as the command goes, and erased
when it ends (`transient`): the report on stdout is all that stays. When stderr is not a terminal
(a pipe, a file, a service's log collector) nothing of it is written at all: rich is not started.
A log record written meanwhile goes to `sys.stderr`, which rich holds while the line is shown, so
the record is printed above the line and the two never share a line.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from rich.console import Console
from rich.progress import Progress, TaskID, TextColumn
from rich.table import Column

from .._plain import plain

REFRESHES_PER_S = 10
"""How often the line is redrawn: a terminal is not written to at every step."""


class ProgressLine:
    """The line; `update(text)` sets what it says. Text from the journal or the database is shown
    as plain text (`plain`), never read as markup."""

    def __init__(self, progress: Progress | None) -> None:
        self._progress = progress
        self._task: TaskID | None = None

    def update(self, text: str) -> None:
        if self._progress is None:
            return
        line = plain(text)
        if self._task is None:
            self._task = self._progress.add_task("", total=None, line=line)
        else:
            self._progress.update(self._task, line=line)


@contextlib.contextmanager
def progress_line() -> Iterator[ProgressLine]:
    """A progress line on stderr for the `with` block, erased at its end."""
    if not sys.stderr.isatty():
        yield ProgressLine(None)
        return
    with Progress(
        TextColumn(
            "{task.fields[line]}",
            markup=False,
            table_column=Column(no_wrap=True, overflow="ellipsis"),
        ),
        console=Console(file=sys.stderr),
        transient=True,
        refresh_per_second=REFRESHES_PER_S,
    ) as progress:
        yield ProgressLine(progress)

"""What the rules decide over: one book, its runs and their attempts as a pass loaded them
(`BookState`), and what the platform holds from before the rules' current batch (`History`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from .runs import RunView
from .views import AttemptView, BookView


def stream_position(hello_offset: int) -> int:
    """A stream's place in its book: 1 + the byte offset of its hello (0 means "not seen yet").

    The file's order, not the order passes first saw the streams in: in named mode a stream named
    late is first seen late, yet an earlier stream of the file never supersedes a later one."""
    return hello_offset + 1


class History(Protocol):
    """What the platform holds from before the rules' current batch, looked up only when a line
    needs it (the pass answers from the batches it sealed and from Postgres; a test, from memory)."""

    def applied_sha256(self, attempt: AttemptView, seq: int) -> bytes | None:
        """The sha256 of the line applied at `seq` of `attempt`; None when none is recorded."""
        ...

    def was_pruned(self, engine_run_id: str) -> bool:
        """True when the book's stream of this id was pruned with its run (`prune`)."""
        ...


@dataclass(eq=False)
class BookState:
    """What the rules decide over: one book, its runs and their attempts, as a pass loaded them."""

    book: BookView
    runs: list[RunView]
    attempts: dict[str, AttemptView]
    """engine_run_id -> attempt"""

    @classmethod
    def of(
        cls, book: BookView, runs: Iterable[RunView], attempts: Iterable[AttemptView]
    ) -> BookState:
        """The state of a freshly loaded book: each run's latest stream (by its place in the
        book) is the one that drives the run."""
        state = cls(book, list(runs), {a.engine_run_id: a for a in attempts})
        latest: dict[int, AttemptView] = {}
        for attempt in state.attempts.values():
            if attempt.stream_index is None:
                continue
            key = id(attempt.run)
            if key not in latest or (latest[key].stream_index or 0) < attempt.stream_index:
                latest[key] = attempt
        for attempt in latest.values():
            attempt.drives_run = True
        return state

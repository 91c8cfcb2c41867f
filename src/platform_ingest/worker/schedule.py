"""When the worker does what: the books due for a pass, the retries, and the waits while Postgres
is away. No I/O here; the loop (`loop`) asks and acts.

- `Schedule`: the books due for a pass, each with what woke it (its `Trigger`) and since when; a
  book marked again keeps its earliest wake-up. A pass that found its book busy (another worker's
  pass holds it) is tried again after `BUSY_RETRY_WAIT_S`, at most `BUSY_RETRIES_MAX` times in a
  row; then the book is left to the survey.
- `PostgresAway`: an episode of Postgres being away, and when to try to connect again (a jittered
  wait growing from `DATABASE_WAIT_FIRST_S` to the worker's `database_wait_max_s`, `_backoff`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .._backoff import Backoff

Trigger = Literal["notify", "claim", "survey", "retry", "operator"]
"""What woke a pass (the `trigger` label of the pass metrics); see `loop`."""

BUSY_RETRY_WAIT_S = 0.25
"""After a pass found its book busy (another worker's pass), the wait before trying again."""
BUSY_RETRIES_MAX = 40
"""Busy retries before the book is left to the survey."""
FAILURE_WAIT_FIRST_S = 0.5
"""After a pass that failed for its book's own reason (a projection raised), the first wait before
the book is passed again; each failure in a row doubles it, up to `FAILURE_WAIT_MAX_S`."""
FAILURE_WAIT_MAX_S = 60.0
DATABASE_WAIT_FIRST_S = 0.2
"""The first wait after Postgres went away; each next one doubles, up to the worker's maximum."""
DATABASE_WAIT_JITTER = 0.5
"""Each wait while Postgres is away is shortened by up to this share, so workers spread out."""


@dataclass(eq=False)
class Due:
    """A book due for a pass: what woke it, when, and the earliest time to pass it."""

    trigger: Trigger
    woken_at: float
    not_before: float = 0.0


class Schedule:
    """The books due for a pass, by book directory."""

    def __init__(self) -> None:
        self._due: dict[Path, Due] = {}
        self._busy_retries: dict[Path, int] = {}
        self._failures: dict[Path, Backoff] = {}

    def mark(self, path: Path, trigger: Trigger, at: float, not_before: float = 0.0) -> None:
        """The book is due (woken at `at`, passed no earlier than `not_before`); a book already
        due keeps its trigger and takes the earlier of each time."""
        due = self._due.get(path)
        if due is None:
            self._due[path] = Due(trigger, at, not_before)
        else:
            due.woken_at = min(due.woken_at, at)
            due.not_before = min(due.not_before, not_before)

    def drop(self, path: Path) -> None:
        """The book is no longer due (not this worker's any more)."""
        self._due.pop(path, None)

    def forget(self, path: Path) -> None:
        """The book directory is gone."""
        self._due.pop(path, None)
        self._busy_retries.pop(path, None)
        self._failures.pop(path, None)

    def soonest(self, at_latest: float) -> float:
        """The earliest time a book may be passed, or `at_latest` if none is sooner."""
        return min([at_latest, *(due.not_before for due in self._due.values())])

    def ready(self, now: float) -> list[Path]:
        """The books that may be passed at `now`, the longest waiting first (still due until
        `take`n)."""
        ready = [(path, due) for path, due in self._due.items() if due.not_before <= now]
        ready.sort(key=lambda item: item[1].woken_at)
        return [path for path, _ in ready]

    def take(self, path: Path) -> Due | None:
        """The book's `Due`, no longer due: its pass begins."""
        return self._due.pop(path, None)

    def retry(self, path: Path, due: Due, *, wait_s: float = 0.0) -> None:
        """Pass the book again (after `wait_s`), as woken when its failed pass was."""
        not_before = time.monotonic() + wait_s if wait_s else 0.0
        self.mark(path, "retry", due.woken_at, not_before)

    def busy(self, path: Path, due: Due) -> None:
        """The pass found the book busy: again shortly, unless it has been busy too often."""
        retries = self._busy_retries.get(path, 0) + 1
        self._busy_retries[path] = retries
        if retries <= BUSY_RETRIES_MAX:
            self.retry(path, due, wait_s=BUSY_RETRY_WAIT_S)

    def failed(self, path: Path, due: Due, *, at_least_s: float = 0.0) -> float:
        """The pass failed for the book's own reason: again after a jittered wait that doubles
        with each failure in a row (bounded), and is at least `at_least_s`. Returns the wait."""
        backoff = self._failures.get(path)
        if backoff is None:
            backoff = Backoff(FAILURE_WAIT_FIRST_S, FAILURE_WAIT_MAX_S, factor=2.0, jitter=0.5)
            self._failures[path] = backoff
        wait_s = max(backoff.next_s(), at_least_s)
        self.retry(path, due, wait_s=wait_s)
        return wait_s

    def went_through(self, path: Path) -> None:
        """A pass over the book was not busy and did not fail: the counts of busy retries and
        of failures start again."""
        self._busy_retries.pop(path, None)
        self._failures.pop(path, None)


class PostgresAway:
    """Whether Postgres is away, since when, and when the worker tries to connect again."""

    def __init__(self, wait_max_s: float) -> None:
        self.since: float | None = None
        self.retry_at = 0.0
        self._backoff = Backoff(
            DATABASE_WAIT_FIRST_S, wait_max_s, factor=2.0, jitter=DATABASE_WAIT_JITTER
        )

    @property
    def away(self) -> bool:
        return self.since is not None

    def failed(self, now: float) -> bool:
        """A try failed at `now`: set the next try. True when this begins an episode."""
        first = self.since is None
        if first:
            self.since = now
            self._backoff.reset()
        self.retry_at = now + self._backoff.next_s()
        return first

    def back(self, now: float) -> float:
        """Connected again at `now`: the episode ends. How long Postgres was away."""
        since, self.since = self.since, None
        return now - (since if since is not None else now)

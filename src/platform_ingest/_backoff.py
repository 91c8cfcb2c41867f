"""A growing wait between tries: the first wait, then each one `factor` times the last, never
more than `max_s`, optionally shortened at random (`jitter`) so that many waiters spread out.

One helper for every wait of the platform side: `Database.reconnect` (a pass's quick reconnects,
which `book_pass` uses when it starts over after a lost connection) and the worker's wait while
Postgres is away (`schedule.PostgresAway`, jittered).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """The waits of one episode of tries; `reset` starts a new episode.

    `next_s` returns `min(first_s * factor ** n, max_s)` for the n-th wait of the episode (n from
    0), times a random factor in `[1 - jitter, 1]` when `jitter` is set.
    """

    first_s: float
    max_s: float
    factor: float = 2.0
    jitter: float = 0.0
    uniform: Callable[[float, float], float] = field(default=random.uniform, repr=False)
    """Where the jitter comes from (a test gives its own)."""
    _next_s: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not (self.first_s >= 0 and self.max_s >= 0 and self.factor >= 1):
            raise ValueError("a backoff needs first_s >= 0, max_s >= 0 and factor >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("a backoff's jitter is between 0 and 1")
        self.reset()

    def reset(self) -> None:
        """The next wait is the first again."""
        self._next_s = self.first_s

    def next_s(self) -> float:
        """The wait before the next try."""
        wait_s = min(self.max_s, self._next_s)
        self._next_s = wait_s * self.factor
        if self.jitter:
            wait_s *= self.uniform(1.0 - self.jitter, 1.0)
        return wait_s

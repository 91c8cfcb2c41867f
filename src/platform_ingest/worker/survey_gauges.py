"""What a survey measured of the worker's books, tallied page by page and published as gauges at
its end: the lag (bytes, lines, books behind, the oldest), and what is true now of the books
(attempts by state, books by problem, lines held and the oldest hold of each kind, each
projection's lines behind). Rebuilt from Postgres by every survey, the first at start, so that a
restarted worker shows a quarantine as soon as its first survey ends."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import get_args

from ..decisions.views import ATTEMPT_STATES
from ..errors import BookProblemKind, StreamProblemKind
from ..operate.lag import HOLD_KINDS, Lag
from ..store.db import Row
from .metrics import Metrics

STANDING_STATES = frozenset({"quarantined", "stalled", "refused", "parked"})
"""The attempt states whose recorded problem stands (a person must look, or the book waits)."""
PROBLEM_GAUGE_KINDS: tuple[str, ...] = (
    *get_args(StreamProblemKind),
    *get_args(BookProblemKind),
    "unnamed_stream",
)
"""The kinds of `books_with_problem`, each shown (0 included) from the first survey on."""


@dataclass
class Tally:
    """What a survey's pages have measured so far."""

    started: float
    books: int = 0
    lag_bytes: int = 0
    lag_lines: int = 0
    lag_bytes_max: int = 0
    behind: int = 0
    age_max: float = 0.0
    attempts: Counter[str] = field(default_factory=Counter)
    books_with_problem: Counter[str] = field(default_factory=Counter)
    lines_held: Counter[str] = field(default_factory=Counter)
    oldest_hold_s: dict[str, float] = field(default_factory=dict)
    projection_behind: Counter[str] = field(default_factory=Counter)

    def count_truths(self, book: Row, lag: Lag, now: datetime) -> None:
        """Count one book's attempts by state, its standing problems by kind, and its holds."""
        kinds: set[str] = set(book["problem_kinds"] or ())
        if book["error_kind"] is not None:
            kinds.add(book["error_kind"])
        for state, error_kind in lag.attempts:
            self.attempts[state] += 1
            if error_kind is not None and state in STANDING_STATES:
                kinds.add(error_kind)
        if any(hold.kind == "unnamed" for hold in lag.holds):
            kinds.add("unnamed_stream")
        for kind in kinds:
            self.books_with_problem[kind] += 1
        held = lag.held_by
        if held is not None:
            self.lines_held[held.kind] += lag.lines - lag.lines_unread
        for hold in lag.holds:
            if hold.since is not None:
                age = max(0.0, (now - hold.since).total_seconds())
                self.oldest_hold_s[hold.kind] = max(self.oldest_hold_s.get(hold.kind, 0.0), age)

    def publish(self, metrics: Metrics, projections: list[str]) -> None:
        """Set the gauges to what the survey measured (each state, kind and hold shown, 0
        included)."""
        metrics.lag_bytes.set(self.lag_bytes)
        metrics.lag_lines.set(self.lag_lines)
        metrics.lag_bytes_max.set(self.lag_bytes_max)
        metrics.books_behind.set(self.behind)
        metrics.lag_age_max.set(self.age_max)
        for state in ATTEMPT_STATES:
            metrics.attempts.labels(state).set(self.attempts[state])
        for kind in PROBLEM_GAUGE_KINDS:
            metrics.books_with_problem.labels(kind).set(self.books_with_problem[kind])
        for hold in HOLD_KINDS:
            metrics.lag_lines_held.labels(hold).set(self.lines_held[hold])
            metrics.oldest_hold_age.labels(hold).set(self.oldest_hold_s.get(hold, 0.0))
        for projection in projections:
            metrics.projection_lines_behind.labels(projection).set(
                self.projection_behind[projection]
            )

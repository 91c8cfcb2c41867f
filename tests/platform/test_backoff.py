"""The one backoff helper: the waits of `Database.reconnect` and of the worker while Postgres is
away (no Postgres needed)."""

from __future__ import annotations

import pytest

from platform_ingest._backoff import Backoff


def waits(backoff: Backoff, count: int) -> list[float]:
    return [backoff.next_s() for _ in range(count)]


def test_the_waits_double_up_to_the_cap() -> None:
    """`Database.reconnect` with the default settings: 0.25 s, doubling, at most 2 s."""
    assert waits(Backoff(0.25, 2.0), 6) == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]


def test_the_first_wait_is_capped_too() -> None:
    assert waits(Backoff(0.2, 0.3), 3) == [0.2, 0.3, 0.3]
    assert waits(Backoff(1.0, 0.5), 2) == [0.5, 0.5]


def test_reset_starts_a_new_episode() -> None:
    backoff = Backoff(0.1, 10.0, factor=3.0)
    assert waits(backoff, 3) == pytest.approx([0.1, 0.3, 0.9])
    backoff.reset()
    assert backoff.next_s() == 0.1


def test_jitter_shortens_each_wait_but_not_the_next_one() -> None:
    """The worker's wait while Postgres is away: each wait times a random factor in [0.5, 1];
    the growth follows the waits before jitter, so the episode still reaches the cap."""
    asked: list[tuple[float, float]] = []

    def lowest(low: float, high: float) -> float:
        asked.append((low, high))
        return low

    backoff = Backoff(0.2, 5.0, jitter=0.5, uniform=lowest)
    assert waits(backoff, 7) == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.5, 2.5])
    assert set(asked) == {(0.5, 1.0)}


def test_jitter_stays_within_its_band() -> None:
    backoff = Backoff(1.0, 1.0, jitter=0.5)
    assert all(0.5 <= wait <= 1.0 for wait in waits(backoff, 200))


@pytest.mark.parametrize(
    ("first_s", "max_s", "factor", "jitter"),
    [(-1.0, 1.0, 2.0, 0.0), (1.0, -1.0, 2.0, 0.0), (1.0, 1.0, 0.5, 0.0), (1.0, 1.0, 2.0, 1.5)],
)
def test_nonsense_is_refused(first_s: float, max_s: float, factor: float, jitter: float) -> None:
    with pytest.raises(ValueError):
        Backoff(first_s, max_s, factor=factor, jitter=jitter)

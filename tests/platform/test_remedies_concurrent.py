"""A remedy while another worker holds the book: the result is the one of the same remedy run
while nobody passes the book.

Each scenario leaves a book in a state a remedy ends (a quarantined, stalled, parked or live
stream) with more lines of another stream to apply. Then it runs twice, on two books of the same
bytes. Once in order: the remedy, then the passes. Once raced: a pass (on its own connection,
holding the book's advisory lock as a worker does) is stopped at a commit of a batch, before its
transaction or with the cursors locked, while the remedy runs; then it goes on. A remedy bumps
the book's scan epoch, so the pass commits what it decided only if nothing moved under it, else
starts over from what the remedy left. After one more sweep both books must show the same runs,
attempts, units and money, and every line applied once.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from platform_ingest import Database
from platform_ingest.ingest.book_pass import BookPass
from platform_ingest.ingest.books import register_book
from platform_ingest.operate.naming import name_stream, release_attempt
from platform_ingest.operate.remedies import (
    abandon_attempt,
    disown_stream,
    report_exit,
    skip_line,
)
from platform_journals import (
    RUN_A,
    RUN_B,
    RUN_C,
    book_state,
    finished,
    hello,
    line,
    spend,
    sweep,
    unit_done,
    write,
)

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]
BAD = line(3, "spend", {"committed_micro_usd": "lots"})
"""A malformed line at seq 3 (money that is not an integer)."""


def _stream(run: str, book: str, first_seq: int, count: int, base: int) -> list[bytes]:
    """`count` lines of `run` from `first_seq`: units and cumulative spends."""
    lines = []
    for seq in range(first_seq, first_seq + count):
        if seq % 2:
            lines.append(spend(seq, base + seq * 10))
        else:
            lines.append(unit_done(seq, f"{run[:4]}-{seq}", seq))
    return lines


@dataclass(frozen=True)
class Scenario:
    name: str
    mode: str
    before: Callable[[Path], list[bytes]]
    """The journal the book is swept over first (leaving a state to remedy)."""
    after: Callable[[Path], list[bytes]]
    """The journal when the remedy runs: more lines for the racing pass."""
    remedy: Callable[[Database, Path], object]
    named: tuple[str, ...] = ()


def _quarantined(book: Path) -> list[bytes]:
    return [hello(RUN_A, book=book.name), spend(2, 100), BAD]


def _with_resume(book: Path) -> list[bytes]:
    return [
        *_quarantined(book),
        hello(RUN_B, book=book.name),
        *_stream(RUN_B, book.name, 2, 24, 1000),
    ]


def _skip(db: Database, book: Path) -> object:
    return skip_line(
        db, str(book), RUN_A, 3, sha256=hashlib.sha256(BAD).hexdigest(), reason="a bad line"
    )


def _stalled(book: Path) -> list[bytes]:
    return [hello(RUN_A, book=book.name), spend(2, 100), spend(5, 500)]


def _stalled_resumed(book: Path) -> list[bytes]:
    return [*_stalled(book), hello(RUN_B, book=book.name), *_stream(RUN_B, book.name, 2, 24, 1000)]


def _live(book: Path) -> list[bytes]:
    return [hello(RUN_A, book=book.name), spend(2, 100)]


def _live_more(book: Path) -> list[bytes]:
    return [*_live(book), *_stream(RUN_A, book.name, 3, 24, 100)]


def _parked(book: Path) -> list[bytes]:
    return [
        hello(RUN_A, book=book.name),
        spend(2, 100),
        hello(RUN_C, book=book.name),
        spend(2, 9_999),
    ]


def _parked_then_ours(book: Path) -> list[bytes]:
    return [
        *_parked(book),
        finished(3, money=9_999),
        hello(RUN_B, book=book.name),
        *_stream(RUN_B, book.name, 2, 24, 1000),
    ]


SCENARIOS = [
    Scenario(
        "release",
        "auto",
        _quarantined,
        # The bad line put right, and a resume to apply meanwhile.
        lambda book: [
            hello(RUN_A, book=book.name),
            spend(2, 100),
            spend(3, 300),
            hello(RUN_B, book=book.name),
            *_stream(RUN_B, book.name, 2, 24, 1000),
        ],
        lambda db, book: release_attempt(db, str(book), RUN_A, reason="put right"),
    ),
    Scenario("skip", "auto", _quarantined, _with_resume, _skip),
    Scenario(
        "abandon",
        "auto",
        _stalled,
        _stalled_resumed,
        lambda db, book: abandon_attempt(db, str(book), RUN_A, reason="lines lost"),
    ),
    Scenario(
        "exited",
        "auto",
        _live,
        _live_more,
        lambda db, book: report_exit(db, str(book), RUN_A, -9),
    ),
    Scenario(
        "disown",
        "named",
        _parked,
        _parked_then_ours,
        lambda db, book: disown_stream(db, str(book), RUN_C, reason="another tenant"),
        named=(RUN_A, RUN_B),
    ),
    Scenario(
        "name",
        "named",
        _parked,
        _parked_then_ours,
        lambda db, book: name_stream(db, str(book), RUN_C),
        named=(RUN_A, RUN_B),
    ),
]

VOLATILE = frozenset(
    {"since", "seen_at", "last_applied_at", "at", "action_id", "book_id", "path", "run_id"}
)


def _stable(value: Any) -> Any:
    """`show --json` without what differs between two books of the same bytes (times, ids,
    paths; the books' names are of one length, so byte offsets agree) and without the lag
    (measured, not state)."""
    if isinstance(value, dict):
        return {
            key: _stable(item)
            for key, item in value.items()
            if key not in VOLATILE and key != "lag"
        }
    if isinstance(value, list):
        return [_stable(item) for item in value]
    if isinstance(value, str):
        return re.sub(r"book-(raced|ord-[0-9])", "book-X", value)
    return value


def _prepare(db: Database, book: Path, scenario: Scenario) -> None:
    for stream in scenario.named:
        name_stream(db, str(book), stream)
    write(book, *scenario.before(book))
    sweep(db, book, auto=scenario.mode == "auto")
    write(book, *scenario.after(book))


class _Stopped(Exception):
    """Stops a pass at a commit (nothing of that batch committed)."""


def _in_order(db: Database, book: Path, scenario: Scenario, *, commits: int) -> dict[str, Any]:
    """No race: a pass commits `commits` batches and stops, then the remedy runs, then the
    passes go on."""
    _prepare(db, book, scenario)
    done = [0]

    def hook(at: str) -> None:
        if at == "before":
            if done[0] == commits:
                raise _Stopped
            done[0] += 1

    with contextlib.suppress(_Stopped):
        BookPass(
            db,
            register_book(db, book).book_id,
            mode="auto" if scenario.mode == "auto" else "named",
            batch_lines_max=4,
            commit_hook=hook,
        ).run()
    scenario.remedy(db, book)
    for _ in range(3):
        sweep(db, book, auto=scenario.mode == "auto")
    return book_state(db, book)


def _raced(
    db: Database, dsn: str, book: Path, scenario: Scenario, *, stage: str, batch: int
) -> dict[str, Any]:
    """The remedy while a pass of another session holds the book, stopped at its `batch`-th
    commit at `stage`."""
    _prepare(db, book, scenario)
    book_id = register_book(db, book).book_id
    stopped, go_on = threading.Event(), threading.Event()
    commits = [0]

    def hook(at: str) -> None:
        if at == stage:
            commits[0] += 1
            if commits[0] == batch:
                stopped.set()
                assert go_on.wait(30)

    def holder() -> None:
        other = Database(dsn)
        try:
            BookPass(
                other,
                book_id,
                mode="auto" if scenario.mode == "auto" else "named",
                batch_lines_max=4,
                commit_hook=hook,
            ).run()
        finally:
            stopped.set()
            other.close()

    with ThreadPoolExecutor(max_workers=2) as pool:
        holding = pool.submit(holder)
        assert stopped.wait(30)
        if stage == "locked":
            # The cursors are locked: the remedy waits for the pass's commit.
            remedy = pool.submit(scenario.remedy, db, book)
            with contextlib.suppress(TimeoutError):
                remedy.result(timeout=0.3)
            go_on.set()
            remedy.result(timeout=30)
        else:
            scenario.remedy(db, book)
            go_on.set()
        holding.result(timeout=30)
    for _ in range(3):
        sweep(db, book, auto=scenario.mode == "auto")
    return book_state(db, book)


@pytest.mark.parametrize("stage", ["before", "locked"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda scenario: scenario.name)
def test_a_remedy_while_another_worker_holds_the_book_ends_as_in_order(
    db: Database, fresh_dsn: str, make_book: MakeBook, scenario: Scenario, *, stage: str, batch: int
) -> None:
    """The raced pass was stopped before its `batch`-th commit, or (`locked`) inside it: the
    result is that of the remedy run after the commits before it, or (`locked`, when the remedy
    did not wait for the pass) after that commit too."""
    raced = _stable(
        _raced(db, fresh_dsn, make_book("book-raced"), scenario, stage=stage, batch=batch)
    )
    serial = [batch - 1, batch] if stage == "locked" else [batch - 1]
    orders = {
        commits: _stable(_in_order(db, make_book(f"book-ord-{commits}"), scenario, commits=commits))
        for commits in serial
    }
    assert raced in orders.values(), {"raced": raced, **orders}
    assert any(run["units"] for run in raced["runs"]), "the scenario applied no lines"

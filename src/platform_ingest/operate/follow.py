"""`show --follow`: the state of books, printed again each time a commit or an operator changes one.

It LISTENs on both channels (`statements.CHANNEL_CHANGES`: a payload per attempt a commit moved, with its
run id; `statements.CHANNEL_CONTROL`: the id of a book an operator changed), gathers what arrives within
`GATHER_S` of the first notification, and prints the state of the books concerned (those given on
the command line only, when some were). No polling: between changes it waits on the connection.

With `--json` each book's state is one line (NDJSON, the object `show --json` lists under
"books"); without it, the text view of those books under a line with the time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from typing import Any

import orjson

from engine_events.grammar import INTEGER_MAX

from ..store import statements
from ..store.db import Database
from .show import render_text, show_books, show_state

GATHER_S = 0.1
"""After a first notification, how long more are gathered before the state is printed once."""
WAKE_S = 0.5
"""How often the wait looks at the stop flag."""


def follow(
    db: Database,
    listener: Database,
    book_ids: Collection[str] | None,
    *,
    as_json: bool,
    write: Callable[[str], None],
    stopping: Callable[[], bool],
) -> None:
    """Print the books' state now, then after each change, until `stopping()`. `listener` is a
    connection of its own (it is kept waiting on notifications)."""
    listener.listen(statements.LISTEN_CHANGES)
    listener.listen(statements.LISTEN_CONTROL)
    first = show_state(db)["books"] if book_ids is None else show_books(db, sorted(book_ids))
    _write(first, as_json=as_json, write=write)
    while not stopping():
        runs, books = _gather(listener, stopping)
        if runs:
            books.update(
                book_id for (book_id,) in db.fetch_tuples(statements.BOOKS_OF_RUNS, (runs,))
            )
        if book_ids is not None:
            books &= set(book_ids)
        if books:
            _write(show_books(db, sorted(books)), as_json=as_json, write=write)


def _gather(listener: Database, stopping: Callable[[], bool]) -> tuple[list[int], set[str]]:
    """The run ids and book ids of the notifications that arrive within `GATHER_S` of the first
    (which may take any time to come)."""
    runs: set[int] = set()
    books: set[str] = set()
    deadline: float | None = None
    while not stopping():
        timeout = WAKE_S if deadline is None else max(0.0, deadline - time.monotonic())
        for notify in listener.notifications(timeout):
            if deadline is None:
                deadline = time.monotonic() + GATHER_S
            if notify.channel == statements.CHANNEL_CONTROL:
                books.add(notify.payload)
            else:
                run_id = _run_id(notify.payload)
                if run_id is not None:
                    runs.add(run_id)
            if time.monotonic() >= deadline:
                break
        if deadline is not None and time.monotonic() >= deadline:
            break
    return sorted(runs), books


def _run_id(payload: str) -> int | None:
    """The run id of a change's payload; None for anything else. Any session of the database may
    NOTIFY on the channel: a payload that is not the platform's is passed over, never fatal."""
    try:
        value: Any = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    run_id = value.get("run_id") if isinstance(value, dict) else None
    if type(run_id) is int and 0 < run_id <= INTEGER_MAX:
        return run_id
    return None


def _write(shown: list[dict[str, Any]], *, as_json: bool, write: Callable[[str], None]) -> None:
    if as_json:
        for book in shown:
            write(orjson.dumps(book).decode())
    else:
        write(f"-- {datetime.now(UTC).isoformat(timespec='milliseconds')}")
        write(render_text({"books": shown}))

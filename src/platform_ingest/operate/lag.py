"""Lag: how far a book's journal runs ahead of what Postgres holds, measured against the real head.

For each book: the bytes and the complete lines in `events.jsonl` past the last line the platform
decided on, whatever holds the rest, and the age of the last applied line (seconds since a line
of the book was last applied, on the server's clock). The place lag counts from is the least of
where the next pass would start (the book's scan hint and the hints of its active and parked
attempts, as in `book_pass`) and where each hold begins (`Hold`): a stream quarantined, stalled
or refused (past its last applied line: the next pass walks past those lines, an operator must
look), parked (behind a foreign stream), or not named (named mode: a stream whose hello a pass
saw, that nobody named or disowned, from its hello). An idle book has no lag and a growing age; a
stuck one (held, a worker that cannot reach Postgres, a worker that is gone) has lag AND a growing
age. `lines_unread` is the part of the lines a pass would read: the survey passes a book for it.

A hint taken in another file (the journal was replaced) counts the whole file as lag: the next
pass will read it from byte 0. Counting lines reads the bytes past the cursor in bounded chunks;
`lines_bytes_max` caps how much is read (the count is then a lower bound, `lines_exact` false).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import orjson

from engine_events.grammar import MalformedLine

from ..decisions.views import LIVE_STATES, AttemptState, awaits_lines
from ..journal.reader import JOURNAL_NAME, complete_lines, file_identity
from ..journal.sections import line_at
from ..store import statements
from ..store.db import Database, Row

_COUNT_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY

COUNT_CHUNK_BYTES = 1024 * 1024
"""How much one read asks for while lines past the cursor are counted."""

LAG_PAGE_BOOKS = 500
"""Books are measured in pages of this many (one query per page)."""

HoldKind = Literal["quarantined", "stalled", "refused", "parked", "unnamed"]
HOLD_KINDS: tuple[HoldKind, ...] = ("quarantined", "stalled", "refused", "parked", "unnamed")
_HOLDING_STATES: dict[AttemptState, HoldKind] = {
    "quarantined": "quarantined",
    "stalled": "stalled",
    "refused": "refused",
    "parked": "parked",
}
HELLO_READ_BYTES = 4096
"""How much of an unnamed stream's hello is read for its time (a longer hello has none shown)."""


@dataclass(frozen=True, slots=True)
class Hold:
    """A stream whose lines wait for a person: where they begin, and since when."""

    kind: HoldKind
    engine_run_id: str
    offset: int
    """The byte offset of its first line not decided on (0: the hint was taken in another file)."""
    since: datetime | None
    """When it began to hold: the attempt's last change of state; for a stream not named, the
    time its hello carries (the engine's clock). None: not known."""

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "engine_run_id": self.engine_run_id,
            "offset": self.offset,
            "since": None if self.since is None else self.since.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class Lag:
    """One book's lag."""

    bytes: int
    """Bytes in the journal past the cursor (a trailing unterminated line included)."""
    lines: int
    """Complete lines past the cursor."""
    lines_exact: bool
    last_applied_at: datetime | None
    """When a line of this book was last applied (None: never)."""
    age_s: float | None
    """Seconds since then, on the server's clock (None: never)."""
    file_size: int
    cursor_offset: int
    journal_refused: bool = False
    """Something is at the journal's path that a pass refuses (not a regular file: a FIFO, a
    symbolic link, a directory) or the journal could not be read: no lag shows, but a pass
    records the book's problem."""
    journal_missing: bool = False
    """Nothing is at the journal's path, or the book's directory is gone."""
    lines_awaited: bool = False
    """The journal is missing and an attempt of the book waits for its lines
    (`views.awaits_lines`): the book's problem is `journal_missing`."""
    lines_unread: int = 0
    """Of `lines`, those past the place the next pass would start: a pass reads them."""
    holds: tuple[Hold, ...] = ()
    """The book's holds, earliest first."""
    attempts: tuple[tuple[AttemptState, str | None], ...] = ()
    """(state, recorded problem kind) of each of the book's attempts, for the worker's gauges."""

    @property
    def held_by(self) -> Hold | None:
        """The hold lag counts from: the earliest, when it begins at or before the place the next
        pass would start; None when all of the lag is lines a pass will read."""
        if self.holds and self.holds[0].offset <= self.cursor_offset:
            return self.holds[0]
        return None

    @property
    def journal(self) -> str:
        """What is at the journal's path: `ok`, `missing` or `refused`."""
        if self.journal_missing:
            return "missing"
        return "refused" if self.journal_refused else "ok"

    def as_json(self) -> dict[str, Any]:
        """The book's `lag` in `show --json`. The age itself is not in it (it would make two
        readings of an unchanged state differ): it is now minus `last_applied_at`."""
        return {
            "bytes": self.bytes,
            "lines": self.lines,
            "lines_exact": self.lines_exact,
            "journal": self.journal,
            "last_applied_at": (
                None if self.last_applied_at is None else self.last_applied_at.isoformat()
            ),
            "lines_unread": self.lines_unread,
            "held_by": None if self.held_by is None else self.held_by.as_json(),
        }


def count_lines(path: Path, start: int, end: int, bytes_max: int | None) -> tuple[int, bool]:
    """Newlines in `path` between `start` and `end` (at most `bytes_max` bytes read)."""
    if end <= start:
        return 0, True
    stop = end if bytes_max is None else min(end, start + bytes_max)
    lines = 0
    try:
        # Never blocks: a FIFO or a device at the journal's path is not read (the pass shows it).
        fd = os.open(path, _COUNT_FLAGS)
    except OSError:
        return 0, False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return 0, False
        offset = start
        while offset < stop:
            chunk = os.pread(fd, min(COUNT_CHUNK_BYTES, stop - offset), offset)
            if not chunk:
                break
            lines += chunk.count(b"\n")
            offset += len(chunk)
    except OSError:
        return lines, False
    finally:
        os.close(fd)
    return lines, stop == end


def _cursor(book: Row, attempts: Sequence[Row], identity: str | None) -> int:
    """Where the next pass would start reading (0 when a hint belongs to another file)."""
    offsets: list[int] = []
    if book["scan_mode"] is not None:
        if book["scan_offset"] and book["scan_file"] != identity:
            return 0
        offsets.append(book["scan_offset"])
    else:
        offsets.append(0)
    for attempt in attempts:
        if attempt["state"] in LIVE_STATES and attempt["hint_offset"]:
            if attempt["hint_file"] != identity:
                return 0
            offsets.append(attempt["hint_offset"])
    return min(offsets)


def _holds(
    path: Path, attempts: Sequence[Row], unnamed: Sequence[Row], identity: str | None
) -> tuple[Hold, ...]:
    """The book's holds (`Hold`), earliest first: its attempts in a holding state, and its
    streams not named (`statements.UNNAMED_STARTS_OF_BOOKS`)."""

    def offset(row: Row) -> int:
        same_file = not row["hint_offset"] or row["hint_file"] == identity
        return int(row["hint_offset"]) if same_file else 0

    holds = [
        Hold(_HOLDING_STATES[row["state"]], row["engine_run_id"], offset(row), row["changed_at"])
        for row in attempts
        if row["state"] in _HOLDING_STATES
    ]
    for row in unnamed:
        at = offset(row)
        holds.append(Hold("unnamed", row["engine_run_id"], at, hello_time(path, at)))
    return tuple(sorted(holds, key=lambda hold: (hold.offset, hold.engine_run_id)))


def hello_time(path: Path, offset: int) -> datetime | None:
    """The `time` of the hello that begins at `offset`, or None when it cannot be read there."""
    try:
        fd = os.open(path, _COUNT_FLAGS)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.pread(fd, HELLO_READ_BYTES, offset)
    except OSError:
        return None
    finally:
        os.close(fd)
    # The line that starts there, as every reader cuts lines; its time is read however else the
    # hello may be wrong (`show` gives a waiting stream's age, whatever a pass refused in it).
    hello = line_at(complete_lines(lambda size, at: head[at - offset :][:size], offset), offset)
    if hello is None or isinstance(hello.raw, MalformedLine):
        return None
    try:
        value = orjson.loads(hello.raw)
        time = value["time"] if isinstance(value, dict) and value.get("type") == "hello" else None
        found = datetime.fromisoformat(time) if isinstance(time, str) else None
    except (orjson.JSONDecodeError, ValueError):
        return None
    # The line may have changed since a pass judged it: a time with no UTC offset is no instant.
    return found if found is not None and found.tzinfo is not None else None


def book_lag(
    book: Row,
    attempts: Sequence[Row],
    unnamed: Sequence[Row] = (),
    *,
    lines_bytes_max: int | None = None,
) -> Lag:
    """The lag of one book from its row (`statements.BOOKS_*`), its attempts' rows
    (`statements.ATTEMPTS_LAG_OF_BOOKS`) and its streams not named
    (`statements.UNNAMED_STARTS_OF_BOOKS`)."""
    path = Path(book["path"]) / JOURNAL_NAME
    refused = missing = False
    try:
        found = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        size, identity, missing = 0, None, True
    except OSError:
        size, identity, refused = 0, None, True
    else:
        regular = stat.S_ISREG(found.st_mode)
        size, identity = (found.st_size, file_identity(found)) if regular else (0, None)
        refused = not regular
    cursor = min(_cursor(book, attempts, identity), size)
    holds = _holds(path, attempts, unnamed, identity) if size else ()
    start = min([cursor, *(min(hold.offset, size) for hold in holds)])
    unread, exact = count_lines(path, cursor, size, lines_bytes_max)
    held, held_exact = count_lines(path, start, cursor, lines_bytes_max)
    refused = refused or (not exact and unread == 0 and cursor < size)
    applied = [row["last_applied_at"] for row in attempts if row["last_applied_at"] is not None]
    last_applied_at = max(applied) if applied else None
    age_s = None
    if last_applied_at is not None:
        now: datetime = attempts[0]["now"]
        age_s = max(0.0, (now - last_applied_at).total_seconds())
    # Only a missing journal needs it (one more stat, of the directory, only then).
    awaited = missing and awaits_lines(
        (row["state"] for row in attempts),
        journal_read=book["scan_file"] is not None
        or last_applied_at is not None
        or not os.path.isdir(book["path"]),
    )
    return Lag(
        bytes=size - start,
        lines=held + unread,
        lines_exact=exact and held_exact,
        last_applied_at=last_applied_at,
        age_s=age_s,
        file_size=size,
        cursor_offset=start,
        journal_refused=refused,
        journal_missing=missing,
        lines_awaited=awaited,
        lines_unread=unread,
        holds=holds,
        attempts=tuple((row["state"], row["error_kind"]) for row in attempts),
    )


def lag_of_books(
    db: Database, books: Sequence[Row], *, lines_bytes_max: int | None = None
) -> dict[str, Lag]:
    """The lag of each book (rows as `statements.BOOKS_BY_ID` returns them), by book id."""
    lags: dict[str, Lag] = {}
    for first in range(0, len(books), LAG_PAGE_BOOKS):
        page = books[first : first + LAG_PAGE_BOOKS]
        attempts: dict[str, list[Row]] = {book["book_id"]: [] for book in page}
        unnamed: dict[str, list[Row]] = {book["book_id"]: [] for book in page}
        for row in db.fetch_all(statements.ATTEMPTS_LAG_OF_BOOKS, (list(attempts),)):
            attempts[row["book_id"]].append(row)
        named_mode = [book["book_id"] for book in page if book["scan_mode"] == "named"]
        if named_mode:
            for row in db.fetch_all(statements.UNNAMED_STARTS_OF_BOOKS, (named_mode,)):
                unnamed[row["book_id"]].append(row)
        for book in page:
            book_id = book["book_id"]
            lags[book_id] = book_lag(
                book, attempts[book_id], unnamed[book_id], lines_bytes_max=lines_bytes_max
            )
    return lags

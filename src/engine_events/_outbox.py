"""The outbox table: storing an event's line in the host's transaction, and reading streams back.

Each row carries a running summary of its stream (see `_sql.MIGRATIONS`), so the state of a stream —
its last seq, how far it was projected, where its latest progress/spend/ceiling/finished are — is the
last row's, read with one index seek and always consistent with the host's transaction: a rolled-back
event takes its summary with it.

Since schema 2 a stream also has a summary row of its own, a copy of a last row's summary with the
lines it points at, refreshed when the stream starts and whenever its watermark is recorded (start,
repair, close), never per event. Whichever of the two is further along is the stream's state, so a
stream whose outbox rows were pruned still reports the same. A row may be pruned only once its
stream's summary row was refreshed to the stream's last row: `_prune` does that in the transaction
that deletes it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from . import _sql
from ._events import Event
from ._line import encode_line, now_time
from ._sqlite import translate, translated
from .errors import BookDatabaseError, EventError


@dataclass(frozen=True)
class StreamState:
    stream_no: int
    engine_run_id: str
    book_id: str
    last_seq: int
    projected_seq: int
    """How far the stream is known to be durable in the journal, as recorded in SQLite."""
    latest: dict[str, int] = field(default_factory=dict)
    """Event type -> seq of the stream's latest event of that type (for `SUMMARY_TYPES`)."""


_EMPTY = (0, 0, None, None, None, None)
_NO_SUMMARY = (0, None, None, None, None, None, None, None, None)


def _last_row(
    conn: sqlite3.Connection, stream_no: int
) -> tuple[int, int, int | None, int | None, int | None, int | None]:
    row = conn.execute(_sql.OUTBOX_LAST, {"stream_no": stream_no}).fetchone()
    return _EMPTY if row is None else row


_SUMMARY_KEYS = tuple(f"{kind}_seq" for kind in _sql.SUMMARY_TYPES)
"""The insert's parameter names of the running summary, in the order of `SUMMARY_TYPES`."""
_SUMMARY_INDEX = {kind: index for index, kind in enumerate(_sql.SUMMARY_TYPES)}


def store(
    conn: sqlite3.Connection,
    stream_no: int,
    event: Event,
    projected_seq: int,
    *,
    after_seq: int = 0,
) -> tuple[int, bytes]:
    """Store `event` as the next line of the stream, inside the caller's open transaction.

    `projected_seq` is how far the stream is durable in the journal now; it is recorded in the row.
    Returns the seq and the exact line bytes. The line is encoded before anything is written, so an
    event that cannot be a line (too long) leaves the transaction untouched.

    `after_seq` is the seq the caller expects the stream's last row to have (0: unknown). When the
    outbox bears it out, the row goes in with one statement (`OUTBOX_APPEND`, which carries the
    running summary over from that row itself); when it does not (a rollback took rows away),
    nothing was written and the row goes in as without it: the last row read, then inserted.

    Once per event: it runs under `translated()` semantics, written out as a `try` (the decorator
    costs about a microsecond a call).
    """
    try:
        if after_seq > 0:
            seq = after_seq + 1
            try:
                line = encode_line(seq, event, now_time())
            except EventError:
                pass  # decided below with the stream's real next seq (a line's length has it)
            else:
                appended = conn.execute(
                    _sql.OUTBOX_APPEND,
                    {
                        "stream_no": stream_no,
                        "seq": seq,
                        "type": event.type,
                        "line": line,
                        "projected_seq": projected_seq,
                    },
                ).rowcount
                if appended == 1:
                    return seq, line
        row = conn.execute(_sql.OUTBOX_LAST, {"stream_no": stream_no}).fetchone() or _EMPTY
        last_seq: int = row[0]
        last_projected: int = row[1]
        latest: list[int | None] = list(row[2:])
        seq = last_seq + 1
        kind = event.type
        line = encode_line(seq, event, now_time())
        index = _SUMMARY_INDEX.get(kind)
        if index is not None:
            latest[index] = seq
        parameters: dict[str, object] = dict(zip(_SUMMARY_KEYS, latest, strict=True))
        parameters["stream_no"] = stream_no
        parameters["seq"] = seq
        parameters["type"] = kind
        parameters["line"] = line
        parameters["projected_seq"] = min(max(last_projected, projected_seq), last_seq)
        conn.execute(_sql.OUTBOX_INSERT, parameters)
    except sqlite3.Error as error:
        if isinstance(error, BookDatabaseError):
            raise
        raise translate(error) from error
    return seq, line


@translated()
def streams(conn: sqlite3.Connection, *, summaries: bool = True) -> list[StreamState]:
    """Every stream of the book, oldest first, with its state as of its last committed row, or
    as of its summary row when that is further along (its rows were pruned). `summaries`: whether
    the database has summary rows (schema 2 and later)."""
    summary_rows = (
        {row[0]: row[1:] for row in conn.execute(_sql.SUMMARY_ALL).fetchall()} if summaries else {}
    )
    states = []
    for stream_no, engine_run_id, book_id, recorded_projected in conn.execute(
        _sql.STREAMS_ALL
    ).fetchall():
        last_seq, row_projected, *latest = _last_row(conn, stream_no)
        summary = summary_rows.get(stream_no)
        if summary is not None and summary[0] > last_seq:
            last_seq, *latest = summary
            row_projected = 0  # only the recorded watermark speaks for pruned rows
        states.append(
            StreamState(
                stream_no=stream_no,
                engine_run_id=engine_run_id,
                book_id=book_id,
                last_seq=last_seq,
                projected_seq=min(max(recorded_projected, row_projected), last_seq),
                latest={
                    kind: seq
                    for kind, seq in zip(_sql.SUMMARY_TYPES, latest, strict=True)
                    if seq is not None
                },
            )
        )
    return states


@translated()
def line_at(conn: sqlite3.Connection, stream_no: int, seq: int) -> bytes:
    row = conn.execute(_sql.OUTBOX_LINE, {"stream_no": stream_no, "seq": seq}).fetchone()
    if row is None:
        raise LookupError(f"no outbox row ({stream_no}, {seq})")
    return bytes(row[0])


@translated()
def latest_line(
    conn: sqlite3.Connection, state: StreamState, kind: str, *, summaries: bool = True
) -> bytes | None:
    """The line of the stream's latest event of `kind` (one of `SUMMARY_TYPES`), or None: from
    the outbox, or from the stream's summary row once the outbox row is pruned."""
    seq = state.latest.get(kind)
    if seq is None:
        return None
    try:
        return line_at(conn, state.stream_no, seq)
    except LookupError:
        if not summaries:
            raise
    summary = _summary_row(conn, state.stream_no)
    index = _sql.SUMMARY_TYPES.index(kind)
    line = summary[5 + index]
    if summary[1 + index] != seq or line is None:
        raise LookupError(f"no line of stream {state.stream_no} at seq {seq}")
    return bytes(line)


@translated()
def finished_seq(conn: sqlite3.Connection, stream_no: int) -> int | None:
    """The seq of the stream's `finished`, or None: from its last row, or from its summary row
    once every row of the stream is pruned. Read inside the caller's transaction, it sees that
    transaction's own rows."""
    index = _sql.SUMMARY_TYPES.index("finished")
    row = conn.execute(_sql.OUTBOX_LAST, {"stream_no": stream_no}).fetchone()
    seq = row[2 + index] if row is not None else _summary_row(conn, stream_no)[1 + index]
    return None if seq is None else int(seq)


def _summary_row(conn: sqlite3.Connection, stream_no: int) -> tuple[Any, ...]:
    row = conn.execute(_sql.SUMMARY_GET, {"stream_no": stream_no}).fetchone()
    return _NO_SUMMARY if row is None else tuple(row)


@translated()
def refresh_summary(conn: sqlite3.Connection, stream_no: int) -> None:
    """Bring the stream's summary row up to its last outbox row, inside the caller's transaction.

    Reads only the lines that changed since the last refresh, and writes nothing when the summary
    is already that far (or the stream's rows are gone)."""
    last_seq, _, *latest = _last_row(conn, stream_no)
    summary = _summary_row(conn, stream_no)
    if last_seq == 0 or summary[0] >= last_seq:
        return
    values: dict[str, object] = {"stream_no": stream_no, "last_seq": last_seq}
    for index, (kind, seq) in enumerate(zip(_sql.SUMMARY_TYPES, latest, strict=True)):
        if seq is None:
            line = None
        elif summary[1 + index] == seq:
            line = summary[5 + index]
        else:
            line = line_at(conn, stream_no, seq)
        values[f"{kind}_seq"] = seq
        values[f"{kind}_line"] = line
    conn.execute(_sql.SUMMARY_UPSERT, values)


@translated()
def record_projected(
    conn: sqlite3.Connection, projected: dict[int, int], *, summaries: bool = True
) -> None:
    """Record how far each stream is projected, in a transaction of its own (start, close,
    repair), and bring each one's summary row up to date with it (`summaries`: schema 2 on)."""
    conn.execute(_sql.BEGIN_IMMEDIATE)
    try:
        for stream_no, projected_seq in projected.items():
            conn.execute(
                _sql.STREAM_PROJECTED_SET, {"stream_no": stream_no, "projected_seq": projected_seq}
            )
            if summaries:
                refresh_summary(conn, stream_no)
    except BaseException:
        conn.rollback()
        raise
    conn.commit()

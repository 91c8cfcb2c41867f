"""The outbox table: storing an event's line in the host's transaction, and reading streams back.

Each row carries a running summary of its stream (see `_sql.MIGRATIONS`), so the state of a stream —
its last seq, how far it was projected, where its latest progress/spend/ceiling/finished are — is the
last row's, read with one index seek and always consistent with the host's transaction: a rolled-back
event takes its summary with it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from . import _sql
from ._events import Event
from ._line import encode_line, now_time


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


def _last_row(
    conn: sqlite3.Connection, stream_no: int
) -> tuple[int, int, int | None, int | None, int | None, int | None]:
    row = conn.execute(_sql.OUTBOX_LAST, {"stream_no": stream_no}).fetchone()
    return _EMPTY if row is None else row


def store(
    conn: sqlite3.Connection, stream_no: int, event: Event, projected_seq: int
) -> tuple[int, bytes]:
    """Store `event` as the next line of the stream, inside the caller's open transaction.

    `projected_seq` is how far the stream is durable in the journal now; it is recorded in the row.
    Returns the seq and the exact line bytes. The line is encoded before anything is written, so an
    event that cannot be a line (too long) leaves the transaction untouched.
    """
    last_seq, last_projected, *latest = _last_row(conn, stream_no)
    seq = last_seq + 1
    line = encode_line(seq, event, now_time())
    summary = dict(zip(_sql.SUMMARY_TYPES, latest, strict=True))
    if event.type in summary:
        summary[event.type] = seq
    conn.execute(
        _sql.OUTBOX_INSERT,
        {
            "stream_no": stream_no,
            "seq": seq,
            "type": event.type,
            "line": line,
            "projected_seq": min(max(last_projected, projected_seq), last_seq),
            **{f"{kind}_seq": value for kind, value in summary.items()},
        },
    )
    return seq, line


def streams(conn: sqlite3.Connection) -> list[StreamState]:
    """Every stream of the book, oldest first, with its state as of its last committed row."""
    states = []
    for stream_no, engine_run_id, book_id, recorded_projected in conn.execute(
        _sql.STREAMS_ALL
    ).fetchall():
        last_seq, row_projected, *latest = _last_row(conn, stream_no)
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


def line_at(conn: sqlite3.Connection, stream_no: int, seq: int) -> bytes:
    row = conn.execute(_sql.OUTBOX_LINE, {"stream_no": stream_no, "seq": seq}).fetchone()
    if row is None:
        raise LookupError(f"no outbox row ({stream_no}, {seq})")
    return bytes(row[0])


def record_projected(conn: sqlite3.Connection, projected: dict[int, int]) -> None:
    """Record how far each stream is projected, in a transaction of its own (start, close, repair)."""
    conn.execute(_sql.BEGIN_IMMEDIATE)
    try:
        for stream_no, projected_seq in projected.items():
            conn.execute(
                _sql.STREAM_PROJECTED_SET, {"stream_no": stream_no, "projected_seq": projected_seq}
            )
    except BaseException:
        conn.rollback()
        raise
    conn.commit()

"""Retention: the outbox rows the engine no longer needs, deleted a bounded batch at a time.

An outbox row is needed until its line is durably in the journal (recovery appends it from the
row, or recognises it at the end of the file by the row's bytes), and while its stream may still
grow (the stream's last row gives the next seq and says whether `finished` was stored). After that
it is a copy of a line the file holds, kept only as long as the host wants. A row is pruned when
all of these hold:

- it is in the file, fsynced: its seq is at most its stream's *recorded* watermark, which is only
  ever recorded after the fsync (at start-up, at close, by a repair). The rows past it, not yet
  projected or at the end of the file where recovery must recognise them, stay.
- its stream cannot grow: it belongs to an earlier process, or it ended with `finished`.
- it is older than the retention by the `time` on its line, and so is every earlier row of its
  stream: a stream loses its rows oldest first, and what is left of it stays dense.

In the transaction that deletes a stream's rows, the stream's summary row is first brought up to
the stream's last row (`_outbox.refresh_summary`), so the status report reads from it what it read
from the rows. Nothing else is written: no watermark, nothing `status --json` shows.

One call deletes at most `rows_max` rows and about `bytes_max` bytes, in the caller's open
transaction or in one of its own, so that it never holds the write lock for long; a full batch says
so (`PruneResult.limit_reached`) and the caller calls again.
"""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
from dataclasses import dataclass

from . import _outbox, _sql
from ._line import format_time
from ._sqlite import translated
from .errors import RetentionInvalid

PRUNE_ROWS_MAX = 1000
PRUNE_BYTES_MAX = 8 * 1024 * 1024
"""One prune deletes at most this many rows and (about) this many bytes of lines."""

_TIME_OF_A_ROW = re.compile(
    rb'\{"seq":[0-9]+,"type":"(?:[^"\\]|\\.)*",'
    rb'"time":"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z)"'
)
"""How every line the emitter writes starts, up to its `time` (keys in the order seq, type, time).
Times of that one fixed-width shape sort as strings the way they sort in time."""


@dataclass(frozen=True)
class PruneResult:
    """What one prune did."""

    rows_deleted: int
    streams_touched: int
    """How many streams lost at least one row."""
    limit_reached: bool
    """The batch was full: more rows may be prunable now, and another call prunes them."""


def require_retention(retention: object) -> dt.timedelta:
    """`retention` if it is a `datetime.timedelta` of zero or more; else `RetentionInvalid`."""
    if not isinstance(retention, dt.timedelta):
        raise RetentionInvalid(
            f"retention must be a datetime.timedelta (or None to keep every row), "
            f"got {type(retention).__name__}"
        )
    if retention < dt.timedelta(0):
        raise RetentionInvalid(f"retention must not be negative, got {retention}")
    return retention


def wall_clock() -> dt.datetime:
    """Now, by the clock the lines' `time` comes from (`_line.now_time`)."""
    return dt.datetime.now(dt.UTC)


@translated()
def prune(
    conn: sqlite3.Connection,
    *,
    retention: dt.timedelta,
    live_stream_no: int | None,
    rows_max: int = PRUNE_ROWS_MAX,
    bytes_max: int = PRUNE_BYTES_MAX,
) -> PruneResult:
    """Delete one bounded batch of the rows that may go (see the module), in the caller's open
    transaction, or else in one of its own. `live_stream_no` is the stream the calling process
    writes (None: none), pruned only once it is finished."""
    require_retention(retention)
    if isinstance(rows_max, bool) or not isinstance(rows_max, int) or rows_max < 1:
        raise ValueError(f"max_rows must be an integer of 1 or more, got {rows_max!r}")
    try:
        cutoff = format_time(wall_clock() - retention).encode()
    except OverflowError:  # a retention reaching back before year 1: no row is that old
        return PruneResult(0, 0, limit_reached=False)
    batch = _Batch(conn, cutoff, live_stream_no, rows_max, bytes_max)
    if conn.in_transaction:
        return batch.run()
    conn.execute(_sql.BEGIN_IMMEDIATE)
    try:
        result = batch.run()
    except BaseException:
        conn.rollback()
        raise
    conn.commit()
    return result


class _Batch:
    """One prune's walk over the streams that still have rows, oldest stream first."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        cutoff: bytes,
        live_stream_no: int | None,
        rows_max: int,
        bytes_max: int,
    ) -> None:
        self._conn = conn
        self._cutoff = cutoff
        """A row whose `time` is at or before this is older than the retention."""
        self._live_stream_no = live_stream_no
        self._rows_left = rows_max
        self._bytes_left = bytes_max

    def run(self) -> PruneResult:
        deleted = touched = 0
        from_stream_no = 0
        while self._rows_left > 0 and self._bytes_left > 0:
            first = self._conn.execute(
                _sql.OUTBOX_FIRST_FROM, {"stream_no": from_stream_no}
            ).fetchone()
            if first is None:
                break
            stream_no, first_seq = first
            from_stream_no = stream_no + 1
            (recorded_seq,) = self._conn.execute(
                _sql.STREAM_PROJECTED_GET, {"stream_no": stream_no}
            ).fetchone()
            if recorded_seq < first_seq or not self._may_shrink(stream_no):
                continue
            through_seq = self._old_rows_through(stream_no, recorded_seq)
            if through_seq < first_seq:
                continue
            # The summary first, from rows that are all still there: status then reads the same.
            # Recording the watermark already brought it this far; doing it here again keeps the
            # deletion safe on its own, whatever recorded that watermark.
            _outbox.refresh_summary(self._conn, stream_no)
            count = self._conn.execute(
                _sql.OUTBOX_PRUNE, {"stream_no": stream_no, "through_seq": through_seq}
            ).rowcount
            deleted += count
            touched += 1
            self._rows_left -= count
        return PruneResult(
            deleted, touched, limit_reached=self._rows_left <= 0 or self._bytes_left <= 0
        )

    def _may_shrink(self, stream_no: int) -> bool:
        """Whether the stream can grow no more: an earlier process's, or finished."""
        if stream_no != self._live_stream_no:
            return True
        return _outbox.finished_seq(self._conn, stream_no) is not None

    def _old_rows_through(self, stream_no: int, recorded_seq: int) -> int:
        """The seq of the last of the stream's oldest rows, none past `recorded_seq`, that are all
        older than the retention and fit in what is left of the batch (0: none). Counts their
        bytes against the batch."""
        through_seq = 0
        rows = self._conn.execute(
            _sql.OUTBOX_OLDEST,
            {"stream_no": stream_no, "through_seq": recorded_seq, "limit": self._rows_left},
        )
        try:
            for seq, line in rows:  # one line at a time: a line may be up to 1 MiB
                stored_at = _TIME_OF_A_ROW.match(line)
                if stored_at is None or stored_at.group(1) > self._cutoff:
                    break
                through_seq = seq
                self._bytes_left -= len(line)
                if self._bytes_left <= 0:
                    break
        finally:
            rows.close()
        return int(through_seq)

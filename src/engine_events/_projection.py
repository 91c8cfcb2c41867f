"""The projection: committed outbox rows appended to the journal in order, and the watermark.

Rows are projected in (stream, seq) order; a stream's `projected_seq` says how far its rows are known
to be durable in the file. The watermark may lag behind the file (it is recorded for free in the next
outbox row, see `_outbox.store`), never run ahead of it: a row past the watermark is either not in
the file or at its very end, where recovery finds it instead of appending it twice.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from . import _outbox, _sql
from ._journal_file import JournalFile

BATCH_LINES_MAX = 512
BATCH_BYTES_MAX = 8 * 1024 * 1024
"""One write()+fsync carries at most this many lines and (about) this many bytes."""

_RECOVERY_MATCH_BYTES_MAX = 16 * 1024 * 1024
"""How far back recovery looks for rows already at the end of the file (the watermark's lag)."""


@dataclass
class _Row:
    stream_no: int
    seq: int
    line: bytes


class Projector:
    """Appends committed rows of the host's database to the journal file."""

    def __init__(self, conn: sqlite3.Connection, journal: JournalFile) -> None:
        self._conn = conn
        self._journal = journal
        self.projected: dict[int, int] = {}
        """stream_no -> projected seq known to be durable in the file (may be ahead of SQLite)."""

    def load_watermarks(self) -> list[tuple[int, int]]:
        """Read the recorded watermarks; return the streams that have rows left to project."""
        pending = [
            (state.stream_no, state.projected_seq)
            for state in _outbox.streams(self._conn)
            if state.projected_seq < state.last_seq
        ]
        for stream_no, projected_seq in pending:
            self.projected[stream_no] = max(self.projected.get(stream_no, 0), projected_seq)
        return pending

    def project_stream(self, stream_no: int) -> int:
        """Append every committed row of one stream past its watermark; return the lines written.

        Raises OSError when the file cannot be written; what was appended before stays counted.
        """
        written = 0
        while True:
            after = self.projected.get(stream_no, 0)
            rows = self._conn.execute(
                _sql.OUTBOX_AFTER,
                {"stream_no": stream_no, "after_seq": after, "limit": BATCH_LINES_MAX},
            )
            lines: list[bytes] = []
            size = 0
            last_seq = after
            for seq, line in rows:
                if seq != last_seq + 1:  # the outbox is dense by construction; never skip a hole
                    raise RuntimeError(f"outbox hole in stream {stream_no}: {last_seq} then {seq}")
                lines.append(bytes(line))
                size += len(line)
                last_seq = seq
                if size >= BATCH_BYTES_MAX:
                    break
            rows.close()
            if not lines:
                return written
            self._journal.append(b"".join(lines))
            self.projected[stream_no] = last_seq
            written += len(lines)

    def recover(self) -> int:
        """Start-up step (2): append the committed rows not yet projected, of every stream, in
        order, skipping those a crash left durable at the end of the file. Returns lines written."""
        pending = self.load_watermarks()
        found = self._rows_already_at_end(pending)
        if found:
            # They may be a dead process's lines that never reached its fsync, in the page cache
            # only: made durable before they count as projected, or a power cut after the
            # watermark is recorded would lose them for good (nothing would append them again).
            self._journal.sync()
            for row in found:
                self.projected[row.stream_no] = row.seq
        written = 0
        for stream_no, _ in pending:
            written += self.project_stream(stream_no)
        return written

    def record_watermarks(self) -> None:
        """Record every stream's watermark in its own transaction (start-up, repair, close)."""
        _outbox.record_projected(self._conn, self.projected)

    def _rows_already_at_end(self, pending: list[tuple[int, int]]) -> list[_Row]:
        """After a crash between the write and the watermark, the first unprojected rows may
        already be the last lines of the file. Return the longest such run."""
        last_line = self._journal.last_line()
        if last_line is None:
            return []
        candidates: list[_Row] = []
        size = 0
        for stream_no, projected_seq in pending:
            rows = self._conn.execute(
                _sql.OUTBOX_AFTER,
                {"stream_no": stream_no, "after_seq": projected_seq, "limit": BATCH_LINES_MAX},
            )
            for seq, line in rows:
                candidates.append(_Row(stream_no, seq, bytes(line)))
                size += len(line)
                if size > _RECOVERY_MATCH_BYTES_MAX:
                    break
            rows.close()
            if size > _RECOVERY_MATCH_BYTES_MAX:
                break
        ends = [index for index, row in enumerate(candidates) if row.line == last_line]
        for end in reversed(ends):
            run = b"".join(row.line for row in candidates[: end + 1])
            start = self._journal.size - len(run)
            if start < 0:
                continue
            before = self._journal.read_range(start - 1, start) if start > 0 else b"\n"
            if before == b"\n" and self._journal.read_range(start, self._journal.size) == run:
                return candidates[: end + 1]
        return []

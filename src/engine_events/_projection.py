"""The projection: committed outbox rows appended to the journal in order, and the watermark.

Rows are projected in (stream, seq) order; a stream's `projected_seq` says how far its rows are known
to be durable in the file. The watermark may lag behind the file (it is recorded for free in the next
outbox row, see `_outbox.store`), never run ahead of it: a row past the watermark is either not in
the file or at its end — last, or followed only by repeated regions of the file — where recovery
finds it instead of appending it twice, however many rows and bytes that end holds.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

from . import _outbox, _sql
from ._journal_file import JournalFile
from ._sqlite import translated

BATCH_LINES_MAX = 512
BATCH_BYTES_MAX = 8 * 1024 * 1024
"""One write()+fsync carries at most this many lines and (about) this many bytes."""

_SEQ_OF_A_ROW = re.compile(rb'\{"seq":([1-9][0-9]{0,18}),')
"""How every line the emitter writes starts: enough to name the row the file's last line may be."""
_HELLO_START = b'{"seq":1,"type":"hello",'
"""How every hello the emitter writes starts (keys in order, compact JSON)."""


@dataclass(frozen=True)
class Pending:
    """A stream with committed rows past its watermark: `projected_seq` < seq <= `last_seq`."""

    stream_no: int
    projected_seq: int
    last_seq: int


class Projector:
    """Appends committed rows of the host's database to the journal file."""

    def __init__(
        self, conn: sqlite3.Connection, journal: JournalFile, *, summaries: bool = True
    ) -> None:
        self._conn = conn
        self._journal = journal
        self._summaries = summaries
        """Whether the database has stream summary rows (schema 2 on) to read and keep."""
        self.projected: dict[int, int] = {}
        """stream_no -> projected seq known to be durable in the file (may be ahead of SQLite)."""

    @translated()
    def load_watermarks(self) -> list[Pending]:
        """Read the recorded watermarks; return the streams that have rows left to project."""
        pending = [
            Pending(state.stream_no, state.projected_seq, state.last_seq)
            for state in _outbox.streams(self._conn, summaries=self._summaries)
            if state.projected_seq < state.last_seq
        ]
        for stream in pending:
            self.projected[stream.stream_no] = max(
                self.projected.get(stream.stream_no, 0), stream.projected_seq
            )
        return pending

    @translated()
    def project_stream(self, stream_no: int) -> int:
        """Append every committed row of one stream past its watermark; return the lines written.

        One read per batch: a batch that ends short of both bounds ends the stream, so a flush
        after a checkpoint reads the outbox once, not once more to find nothing.

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
            if len(lines) < BATCH_LINES_MAX and size < BATCH_BYTES_MAX:
                # The read stopped at the stream's last committed row, not at a bound: nothing
                # is left (only this process writes the outbox, and not while it projects).
                return written

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
            self.projected.update(found)
        written = 0
        for stream in pending:
            written += self.project_stream(stream.stream_no)
        return written

    def record_watermarks(self) -> None:
        """Record every stream's watermark, and refresh its summary row, in a transaction of
        their own (start-up, repair, close)."""
        _outbox.record_projected(self._conn, self.projected, summaries=self._summaries)

    def _rows_already_at_end(self, pending: list[Pending]) -> dict[int, int]:
        """After a crash between the write and the watermark, the first unprojected rows may
        already be the last lines of the file. Find the longest such run; return, for each stream
        it covers, the seq of its last row in the file.

        The unprojected rows, all streams in projection order, are R; the file can only end with
        a prefix of R (or with none of it), possibly followed by repeated regions of the file. The
        file's last line names the row that would end that prefix: one candidate per pending
        stream, its row at that seq. Each candidate is checked from its row back to the start of
        R, row bytes against the file's bytes read backwards in bounded windows, the latest
        stream's first (the longest run). Memory stays bounded whatever the run's length; the
        cost is one read of the run, from SQLite and from the file, which the fsync that follows
        reads anyway. When no run is found that way (a repeated region follows it), a candidate
        whose stream's hello is in the file ends the run (`_stream_is_the_files_last`).
        """
        last_line = self._journal.last_line()
        if last_line is None:
            return {}
        match = _SEQ_OF_A_ROW.match(last_line)
        if match is None:
            return {}
        seq = int(match.group(1))
        candidates = [
            index
            for index in reversed(range(len(pending)))
            if pending[index].projected_seq < seq <= pending[index].last_seq
            and _outbox.line_at(self._conn, pending[index].stream_no, seq) == last_line
        ]
        for index in candidates:
            if self._run_ends_the_file(pending[:index], pending[index], seq):
                return self._found(pending, index, seq)
        # A region of the file written again after the run (a repeat of lines from a line start
        # to the end) hides the run from the walk, yet the file still ends with the run's last
        # row. Appending the run again would put an earlier stream's rows after a later stream's
        # hello, where every reader takes them for that stream's lines.
        for index in candidates:
            if self._stream_is_the_files_last(pending[index], seq):
                return self._found(pending, index, seq)
        return {}

    @staticmethod
    def _found(pending: list[Pending], index: int, seq: int) -> dict[int, int]:
        """The run that ends with row `seq` of `pending[index]`: every earlier stream whole."""
        found = {stream.stream_no: stream.last_seq for stream in pending[:index]}
        found[pending[index].stream_no] = seq
        return found

    def _stream_is_the_files_last(self, stream: Pending, seq: int) -> bool:
        """Whether the file's last line, the bytes of row `seq` of `stream`, is that row, not a
        look-alike of another stream's: whether the stream's hello is in the file. Then every row
        before it in projection order is in the file too: rows reach the file only in that order
        (a stream's hello only once every earlier row is durable there), and a repeated region
        copies lines already in it and ends with the file's last line.

        A hello names its stream (`engine_run_id`), so no other row has its bytes. A watermark of
        1 or more says the hello is durable in the file; a later stream with lines in the file
        then has none recorded (its lines came after this stream's last), so it was the candidate
        tried first. Otherwise the stream's hello must be the file's last one, found by reading
        back over the stream's own lines only.
        """
        if seq == 1 or stream.projected_seq >= 1:
            return True
        hello = _outbox.line_at(self._conn, stream.stream_no, 1)
        return self._journal.last_line_starting_with(_HELLO_START) == hello

    def _run_ends_the_file(self, earlier: list[Pending], stream: Pending, seq: int) -> bool:
        """Whether the file ends, at a line boundary, with the unprojected rows of `earlier`
        streams whole and those of `stream` up to `seq`."""
        segments = [(stream.stream_no, stream.projected_seq, seq)] + [
            (other.stream_no, other.projected_seq, other.last_seq) for other in reversed(earlier)
        ]
        with self._journal.tail() as tail:
            for stream_no, after_seq, through_seq in segments:
                for line in self._rows_backwards(stream_no, after_seq, through_seq):
                    if not tail.step_back_over(line):
                        return False
            return tail.at_line_start()

    def _rows_backwards(self, stream_no: int, after_seq: int, through_seq: int) -> Iterator[bytes]:
        """The lines of rows `after_seq` < seq <= `through_seq` of a stream, the last one first,
        read in batches."""
        while through_seq > after_seq:
            with translated():
                rows = self._conn.execute(
                    _sql.OUTBOX_BEFORE,
                    {
                        "stream_no": stream_no,
                        "after_seq": after_seq,
                        "through_seq": through_seq,
                        "limit": BATCH_LINES_MAX,
                    },
                ).fetchall()
            for row_seq, line in rows:
                if row_seq != through_seq:  # dense by construction, as in project_stream
                    raise RuntimeError(f"outbox hole in stream {stream_no} at seq {through_seq}")
                yield bytes(line)
                through_seq -= 1
            if not rows:
                raise RuntimeError(f"outbox hole in stream {stream_no} at seq {through_seq}")

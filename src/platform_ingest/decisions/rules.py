"""What each line does to its stream's cursor, as a pure decision core.

The rules are those of docs/reference/stream-format.md ("What a reader does with what it finds")
and docs/platform/cursor.md.

`StreamRules` decides over an explicit state value, a `BookState` (the book, its runs and their
attempts as a pass loaded them), and asks a `History` what was applied at an earlier seq. It
does no I/O: the pass (`book_pass`) reads the journal, hands each line to `take`, and writes what was
decided (`take_batch`) with the cursors in one transaction. The same rules run over journals in
memory in the tests, and the same cases run against Postgres as a contract test.

- a line of a stream the pass follows: `seq == last_seq + 1` is applied (`apply`), `seq <=
  last_seq` is a duplicate compared with the sha256 applied at that seq — ANY earlier seq, looked
  up in the batch or through the `History` (`_duplicate`), and `seq > last_seq + 1` is a gap
  that stalls the attempt;
- a hello enters its stream's part of the file (`_hello`): in auto mode a new stream gets an
  attempt (`_new_attempt`); in named mode a stream with no attempt is foreign (`_foreign`): skipped
  while none of ours is live, else the pass stops there and our attempt is parked;
- a line that does not decode quarantines its stream, a hello of another major refuses it, a hello
  of another book quarantines it; a line before any hello is recorded on the book;
- a stream whose run was pruned is skipped; in named mode, where each foreign stream begins is
  recorded (`Batch.starts`), so that naming it later reads from there and not from byte 0;
- a line of a compacted range (seqs whose own hashes were compacted into one digest) read again
  is judged by the digest the range's lines build in seq order (`_replayed`, and the guarantee in
  docs/platform/cursor.md).

Every decision changes the views (attempts, runs) and adds to the current `Batch`.
"""

from __future__ import annotations

from hashlib import sha256

from engine_events.grammar import MalformedLine, reads_major

from ..errors import LineRefused, UnsupportedVersion
from ..journal.decode import decode_line
from ..journal.hint import Hint
from ..journal.line import Line
from ..journal.sections import read_line, stream_started
from .batch import Batch, BatchHashes
from .book_state import BookState, History, stream_position
from .problems import (
    ProblemRecord,
    book_mismatch,
    foreign_stream_ahead,
    line_after_finished,
    line_before_hello,
    line_outside_stream,
    payload_conflict,
    sequence_gap,
)
from .replay import Replays
from .runs import RunView, StateEffect
from .views import (
    FOLLOWED_STATES,
    LIVE_STATES,
    RELEASABLE_STATES,
    STOPPED_STATES,
    AttemptView,
    Mode,
    PassProblem,
    state_for_problem,
)

UNKNOWN_SEEN = 2**63
"""`StreamRules.seen_here` when what lies before the reading's start is not known: above every
seq, so it neither grows nor finds a hole."""
STREAM_STARTS_MAX = 1024
"""How many foreign stream starts a book keeps; past this, naming a stream reads from byte 0."""


class StreamRules:
    """The per-line decisions of one pass over one book.

    `take` decides one line; `stopped` and `parked` say the pass must stop; `take_batch` hands
    over what was decided since the last call. `lines_read`, `duplicates`, `unverified` and
    `problems` count and list for the pass's report, and `scan_hint` is where the book's scan
    hint may move (just past the last line decided, unless a compacted range is being read).
    """

    def __init__(
        self,
        state: BookState,
        mode: Mode,
        history: History,
        *,
        identity: str = "",
        keep_applied: bool = False,
    ) -> None:
        self.state = state
        self.keep_applied = keep_applied
        """Keep each applied line's event in the batch (projections are installed)."""
        self.book = state.book
        self.runs = state.runs
        self.attempts = state.attempts
        self.mode: Mode = mode
        self.history = history
        self.identity = identity
        """The journal's file identity, written into every hint the rules move."""
        self.section: str | None = None
        """The stream whose part of the file the line at hand lies in (None before any hello)."""
        self.section_attempt: AttemptView | None = None
        self.seen_here = UNKNOWN_SEEN
        """The highest seq of the section's stream read in this pass, its hello included
        (`UNKNOWN_SEEN`: the reading began inside that stream's part of the file, so what lies
        before is not known). A next seq is applied only after every seq before it was read: a
        file that lost applied lines (cut, then written on) holds a hole there, whatever the
        cursor says (`_hole_before`)."""
        self.seen: dict[str, int] = {}
        """`seen_here` of each stream whose section this pass left, for when it comes back."""
        self.start = 0
        """Where this pass began reading (`enter`)."""
        self.batch = Batch()
        self.batch_hashes = BatchHashes(self.batch)
        self.problems: list[PassProblem] = []
        self.book_problem_met = False
        """This pass met a line of no stream (`_book_problem`), recorded now or before."""
        self.duplicates = 0
        self.lines_read = 0
        self.replays = Replays()
        """The compacted ranges this pass reads again, and the one being read, if any."""
        self._starts_seen: set[str] = set()
        self._previous_section: str | None = None
        self.stopped = False
        self.parked = False
        self._decided_end = -1
        self._decided_size = 0
        self._decided_sha256 = b""

    # --- the rules' interface ---------------------------------------------------------------

    def revive_refused(self) -> list[AttemptView]:
        """Streams refused for a major this platform now reads go back to `pending`, their hint
        forgotten: reading them again from byte 0 applies them like any new stream."""
        revived = []
        for attempt in self.attempts.values():
            if attempt.state != "refused" or attempt.stream_version is None:
                continue
            if reads_major(attempt.stream_version):
                attempt.state, attempt.error = "pending", None
                attempt.forget_hint()
                self.batch.touch(attempt)
                revived.append(attempt)
        return revived

    def enter(self, section: str | None, *, start: int = 0) -> None:
        """Reading starts at byte `start`, inside `section`'s part of the file (None: before any
        hello). In named mode, a read from byte 0 records every foreign stream's start again."""
        self.section = section
        self.section_attempt = None if section is None else self.attempts.get(section)
        self.seen, self.seen_here = {}, UNKNOWN_SEEN
        self.start = start
        if start == 0 and self.mode == "named":
            self.book.starts_from_zero = True
            self.book.starts_recorded = 0
            self.batch.starts_reset = True
            self.batch.book_changed = True

    def take(self, offset: int, raw: bytes | MalformedLine) -> bool:
        """Decide the complete line at `offset` (or the over-long one the reader skipped).

        False when the line is not consumed and the pass must stop before it: a foreign hello
        ahead of our stream (named mode), or an over-long line that has no end yet.
        """
        # Every line of a journal comes through here: the usual one (decoded, of the stream being
        # followed) takes the shortest path; a refused or over-long line, the longer ones below.
        if type(raw) is not bytes:
            return self._take_unread(offset, raw)
        size = len(raw)
        digest = sha256(raw).digest()
        try:
            line = decode_line(raw)  # the usual line, on the shortest path
        except LineRefused as refused:
            if not (isinstance(refused, MalformedLine) and refused.reason == "wrong_keys"):
                return self._take_refused(offset, refused.at(offset), digest, size)
            try:  # perhaps a newer minor's envelope key: read as a line of the stream it lies in
                line = read_line(raw, self._section_version)
            except LineRefused as judged:
                return self._take_refused(offset, judged.at(offset), digest, size)
        self.lines_read += 1
        followed = self.section_attempt
        if followed is None or line.type == "hello" or followed.state not in FOLLOWED_STATES:
            self._other_line(line, digest, offset, size)
        elif followed.skips is not None and self._skip(followed, digest, offset, size):
            pass  # a line an operator skipped: the cursor passes it, with no effect
        elif line.seq == followed.last_seq + 1 and self.seen_here >= followed.last_seq:
            self._apply(followed, line, digest, offset, size)
        else:
            self._stream_line(followed, line, digest, offset, size)
        if line.seq > self.seen_here:  # noqa: PLR1730 (a compare, not a call: every line's path)
            self.seen_here = line.seq
        return self._decided(offset, size, digest, line.seq)

    def _section_version(self) -> str | None:
        """The version of the stream whose part of the file the line at hand lies in."""
        followed = self.section_attempt
        return None if followed is None else followed.stream_version

    def _take_unread(self, offset: int, raw: bytes | MalformedLine) -> bool:
        """An over-long line the reader skipped (its bytes never gathered)."""
        assert isinstance(raw, MalformedLine)  # the reader yields nothing else
        if raw.line_sha256 is None:  # no newline yet: report, do not consume
            self._refused(raw, offset, b"", 0)
            return False
        return self._take_refused(offset, raw, raw.line_sha256, raw.size_bytes)

    def _take_refused(self, offset: int, problem: LineRefused, digest: bytes, size: int) -> bool:
        """A complete line that did not decode (or was too long to)."""
        self.lines_read += 1
        followed = self.section_attempt
        started = stream_started(problem)
        if started is not None and not isinstance(problem, UnsupportedVersion):
            self._hello_refused(problem, started, offset, digest, size)
        elif (
            followed is not None
            and followed.skips is not None
            and followed.state in FOLLOWED_STATES
            and self._skip(followed, digest, offset, size)
        ):
            # A line an operator skipped: the cursor passes it, with no effect; it was read.
            self.seen_here = max(self.seen_here, followed.last_seq)
        else:
            self._refused(problem, offset, digest, size)
        return self._decided(offset, size, digest, problem.seq)

    def _decided(self, offset: int, size: int, digest: bytes, seq: int | None) -> bool:
        """The line was decided: the scan hint may move past it, and the batch counts it."""
        if self.stopped:
            return False
        self._decided_end, self._decided_size, self._decided_sha256 = offset + size, size, digest
        batch = self.batch
        batch.lines += 1
        batch.last_line = (self.section, seq, offset)
        return True

    def decided_hint(self) -> Hint | None:
        """The place just past the last line decided, as a hint; None before any line."""
        if self._decided_end < 0:
            return None
        return Hint(self._decided_end, self._decided_size, self._decided_sha256, self.identity)

    def scan_hint(self) -> tuple[Hint | None, str | None]:
        """Where the book's scan hint may move, and the section it lies in: just past the last
        line decided, or where the compacted range being read began (it must be read whole)."""
        replay = self.replays.open
        if replay is not None:
            return replay.start, replay.start_section
        return self.decided_hint(), self.section

    def take_batch(self) -> tuple[Batch, BatchHashes]:
        """What was decided since the last call, and the hashes it applied; a new batch starts."""
        taken = self.batch, self.batch_hashes
        self.batch = Batch()
        self.batch_hashes = BatchHashes(self.batch)
        return taken

    # --- lines --------------------------------------------------------------------------------

    def _stream_line(
        self, attempt: AttemptView, line: Line, digest: bytes, offset: int, size: int
    ) -> None:
        """A line of a stream the pass follows: applied, a duplicate, or a gap."""
        if line.seq == attempt.last_seq + 1 and self._hole_before(attempt):
            # Read from its hello, the stream lacks seqs it once had: lines were lost.
            expected = self.seen_here + 1
            self._problem(attempt, sequence_gap(expected_seq=expected, seq=line.seq, offset=offset))
        elif line.seq == attempt.last_seq + 1:
            self._apply(attempt, line, digest, offset, size)
        elif line.seq <= attempt.last_seq:
            self._duplicate(attempt, line.seq, digest, offset, size)
            if line.type == "finished" and attempt.state in ("active", "exited"):
                # Its finished was applied before an operator released or skipped a line of it:
                # the stream is finished again, not live (a foreign stream must not park it).
                attempt.state = "finished"
                self.batch.touch(attempt)
        elif attempt.state == "finished":  # nothing follows a finished, not even after a hole
            self._problem(
                attempt,
                line_after_finished(seq=line.seq, finished_seq=attempt.last_seq, offset=offset),
            )
        else:
            self._problem(
                attempt,
                sequence_gap(expected_seq=attempt.last_seq + 1, seq=line.seq, offset=offset),
            )

    def _hole_before(self, attempt: AttemptView) -> bool:
        """Whether this pass read the attempt's section from its hello and did not meet every
        applied seq in it: the next seq then follows a hole in the file."""
        return self.seen_here < attempt.last_seq

    def _other_line(self, line: Line, digest: bytes, offset: int, size: int) -> None:
        started = stream_started(line)
        if started is not None:
            self._hello(line, started, digest, offset, size)
        elif self.section is None:
            self._book_problem(line_before_hello(seq=line.seq, offset=offset, refused=None))
        else:  # a line of a foreign or stopped stream, skipped
            self._stopped_line(line, digest, offset, size)

    def _stopped_line(self, line: Line, digest: bytes, offset: int, size: int) -> None:
        """A stream stopped for a person (quarantined, stalled, refused) whose last applied line
        is met again: its hint moves just past it, where the lines it holds begin. Lag counts
        from there (`operate.lag`), not from byte 0 when its hint was taken in another file or
        forgotten (a conflict found by a pass reading again from byte 0)."""
        attempt = self.section_attempt
        if (
            attempt is None
            or attempt.state not in RELEASABLE_STATES
            or line.seq != attempt.last_seq
            or digest != attempt.last_line_sha256
        ):
            return
        if attempt.hint_offset != offset + size or attempt.hint_file != self.identity:
            attempt.hint_offset, attempt.hint_line_bytes = offset + size, size
            attempt.hint_file = self.identity
            self.batch.touch(attempt)

    def _refused(self, problem: LineRefused, offset: int, digest: bytes, size: int) -> None:
        followed = self.section_attempt
        if isinstance(problem, UnsupportedVersion):
            self._hello_unsupported(problem, digest, offset, size)
        elif self.section is None:
            self._book_problem(
                line_before_hello(seq=problem.seq, offset=offset, refused=problem.detail)
            )
        elif followed is not None and followed.state == "finished" and problem.seq is None:
            # Not certainly the finished stream's (not even its seq can be read): a later
            # stream's, or none. One whose seq can be read lies in the finished stream's part of
            # the file: a changed line of it, or a new seq after its end, and it is that stream's.
            self._book_problem(
                line_outside_stream(seq=problem.seq, offset=offset, refused=problem.detail)
            )
        elif followed is not None and followed.state in FOLLOWED_STATES:
            self._problem(followed, ProblemRecord.of(problem))

    def _hello_refused(
        self, problem: LineRefused, engine_run_id: str, offset: int, digest: bytes, size: int
    ) -> None:
        """A malformed hello that names its stream (a readable hello, whatever else is wrong
        with it): the stream starts here, and the refusal is that stream's, never the one
        before it in the file. A hello an operator skipped starts its stream with no effect."""
        attempt = self._own_stream(engine_run_id, offset)
        if attempt is None or attempt.state in STOPPED_STATES:
            return
        if attempt.last_seq == 0:
            self._first_sight(attempt, offset)
            if attempt.skips is not None and attempt.skips.get(digest) == 1:
                attempt.state = "exited" if attempt.exit_status is not None else "active"
                attempt.stream_version = problem.stream_version
                self._skip(attempt, digest, offset, size)
                return
        elif attempt.skips is not None and self._skip(attempt, digest, offset, size):
            return  # the skipped hello, read again: a duplicate
        if attempt.stream_version is None:
            attempt.stream_version = problem.stream_version
        self._problem(attempt, ProblemRecord.of(problem))

    def _hello(self, line: Line, run_id: str, digest: bytes, offset: int, size: int) -> None:
        attempt = self._own_stream(run_id, offset)
        if attempt is not None and attempt.state == "disowned" and attempt.stream_index is None:
            # Disowned before its hello was read: it still takes its place in the file's order
            # (`show` lists attempts so), and nothing else of it is touched. Its hello ends our
            # live attempts before it, as any later hello does (the book's lock: their process
            # is gone), so that they stop holding the cursor (and the lag) behind its lines.
            attempt.stream_index = stream_position(offset)
            self.batch.touch(attempt)
            self._supersede_before(attempt)
        if attempt is None or attempt.state in STOPPED_STATES:
            return
        if attempt.last_seq > 0:
            self._duplicate(attempt, 1, digest, offset, size)
            return
        self._first_sight(attempt, offset)
        if line.data["book_id"] != self.book.book_id:
            self._problem(attempt, book_mismatch(offset=offset))
            return
        # A process already reported gone (`exited`) stays so while its lines are read.
        attempt.state = "exited" if attempt.exit_status is not None else "active"
        attempt.stream_version = line.data["stream_version"]
        attempt.chunker_version = line.data["chunker_version"]
        self._apply(attempt, line, digest, offset, size)

    def _hello_unsupported(
        self, problem: UnsupportedVersion, digest: bytes, offset: int, size: int
    ) -> None:
        attempt = self._own_stream(problem.engine_run_id, offset)
        if attempt is None or attempt.state in STOPPED_STATES:
            return
        if attempt.last_seq > 0:
            self._duplicate(attempt, 1, digest, offset, size)
            return
        self._first_sight(attempt, offset)
        attempt.stream_version = problem.version
        self._problem(attempt, ProblemRecord.of(problem))
        self._state_effect(attempt, StateEffect("unsupported_version"))

    def _own_stream(self, engine_run_id: str, offset: int) -> AttemptView | None:
        """Enter the section of a hello's stream; None when the stream is not ours."""
        attempt = self.attempts.get(engine_run_id)
        if attempt is None and self.history.was_pruned(engine_run_id):
            self._enter_section(engine_run_id, None)  # its run was pruned: never applied again
            return None
        if attempt is None and self.mode == "auto":
            attempt = self._new_attempt(engine_run_id)
        if attempt is None:
            self._foreign(engine_run_id, offset)
            return None
        self._enter_section(engine_run_id, attempt)
        if attempt.stream_index is not None:
            self._supersede_before(attempt)
        return attempt

    def _foreign(self, engine_run_id: str, offset: int) -> None:
        """A hello of a stream not named for this book (named mode)."""
        self._record_start(engine_run_id)
        ours = [a for a in self.attempts.values() if a.state in LIVE_STATES]
        if not ours:
            self._enter_section(engine_run_id, None)
            return
        self.stopped = True
        self.parked = True
        for attempt in ours:
            if attempt.state == "parked" and attempt.error and attempt.error.offset == offset:
                continue
            self._problem(attempt, foreign_stream_ahead(offset=offset, engine_run_id=engine_run_id))

    def _enter_section(self, engine_run_id: str, attempt: AttemptView | None) -> None:
        """A hello begins `engine_run_id`'s part of the file. An unfinished replay of the section
        left can no longer be read whole in this pass (a hello of the same stream again is one of
        its repeats, and leaves nothing)."""
        if engine_run_id == self.section:
            self.section_attempt = attempt
            return
        self.replays.leave()
        if self.section is not None:
            self.seen[self.section] = self.seen_here
        self._previous_section = self.section
        self.section, self.section_attempt = engine_run_id, attempt
        seen = self.seen.get(engine_run_id)
        if seen is None:
            first_hello = None if attempt is None else attempt.stream_index
            # Read from its first hello (being read now), or its first part lies before where
            # this pass began (not known).
            seen = 1 if first_hello is None or first_hello - 1 >= self.start else UNKNOWN_SEEN
        self.seen_here = seen

    def _record_start(self, engine_run_id: str) -> None:
        """Keep where a foreign stream begins (named mode), for `name` to read from there."""
        book = self.book
        if engine_run_id in self._starts_seen or not book.starts_from_zero:
            return
        self._starts_seen.add(engine_run_id)
        if book.starts_recorded >= STREAM_STARTS_MAX:
            book.starts_from_zero = False  # too many to keep: `name` reads from byte 0
            self.batch.book_changed = True
            return
        book.starts_recorded += 1
        self.batch.starts.append((engine_run_id, self.decided_hint() or Hint.NONE, self.section))

    def _new_attempt(self, engine_run_id: str) -> AttemptView:
        """Auto mode: a new stream joins the book's current run, or a new run if it ended."""
        run = self.runs[-1] if self.runs else None
        if run is None or run.ended:
            run = RunView(book_id=self.book.book_id)
            self.runs.append(run)
            self.batch.new_runs.append(run)
        attempt = AttemptView(engine_run_id=engine_run_id, run=run)
        self.attempts[engine_run_id] = attempt
        self.batch.new_attempts.append(attempt)
        self.batch.touch(attempt)
        return attempt

    def _first_sight(self, attempt: AttemptView, offset: int) -> None:
        """A stream's first hello: it takes its place in the book (the file order of its hello,
        whenever a pass first sees it) and drives its run if no stream of the run lies after it."""
        attempt.stream_index = stream_position(offset)
        latest = max(
            (other for other in self.attempts.values() if other.run is attempt.run),
            key=lambda other: other.stream_index or 0,
        )
        for other in self.attempts.values():
            if other.run is attempt.run:
                other.drives_run = other is latest
        self.batch.touch(attempt)
        self._supersede_before(attempt)

    def _supersede_before(self, attempt: AttemptView) -> None:
        """A later stream began: an earlier one still active (or parked) will write no more.

        The book's lock lets one engine process run at a time, so a hello further down the file
        means every earlier process is gone.
        """
        index = attempt.stream_index or 0
        for other in self.attempts.values():
            if (
                other is not attempt
                and other.state in LIVE_STATES
                and (other.stream_index or 0) < index
            ):
                other.state = "superseded"
                other.error = None
                self.batch.touch(other)

    def _skip(self, attempt: AttemptView, digest: bytes, offset: int, size: int) -> bool:
        """True when the line is one an operator skipped (`skip`, by its sha256 and seq): at the
        next seq the cursor passes it with no effect (its hash is kept, so a re-read is a
        duplicate); at an applied seq it is taken as a duplicate, not a conflict."""
        assert attempt.skips is not None
        seq = attempt.skips.get(digest)
        if seq is None:
            return False
        if seq <= attempt.last_seq:
            self.duplicates += 1
            return True
        if seq != attempt.last_seq + 1:
            return False
        attempt.last_seq = seq
        attempt.last_line_sha256 = digest
        attempt.hint_offset, attempt.hint_line_bytes = offset + size, size
        attempt.hint_file = self.identity
        self.batch.touch(attempt)
        self.batch.add_hash(attempt, seq, digest)
        return True

    # --- effects ----------------------------------------------------------------------------

    def _apply(
        self, attempt: AttemptView, line: Line, digest: bytes, offset: int, size: int
    ) -> None:
        """The line is the attempt's next seq: its effect joins the batch with the cursor."""
        replays = self.replays
        if replays.open is not None and replays.open.attempt is attempt:
            replays.leave()  # a new seq came before the compacted range was read whole
        if attempt.state == "finished":
            self._problem(
                attempt,
                line_after_finished(seq=line.seq, finished_seq=attempt.last_seq, offset=offset),
            )
            return
        batch = self.batch
        seq, kind, data = line.seq, line.type, line.data
        attempt.last_seq = seq
        attempt.last_line_sha256 = digest
        attempt.hint_offset = offset + size
        attempt.hint_line_bytes = size
        attempt.hint_file = self.identity
        attempt.last_line_time = line.time
        if not attempt.applied_in_batch:
            attempt.applied_in_batch = True
            batch.touch(attempt)
        batch.hash_attempts.append(attempt)
        batch.hash_seqs.append(seq)
        batch.hash_values.append(digest)
        if self.keep_applied:
            batch.applied_attempts.append(attempt)
            batch.applied_lines.append(line)
        run = attempt.run
        if kind == "spend":
            self._spend(run, data["committed_micro_usd"])
        elif kind == "progress":
            # The snapshot as parsed; `seal` keeps only done and total of each phase.
            phases = data["phases"]
            batch.changes(run).progress = phases
            run.progress = phases
        elif kind == "unit_done":
            batch.units.append((attempt, data["unit"], data["index"], seq))
        elif kind == "hello":
            self._state_effect(attempt, StateEffect("hello"))
        elif kind == "ceiling":
            self._state_effect(
                attempt, StateEffect("ceiling", shortfall_micro_usd=data.get("shortfall_micro_usd"))
            )
        elif kind == "bank_stop":
            self._state_effect(attempt, StateEffect("bank_stop"))
        elif kind == "finished":
            attempt.state = "finished"
            money = data.get("money")
            if money is not None:
                self._spend(run, money["committed_micro_usd"])
            self._state_effect(
                attempt,
                StateEffect(
                    "finished",
                    exit_code=data["exit_code"],
                    stop=data["stop"],
                    refusal=data["refusal"],
                ),
            )
        # Any other type of the same major: no effect, the cursor still advances.

    def _spend(self, run: RunView, amount: int) -> None:
        """Cumulative spend: the greatest value seen wins."""
        changes = self.batch.changes(run)
        if changes.committed_micro_usd is None or amount > changes.committed_micro_usd:
            changes.committed_micro_usd = amount
        run.committed_micro_usd = max(run.committed_micro_usd, amount)

    def _state_effect(self, attempt: AttemptView, effect: StateEffect) -> None:
        if not attempt.drives_run:
            return
        effects = [effect]
        if attempt.exit_status is not None and attempt.state != "finished":
            # The process is gone and wrote no `finished` (yet): its exit status has the last
            # word on the run, over the hello or a ceiling read after the launcher's report.
            effects.append(StateEffect("exited", exit_code=attempt.exit_status))
        for each in effects:
            self.batch.changes(attempt.run).state_effects.append(each)
            attempt.run.apply_state(each)

    def _duplicate(
        self, attempt: AttemptView, seq: int, digest: bytes, offset: int, size: int
    ) -> None:
        if seq <= attempt.compacted_seq:
            self._replayed(attempt, seq, digest, offset)
            return
        replays = self.replays
        if replays.open is not None and replays.open.attempt is attempt:
            replays.leave()  # a seq past the range came before the range was read whole
        if seq == attempt.last_seq and digest == attempt.last_line_sha256:
            applied: bytes | None = digest
            if attempt.hint_offset != offset + size or attempt.hint_file != self.identity:
                attempt.hint_offset = offset + size
                attempt.hint_line_bytes = size
                attempt.hint_file = self.identity
                self.batch.touch(attempt)
        else:
            applied = self._applied_hash(attempt, seq)
        if applied == digest:
            self.duplicates += 1
            return
        self._problem(
            attempt,
            payload_conflict(
                seq=seq,
                offset=offset,
                applied_sha256=applied.hex() if applied is not None else "(none recorded)",
                line_sha256=digest.hex(),
            ),
        )

    def _applied_hash(self, attempt: AttemptView, seq: int) -> bytes | None:
        """What was applied at (attempt, seq): in this batch, or before it (`History`)."""
        found = self.batch_hashes.get(attempt, seq)
        if found is not None:
            return found
        return self.history.applied_sha256(attempt, seq)

    def _replayed(self, attempt: AttemptView, seq: int, digest: bytes, offset: int) -> None:
        """A line of the attempt's compacted range (seqs 1..compacted_seq), read again: judged
        by the digest the range's lines build (`replay.Replays.read`)."""
        problem = self.replays.read(
            attempt,
            seq,
            digest,
            offset,
            start=self.decided_hint() or Hint.NONE,
            start_section=self._previous_section,
        )
        if problem is None:
            self.duplicates += 1
        else:
            self._problem(attempt, problem)

    @property
    def unverified_duplicates(self) -> int:
        """Duplicates compared with nothing (`replay.Replays.unverified_duplicates`)."""
        return self.replays.unverified_duplicates

    # --- problems ---------------------------------------------------------------------------

    def _problem(self, attempt: AttemptView, problem: ProblemRecord) -> None:
        """Record a stream problem on its attempt: it stops (or parks), with its evidence."""
        self.replays.stopped(attempt)
        attempt.state = state_for_problem(problem.kind)
        attempt.error = problem
        self.batch.touch(attempt)
        self.problems.append(PassProblem(attempt.engine_run_id, problem.kind))

    def read_to_end(self) -> None:
        """The pass read every complete line to the journal's end. The book's error (a line of no
        stream) ends when this pass began at or before its place and met no such line: the line
        was cut away or mended, and a pass that reads clean says so, as `verify` does."""
        error = self.book.error
        if error is None or self.book_problem_met or self.start > (error.offset or 0):
            return
        self.book.error = None
        self.batch.book_changed = True

    def _book_problem(self, problem: ProblemRecord) -> None:
        """A problem that belongs to no stream (a line before any hello): kept on the book."""
        self.book_problem_met = True
        if self.book.error is not None:
            return
        self.book.error = problem
        self.batch.book_changed = True
        self.problems.append(PassProblem(None, problem.kind))

"""A compacted range read again: its lines judged by the one digest they build in seq order.

`compact` keeps, for the seqs 1..compacted_seq of a quiet stream, one sha256 over their own
hashes in seq order instead of each hash. A pass that reads that range again (a journal read from
byte 0) cannot compare each line with what was applied there; it builds the digest as the lines
come and compares it once the range is read whole (docs/platform/cursor.md, "Bounded storage: compaction, pruning, resumes"). The
rules (`rules.StreamRules`) hand each line of such a range to `Replays.read`, which answers
with the problem it found, or None: a duplicate.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ..journal.hint import Hint
from .problems import ProblemRecord, compacted_conflict, payload_conflict
from .views import AttemptView

REPLAY_WINDOW_SEQS = 4096
"""How many of the latest seqs of a compacted range read again keep their hash for the pass: a
repeat of one of them is compared exactly; a repeat further back counts as an unverified
duplicate (never a conflict: its own hash is gone)."""


@dataclass(eq=False)
class Replay:
    """A compacted range being read again from its seq 1: the digest its lines build in order."""

    attempt: AttemptView
    start: Hint
    """Just before the line that began it: while it is unfinished, the book's scan hint stays
    here, so a pass that ends inside the range reads it again whole."""
    start_section: str | None
    next_seq: int = 1
    digest: Any = field(default_factory=hashlib.sha256)
    recent: dict[int, bytes] = field(default_factory=dict)
    """seq -> sha256 of the latest `REPLAY_WINDOW_SEQS` seqs read"""
    judgeable: bool = True
    """False once the range was judged, or can no longer be read whole in this pass (a seq
    missing, another section began): a later repeat is compared with `recent` when it is there,
    else an unverified duplicate."""


class Replays:
    """The compacted ranges one pass reads again, one a stream, and the one still open (being
    read, not yet judged). `unverified` counts the duplicates compared with nothing."""

    __slots__ = ("_of", "open", "unverified")

    def __init__(self) -> None:
        self._of: dict[int, Replay] = {}
        self.open: Replay | None = None
        self.unverified = 0

    def read(
        self,
        attempt: AttemptView,
        seq: int,
        digest: bytes,
        offset: int,
        *,
        start: Hint,
        start_section: str | None,
    ) -> ProblemRecord | None:
        """A line of the attempt's compacted range (seqs 1..compacted_seq), read again at
        `offset`; `start` and `start_section` are where its replay begins, if this line begins
        one. None: a duplicate.

        Read in seq order from seq 1, the range's lines build its digest: when the last one is
        read, a digest that differs is a `compacted_conflict`. A repeat of a seq read in the last
        `REPLAY_WINDOW_SEQS` is compared with that copy (a `payload_conflict` when it differs).
        What cannot be compared (a repeat further back, a range met from its middle or left
        before its end) is an unverified duplicate, never a conflict.
        """
        replay = self._of.get(id(attempt))
        if replay is None:
            replay = Replay(attempt, start, start_section, judgeable=seq == 1)
            self._of[id(attempt)] = replay
        if replay.judgeable and seq == replay.next_seq:
            replay.digest.update(digest)
            replay.recent[seq] = digest
            replay.recent.pop(seq - REPLAY_WINDOW_SEQS, None)
            replay.next_seq += 1
            self.open = replay
            if seq == attempt.compacted_seq:
                return self._judge(attempt, replay, offset)
            return None
        seen = replay.recent.get(seq) if seq < replay.next_seq else None
        if seen is None:
            if seq > replay.next_seq and self.open is replay:
                self.leave()  # a seq of the range is missing here: it cannot be judged
            replay.judgeable = False
            self.unverified += 1
            return None
        if seen != digest:
            return payload_conflict(
                seq=seq, offset=offset, applied_sha256=seen.hex(), line_sha256=digest.hex()
            )
        return None

    def leave(self) -> None:
        """The open replay cannot be read whole in this pass any more: it stays unjudged, and
        the lines of it read so far were compared with nothing: unverified duplicates."""
        if self.open is not None:
            self.open.judgeable = False
            self.unverified += self.open.next_seq - 1
            self.open = None

    def stopped(self, attempt: AttemptView) -> None:
        """The attempt's stream stops (a problem): nothing of it is read any more."""
        replay = self._of.get(id(attempt))
        if replay is not None and replay is self.open:
            self.open = None

    @property
    def unverified_duplicates(self) -> int:
        """Duplicates compared with nothing: `unverified`, and the lines of a compacted range
        still being read when the pass ends (the next pass reads that range whole again)."""
        replay = self.open
        return self.unverified + (0 if replay is None else replay.next_seq - 1)

    def _judge(self, attempt: AttemptView, replay: Replay, offset: int) -> ProblemRecord | None:
        """The whole compacted range was read again: its digest must be the one kept."""
        replay.judgeable = False
        self.open = None
        read = replay.digest.digest()
        if read == attempt.compacted_sha256:
            return None
        kept = attempt.compacted_sha256
        return compacted_conflict(
            last_seq=attempt.compacted_seq,
            offset=offset,
            applied_sha256=kept.hex() if kept is not None else "(none)",
            read_sha256=read.hex(),
        )

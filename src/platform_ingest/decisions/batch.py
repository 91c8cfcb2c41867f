"""What a pass decided since its last seal: the views it created or changed, the line hashes and
units to record, waiting to be written in one transaction by `ingest.apply`. A plain record of
decisions, so that the rules that fill it need nothing of the store."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..journal.hint import Hint
from ..journal.line import Line
from .runs import RunChanges, RunView
from .views import AttemptView


@dataclass(eq=False)
class Batch:
    """What a pass decided since its last seal, waiting to be written in one transaction."""

    new_runs: list[RunView] = field(default_factory=list)
    new_attempts: list[AttemptView] = field(default_factory=list)
    touched: dict[int, AttemptView] = field(default_factory=dict)
    hash_attempts: list[AttemptView] = field(default_factory=list)
    hash_seqs: list[int] = field(default_factory=list)
    hash_values: list[bytes] = field(default_factory=list)
    units: list[tuple[AttemptView, str, int, int]] = field(default_factory=list)
    run_changes: dict[int, tuple[RunView, RunChanges]] = field(default_factory=dict)
    book_changed: bool = False
    starts: list[tuple[str, Hint, str | None]] = field(default_factory=list)
    """(engine_run_id, the hint just before its hello, that hint's section) of foreign streams."""
    starts_reset: bool = False
    """The book's recorded starts are forgotten first (a read from byte 0 records them again)."""
    lines: int = 0
    last_line: tuple[str | None, int | None, int] | None = None
    """(stream, seq, offset) of the last line the batch decided on: with one line a batch, the
    line a refusal of Postgres belongs to."""
    applied_attempts: list[AttemptView] = field(default_factory=list)
    applied_lines: list[Line] = field(default_factory=list)
    """The lines applied, decoded, and beside them their attempts, kept only when projections are
    installed. Two lists, not one of pairs: a pair a line would be one more object a line for the
    cyclic collector to walk while the batch waits (a decoded `Line` is not tracked by it)."""

    @property
    def empty(self) -> bool:
        return not (
            self.touched or self.new_runs or self.book_changed or self.run_changes or self.starts
        )

    def touch(self, attempt: AttemptView) -> None:
        self.touched[id(attempt)] = attempt

    def add_hash(self, attempt: AttemptView, seq: int, sha256: bytes) -> None:
        self.hash_attempts.append(attempt)
        self.hash_seqs.append(seq)
        self.hash_values.append(sha256)

    def changes(self, run: RunView) -> RunChanges:
        entry = self.run_changes.get(id(run))
        if entry is None:
            entry = (run, RunChanges())
            self.run_changes[id(run)] = entry
        return entry[1]


class BatchHashes:
    """(attempt, seq) -> the sha256 of the line applied there, for one batch.

    The batch's own lists (`hash_attempts`, `hash_seqs`, `hash_values`, in the order the lines
    were applied) are the record; they are indexed only when a duplicate needs a look-up, and
    then only the entries added since the last one. A pass that meets no duplicate (the usual
    one) pays nothing per line for it. The lists are only appended to, and no (attempt, seq) is
    applied twice in one batch (each applied seq is the attempt's next).
    """

    __slots__ = ("_batch", "_index", "_indexed")

    def __init__(self, batch: Batch) -> None:
        self._batch = batch
        self._index: dict[tuple[int, int], bytes] = {}
        self._indexed = 0

    def get(self, attempt: AttemptView, seq: int) -> bytes | None:
        batch = self._batch
        seqs = batch.hash_seqs
        if self._indexed < len(seqs):
            index, attempts, values = self._index, batch.hash_attempts, batch.hash_values
            for position in range(self._indexed, len(seqs)):
                index[(id(attempts[position]), seqs[position])] = values[position]
            self._indexed = len(seqs)
        return self._index.get((id(attempt), seq))

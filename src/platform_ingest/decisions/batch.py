"""What a pass decided since its last seal: the views it created or changed, the line hashes and
units to record, waiting to be written in one transaction by `ingest.apply`. A plain record of
decisions, so that the rules that fill it need nothing of the store."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..journal.decode import Line
from ..journal.reader import Hint
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

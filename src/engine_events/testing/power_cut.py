"""Power cuts: what a book holds after the machine lost power, not just a process.

A process crash leaves the page cache behind: the next process reads everything the dead one wrote,
synced or not. A power cut takes the page cache away. `PowerCutIO` sits at the bottom of the journal's
system calls (the `JournalIO` seam, under `FaultyIO`'s faults), passes every call through to the real
file system and records it: each open and create, each write (with the offset it landed at: for an
O_APPEND descriptor the file's size at the time), fsync, ftruncate and directory fsync. Given to an
`EngineWorld` (`EngineWorld(book, recorder=PowerCutIO())`), it also keeps a snapshot of the database
after every COMMIT, so a recording interleaves the journal's operations with the database's commits.

From a recording, `crash_states` enumerates, for every cut point (before the first recorded operation
and after each one), every state the disk may hold when the power comes back, in the manner of the
ALICE and CrashMonkey studies:

- a file holds what its last fsync made durable, plus any prefix, in order, of the writes and
  truncates made since (a truncate is durable only once fsynced, like a write);
- the last of those surviving writes may be torn, only its first bytes persisted: cut at a 4096-byte
  page boundary of the file (`tears="page"`: Linux grows a file's size page by page as a write is
  copied in, and a journaling file system persists a size only with the data before it); also at
  each line boundary of the write and inside each line (`"line"`: one representative of every way
  a tear can end relative to the lines); or at every byte (`"byte"`). With `zero_tails`, also the
  states where a torn write's size persisted but its data past the tear did not, which then reads
  as zeros (a file system that does not order data before metadata);
- a file the recording saw created keeps its name only if its directory was fsynced after the
  create; otherwise it may be gone, whatever was fsynced into it;
- the database is exactly what was committed by the cut point. SQLite is taken at its word: in WAL
  mode with synchronous=FULL a COMMIT that returned is durable and one that did not return is not
  there, so the database as of a cut is the snapshot of the last COMMIT before it.

What the model leaves out: writes persisted out of order inside a file (a later page kept while an
earlier one of the same unsynced write is lost), and changes made to the book's files outside the
seam (status.json is written and renamed by `write_status_file` directly; it is cosmetic, and a
power cut may leave the old or the new snapshot, or a stray temporary file).

`materialize` lays out one crash state in a directory, with the database as of its cut, for an
engine, a repair or a platform pass to start on.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from itertools import product
from pathlib import Path
from typing import Literal

from .._journal_file import JournalIO, OsJournalIO
from .._schema import DATABASE_FILE_NAME

PAGE_BYTES = 4096
"""The page size of the file systems the model stands for: a write is persisted page by page."""

OpKind = Literal["create", "open", "write", "ftruncate", "fsync", "fsync_directory", "commit"]
Tears = Literal["page", "line", "byte"]


@dataclass(frozen=True)
class Op:
    """One recorded operation: a journal system call, or a COMMIT of the database."""

    kind: OpKind
    path: str = ""
    """The file (the directory of an `fsync_directory`); empty for a `commit`."""
    offset: int = 0
    """`write`: where its bytes landed; `ftruncate`: the new length."""
    data: bytes = b""
    """`write`: the bytes that landed (a short write records only those)."""
    snapshot: int = -1
    """`commit`: the index of the database as of this commit in `PowerCutIO.snapshots`."""

    def describe(self) -> str:
        name = Path(self.path).name
        if self.kind == "write":
            return f"write {len(self.data)} bytes at {self.offset} of {name}"
        if self.kind == "ftruncate":
            return f"ftruncate {name} to {self.offset}"
        if self.kind == "commit":
            return f"COMMIT (database snapshot {self.snapshot})"
        return f"{self.kind} {name}"


class PowerCutIO:
    """The real system calls (through `inner`), each recorded in `ops`; see the module doc."""

    def __init__(self, inner: JournalIO | None = None) -> None:
        self._inner = inner or OsJournalIO()
        self.ops: list[Op] = []
        self.snapshots: list[bytes] = []
        """The database after each recorded COMMIT (`sqlite3.Connection.serialize`: the committed
        pages, the WAL's included)."""
        self.initial: dict[str, bytes] = {}
        """Files that existed before the recording first opened them, with their content then:
        taken as durable (a recording starts on a book at rest)."""
        self._descriptors: dict[int, tuple[str, bool]] = {}
        self._known: set[str] = set()

    # -- JournalIO -----------------------------------------------------------------------------

    def open(self, path: Path, flags: int, mode: int) -> int:
        name = str(path)
        existed = os.path.exists(path)
        if existed and name not in self._known:
            self.initial[name] = Path(path).read_bytes()
        fd = self._inner.open(path, flags, mode)
        self._known.add(name)
        self._descriptors[fd] = (name, bool(flags & os.O_APPEND))
        self.ops.append(Op("open" if existed else "create", name))
        if existed and flags & os.O_TRUNC:
            self.ops.append(Op("ftruncate", name, 0))
        return fd

    def write(self, fd: int, data: memoryview) -> int:
        name, append = self._descriptors[fd]
        start = self._position(fd, append)
        try:
            count = self._inner.write(fd, data)
        except BaseException:
            # A fault injector above the disk may have let part of the data land before failing.
            landed = self._position(fd, append) - start
            if landed > 0:
                self.ops.append(Op("write", name, start, bytes(data[:landed])))
            raise
        if count > 0:
            self.ops.append(Op("write", name, start, bytes(data[:count])))
        return count

    def fsync(self, fd: int) -> None:
        self._inner.fsync(fd)  # a failed fsync made nothing durable: recorded only once it returned
        self.ops.append(Op("fsync", self._descriptors[fd][0]))

    def ftruncate(self, fd: int, length: int) -> None:
        self._inner.ftruncate(fd, length)
        self.ops.append(Op("ftruncate", self._descriptors[fd][0], length))

    def fsync_directory(self, path: Path) -> None:
        self._inner.fsync_directory(path)
        self.ops.append(Op("fsync_directory", str(path)))

    # -- the database --------------------------------------------------------------------------

    def commit(self, conn: sqlite3.Connection) -> None:
        """Record that a COMMIT just returned on `conn`, with the database as it now stands."""
        self.snapshots.append(conn.serialize())
        self.ops.append(Op("commit", snapshot=len(self.snapshots) - 1))

    # -- what the recording says ---------------------------------------------------------------

    def count(self, kind: OpKind) -> int:
        return sum(1 for op in self.ops if op.kind == kind)

    def live_state(self, cut: int | None = None) -> CrashState:
        """What the processes saw at `cut` (all of the recording by default): every write kept,
        every name kept. It is also what a process crash, not a power cut, leaves."""
        end = len(self.ops) if cut is None else cut
        files = {name: _File(True, content) for name, content in self.initial.items()}
        snapshot: int | None = None
        for op in self.ops[:end]:
            snapshot = _replay(files, op, snapshot)
        contents = tuple(
            (name, _settle(file.durable, file.pending)) for name, file in sorted(files.items())
        )
        return CrashState(end, snapshot, contents, "live: no power cut")

    @staticmethod
    def _position(fd: int, append: bool) -> int:
        return os.fstat(fd).st_size if append else os.lseek(fd, 0, os.SEEK_CUR)


@dataclass(frozen=True)
class CrashState:
    """One state of the disk after a power cut."""

    cut: int
    """How many recorded operations happened before the power went."""
    snapshot: int | None
    """The database as of the cut (an index into `PowerCutIO.snapshots`); None before the first
    COMMIT: no database file."""
    files: tuple[tuple[str, bytes | None], ...]
    """Every recorded file with its content after the power came back; None: the file is gone."""
    how: str
    """How the state came about, for a person reading a failure."""

    def content(self, name: str | Path) -> bytes | None:
        for path, content in self.files:
            if path == str(name):
                return content
        raise KeyError(str(name))


@dataclass
class _File:
    name_durable: bool
    durable: bytes = b""
    pending: list[Op] = field(default_factory=list)
    """Writes and truncates since the last fsync, in order."""


def _apply(content: bytes, op: Op) -> bytes:
    if op.kind == "write":
        head = content[: op.offset].ljust(op.offset, b"\0")
        return head + op.data + content[op.offset + len(op.data) :]
    if op.kind == "ftruncate":
        return content[: op.offset].ljust(op.offset, b"\0")
    raise ValueError(f"{op.kind} does not change a file's content")


def _settle(content: bytes, ops: Iterable[Op]) -> bytes:
    for op in ops:
        content = _apply(content, op)
    return content


def _replay(files: dict[str, _File], op: Op, snapshot: int | None) -> int | None:
    """Apply one recorded operation to the durable model; return the database as of after it."""
    if op.kind == "commit":
        return op.snapshot
    if op.kind == "create":
        files[op.path] = _File(name_durable=False)
    elif op.kind == "open":
        files.setdefault(op.path, _File(name_durable=True))
    elif op.kind in ("write", "ftruncate"):
        files[op.path].pending.append(op)
    elif op.kind == "fsync":
        file = files[op.path]
        file.durable = _settle(file.durable, file.pending)
        file.pending = []
    elif op.kind == "fsync_directory":
        directory = Path(op.path)
        for name, file in files.items():
            if Path(name).parent == directory:
                file.name_durable = True
    return snapshot


def _tear_points(op: Op, tears: Tears) -> list[int]:
    """How many bytes of a write may have persisted when it is torn (0 < n < its length)."""
    size = len(op.data)
    if tears == "byte":
        return list(range(1, size))
    first_page = (op.offset // PAGE_BYTES + 1) * PAGE_BYTES
    points = {page - op.offset for page in range(first_page, op.offset + size, PAGE_BYTES)}
    if tears == "line":
        start = 0
        while start < size:
            newline = op.data.find(b"\n", start)
            end = size if newline < 0 else newline + 1
            points.update((start, start + 1, end - 1, end))  # a line's first byte, its `\n`
            start = end
    return sorted(point for point in points if 0 < point < size)


def _file_states(file: _File, tears: Tears, zero_tails: bool) -> list[tuple[bytes | None, str]]:
    states: dict[bytes | None, str] = {}
    content = file.durable
    states.setdefault(content, "synced content only")
    total = len(file.pending)
    for index, op in enumerate(file.pending, 1):
        if op.kind == "write":
            size = len(op.data)
            for keep in _tear_points(op, tears):
                torn = replace(op, data=op.data[:keep])
                states.setdefault(
                    _apply(content, torn),
                    f"unsynced op {index}/{total} ({op.describe()}) torn after {keep} bytes",
                )
            if zero_tails:
                for keep in [0, *_tear_points(op, "page")]:
                    zeros = replace(op, data=op.data[:keep].ljust(size, b"\0"))
                    states.setdefault(
                        _apply(content, zeros),
                        f"unsynced op {index}/{total} ({op.describe()}): its size persisted, "
                        f"its data past byte {keep} reads as zeros",
                    )
        content = _apply(content, op)
        states.setdefault(content, f"unsynced ops 1-{index} of {total} persisted")
    if not file.name_durable:
        states.setdefault(None, "the file's name lost (no directory fsync since its create)")
    return list(states.items())


def crash_states(
    recording: PowerCutIO,
    *,
    tears: Tears = "page",
    zero_tails: bool = False,
    cuts: Iterable[int] | None = None,
) -> Iterator[CrashState]:
    """Every crash state at every cut point of the recording (or at the `cuts` given), without
    repeats within a cut point: see the module doc for the model."""
    wanted = None if cuts is None else set(cuts)
    files = {name: _File(True, content) for name, content in recording.initial.items()}
    snapshot: int | None = None
    for cut in range(len(recording.ops) + 1):
        if wanted is None or cut in wanted:
            names = sorted(files)
            per_file = [_file_states(files[name], tears, zero_tails) for name in names]
            for combination in product(*per_file):
                yield CrashState(
                    cut,
                    snapshot,
                    tuple(zip(names, (content for content, _ in combination), strict=True)),
                    "; ".join(
                        f"{Path(name).name}: {how}"
                        for name, (_, how) in zip(names, combination, strict=True)
                    )
                    or "no file yet",
                )
        if cut < len(recording.ops):
            snapshot = _replay(files, recording.ops[cut], snapshot)


def materialize(
    recording: PowerCutIO,
    state: CrashState,
    book_dir: Path,
    *,
    source_dir: Path,
    database_name: str = DATABASE_FILE_NAME,
) -> None:
    """Lay out `state` in `book_dir`: each recorded file (recorded under `source_dir`) at its
    place there, rewritten in place when it exists (a power cut keeps a surviving file's inode) or
    removed when it did not survive, and the database as of the cut (none before the first
    COMMIT)."""
    book_dir.mkdir(parents=True, exist_ok=True)
    for name, content in state.files:
        target = book_dir / Path(name).relative_to(source_dir)
        if content is None:
            target.unlink(missing_ok=True)
        else:
            target.write_bytes(content)
    database = book_dir / database_name
    for suffix in ("", "-wal", "-shm"):
        database.with_name(database.name + suffix).unlink(missing_ok=True)
    if state.snapshot is not None:
        database.write_bytes(recording.snapshots[state.snapshot])

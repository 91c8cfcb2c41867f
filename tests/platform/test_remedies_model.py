"""Property: remedies in any order, between engines that crash and resume and journals that are
edited, replaced, truncated or deleted, keep every run's money and units exact and never let a
changed line pass as a duplicate.

A hypothesis state machine drives one book (a fresh directory per example) on one real Postgres.
An engine writes hand-made lines (its `spend` is the book's cumulative ledger, carried across
resumes), stops, crashes (sometimes leaving a torn tail) and is launched again, named or not; the
journal is edited (a line's time changed, or the line made malformed; in place or as a new
inode), replaced, truncated, put back from the engine's own copy, or deleted with or without its
directory. Sweeps (through the API or the CLI, in auto or named mode), `compact`, `prune`, a
`rebuild` of a projection and every remedy (`name`, `release`, `skip`, `disown`, `undisown`,
`abandon`, `exited`, `repair`) run in any order. A remedy that is refused is a step like any
other: it must change nothing.

After every step `show --json` must hold:

1. no surviving run's `units` or `spent_micro_usd` moved unless a line of one of its own streams
   was applied in that step (an attempt's `last_seq` moved), or `repair` settled it; a run's own
   part may also move when a run before it took money in that step (the part is its ledger less
   the greatest ledger before it);
2. the `spent_micro_usd` of the book's runs plus those kept in its `prune` records sum to the
   book's ledger (the greatest ledger of any run, pruned ones included), and that ledger is never
   above the engine's;
3. every line a sweep read whose bytes differ from the ones applied at its stream and seq was shown
   as a problem: its attempt stopped (quarantined, stalled, refused) or overridden by an operator
   (abandoned, disowned, a `skip` of those bytes), or the line is the book's own `error`. The one
   documented exception is a duplicate of a compacted range read from its middle (the pass counts
   it as an unverified duplicate).

From every state a step reaches, every problem that stands ends by a documented command or by a
pass that reads clean (`end every problem`, a step hypothesis may take at any point, and the end
of every example): a stream stopped for a person (`abandon`; a foreign stream parking ours,
`disown`), a book's own error (a line of no stream, `release BOOK_DIR`, or the journal cut back
to before it and read clean), a gone journal (`abandon` of what awaits it), a root registered as
a book (`forget`). The journal also gets a garbage line (after a finished stream, before any
hello, or inside a stream) and that line cut away again, and an operator sweeps the root that
holds the book as if it were one (refused: it is no book).

It also holds the remedies to their documented promises: a `prune` record carries the run's
`spent_micro_usd` and `units`; a conflict of a compacted range cannot be skipped; `name` of a
disowned stream is refused naming `undisown`, and an undisowned stream is foreign again (a new
attempt on the next read in auto mode); a book whose journal is gone while an attempt awaits lines
shows `journal_missing`, and `abandon` and `exited` take the registered path of a gone directory.

Each step's violations fail the example at once (hypothesis then shrinks it to a short program).
With `REMEDIES_MODEL_COLLECT=1` they are only counted, so that one run lists every kind found; the
test fails at its end all the same. `pytest -s` prints the tally: examples, steps, violations.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import io
import itertools
import json
import math
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from platform_ingest import ConfigError, Database, IngestError, NotFound
from platform_ingest.cli.main import main
from platform_ingest.errors import RepairError
from platform_ingest.ingest.book_pass import BookPass, Mode
from platform_ingest.ingest.books import register_book
from platform_ingest.ingest.rebuild import rebuild
from platform_ingest.operate import remedies
from platform_ingest.operate.compact import compact_quiet
from platform_ingest.operate.naming import name_stream, release_attempt
from platform_ingest.operate.prune import prune_runs
from platform_ingest.operate.repair import repair_book
from platform_ingest.operate.show import show_state
from platform_journals import T, ceiling, finished, hello, line, progress, spend, unit_done
from projection_fixtures import Recording

COLLECT = os.environ.get("REMEDIES_MODEL_COLLECT") == "1"
"""Count violations instead of failing the example at the first one."""

GARBAGE = b"no JSON, no stream\n"
"""A line no engine writes: it belongs to no stream (its seq cannot be read)."""
STANDING = frozenset({"stalled", "quarantined", "refused", "parked"})
"""Attempt states that stand until a person ends them."""
STOPPED = frozenset({"stalled", "quarantined", "refused", "disowned", "abandoned"})
"""Attempt states in which nothing of the stream is read: a changed line is not passed."""
AWAITING = frozenset({"pending", "active"})
"""Attempt states that wait for more lines of their journal."""
ABANDONABLE = frozenset({"pending", "stalled", "parked", "quarantined", "refused", "exited"})
OTHER_TIME = "2026-11-30T02:08:57.214Z"
STRANGER = "ffffffff-0000-4000-8000-000000000000"
"""A stream no engine of the example ever launches: every remedy on it is refused, or names it."""
REFUSALS = (ConfigError, NotFound, RepairError)
"""What a refused remedy raises (the CLI's exit 2, 3, or 1 for a status it could not use)."""
EMPTY_BOOK: dict[str, Any] = {"error": None, "problems": [], "actions": [], "runs": []}
"""How an unregistered book shows: nothing."""

# What a step may do, each list weighted by repeats (hypothesis picks a rule, then one of these).
ENGINE_ACTIONS = [
    *["work"] * 6,
    "write again",
    "finish",
    "crash",
    "launch resume",
    "launch new run",
    "launch foreign",
    "launch dies",
]
WORK = ["spend", "spend", "unit", "progress", "heartbeat", "ceiling"]
FINISH_CODES = [0, 1, 2, 4, 5, 13]
DAMAGES = [
    "edit",
    "edit",
    "edit malformed",
    "garbage",
    "garbage",
    "cut the garbage",
    "replace",
    "truncate",
    "restore",
    "restore",
    "delete the journal",
    "delete the directory",
]
OPERATIONS = [
    *["name", "release", "skip", "skip", "exited", "abandon", "disown", "undisown"] * 2,
    "repair",
    "compact",
    "compact",
    "prune",
    "prune",
    "rebuild",
]
MENDS: dict[str, list[str]] = {
    "quarantined": ["skip", "skip", "release", "abandon"],
    "stalled": ["release", "abandon"],
    "refused": ["release", "abandon"],
    "parked": ["name", "disown", "abandon"],
    "disowned": ["undisown", "name"],
    "pending": ["exited", "abandon"],
    "active": ["exited", "repair"],
    "exited": ["repair", "abandon"],
}
"""The remedies that fit each attempt state (`mend`: an operator ending what stands)."""
BATCH_LINES = 20_000
"""The pass's own batch size; sweeps also run with tiny batches, to commit mid-stream."""

_books = itertools.count(1)


@dataclass
class Tally:
    """What the test did, printed at its end (`pytest -s`)."""

    examples: int = 0
    steps: int = 0
    violations: collections.Counter[str] = field(default_factory=collections.Counter)
    first: dict[str, str] = field(default_factory=dict)
    """The first detail seen of each kind of violation."""
    reached: collections.Counter[str] = field(default_factory=collections.Counter)
    """How often each notable thing happened (hypothesis `event`s, counted here too: a state
    machine run by `run_state_machine_as_test` prints no statistics)."""

    def summary(self) -> str:
        kinds = "".join(
            f"\n  {count} x {kind}; first: {self.first[kind]}"
            for kind, count in self.violations.most_common()
        )
        total = sum(self.violations.values())
        reached = ", ".join(f"{name} {count}" for name, count in sorted(self.reached.items()))
        return (
            f"remedies model: {self.examples} examples, {self.steps} steps, {total} violations"
            + kinds
            + f"\n  reached: {reached}"
        )


TALLY = Tally()


def _note(what: str) -> None:
    event(what)
    TALLY.reached[what] += 1


def _stream_id(number: int) -> str:
    return f"00000000-0000-4000-8000-{number:012d}"


def _sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _retimed(raw: bytes) -> bytes:
    """The line with another valid time: other bytes, the same effect."""
    obj = json.loads(raw)
    return line(obj["seq"], obj["type"], obj["data"], time=OTHER_TIME if obj["time"] == T else T)


def _malformed(raw: bytes) -> bytes:
    """The line with a time that is no instant: malformed, its seq still readable."""
    obj = json.loads(raw)
    return line(obj["seq"], obj["type"], obj["data"], time="x")


@dataclass(frozen=True)
class Written:
    """One complete line of a journal: the engine's stream that wrote it, its seq, its bytes."""

    stream: str
    seq: int
    raw: bytes


@dataclass(frozen=True)
class Read:
    """What a sweep read: from `start_offset` to the end, or to a foreign hello if it parked."""

    start_offset: int
    parked: bool
    unverified_duplicates: int


def _attempts(book: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """engine_run_id -> its attempt as shown, with its run's id."""
    return {
        attempt["engine_run_id"]: {**attempt, "run_id": run["run_id"]}
        for run in book["runs"]
        for attempt in run["attempts"]
    }


def _ledger(committed: int | None, settled: int | None) -> int:
    return max(committed or 0, settled or 0)


class RemediesLife(RuleBasedStateMachine):
    """One book's life; the database and the directories are the test's (`configure`)."""

    dsn: ClassVar[str]
    db: ClassVar[Database]
    sql: ClassVar[psycopg.Connection[tuple[Any, ...]]]
    root: ClassVar[Path]
    status_command: ClassVar[str]

    @classmethod
    def configure(cls, dsn: str, db: Database, sql: Any, root: Path) -> None:
        cls.dsn, cls.db, cls.sql, cls.root = dsn, db, sql, root
        root.mkdir(parents=True, exist_ok=True)
        # `repair` runs the engine's status command: this one prints what the example wrote for
        # it (the engine's ledger and latest stream), and exits as a locked book would while an
        # engine is live.
        script = root / "status.sh"
        script.write_text(
            '#!/bin/sh\nhere="$(dirname "$0")"\ncat "$here/status.json"\n'
            'exit "$(cat "$here/status.code")"\n'
        )
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        cls.status_command = str(script)

    def __init__(self) -> None:
        super().__init__()
        TALLY.examples += 1
        self.book = self.root / f"book-{next(_books):05d}"
        self.book.mkdir()
        self.mode: Mode = "auto"
        # The engine, as it knows itself.
        self.pristine: list[Written] = []
        """Every line the engine wrote, in order: what a restored journal holds."""
        self.pristine_tail = b""
        self.streams: list[str] = []
        self.live: str | None = None
        self.seq = 0
        self.ledger = 0
        self.latest: str | None = None
        """The engine's latest stream with a hello: the one its status speaks for."""
        self.finished_data: dict[str, dict[str, Any]] = {}
        self.ceilinged: set[str] = set()
        # The journal as it is on disk (None: no file), and its directory.
        self.file: list[Written] | None = None
        self.file_tail = b""
        self.present = True
        self.journal_read = False
        """A sweep read a journal of this book (so a journal gone later was there)."""
        # What the platform was seen to do.
        self.applied: dict[str, dict[int, bytes]] = collections.defaultdict(dict)
        """The bytes applied at each stream and seq, learned as `last_seq` moves."""
        self.skipped: dict[tuple[str, int], set[str]] = collections.defaultdict(set)
        """The sha256 of the lines an operator skipped, by stream and seq."""
        self.undisowned: set[str] = set()
        self.focus: str | None = None
        """The stream a `mend` is for: its remedy acts on it when it fits."""
        self.before: dict[str, Any] = EMPTY_BOOK
        # What the step did, for the checks after it.
        self.read: Read | None = None
        self.repaired: set[int] = set()
        self.found: list[tuple[str, str]] = []
        self.refusal = ""
        self.step = ""

    def teardown(self) -> None:
        self._end_every_problem()
        if self.found:
            raise AssertionError("\n".join(f"{kind}: {detail}" for kind, detail in self.found))
        # `compact` and `prune` work the whole database, a bounded number of attempts or runs a
        # call, oldest first: a backlog left by this example would decide what they reach of the
        # next one's book, and the same steps would end differently on a replay. Drained here,
        # each example starts from a database whose backlog is its own.
        while compact_quiet(self.db, quiet_for_s=0).compacted:
            pass
        while prune_runs(self.db, older_than_s=0).pruned:
            pass
        shutil.rmtree(self.book, ignore_errors=True)

    # --- helpers --------------------------------------------------------------------------------

    @property
    def journal(self) -> Path:
        return self.book / "events.jsonl"

    def _violation(self, kind: str, detail: str) -> None:
        self.found.append((kind, f"{self.step}: {detail}"))

    def _shown(self) -> dict[str, Any]:
        """The book's state in `show --json` (its lag is the journal's, not the state's; a book
        registered on first sight by a refused remedy shows what an unregistered one does)."""
        try:
            (book,) = show_state(self.db, [str(self.book)])["books"]
        except NotFound:
            return EMPTY_BOOK
        return {key: book[key] for key in EMPTY_BOOK}

    def _registered(self) -> bool:
        row = self.sql.execute("SELECT 1 FROM books WHERE book_id = %s", (self.book.name,))
        return row.fetchone() is not None

    def _compacted_seq(self, stream: str) -> int:
        row = self.sql.execute(
            "SELECT compacted_seq FROM attempts WHERE book_id = %s AND engine_run_id = %s",
            (self.book.name, stream),
        ).fetchone()
        return 0 if row is None else int(str(row[0]))

    def _lines(self) -> Iterator[tuple[int, Written]]:
        """Each complete line of the journal on disk, with its offset."""
        offset = 0
        for written in self.file or []:
            yield offset, written
            offset += len(written.raw)

    def _lines_as_read(self) -> Iterator[tuple[int, Written]]:
        """Each complete line as the contract reads it: a line belongs to the stream of the
        hello before it, whoever wrote it (a cut file written on puts one stream's line in
        another's part; before any hello, a line is no stream's)."""
        section: str | None = None
        for offset, written in self._lines():
            if written.seq == 1 and b'"type":"hello"' in written.raw:
                section = written.stream
            if section is not None:
                yield offset, Written(section, written.seq, written.raw)

    def _content(self) -> bytes:
        return b"".join(written.raw for written in self.file or []) + self.file_tail

    def _write_file(self, *, new_inode: bool) -> None:
        """Put the modelled journal on disk: a new file, or the same one rewritten in place."""
        if new_inode or not self.journal.exists():
            temporary = self.book / "events.jsonl.tmp"
            temporary.write_bytes(self._content())
            temporary.replace(self.journal)
        else:
            with open(self.journal, "r+b") as file:
                file.write(self._content())
                file.truncate()

    def _cli(self, argv: list[str]) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(["--dsn", self.dsn, *argv])
            except SystemExit as exited:
                code = int(exited.code or 0)
        return code, out.getvalue(), err.getvalue()

    def _remedy(
        self, name: str, call: Callable[[], object], argv: list[str], via_cli: bool
    ) -> object | None:
        """Run an operator's command through the API or the CLI; None when it was refused (and a
        refusal must have changed nothing), else what it returned (the CLI's output)."""
        self.step = f"{name} via {'cli' if via_cli else 'api'}"
        before = self._shown()
        result: object | None
        if via_cli:
            code, out, err = self._cli(argv)
            result, self.refusal = (out or "done") if code == 0 else None, err
        else:
            try:
                result = call()
            except REFUSALS as error:
                result, self.refusal = None, f"{type(error).__name__}: {error}"
        if result is None:
            _note(f"refused: {name}")
            if os.environ.get("REMEDIES_MODEL_WHY"):
                with open(os.environ["REMEDIES_MODEL_WHY"], "a") as why:
                    why.write(f"{name}: {self.refusal.strip()[:160]}\n")
            if self._shown() != before:
                self._violation("a refused remedy changed the state", self.refusal)
            return None
        _note(f"done: {name}")
        return result

    def _pick(self, data: st.DataObject, troubled: list[str] | None = None) -> str:
        """A stream to act on: one in trouble, one of the engine's, or (now and then) one that
        nobody launched."""
        if self.focus is not None and troubled and self.focus in troubled:
            return self.focus
        if troubled and data.draw(st.integers(0, 3), label="a stream in trouble unless") > 0:
            return data.draw(st.sampled_from(troubled), label="stream")
        if not self.streams or data.draw(st.integers(0, 7), label="a stranger unless") == 0:
            return STRANGER
        return data.draw(st.sampled_from(self.streams), label="stream")

    def _troubled(self, states: frozenset[str]) -> list[str]:
        return [s for s, a in _attempts(self.before).items() if a["state"] in states]

    def _foreign(self) -> list[str]:
        return [s for s in self.streams if s not in _attempts(self.before)]

    @initialize(mode=st.sampled_from(["auto", "named"]))
    def choose_mode(self, mode: Mode) -> None:
        self.mode = mode
        self.step = f"mode {mode}"
        _note(f"mode {mode}")

    # --- the rules: each step is the engine's, the journal's, a sweep, or an operator's ----------

    @precondition(lambda self: self.present)
    @rule(
        actions=st.lists(
            st.tuples(st.sampled_from(ENGINE_ACTIONS), st.integers(0, 40)), min_size=1, max_size=4
        ),
        then_sweep=st.booleans(),
    )
    def engine(self, actions: list[tuple[str, int]], then_sweep: bool) -> None:
        """A burst of the engine's life. An engine works, writes its latest lines again, finishes
        or crashes; when none is live, the launcher starts one first (a resume, a new run, a
        foreign stream, or one that dies before its hello). One engine runs at a time: a launch
        while one is live does nothing (the book's lock)."""
        for action, value in actions:
            if action.startswith("launch "):
                if self.live is None:
                    self._launch(action.removeprefix("launch "))
                continue
            if self.live is None:
                self._launch("resume")
                if self.live is None:
                    continue  # the launcher could not name it
            if action == "work":
                self._work(value)
            elif action == "write again" and self.seq > 1:
                self._write_again(1 + value % 3)
            elif action == "finish":
                self._finish(FINISH_CODES[value % len(FINISH_CODES)])
            elif action == "crash":
                self._crash(torn=value % 2 == 1)
        if then_sweep:
            self._sweep(via_cli=False, batch_lines_max=BATCH_LINES)

    @precondition(lambda self: self.pristine)
    @rule(what=st.sampled_from(DAMAGES), data=st.data(), then_sweep=st.booleans())
    def damage(self, what: str, data: st.DataObject, then_sweep: bool) -> None:
        """Something happens to the journal (or to its directory) between two steps."""
        if what in ("edit", "edit malformed") and self.file:
            self._edit(data, malformed=what == "edit malformed")
        elif what == "replace" and self.file is not None:
            self._replace()
        elif what == "truncate" and self.file:
            self._truncate(data)
        elif what == "garbage" and self.file is not None and not self.file_tail:
            self._garbage()
        elif what == "cut the garbage" and self.file and any(w.seq == 0 for w in self.file):
            self._cut_the_garbage()
        elif what == "restore":
            self._restore()
        elif what.startswith("delete") and self.present:
            self._delete(directory=what == "delete the directory")
        if then_sweep:
            self._sweep(via_cli=False, batch_lines_max=BATCH_LINES)

    @rule(via_cli=st.booleans(), batch_lines_max=st.sampled_from([BATCH_LINES, 1, 3]))
    def sweep(self, via_cli: bool, batch_lines_max: int) -> None:
        self._sweep(via_cli=via_cli, batch_lines_max=batch_lines_max)

    @rule(
        what=st.sampled_from(OPERATIONS),
        data=st.data(),
        via_cli=st.booleans(),
        then_sweep=st.booleans(),
    )
    def operate(self, what: str, data: st.DataObject, via_cli: bool, then_sweep: bool) -> None:
        """An operator's command (or the launcher's `exited`), through the API or the CLI, maybe
        followed by the next pass over the book."""
        operation: Callable[[st.DataObject, bool], None] = getattr(self, f"_{what}")
        operation(data, via_cli)
        if then_sweep:
            self._sweep(via_cli=False, batch_lines_max=BATCH_LINES)

    def _mendable(self) -> list[tuple[str, str]]:
        """The attempts in a state some remedy ends: (stream, state)."""
        return [
            (stream, attempt["state"])
            for stream, attempt in _attempts(self.before).items()
            if attempt["state"] in MENDS
        ]

    @precondition(lambda self: bool(self._mendable()))
    @rule(data=st.data(), via_cli=st.booleans(), then_sweep=st.booleans())
    def mend(self, data: st.DataObject, via_cli: bool, then_sweep: bool) -> None:
        """An operator's remedy that fits a state that stands, on that attempt's stream: so that
        remedies run on the states they end, not only to be refused."""
        self.focus, state = data.draw(st.sampled_from(self._mendable()), label="attempt")
        what = data.draw(st.sampled_from(MENDS[state]), label="remedy")
        operation: Callable[[st.DataObject, bool], None] = getattr(self, f"_{what}")
        try:
            operation(data, via_cli)
        finally:
            self.focus = None
        _note(f"mend {state} by {what}")
        if then_sweep:
            self._sweep(via_cli=False, batch_lines_max=BATCH_LINES)

    @precondition(
        lambda self: (
            self.present
            and self.live is None
            and bool(self.file)
            and not self.file_tail
            and all(written.seq != 0 for written in self.file)
        )
    )
    @rule(cut_back=st.booleans())
    def garbage_after_the_last_stream(self, cut_back: bool) -> None:
        """A garbage line after the journal's last stream (finished, or its engine gone), read
        by a pass: a line of no stream, the book's own error when that stream is finished. Then,
        maybe, the journal cut back to before it (`verify` reads it OK again) and read again.
        The journal holds no garbage before it: cut back to before an earlier one, it would lose
        the lines of a stream between the two that the pass above applied (and `damage` cuts
        garbage of its own)."""
        self._garbage()
        self._sweep(via_cli=False, batch_lines_max=BATCH_LINES)
        if self._shown()["error"] is not None:
            _note("the book's error: a garbage line after the last stream")
        if cut_back:
            self._cut_the_garbage()
            self._sweep(via_cli=False, batch_lines_max=BATCH_LINES)
            if self._shown()["error"] is not None:
                self._violation(
                    "a book's error outlives the line cut away and a pass that read clean",
                    str(self._shown()["error"]),
                )

    @rule(data=st.data())
    def sweep_the_root(self, data: st.DataObject) -> None:
        """An operator sweeps the root that holds the book as if it were a book: refused while a
        directory in it holds a journal (it holds book directories and no journal of its own).
        Before any journal there, it cannot be told from an empty book and is registered: a
        book registered by mistake, which `forget` ends."""
        self.step = "sweep the root"
        auto = ["--auto"] if data.draw(st.booleans(), label="auto") else []
        books_in_it = any((d / "events.jsonl").exists() for d in self.root.iterdir() if d.is_dir())
        code, _, err = self._cli(["sweep", *auto, str(self.root)])
        if books_in_it and (code != 2 or "no journal of its own" not in err):
            self._violation("a root swept as a book is not refused", f"exit {code}: {err[:200]}")
        _note("a root refused" if code == 2 else "a root registered as a book")

    @rule()
    def end_every_problem(self) -> None:
        self._end_every_problem()

    def _root_registered(self) -> bool:
        row = self.sql.execute("SELECT 1 FROM books WHERE path = %s", (str(self.root),))
        return row.fetchone() is not None

    def _standing(self) -> list[tuple[str, str]]:
        """Every problem that stands, (its kind, what it is): attempts stopped for a person, the
        book's own error, its problems, a root registered as a book."""
        shown = self._shown()
        standing = [
            (f"a stream {attempt['state']}", f"stream {stream}")
            for stream, attempt in _attempts(shown).items()
            if attempt["state"] in STANDING
        ]
        if shown["error"] is not None:
            standing.append(("the book's error", str(shown["error"])))
        standing += [
            (f"the book's {problem['kind']}", problem["detail"]) for problem in shown["problems"]
        ]
        if self._root_registered():
            standing.append(("a root registered as a book", str(self.root)))
        return standing

    def _end_every_problem(self) -> None:
        """End each problem that stands with the command the docs give for it, a pass between
        rounds (which also reads what no pass read yet); after at most three rounds nothing may
        stand: a state no documented command ends is a violation."""
        self.step = "end every problem"
        for round_ in range(3):
            was = {kind for kind, _ in self._standing()}
            self._sweep(via_cli=False, batch_lines_max=BATCH_LINES)
            self.read = None
            standing = self._standing()
            for kind in was - {kind for kind, _ in standing}:
                _note(f"ended by a pass: {kind}")
            if not standing:
                return
            for kind, _ in standing:
                _note(f"to end by a command (round {round_ + 1}): {kind}")
            shown = self._shown()
            if shown["error"] is not None:
                self._cli(["release", str(self.book), "--reason", "model: a line of no stream"])
            attempts = _attempts(shown)
            if any(attempt["state"] == "parked" for attempt in attempts.values()):
                for stream in self._foreign():  # what parks ours: not ours
                    with contextlib.suppress(*REFUSALS):
                        remedies.disown_stream(self.db, str(self.book), stream, reason="model")
            missing = any(p["kind"] == "journal_missing" for p in shown["problems"])
            for stream, attempt in attempts.items():
                awaiting = missing and attempt["state"] in AWAITING
                if attempt["state"] in STANDING or awaiting:
                    with contextlib.suppress(*REFUSALS):
                        remedies.abandon_attempt(self.db, str(self.book), stream, reason="model")
                    if stream == self.live:
                        self.live = None  # its engine is stopped with it
            if self._root_registered():
                self._cli(["forget", str(self.root), "--reason", "model: a root"])
        standing = self._standing()
        if standing:
            self._violation(
                "a problem no documented command ends",
                "; ".join(f"{kind}: {what}" for kind, what in standing),
            )

    # --- the engine -----------------------------------------------------------------------------

    def _append(self, *lines: tuple[int, bytes]) -> None:
        """The live engine appends lines of its stream (to its own copy and to the journal)."""
        assert self.live is not None
        written = [Written(self.live, seq, raw) for seq, raw in lines]
        self.pristine.extend(written)
        self.file = [*(self.file or []), *written]
        with open(self.journal, "ab") as file:
            file.write(b"".join(raw for _, raw in lines))

    def _cut_torn_tail(self) -> None:
        """A starting engine cuts back the unterminated line a crash left."""
        if self.file_tail and self.journal.exists():
            os.truncate(self.journal, self.journal.stat().st_size - len(self.file_tail))
        self.file_tail = self.pristine_tail = b""

    def _launch(self, kind: str) -> None:
        """In named mode the launcher names the stream first, unless it is foreign; a new run
        is named in either mode, and so is an engine that dies before its hello (the launcher
        reports its exit later)."""
        stream = _stream_id(len(self.streams) + 1)
        named = kind in ("new run", "dies") or (self.mode == "named" and kind != "foreign")
        if named:
            new_run = kind == "new run"
            done = self._remedy(
                "name (launch)",
                lambda: name_stream(self.db, str(self.book), stream, new_run=new_run),
                [],
                via_cli=False,
            )
            if done is None:
                return  # the launcher does not start an engine it could not name
        self.step = f"launch ({kind}) {stream}"
        self.streams.append(stream)
        if kind == "dies":
            return
        self._cut_torn_tail()
        self.live, self.seq, self.latest = stream, 1, stream
        self._append((1, hello(stream, book=self.book.name)))

    def _work(self, value: int) -> None:
        self.step = f"work {value}"
        self.seq += 1
        kind = WORK[value % len(WORK)]
        if kind == "spend":
            self.ledger += value
            raw = spend(self.seq, self.ledger)
        elif kind == "unit":
            raw = unit_done(self.seq, f"u-{value % 7}", value % 7)
        elif kind == "progress":
            raw = progress(self.seq, draft=(value % 10, 9))
        elif kind == "ceiling":
            assert self.live is not None
            self.ceilinged.add(self.live)
            raw = ceiling(self.seq, shortfall=value)
        else:
            raw = line(self.seq, "heartbeat", {"n": value})
        self._append((self.seq, raw))

    def _write_again(self, count: int) -> None:
        """The engine writes its latest lines again (a crash between write and watermark)."""
        self.step = f"write again {count}"
        mine = [(w.seq, w.raw) for w in self.pristine if w.stream == self.live][-count:]
        self._append(*mine)

    def _finish(self, code: int) -> None:
        self.step = f"finish {code}"
        self.seq += 1
        raw = finished(
            self.seq,
            code,
            "x",
            stop="soft" if code == 5 else None,
            refusal="schema_mismatch" if code == 13 else None,
            money=self.ledger,
        )
        assert self.live is not None
        self.finished_data[self.live] = json.loads(raw)["data"]
        self._append((self.seq, raw))
        self.live = None

    def _crash(self, *, torn: bool) -> None:
        """The engine dies without `finished`, maybe in the middle of writing a line."""
        self.step = f"crash (torn: {torn})"
        if torn:
            tail = spend(self.seq + 1, self.ledger)[:-7]
            with open(self.journal, "ab") as file:
                file.write(tail)
            self.file_tail = self.pristine_tail = tail
        self.live = None

    # --- the journal ----------------------------------------------------------------------------

    def _edit(self, data: st.DataObject, *, malformed: bool) -> None:
        """One line's bytes changed, in place or in a new file: another time, or a time that is
        no instant (a hello keeps a valid one: which stream its lines belong to must stay what
        the engine wrote)."""
        assert self.file is not None
        index = data.draw(st.integers(0, len(self.file) - 1), label="line")
        new_inode = data.draw(st.booleans(), label="as a new file")
        before = self.file[index]
        if before.seq == 0:
            return  # garbage: no stream's line to edit
        bad = malformed and before.seq != 1
        raw = _malformed(before.raw) if bad else _retimed(before.raw)
        self.step = f"edit line {index} (stream {before.stream} seq {before.seq}) to {raw!r}"
        changed = Written(before.stream, before.seq, raw)
        self.file = [*self.file[:index], changed, *self.file[index + 1 :]]
        self._write_file(new_inode=new_inode)

    def _garbage(self) -> None:
        """A line that is no stream's appended (a stray write): after a finished stream, before
        any hello, or inside a live stream, wherever the journal ends now."""
        assert self.file is not None
        self.step = "garbage appended"
        self.file = [*self.file, Written("", 0, GARBAGE)]
        with open(self.journal, "ab") as file:
            file.write(GARBAGE)

    def _cut_the_garbage(self) -> None:
        """The journal cut back to just before its first garbage line, in place (as an operator
        mends it: what `verify` reads as OK again)."""
        assert self.file is not None
        keep = next(index for index, written in enumerate(self.file) if written.seq == 0)
        self.step = f"cut back to {keep} lines, before the garbage"
        self.file, self.file_tail = self.file[:keep], b""
        os.truncate(self.journal, len(self._content()))

    def _replace(self) -> None:
        """The same bytes in a new file (a copy moved over it): every hint is void."""
        self.step = "replace"
        self._write_file(new_inode=True)

    def _truncate(self, data: st.DataObject) -> None:
        """The journal cut back to a line boundary, in place."""
        assert self.file is not None
        keep = data.draw(st.integers(0, len(self.file) - 1), label="lines kept")
        self.step = f"truncate to {keep} lines"
        self.file, self.file_tail = self.file[:keep], b""
        os.truncate(self.journal, len(self._content()))

    def _restore(self) -> None:
        """The journal put back from the engine's own copy (its directory too, if gone)."""
        self.step = "restore"
        self.book.mkdir(exist_ok=True)
        self.present = True
        self.file, self.file_tail = list(self.pristine), self.pristine_tail
        self._write_file(new_inode=True)

    def _delete(self, *, directory: bool) -> None:
        """The journal, or the whole book directory, deleted; an engine writing it is gone."""
        self.step = f"delete {'the directory' if directory else 'the journal'}"
        self.live = None
        if directory:
            shutil.rmtree(self.book)
            self.present = False
        else:
            self.journal.unlink(missing_ok=True)
        self.file, self.file_tail = None, b""

    # --- the platform ---------------------------------------------------------------------------

    def _sweep(self, *, via_cli: bool, batch_lines_max: int) -> None:
        self.step = f"sweep {self.mode} via {'cli' if via_cli else 'api'}"
        auto = ["--auto"] if self.mode == "auto" else []
        self.read = None
        if not self.present:
            # The worker passes a registered book by its id, directory or not.
            if self._registered():
                with contextlib.suppress(IngestError):
                    BookPass(self.db, self.book.name, mode=self.mode).run()
        elif via_cli:
            code, out, _ = self._cli(["sweep", "--json", *auto, str(self.book)])
            if code == 0:
                report = json.loads(out)
                self.read = Read(
                    report["start_offset"], report["parked"], report["unverified_duplicates"]
                )
        else:
            book = register_book(self.db, self.book)
            with contextlib.suppress(IngestError):
                done = BookPass(
                    self.db, book.book_id, mode=self.mode, batch_lines_max=batch_lines_max
                ).run()
                self.read = Read(done.start_offset, done.parked, done.unverified_duplicates)
        if self.read is not None and self.file is not None:
            self.journal_read = True
        after = self._shown()
        if self.journal_read and (not self.present or self.file is None):
            awaiting = [a for a in _attempts(after).values() if a["state"] in AWAITING]
            kinds = {problem["kind"] for problem in after["problems"]}
            if awaiting and "journal_missing" not in kinds:
                self._violation(
                    "a gone journal is not shown as journal_missing",
                    f"{len(awaiting)} attempts await lines, problems: {sorted(kinds)}",
                )
        if self.read is not None and self.read.start_offset == 0 and not self.read.parked:
            self._undisowned_read_again(after)

    def _undisowned_read_again(self, after: dict[str, Any]) -> None:
        """In auto mode an undisowned stream whose hello was just read has an attempt again."""
        hellos = {w.stream for _, w in self._lines() if w.seq == 1}
        for stream in sorted(self.undisowned & hellos):
            self.undisowned.discard(stream)
            if self.mode == "auto" and stream not in _attempts(after):
                self._violation(
                    "an undisowned stream is not a new attempt in auto mode",
                    f"stream {stream}'s hello was read again and it has no attempt",
                )

    def _compact(self, data: st.DataObject, via_cli: bool) -> None:
        self._remedy(
            "compact",
            lambda: compact_quiet(self.db, quiet_for_s=0),
            ["compact", "--quiet-for-s", "0"],
            via_cli,
        )
        compacted = self.sql.execute(
            "SELECT count(*) FROM attempts WHERE book_id = %s AND compacted_seq > 0",
            (self.book.name,),
        ).fetchone()
        if compacted is not None and int(str(compacted[0])):
            _note("an attempt compacted")

    def _prune(self, data: st.DataObject, via_cli: bool) -> None:
        dry_run = data.draw(st.booleans(), label="dry run")
        self._remedy(
            "prune",
            lambda: prune_runs(self.db, older_than_s=0, dry_run=dry_run),
            ["prune", "--older-than-s", "0", *(["--dry-run"] if dry_run else [])],
            via_cli,
        )

    def _rebuild(self, data: st.DataObject, via_cli: bool) -> None:
        """A projection caught up from the journal: it must change nothing of the platform's."""
        if self._registered():
            self._remedy(
                "rebuild",
                lambda: rebuild(self.db, Recording(), [self.book.name]),
                ["rebuild", "--projection", "projection_fixtures:Recording", str(self.book)],
                via_cli,
            )

    # --- the remedies ---------------------------------------------------------------------------

    def _name(self, data: st.DataObject, via_cli: bool) -> None:
        stream = self._pick(data, self._foreign() + self._troubled(frozenset({"disowned"})))
        new_run = data.draw(st.booleans(), label="new run")
        was = _attempts(self.before).get(stream)
        done = self._remedy(
            "name",
            lambda: name_stream(self.db, str(self.book), stream, new_run=new_run),
            ["name", str(self.book), stream, *(["--new-run"] if new_run else [])],
            via_cli,
        )
        if (
            was is not None
            and was["state"] == "disowned"
            and self.present  # a gone directory is refused before any stream is looked at
            and (done is not None or "undisown" not in self.refusal)
        ):
            self._violation(
                "name of a disowned stream is not refused naming undisown",
                f"stream {stream}: {'named' if done is not None else self.refusal}",
            )

    def _release(self, data: st.DataObject, via_cli: bool) -> None:
        stream = self._pick(data, self._troubled(frozenset({"quarantined", "stalled", "refused"})))
        self._remedy(
            "release",
            lambda: release_attempt(self.db, str(self.book), stream, reason="model"),
            ["release", str(self.book), stream, "--reason", "model"],
            via_cli,
        )

    def _skip(self, data: st.DataObject, via_cli: bool) -> None:
        """A look at the quarantined line (nothing changes), then its skip by the hash seen (or
        by a wrong one, or at a wrong seq: refused)."""
        stream = self._pick(data, self._troubled(frozenset({"quarantined"})))
        attempt = _attempts(self.before).get(stream)
        error = None if attempt is None else attempt["error"]
        if error is not None and error["seq"] is not None:
            seq = error["seq"]
        else:
            seq = 1 if attempt is None else attempt["last_seq"] + 1
        seq += data.draw(st.sampled_from([0, 0, 0, 1]), label="seq off by")
        right_hash = data.draw(st.integers(0, 3), label="a wrong hash unless") > 0
        compacted = (
            error is not None
            and error["kind"] == "payload_conflict"
            and "were compacted to the digest" in error["detail"]
        )
        looked = self._remedy(
            "skip (a look)",
            lambda: remedies.skip_line(
                self.db, str(self.book), stream, seq, sha256=None, reason="model"
            ),
            [],
            via_cli=False,
        )
        if looked is None:
            return
        if self._shown() != self.before:
            self._violation("a look at a line to skip changed the state", f"stream {stream}")
        if compacted:
            self._violation(
                "a conflict of a compacted range can be skipped",
                f"stream {stream} seq {seq}: {error['detail'] if error else ''}",
            )
        assert isinstance(looked, remedies.Action)
        sha256 = looked.detail["sha256"] if right_hash else "0" * 64
        done = self._remedy(
            "skip",
            lambda: remedies.skip_line(
                self.db, str(self.book), stream, seq, sha256=sha256, reason="model"
            ),
            ["skip", str(self.book), stream, str(seq), "--sha256", sha256, "--reason", "model"],
            via_cli,
        )
        if done is not None:
            self.skipped[(stream, seq)].add(sha256)

    def _disown(self, data: st.DataObject, via_cli: bool) -> None:
        stream = self._pick(data, self._foreign())
        self._remedy(
            "disown",
            lambda: remedies.disown_stream(self.db, str(self.book), stream, reason="model"),
            ["disown", str(self.book), stream, "--reason", "model"],
            via_cli,
        )

    def _undisown(self, data: st.DataObject, via_cli: bool) -> None:
        stream = self._pick(data, self._troubled(frozenset({"disowned"})))
        done = self._remedy(
            "undisown",
            lambda: remedies.undisown_stream(self.db, str(self.book), stream, reason="model"),
            ["undisown", str(self.book), stream, "--reason", "model"],
            via_cli,
        )
        if done is None:
            return
        self.undisowned.add(stream)
        if stream in _attempts(self._shown()):
            self._violation(
                "an undisowned stream is not foreign again", f"stream {stream} keeps an attempt"
            )

    def _gone_refused(self, name: str, stream: str, states: frozenset[str]) -> None:
        """`abandon` and `exited` find a book by its registered path even when its directory is
        gone: a refusal that says the directory is not one is not theirs to make."""
        attempt = _attempts(self.before).get(stream)
        if (
            not self.present
            and attempt is not None
            and attempt["state"] in states
            and "is not a directory" in self.refusal
        ):
            self._violation(
                f"{name} refuses the registered path of a gone directory",
                f"stream {stream} ({attempt['state']}): {self.refusal}",
            )

    def _abandon(self, data: st.DataObject, via_cli: bool) -> None:
        stream = self._pick(data, self._troubled(ABANDONABLE))
        done = self._remedy(
            "abandon",
            lambda: remedies.abandon_attempt(self.db, str(self.book), stream, reason="model"),
            ["abandon", str(self.book), stream, "--reason", "model"],
            via_cli,
        )
        if done is None:
            self._gone_refused("abandon", stream, ABANDONABLE)

    def _exited(self, data: st.DataObject, via_cli: bool) -> None:
        """The launcher reports a process's exit: if it is the live engine's, it is gone."""
        stream = self._pick(data, [self.live] if self.live else self._troubled(AWAITING))
        status = data.draw(st.sampled_from([0, 1, 2, 4, 5, 13, -9]), label="exit status")
        if stream == self.live:
            self.live = None
        done = self._remedy(
            "exited",
            lambda: remedies.report_exit(self.db, str(self.book), stream, status),
            ["exited", str(self.book), stream, str(status)],
            via_cli,
        )
        if done is None:
            self._gone_refused("exited", stream, frozenset(_attempts(self.before)))

    def _repair(self, data: st.DataObject, via_cli: bool) -> None:
        """Settle through the engine's status: its ledger and its latest stream's outcome."""
        if self.live is not None:
            status: dict[str, Any] = {"error": "project_locked"}
            code = 12
        else:
            finished_data = self.finished_data.get(self.latest or "")
            status = {
                "book_id": self.book.name,
                "engine_run_id": self.latest,
                "streams": [],
                "journal": "ok",
                "progress": {},
                "money": {"committed_micro_usd": self.ledger},
                "ceiling": {"halted": True, "scope": "book"}
                if self.latest in self.ceilinged and finished_data is None
                else None,
                "finished": finished_data,
            }
            code = 0
        (self.root / "status.json").write_text(json.dumps(status))
        (self.root / "status.code").write_text(str(code))
        done = self._remedy(
            "repair",
            lambda: repair_book(self.db, str(self.book), status_command=self.status_command),
            ["repair", str(self.book), "--status-command", self.status_command],
            via_cli,
        )
        if isinstance(done, str):
            run_id = json.loads(done)["run_id"]
        else:
            run_id = getattr(done, "run_id", None)
        if run_id is not None:
            self.repaired.add(int(run_id))

    # --- the checks -----------------------------------------------------------------------------

    @invariant()
    def checked(self) -> None:
        TALLY.steps += 1
        if self.present and self.file is not None:
            assert self.journal.read_bytes() == self._content(), "the model lost the journal"
        after = self._shown()
        for attempt in _attempts(after).values():
            _note(f"an attempt {attempt['state']}")
            if attempt["error"] is not None:
                compacted = "were compacted" in (attempt["error"]["detail"] or "")
                _note(f"an error {attempt['error']['kind']}{' (compacted)' if compacted else ''}")
        if self.before["error"] is not None and after["error"] is None:
            released = any(
                a["action"] == "release" and a["engine_run_id"] is None for a in after["actions"]
            ) > any(
                a["action"] == "release" and a["engine_run_id"] is None
                for a in self.before["actions"]
            )
            _note(f"the book's error ended by {'release' if released else 'a pass'} ({self.step})")
        pruned = sum(action["action"] == "prune" for action in after["actions"])
        if pruned > sum(action["action"] == "prune" for action in self.before["actions"]):
            _note("a run pruned")
        self._learn_applied(after)
        self._money_kept(after)
        self._ledger_whole(after)
        self._changed_lines_shown(after)
        found, self.found = self.found, []
        self.before, self.read, self.repaired, self.refusal = after, None, set(), ""
        for kind, detail in found:
            TALLY.violations[kind] += 1
            TALLY.first.setdefault(kind, detail)
            _note(f"violation: {kind}")
        if found and not COLLECT:
            raise AssertionError("\n".join(f"{kind}: {detail}" for kind, detail in found))

    def _learn_applied(self, after: dict[str, Any]) -> None:
        """The bytes of each seq applied in this step: the first line of the stream at that seq
        in what the sweep read."""
        start = 0 if self.read is None else self.read.start_offset
        before = _attempts(self.before)
        lines = list(self._lines_as_read())
        for stream, attempt in _attempts(after).items():
            old = before.get(stream)
            for seq in range((0 if old is None else old["last_seq"]) + 1, attempt["last_seq"] + 1):
                found = [w.raw for offset, w in lines if w.stream == stream and w.seq == seq]
                read = [
                    w.raw
                    for offset, w in lines
                    if w.stream == stream and w.seq == seq and offset >= start
                ]
                if not found and _sha256(GARBAGE) in self.skipped[(stream, seq)]:
                    # A line with no seq, skipped: it took the stream's next seq (docs: `skip`).
                    self.applied[stream][seq] = GARBAGE
                    continue
                if not found:
                    self._violation(
                        "a seq applied that the journal does not hold", f"{stream} seq {seq}"
                    )
                    continue
                self.applied[stream][seq] = (read or found)[0]

    def _money_kept(self, after: dict[str, Any]) -> None:
        """Invariant 1."""
        before_runs = {run["run_id"]: run for run in self.before["runs"]}
        before = _attempts(self.before)
        moved = {
            attempt["run_id"]
            for stream, attempt in _attempts(after).items()
            if attempt["last_seq"] > (before[stream]["last_seq"] if stream in before else 0)
        } | self.repaired
        first_moved = min(moved, default=math.inf)
        for run in after["runs"]:
            old = before_runs.get(run["run_id"])
            if old is None or run["run_id"] in moved:
                continue
            if run["units"] != old["units"]:
                self._violation(
                    "a run's units moved with no line of its own applied",
                    f"run {run['run_id']}: {old['units']} -> {run['units']}",
                )
            if run["spent_micro_usd"] != old["spent_micro_usd"] and first_moved > run["run_id"]:
                self._violation(
                    "a run's spent_micro_usd moved with no line of its own applied",
                    f"run {run['run_id']}: {old['spent_micro_usd']} -> {run['spent_micro_usd']}",
                )

    def _ledger_whole(self, after: dict[str, Any]) -> None:
        """Invariant 2, and what a prune record keeps."""
        prunes = [a["evidence"] for a in after["actions"] if a["action"] == "prune"]
        for evidence in prunes:
            missing = [key for key in ("spent_micro_usd", "units") if key not in evidence]
            if missing:
                self._violation(
                    "a prune record lacks the run's part or units",
                    f"run {evidence.get('run_id')}: no {', '.join(missing)}",
                )
        ledgers = [_ledger(r["committed_micro_usd"], r["settled_micro_usd"]) for r in after["runs"]]
        ledgers += [
            _ledger(evidence.get("committed_micro_usd"), evidence.get("settled_micro_usd"))
            for evidence in prunes
        ]
        book_ledger = max(ledgers, default=0)
        parts = sum(run["spent_micro_usd"] for run in after["runs"]) + sum(
            int(evidence.get("spent_micro_usd") or 0) for evidence in prunes
        )
        if parts != book_ledger:
            self._violation(
                "the runs' parts do not sum to the book's ledger",
                f"parts {parts} (pruned {len(prunes)}), ledger {book_ledger}",
            )
        if book_ledger > self.ledger:
            self._violation(
                "the book's ledger is above the engine's", f"{book_ledger} > {self.ledger}"
            )

    def _changed_lines_shown(self, after: dict[str, Any]) -> None:
        """Invariant 3, over the lines this step's sweep read."""
        read = self.read
        if read is None:
            return
        attempts = _attempts(after)
        end = math.inf
        if read.parked:
            end = min(
                (
                    a["error"]["offset"]
                    for a in attempts.values()
                    if a["state"] == "parked" and a["error"] is not None
                ),
                default=math.inf,
            )
        book_error = after["error"]
        for offset, written in self._lines_as_read():
            if offset < read.start_offset or offset >= end:
                continue
            if written.seq == 0:
                continue  # garbage: the line of no stream, never applied as anyone's
            attempt = attempts.get(written.stream)
            if attempt is None or attempt["state"] in STOPPED:
                continue  # foreign, pruned, or not read: nothing passed
            if written.seq > attempt["last_seq"]:
                continue
            if written.raw == self.applied[written.stream].get(written.seq):
                continue
            if _sha256(written.raw) in self.skipped[(written.stream, written.seq)]:
                continue
            if book_error is not None and book_error["offset"] == offset:
                continue
            if read.unverified_duplicates and self._compacted_seq(written.stream) >= written.seq:
                _note("a changed line of a compacted range read from its middle")
                continue
            self._violation(
                "a changed line passed as a duplicate",
                f"stream {written.stream} seq {written.seq} at byte {offset} "
                f"({attempt['state']}, last_seq {attempt['last_seq']}): {written.raw!r}",
            )


def _run(fresh_dsn: str, tmp_path: Path, chosen: settings) -> None:
    db = Database(fresh_dsn)
    sql = psycopg.connect(fresh_dsn, autocommit=True)
    RemediesLife.configure(fresh_dsn, db, sql, tmp_path.resolve() / "books")
    TALLY.examples, TALLY.steps = 0, 0
    TALLY.violations.clear()
    TALLY.first.clear()
    TALLY.reached.clear()
    try:
        run_state_machine_as_test(RemediesLife, settings=chosen)
    finally:
        print(TALLY.summary())
        db.close()
        sql.close()
    assert not TALLY.violations, TALLY.summary()


@pytest.mark.postgres
def test_remedies_in_any_order_keep_money_and_changed_lines_shown(
    fresh_dsn: str, tmp_path: Path
) -> None:
    _run(
        fresh_dsn,
        tmp_path,
        settings(
            settings.default,
            max_examples=60,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


@pytest.mark.slow
@pytest.mark.postgres
def test_remedies_in_any_order_thorough(fresh_dsn: str, tmp_path: Path) -> None:
    """The same machine, longer: 300 programs of up to 100 steps (about 10 minutes)."""
    thorough = settings.get_profile("thorough")
    _run(
        fresh_dsn,
        tmp_path,
        settings(
            thorough,
            max_examples=300,
            stateful_step_count=100,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )

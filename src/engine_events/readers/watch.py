"""`engine-events watch BOOK_DIR`: a live view of a book for a person, read from the journal alone.

Three parts, kept apart so each can be tested without a terminal:

- `JournalTail` reads the complete lines appended to `BOOK_DIR/events.jsonl` since its last call,
  about `READ_BYTES_MAX` bytes at most, through the engine's one line reader (`lines`): one line
  and one chunk held at a time; an unterminated last line waits for its `\n`.
- `BookView` is the state a person sees, fed one line at a time: per-phase progress, units done,
  the book's spend and the ceiling's shortfall, the current stream and its seq, the outcome.
  A new stream's `hello` resets the per-stream state (phases, units of the stream, ceiling, outcome)
  and keeps the book-wide state (spend, units of the book). A readable hello that is refused
  starts its stream all the same (nothing of it shown), and a repeated hello returns to its
  stream: its seq and its version, by which its lines are read. Repeated lines (seq not above the
  stream's last) are skipped, so an at-least-once journal never counts a unit twice.
- `render` turns a view into `rich` renderables; `command` drives them with `rich.live.Live`.

The view is for a person, not a check: a malformed line is counted and shown, never fatal
(`engine-events verify` is the check). Money is shown in USD, computed from integer micro-USD.

A journal is written by another process and is shown as text only: every string from it goes
through `plain` (controls, bidi controls replaced, length capped) into `rich.text.Text`, never into
markup. The journal is read only when it is a regular file: a FIFO, socket, device or directory at
its path is a `JournalNotRegular` error, never a read that blocks or never ends.

`command` returns 0 when the view ended as asked (one snapshot, or the latest stream `finished` and
the engine's lock free), 1 when `timeout_s` passed first, 2 when the book directory does not exist,
3 when the journal cannot be read (not a regular file, or opening it failed), 130 when interrupted
(Ctrl-C).
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from .._journal_file import JOURNAL_FILE_NAME
from .._line import LINE_BYTES_MAX
from .._lock import LOCK_FILE_NAME
from ..errors import EngineEventsError, LineError, NotARegularFile
from ..grammar import Line
from .decode import decode_stream_line, require_supported
from .lines import LineReader
from .plain import plain, usd
from .regular_file import open_regular

EXIT_DONE = 0
EXIT_TIMED_OUT = 1
EXIT_NO_BOOK = 2
EXIT_BAD_JOURNAL = 3
EXIT_INTERRUPTED = 130

POLL_S = 0.15
"""How often the journal's size (and the engine's lock) is checked while following."""
READ_BYTES_MAX = 4 * LINE_BYTES_MAX
"""The most read from the journal by one `JournalTail.read`, so that a redraw is never far off."""
RUN_ID_SHORT_CHARS = 8
NAME_CHARS_MAX = 80
"""The most shown of one id or name (book, unit, phase, version): a view is not a dump."""
TEXT_CHARS_MAX = 200
"""The most shown of one free text (outcome, signature, a problem's description)."""
PHASES_SHOWN_MAX = 40
"""Phases beyond this are counted, not drawn: a snapshot of thousands stays one screen."""
FOLLOW_READS_MAX = 64
"""While following, the most reads between two redraws, so the view and the timeout keep up
with a journal that grows faster than it is read."""

"""O_NONBLOCK: opening a FIFO must not wait for a writer. O_NOCTTY: a terminal device at the path
must not become ours. The file type is checked before any read."""


class JournalUnreadable(EngineEventsError):
    """The book's journal cannot be read: it is not a regular file, or opening it failed."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class JournalNotRegular(JournalUnreadable):
    """A FIFO, socket, device or directory stands at the journal's path."""


def open_journal(path: Path) -> int | None:
    """A read-only descriptor on the journal, or None while it does not exist (see
    `regular_file`: a FIFO, socket, device or directory is refused before any read)."""
    try:
        return open_regular(path)
    except FileNotFoundError:
        return None
    except NotARegularFile as error:
        raise JournalNotRegular(path, f"is {error.strerror}") from error
    except OSError as error:
        raise JournalUnreadable(path, f"cannot be opened: {error.strerror}") from error


@dataclass
class PhaseView:
    done: int
    total: int


@dataclass(frozen=True)
class Outcome:
    """What a `finished` line told."""

    outcome: str
    exit_code: int
    stop: str | None
    refusal: str | None
    units_done: int | None
    units_total: int | None


@dataclass
class _StreamSeen:
    """What the view keeps of a stream it left, for when the journal returns to it (the stream's
    hello repeated, then its lines again): its last seq, and the version its lines are read by."""

    seq: int
    stream_version: str | None
    refused_version: str | None
    refused_hello: str | None


@dataclass
class BookView:
    """Everything the view shows, built from the journal's lines in order (see `feed`)."""

    book_id: str | None = None
    engine_run_id: str | None = None
    stream_version: str | None = None
    """The current stream's version, as its hello names it: its lines are read by it."""
    streams: int = 0
    seq: int = 0
    """The last seq applied in the current stream."""
    phases: dict[str, PhaseView] = field(default_factory=dict)
    units_done: int = 0
    """`unit_done` lines of the current stream."""
    units_done_book: int = 0
    """`unit_done` lines of every stream of the book."""
    last_unit: str | None = None
    spend_micro_usd: int | None = None
    """The book's committed spend: the greatest cumulative `spend` (or `finished.money`) seen."""
    shortfall_micro_usd: int | None = None
    """Set when the current stream stopped on the ceiling and told what was missing."""
    ceiling_halted: bool = False
    bank_stop_signature: str | None = None
    finished: Outcome | None = None
    """The outcome of the current (latest) stream, once its `finished` line is read."""
    refused_version: str | None = None
    """The current stream's version when its major is not one this reader speaks."""
    refused_hello: str | None = None
    """Why the current stream's hello was refused as malformed (a readable hello: it starts its
    stream whatever else is wrong with it). Nothing of that stream is shown."""
    lines: int = 0
    problems: int = 0
    last_problem: str | None = None
    gaps: int = 0
    _seen: dict[str, _StreamSeen] = field(default_factory=dict, repr=False)

    def feed(self, raw: bytes | None, *, offset: int | None = None) -> None:
        """Apply one complete journal line (None: a line longer than the limit, not kept)."""
        self.lines += 1
        where = f"line {self.lines}" + ("" if offset is None else f" (byte {offset})")
        if raw is None:
            self._problem(f"{where}: longer than {LINE_BYTES_MAX} bytes")
            return
        try:
            line = decode_stream_line(raw, self.stream_version)
        except LineError as error:
            self._problem(f"{where}: {error.kind}: {error.detail}")
            if error.engine_run_id is not None:
                self._on_refused_hello(error)
            return
        if line.type == "hello":
            self._on_hello(line, where)
            return
        if self.engine_run_id is None:
            self._problem(f"{where}: a line before any hello")
            return
        if self.refused_version is not None or self.refused_hello is not None:
            return
        if line.seq <= self.seq:
            return  # a repeat: the journal is at-least-once
        if line.seq > self.seq + 1:
            self.gaps += 1
            self._problem(f"{where}: gap, seq {line.seq} after {self.seq}")
        self.seq = line.seq
        self._apply(line)

    def _problem(self, text: str) -> None:
        self.problems += 1
        self.last_problem = text[:200]

    def _leave(self) -> None:
        """Keep what the current stream needs when the journal returns to it."""
        if self.engine_run_id is not None:
            self._seen[self.engine_run_id] = _StreamSeen(
                self.seq, self.stream_version, self.refused_version, self.refused_hello
            )

    def _return_to(self, run_id: str) -> bool:
        """Back to a stream already seen (its hello repeated): its seq and its version again.
        False when the stream is new."""
        if run_id not in self._seen:
            return False
        self._leave()
        seen = self._seen[run_id]
        self.engine_run_id = run_id
        self.seq, self.stream_version = seen.seq, seen.stream_version
        self.refused_version, self.refused_hello = seen.refused_version, seen.refused_hello
        return True

    def _start(self, run_id: str, stream_version: str | None) -> None:
        """A new stream: the per-stream state starts afresh, the book-wide state goes on."""
        self._leave()
        self.streams += 1
        self.engine_run_id = run_id
        self.stream_version = stream_version
        self.seq = 1
        self.phases = {}
        self.units_done = 0
        self.last_unit = None
        self.shortfall_micro_usd = None
        self.ceiling_halted = False
        self.bank_stop_signature = None
        self.finished = None
        self.refused_version = None
        self.refused_hello = None
        self._leave()  # known from now on: a repeat of its hello returns to it

    def _on_hello(self, hello: Line, where: str) -> None:
        run_id = str(hello.data["engine_run_id"])
        if self._return_to(run_id):
            return
        self._start(run_id, str(hello.data["stream_version"]))
        self.book_id = str(hello.data["book_id"])
        try:
            require_supported(hello)
        except LineError as error:
            self.refused_version = self.stream_version
            self._leave()
            self._problem(f"{where}: {error.kind}: {error.detail}")

    def _on_refused_hello(self, error: LineError) -> None:
        """A readable hello that was refused starts its stream all the same (nothing of it is
        shown); the lines after it are that stream's, never the one before it."""
        assert error.engine_run_id is not None
        if self._return_to(error.engine_run_id):
            return
        self._start(error.engine_run_id, error.stream_version)
        if error.kind == "unsupported_version":
            self.refused_version = error.stream_version
        else:
            self.refused_hello = error.detail
        self._leave()

    def _apply(self, line: Line) -> None:
        data = line.data
        if line.type == "progress":
            self.phases = {
                str(name): PhaseView(done=count["done"], total=count["total"])
                for name, count in data["phases"].items()
            }
        elif line.type == "unit_done":
            self.units_done += 1
            self.units_done_book += 1
            self.last_unit = str(data["unit"])
        elif line.type == "spend":
            self._spent(data["committed_micro_usd"])
        elif line.type == "ceiling":
            self.ceiling_halted = bool(data["halted"])
            shortfall = data.get("shortfall_micro_usd")
            self.shortfall_micro_usd = shortfall if isinstance(shortfall, int) else None
        elif line.type == "bank_stop":
            self.bank_stop_signature = str(data["signature"])
        elif line.type == "finished":
            volume = data["volume"]
            self.finished = Outcome(
                outcome=str(data["outcome"]),
                exit_code=int(data["exit_code"]),
                stop=data.get("stop"),
                refusal=data.get("refusal"),
                units_done=volume.get("units_done"),
                units_total=volume.get("units_total"),
            )
            money = data.get("money")
            if isinstance(money, dict):
                self._spent(money["committed_micro_usd"])
        # an unknown type of the same major: nothing to show, the seq still advances

    def _spent(self, committed_micro_usd: int) -> None:
        if self.spend_micro_usd is None or committed_micro_usd > self.spend_micro_usd:
            self.spend_micro_usd = committed_micro_usd


class JournalTail:
    """The complete lines appended to a journal since the last `read`, in order, with offsets.

    Each `read` opens the journal anew (see `open_journal`) and raises `JournalUnreadable` when it
    is not a regular file. The lines come from `lines.LineReader`: `offset` is where the next
    unread line starts, and a line longer than `LINE_BYTES_MAX` is skipped without being kept and
    reported as `(offset, None)`. When the file is replaced or becomes shorter than what was read,
    `replaced` is set and reading starts again from byte 0.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.replaced = False
        self._identity: tuple[int, int] | None = None
        self._reader = LineReader()

    @property
    def offset(self) -> int:
        return self._reader.offset

    def read(self) -> list[tuple[int, bytes | None]]:
        """Return the complete lines available now (at most about `READ_BYTES_MAX` bytes read)."""
        self.replaced = False
        fd = open_journal(self.path)
        if fd is None:
            return []
        try:
            status = os.fstat(fd)
            identity = (status.st_dev, status.st_ino)
            reader = self._reader
            end = reader.seen_to if reader.skipping else reader.offset
            if self._identity is not None and (identity != self._identity or status.st_size < end):
                self.replaced = True
                self._reader = LineReader()
            self._identity = identity
            return [
                (line.offset, line.raw) for line in self._reader.read(fd, bytes_max=READ_BYTES_MAX)
            ]
        except OSError as error:
            raise JournalUnreadable(self.path, f"cannot be read: {error.strerror}") from error
        finally:
            os.close(fd)


def short_run_id(engine_run_id: str) -> str:
    if len(engine_run_id) <= RUN_ID_SHORT_CHARS:
        return engine_run_id
    return engine_run_id[:RUN_ID_SHORT_CHARS] + "…"


_GOOD_CODES = {0, 2}
_PAUSE_CODES = {3, 4, 5}


def render(view: BookView, *, engine_live: bool | None = None) -> RenderableType:
    """The view as `rich` renderables: a summary, one progress bar per phase, the outcome.

    Every string that came from the journal is passed through `plain` into a `Text`: markup in it
    (`[bold]`, `[/]`) is shown as typed, and its controls never reach the terminal.
    """
    summary = Table.grid(padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column()
    if view.engine_run_id is None:
        summary.add_row("Stream", "waiting for the first line of the journal")
    else:
        streams = f"{view.streams} stream{'s' if view.streams != 1 else ''} in the journal"
        stream = Text.assemble(_name(short_run_id(view.engine_run_id)), f" seq {view.seq}")
        if view.stream_version:
            stream.append_text(Text.assemble(", version ", _name(view.stream_version)))
        stream.append(f" ({streams})")
        summary.add_row("Stream", stream)
    units = Text(f"{view.units_done} done in this stream, {view.units_done_book} in the book")
    if view.last_unit is not None:
        units.append_text(Text.assemble("; latest ", _name(view.last_unit)))
    summary.add_row("Units", units)
    summary.add_row("Spend", _spend_text(view))
    if view.bank_stop_signature is not None:
        summary.add_row("Bank stop", _text(view.bank_stop_signature, style="yellow"))
    summary.add_row("Outcome", _outcome_text(view))
    if engine_live is not None:
        summary.add_row("Engine", "running (holds the book lock)" if engine_live else "not running")
    if view.problems:
        summary.add_row(
            "Problems",
            Text.assemble(
                f"{view.problems} unreadable line(s) skipped; last: ",
                _text(view.last_problem or ""),
                style="red",
            ),
        )

    phases = Table(title=None, expand=False, show_edge=False, pad_edge=False)
    phases.add_column("Phase", style="cyan", no_wrap=True)
    phases.add_column("Progress", width=40)
    phases.add_column("Done", justify="right")
    phases.add_column("%", justify="right")
    for name, phase in list(view.phases.items())[:PHASES_SHOWN_MAX]:
        total = max(phase.total, 1)
        completed = min(phase.done, phase.total) if phase.total else total
        percent = 100 * completed // total
        bar = ProgressBar(total=total, completed=completed, width=40)
        phases.add_row(_name(name), bar, Text(f"{phase.done}/{phase.total}"), Text(f"{percent}%"))
    hidden = len(view.phases) - PHASES_SHOWN_MAX
    if hidden > 0:
        phases.add_row(Text(f"… {hidden} more", style="dim"))
    parts: list[RenderableType] = [summary]
    if view.phases:
        parts.append(phases)
    title = Text("Book") if view.book_id is None else Text.assemble("Book ", _name(view.book_id))
    return Panel(Group(*parts), title=title, title_align="left", expand=False)


def _name(value: str) -> Text:
    """An id or a name from the journal, as plain text of a bounded length."""
    return Text(plain(value, NAME_CHARS_MAX))


def _text(value: str, *, style: str = "") -> Text:
    """A free text from the journal, as plain text of a bounded length."""
    return Text(plain(value, TEXT_CHARS_MAX), style=style)


def _spend_text(view: BookView) -> Text:
    if view.spend_micro_usd is None:
        text = Text("nothing committed yet")
    else:
        text = Text(f"{usd(view.spend_micro_usd)} committed")
    if view.shortfall_micro_usd is not None:
        text.append(
            f"; ceiling reached: the next step needs {usd(view.shortfall_micro_usd)} more",
            style="yellow",
        )
    elif view.ceiling_halted:
        text.append("; ceiling reached", style="yellow")
    return text


def _outcome_text(view: BookView) -> Text:
    outcome = view.finished
    if outcome is None:
        if view.refused_hello is not None:
            return Text.assemble("hello refused: ", _text(view.refused_hello), style="red")
        if view.refused_version is not None:
            return Text.assemble(
                "stream version ", _name(view.refused_version), " is not supported", style="red"
            )
        return Text("running" if view.engine_run_id is not None else "not started")
    if outcome.exit_code in _GOOD_CODES:
        style = "green"
    elif outcome.exit_code in _PAUSE_CODES:
        style = "yellow"
    else:
        style = "red"
    text = Text.assemble(_text(outcome.outcome), f" (exit {outcome.exit_code})", style=style)
    if outcome.stop is not None:
        text.append_text(Text.assemble(", ", _name(outcome.stop), " stop"))
    if outcome.refusal is not None:
        text.append_text(Text.assemble(", refusal ", _name(outcome.refusal)))
    if outcome.units_done is not None and outcome.units_total is not None:
        text.append(f"; {outcome.units_done}/{outcome.units_total} units")
    return text


def read_available(tail: JournalTail, view: BookView, *, max_reads: int | None = None) -> BookView:
    """Feed `view` every complete line available now; a replaced journal starts a fresh view.

    With `max_reads`, stop after that many reads even if more lines are waiting.
    """
    reads = 0
    while max_reads is None or reads < max_reads:
        reads += 1
        lines = tail.read()
        if tail.replaced:
            view = BookView()
        for offset, raw in lines:
            view.feed(raw, offset=offset)
        if not lines:
            break
    return view


def engine_live(book_dir: Path) -> bool | None:
    """True when a live process holds the book's lock, None when the lock cannot be probed.

    The probe of `_lock.is_locked`, opened like the journal: a FIFO or a device at the lock's path
    must not block the view. No engine can hold a lock that is not a regular file it can open.
    """
    path = book_dir / LOCK_FILE_NAME
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return False
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)
    return False


def command(book_dir: Path, *, once: bool, exit_on_finish: bool, timeout_s: float | None) -> int:
    """`engine-events watch BOOK_DIR`: show the book, following its journal as it grows."""
    if not book_dir.is_dir():
        print(f"{plain(str(book_dir))}: no such book directory", file=sys.stderr)
        return EXIT_NO_BOOK
    try:
        return _watch(book_dir, once=once, exit_on_finish=exit_on_finish, timeout_s=timeout_s)
    except JournalUnreadable as error:
        print(f"engine-events watch: {type(error).__name__}: {plain(str(error))}", file=sys.stderr)
        return EXIT_BAD_JOURNAL


def _watch(book_dir: Path, *, once: bool, exit_on_finish: bool, timeout_s: float | None) -> int:
    console = Console()
    tail = JournalTail(book_dir / JOURNAL_FILE_NAME)
    view = read_available(tail, BookView())
    if once:
        console.print(render(view, engine_live=engine_live(book_dir)))
        return EXIT_DONE
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    live_now = engine_live(book_dir)
    try:
        with Live(render(view, engine_live=live_now), console=console, auto_refresh=False) as live:
            while True:
                view = read_available(tail, view, max_reads=FOLLOW_READS_MAX)
                live_now = engine_live(book_dir)
                live.update(render(view, engine_live=live_now), refresh=True)
                if exit_on_finish and view.finished is not None and not live_now:
                    return EXIT_DONE
                if deadline is not None and time.monotonic() >= deadline:
                    return EXIT_TIMED_OUT
                time.sleep(POLL_S)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED

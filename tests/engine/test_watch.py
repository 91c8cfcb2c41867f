"""`engine-events watch`: the view's state model, its rendering, the tail and the command."""

from __future__ import annotations

import fcntl
import io
import os
import re
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from engine_events import ExitCode
from engine_events._events import (
    BankStop,
    Ceiling,
    Event,
    Finished,
    Hello,
    PhaseCount,
    Progress,
    Spend,
    StopKind,
    UnitDone,
)
from engine_events._line import LINE_BYTES_MAX, encode_line
from engine_events.readers.plain import plain
from engine_events.readers.watch import (
    EXIT_BAD_JOURNAL,
    BookView,
    JournalNotRegular,
    JournalTail,
    Outcome,
    PhaseView,
    command,
    read_available,
    render,
    usd,
)

T = "2026-11-30T02:08:57.213Z"
RUN_A = "0b6c1f3e-8a57-4d0b-9a63-2f7c4f0e5a11"
RUN_B = "5d2e9c40-3b1a-4f8e-8c7d-6a9b0c1d2e33"


def hello(run: str, version: str = "1.3") -> bytes:
    event = Hello(engine_run_id=run, book_id="book-1", chunker_version="c", stream_version=version)
    return encode_line(1, event, T)


def progress(**phases: tuple[int, int]) -> Progress:
    return Progress(phases={name: PhaseCount(done=d, total=t) for name, (d, t) in phases.items()})


def finished(code: ExitCode, stop: StopKind | None = None, spent: int = 0) -> Finished:
    return Finished(
        exit_code=code,
        units_done=2,
        units_total=6,
        committed_micro_usd=spent,
        stop=stop,
    )


def stream(run: str, *events: Event) -> list[bytes]:
    """A stream's lines: its hello, then each event with the next seq."""
    return [hello(run)] + [encode_line(seq, e, T) for seq, e in enumerate(events, start=2)]


def view_of(*lines: bytes | None) -> BookView:
    view = BookView()
    for raw in lines:
        view.feed(raw)
    return view


FIRST = stream(
    RUN_A,
    progress(draft=(0, 6), edit=(0, 6)),
    progress(draft=(2, 6), edit=(1, 6)),
    UnitDone(unit="ch-01", index=0),
    Spend(committed_micro_usd=1_250_000),
    UnitDone(unit="ch-02", index=1),
    Spend(committed_micro_usd=2_500_000),
)


def test_view_follows_progress_units_and_spend() -> None:
    """The view holds the latest phase snapshot, the units done, the latest unit and the spend."""
    view = view_of(*FIRST)
    assert view.engine_run_id == RUN_A
    assert view.book_id == "book-1"
    assert view.seq == 7
    assert {k: (p.done, p.total) for k, p in view.phases.items()} == {
        "draft": (2, 6),
        "edit": (1, 6),
    }
    assert (view.units_done, view.units_done_book, view.last_unit) == (2, 2, "ch-02")
    assert view.spend_micro_usd == 2_500_000
    assert view.finished is None
    assert view.problems == 0


def test_repeated_lines_are_not_counted_twice() -> None:
    """Re-projected lines (seq not above the last) change nothing: a unit is counted once."""
    view = view_of(*FIRST, FIRST[3], FIRST[0], FIRST[4], FIRST[3])
    assert (view.units_done, view.units_done_book) == (2, 2)
    assert view.seq == 7
    assert view.streams == 1


def test_new_stream_resets_the_stream_but_keeps_the_books_spend() -> None:
    """A new hello resets phases, stream units and outcome; book spend and book units stay."""
    first = [*FIRST, encode_line(8, finished(ExitCode.CEILING, spent=2_500_000), T)]
    second = stream(RUN_B, progress(draft=(3, 6)), UnitDone(unit="ch-03", index=2))
    view = view_of(*first, *second)
    assert view.engine_run_id == RUN_B
    assert view.streams == 2
    assert view.seq == 3
    assert list(view.phases) == ["draft"]
    assert (view.units_done, view.units_done_book, view.last_unit) == (1, 3, "ch-03")
    assert view.spend_micro_usd == 2_500_000
    assert view.finished is None


def test_spend_keeps_the_greatest_cumulative_value() -> None:
    """Spend is cumulative: an older, smaller value read later does not lower it."""
    view = view_of(*stream(RUN_A, Spend(committed_micro_usd=900), Spend(committed_micro_usd=700)))
    assert view.spend_micro_usd == 900


def test_ceiling_and_outcome() -> None:
    """A ceiling tells the shortfall; finished tells outcome, exit code and soft/hard stop."""
    view = view_of(
        *stream(
            RUN_A,
            Spend(committed_micro_usd=3_000_000),
            Ceiling(shortfall_micro_usd=250_000),
            finished(ExitCode.CEILING, spent=3_000_000),
        )
    )
    assert view.shortfall_micro_usd == 250_000
    assert view.ceiling_halted
    assert view.finished is not None
    assert (view.finished.outcome, view.finished.exit_code, view.finished.stop) == (
        "ceiling",
        4,
        None,
    )
    stopped = view_of(*stream(RUN_A, finished(ExitCode.GRACEFUL_STOP, stop="hard")))
    assert stopped.finished is not None
    assert stopped.finished.stop == "hard"


def test_bad_lines_are_counted_not_fatal() -> None:
    """Malformed, over-long and before-any-hello lines are counted; good lines still apply."""
    spend_line = encode_line(2, Spend(committed_micro_usd=5), T)
    view = view_of(spend_line, hello(RUN_A), b"{oops\n", None, spend_line)
    assert view.problems == 3
    assert view.spend_micro_usd == 5
    assert view.last_problem is not None
    assert "longer than" in view.last_problem


def test_gap_is_noted_and_the_view_goes_on() -> None:
    """A hole in seq is shown as a problem; the view still applies the later line."""
    lines = stream(RUN_A, UnitDone(unit="a", index=0), UnitDone(unit="b", index=1))
    view = view_of(lines[0], lines[2])
    assert view.gaps == 1
    assert view.last_unit == "b"


def test_unsupported_major_stream_is_not_applied() -> None:
    """A stream of another major is shown as unsupported and its lines are not applied."""
    view = view_of(hello(RUN_A, "2.0"), encode_line(2, UnitDone(unit="x", index=0), T))
    assert view.refused_version == "2.0"
    assert view.units_done == 0
    assert "not supported" in text_of(view)


def test_unknown_type_advances_the_seq() -> None:
    """An event type of a newer minor is skipped but its seq counts: the next line is no gap."""
    unknown = b'{"seq":2,"type":"heartbeat","time":"' + T.encode() + b'","data":{"x":1}}\n'
    view = view_of(hello(RUN_A, "1.7"), unknown, encode_line(3, BankStop(signature="sig-7"), T))
    assert (view.seq, view.gaps, view.bank_stop_signature) == (3, 0, "sig-7")


def text_of(view: BookView, *, engine_live: bool | None = None) -> str:
    console = Console(record=True, width=100)
    console.print(render(view, engine_live=engine_live))
    return console.export_text()


def test_render_shows_phases_units_spend_and_stream() -> None:
    """The rendering names each phase with its counts, the units, the spend and the stream."""
    text = text_of(view_of(*FIRST), engine_live=True)
    assert "draft" in text
    assert "2/6" in text
    assert "edit" in text
    assert "1/6" in text
    assert "33%" in text
    assert "ch-02" in text
    assert "$2.50" in text
    assert RUN_A[:8] in text
    assert "seq 7" in text
    assert "running" in text


def test_render_shows_the_ceiling_and_the_outcome() -> None:
    """After a ceiling stop the rendering shows spend, the shortfall and the outcome."""
    events = stream(
        RUN_A,
        Spend(committed_micro_usd=1_000_000),
        Ceiling(shortfall_micro_usd=250_000),
        finished(ExitCode.CEILING, spent=1_000_000),
    )
    text = text_of(view_of(*events), engine_live=False)
    assert "$1.00" in text
    assert "$0.25" in text
    assert "ceiling (exit 4)" in text
    assert "not running" in text


def test_render_shows_a_soft_stop() -> None:
    """A graceful stop's outcome says whether it was soft or hard."""
    text = text_of(view_of(*stream(RUN_A, finished(ExitCode.GRACEFUL_STOP, stop="soft"))))
    assert "graceful_stop (exit 5), soft stop" in text


def test_render_of_an_empty_book() -> None:
    """Before the first line, the rendering says it is waiting instead of failing."""
    assert "waiting" in text_of(BookView())


def test_usd_formatting_is_exact() -> None:
    """Micro-USD are shown as dollars without rounding away a micro-USD."""
    assert usd(0) == "$0.00"
    assert usd(1) == "$0.000001"
    assert usd(1_250_000) == "$1.25"
    assert usd(1_234_567_890_001) == "$1,234,567.890001"


def test_tail_reads_complete_lines_only(tmp_path: Path) -> None:
    """An unterminated last line is left for later; the next read returns it once it is whole."""
    path = tmp_path / "events.jsonl"
    lines = FIRST[:3]
    path.write_bytes(lines[0] + lines[1] + lines[2][:10])
    tail = JournalTail(path)
    assert tail.read() == [(0, lines[0]), (len(lines[0]), lines[1])]
    assert tail.read() == []
    with open(path, "ab") as file:
        file.write(lines[2][10:])
    assert tail.read() == [(len(lines[0]) + len(lines[1]), lines[2])]


def test_tail_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    """Before the engine creates the journal there is nothing to read, and no error."""
    assert JournalTail(tmp_path / "events.jsonl").read() == []


def test_tail_skips_an_over_long_line_without_keeping_it(tmp_path: Path) -> None:
    """A line over 1 MiB is reported as None at its offset; the lines after it are read."""
    path = tmp_path / "events.jsonl"
    long_line = b"x" * (LINE_BYTES_MAX * 5) + b"\n"
    path.write_bytes(FIRST[0] + long_line + FIRST[1])
    tail = JournalTail(path)
    got = []
    for _ in range(10):
        got.extend(tail.read())
    assert got == [(0, FIRST[0]), (len(FIRST[0]), None), (len(FIRST[0]) + len(long_line), FIRST[1])]


def test_tail_starts_again_when_the_file_is_replaced(tmp_path: Path) -> None:
    """A journal replaced by a shorter one is read again from byte 0 into a fresh view."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(FIRST))
    tail = JournalTail(path)
    view = read_available(tail, BookView())
    assert view.units_done == 2
    other = stream(RUN_B, UnitDone(unit="z", index=0))
    replacement = tmp_path / "new.jsonl"
    replacement.write_bytes(b"".join(other))
    replacement.replace(path)
    view = read_available(tail, view)
    assert view.engine_run_id == RUN_B
    assert (view.units_done_book, view.streams) == (1, 1)


def write_book(book: Path, lines: list[bytes]) -> None:
    book.mkdir(exist_ok=True)
    with open(book / "events.jsonl", "ab") as file:
        file.write(b"".join(lines))


def test_command_once_prints_a_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--once` prints the current view and exits 0."""
    write_book(tmp_path / "book", FIRST)
    assert command(tmp_path / "book", once=True, exit_on_finish=True, timeout_s=None) == 0
    out = capsys.readouterr().out
    assert "draft" in out
    assert "ch-02" in out


def test_command_without_a_book_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A book directory that does not exist is an error: exit 2 and a message."""
    assert command(tmp_path / "nope", once=True, exit_on_finish=True, timeout_s=None) == 2
    assert "no such book" in capsys.readouterr().err


def test_command_times_out_without_a_finish(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Following a run that does not finish ends at the timeout with exit 1."""
    write_book(tmp_path / "book", FIRST)
    assert command(tmp_path / "book", once=False, exit_on_finish=True, timeout_s=0.3) == 1
    assert "ch-02" in capsys.readouterr().out


def test_command_follows_until_finished(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Lines appended while watching are shown, and `finished` ends the watch with exit 0."""
    book = tmp_path / "book"
    write_book(book, FIRST[:2])
    rest = [*FIRST[2:], encode_line(8, finished(ExitCode.CLEAN, spent=2_500_000), T)]

    def append_slowly() -> None:
        for raw in rest:
            time.sleep(0.05)
            write_book(book, [raw])

    writer = threading.Thread(target=append_slowly)
    writer.start()
    try:
        assert command(book, once=False, exit_on_finish=True, timeout_s=20) == 0
    finally:
        writer.join()
    out = capsys.readouterr().out
    assert "clean (exit 0)" in out
    assert "ch-02" in out


@pytest.fixture
def held_lock(tmp_path: Path) -> Iterator[Path]:
    """A book whose `.engine.lock` is held, as by a live engine."""
    book = tmp_path / "book"
    book.mkdir()
    fd = os.open(book / ".engine.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        yield book
    finally:
        os.close(fd)


def test_command_waits_for_the_engine_to_let_go(
    held_lock: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A `finished` line does not end the watch while a live engine still holds the book's lock."""
    write_book(held_lock, [*FIRST, encode_line(8, finished(ExitCode.CLEAN), T)])
    assert command(held_lock, once=False, exit_on_finish=True, timeout_s=0.4) == 1
    assert "clean (exit 0)" in capsys.readouterr().out


def test_command_ends_once_the_lock_is_free(tmp_path: Path) -> None:
    """With the lock file present but not held, a `finished` line ends the watch at once."""
    book = tmp_path / "book"
    write_book(book, [*FIRST, encode_line(8, finished(ExitCode.CLEAN), T)])
    (book / ".engine.lock").write_text("123\n")
    started = time.monotonic()
    assert command(book, once=False, exit_on_finish=True, timeout_s=20) == 0
    assert time.monotonic() - started < 10


def test_command_keeps_following_after_finish_when_asked(tmp_path: Path) -> None:
    """Without exit_on_finish the watch goes on after `finished` until the timeout."""
    book = tmp_path / "book"
    write_book(book, [*FIRST, encode_line(8, finished(ExitCode.CLEAN), T)])
    assert command(book, once=False, exit_on_finish=False, timeout_s=0.3) == 1


def test_the_documented_example_renders_as_the_reference_says() -> None:
    """On the reference's worked example: phases at 2/2, 2 units in the book, $1.00, clean exit 0."""
    doc = Path(__file__).resolve().parents[2] / "docs" / "reference" / "stream-format.md"
    example = doc.read_text().split("## A worked example", 1)[1].split("```jsonl\n", 1)[1]
    lines = [line.encode() + b"\n" for line in example.split("```", 1)[0].splitlines()]
    view = view_of(*lines)
    assert {name: (p.done, p.total) for name, p in view.phases.items()} == {
        "draft": (2, 2),
        "edit": (2, 2),
    }
    assert (view.units_done_book, view.last_unit, view.spend_micro_usd) == (2, "unit-0002", 10**6)
    text = text_of(view)
    assert "$1.00" in text
    assert "clean (exit 0)" in text


# --- hostile journals ---------------------------------------------------------------------------

UNSAFE = frozenset(
    chr(code)
    for code in (*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A))
)
"""C0, DEL, C1 and the bidi embeddings, overrides and isolates: none may reach a person's screen."""
HOSTILE = (
    "[/]",
    "[bold red]",
    "[/bold red]",
    "[link=https://example.invalid]click[/link]",
    "\\[escaped]",
    ":pile_of_poo:",
    "\x1b[2J\x1b[H",
    "\x1b]0;title\x07",
    "\x1b]8;;https://example.invalid\x1b\\link\x1b]8;;\x1b\\",
    "\x9b31m",
    "\x90sixel\x9c",
    "\u202eevil\u202c",
    "\u2066isolated\u2069",
    "\r\n\t\b\x7f",
    "".join(sorted(UNSAFE)),
)
hostile_text = st.one_of(
    st.text(),
    st.sampled_from(HOSTILE),
    st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=4)), max_size=6).map("".join),
    st.builds(lambda part, times: part * times, st.text(min_size=1), st.integers(1, 20_000)),
)
_SGR = re.compile("\x1b\\[[0-9;]*m")


def hostile_view(
    *, unit: str, phase: str, outcome: str, signature: str, other: str, problem: str
) -> BookView:
    """A view with journal text in every place one can show: `other` fills the ids and names."""
    return BookView(
        book_id=other,
        engine_run_id=other,
        stream_version=other,
        streams=2,
        seq=9,
        phases={phase: PhaseView(done=1, total=3), other: PhaseView(done=0, total=0)},
        units_done=1,
        units_done_book=2,
        last_unit=unit,
        spend_micro_usd=1,
        bank_stop_signature=signature,
        finished=Outcome(
            outcome=outcome, exit_code=3, stop=other, refusal=other, units_done=1, units_total=2
        ),
        refused_version=other,
        problems=1,
        last_problem=problem,
    )


def assert_nothing_unsafe(output: str) -> None:
    leaked = sorted({f"U+{ord(char):04X}" for char in output if char in UNSAFE and char != "\n"})
    assert not leaked, f"control characters reached the output: {leaked}"


FIELDS = ("unit", "phase", "outcome", "signature", "other", "problem")


@given(st.fixed_dictionaries(dict.fromkeys(FIELDS, hostile_text)))
def test_any_text_in_the_journal_renders_as_plain_text(fields: dict[str, str]) -> None:
    """Markup, escape sequences, controls, bidi controls, huge strings: shown, never obeyed."""
    finished_view = hostile_view(**fields)
    unfinished = hostile_view(**fields)
    unfinished.finished = None  # the outcome row then tells the refused version
    for view, live in ((finished_view, None), (unfinished, True)):
        out = io.StringIO()
        Console(file=out, force_terminal=False, no_color=True, width=100).print(
            render(view, engine_live=live)
        )
        assert_nothing_unsafe(out.getvalue())
        # On a terminal the only escape sequences are rich's own colours.
        out = io.StringIO()
        Console(file=out, force_terminal=True, color_system="truecolor", width=100).print(
            render(view, engine_live=live)
        )
        assert_nothing_unsafe(_SGR.sub("", out.getvalue()))


def test_markup_in_the_journal_is_shown_as_typed() -> None:
    """A unit named like rich markup is drawn literally, neither styled nor an error."""
    view = hostile_view(
        unit="[bold red]ch-1[/]",
        phase="[/]",
        outcome="[red]fake[/red]",
        signature=":pile_of_poo:",
        other="b",
        problem="p",
    )
    text = text_of(view)
    for literal in ("[bold red]ch-1[/]", "[/]", "[red]fake[/red]", ":pile_of_poo:"):
        assert literal in text


def test_controls_are_replaced_visibly() -> None:
    """An escape sequence in a unit id shows as its escape (`\\x1b`) followed by its text."""
    view = hostile_view(
        unit="\x1b[2Jch-1", phase="draft", outcome="clean", signature="s", other="b", problem="p"
    )
    text = text_of(view)
    assert "\\x1b[2Jch-1" in text
    assert "\x1b" not in text


def test_a_huge_name_is_cut_and_many_phases_are_counted() -> None:
    """A 100 000-character unit id and 5 000 phases still make one bounded screen."""
    view = hostile_view(
        unit="u" * 100_000, phase="p", outcome="clean", signature="s", other="b", problem="x"
    )
    view.phases = {f"phase-{i}": PhaseView(done=i, total=5_000) for i in range(5_000)}
    text = text_of(view)
    assert "u" * 200 not in text
    assert "phase-39" in text and "phase-40 " not in text
    assert "4960 more" in text
    assert len(text.splitlines()) < 100


def test_plain_replaces_every_unsafe_character_and_keeps_the_rest() -> None:
    """Each C0, DEL, C1 and bidi control, a byte-order mark and a lone surrogate becomes its
    escape (`\\x1b`, `\\u202e`); other text (any script) is kept."""
    for char in {*UNSAFE, "\ufeff", "\ud800"}:
        code = ord(char)
        assert plain(f"a{char}b") == (f"a\\x{code:02x}b" if code < 0x100 else f"a\\u{code:04x}b")
    kept = "Глава 1 — 第一章 [bold] 🙂 café"
    assert plain(kept) == kept
    assert plain("abcdef", 4) == "abc…"
    assert plain("abcd", 4) == "abcd"
    assert plain("abc", 0) == ""


def with_outcome(line: bytes, outcome: str) -> bytes:
    """A `finished` line whose outcome is not its code's name: no emitter writes one (`Finished`
    derives it from the code), and a reader must still show it safely."""
    record = orjson.loads(line)
    record["data"]["outcome"] = outcome
    return orjson.dumps(record) + b"\n"


def write_hostile_journal(book: Path) -> None:
    *lines, last = stream(
        RUN_A,
        progress(**{"[bold red]draft\x1b]0;pwned\x07": (1, 2)}),
        UnitDone(unit="\x1b[2J\x1b[H[/]ch-1\u202e", index=0),
        BankStop(signature="\x9b31m[link=x]sig[/link]"),
        finished(ExitCode.BANK_STOP),
    )
    write_book(book, [*lines, with_outcome(last, "[/]bank_stop\x85")])


def watch_once(book: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine_events._cli", "watch", str(book), "--once", *options],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_watch_shows_a_hostile_journal_as_plain_text(tmp_path: Path) -> None:
    """`engine-events watch --once` on a journal full of markup and escapes: exit 0, nothing obeyed."""
    book = tmp_path / "book"
    write_hostile_journal(book)
    result = watch_once(book)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert_nothing_unsafe(result.stdout)
    assert "[/]ch-1" in result.stdout
    assert "[bold red]draft" in result.stdout


@pytest.fixture(params=["fifo", "socket", "dev-zero", "directory"])
def odd_journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A book whose `events.jsonl` is a FIFO, a socket, a symlink to /dev/zero or a directory."""
    book = tmp_path / "b"  # short: a unix socket's path is limited to about 100 bytes
    book.mkdir()
    journal = book / "events.jsonl"
    if request.param == "fifo":
        os.mkfifo(journal)
        yield book, "a FIFO"
    elif request.param == "socket":
        server = socket.socket(socket.AF_UNIX)
        try:
            server.bind(str(journal))
            yield book, "a socket"
        finally:
            server.close()
    elif request.param == "dev-zero":
        journal.symlink_to("/dev/zero")
        yield book, "a character device"
    else:
        journal.mkdir()
        yield book, "a directory"


@pytest.mark.parametrize("follow", [False, True])
def test_watch_refuses_a_journal_that_is_not_a_regular_file(
    odd_journal: tuple[Path, str], follow: bool
) -> None:
    """No hang, no traceback: a typed error naming what stands there, and a non-zero exit."""
    book, kind = odd_journal
    started = time.monotonic()
    result = watch_once(book) if not follow else watch_follow(book)
    assert time.monotonic() - started < 20
    assert result.returncode == EXIT_BAD_JOURNAL, (result.stdout, result.stderr)
    assert "JournalNotRegular" in result.stderr
    assert f"is {kind}, not a regular file" in result.stderr
    assert "Traceback" not in result.stderr


def watch_follow(book: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine_events._cli", "watch", str(book), "--timeout-s", "5"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_journal_that_turns_into_a_fifo_while_followed(tmp_path: Path) -> None:
    """A journal replaced by a FIFO while the view follows it ends the view with the typed error."""
    book = tmp_path / "book"
    write_book(book, FIRST)
    tail = JournalTail(book / "events.jsonl")
    assert len(tail.read()) == len(FIRST)
    (book / "events.jsonl").unlink()
    os.mkfifo(book / "events.jsonl")
    with pytest.raises(JournalNotRegular, match="a FIFO"):
        tail.read()


def test_a_lock_that_is_a_fifo_does_not_hang_the_view(tmp_path: Path) -> None:
    """The engine's lock probe does not wait on a FIFO at `.engine.lock`: no engine can hold it."""
    book = tmp_path / "book"
    write_book(book, [*FIRST, encode_line(8, finished(ExitCode.CLEAN), T)])
    os.mkfifo(book / ".engine.lock")
    result = watch_once(book)
    assert result.returncode == 0, result.stderr
    assert "clean (exit 0)" in result.stdout


def test_a_huge_sparse_journal_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """64 GiB of NULs without a newline: a snapshot comes back at once, under a 1 GiB address space."""
    book = tmp_path / "book"
    write_book(book, FIRST)
    with open(book / "events.jsonl", "r+b") as journal:
        journal.truncate(64 * 2**30)
    limit = 2**30

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    result = subprocess.run(
        [sys.executable, "-m", "engine_events._cli", "watch", str(book), "--timeout-s", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=cap_memory,
    )
    assert result.returncode == 1, result.stderr  # timed out following, as asked
    assert "ch-02" in result.stdout
    assert "MemoryError" not in result.stderr

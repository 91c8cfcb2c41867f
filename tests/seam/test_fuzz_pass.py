"""Fuzzing the platform's pass: whatever bytes a journal holds — torn, huge, mutated, foreign,
binary — a pass over it into Postgres never raises, records what it refused as typed problems,
holds bounded memory, and a second pass over the same bytes changes nothing.

(The two decoders are compared line by line in `tests/test_decoders_agree.py`; this goes one level
up: the reader, the decoder, the rules and the commit, over whole files grown in several passes.)
"""

from __future__ import annotations

import hashlib
import itertools
import os
import socket
import stat
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engine_events.grammar import LINE_BYTES_MAX
from platform_ingest import Database, JournalUnreadable
from platform_ingest.ingest.book_pass import BookPass, Mode
from platform_ingest.ingest.books import register_book
from platform_ingest.operate.naming import name_stream
from platform_ingest.operate.show import show_state
from seam_model import STATS

pytestmark = pytest.mark.postgres

_books = itertools.count(1)
TIME = "2026-11-30T02:08:57.213Z"
RUN_IDS = [f"00000000-0000-4000-8000-{number:012d}" for number in range(3)]

PASS_MEMORY_BYTES_MAX = 24 * 1024 * 1024
"""The most a pass may allocate at once (traced), whatever the file: the reader holds at most one
line of 1 MiB plus one read chunk; the rest is batches of bounded size."""


def _line(seq: Any, kind: Any, data: Any, time: Any = TIME) -> bytes:
    return orjson.dumps({"seq": seq, "type": kind, "time": time, "data": data}) + b"\n"


def _valid_lines(book_id: str) -> st.SearchStrategy[bytes]:
    seqs = st.integers(1, 12)
    hello = st.builds(
        lambda run, book, version: _line(
            1,
            "hello",
            {
                "stream_version": version,
                "engine_run_id": run,
                "book_id": book,
                "chunker_version": "c1",
            },
        ),
        st.sampled_from(RUN_IDS),
        st.sampled_from([book_id, book_id, "another-book"]),
        st.sampled_from(["1.3", "1.3", "1.9", "2.0", "x"]),
    )
    return st.one_of(
        hello,
        st.builds(
            lambda s, m: _line(s, "spend", {"committed_micro_usd": m}), seqs, st.integers(0, 9)
        ),
        st.builds(lambda s, u: _line(s, "unit_done", {"unit": f"u{u}", "index": u}), seqs, seqs),
        st.builds(
            lambda s, d: _line(s, "progress", {"phases": {"draft": {"done": d, "total": 12}}}),
            seqs,
            seqs,
        ),
        st.builds(
            lambda s: _line(
                s, "ceiling", {"halted": True, "scope": "book", "shortfall_micro_usd": 5}
            ),
            seqs,
        ),
        st.builds(lambda s: _line(s, "bank_stop", {"signature": "sig"}), seqs),
        st.builds(
            lambda s, code: _line(
                s,
                "finished",
                {
                    "outcome": "x",
                    "exit_code": code,
                    "stop": None,
                    "refusal": None,
                    "volume": {"units_done": 1, "units_total": 2},
                    "money": {"committed_micro_usd": 3},
                },
            ),
            seqs,
            st.sampled_from([0, 1, 2, 3, 4, 5, 13, 17, 99]),
        ),
        st.builds(lambda s: _line(s, "heartbeat", {"minor": "1.9"}), seqs),
    )


_ANY_TEXT = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=250, max_size=260),
    st.sampled_from(["\x00", "a\x00b", "[/]", "\x1b[2J", "\u202e", "é" * 128, "x" * 4097]),
)
"""Any string: control characters, U+0000, markup, long strings around the byte bounds."""


def _any_strings(book_id: str) -> st.SearchStrategy[bytes]:
    """Well-shaped lines with any string in any string field, or as a key, known or unknown."""
    seqs = st.integers(1, 6)
    text = _ANY_TEXT
    return st.one_of(
        st.builds(
            lambda run, book, chunker: _line(
                1,
                "hello",
                {
                    "stream_version": "1.3",
                    "engine_run_id": run,
                    "book_id": book,
                    "chunker_version": chunker,
                },
            ),
            st.one_of(st.sampled_from(RUN_IDS), text),
            st.one_of(st.just(book_id), text),
            text,
        ),
        st.builds(lambda s, u: _line(s, "unit_done", {"unit": u, "index": 1}), seqs, text),
        st.builds(
            lambda s, name: _line(s, "progress", {"phases": {name: {"done": 1, "total": 2}}}),
            seqs,
            text,
        ),
        st.builds(lambda s, sig: _line(s, "bank_stop", {"signature": sig}), seqs, text),
        st.builds(
            lambda s, scope: _line(s, "ceiling", {"halted": True, "scope": scope}), seqs, text
        ),
        st.builds(
            lambda s, outcome, refusal: _line(
                s,
                "finished",
                {
                    "outcome": outcome,
                    "exit_code": 13,
                    "stop": None,
                    "refusal": refusal,
                    "volume": {"units_done": 1, "units_total": 2},
                },
            ),
            seqs,
            text,
            text,
        ),
        st.builds(lambda s, kind, value: _line(s, kind, {"x": value}), seqs, text, text),
        st.builds(
            lambda s, key, value: _line(s, "spend", {"committed_micro_usd": 5, key: value}),
            seqs,
            text,
            text,
        ),
    )


def _stream(book_id: str) -> st.SearchStrategy[bytes]:
    """A well-formed stream: its hello, then dense seqs (with a re-projected run now and then)."""

    def build(run_id: str, kinds: list[int], repeat: int) -> bytes:
        lines = [
            _line(
                1,
                "hello",
                {
                    "stream_version": "1.3",
                    "engine_run_id": run_id,
                    "book_id": book_id,
                    "chunker_version": "c1",
                },
            )
        ]
        for seq, kind in enumerate(kinds, start=2):
            if kind == 0:
                lines.append(_line(seq, "spend", {"committed_micro_usd": seq * 10}))
            elif kind == 1:
                lines.append(_line(seq, "unit_done", {"unit": f"u{seq}", "index": seq}))
            else:
                lines.append(_line(seq, "progress", {"phases": {"a": {"done": seq, "total": 99}}}))
        if repeat:
            lines.extend(lines[-repeat:])
        return b"".join(lines)

    return st.builds(
        build,
        st.sampled_from(RUN_IDS),
        st.lists(st.integers(0, 2), max_size=10),
        st.integers(0, 3),
    )


def _mutated(lines: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """A valid line with bytes flipped, cut, inserted or its newline lost."""

    def mutate(raw: bytes, data: st.DataObject) -> bytes:
        body = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 3))):
            how = data.draw(st.sampled_from(["flip", "cut", "insert", "drop_newline", "crlf"]))
            at = data.draw(st.integers(0, max(0, len(body) - 1)))
            if how == "flip" and body:
                body[at] ^= 1 << data.draw(st.integers(0, 7))
            elif how == "cut":
                del body[at : at + data.draw(st.integers(1, 8))]
            elif how == "insert":
                body[at:at] = data.draw(st.binary(min_size=1, max_size=6))
            elif how == "drop_newline" and body.endswith(b"\n"):
                del body[-1]
            elif how == "crlf" and body.endswith(b"\n"):
                body[-1:] = b"\r\n"
        return bytes(body)

    return st.builds(mutate, lines, st.data())


def _huge(book_id: str) -> st.SearchStrategy[bytes]:
    """A line over the limit (or just under it), terminated or not."""
    return st.builds(
        lambda extra, terminated, kind: (
            b'{"seq":2,"type":"'
            + kind
            + b'","time":"'
            + TIME.encode()
            + b'","data":{"x":"'
            + b"a" * (LINE_BYTES_MAX - 80 + extra)
            + b'"}}'
            + (b"\n" if terminated else b"")
        ),
        st.sampled_from([-10, 0, 20, 100, 300_000]),
        st.booleans(),
        st.sampled_from([b"spend", b"heartbeat"]),
    )


def _pieces(book_id: str, *, huge: bool) -> st.SearchStrategy[bytes]:
    valid = _valid_lines(book_id)
    options = [
        _stream(book_id),
        _stream(book_id),
        valid,
        _mutated(valid),
        _any_strings(book_id),
        st.binary(max_size=120),
        st.sampled_from(
            [b"\n", b"{}\n", b"[]\n", b"\xef\xbb\xbf{}\n", b"[" * 80 + b"]" * 80 + b"\n"]
        ),
    ]
    if huge:
        options.append(_huge(book_id))
    return st.one_of(*options)


def _fuzz_one(data: st.DataObject, db: Database, root: Path, *, huge: bool) -> None:
    book_id = f"fuzz-book-{os.getpid()}-{next(_books):07d}"  # fixed width: the same draws replay
    book = root / book_id
    book.mkdir(parents=True)
    register_book(db, book)
    mode: Mode = data.draw(st.sampled_from(["auto", "named"]), label="mode")
    if mode == "named":
        for run_id in data.draw(st.lists(st.sampled_from(RUN_IDS), max_size=2, unique=True)):
            name_stream(db, str(book), run_id)
    pieces = data.draw(st.lists(_pieces(book_id, huge=huge), max_size=16), label="pieces")
    content = b"".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(content)), max_size=3), label="cuts"))
    journal = book / "events.jsonl"
    journal.write_bytes(b"")
    written = 0
    for cut in [*cuts, len(content)]:
        with open(journal, "ab") as file:
            file.write(content[written:cut])
        written = max(written, cut)
        batch_lines_max = data.draw(st.integers(1, 6), label="batch_lines_max")
        tracemalloc.start()
        try:
            report = BookPass(db, book_id, mode=mode, batch_lines_max=batch_lines_max).run()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < PASS_MEMORY_BYTES_MAX, f"a pass allocated {peak:,} bytes"
        STATS["fuzz: passes"] += 1
        STATS["fuzz: problems recorded"] += len(report.problems)
        STATS["fuzz: lines applied"] += report.lines_applied
        for problem in report.problems:
            event(f"problem: {problem.kind}")
    before = show_state(db, [str(book)])
    again = BookPass(db, book_id, mode=mode).run()
    assert again.lines_applied == 0
    assert show_state(db, [str(book)]) == before
    _healthy_book_goes_on(db, root)
    STATS["fuzz: files"] += 1
    STATS["fuzz: bytes"] += len(content)


def _healthy_book_goes_on(db: Database, root: Path) -> None:
    """After a hostile book's passes, a healthy book on the same connection applies its next line
    at once: nothing the hostile one did is left for another book to pay."""
    book_id = "healthy-" + hashlib.sha256(os.fsencode(root)).hexdigest()[:10]
    book = root / book_id
    journal = book / "events.jsonl"
    if not book.exists():
        book.mkdir(parents=True)
        hello = {
            "stream_version": "1.3",
            "engine_run_id": RUN_IDS[0],
            "book_id": book_id,
            "chunker_version": "c1",
        }
        journal.write_bytes(_line(1, "hello", hello))
        register_book(db, book)
        assert BookPass(db, book_id, mode="auto").run().lines_applied == 1
    seq = journal.read_bytes().count(b"\n") + 1
    with open(journal, "ab") as file:
        file.write(_line(seq, "spend", {"committed_micro_usd": seq}))
    assert BookPass(db, book_id, mode="auto").run().lines_applied == 1


FILE_KINDS = (
    "regular",
    "fifo",
    "socket",
    "directory",
    "symlink_inside",
    "symlink_to_device",
    "dangling_symlink",
    "character_device",
    "missing",
)


def _place(kind: str, journal: Path, content: bytes) -> None:
    """Put a file of `kind` at the journal's path (with `content` where it holds bytes)."""
    if kind == "regular":
        journal.write_bytes(content)
    elif kind == "fifo":
        os.mkfifo(journal)
    elif kind == "socket":
        # Bound through the directory's descriptor: a socket's path has at most 107 bytes, and a
        # test's temporary directory (under a pytest-xdist worker's, say) may be longer.
        directory = os.open(journal.parent, os.O_PATH)
        listener = socket.socket(socket.AF_UNIX)
        try:
            listener.bind(f"/proc/self/fd/{directory}/{journal.name}")
        finally:
            listener.close()
            os.close(directory)
    elif kind == "directory":
        journal.mkdir()
    elif kind == "symlink_inside":
        (journal.parent / "real.jsonl").write_bytes(content)
        journal.symlink_to(journal.parent / "real.jsonl")
    elif kind == "symlink_to_device":
        journal.symlink_to("/dev/zero")
    elif kind == "dangling_symlink":
        journal.symlink_to(journal.parent / "nowhere")
    elif kind == "character_device" and os.geteuid() == 0:
        os.mknod(journal, 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    elif kind == "character_device":
        journal.symlink_to("/dev/null")


@settings(
    deadline=None, max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kind=st.sampled_from(FILE_KINDS), pieces=st.lists(_pieces("file-kind", huge=False), max_size=4)
)
def test_any_file_type_at_the_journals_path_is_applied_or_a_shown_problem(
    kind: str, pieces: list[bytes], seam_dsn: str, tmp_path: Path
) -> None:
    """A FIFO, a socket, a device, a directory or a symlink at `events.jsonl`: the pass returns at
    once with a typed problem that `show` lists on the book (nothing read from it), or applies the
    journal; no other exception escapes, and another book goes on."""
    db = Database(seam_dsn)
    try:
        book_id = f"file-kind-{os.getpid()}-{next(_books):07d}"
        book = tmp_path / book_id
        book.mkdir()
        register_book(db, book)
        _place(kind, book / "events.jsonl", b"".join(pieces))
        try:
            BookPass(db, book_id, mode="auto").run()
        except JournalUnreadable as error:
            assert kind not in ("regular", "missing")
            (shown,) = show_state(db, [str(book)])["books"]
            assert [problem["kind"] for problem in shown["problems"]] == [error.kind]
            assert shown["runs"] == []
            event(f"refused: {error.kind}")
        else:
            assert kind in ("regular", "missing", "dangling_symlink")
            event(f"read: {kind}")
        _healthy_book_goes_on(db, tmp_path)
    finally:
        db.close()


SETTINGS = settings(
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)


@settings(SETTINGS, max_examples=40)
@given(data=st.data())
def test_any_journal_is_swept_without_an_error_escaping(
    data: st.DataObject, seam_dsn: str, tmp_path: Path
) -> None:
    """Arbitrary, torn and mutated journals, read in passes: nothing escapes, memory is bounded,
    and a second pass over the same bytes changes nothing."""
    db = Database(seam_dsn)
    try:
        _fuzz_one(data, db, tmp_path, huge=False)
    finally:
        db.close()


@settings(SETTINGS, max_examples=8)
@given(data=st.data())
def test_huge_lines_are_swept_in_bounded_memory(
    data: st.DataObject, seam_dsn: str, tmp_path: Path
) -> None:
    """Lines over 1 MiB, terminated or torn, among others: refused as typed problems, never held
    whole, and the pass's memory stays under its bound."""
    db = Database(seam_dsn)
    try:
        _fuzz_one(data, db, tmp_path, huge=True)
    finally:
        db.close()


@pytest.mark.slow
@settings(SETTINGS, max_examples=5000)
@given(data=st.data())
def test_any_journal_is_swept_without_an_error_escaping_long(
    data: st.DataObject, seam_dsn: str, tmp_path: Path
) -> None:
    """The same property over many more journals, huge lines included (a long run)."""
    db = Database(seam_dsn)
    try:
        _fuzz_one(data, db, tmp_path, huge=data.draw(st.integers(0, 9)) == 0)
    finally:
        db.close()

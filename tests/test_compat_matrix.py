"""The compatibility matrix: every writer's stream against every reader, each cell's outcome the
version rule's (docs/reference/stream-format.md, "Versions").

Writers: the reference engine at stream 1.3 and 1.4 (real runs of `engine-events demo`), a future
1.9 synthesized line by line (new envelope keys, new `data` fields, a new event type, new fields in
nested objects: `progress.phases.*`, `finished.volume`), the same 1.9 lines under a 1.4 hello (a
known minor keeps its envelope exact), and a 2.0. Readers: the platform's decoder (its fast lane,
and its precise judge alone), the pass in auto and in named mode (real Postgres), `verify`,
`watch`'s reader, and `status --json` (which reads the engine's database, so it has a cell only
for what the engine wrote).

The table in docs/reference/stream-format.md is this test's output: the test fails when the two
differ. `COMPAT_TABLE_WRITE=1 pytest tests/test_compat_matrix.py` rewrites it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import platform_ingest.journal.decode as platform_decoder
from engine_events.grammar import is_newer_minor
from engine_events.readers.verify import verify_journal
from engine_events.readers.watch import BookView
from platform_ingest import Database
from platform_ingest.errors import LineRefused, UnsupportedVersion
from platform_ingest.journal.line import Line as PlatformLine
from platform_ingest.journal.memo import DecoderMemo
from platform_ingest.journal.precise import decode_precisely
from platform_ingest.operate.naming import name_stream
from platform_journals import book_state, sweep

pytestmark = pytest.mark.postgres

DOCS = Path(__file__).resolve().parents[1] / "docs" / "reference" / "stream-format.md"
START, END = "<!-- compat-matrix: start -->", "<!-- compat-matrix: end -->"
T = "2026-11-30T02:08:57.213Z"
RUN = "7e57c0de-0000-4000-8000-000000000019"

READ, REFUSED, MALFORMED, NONE = "read", "refused", "malformed", "—"
"""A cell: read with what the reader does not know ignored; refused as `unsupported_version`
(nothing applied); `malformed` (the stream is quarantined); no cell (the reader does not read
that writer's files)."""

READERS = [
    "decoder, fast lane",
    "decoder, precise judge",
    "pass, auto mode",
    "pass, named mode",
    "verify",
    "watch",
    "status --json",
]


def _line(seq: int, kind: str, data: dict[str, Any], **envelope: Any) -> bytes:
    value = {"seq": seq, "type": kind, "time": T, "data": data, **envelope}
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


def _future(version: str, book: str) -> list[bytes]:
    """A stream as a future minor might write it: everything a minor may add (the hello's own
    envelope key only under a newer minor's hello: under a known one the hello itself would be
    malformed, a line before any hello)."""
    hello = {
        "stream_version": version,
        "engine_run_id": RUN,
        "book_id": book,
        "chunker_version": "c9",
        "host": "engine-7",
    }
    return [
        _line(1, "hello", hello, **({"trace": "t-1"} if version == "1.9" else {})),
        _line(2, "progress", {"phases": {"draft": {"done": 1, "total": 2, "eta_s": 9}}, "rate": 1}),
        _line(3, "heartbeat", {"alive": True}),
        _line(4, "unit_done", {"unit": "u-1", "index": 1, "words": 900}, span={"id": "s-4"}),
        _line(5, "spend", {"committed_micro_usd": 700, "currency": "USD"}, trace="t-5"),
        _line(
            6,
            "finished",
            {
                "outcome": "clean",
                "exit_code": 0,
                "stop": None,
                "refusal": None,
                "volume": {"units_done": 1, "units_total": 1, "units_skipped": 0},
                "money": {"committed_micro_usd": 700},
                "tokens": 12,
            },
        ),
    ]


def _major_2(book: str, **envelope: Any) -> list[bytes]:
    hello = {"stream_version": "2.0", "engine_run_id": RUN, "book_id": book, "shape": "new"}
    return [_line(1, "hello", hello, **envelope), _line(2, "spend", {"amount": {"micro_usd": 700}})]


def _bad_hello(version: str, book: str, *, chunker: str = "c1", **envelope: Any) -> list[bytes]:
    """A stream whose hello names it, with something else wrong: a key after `data`, a string
    over its bound. It is that stream's problem, whatever stream came before it."""
    hello = {"stream_version": version, "engine_run_id": RUN, "book_id": book}
    return [
        _line(1, "hello", {**hello, "chunker_version": chunker}, **envelope),
        _line(2, "spend", {"committed_micro_usd": 900}),
        _line(3, "finished", {**FINISHED, "money": {"committed_micro_usd": 900}}),
    ]


FINISHED = {
    "outcome": "clean",
    "exit_code": 0,
    "stop": None,
    "refusal": None,
    "volume": {"units_done": 0, "units_total": 0},
}
EARLIER = "7e57c0de-0000-4000-8000-000000000013"
"""A finished 1.3 stream written before the stream under test, in the rows that say "after"."""


def _after_a_finished_stream(lines: Callable[[str], list[bytes]]) -> Callable[[str], list[bytes]]:
    def written(book: str) -> list[bytes]:
        hello = {"stream_version": "1.3", "engine_run_id": EARLIER, "book_id": book}
        return [
            _line(1, "hello", {**hello, "chunker_version": "c1"}),
            _line(2, "spend", {"committed_micro_usd": 100}),
            _line(3, "finished", {**FINISHED, "money": {"committed_micro_usd": 100}}),
            *lines(book),
        ]

    return written


def _engine(version: str) -> Callable[[Path], None]:
    def write(book: Path) -> None:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "engine_events._cli",
                "-q",
                "demo",
                str(book),
                "--pace-ms",
                "0",
                "--units",
                "2",
                "--unit-cost-micro-usd",
                "350",
                "--stream-version",
                version,
                "--engine-run-id",
                RUN,
            ],
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()

    return write


def _lines(lines: Callable[[str], list[bytes]]) -> Callable[[Path], None]:
    def write(book: Path) -> None:
        (book / "events.jsonl").write_bytes(b"".join(lines(book.name)))

    return write


WRITERS: dict[str, tuple[Callable[[Path], None], int]] = {
    "engine 1.3": (_engine("1.3"), 1400),
    "engine 1.4": (_engine("1.4"), 1400),
    "future 1.9": (_lines(lambda book: _future("1.9", book)), 700),
    "1.9's lines under a 1.4 hello": (_lines(lambda book: _future("1.4", book)), 0),
    "future 2.0": (_lines(_major_2), 0),
    "2.0, a key after data": (_lines(lambda book: _major_2(book, trace="t")), 0),
    "2.0, a key after data, after a finished 1.3 stream": (
        _lines(_after_a_finished_stream(lambda book: _major_2(book, trace="t"))),
        0,
    ),
    "1.4 hello with an envelope key, after a finished 1.3 stream": (
        _lines(_after_a_finished_stream(lambda book: _bad_hello("1.4", book, trace="t"))),
        0,
    ),
    "1.3 hello with a 300-byte chunker_version, after a finished 1.3 stream": (
        _lines(_after_a_finished_stream(lambda book: _bad_hello("1.3", book, chunker="c" * 300))),
        0,
    ),
}
"""Each writer, and the money its stream carries when it is read."""

EXPECTED: dict[str, list[str]] = {
    "engine 1.3": [READ] * 7,
    "engine 1.4": [READ] * 7,
    "future 1.9": [READ] * 6 + [NONE],
    "1.9's lines under a 1.4 hello": [MALFORMED] * 6 + [NONE],
    "future 2.0": [REFUSED] * 6 + [NONE],
    "2.0, a key after data": [REFUSED] * 6 + [NONE],
    "2.0, a key after data, after a finished 1.3 stream": [REFUSED] * 6 + [NONE],
    "1.4 hello with an envelope key, after a finished 1.3 stream": [MALFORMED] * 6 + [NONE],
    "1.3 hello with a 300-byte chunker_version, after a finished 1.3 stream": [MALFORMED] * 6
    + [NONE],
}


def _decoded(lines: list[bytes], decode: Callable[[bytes, str | None], object]) -> str:
    version: str | None = None
    for raw in lines:
        try:
            line = decode(raw, version)
        except UnsupportedVersion:
            return REFUSED
        except LineRefused:
            return MALFORMED
        assert isinstance(line, PlatformLine)
        if line.type == "hello":
            version = line.data["stream_version"]
    return READ


def _precisely(raw: bytes, version: str | None) -> object:
    newer = version is not None and is_newer_minor(version)
    if not newer and raw.startswith(b'{"seq":1,"type":"hello"'):
        stated = json.loads(raw)["data"].get("stream_version")
        newer = isinstance(stated, str) and is_newer_minor(stated)
    return decode_precisely(raw, DecoderMemo(), newer_minor=newer)


def _passed(db: Database, book: Path, money: int, *, named: bool) -> str:
    if named:
        name_stream(db, str(book), RUN)
    sweep(db, book, auto=not named)
    sweep(db, book, auto=not named)
    runs = book_state(db, book)["runs"]
    found = {a["engine_run_id"]: (run, a) for run in runs for a in run["attempts"]}
    assert set(found) <= {RUN, EARLIER}
    if EARLIER in found:  # the finished stream before is never touched by the one after it
        earlier = found[EARLIER][1]
        assert (earlier["state"], earlier["last_seq"], earlier["error"]) == ("finished", 3, None)
    run, attempt = found[RUN]
    state = attempt["state"]
    if state == "refused":
        assert attempt["error"]["kind"] == "unsupported_version"
        return REFUSED
    if state == "quarantined":
        assert attempt["error"]["kind"] == "malformed"
        return MALFORMED
    assert state == "finished", attempt
    assert run["committed_micro_usd"] == money
    return READ


def _verified(book: Path) -> str:
    streams = {s.engine_run_id: s for s in verify_journal(book / "events.jsonl").streams}
    assert set(streams) <= {RUN, EARLIER}
    if EARLIER in streams:
        assert (streams[EARLIER].verdict, streams[EARLIER].last_seq) == ("ok", 3)
    verdict = streams[RUN].verdict
    return {"ok": READ, "unsupported_version": REFUSED, "malformed": MALFORMED}[verdict]


def _watched(book: Path, money: int) -> str:
    view = BookView()
    for raw in (book / "events.jsonl").read_bytes().splitlines(keepends=True):
        view.feed(raw)
    assert view.engine_run_id == RUN  # the lines after its hello are its own, never counted
    if view.refused_version is not None:  # as the lines of the stream before it
        return REFUSED
    if view.refused_hello is not None:
        assert view.finished is None and view.spend_micro_usd in (None, 100)
        return MALFORMED
    if view.problems:
        return MALFORMED
    assert view.finished is not None and view.spend_micro_usd == money
    return READ


def _status(book: Path, money: int, engine_written: bool) -> str:
    if not engine_written:
        return NONE
    done = subprocess.run(
        [sys.executable, "-m", "engine_events._cli", "status", str(book), "--json"],
        capture_output=True,
        timeout=60,
        check=True,
    )
    report = json.loads(done.stdout)
    assert report["journal"] == "ok" and report["money"]["committed_micro_usd"] == money
    return READ


def _cells(db: Database, make_book: Callable[[str], Path], writer: str) -> list[str]:
    write, money = WRITERS[writer]
    slug = re.sub(r"[^a-z0-9]+", "-", writer)
    books = {mode: make_book(f"{slug}-{mode}") for mode in ("auto", "named")}
    for book in books.values():
        write(book)
    lines = (books["auto"] / "events.jsonl").read_bytes().splitlines(keepends=True)
    return [
        _decoded(lines, platform_decoder.decode_stream_line),
        _decoded(lines, _precisely),
        _passed(db, books["auto"], money, named=False),
        _passed(db, books["named"], money, named=True),
        _verified(books["auto"]),
        _watched(books["auto"], money),
        _status(books["auto"], money, writer.startswith("engine")),
    ]


def render(matrix: dict[str, list[str]]) -> str:
    head = "| writer | " + " | ".join(READERS) + " |"
    rule = "|---" * (len(READERS) + 1) + "|"
    rows = [f"| {writer} | " + " | ".join(cells) + " |" for writer, cells in matrix.items()]
    return "\n".join([START, head, rule, *rows, END])


def test_every_writer_against_every_reader(db: Database, make_book: Callable[[str], Path]) -> None:
    matrix = {writer: _cells(db, make_book, writer) for writer in WRITERS}
    assert matrix == EXPECTED
    table = render(matrix)
    text = DOCS.read_text()
    documented = text[text.index(START) : text.index(END) + len(END)]
    if os.environ.get("COMPAT_TABLE_WRITE") == "1":
        DOCS.write_text(text.replace(documented, table))
        return
    assert documented == table, f"the docs' table is stale; it should read:\n{table}"
    assert sum(len(cells) for cells in matrix.values()) == len(WRITERS) * len(READERS)

"""`engine-events watch` follows the journal's streams as every other reader does: a readable
hello starts its stream whatever else is wrong with it (its lines are never counted as the
stream's before it), and a journal that returns to an earlier stream is read by that stream's
version (docs/reference/stream-format.md, "Streams")."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from engine_events.errors import LineError
from engine_events.readers.decode import decode_stream_line
from engine_events.readers.watch import BookView, render

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
MANIFEST: list[dict[str, Any]] = json.loads((VECTORS / "journals.json").read_text())
T = "2026-11-30T02:08:57.213Z"
R1, R2 = "r1", "r2"


def line(seq: int, kind: str, data: dict[str, Any], **envelope: Any) -> bytes:
    value = {"seq": seq, "type": kind, "time": T, "data": data, **envelope}
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


def hello(run: str, version: str, **envelope: Any) -> bytes:
    data = {"stream_version": version, "engine_run_id": run, "book_id": "b", "chunker_version": "c"}
    return line(1, "hello", data, **envelope)


def spend(seq: int, amount: int, **envelope: Any) -> bytes:
    return line(seq, "spend", {"committed_micro_usd": amount}, **envelope)


def finished(seq: int) -> bytes:
    return line(
        seq,
        "finished",
        {
            "outcome": "clean",
            "exit_code": 0,
            "stop": None,
            "refusal": None,
            "volume": {"units_done": 0, "units_total": 0},
        },
    )


def watched(*lines: bytes) -> tuple[BookView, list[tuple[str | None, int]]]:
    """The view after `lines`, and each problem it counted: (the stream it was in after that
    line, the line's 1-based number). Gaps are left out: a view notes them, as a check does."""
    view = BookView()
    problems: list[tuple[str | None, int]] = []
    for number, raw in enumerate(lines, 1):
        before, gaps = view.problems, view.gaps
        view.feed(raw)
        if view.problems > before and view.gaps == gaps:
            problems.append((view.engine_run_id, number))
    return view, problems


def shown(view: BookView) -> str:
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(render(view))
    output = console.file.getvalue()
    assert isinstance(output, str)
    return output


BAD_HELLOS = {
    "2.0 with a key after data": (hello(R2, "2.0", trace="t"), "unsupported_version"),
    "1.4 with an envelope key": (hello(R2, "1.4", trace="t"), "malformed"),
    "1.3 with a 300-byte chunker_version": (
        line(
            1,
            "hello",
            {"stream_version": "1.3", "engine_run_id": R2, "book_id": "b", "chunker_version": "c" * 300},
        ),
        "malformed",
    ),
}  # fmt: skip


@pytest.mark.parametrize("before", ["1.3", "1.9"])
@pytest.mark.parametrize("bad", sorted(BAD_HELLOS))
def test_a_bad_hello_starts_its_own_stream_and_its_lines_are_not_the_previous_ones(
    bad: str, before: str
) -> None:
    """After a finished stream, a readable hello that is refused starts a stream of its own:
    its spend of 900 and its `finished` are not the finished stream's, and the view says its
    hello was refused. (Before, the view went on in r1: spend 900, "clean".)"""
    raw, verdict = BAD_HELLOS[bad]
    view, problems = watched(
        hello(R1, before), spend(2, 100), finished(3), raw, spend(2, 900), finished(3)
    )
    assert view.engine_run_id == R2
    assert view.streams == 2
    assert view.spend_micro_usd == 100
    assert view.finished is None
    assert problems[0] == (R2, 4)
    if verdict == "unsupported_version":
        assert view.refused_version == "2.0"
        assert "stream version 2.0 is not supported" in shown(view)
    else:
        assert view.refused_hello is not None
        assert "hello refused" in shown(view)


def test_a_bad_hello_as_the_first_line_is_its_streams() -> None:
    """A 2.0 hello with a key after `data` as the first line is no "line before any hello": it
    starts its stream, refused, and the stream after it is read."""
    view, problems = watched(hello(R2, "2.0", trace="t"), spend(2, 900), hello(R1, "1.3"))
    assert problems == [(R2, 1)]
    assert view.streams == 2
    assert view.engine_run_id == R1
    assert view.refused_version is None
    assert view.spend_micro_usd is None


def test_a_return_to_a_1_9_stream_reads_its_duplicate_by_1_9() -> None:
    """r1 (1.9) wrote a line with an envelope key; r2 (1.4) began; r1's hello and that line come
    again. The repeat is r1's, read by r1's version: a duplicate, no problem. (Before, the view
    kept r2's 1.4 and called it malformed, where every other reader read it.)"""
    view, problems = watched(
        hello(R1, "1.9"),
        spend(2, 100, trace="t"),
        hello(R2, "1.4"),
        hello(R1, "1.9"),
        spend(2, 100, trace="t"),
    )
    assert problems == []
    assert (view.engine_run_id, view.stream_version, view.seq) == (R1, "1.9", 2)


def test_a_return_to_a_1_4_stream_finds_its_malformed_duplicate() -> None:
    """The mirror: r1 (1.4), r2 (1.9), r1's hello again, then r1's seq 2 with an envelope key. A
    1.4 line with an envelope key is malformed, as every other reader says. (Before, the view
    read it by r2's 1.9 and missed it.)"""
    view, problems = watched(
        hello(R1, "1.4"),
        spend(2, 100),
        hello(R2, "1.9"),
        hello(R1, "1.4"),
        spend(2, 100, trace="t"),
    )
    assert problems == [(R1, 5)]
    assert view.stream_version == "1.4"


@pytest.mark.parametrize("entry", MANIFEST, ids=[Path(e["file"]).stem for e in MANIFEST])
def test_watch_follows_the_vector_journals_streams(entry: dict[str, Any]) -> None:
    """On every shared vector journal, the view enters the streams the vectors name, in their
    order; a stream refused at its hello is shown refused; a stream the vectors call sound gets
    no problem; and a line of a stream that does not decode is counted as that stream's problem.
    (A new seq after `finished` decodes: the view shows a stream, it does not check its order.)"""
    raw = (VECTORS / entry["file"]).read_bytes()
    lines = raw.splitlines(keepends=True)
    lines = [each for each in lines if each.endswith(b"\n")]  # an unterminated tail is not fed
    view = BookView()
    order: list[str] = []
    problems: dict[str | None, list[int]] = {}
    refused_at: dict[str, str] = {}
    for number, each in enumerate(lines, 1):
        before, gaps = view.problems, view.gaps
        view.feed(each)
        if view.engine_run_id is not None and view.engine_run_id not in order:
            order.append(view.engine_run_id)
            if view.refused_version is not None:
                refused_at[view.engine_run_id] = "unsupported_version"
            elif view.refused_hello is not None:
                refused_at[view.engine_run_id] = "malformed"
        if view.problems > before and view.gaps == gaps:
            problems.setdefault(view.engine_run_id, []).append(number)
    streams = [s for s in entry["streams"] if s["engine_run_id"] is not None]
    assert order == [s["engine_run_id"] for s in streams]
    versions: dict[str, str | None] = {}
    for each in lines:
        try:
            decoded = decode_stream_line(each, None)
        except LineError as error:
            if error.engine_run_id is not None:
                versions.setdefault(error.engine_run_id, error.stream_version)
            continue
        if decoded.type == "hello":
            versions.setdefault(decoded.data["engine_run_id"], decoded.data["stream_version"])
    for stream in streams:
        run = stream["engine_run_id"]
        if stream["verdict"] == "ok":
            assert run not in problems, (run, problems)
            assert run not in refused_at
            continue
        if stream["verdict"] not in ("malformed", "unsupported_version"):
            continue
        first = next(n for n, each in enumerate(lines, 1) if _starts(each, run))
        if stream["line"] == first:
            assert refused_at.get(run) == stream["verdict"]
        try:
            decode_stream_line(lines[stream["line"] - 1], versions[run])
        except LineError:
            assert stream["line"] in problems.get(run, []), (run, problems)


def _starts(raw: bytes, run: str) -> bool:
    """Whether `raw` is a hello (readable, sound or not) of the stream `run`."""
    try:
        decoded = decode_stream_line(raw, None)
    except LineError as error:
        return error.engine_run_id == run
    return decoded.type == "hello" and decoded.data["engine_run_id"] == run

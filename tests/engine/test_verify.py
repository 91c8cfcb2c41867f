"""`engine-events verify`: the journal's fsck, against the shared vectors and hand-made journals."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine_events import ExitCode
from engine_events._events import Finished, Hello, Spend
from engine_events._line import LINE_BYTES_MAX, encode_line
from engine_events.readers import verify as _verify
from engine_events.readers import verify_rules as _verify_check
from engine_events.readers.verify import JournalReport, command, verify_journal

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
MANIFEST: list[dict[str, Any]] = json.loads((VECTORS / "journals.json").read_text())
T = "2026-11-30T02:08:57.213Z"
RUN_A = "run-a"
RUN_B = "run-b"
RUN_C = "run-c"


def hello(run: str, version: str = "1.3") -> bytes:
    event = Hello(engine_run_id=run, book_id="b", chunker_version="c", stream_version=version)
    return encode_line(1, event, T)


def spend(seq: int, amount: int) -> bytes:
    return encode_line(seq, Spend(committed_micro_usd=amount), T)


def finished(seq: int) -> bytes:
    event = Finished(exit_code=ExitCode.CLEAN, units_done=1, units_total=1, committed_micro_usd=5)
    return encode_line(seq, event, T)


def write(tmp_path: Path, *lines: bytes, tail: bytes = b"") -> Path:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(lines) + tail)
    return path


def entries(report: JournalReport) -> list[dict[str, Any]]:
    """The report in the vectors' shape: orphans first, then streams in file order."""
    out: list[dict[str, Any]] = [
        {
            "engine_run_id": None,
            "verdict": p.verdict,
            "line": p.line,
            "seq": p.seq,
            "offset": p.offset,
        }
        for p in report.orphans
    ]
    for stream in report.streams:
        entry: dict[str, Any] = {"engine_run_id": stream.engine_run_id, "verdict": stream.verdict}
        if stream.problem is None:
            entry["last_seq"] = stream.last_seq
        else:
            problem = stream.problem
            entry.update(line=problem.line, seq=problem.seq, offset=problem.offset)
        out.append(entry)
    return out


@pytest.mark.parametrize("vector", MANIFEST, ids=[Path(v["file"]).stem for v in MANIFEST])
def test_vector_journal_verdicts(vector: dict[str, Any]) -> None:
    """Every shared vector journal gets exactly the verdicts, lines, offsets and seqs it lists."""
    report = verify_journal(VECTORS / vector["file"])
    assert entries(report) == vector["streams"]
    assert report.ok == all(s["verdict"] == "ok" for s in vector["streams"])


@pytest.mark.parametrize("vector", MANIFEST, ids=[Path(v["file"]).stem for v in MANIFEST])
def test_vector_journal_exit_codes(
    vector: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """`command` exits 0 for a sound vector journal and 1 for one with a problem."""
    expected = 0 if all(s["verdict"] == "ok" for s in vector["streams"]) else 1
    assert command(VECTORS / vector["file"], as_json=False) == expected
    assert capsys.readouterr().out


def test_torn_tail_is_a_note_not_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unterminated last line is reported with its offset and does not make the journal fail."""
    body = hello(RUN_A) + spend(2, 10)
    path = write(tmp_path, body, tail=spend(3, 20)[:-5])
    report = verify_journal(path)
    assert report.ok
    assert report.torn_tail is not None
    assert report.torn_tail.offset == len(body)
    assert report.lines == 2
    assert report.size_bytes == path.stat().st_size
    assert command(path, as_json=True) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["torn_tail"]["offset"] == len(body)
    assert out["ok"] is True


def test_torn_tail_longer_than_a_line_is_still_a_note(tmp_path: Path) -> None:
    """An unterminated tail over 1 MiB is a note with its full size, not a malformed line."""
    body = hello(RUN_A)
    path = write(tmp_path, body, tail=b"x" * (LINE_BYTES_MAX + 10))
    report = verify_journal(path)
    assert report.ok
    assert report.torn_tail == _verify.TornTail(len(body), LINE_BYTES_MAX + 10)


def test_several_streams_are_judged_apart(tmp_path: Path) -> None:
    """A problem in one stream neither hides nor causes a problem in the others."""
    lines = [
        hello(RUN_A), spend(2, 1), finished(3),
        hello(RUN_B), spend(2, 1), spend(4, 2), spend(5, 3),
        hello(RUN_C), spend(2, 1), spend(3, 2), spend(2, 9), spend(2, 1),
    ]  # fmt: skip
    path = write(tmp_path, *lines)
    report = verify_journal(path)
    assert [s.engine_run_id for s in report.streams] == [RUN_A, RUN_B, RUN_C]
    a, b, c = report.streams
    assert (a.verdict, a.last_seq) == ("ok", 3)
    assert (b.verdict, b.last_seq, b.lines) == ("gap", 2, 4)
    assert b.problem is not None
    assert b.problem.line == 6
    assert b.problem.offset == sum(len(x) for x in lines[:5])
    assert (c.verdict, c.lines) == ("payload_conflict", 5)
    assert c.problem is not None
    assert c.problem.line == 11
    assert not report.ok


def test_lines_after_a_streams_first_problem_are_not_judged(tmp_path: Path) -> None:
    """Only the first problem of a stream is reported; its later lines are counted, not judged."""
    path = write(tmp_path, hello(RUN_A), spend(3, 1), b"not json\n", spend(2, 1))
    (stream,) = verify_journal(path).streams
    assert stream.verdict == "gap"
    assert stream.problem is not None
    assert stream.problem.line == 2
    assert stream.lines == 4


def test_repeat_of_a_returning_stream_is_checked_against_its_own_lines(tmp_path: Path) -> None:
    """A hello of an earlier stream switches back to it: its later lines are judged in it."""
    lines = [
        hello(RUN_A),
        spend(2, 1),
        hello(RUN_B),
        spend(2, 7),
        hello(RUN_A),
        spend(2, 1),
        spend(3, 2),
    ]
    report = verify_journal(write(tmp_path, *lines))
    assert report.ok
    a, b = report.streams
    assert (a.last_seq, a.duplicates, a.lines) == (3, 2, 5)
    assert (b.last_seq, b.duplicates) == (2, 0)
    conflicting = verify_journal(write(tmp_path, *lines[:5], spend(2, 7)))
    assert conflicting.streams[0].verdict == "payload_conflict"
    assert conflicting.streams[0].problem is not None
    assert conflicting.streams[0].problem.line == 6


def test_a_malformed_hello_that_names_its_stream_opens_it(tmp_path: Path) -> None:
    """A hello refused by the decoder but carrying an engine_run_id is reported on that stream."""
    bad_hello = hello(RUN_B).replace(b'"seq":1', b'"seq":3')
    report = verify_journal(write(tmp_path, hello(RUN_A), spend(2, 1), bad_hello, spend(2, 5)))
    a, b = report.streams
    assert a.verdict == "ok"
    assert b.engine_run_id == RUN_B
    assert b.verdict == "malformed"
    assert b.problem is not None
    assert (b.problem.line, b.problem.seq) == (3, 3)
    assert b.lines == 2


def test_a_line_of_exactly_the_limit_passes_and_a_longer_one_is_malformed(tmp_path: Path) -> None:
    """A 1 MiB line is read; a longer one is malformed with no seq; the next stream is judged."""
    exact = unit_line(2, 0)
    exact = unit_line(2, LINE_BYTES_MAX - len(exact))
    assert len(exact) == LINE_BYTES_MAX
    too_long = exact[:-3] + b"xxxxx" + b"}}\n"
    ok = verify_journal(write(tmp_path, hello(RUN_A), exact, spend(3, 1)))
    assert ok.ok
    assert ok.streams[0].last_seq == 3
    head = hello(RUN_A) + spend(2, 1)
    report = verify_journal(write(tmp_path, head, too_long, spend(3, 1), hello(RUN_B), spend(2, 1)))
    a, b = report.streams
    assert a.verdict == "malformed"
    assert a.problem is not None
    assert (a.problem.line, a.problem.offset, a.problem.seq) == (3, len(head), None)
    assert str(LINE_BYTES_MAX) in a.problem.detail
    assert b.verdict == "ok"
    assert report.lines == 6


def test_only_the_first_line_before_any_hello_is_reported(tmp_path: Path) -> None:
    """Lines before the first hello belong to no stream; the first one is the reported orphan."""
    report = verify_journal(write(tmp_path, b"garbage\n", spend(2, 1), hello(RUN_A)))
    assert [(p.line, p.seq, p.offset) for p in report.orphans] == [(1, None, 0)]
    assert report.orphan_lines == 2
    assert report.streams[0].verdict == "ok"
    assert not report.ok


def test_empty_journal_is_sound(tmp_path: Path) -> None:
    """An empty journal (the engine has not started yet) has no streams and no problem."""
    report = verify_journal(write(tmp_path))
    assert report.ok
    assert (report.lines, report.size_bytes, report.streams, report.torn_tail) == (0, 0, [], None)


def test_json_output_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--json` prints the documented keys and types, problems with line, offset, seq and detail."""
    path = write(tmp_path, b"junk\n", hello(RUN_A), spend(2, 1), spend(4, 1), tail=b'{"seq"')
    assert command(path, as_json=True) == 1
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"ok", "path", "lines", "bytes", "torn_tail", "streams", "orphans"}
    assert out["ok"] is False
    assert out["path"] == str(path)
    assert (out["lines"], out["bytes"]) == (4, path.stat().st_size)
    assert out["torn_tail"]["offset"] == path.stat().st_size - 6
    (stream,) = out["streams"]
    assert set(stream) == {
        "engine_run_id",
        "verdict",
        "last_seq",
        "lines",
        "duplicates",
        "problem",
        "stream_version",
        "ignored_keys",
    }
    assert (stream["stream_version"], stream["ignored_keys"]) == ("1.3", [])
    assert stream["engine_run_id"] == RUN_A
    assert stream["verdict"] == "gap"
    assert (stream["last_seq"], stream["lines"], stream["duplicates"]) == (2, 3, 0)
    assert set(stream["problem"]) == {"line", "offset", "seq", "detail"}
    assert stream["problem"]["line"] == 4
    assert stream["problem"]["seq"] == 4
    assert isinstance(stream["problem"]["detail"], str)
    (orphan,) = out["orphans"]
    assert orphan["line"] == 1
    assert orphan["offset"] == 0
    assert orphan["seq"] is None


def test_sound_stream_json_has_null_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sound journal prints ok true, problem null for each stream, and exits 0."""
    assert command(write(tmp_path, hello(RUN_A), spend(2, 1), spend(2, 1)), as_json=True) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True
    assert out["torn_tail"] is None
    assert out["orphans"] == []
    assert out["streams"][0]["problem"] is None
    assert out["streams"][0]["duplicates"] == 1


def test_text_output_names_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The text summary names the stream, the verdict, the line and the byte offset."""
    path = write(tmp_path, hello(RUN_A), spend(2, 1), spend(2, 2))
    assert command(path, as_json=False) == 1
    out = capsys.readouterr().out
    assert RUN_A in out
    assert "payload_conflict at line 3" in out
    assert f"byte {len(hello(RUN_A) + spend(2, 1))}" in out


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A journal that does not exist cannot be read: exit 2, a message, and JSON that says so."""
    missing = tmp_path / "nope.jsonl"
    assert command(missing, as_json=False) == 2
    assert "cannot read" in capsys.readouterr().err
    assert command(missing, as_json=True) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False
    assert out["error"] == "unreadable"


def test_directory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A directory given as the journal is not a regular file: exit 2, and JSON that says so."""
    assert command(tmp_path, as_json=False) == 2
    assert "a directory, not a regular file" in capsys.readouterr().err
    assert command(tmp_path, as_json=True) == 2
    out = json.loads(capsys.readouterr().out)
    assert (out["ok"], out["error"]) == (False, "not_a_regular_file")


def run_verify(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine_events._cli", "verify", *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO with no writer would block a plain open (and a read) forever: verify refuses it at
    once, exit 2, `not_a_regular_file`."""
    fifo = tmp_path / "events.jsonl"
    os.mkfifo(fifo)
    done = run_verify(str(fifo), "--json", timeout=20)
    assert done.returncode == 2, done.stderr
    out = json.loads(done.stdout)
    assert out == {
        "ok": False,
        "path": str(fifo),
        "error": "not_a_regular_file",
        "detail": "a FIFO, not a regular file",
    }


def test_a_fifo_with_a_live_writer_is_refused_too(tmp_path: Path) -> None:
    """Even with a writer that never closes (a read would never end), nothing is read."""
    fifo = tmp_path / "events.jsonl"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    writer = os.open(fifo, os.O_WRONLY)
    try:
        os.write(writer, hello(RUN_A))
        assert command(fifo, as_json=False) == 2
        assert os.read(reader, 4096) == hello(RUN_A)  # verify took none of it
    finally:
        os.close(writer)
        os.close(reader)


def test_a_socket_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Unix socket cannot even be opened: it is still named `not_a_regular_file`."""
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        assert command(path, as_json=True) == 2
    out = json.loads(capsys.readouterr().out)
    assert (out["error"], out["detail"]) == ("not_a_regular_file", "a socket, not a regular file")


def test_a_device_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """A character device (`/dev/zero` would never end) is refused before any read."""
    assert command(Path("/dev/zero"), as_json=True) == 2
    out = json.loads(capsys.readouterr().out)
    assert (out["error"], out["detail"]) == (
        "not_a_regular_file",
        "a character device, not a regular file",
    )


def test_a_symlink_to_a_regular_file_is_read(tmp_path: Path) -> None:
    """The check is on what the path opens: a link to a journal is a journal."""
    target = write(tmp_path, hello(RUN_A), spend(2, 1))
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert verify_journal(link).ok


def test_an_unreadable_file_keeps_the_unreadable_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Other OS errors (here: a missing parent) still say `unreadable`."""
    assert command(tmp_path / "absent" / "events.jsonl", as_json=True) == 2
    assert json.loads(capsys.readouterr().out)["error"] == "unreadable"


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_output_cut_short_by_its_reader_ends_quietly(tmp_path: Path, as_json: bool) -> None:
    """`verify J | head -1`: the reader goes away after one line; verify ends with no traceback
    and with the verdict's exit code (the journal was judged whole)."""
    path = write(tmp_path, *(hello(f"run-{n:05d}") for n in range(4000)))
    args = [sys.executable, "-m", "engine_events._cli", "verify", str(path)]
    if as_json:
        args.append("--json")
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()  # more than a pipe's buffer is still to come
    stderr = process.stderr.read().decode()
    process.stderr.close()
    assert process.wait(timeout=60) == 0
    assert first
    assert stderr == ""


def test_output_through_head_has_no_traceback(tmp_path: Path) -> None:
    """The same through a shell pipeline, as an operator types it."""
    path = write(tmp_path, *(hello(f"run-{n:05d}") for n in range(4000)), spend(5, 1))
    done = subprocess.run(
        f"'{sys.executable}' -m engine_events._cli verify '{path}' | head -1",
        shell=True, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.stdout.count("\n") == 1
    assert "PROBLEMS FOUND" in done.stdout
    assert done.stderr == ""


def test_a_new_seq_after_finished_is_malformed(tmp_path: Path) -> None:
    """`finished` is the last line of its stream: the next seq after it is malformed, reported
    with its line, offset and seq; the stream's later lines are not judged."""
    lines = [hello(RUN_A), spend(2, 1), finished(3), spend(4, 2), spend(5, 3)]
    report = verify_journal(write(tmp_path, *lines))
    (stream,) = report.streams
    assert stream.verdict == "malformed"
    assert stream.problem is not None
    assert (stream.problem.line, stream.problem.offset, stream.problem.seq) == (
        4,
        sum(len(x) for x in lines[:3]),
        4,
    )
    assert "finished" in stream.problem.detail
    assert stream.last_seq == 3
    assert not report.ok


def test_a_gap_after_finished_is_reported_as_a_line_after_finished(tmp_path: Path) -> None:
    """Any new seq beyond the finished one is a line after finished, not a gap."""
    (stream,) = verify_journal(write(tmp_path, hello(RUN_A), finished(2), spend(9, 1))).streams
    assert stream.verdict == "malformed"
    assert stream.problem is not None
    assert stream.problem.seq == 9


def test_repeats_after_finished_are_still_duplicates_or_conflicts(tmp_path: Path) -> None:
    """After finished, a byte-identical repeat of an earlier line (the finished itself, the hello,
    any line) is a duplicate, and a repeat with other bytes a payload conflict."""
    lines = [hello(RUN_A), spend(2, 1), finished(3), spend(2, 1), finished(3), hello(RUN_A)]
    report = verify_journal(write(tmp_path, *lines))
    assert report.ok
    assert (report.streams[0].duplicates, report.streams[0].last_seq) == (3, 3)
    conflicting = verify_journal(write(tmp_path, *lines, spend(2, 7))).streams[0]
    assert conflicting.verdict == "payload_conflict"


def test_a_resumed_stream_after_a_finished_one_is_judged_on_its_own(tmp_path: Path) -> None:
    """A finished ends its own stream only: the next stream's lines follow it freely."""
    lines = [hello(RUN_A), finished(2), hello(RUN_B), spend(2, 1), finished(3)]
    report = verify_journal(write(tmp_path, *lines))
    assert report.ok
    assert [s.last_seq for s in report.streams] == [2, 3]


# A model of journals: each step is (stream index, action) where the action appends the stream's
# next seq, repeats an earlier seq (same bytes or other bytes), skips one, or finishes the stream.
ACTIONS = ["next", "next", "next", "repeat", "conflict", "skip", "finish"]
steps = st.lists(
    st.tuples(st.integers(0, 2), st.sampled_from(ACTIONS), st.integers(0, 10**6)), max_size=60
)


@given(steps)
def test_verdicts_match_a_simple_model_with_digests_spilled(
    plan: list[tuple[int, str, int]],
) -> None:
    """With a tiny digest buffer (spilling constantly), verdicts match a dictionary-based model."""
    runs = ["run-0", "run-1", "run-2"]
    lines: list[bytes] = []
    stored: dict[str, dict[int, bytes]] = {}
    expected: dict[str, tuple[str, int | None]] = {}
    ended: set[str] = set()
    current: str | None = None
    for index, action, pick in plan:
        run = runs[index]
        if run != current:
            lines.append(hello(run))
            current = run
            stored.setdefault(run, {1: hello(run)})
            expected.setdefault(run, ("ok", None))
        seqs = stored[run]
        last = max(seqs)
        new_seq = action in ("next", "finish", "skip")
        if action == "next":
            raw = spend(last + 1, pick)
            seqs[last + 1] = raw
        elif action == "finish":
            raw = finished(last + 1)
            seqs[last + 1] = raw
        elif action == "repeat":
            raw = seqs[1 + pick % last]
        elif action == "conflict":
            seq = 1 + pick % last
            raw = spend(seq, pick) if seq > 1 else hello(run, "1.4")
            if raw == seqs[seq]:
                raw = spend(seq, pick + 1)
        else:
            raw = spend(last + 2, pick)
        lines.append(raw)
        if expected[run][0] == "ok":
            if new_seq and run in ended:
                expected[run] = ("malformed", len(lines))
            elif action == "conflict":
                expected[run] = ("payload_conflict", len(lines))
            elif action == "skip":
                expected[run] = ("gap", len(lines))
            elif action == "finish":
                ended.add(run)
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as scratch:
        patch.setattr(_verify_check, "DIGEST_BUFFER_BYTES_MAX", 2 * _verify.DIGEST_BYTES)
        journal = Path(scratch) / "events.jsonl"
        journal.write_bytes(b"".join(lines))
        report = verify_journal(journal)
    got = {
        s.engine_run_id: (s.verdict, None if s.problem is None else s.problem.line)
        for s in report.streams
    }
    assert got == expected


def unit_line(seq: int, pad_chars: int) -> bytes:
    """A unit_done line padded by `pad_chars` in a field of a newer minor (bounded only by the
    line, unlike the unit's id)."""
    note = "p" * pad_chars
    data = f'{{"unit":"u-{seq:08d}","index":{seq},"note":"{note}"}}'
    return f'{{"seq":{seq},"type":"unit_done","time":"{T}","data":{data}}}\n'.encode()


def traced_peak_bytes(path: Path) -> tuple[JournalReport, int]:
    tracemalloc.start()
    try:
        report = verify_journal(path)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return report, peak_bytes


def test_memory_stays_bounded_on_a_large_journal(tmp_path: Path) -> None:
    """A ~50 MB journal of 170k lines is verified in under 5 MB, its digests included."""
    path = tmp_path / "big.jsonl"
    lines_total = 170_000
    with open(path, "wb") as file:
        file.write(hello(RUN_A))
        for start in range(2, lines_total + 1, 5_000):
            stop = min(start + 5_000, lines_total + 1)
            file.write(b"".join(unit_line(seq, seq % 400) for seq in range(start, stop)))
        file.write(spend(100, 1))  # repeats an early seq with other bytes: its digest was spilled
    size_bytes = path.stat().st_size
    assert size_bytes > 45_000_000
    report, peak_bytes = traced_peak_bytes(path)
    assert report.size_bytes == size_bytes
    (stream,) = report.streams
    assert stream.last_seq == lines_total
    assert stream.problem is not None
    assert (stream.verdict, stream.problem.seq) == ("payload_conflict", 100)
    assert lines_total * _verify.DIGEST_BYTES > 5 * 1024 * 1024  # every digest would not fit
    assert peak_bytes < 5 * 1024 * 1024


def test_memory_does_not_grow_with_the_number_of_long_lines(tmp_path: Path) -> None:
    """Eight lines of 1 MiB need no more memory than two: one line is held at a time."""
    peaks = []
    for count in (2, 8):
        path = tmp_path / f"long-{count}.jsonl"
        lines = [
            unit_line(seq, LINE_BYTES_MAX - len(unit_line(seq, 0))) for seq in range(2, count + 2)
        ]
        assert all(len(line) == LINE_BYTES_MAX for line in lines)
        path.write_bytes(hello(RUN_A) + b"".join(lines))
        report, peak_bytes = traced_peak_bytes(path)
        assert report.ok
        assert report.streams[0].last_seq == count + 1
        peaks.append(peak_bytes)
    assert peaks[1] < peaks[0] * 1.1


STREAM_FORMAT_DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "stream-format.md"


def test_the_documented_example_journal_is_sound_and_canonical(tmp_path: Path) -> None:
    """The worked example of the stream-format reference verifies OK and is in canonical form."""
    text = STREAM_FORMAT_DOC.read_text()
    example = text.split("## A worked example", 1)[1].split("```jsonl\n", 1)[1].split("```", 1)[0]
    lines = [line.encode() + b"\n" for line in example.splitlines()]
    assert len(lines) == 16
    for raw in lines:
        value = orjson.loads(raw)
        assert orjson.dumps(value) + b"\n" == raw  # compact, as the emitter writes it
        assert list(value) == ["seq", "type", "time", "data"]
    report = verify_journal(write(tmp_path, *lines))
    assert report.ok
    assert [(s.engine_run_id[:8], s.last_seq) for s in report.streams] == [
        ("0b6c1f3e", 9),
        ("5d2e9c40", 7),
    ]
    assert f"OK — 2 streams, {len(lines)} lines" in _verify.format_text(report)

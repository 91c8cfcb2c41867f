"""`verify`'s checker: the rules of the streams, applied to one journal read once, front to back.

The rules, the report's shape and the exit codes are told in `verify` (the command). The lines come
from `lines.LineReader`; the digests of accepted lines are kept by `_DigestStore` in bounded
memory. This module prints nothing: `verify_format` turns a `JournalReport` into text or JSON.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Literal

import orjson

from .._line import LINE_BYTES_MAX
from ..errors import LineError, MalformedLine, NotARegularFile
from ..grammar import INTEGER_MAX, Line
from .decode import decode_stream_line, require_supported
from .lines import LineReader, RawLine
from .regular_file import not_regular, open_regular

ReadProgress = Callable[[int, int], None]
"""Told `(bytes read, bytes in the file)` as `verify_journal` goes (for a person's view)."""
PROGRESS_BYTES = 1024 * 1024
"""How much is read between two reports to `ReadProgress`."""

Verdict = Literal["ok", "gap", "payload_conflict", "malformed", "unsupported_version"]

DIGEST_BYTES = hashlib.sha256().digest_size
DIGEST_BUFFER_BYTES_MAX = 256 * 1024
"""Digests held in memory before they are spilled to the temporary file."""
DETAIL_CHARS_MAX = 240
IGNORED_KEYS_MAX = 16
"""A stream's report names at most this many envelope keys it ignored."""
"""A problem's detail is cut to this length: it may quote a value of the line, which may be huge."""


@dataclass(frozen=True)
class Problem:
    """The first problem of a stream (or of the region before any hello)."""

    verdict: Verdict
    line: int
    """1-based line number in the file."""
    offset: int
    """Byte offset where the offending line starts."""
    seq: int | None
    """The line's seq, or None when the line has none (not JSON, no integer seq, too long)."""
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "offset": self.offset, "seq": self.seq, "detail": self.detail}


@dataclass
class StreamReport:
    """What verify found for one stream."""

    engine_run_id: str
    last_seq: int = 0
    """The highest seq accepted in order before the stream's first problem (0: none)."""
    lines: int = 0
    """Lines of the file that belong to this stream, repeats and unjudged lines included."""
    duplicates: int = 0
    """Byte-identical repeats of an earlier seq (harmless: the stream is at-least-once)."""
    problem: Problem | None = None
    stream_version: str | None = None
    """The version its hello names (None: no readable hello)."""
    ignored_keys: list[str] = field(default_factory=list)
    """Envelope keys after `data` that this reader does not know, met in lines of a stream of a
    newer minor and ignored there: a note, not a problem (the first `IGNORED_KEYS_MAX`)."""

    @property
    def verdict(self) -> Verdict:
        return "ok" if self.problem is None else self.problem.verdict

    def ignored(self, keys: tuple[str, ...]) -> None:
        for key in keys:
            if key not in self.ignored_keys and len(self.ignored_keys) < IGNORED_KEYS_MAX:
                self.ignored_keys.append(_cut(key))

    def to_json(self) -> dict[str, Any]:
        return {
            "engine_run_id": self.engine_run_id,
            "verdict": self.verdict,
            "last_seq": self.last_seq,
            "lines": self.lines,
            "duplicates": self.duplicates,
            "problem": None if self.problem is None else self.problem.to_json(),
            "stream_version": self.stream_version,
            "ignored_keys": self.ignored_keys,
        }


@dataclass(frozen=True)
class TornTail:
    """An unterminated last line: not judged, and not a failure."""

    offset: int
    size_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "bytes": self.size_bytes}


@dataclass
class JournalReport:
    """The whole verdict on one journal file."""

    path: str
    lines: int = 0
    """Complete (newline-terminated) lines."""
    size_bytes: int = 0
    """Bytes read, the torn tail included."""
    torn_tail: TornTail | None = None
    streams: list[StreamReport] = field(default_factory=list)
    """In the order their first line appears in the file."""
    orphans: list[Problem] = field(default_factory=list)
    """The first problem before any hello (at most one: that region is judged like a stream)."""
    orphan_lines: int = 0

    @property
    def ok(self) -> bool:
        return not self.orphans and all(stream.problem is None for stream in self.streams)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "path": self.path,
            "lines": self.lines,
            "bytes": self.size_bytes,
            "torn_tail": None if self.torn_tail is None else self.torn_tail.to_json(),
            "streams": [stream.to_json() for stream in self.streams],
            "orphans": [{"verdict": p.verdict, **p.to_json()} for p in self.orphans],
        }


class _DigestStore:
    """The sha256 of accepted lines, addressed by an index given at `append`, in bounded memory.

    The newest digests sit in a memory buffer of at most `DIGEST_BUFFER_BYTES_MAX`; older ones are
    in an anonymous temporary file (created on first spill, gone when closed), read with `pread`.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._spilled = 0
        self._file: BinaryIO | None = None

    def __enter__(self) -> _DigestStore:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    @property
    def count(self) -> int:
        return self._spilled + len(self._buffer) // DIGEST_BYTES

    def append(self, digest: bytes) -> int:
        if len(digest) != DIGEST_BYTES:
            raise ValueError(f"a digest is {DIGEST_BYTES} bytes, got {len(digest)}")
        index = self.count
        self._buffer += digest
        if len(self._buffer) >= DIGEST_BUFFER_BYTES_MAX:
            if self._file is None:
                self._file = tempfile.TemporaryFile(buffering=0)  # noqa: SIM115 (closed in __exit__)
            self._file.write(self._buffer)
            self._spilled += len(self._buffer) // DIGEST_BYTES
            self._buffer.clear()
        return index

    def get(self, index: int) -> bytes:
        if not 0 <= index < self.count:
            raise IndexError(index)
        if index >= self._spilled:
            start = (index - self._spilled) * DIGEST_BYTES
            return bytes(self._buffer[start : start + DIGEST_BYTES])
        if self._file is None:
            raise RuntimeError("digest store lost its spill file")
        digest = os.pread(self._file.fileno(), DIGEST_BYTES, index * DIGEST_BYTES)
        if len(digest) != DIGEST_BYTES:
            raise OSError(f"short read of digest {index} from the spill file")
        return digest


@dataclass
class _Stream:
    report: StreamReport
    finished_seq: int | None = None
    """The seq of the stream's accepted `finished`: no new seq may follow it."""
    extent_seqs: list[int] = field(default_factory=list)
    """First seq of each run of this stream's digests that are contiguous in the store."""
    extent_indexes: list[int] = field(default_factory=list)
    """Store index of the digest of `extent_seqs[k]`."""

    def remember(self, seq: int, digest: bytes, store: _DigestStore) -> None:
        """Store the digest of the new seq (always `last_seq + 1`)."""
        last_index = self._index_of(seq - 1) if self.extent_seqs else None
        index = store.append(digest)
        if last_index is None or index != last_index + 1:
            self.extent_seqs.append(seq)
            self.extent_indexes.append(index)

    def digest_of(self, seq: int, store: _DigestStore) -> bytes:
        return store.get(self._index_of(seq))

    def _index_of(self, seq: int) -> int:
        k = bisect.bisect_right(self.extent_seqs, seq) - 1
        if k < 0:
            raise KeyError(seq)
        return self.extent_indexes[k] + (seq - self.extent_seqs[k])


def _salvage(raw: bytes | None) -> int | None:
    """For a line `decode_line` refused: its seq if it has one."""
    if raw is None or len(raw) > LINE_BYTES_MAX:  # an over-long line is never parsed
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    seq = value.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= INTEGER_MAX:
        return None  # only a seq a line may carry is named, as the platform names it
    return seq


def _cut(detail: str) -> str:
    if len(detail) <= DETAIL_CHARS_MAX:
        return detail
    return detail[: DETAIL_CHARS_MAX - 1] + "…"


class _Checker:
    """Judges lines one by one; `report` holds what was found so far."""

    def __init__(self, path: str, store: _DigestStore) -> None:
        self.report = JournalReport(path=path)
        self._store = store
        self._streams: dict[str, _Stream] = {}
        self._current: _Stream | None = None

    def feed(self, entry: RawLine) -> None:
        """Judge one complete line."""
        self.report.size_bytes += entry.size_bytes
        self.report.lines += 1
        number = self.report.lines
        line: Line | None = None
        failure: LineError | None = None
        if entry.raw is None:
            failure = MalformedLine.too_long(entry.size_bytes, LINE_BYTES_MAX)
        else:
            current = self._current
            version = None if current is None else current.report.stream_version
            try:
                line = decode_stream_line(entry.raw, version)
            except LineError as error:
                failure = error

        if line is not None and line.type == "hello":
            self._on_hello(line, number, entry.offset)
            return
        if line is None:
            seq = _salvage(entry.raw)
            stream = self._current
            verdict: Verdict = "malformed"
            if failure is not None and failure.engine_run_id is not None:
                # A readable hello, whatever else is wrong with it: it starts its stream, and
                # what is wrong is that stream's problem, never the one before it.
                stream, is_new = self._switch_to(failure.engine_run_id)
                if is_new:
                    stream.report.stream_version = failure.stream_version
                if failure.kind == "unsupported_version":
                    # Another major's hello of a stream whose hello was read: a changed seq 1.
                    read = not is_new and stream.report.last_seq >= 1
                    verdict = "payload_conflict" if read else "unsupported_version"
            reason = "unreadable line" if failure is None else failure.detail
            self._fail(stream, number, entry.offset, seq, reason, verdict=verdict)
        elif self._current is None:
            self._fail(None, number, entry.offset, line.seq, "a line before any hello")
        else:
            self._judge(self._current, line, number, entry.offset)

    def _switch_to(self, run_id: str) -> tuple[_Stream, bool]:
        stream = self._streams.get(run_id)
        is_new = stream is None
        if stream is None:
            stream = _Stream(StreamReport(engine_run_id=run_id))
            self._streams[run_id] = stream
            self.report.streams.append(stream.report)
        self._current = stream
        return stream, is_new

    def _on_hello(self, hello: Line, number: int, offset: int) -> None:
        stream, is_new = self._switch_to(hello.data["engine_run_id"])
        if not is_new:
            self._judge(stream, hello, number, offset)
            return
        stream.report.lines += 1
        stream.report.stream_version = hello.data["stream_version"]
        stream.report.ignored(hello.ignored_keys)
        try:
            require_supported(hello)
        except LineError as error:
            verdict: Verdict = "malformed"
            if error.kind == "unsupported_version":
                verdict = "unsupported_version"
            stream.report.problem = Problem(verdict, number, offset, hello.seq, _cut(error.detail))
            return
        stream.remember(1, hashlib.sha256(hello.raw).digest(), self._store)
        stream.report.last_seq = 1

    def _judge(self, stream: _Stream, line: Line, number: int, offset: int) -> None:
        report = stream.report
        report.lines += 1
        if report.problem is not None:
            return
        if line.seq <= report.last_seq:
            if hashlib.sha256(line.raw).digest() == stream.digest_of(line.seq, self._store):
                report.duplicates += 1
                return
            detail = f"seq {line.seq} repeats with bytes other than its first occurrence"
            report.problem = Problem("payload_conflict", number, offset, line.seq, detail)
            return
        if stream.finished_seq is not None:
            detail = (
                f"seq {line.seq} comes after the stream's finished (seq {stream.finished_seq}), "
                "the last line of a stream"
            )
            report.problem = Problem("malformed", number, offset, line.seq, detail)
            return
        if line.seq > report.last_seq + 1:
            detail = f"seq {line.seq} follows seq {report.last_seq}"
            report.problem = Problem("gap", number, offset, line.seq, detail)
            return
        stream.remember(line.seq, hashlib.sha256(line.raw).digest(), self._store)
        report.last_seq = line.seq
        if line.ignored_keys:
            report.ignored(line.ignored_keys)
        if line.type == "finished":
            stream.finished_seq = line.seq

    def torn_tail(self, offset: int, size_bytes: int) -> None:
        """The end of the file: `size_bytes` after `offset` that end no line (0: none)."""
        if size_bytes:
            self.report.size_bytes += size_bytes
            self.report.torn_tail = TornTail(offset, size_bytes)

    def _fail(
        self,
        stream: _Stream | None,
        number: int,
        offset: int,
        seq: int | None,
        detail: str,
        *,
        verdict: Verdict = "malformed",
    ) -> None:
        """A refused line: the first problem of its stream, or of the region before any hello."""
        problem = Problem(verdict, number, offset, seq, _cut(detail))
        if stream is None:
            self.report.orphan_lines += 1
            if not self.report.orphans:
                self.report.orphans.append(problem)
            return
        stream.report.lines += 1
        if stream.report.problem is None:
            stream.report.problem = problem


def _open_regular(path: Path) -> int:
    """A descriptor on `path` for reading, refusing anything but a regular file before any read."""
    try:
        fd = open_regular(path)
    except NotARegularFile:
        raise
    except OSError as error:
        # A socket cannot be opened at all (ENXIO): name it for what it is.
        try:
            kind = not_regular(os.stat(path).st_mode)
        except OSError:
            raise error from None
        if kind is not None:
            raise NotARegularFile(error.errno, f"{kind}, not a regular file", str(path)) from error
        raise
    return fd


def verify_journal(path: Path, *, on_read: ReadProgress | None = None) -> JournalReport:
    """Read the journal at `path` once and judge every stream in it. `on_read` is told how far
    the reading is (at the start, then every `PROGRESS_BYTES` or so, and at the end).

    Raises `NotARegularFile` when the path names a FIFO, a socket, a device or a directory, and
    `OSError` when the file cannot be opened or read.
    """
    fd = _open_regular(path)
    try:
        size_bytes = os.fstat(fd).st_size
        told_at = 0
        if on_read is not None:
            on_read(0, size_bytes)
        with _DigestStore() as store:
            checker = _Checker(str(path), store)
            reader = LineReader()
            for line in reader.read(fd):
                checker.feed(line)
                if on_read is not None and reader.offset - told_at >= PROGRESS_BYTES:
                    told_at = reader.offset
                    on_read(told_at, max(size_bytes, told_at))  # a live writer grows the file
            checker.torn_tail(reader.offset, reader.tail_bytes)
            if on_read is not None:
                on_read(reader.seen_to, max(size_bytes, reader.seen_to))
    finally:
        os.close(fd)
    return checker.report

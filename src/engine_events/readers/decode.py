"""Reading a journal line back on the engine side, for `verify`, `watch` and `status`: the
grammar's judge (`engine_events.grammar`), and the engine's refusal of a stream of another major.

It accepts what the stream's minor versions may add (unknown fields, unknown event types, and in a
stream of a minor newer than it knows, envelope keys after `data`) and refuses what no 1.x writer
produces, with the grammar's `MalformedLine`. The platform's decoder reads by the same judge; the
shared test vectors in `tests/vectors/` pin the verdicts of both.
"""

from __future__ import annotations

from ..errors import UnsupportedVersion
from ..grammar import (
    STREAM_MAJOR,
    Line,
    LineError,
    MalformedLine,
    TimeMemo,
    hello_identity,
    is_newer_minor,
    judge,
    reads_major,
    stream_major,
)

_MEMO = TimeMemo()
"""The last valid time and its day: the lines of one commit share their time."""


def decode_stream_line(raw: bytes, stream_version: str | None) -> Line:
    """`decode_line` for a line of a stream of `stream_version` (None: not known; a hello names
    its own). In a stream of a minor newer than this reader knows, keys after `data` in the
    envelope are ignored (kept in `ignored_keys`), as unknown `data` fields are; every other rule
    still holds for them. A stream of a minor this reader knows keeps the envelope exactly."""
    try:
        return decode_line(raw)
    except MalformedLine as strict:
        if strict.reason != "wrong_keys":
            raise
        newer = stream_version is not None and is_newer_minor(stream_version)
        try:
            line = decode_line(raw, newer_minor=True)
        except MalformedLine:
            if newer:
                raise
            raise strict from None
        if line.type == "hello":
            version = line.data["stream_version"]  # a hello names its own stream's version
            newer = isinstance(version, str) and is_newer_minor(version)
        if newer:
            return line
        raise strict from None


def decode_line(raw: bytes, *, newer_minor: bool = False) -> Line:
    """Decode one complete line (ending in `\\n`); raise `MalformedLine`.

    A hello of another major is returned with only its version and stream id checked: the caller
    refuses it with `require_supported`, keeping the stream id for its report. With
    `newer_minor`, keys after `data` in the envelope are allowed (see `decode_stream_line`).

    The refusal of a readable hello names the stream it starts, and is `UnsupportedVersion` when
    the hello names another major, whatever else is wrong with it.
    """
    try:
        return judge(raw, _MEMO, newer_minor=newer_minor)
    except LineError as refused:
        version = refused.stream_version
        if refused.engine_run_id is None or version is None or reads_major(version):
            raise
        identity = hello_identity(raw)
        seq = None if identity is None else identity.seq
        unsupported = UnsupportedVersion(_not_supported(version), seq=seq)
        raise unsupported.of_hello(refused.engine_run_id, version) from None


def require_supported(hello: Line) -> None:
    """Refuse a stream whose major version is not ours (minor versions are always read)."""
    version = hello.data["stream_version"]
    if not reads_major(version):
        raise UnsupportedVersion(_not_supported(version), seq=hello.seq)


def _not_supported(version: str) -> str:
    return f"stream major version {stream_major(version)} is not supported (reads {STREAM_MAJOR}.x)"

"""The precise judge: the grammar's (`engine_events.grammar.judge`), the one the engine's readers
read by, and the platform's refusal of a stream of another major. The decoder's fast lanes
(`decode`) hand it every line they do not accept whole."""

from __future__ import annotations

from engine_events.grammar import LineError, hello_identity, judge, of_another_major, reads_major

from ..errors import UnsupportedVersion
from .line import Line
from .memo import DecoderMemo


def decode_precisely(raw: bytes, memo: DecoderMemo, *, newer_minor: bool = False) -> Line:
    """Judge a line rule by rule, and raise the refusal of the first rule it breaks. With
    `newer_minor`, keys after `data` in the envelope are allowed (and ignored).

    The refusal of a readable hello is that of the stream it starts: `unsupported_version` when
    it names another major, whatever else is wrong with it."""
    try:
        judged = judge(raw, memo, newer_minor=newer_minor)
    except LineError as refused:
        version = refused.stream_version
        if version is None or reads_major(version):
            raise
        raise _unsupported(raw) from None
    if of_another_major(judged):
        raise _unsupported(raw)
    return Line(judged.seq, judged.type, judged.time, judged.data)


def _unsupported(raw: bytes) -> UnsupportedVersion:
    """The refusal of the stream a readable hello of another major starts."""
    identity = hello_identity(raw)
    assert identity is not None and identity.stream_version is not None  # a readable hello's
    return UnsupportedVersion(
        identity.stream_version,
        engine_run_id=identity.engine_run_id,
        book_id=identity.book_id,
        seq=identity.seq,
    )

"""The decoder: one journal line in, one `Line` or one typed refusal out.

It reads what any 1.x writer may produce (a newer minor's unknown fields and event types are kept
as they are and ignored by the effects) and refuses everything else with a `MalformedLine` (or an
`UnsupportedVersion`) that carries the seq when the line has a readable one. Its verdict depends on the line alone:
which stream a line belongs to, and whether it comes in order, is the pass's business
(`book_pass`), and what it remembers (`memo`) only chooses a shorter path.

Money is read only as a non-negative JSON integer of micro-USD that fits a Postgres bigint; a float
(even `12.0`), a string (`"null"`, `"12"`), null, a bool or a negative number is refused, never
read as zero.

Everything a line may hold must be storable in Postgres: no U+0000 in any string or key (text and
jsonb cannot hold it), the strings of known fields within their byte bounds. And a line is one
compact object with the keys seq, type, time, data in that order, no key twice in any object (the
JSON parser would silently keep the last one). Those four are all its keys, except in a stream of
a minor newer than this reader knows, whose envelope may go on with keys it ignores
(`decode_stream_line`). The rules themselves are the grammar's (`engine_events.grammar`), which
the engine's readers read by too.

Three lanes, each falling through to the next: a line whose skeleton (its bytes with every digit
read as 0) the memo holds is accepted after its parse and a look at what the skeleton cannot
prove; a line as the emitter writes it, after one parse and a few checks of its parsed value; any
other line, and a hello of another major, is judged rule by rule (`precise`: the grammar's judge), so that its
refusal is that of the first rule it breaks. The fast lanes are the platform's own; a differential
test holds them to the judge.
"""

from __future__ import annotations

import orjson

from engine_events.grammar import (
    INTEGER_MAX,
    LINE_BYTES_MAX,
    NESTING_DEPTH_MAX,
    TYPE_CHECKS,
    LineError,
    MalformedLine,
    is_newer_minor,
    is_time,
    reads_major,
    wide_digits,
)

from .line import Line, parse_as_line
from .memo import COMPARE_COUNTS, DIGITS_AS_ZERO, LEARNED_KINDS, PHASES_SHIFT, DecoderMemo
from .precise import decode_precisely

MEMO = DecoderMemo()
"""The process's one memo: every pass shares what the lines before taught."""

# Bound once for the fast lanes of `decode_line`, which use them on every line.
_loads = orjson.loads
_dumps = orjson.dumps
_AS_LINE = orjson.OPT_APPEND_NEWLINE
_skeletons = MEMO.skeletons  # emptied in place, never replaced (`DecoderMemo.forget`)


def decode_line(raw: bytes) -> Line:
    """Decode one complete line (its bytes end with `\\n`) or raise its refusal (`LineRefused`).

    The error's `offset` is left for the caller, who knows where the line starts.

    A line whose skeleton is remembered (`MEMO.skeletons`: a progress, unit_done or spend line of the
    same shape was judged valid before) is accepted after its parse, a look at its seq and time
    and, for some progress lines, at each phase's counts: the skeleton proves the rest.

    Any other line as the emitter writes it is accepted after one parse and a few checks of the
    parsed value. It is exactly what orjson writes back from that value, newline included, which
    proves it UTF-8 and compact, without a key twice, a byte-order mark or a carriage return. The
    check of its type returns whether its data is closed (only known fields, their strings free of
    U+0000, their integers checked): a closed line holds U+0000 nowhere, nests 4 deep at most and
    holds no integer past 64 bits, so only the bytes of another line are searched for the escape
    `\\u0000` and for 19 digits in a row, and counted for depth. A line not so
    accepted, valid or not, is judged rule by rule by `decode_precisely`: a refusal is always
    that of the first rule the line breaks.
    """
    # One pass over the bytes, unbounded: a line over the limit is copied once here, as the parse
    # below would copy its strings, before the precise judge refuses it.
    still_to_judge = _skeletons.get(raw.translate(DIGITS_AS_ZERO))
    if still_to_judge is not None:
        try:
            line = parse_as_line(raw)
        except ValueError:  # a number with a leading zero is not JSON
            return decode_precisely(raw, MEMO)
        time = line.time
        if time != MEMO.last_time:
            if time[:17] == MEMO.minute and time[17] < "6":
                MEMO.last_time = time  # the lines after it in its commit share it
            elif not is_time(time, MEMO):
                return decode_precisely(raw, MEMO)
        if line.seq:  # any width of digits but a lone 0 is a valid seq
            if not still_to_judge:
                return line
            phases = line.data["phases"]
            expected = still_to_judge >> PHASES_SHIFT
            if expected and len(phases) != expected:
                return decode_precisely(raw, MEMO)  # a phase named twice
            if not still_to_judge & COMPARE_COUNTS:
                return line
            for counts in phases.values():
                if counts["done"] > counts["total"]:
                    break
            else:
                return line
        return decode_precisely(raw, MEMO)
    if len(raw) <= LINE_BYTES_MAX:
        try:
            value = _loads(raw)  # the newline is JSON whitespace: no copy without it
            first, second, third, fourth = value  # ValueError: not four members
            canonical = (
                type(value) is dict
                and first == "seq"
                and second == "type"
                and third == "time"
                and fourth == "data"
                and _dumps(value, option=_AS_LINE) == raw
            )
        except (ValueError, TypeError):  # also orjson's: not JSON, or nested past its limit
            canonical = False
        if canonical:
            seq, kind, time, data = value.values()
            if (
                type(seq) is int
                and 0 < seq <= INTEGER_MAX
                and type(kind) is str
                and (time == MEMO.last_time or is_time(time, MEMO))
                and type(data) is dict
            ):
                check = TYPE_CHECKS.get(kind)
                try:
                    closed = check is not None and check(data, seq)
                except LineError:  # maybe not the first rule the line breaks: judged below
                    pass
                else:
                    if closed:
                        if kind in LEARNED_KINDS:
                            MEMO.remember_skeleton(raw, kind, data)
                        return Line(seq, kind, time, data)
                    if (
                        kind
                        and (kind != "hello" or reads_major(data["stream_version"]))
                        and raw.count(b"[") + raw.count(b"{") <= NESTING_DEPTH_MAX
                        and raw.find(b"\\u0000") == -1
                        and wide_digits(raw) is None
                    ):
                        return Line(seq, kind, time, data)
    return decode_precisely(raw, MEMO)


def decode_stream_line(raw: bytes, stream_version: str | None) -> Line:
    """`decode_line` for a line of a stream of `stream_version` (None: not known; a hello names
    its own). A stream of a minor newer than this reader knows may carry keys after `data` in
    its envelope: they are ignored, as unknown `data` fields are, and every other rule holds for
    them (compact, no key twice, no U+0000, the nesting bound). A stream of a minor this reader
    knows keeps the envelope exactly seq, type, time, data."""
    try:
        return decode_line(raw)
    except MalformedLine as strict:
        if strict.reason != "wrong_keys":
            raise
        newer = stream_version is not None and is_newer_minor(stream_version)
        try:
            line = decode_precisely(raw, MEMO, newer_minor=True)
        except LineError:
            if newer:
                raise
            raise strict from None
        if line.type == "hello":
            version = line.data["stream_version"]  # a hello names its own stream's version
            newer = type(version) is str and is_newer_minor(version)
        if newer:
            return line
        raise strict from None

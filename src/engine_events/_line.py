"""The one encoder of a journal line: `{"seq":…,"type":…,"time":…,"data":{…}}\\n`.

Compact JSON through orjson (no NaN, no Infinity: orjson refuses to encode them), keys in the order
seq, type, time, data, UTF-8, `\\n` only, at most `LINE_BYTES_MAX` bytes including the newline.
"""

from __future__ import annotations

import datetime as dt
import time as _time

import orjson

from ._events import Event
from .errors import EventError, LineTooLong
from .grammar import INTEGER_MAX, LINE_BYTES_MAX, TIME_PATTERN, TimeMemo, contains_nul
from .grammar import is_time as grammar_is_time

__all__ = [
    "LINE_BYTES_MAX",
    "TIME_PATTERN",
    "encode_line",
    "format_time",
    "is_time",
    "now_time",
    "time_of_ns",
]


class _Memo:
    """What the line's `time` costs once per second instead of once per line."""

    __slots__ = ("second_prefix",)

    def __init__(self) -> None:
        self.second_prefix: tuple[int, str] = (-1, "")
        """(a Unix second, its `YYYY-MM-DDTHH:MM:SS.` in UTC): one tuple, replaced whole, so that
        a thread never reads a second with another second's text."""


_MEMO = _Memo()
_TIME_MEMO = TimeMemo()
"""The last `time` `is_time` accepted and its day: the lines of one millisecond share it."""


def is_time(value: object) -> bool:
    """Whether `value` is a `time` every reader accepts: the shape of `TIME_PATTERN` naming a real
    instant of years 1-9999 (no 30 February, no hour 24, no minute or second 60)."""
    if type(value) is str:
        return value == _TIME_MEMO.last_time or grammar_is_time(value, _TIME_MEMO)
    # A subclass of `str` is judged as the text it holds, and not remembered.
    return isinstance(value, str) and grammar_is_time(str(value), TimeMemo())


def format_time(moment: dt.datetime) -> str:
    """RFC 3339 UTC with milliseconds and `Z`: `2026-11-30T02:08:57.213Z`."""
    if moment.tzinfo is None:
        raise EventError("time must be timezone-aware")
    utc = moment.astimezone(dt.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def time_of_ns(ns: int) -> str:
    """`format_time` of the instant `ns` nanoseconds after the Unix epoch (truncated to the
    millisecond, as `format_time` does), formatting the date and clock once per second."""
    second, milli = divmod(ns // 1_000_000, 1000)
    cached = _MEMO.second_prefix
    if cached[0] != second:
        moment = dt.datetime.fromtimestamp(second, dt.UTC)
        cached = (second, moment.strftime("%Y-%m-%dT%H:%M:%S."))
        _MEMO.second_prefix = cached
    return f"{cached[1]}{milli:03d}Z"


def now_time() -> str:
    """Now as a line's `time`: `format_time(datetime.now(UTC))` (the same system clock)."""
    return time_of_ns(_time.time_ns())


def encode_line(seq: int, event: Event, time: str) -> bytes:
    """Return the exact bytes of the line, newline included; raise `EventError` if it cannot be one."""
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= INTEGER_MAX:
        raise EventError(f"seq must be an integer from 1 to 2**63 - 1, got {seq!r}")
    if not is_time(time):
        raise EventError(
            f"time must be a real instant, RFC 3339 UTC with milliseconds and Z, got {time!r}"
        )
    value = {"seq": seq, "type": event.type, "time": time, "data": event.data()}
    try:
        body = orjson.dumps(value)
    except orjson.JSONEncodeError as error:
        raise EventError(f"event {event.type!r} cannot be encoded: {error}") from error
    # The stream 1.3 events refuse U+0000 when they are built; this also covers an event type a
    # host defines itself. Only a line holding the escape can hold the character (the escape may
    # also be an escaped backslash followed by `u0000`, hence the look at the value).
    if b"\\u0000" in body and contains_nul(value):
        raise EventError(f"event {event.type!r} contains U+0000, which no reader can store")
    line = body + b"\n"
    if len(line) > LINE_BYTES_MAX:
        raise LineTooLong(len(line), LINE_BYTES_MAX)
    return line

"""The one encoder of a journal line: `{"seq":…,"type":…,"time":…,"data":{…}}\\n`.

Compact JSON through orjson (no NaN, no Infinity: orjson refuses to encode them), keys in the order
seq, type, time, data, UTF-8, `\\n` only, at most `LINE_BYTES_MAX` bytes including the newline.
"""

from __future__ import annotations

import datetime as dt
import re
import time as _time

import orjson

from ._events import Event
from .errors import EventError, LineTooLong

LINE_BYTES_MAX = 1024 * 1024
"""The largest line, newline included. The emitter refuses to emit a larger one."""

SEQ_MAX = 2**63 - 1
"""Every reader refuses a seq that does not fit a signed 64-bit integer."""

TIME_PATTERN = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")
"""The shape of `time`: RFC 3339 UTC with milliseconds and `Z` (what `format_time` writes).

ASCII digits only: `\\d` would also match other scripts' digits, which no writer produces."""


class _Memo:
    """What the line's `time` costs once per millisecond or second instead of once per line."""

    __slots__ = ("second_prefix", "time_accepted")

    def __init__(self) -> None:
        self.time_accepted = ""
        """The last `time` `is_time` accepted: the lines of one millisecond share it."""
        self.second_prefix: tuple[int, str] = (-1, "")
        """(a Unix second, its `YYYY-MM-DDTHH:MM:SS.` in UTC): one tuple, replaced whole, so that
        a thread never reads a second with another second's text."""


_MEMO = _Memo()


def is_time(value: object) -> bool:
    """Whether `value` is a `time` every reader accepts: the shape of `TIME_PATTERN` naming a real
    instant of years 1-9999 (no 30 February, no hour 24, no minute or second 60)."""
    # An exact `str` equal to one already accepted is accepted (a subclass is checked in full).
    if type(value) is str and value == _MEMO.time_accepted:
        return True
    if not isinstance(value, str) or TIME_PATTERN.fullmatch(value) is None:
        return False
    try:
        dt.datetime.fromisoformat(value[:-1])
    except ValueError:
        return False
    if type(value) is str:
        _MEMO.time_accepted = value
    return True


def contains_nul(value: object) -> bool:
    """Whether U+0000 is in any string of a parsed JSON value, keys included, at any depth."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in key or contains_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(contains_nul(item) for item in value)
    return False


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
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= SEQ_MAX:
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

"""The one encoder of a journal line: `{"seq":…,"type":…,"time":…,"data":{…}}\\n`.

Compact JSON through orjson (no NaN, no Infinity: orjson refuses to encode them), keys in the order
seq, type, time, data, UTF-8, `\\n` only, at most `LINE_BYTES_MAX` bytes including the newline.
"""

from __future__ import annotations

import datetime as dt
import re

import orjson

from ._events import Event
from .errors import EventError, LineTooLong

LINE_BYTES_MAX = 1024 * 1024
"""The largest line, newline included. The emitter refuses to emit a larger one."""

TIME_PATTERN = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
"""The shape of `time`: RFC 3339 UTC with milliseconds and `Z` (what `format_time` writes)."""


def format_time(moment: dt.datetime) -> str:
    """RFC 3339 UTC with milliseconds and `Z`: `2026-11-30T02:08:57.213Z`."""
    if moment.tzinfo is None:
        raise EventError("time must be timezone-aware")
    utc = moment.astimezone(dt.UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def now_time() -> str:
    return format_time(dt.datetime.now(dt.UTC))


def encode_line(seq: int, event: Event, time: str) -> bytes:
    """Return the exact bytes of the line, newline included; raise `EventError` if it cannot be one."""
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise EventError(f"seq must be an integer >= 1, got {seq!r}")
    if not isinstance(time, str) or TIME_PATTERN.fullmatch(time) is None:
        raise EventError(f"time must be RFC 3339 UTC with milliseconds and Z, got {time!r}")
    try:
        body = orjson.dumps({"seq": seq, "type": event.type, "time": time, "data": event.data()})
    except orjson.JSONEncodeError as error:
        raise EventError(f"event {event.type!r} cannot be encoded: {error}") from error
    line = body + b"\n"
    if len(line) > LINE_BYTES_MAX:
        raise LineTooLong(len(line), LINE_BYTES_MAX)
    return line

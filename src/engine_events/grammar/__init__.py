"""The grammar of a journal line, once for both sides: its bounds, its canonical form, the
versions of a stream, the event types and what their `data` must hold, money, exit codes, the
time, the hello that starts a stream, and the refusal of a line that breaks a rule.

The engine writes by it and reads by it (`verify`, `watch`, `status`); the platform's decoder
judges by it every line its own fast lanes do not accept whole. It imports nothing of the rest of
`engine_events` but the root of its errors, and no I/O library: the platform may import it on
every path. docs/reference/stream-format.md tells the rules to a person.

- `rules`: the bounds, the versions, the time, and each event type's check;
- `judge`: a line judged rule by rule, its refusal that of the first rule it breaks;
- `hello`: a refused line that is a readable hello names the stream it starts;
- `refusals`: `LineError`, and `MalformedLine` with its `reason`.
"""

from .hello import HelloIdentity, hello_identity, named
from .judge import Line, judge, of_another_major
from .refusals import LineError, MalformedLine, MalformedReason, UnsupportedVersion
from .rules import (
    EXIT_CODES,
    IDENTIFIER_BYTES_MAX,
    INTEGER_MAX,
    KNOWN_TYPES,
    LINE_BYTES_MAX,
    MICRO_USD_PER_USD,
    NESTING_DEPTH_MAX,
    STREAM_MAJOR,
    STREAM_MINOR_KNOWN,
    STREAM_VERSION_PATTERN,
    SUPPORTED_MAJORS,
    TEXT_BYTES_MAX,
    TIME_PATTERN,
    TYPE_CHECKS,
    TimeMemo,
    contains_nul,
    integer_too_wide,
    is_newer_minor,
    is_time,
    nesting_depth,
    reads_major,
    stream_major,
    wide_digits,
)

__all__ = [
    "EXIT_CODES",
    "IDENTIFIER_BYTES_MAX",
    "INTEGER_MAX",
    "KNOWN_TYPES",
    "LINE_BYTES_MAX",
    "MICRO_USD_PER_USD",
    "NESTING_DEPTH_MAX",
    "STREAM_MAJOR",
    "STREAM_MINOR_KNOWN",
    "STREAM_VERSION_PATTERN",
    "SUPPORTED_MAJORS",
    "TEXT_BYTES_MAX",
    "TIME_PATTERN",
    "TYPE_CHECKS",
    "HelloIdentity",
    "Line",
    "LineError",
    "MalformedLine",
    "MalformedReason",
    "TimeMemo",
    "UnsupportedVersion",
    "contains_nul",
    "hello_identity",
    "integer_too_wide",
    "is_newer_minor",
    "is_time",
    "judge",
    "named",
    "nesting_depth",
    "of_another_major",
    "reads_major",
    "stream_major",
    "wide_digits",
]

"""The rules one line must keep: the bounds of a line and of its strings, money, exit codes, the
versions of a stream, the time, and what each event type's `data` must hold
(docs/reference/stream-format.md). The emitter writes by them, the judge (`judge`) and the
platform's fast lanes read by them.

Each check of a type refuses data that breaks a rule of it and returns whether the data is closed:
only its known fields, none of their strings holding U+0000. A closed line can hold U+0000 nowhere
and nests 4 deep at most, so a fast lane that knows it need not search its bytes for either. The
types a stream carries once (hello, bank_stop, ceiling, finished) prove nothing: their bytes are
searched. The check of a hello of another major judges its version and stream id only: the rest
is that major's business, and its refusal the reader's (`judge`).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from typing import Any

from .refusals import MalformedLine

LINE_BYTES_MAX = 1024 * 1024
"""The longest line a reader accepts, newline included (docs/reference/stream-format.md, "The 1 MiB limit")."""

NESTING_DEPTH_MAX = 64
"""The deepest nesting of arrays and objects a line may have (stream 1.3 needs 4)."""

STREAM_MAJOR = 1
"""The one stream major a reader speaks; any minor of it is read."""
STREAM_MINOR_KNOWN = 4
"""The newest minor of `STREAM_MAJOR` this reader knows (1.4). A stream of a newer minor may carry
envelope keys after `data` that this reader does not know: they are ignored (`decode_stream_line`)."""
SUPPORTED_MAJORS: frozenset[int] = frozenset({STREAM_MAJOR})
"""The stream majors the readers read. A stream of any other major is refused, nothing of it
applied; a pass re-reads it on its own once the platform is upgraded to read its major."""
STREAM_VERSION_PATTERN = re.compile(r"([0-9]+)\.([0-9]+)")
"""`MAJOR.MINOR` in ASCII digits: what every reader parses out of `hello.stream_version`."""

INTEGER_MAX = 2**63 - 1
"""Every integer of a line (seq, counts, money, a pid) must fit a signed 64-bit integer: SQLite
and a Postgres bigint hold it."""

MICRO_USD_PER_USD = 1_000_000
"""Money is a JSON integer of micro-USD: 1 USD is 1,000,000 of them."""

EXIT_CODES = range(256)
"""`finished.exit_code`: what a process can end with."""

IDENTIFIER_BYTES_MAX = 255
"""The longest identifier-like string, in UTF-8 bytes: `engine_run_id`, `book_id`,
`chunker_version`, `stream_version`, `unit`, a phase name, `ceiling.scope`, `finished.outcome`,
`finished.refusal`. The platform keeps them in indexed Postgres columns; the bound keeps every
value storable."""

TEXT_BYTES_MAX = 4096
"""The longest free-text string, in UTF-8 bytes: `bank_stop.signature`."""

_FITS_ANY_BOUND = IDENTIFIER_BYTES_MAX // 4
"""A string of at most this many characters fits every bound without being measured in bytes:
a character is at most 4 bytes of UTF-8."""
TIME_PATTERN = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")
"""The shape of `time`: RFC 3339 UTC with milliseconds and `Z`, in ASCII digits (`\\d` would
also match other scripts' digits, which no writer produces)."""
_CLOCK = re.compile(r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{3}Z")
"""What follows a real day in `time` (from its 12th character): a real time of that day."""
_VERSION = STREAM_VERSION_PATTERN
_JSON_TYPES = {bool: "a bool", int: "an integer", float: "a float", str: "a string"}

wide_digits = re.compile(rb"[0-9]{19}").search
"""Finds 19 digits in a row in a line: only then may an integer of it pass 64 bits (2**63 has
19 digits). Digits inside a string are found too; `integer_too_wide` tells the two apart."""


class _TooWide(Exception):
    """An integer token past signed 64 bits (raised out of the JSON parse, never further)."""


def _narrow(token: str) -> int:
    # 20 characters hold every 64-bit integer with its sign; a longer token is never converted.
    if len(token) > 20 or not -(2**63) <= int(token) <= INTEGER_MAX:
        raise _TooWide
    return 0


def integer_too_wide(body: bytes) -> bool:
    """Whether an integer of the JSON text `body`, anywhere in it, lies outside signed 64 bits.

    orjson reads an integer up to 2**64 - 1 as an int and any wider one as a float, so its
    value cannot tell; the text is parsed again, each integer token judged as written (a
    number with a fraction or an exponent is not an integer)."""
    if wide_digits(body) is None:
        return False
    try:
        json.loads(body, parse_int=_narrow)
    except _TooWide:
        return True
    except ValueError:  # not JSON to the json module: the judge refuses it on its own terms
        return False
    return False


class TimeMemo:
    """The last valid time, its day and its minute: the lines of one commit share their time,
    the commits of one day their day. Each is equal to no JSON value until a valid time is seen.
    Any state of it, empty, full or raced between threads, gives the same verdict: it only
    chooses a shorter path."""

    __slots__ = ("day", "last_time", "minute")

    def __init__(self) -> None:
        self.last_time: object = object()
        self.day: object = object()
        self.minute: object = object()

    def forget(self) -> None:
        """Empty the memo in place."""
        self.last_time = self.day = self.minute = object()


def is_time(time: object, memo: TimeMemo) -> bool:
    """Whether `time` is RFC 3339 UTC with milliseconds and Z, in ASCII digits, naming a real
    instant (no 30 February, no hour 24); remembered in `memo` when it is, and its day with it."""
    if type(time) is not str:
        return False
    if time[:11] == memo.day:  # a day found real: only the clock is left to judge
        if _CLOCK.fullmatch(time, 11) is None:
            return False
    else:
        if TIME_PATTERN.fullmatch(time) is None:
            return False
        try:
            dt.datetime.fromisoformat(time[:-1])
        except ValueError:
            return False
        memo.day = time[:11]
    memo.last_time = time
    memo.minute = time[:17]
    return True


def nesting_depth(body: bytes) -> int:
    """The deepest nesting of `[` and `{` outside strings (only called on suspicious lines)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def contains_nul(value: object) -> bool:
    """Whether U+0000 is in any string of a parsed JSON value, keys included, at any depth."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in key or contains_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(contains_nul(item) for item in value)
    return False


def is_newer_minor(version: str) -> bool:
    """Whether `version` is of this reader's major and of a minor newer than it knows."""
    match = _VERSION.fullmatch(version)
    return (
        match is not None
        and int(match.group(1)) == STREAM_MAJOR
        and int(match.group(2)) > STREAM_MINOR_KNOWN
    )


def stream_major(version: str) -> int | None:
    """The major of a `MAJOR.MINOR` version string, or None when it is not one."""
    match = _VERSION.fullmatch(version)
    return None if match is None else int(match.group(1))


def reads_major(version: str) -> bool:
    """True when the readers read streams of `version`'s major (`SUPPORTED_MAJORS`)."""
    major = stream_major(version)
    return major is not None and major in SUPPORTED_MAJORS


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return _JSON_TYPES.get(type(value), "an array or object")


def _money(data: dict[str, Any], key: str, seq: int, *, field: str | None = None) -> int:
    value = data.get(key)
    name = field or key
    if type(value) is not int:
        found = "nothing" if key not in data else _json_type(value)
        raise MalformedLine.money_not_integer(name, found, seq=seq)
    if value < 0:
        raise MalformedLine.money_not_integer(name, "a negative integer", seq=seq)
    if value > INTEGER_MAX:
        raise MalformedLine.money_not_integer(name, "an integer beyond 64 bits", seq=seq)
    return value


def _bounded(value: str, field: str, limit_bytes: int, seq: int) -> None:
    # A character is at most 4 bytes of UTF-8: most strings need no encoding to be measured.
    if len(value) * 4 > limit_bytes and len(value.encode()) > limit_bytes:
        raise MalformedLine.string_too_long(field, limit_bytes, seq=seq)


def _string(
    data: dict[str, Any],
    key: str,
    seq: int,
    *,
    nullable: bool = False,
    limit_bytes: int = IDENTIFIER_BYTES_MAX,
) -> None:
    value = data.get(key)
    if value is None and nullable:
        return
    if type(value) is not str:
        raise MalformedLine.wrong_type(key, "a string" + (" or null" if nullable else ""), seq=seq)
    if len(value) * 4 > limit_bytes and len(value.encode()) > limit_bytes:
        raise MalformedLine.string_too_long(key, limit_bytes, seq=seq)


def _count(data: dict[str, Any], key: str, seq: int, *, field: str | None = None) -> None:
    value = data.get(key)
    if type(value) is not int or value < 0 or value > INTEGER_MAX:
        raise MalformedLine.wrong_type(field or key, "a non-negative integer", seq=seq)


def _object(data: dict[str, Any], key: str, seq: int) -> dict[str, Any]:
    value = data.get(key)
    if type(value) is not dict:
        raise MalformedLine.wrong_type(key, "a JSON object", seq=seq)
    return value


def _check_hello(data: dict[str, Any], seq: int) -> bool:
    # The version and the stream id are kept even from another major's hello (its refusal names
    # the stream), so their bounds apply before the major is judged.
    _string(data, "stream_version", seq)
    major = stream_major(data["stream_version"])
    if major is None:
        raise MalformedLine.wrong_type("stream_version", "MAJOR.MINOR", seq=seq)
    run_id = data.get("engine_run_id")
    if type(run_id) is not str or not run_id:
        raise MalformedLine.wrong_type("engine_run_id", "a non-empty string", seq=seq)
    _bounded(run_id, "engine_run_id", IDENTIFIER_BYTES_MAX, seq)
    if major not in SUPPORTED_MAJORS:
        return False  # nothing else of another major's hello is judged: the reader refuses it
    _string(data, "book_id", seq)
    _string(data, "chunker_version", seq)
    if "pid" in data:  # since 1.4, optional; checked whatever minor the hello names
        pid = data["pid"]
        if type(pid) is not int or not 1 <= pid <= INTEGER_MAX:
            raise MalformedLine.wrong_type("pid", "an integer from 1 to 2**63 - 1", seq=seq)
    if seq != 1:  # it still names its stream: the refusal is that stream's (`hello.named`)
        raise MalformedLine(
            "hello_not_first", f"a hello must carry seq 1, found seq {seq}", seq=seq
        )
    return False


def _check_progress(data: dict[str, Any], seq: int) -> bool:
    phases = data.get("phases")
    if type(phases) is not dict:
        raise MalformedLine.wrong_type("phases", "a JSON object", seq=seq)
    closed = len(data) == 1
    for name, counts in phases.items():  # every phase of every snapshot: the usual case inline
        try:
            done, total = counts["done"], counts["total"]
        except (KeyError, TypeError):  # a count missing, or not an object: judged below
            done = total = None
        if not (
            type(done) is int
            and type(total) is int
            and 0 <= done <= total <= INTEGER_MAX
            and len(name) <= _FITS_ANY_BOUND
            and len(counts) == 2
            and "\x00" not in name
        ):
            _check_phase(name, counts, seq)
            closed = False
    return closed


def _check_phase(name: str, counts: Any, seq: int) -> None:
    """Refuse a phase that breaks a rule; a long name within its bound, U+0000 in the name (the
    line's bytes are searched for it) or other fields beside the counts pass."""
    _bounded(name, "a phase name", IDENTIFIER_BYTES_MAX, seq)
    if type(counts) is not dict:
        raise MalformedLine.wrong_type(f"phases.{name}", "a JSON object", seq=seq)
    done, total = counts.get("done"), counts.get("total")
    if type(done) is int and type(total) is int and 0 <= done <= total <= INTEGER_MAX:
        return
    _count(counts, "done", seq, field=f"phases.{name}.done")
    _count(counts, "total", seq, field=f"phases.{name}.total")
    raise MalformedLine.wrong_type(f"phases.{name}.done", f"at most phases.{name}.total", seq=seq)


def _check_unit_done(data: dict[str, Any], seq: int) -> bool:
    try:
        unit, index = data["unit"], data["index"]
    except KeyError:  # judged below
        unit = index = None
    if (
        type(unit) is str
        and unit
        and len(unit) <= _FITS_ANY_BOUND
        and type(index) is int
        and 0 <= index <= INTEGER_MAX
    ):
        return len(data) == 2 and "\x00" not in unit
    _string(data, "unit", seq)  # refuses a wrong type, measures a long string's bytes
    if not data["unit"]:
        raise MalformedLine.wrong_type("unit", "a non-empty string", seq=seq)
    _count(data, "index", seq)
    return False


def _check_bank_stop(data: dict[str, Any], seq: int) -> bool:
    _string(data, "signature", seq, limit_bytes=TEXT_BYTES_MAX)
    return False


def _check_ceiling(data: dict[str, Any], seq: int) -> bool:
    if type(data.get("halted")) is not bool:
        raise MalformedLine.wrong_type("halted", "a bool", seq=seq)
    _string(data, "scope", seq)
    if "shortfall_micro_usd" in data:  # since 1.3; a 1.2 writer leaves it out
        _money(data, "shortfall_micro_usd", seq)
    return False


def _check_spend(data: dict[str, Any], seq: int) -> bool:
    try:
        money = data["committed_micro_usd"]
    except KeyError:
        money = None
    if type(money) is not int or not 0 <= money <= INTEGER_MAX:
        _money(data, "committed_micro_usd", seq)  # refuses it, naming what it found
    return len(data) == 1


def _check_finished(data: dict[str, Any], seq: int) -> bool:
    _string(data, "outcome", seq)
    code = data.get("exit_code")
    if type(code) is not int or code not in EXIT_CODES:
        raise MalformedLine.wrong_type("exit_code", "an integer 0-255", seq=seq)
    if data.get("stop") not in (None, "soft", "hard"):
        raise MalformedLine.wrong_type("stop", 'null, "soft" or "hard"', seq=seq)
    _string(data, "refusal", seq, nullable=True)
    volume = _object(data, "volume", seq)
    _count(volume, "units_done", seq, field="volume.units_done")
    _count(volume, "units_total", seq, field="volume.units_total")
    if "money" in data:  # since 1.3
        money = _object(data, "money", seq)
        _money(money, "committed_micro_usd", seq, field="money.committed_micro_usd")
    return False


TYPE_CHECKS: dict[str, Callable[[dict[str, Any], int], bool]] = {
    "hello": _check_hello,
    "progress": _check_progress,
    "unit_done": _check_unit_done,
    "bank_stop": _check_bank_stop,
    "ceiling": _check_ceiling,
    "spend": _check_spend,
    "finished": _check_finished,
}
KNOWN_TYPES = frozenset(TYPE_CHECKS)
"""The event types of stream 1.3. Any other type of the same major is read and ignored."""

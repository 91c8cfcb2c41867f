"""The decoder: one journal line in, one `Line` or one typed refusal out.

It reads what any 1.x writer may produce (a newer minor's unknown fields and event types are kept
as they are and ignored by the effects) and refuses everything else with a `LineRefused` subclass
that carries the seq when the line has a readable one. It holds no state: which stream a line
belongs to, and whether it comes in order, is the pass's business (`_pass`).

Money is read only as a non-negative JSON integer of micro-USD that fits a Postgres bigint; a float
(even `12.0`), a string (`"null"`, `"12"`), null, a bool or a negative number is refused, never
read as zero.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import orjson

from .errors import (
    HelloNotFirst,
    InvalidJson,
    InvalidUtf8,
    LineTooLong,
    MoneyNotInteger,
    NestingTooDeep,
    NotAnObject,
    UnsupportedVersion,
    WrongType,
)

LINE_BYTES_MAX = 1024 * 1024
"""The longest line a reader accepts, newline included (SPEC § 3)."""

NESTING_DEPTH_MAX = 64
"""The deepest nesting of arrays and objects a line may have (stream 1.3 needs 4)."""

STREAM_MAJOR = 1
"""The one stream major this reader speaks; any minor of it is read."""

BIGINT_MAX = 2**63 - 1
"""Money and counts must fit a Postgres bigint."""

_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")
_VERSION = re.compile(r"([0-9]+)\.([0-9]+)")
_BOM = b"\xef\xbb\xbf"
_JSON_TYPES = {bool: "a bool", int: "an integer", float: "a float", str: "a string"}


class Line(NamedTuple):
    """One decoded line. `data` is the line's `data` object as parsed (unknown fields kept)."""

    seq: int
    type: str
    time: str
    data: dict[str, Any]


class _TimeMemo:
    """The last time string found valid: lines of one commit share their time."""

    last: object = object()  # equal to no JSON value until a valid time is seen


def decode_line(raw: bytes) -> Line:
    """Decode one complete line (its bytes end with `\\n`) or raise a `LineRefused` subclass.

    The error's `offset` is left for the caller, who knows where the line starts.
    """
    if len(raw) > LINE_BYTES_MAX:
        raise LineTooLong(len(raw), LINE_BYTES_MAX)
    if raw[-1:] != b"\n":
        raise InvalidJson("the line does not end with a newline")
    if raw.startswith(_BOM):
        raise InvalidJson("the line starts with a byte-order mark")
    if b"\r" in raw:
        raise InvalidJson("the line contains a carriage return")
    if raw.count(b"[") + raw.count(b"{") > NESTING_DEPTH_MAX:
        depth = _nesting_depth(raw)
        if depth > NESTING_DEPTH_MAX:
            raise NestingTooDeep(depth, NESTING_DEPTH_MAX)
    try:
        value = orjson.loads(raw)  # the newline is JSON whitespace: no copy without it
    except orjson.JSONDecodeError as error:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as utf8_error:
            raise InvalidUtf8(f"not UTF-8 at byte {utf8_error.start}") from error
        raise InvalidJson(f"not JSON: {error}") from error
    if type(value) is not dict:
        raise NotAnObject("the line is not a JSON object")
    seq = value.get("seq")
    if type(seq) is not int or seq < 1 or seq > BIGINT_MAX:
        raise WrongType("seq", "an integer >= 1")
    kind = value.get("type")
    if type(kind) is not str or not kind:
        raise WrongType("type", "a non-empty string", seq=seq)
    time: Any = value.get("time")
    if time != _TimeMemo.last:
        if type(time) is not str or _TIME.fullmatch(time) is None:
            raise WrongType("time", "RFC 3339 UTC with milliseconds and Z", seq=seq)
        _TimeMemo.last = time
    data = value.get("data")
    if type(data) is not dict:
        raise WrongType("data", "a JSON object", seq=seq)
    check = _CHECKS.get(kind)
    if check is not None:
        check(data, seq)
    return Line(seq, kind, time, data)


def _nesting_depth(body: bytes) -> int:
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


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return _JSON_TYPES.get(type(value), "an array or object")


def _money(data: dict[str, Any], key: str, seq: int, *, field: str | None = None) -> int:
    value = data.get(key)
    name = field or key
    if type(value) is not int:
        found = "nothing" if key not in data else _json_type(value)
        raise MoneyNotInteger(name, found, seq=seq)
    if value < 0:
        raise MoneyNotInteger(name, "a negative integer", seq=seq)
    if value > BIGINT_MAX:
        raise MoneyNotInteger(name, "an integer beyond 64 bits", seq=seq)
    return value


def _string(data: dict[str, Any], key: str, seq: int, *, nullable: bool = False) -> None:
    value = data.get(key)
    if value is None and nullable:
        return
    if type(value) is not str:
        raise WrongType(key, "a string" + (" or null" if nullable else ""), seq=seq)


def _count(data: dict[str, Any], key: str, seq: int, *, field: str | None = None) -> None:
    value = data.get(key)
    if type(value) is not int or value < 0 or value > BIGINT_MAX:
        raise WrongType(field or key, "a non-negative integer", seq=seq)


def _object(data: dict[str, Any], key: str, seq: int) -> dict[str, Any]:
    value = data.get(key)
    if type(value) is not dict:
        raise WrongType(key, "a JSON object", seq=seq)
    return value


def stream_major(version: str) -> int | None:
    """The major of a `MAJOR.MINOR` version string, or None when it is not one."""
    match = _VERSION.fullmatch(version)
    return None if match is None else int(match.group(1))


def _check_hello(data: dict[str, Any], seq: int) -> None:
    _string(data, "stream_version", seq)
    major = stream_major(data["stream_version"])
    if major is None:
        raise WrongType("stream_version", "MAJOR.MINOR", seq=seq)
    run_id = data.get("engine_run_id")
    if type(run_id) is not str or not run_id:
        raise WrongType("engine_run_id", "a non-empty string", seq=seq)
    if major != STREAM_MAJOR:
        book = data.get("book_id")
        raise UnsupportedVersion(
            data["stream_version"],
            engine_run_id=run_id,
            book_id=book if type(book) is str else "",
            seq=seq,
        )
    _string(data, "book_id", seq)
    _string(data, "chunker_version", seq)
    if seq != 1:
        raise HelloNotFirst(f"a hello must carry seq 1, found seq {seq}", seq=seq)


def _check_progress(data: dict[str, Any], seq: int) -> None:
    for name, counts in _object(data, "phases", seq).items():
        if type(counts) is not dict:
            raise WrongType(f"phases.{name}", "a JSON object", seq=seq)
        done, total = counts.get("done"), counts.get("total")
        if type(done) is int and type(total) is int and 0 <= done <= BIGINT_MAX >= total >= 0:
            continue
        _count(counts, "done", seq, field=f"phases.{name}.done")
        _count(counts, "total", seq, field=f"phases.{name}.total")


def _check_unit_done(data: dict[str, Any], seq: int) -> None:
    _string(data, "unit", seq)
    if not data["unit"]:
        raise WrongType("unit", "a non-empty string", seq=seq)
    _count(data, "index", seq)


def _check_bank_stop(data: dict[str, Any], seq: int) -> None:
    _string(data, "signature", seq)


def _check_ceiling(data: dict[str, Any], seq: int) -> None:
    if type(data.get("halted")) is not bool:
        raise WrongType("halted", "a bool", seq=seq)
    _string(data, "scope", seq)
    if "shortfall_micro_usd" in data:  # since 1.3; a 1.2 writer leaves it out
        _money(data, "shortfall_micro_usd", seq)


def _check_spend(data: dict[str, Any], seq: int) -> None:
    _money(data, "committed_micro_usd", seq)


def _check_finished(data: dict[str, Any], seq: int) -> None:
    _string(data, "outcome", seq)
    code = data.get("exit_code")
    if type(code) is not int or not 0 <= code <= 255:
        raise WrongType("exit_code", "an integer 0-255", seq=seq)
    if data.get("stop") not in (None, "soft", "hard"):
        raise WrongType("stop", 'null, "soft" or "hard"', seq=seq)
    _string(data, "refusal", seq, nullable=True)
    volume = _object(data, "volume", seq)
    _count(volume, "units_done", seq, field="volume.units_done")
    _count(volume, "units_total", seq, field="volume.units_total")
    if "money" in data:  # since 1.3
        money = _object(data, "money", seq)
        _money(money, "committed_micro_usd", seq, field="money.committed_micro_usd")


_CHECKS = {
    "hello": _check_hello,
    "progress": _check_progress,
    "unit_done": _check_unit_done,
    "bank_stop": _check_bank_stop,
    "ceiling": _check_ceiling,
    "spend": _check_spend,
    "finished": _check_finished,
}
KNOWN_TYPES = frozenset(_CHECKS)
"""The event types of stream 1.3. Any other type of the same major is read and ignored."""

"""Reading a journal line back: the engine side's own reader, used by `verify`, `watch` and `status`.

It accepts what the stream's minor versions may add (unknown fields, unknown event types, and in a
stream of a minor newer than it knows, envelope keys after `data`) and refuses what no 1.x writer
produces: a line that is not one compact JSON object with the keys seq, type, time, data in that
order (and no other, in a stream of a minor it knows), a key twice in any object, U+0000 in any string or key, an
impossible time, a string of a known field over its byte bound, a phase with done > total. Its
verdicts are pinned by the shared test vectors in `tests/vectors/`, which the platform's separate
decoder must reach too; a differential test looks for lines where the two readers disagree.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import orjson

from .._events import IDENTIFIER_BYTES_MAX, STREAM_MAJOR, STREAM_VERSION_PATTERN, TEXT_BYTES_MAX
from .._line import LINE_BYTES_MAX, contains_nul, is_time
from .._money import require_micro_usd
from ..errors import LineError, MalformedLine, MoneyError, UnsupportedVersion
from .hello import whose_refusal

_VERSION = STREAM_VERSION_PATTERN
_FRAME_KEYS = ("seq", "type", "time", "data")
_STRING_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
"""A JSON string token, escapes included (`\\"` does not end it, `\\\\` is one escape)."""
_WHITESPACE = re.compile(rb"[ \t\n\r]")
_WIDE_DIGITS = re.compile(rb"[0-9]{19}")
"""19 digits in a row: only then may an integer pass 64 bits (2**63 has 19 digits)."""

INTEGER_MAX = 2**63 - 1
"""Every integer of a line (seq, counts, money) must fit a signed 64-bit integer."""

NESTING_DEPTH_MAX = 64
"""The deepest nesting of arrays and objects a line may have (stream 1.3 needs 4)."""


class _TimeMemo:
    """The last time string found valid: lines of one commit share their time."""

    last: object = object()  # equal to no JSON value until a valid time is seen


STREAM_MINOR_KNOWN = 4
"""The newest minor of `STREAM_MAJOR` this reader knows (1.4). A stream of a newer minor may carry
envelope keys after `data`: they are ignored (`decode_stream_line`), and `verify` notes them."""


@dataclass(frozen=True)
class Line:
    """One decoded line. `raw` is its exact bytes, newline included."""

    seq: int
    type: str
    time: str
    data: dict[str, Any]
    raw: bytes
    ignored_keys: tuple[str, ...] = ()
    """Envelope keys after `data` of a newer minor's line, ignored (`decode_stream_line`)."""


class _WrongKeys(MalformedLine):
    """The envelope's keys are not exactly seq, type, time, data in that order."""


def decode_stream_line(raw: bytes, stream_version: str | None) -> Line:
    """`decode_line` for a line of a stream of `stream_version` (None: not known; a hello names
    its own). In a stream of a minor newer than this reader knows, keys after `data` in the
    envelope are ignored (kept in `ignored_keys`), as unknown `data` fields are; every other rule
    still holds for them. A stream of a minor this reader knows keeps the envelope exactly."""
    try:
        return decode_line(raw)
    except _WrongKeys as strict:
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


def is_newer_minor(version: str) -> bool:
    """Whether `version` is of this reader's major and of a minor newer than it knows."""
    match = _VERSION.fullmatch(version)
    return (
        match is not None
        and int(match.group(1)) == STREAM_MAJOR
        and int(match.group(2)) > STREAM_MINOR_KNOWN
    )


def decode_line(raw: bytes, *, newer_minor: bool = False) -> Line:
    """Decode one complete line (ending in `\\n`); raise `MalformedLine`.

    A hello of another major is returned with only its version and stream id checked: the caller
    refuses it with `require_supported`, keeping the stream id for its report. With
    `newer_minor`, keys after `data` in the envelope are allowed (see `decode_stream_line`).

    The refusal of a readable hello names the stream it starts (`hello.whose_refusal`), and is
    `UnsupportedVersion` when the hello names another major, whatever else is wrong with it.
    """
    try:
        return _judge(raw, newer_minor=newer_minor)
    except LineError as refused:
        named = whose_refusal(raw, refused)
        if named is refused:
            raise
        raise named from None


def _judge(raw: bytes, *, newer_minor: bool) -> Line:
    if len(raw) > LINE_BYTES_MAX:
        raise MalformedLine(f"line of {len(raw)} bytes exceeds {LINE_BYTES_MAX}")
    if not raw.endswith(b"\n"):
        raise MalformedLine("line does not end with a newline")
    body = raw[:-1]
    if body.startswith(b"\xef\xbb\xbf"):
        raise MalformedLine("line starts with a byte-order mark")
    if body.find(b"\r") != -1:  # find, not `in`: `in` first tries the bytes as an integer
        raise MalformedLine("line contains a carriage return")
    if body.count(b"[") + body.count(b"{") > NESTING_DEPTH_MAX:
        depth = _nesting_depth(body)
        if depth > NESTING_DEPTH_MAX:
            raise MalformedLine(f"nesting depth {depth} exceeds {NESTING_DEPTH_MAX}")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise MalformedLine(f"not JSON: {error}") from error
    if not isinstance(value, dict):
        raise MalformedLine("line is not a JSON object")
    # Every line the emitter writes is what orjson writes back from its value: that check alone
    # proves it compact, free of duplicate keys. Anything else (another writer's escapes or number
    # forms) gets the precise look.
    if orjson.dumps(value) != body:
        _check_compact(body)
    keys = tuple(value)
    if keys != _FRAME_KEYS and not (newer_minor and keys[:4] == _FRAME_KEYS):
        raise _WrongKeys(
            f"the line's keys must be exactly seq, type, time, data, in that order: {_keys(value)}"
        )
    # U+0000 can only arrive as the escape; an escaped backslash followed by `u0000` is not it.
    if body.find(b"\\u0000") != -1 and contains_nul(value):
        raise MalformedLine("the line contains U+0000, which no reader can store")
    seq = value["seq"]
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= INTEGER_MAX:
        raise MalformedLine(f"seq must be an integer >= 1, got {seq!r}")
    kind = value["type"]
    if not isinstance(kind, str) or not kind:
        raise MalformedLine("type must be a non-empty string")
    time = value["time"]
    if time != _TimeMemo.last:
        if not is_time(time):
            raise MalformedLine(
                f"time must be a real instant, RFC 3339 UTC with milliseconds, got {time!r}"
            )
        _TimeMemo.last = time
    data = value["data"]
    if not isinstance(data, dict):
        raise MalformedLine("data must be a JSON object")
    check = _DATA_CHECKS.get(kind)
    if check is not None:
        try:
            check(data)
        except MoneyError as error:
            raise MalformedLine(f"{kind}: {error}") from error
    if kind == "hello" and seq != 1 and _major(data["stream_version"]) == STREAM_MAJOR:
        raise MalformedLine(f"hello must carry seq 1, got {seq}")
    if _WIDE_DIGITS.search(body) is not None and _integer_too_wide(body):
        raise MalformedLine("an integer of the line does not fit a signed 64-bit integer")
    return Line(seq=seq, type=kind, time=time, data=data, raw=raw, ignored_keys=keys[4:])


def require_supported(hello: Line) -> None:
    """Refuse a stream whose major version is not ours (minor versions are always read)."""
    major = _major(hello.data["stream_version"])
    if major != STREAM_MAJOR:
        raise UnsupportedVersion(
            f"stream major version {major} is not supported (reads {STREAM_MAJOR}.x)"
        )


def _major(version: str) -> int:
    match = _VERSION.fullmatch(version)
    if match is None:
        raise MalformedLine(f"stream_version must look like MAJOR.MINOR, got {version!r}")
    return int(match.group(1))


class _TooWide(Exception):
    """An integer token past signed 64 bits (raised out of the JSON parse, never further)."""


def _narrow(token: str) -> int:
    # 20 characters hold every 64-bit integer with its sign; a longer token is never converted.
    if len(token) > 20 or not -(2**63) <= int(token) <= INTEGER_MAX:
        raise _TooWide
    return 0


def _integer_too_wide(body: bytes) -> bool:
    """Whether an integer token of `body`, anywhere, lies outside signed 64 bits. orjson reads
    one up to 2**64 - 1 as an int and a wider one as a float: its value cannot tell, the text
    can (a number with a fraction or an exponent is not an integer)."""
    try:
        json.loads(body, parse_int=_narrow)
    except _TooWide:
        return True
    except ValueError:  # not JSON to the json module: refused on other grounds
        return False
    return False


def _keys(value: dict[str, Any]) -> str:
    return ", ".join(repr(key[:40]) for key in list(value)[:8])


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> None:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise MalformedLine(f"key {key[:40]!r} appears twice in one object")
        seen.add(key)


def _check_compact(body: bytes) -> None:
    """Refuse whitespace outside strings and a key repeated in any object (the slow path)."""
    if _WHITESPACE.search(_STRING_TOKEN.sub(b"", body)) is not None:
        raise MalformedLine("the line is not compact: whitespace outside strings")
    try:
        json.loads(body, object_pairs_hook=_refuse_duplicate_keys)
    except ValueError as error:  # orjson read it; only a limit of the json module can fail here
        if isinstance(error, MalformedLine):
            raise
        raise MalformedLine(f"not JSON: {error}") from error


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


def _bounded(value: str, field: str, limit_bytes: int) -> None:
    # A character is at most 4 bytes of UTF-8: most strings need no encoding to be measured.
    if len(value) * 4 > limit_bytes and len(value.encode()) > limit_bytes:
        raise MalformedLine(f"{field} is longer than {limit_bytes} bytes of UTF-8")


def _string(
    data: dict[str, Any],
    key: str,
    *,
    nullable: bool = False,
    limit_bytes: int = IDENTIFIER_BYTES_MAX,
) -> None:
    value = data.get(key)
    if value is None and nullable:
        return
    if not isinstance(value, str):
        raise MalformedLine(f"{key} must be a string, got {value!r}")
    _bounded(value, key, limit_bytes)


def _count(data: dict[str, Any], key: str) -> None:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INTEGER_MAX:
        raise MalformedLine(f"{key} must be a non-negative 64-bit integer, got {value!r}")


def _object(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    if not isinstance(value, dict):
        raise MalformedLine(f"{key} must be a JSON object, got {value!r}")
    return value


def _check_hello(data: dict[str, Any]) -> None:
    # The version and the stream id are read even from another major's hello (its refusal names
    # the stream), so their bounds apply before the major is judged.
    _string(data, "stream_version")
    major = _major(data["stream_version"])
    run_id = data.get("engine_run_id")
    if not isinstance(run_id, str) or not run_id:
        raise MalformedLine(f"engine_run_id must be a non-empty string, got {run_id!r}")
    _bounded(run_id, "engine_run_id", IDENTIFIER_BYTES_MAX)
    if major != STREAM_MAJOR:
        return  # refused by require_supported; the rest is another major's business
    _string(data, "book_id")
    _string(data, "chunker_version")
    if "pid" in data:  # since 1.4, optional; checked whatever minor the hello names
        pid = data["pid"]
        if isinstance(pid, bool) or not isinstance(pid, int) or not 1 <= pid <= INTEGER_MAX:
            raise MalformedLine(f"pid must be an integer from 1 to 2**63 - 1, got {pid!r}")


def _check_progress(data: dict[str, Any]) -> None:
    for name, count in _object(data, "phases").items():
        _bounded(name, "a phase name", IDENTIFIER_BYTES_MAX)
        if not isinstance(count, dict):
            raise MalformedLine(f"phase {name!r} must be an object")
        _count(count, "done")
        _count(count, "total")
        if count["done"] > count["total"]:
            raise MalformedLine(f"phase {name!r}: done must not exceed total")


def _check_unit_done(data: dict[str, Any]) -> None:
    _string(data, "unit")
    if not data["unit"]:
        raise MalformedLine("unit must not be empty")
    _count(data, "index")


def _check_bank_stop(data: dict[str, Any]) -> None:
    _string(data, "signature", limit_bytes=TEXT_BYTES_MAX)


def _check_ceiling(data: dict[str, Any]) -> None:
    if not isinstance(data.get("halted"), bool):
        raise MalformedLine("halted must be a bool")
    _string(data, "scope")
    if "shortfall_micro_usd" in data:  # since 1.3; a 1.2 writer leaves it out
        require_micro_usd(data["shortfall_micro_usd"], "shortfall_micro_usd")


def _check_spend(data: dict[str, Any]) -> None:
    require_micro_usd(data.get("committed_micro_usd"), "committed_micro_usd")


def _check_finished(data: dict[str, Any]) -> None:
    _string(data, "outcome")
    code = data.get("exit_code")
    if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
        raise MalformedLine(f"exit_code must be an integer 0-255, got {code!r}")
    if data.get("stop") not in (None, "soft", "hard"):
        raise MalformedLine(f"stop must be null, 'soft' or 'hard', got {data.get('stop')!r}")
    _string(data, "refusal", nullable=True)
    volume = _object(data, "volume")
    _count(volume, "units_done")
    _count(volume, "units_total")
    if "money" in data:  # since 1.3
        require_micro_usd(_object(data, "money").get("committed_micro_usd"), "committed_micro_usd")


_DATA_CHECKS = {
    "hello": _check_hello,
    "progress": _check_progress,
    "unit_done": _check_unit_done,
    "bank_stop": _check_bank_stop,
    "ceiling": _check_ceiling,
    "spend": _check_spend,
    "finished": _check_finished,
}

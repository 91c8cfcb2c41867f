"""The precise judge: a line judged rule by rule, in the order of
docs/reference/stream-format.md, so that a refusal is always that of the first rule the line
breaks. The decoder's fast lanes (`decode`) hand it every line they do not accept whole."""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from ..errors import (
    DuplicateKey,
    IntegerTooWide,
    InvalidJson,
    InvalidUtf8,
    LineRefused,
    LineTooLong,
    MalformedLine,
    NestingTooDeep,
    NotAnObject,
    NotCompact,
    NulCharacter,
    WrongKeys,
    WrongType,
)
from .hello import whose_refusal
from .line import Line
from .line_rules import (
    BIGINT_MAX,
    LINE_BYTES_MAX,
    NESTING_DEPTH_MAX,
    TYPE_CHECKS,
    integer_too_wide,
    is_time,
    nesting_depth,
)
from .memo import DecoderMemo

_BOM = b"\xef\xbb\xbf"
_FRAME_KEYS = ("seq", "type", "time", "data")
_STRING_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
"""A JSON string token, escapes included (`\\"` does not end it, `\\\\` is one escape)."""
_WHITESPACE = re.compile(rb"[ \t\n\r]")


def decode_precisely(raw: bytes, memo: DecoderMemo, *, newer_minor: bool = False) -> Line:
    """Judge a line rule by rule, in this order, and raise the refusal of the first it breaks.
    With `newer_minor`, keys after `data` in the envelope are allowed (and ignored).

    The refusal of a readable hello is that of the stream it starts (`hello.whose_refusal`):
    `unsupported_version` when it names another major, whatever else is wrong with it."""
    try:
        return _judge(raw, memo, newer_minor=newer_minor)
    except LineRefused as refused:
        named = whose_refusal(raw, refused)
        if named is refused:
            raise
        raise named from None


def _judge(raw: bytes, memo: DecoderMemo, *, newer_minor: bool) -> Line:
    if len(raw) > LINE_BYTES_MAX:
        raise LineTooLong(len(raw), LINE_BYTES_MAX)
    if raw[-1:] != b"\n":
        raise InvalidJson("the line does not end with a newline")
    if raw.startswith(_BOM):
        raise InvalidJson("the line starts with a byte-order mark")
    if raw.find(b"\r") != -1:  # find, not `in`: `in` first tries the bytes as an integer
        raise InvalidJson("the line contains a carriage return")
    if raw.count(b"[") + raw.count(b"{") > NESTING_DEPTH_MAX:
        depth = nesting_depth(raw)
        if depth > NESTING_DEPTH_MAX:
            raise NestingTooDeep(depth, NESTING_DEPTH_MAX)
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as utf8_error:
            raise InvalidUtf8(f"not UTF-8 at byte {utf8_error.start}") from error
        raise InvalidJson(f"not JSON: {error}") from error
    if type(value) is not dict:
        raise NotAnObject("the line is not a JSON object")
    # What orjson writes back from the value (the newline aside) is compact, with no key twice;
    # another writer's escapes or number forms get the precise look.
    body = raw[:-1]
    if orjson.dumps(value) != body:
        _check_compact(body, value)
    keys = tuple(value)
    if keys != _FRAME_KEYS and not (newer_minor and keys[:4] == _FRAME_KEYS):
        raise WrongKeys(
            "the line's keys must be exactly seq, type, time, data, in that order",
            seq=_seq_of(value),
        )
    # U+0000 can only arrive as the escape; an escaped backslash followed by `u0000` is not it.
    if raw.find(b"\\u0000") != -1 and _contains_nul(value):
        raise NulCharacter(
            "the line contains U+0000, which Postgres cannot store", seq=_seq_of(value)
        )
    seq = value["seq"]
    if type(seq) is not int or seq < 1 or seq > BIGINT_MAX:
        raise WrongType("seq", "an integer >= 1")
    kind = value["type"]
    if type(kind) is not str or not kind:
        raise WrongType("type", "a non-empty string", seq=seq)
    time: Any = value["time"]
    if time != memo.last_time and not is_time(time, memo):
        raise WrongType("time", "a real instant, RFC 3339 UTC with milliseconds and Z", seq=seq)
    data = value["data"]
    if type(data) is not dict:
        raise WrongType("data", "a JSON object", seq=seq)
    check = TYPE_CHECKS.get(kind)
    if check is not None:
        check(data, seq)  # a known field's integer past 64 bits is refused by its name here
    if integer_too_wide(body):
        raise IntegerTooWide(seq=seq)
    return Line(seq, kind, time, data)


def _seq_of(value: dict[str, Any]) -> int | None:
    """The line's seq when it has a valid one, for a refusal found before the seq is judged."""
    seq = value.get("seq")
    return seq if type(seq) is int and 1 <= seq <= BIGINT_MAX else None


def _check_compact(body: bytes, value: dict[str, Any]) -> None:
    """Refuse whitespace outside strings and a key repeated in any object (the slow path)."""
    if _WHITESPACE.search(_STRING_TOKEN.sub(b"", body)) is not None:
        raise NotCompact("the line is not compact: whitespace outside strings", seq=_seq_of(value))

    def refuse_duplicates(pairs: list[tuple[str, Any]]) -> None:
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key, seq=_seq_of(value))
            seen.add(key)

    try:
        json.loads(body, object_pairs_hook=refuse_duplicates)
    except MalformedLine:
        raise
    except ValueError as error:  # orjson read it; only a limit of the json module can fail here
        raise InvalidJson(f"not JSON: {error}") from error


def _contains_nul(value: object) -> bool:
    """Whether U+0000 is in any string of a parsed value, keys included, at any depth."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any("\x00" in key or _contains_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_contains_nul(item) for item in value)
    return False

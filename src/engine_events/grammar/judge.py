"""The judge: a line judged rule by rule, in the order of docs/reference/stream-format.md, so that
a refusal is always that of the first rule the line breaks.

The engine's readers (`verify`, `watch`, `status`) read every line through it; the platform's
decoder hands it every line its fast lanes do not accept whole, and a differential test holds
those lanes to it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import orjson

from .hello import named
from .refusals import LineError, MalformedLine
from .rules import (
    INTEGER_MAX,
    LINE_BYTES_MAX,
    NESTING_DEPTH_MAX,
    TYPE_CHECKS,
    TimeMemo,
    contains_nul,
    integer_too_wide,
    is_time,
    nesting_depth,
    reads_major,
)

_BOM = b"\xef\xbb\xbf"
_FRAME_KEYS = ("seq", "type", "time", "data")
_STRING_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
"""A JSON string token, escapes included (`\\"` does not end it, `\\\\` is one escape)."""
_WHITESPACE = re.compile(rb"[ \t\n\r]")


@dataclass(frozen=True)
class Line:
    """One line the judge accepted. `raw` is its exact bytes, newline included."""

    seq: int
    type: str
    time: str
    data: dict[str, Any]
    raw: bytes
    ignored_keys: tuple[str, ...] = ()
    """Envelope keys after `data` of a newer minor's line, ignored (`newer_minor`)."""


def judge(raw: bytes, memo: TimeMemo, *, newer_minor: bool = False) -> Line:
    """Judge a complete line (its bytes end with `\\n`) rule by rule, and raise the refusal of the
    first rule it breaks (`MalformedLine`). With `newer_minor`, keys after `data` in the envelope
    are allowed (and ignored: `Line.ignored_keys`).

    A hello of another major is returned with only its version and stream id judged: the reader
    refuses it (`reads_major`) with the refusal of its own side. The refusal of a readable hello
    names the stream it starts (`hello.named`); when that hello names another major, the caller
    refuses it by its major whatever else is wrong with it (`hello.HelloIdentity`)."""
    try:
        return _judge(raw, memo, newer_minor=newer_minor)
    except LineError as refused:
        named_refusal = named(raw, refused)
        if named_refusal is refused:
            raise
        raise named_refusal from None


def _judge(raw: bytes, memo: TimeMemo, *, newer_minor: bool) -> Line:
    if len(raw) > LINE_BYTES_MAX:
        raise MalformedLine.too_long(len(raw), LINE_BYTES_MAX)
    if raw[-1:] != b"\n":
        raise MalformedLine("invalid_json", "the line does not end with a newline")
    if raw.startswith(_BOM):
        raise MalformedLine("invalid_json", "the line starts with a byte-order mark")
    if raw.find(b"\r") != -1:  # find, not `in`: `in` first tries the bytes as an integer
        raise MalformedLine("invalid_json", "the line contains a carriage return")
    if raw.count(b"[") + raw.count(b"{") > NESTING_DEPTH_MAX:
        depth = nesting_depth(raw)
        if depth > NESTING_DEPTH_MAX:
            raise MalformedLine.nesting_too_deep(depth, NESTING_DEPTH_MAX)
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as utf8_error:
            raise MalformedLine("invalid_utf8", f"not UTF-8 at byte {utf8_error.start}") from error
        raise MalformedLine("invalid_json", f"not JSON: {error}") from error
    if type(value) is not dict:
        raise MalformedLine("not_an_object", "the line is not a JSON object")
    # What orjson writes back from the value (the newline aside) is compact, with no key twice;
    # another writer's escapes or number forms get the precise look.
    body = raw[:-1]
    if orjson.dumps(value) != body:
        _check_compact(body, value)
    keys = tuple(value)
    if keys != _FRAME_KEYS and not (newer_minor and keys[:4] == _FRAME_KEYS):
        raise MalformedLine(
            "wrong_keys",
            "the line's keys must be exactly seq, type, time, data, in that order",
            seq=_seq_of(value),
        )
    # U+0000 can only arrive as the escape; an escaped backslash followed by `u0000` is not it.
    if raw.find(b"\\u0000") != -1 and contains_nul(value):
        raise MalformedLine(
            "nul_character",
            "the line contains U+0000, which Postgres cannot store",
            seq=_seq_of(value),
        )
    seq = value["seq"]
    if type(seq) is not int or seq < 1 or seq > INTEGER_MAX:
        raise MalformedLine.wrong_type("seq", "an integer >= 1")
    kind = value["type"]
    if type(kind) is not str or not kind:
        raise MalformedLine.wrong_type("type", "a non-empty string", seq=seq)
    time: Any = value["time"]
    if time != memo.last_time and not is_time(time, memo):
        raise MalformedLine.wrong_type(
            "time", "a real instant, RFC 3339 UTC with milliseconds and Z", seq=seq
        )
    data = value["data"]
    if type(data) is not dict:
        raise MalformedLine.wrong_type("data", "a JSON object", seq=seq)
    check = TYPE_CHECKS.get(kind)
    if check is not None:
        check(data, seq)  # a known field's integer past 64 bits is refused by its name here
    if integer_too_wide(body):
        raise MalformedLine.integer_too_wide(seq=seq)
    return Line(seq, kind, time, data, raw, keys[4:])


def of_another_major(line: Line) -> bool:
    """Whether `line`, accepted by the judge, is a hello of a major the readers do not read."""
    return line.type == "hello" and not reads_major(line.data["stream_version"])


def _seq_of(value: dict[str, Any]) -> int | None:
    """The line's seq when it has a valid one, for a refusal found before the seq is judged."""
    seq = value.get("seq")
    return seq if type(seq) is int and 1 <= seq <= INTEGER_MAX else None


def _check_compact(body: bytes, value: dict[str, Any]) -> None:
    """Refuse whitespace outside strings and a key repeated in any object (the slow path)."""
    if _WHITESPACE.search(_STRING_TOKEN.sub(b"", body)) is not None:
        raise MalformedLine(
            "not_compact",
            "the line is not compact: whitespace outside strings",
            seq=_seq_of(value),
        )

    def refuse_duplicates(pairs: list[tuple[str, Any]]) -> None:
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise MalformedLine.duplicate_key(key, seq=_seq_of(value))
            seen.add(key)

    try:
        json.loads(body, object_pairs_hook=refuse_duplicates)
    except MalformedLine:
        raise
    except ValueError as error:  # orjson read it; only a limit of the json module can fail here
        raise MalformedLine("invalid_json", f"not JSON: {error}") from error

"""A refused line that is a readable hello: the stream it starts, so that its refusal is that
stream's (docs/reference/stream-format.md, "A hello that starts its stream").

A line is a readable hello when it is at most 1 MiB and parses as JSON into an object whose
`type` is `"hello"` and whose `data` is an object holding `engine_run_id`, a string of 1 to 255
bytes of UTF-8 without U+0000, and none of `type`, `data`, `engine_run_id` appears twice in its
object (a parser would keep one of the two). Nothing else of the line is needed: it starts its
stream whatever else is wrong with it. Its version is read when `stream_version` is a
`MAJOR.MINOR` string of ASCII digits of at most 255 bytes; a version of a major this reader
does not read makes the refusal `unsupported_version`, whatever else is wrong.

Only a refused line is looked at here (the judge's verdict stands; only whose it is is decided),
so the extra parse costs nothing on a sound journal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeGuard

import orjson

from .refusals import LineError
from .rules import IDENTIFIER_BYTES_MAX, INTEGER_MAX, LINE_BYTES_MAX, stream_major

_NAMING_KEYS = frozenset({"type", "data"})
"""The envelope keys a stream's identity is read through: neither may be written twice."""


@dataclass(frozen=True)
class HelloIdentity:
    """What a readable hello says of its stream."""

    engine_run_id: str
    stream_version: str | None
    """None when the version cannot be read (not a string `MAJOR.MINOR` of at most 255 bytes)."""
    book_id: str
    """The hello's book when it is a storable string, else empty."""
    seq: int | None
    """The line's seq when it is a valid one."""


def _storable(value: object) -> TypeGuard[str]:
    return (
        type(value) is str
        and "\x00" not in value
        and len(value.encode("utf-8", "surrogatepass")) <= IDENTIFIER_BYTES_MAX
    )


class _Repeated(dict[str, Any]):
    """An object as parsed, with the keys written more than once in it."""

    repeated: frozenset[str] = frozenset()


def _with_repeats(pairs: list[tuple[str, Any]]) -> _Repeated:
    made = _Repeated(pairs)
    if len(made) != len(pairs):
        keys = [key for key, _ in pairs]
        made.repeated = frozenset(key for key in made if keys.count(key) > 1)
    return made


def _names_once(body: bytes) -> bool:
    """Whether `type`, `data` and `data.engine_run_id` are each written once in their object
    (only asked of a line that is not what orjson writes back, the one way a key can repeat)."""
    try:
        value = json.loads(
            body,
            object_pairs_hook=_with_repeats,
            parse_int=lambda token: 0,  # no conversion: a line may hold 10,000 digits
            parse_float=lambda token: 0.0,
        )
    except (ValueError, RecursionError):
        return False
    data = value["data"]
    return not (value.repeated & _NAMING_KEYS) and "engine_run_id" not in data.repeated


def hello_identity(raw: bytes) -> HelloIdentity | None:
    """The identity of `raw` (a complete line) when it is a readable hello, else None."""
    if len(raw) > LINE_BYTES_MAX:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(value) is not dict or value.get("type") != "hello":
        return None
    data = value.get("data")
    if type(data) is not dict:
        return None
    run_id = data.get("engine_run_id")
    if not _storable(run_id) or not run_id:
        return None
    body = raw[:-1] if raw[-1:] == b"\n" else raw
    if orjson.dumps(value) != body and not _names_once(body):
        return None
    version = data.get("stream_version")
    if not _storable(version) or stream_major(version) is None:
        version = None
    book = data.get("book_id")
    seq = value.get("seq")
    return HelloIdentity(
        engine_run_id=run_id,
        stream_version=version,
        book_id=book if _storable(book) else "",
        seq=seq if type(seq) is int and 1 <= seq <= INTEGER_MAX else None,
    )


def named(raw: bytes, refused: LineError) -> LineError:
    """`refused`, the verdict on `raw`, made the refusal of the stream `raw` starts when it is a
    readable hello (`LineError.of_hello`); any other line's refusal is returned as is. When the
    hello names a major the readers do not read (`rules.reads_major` of its `stream_version`),
    the reader refuses the stream by its major instead, each side with its own refusal."""
    identity = hello_identity(raw)
    if identity is None:
        return refused
    return refused.of_hello(identity.engine_run_id, identity.stream_version)

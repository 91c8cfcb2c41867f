"""A refused line that is a readable hello: the stream it starts, so that its refusal is that
stream's (docs/reference/stream-format.md, "A hello that starts its stream").

A line is a readable hello when it is at most 1 MiB and parses as JSON into an object whose
`type` is `"hello"` and whose `data` is an object holding `engine_run_id`, a string of 1 to 255
bytes of UTF-8 without U+0000, and none of `type`, `data`, `engine_run_id` appears twice in its
object (a parser would keep one of the two). It starts its stream whatever else is wrong with
it. Its version is read when `stream_version` is a `MAJOR.MINOR` string of ASCII digits of at
most 255 bytes; a version of another major makes the refusal `unsupported_version`.

The platform's decoder keeps the same rule in its own code; the shared vectors and the
differential test hold the two to it.
"""

from __future__ import annotations

import json
from typing import Any, TypeGuard

import orjson

from .._events import IDENTIFIER_BYTES_MAX, STREAM_MAJOR, STREAM_VERSION_PATTERN
from .._line import LINE_BYTES_MAX
from ..errors import LineError, UnsupportedVersion

_INTEGER_MAX = 2**63 - 1


def _storable(value: object) -> TypeGuard[str]:
    return (
        isinstance(value, str)
        and "\x00" not in value
        and len(value.encode("utf-8", "surrogatepass")) <= IDENTIFIER_BYTES_MAX
    )


class _Object(dict[str, Any]):
    """An object as parsed, with the keys written more than once in it."""

    repeated: frozenset[str] = frozenset()


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    made = _Object(pairs)
    if len(made) != len(pairs):
        keys = [key for key, _ in pairs]
        made.repeated = frozenset(key for key in made if keys.count(key) > 1)
    return made


def _named_once(body: bytes) -> bool:
    """Whether `type`, `data` and `data.engine_run_id` are each written once in their object."""
    try:
        value = json.loads(
            body,
            object_pairs_hook=_object,
            parse_int=lambda token: 0,  # never converted: a line may hold 10,000 digits
            parse_float=lambda token: 0.0,
        )
    except (ValueError, RecursionError):
        return False
    return not value.repeated & {"type", "data"} and "engine_run_id" not in value["data"].repeated


def hello_identity(raw: bytes) -> tuple[str, str | None, int | None] | None:
    """(engine_run_id, stream_version or None, seq or None) of a readable hello, else None."""
    if len(raw) > LINE_BYTES_MAX:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict) or value.get("type") != "hello":
        return None
    data = value.get("data")
    if not isinstance(data, dict):
        return None
    run_id = data.get("engine_run_id")
    if not run_id or not _storable(run_id):
        return None
    body = raw[:-1] if raw.endswith(b"\n") else raw
    if orjson.dumps(value) != body and not _named_once(body):
        return None
    version = data.get("stream_version")
    if not _storable(version) or STREAM_VERSION_PATTERN.fullmatch(version) is None:
        version = None
    seq = value.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= _INTEGER_MAX:
        seq = None
    return run_id, version, seq


def whose_refusal(raw: bytes, refused: LineError) -> LineError:
    """`refused` made the refusal of the stream `raw` starts when it is a readable hello:
    `unsupported_version` when it names another major, else the same refusal naming the
    stream. Any other line's refusal is returned as it is."""
    identity = hello_identity(raw)
    if identity is None:
        return refused
    run_id, version, seq = identity
    if version is not None:
        major = int(version.split(".")[0])
        if major != STREAM_MAJOR:
            unsupported = UnsupportedVersion(
                f"stream major version {major} is not supported (reads {STREAM_MAJOR}.x)"
            )
            return unsupported.of_hello(run_id, version, seq)
    return refused.of_hello(run_id, version, seq)

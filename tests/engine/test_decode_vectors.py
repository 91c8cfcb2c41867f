"""The engine's reader (`_decode`) reaches the verdict of every shared line vector."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine_events._events import UnitDone
from engine_events._line import LINE_BYTES_MAX, encode_line
from engine_events.errors import LineError, MalformedLine, UnsupportedVersion
from engine_events.readers.decode import decode_line, require_supported

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
CORPUS: dict[str, list[dict[str, Any]]] = json.loads((VECTORS / "lines.json").read_text())
T = "2026-11-30T02:08:57.213Z"


def raw_of(vector: dict[str, Any]) -> bytes:
    """The vector as a complete journal line: its bytes and the newline that ends every line."""
    if "hex" in vector:
        return bytes.fromhex(vector["hex"]) + b"\n"
    return str(vector["line"]).encode() + b"\n"


def verdict_of(raw: bytes) -> str:
    try:
        line = decode_line(raw)
        if line.type == "hello":
            require_supported(line)
    except LineError as error:
        return error.kind
    return "ok"


ALL = CORPUS["text_lines"] + CORPUS["byte_lines"]


@pytest.mark.parametrize("vector", ALL, ids=[v["name"] for v in ALL])
def test_line_vector_verdict(vector: dict[str, Any]) -> None:
    """The decoder's verdict on the vector is the one the corpus lists."""
    assert verdict_of(raw_of(vector)) == vector["verdict"]


@pytest.mark.parametrize("vector", ALL, ids=[v["name"] for v in ALL])
def test_line_vector_error_class(vector: dict[str, Any]) -> None:
    """A refused vector raises the error class of its verdict, carrying a reason."""
    raw = raw_of(vector)
    expected: type[LineError] | None = {
        "ok": None,
        "malformed": MalformedLine,
        "unsupported_version": UnsupportedVersion,
    }[vector["verdict"]]
    if expected is None:
        line = decode_line(raw)
        assert line.raw == raw
        return
    with pytest.raises(expected) as caught:
        line = decode_line(raw)
        if line.type == "hello":
            require_supported(line)
    assert caught.value.detail


def test_corpus_is_not_empty_and_has_every_verdict() -> None:
    """The corpus holds many vectors and every verdict, so the tests above cannot pass vacuously."""
    assert len(ALL) > 40
    assert {v["verdict"] for v in ALL} == {"ok", "malformed", "unsupported_version"}


def test_ok_vectors_decode_to_their_fields() -> None:
    """An accepted vector decodes to the seq, type, time and data written in it."""
    for vector in CORPUS["text_lines"]:
        if vector["verdict"] != "ok":
            continue
        value = json.loads(vector["line"])
        line = decode_line(raw_of(vector))
        assert (line.seq, line.type, line.time, line.data) == (
            value["seq"],
            value["type"],
            value["time"],
            value["data"],
        )


def long_line(size_bytes: int) -> bytes:
    """A unit_done line of exactly `size_bytes` bytes, newline included: a field of a newer minor
    (unknown here, so not bounded but by the line) carries the padding."""
    base = len(encode_line(3, UnitDone(unit="u", index=0), T)) + len(',"note":""')
    note = "n" * (size_bytes - base)
    return (
        b'{"seq":3,"type":"unit_done","time":"'
        + T.encode()
        + b'","data":{"unit":"u","index":0,"note":"'
        + note.encode()
        + b'"}}\n'
    )


def test_a_line_of_exactly_the_limit_is_accepted() -> None:
    """A line of exactly 1 MiB, newline included, is read."""
    raw = long_line(LINE_BYTES_MAX)
    assert len(raw) == LINE_BYTES_MAX
    assert decode_line(raw).data["index"] == 0


def test_a_line_over_the_limit_is_malformed() -> None:
    """A line one byte over 1 MiB is malformed, though its JSON is valid."""
    raw = long_line(LINE_BYTES_MAX + 1)
    assert len(raw) == LINE_BYTES_MAX + 1
    assert json.loads(raw)["seq"] == 3
    with pytest.raises(MalformedLine, match="exceeds"):
        decode_line(raw)


def test_an_unterminated_line_is_malformed() -> None:
    """A line without its newline is not a complete line: the decoder refuses it."""
    vector = CORPUS["text_lines"][0]
    with pytest.raises(MalformedLine):
        decode_line(str(vector["line"]).encode())

"""The decoder's typed refusals, and the journal reader's bounds (no database needed)."""

from __future__ import annotations

import hashlib
import tracemalloc
from pathlib import Path

import pytest
from platform_journals import hello, line, spend, unit_done

from platform_ingest import (
    LINE_BYTES_MAX,
    HelloNotFirst,
    InvalidJson,
    InvalidUtf8,
    LineTooLong,
    MoneyNotInteger,
    NestingTooDeep,
    NotAnObject,
    UnsupportedVersion,
    WrongType,
    decode_line,
)
from platform_ingest._journal import Hint, Journal, file_identity


@pytest.mark.parametrize(
    ("raw", "error", "seq"),
    [
        (b'{"seq":1,"type":"x\xff"}\n', InvalidUtf8, None),
        (b'{"seq":1,\n', InvalidJson, None),
        (b"\xef\xbb\xbf" + hello(), InvalidJson, None),
        (spend(2, 1)[:-1] + b"\r\n", InvalidJson, None),
        (
            b'{"seq":4,"type":"spend","time":"2026-11-30T02:08:57.213Z","data":{"a":NaN}}\n',
            InvalidJson,
            None,
        ),
        (b'"a string"\n', NotAnObject, None),
        (line(2, "x", {}).replace(b"{}}", b"[" * 65 + b"]" * 65 + b"}"), NestingTooDeep, None),
        (spend(2, 1).replace(b'"seq":2', b'"seq":true'), WrongType, None),
        (spend(2, 1).replace(b'"type":"spend"', b'"type":""'), WrongType, 2),
        (line(3, "unit_done", {"unit": "", "index": 0}), WrongType, 3),
        (line(3, "progress", {"phases": {"a": {"done": 1}}}), WrongType, 3),
        (hello().replace(b'"seq":1', b'"seq":3'), HelloNotFirst, 3),
        (hello(version="3.1"), UnsupportedVersion, 1),
        (line(9, "x", {"pad": "y" * LINE_BYTES_MAX}), LineTooLong, None),
    ],
    ids=lambda value: value.__name__ if isinstance(value, type) else None,
)
def test_each_refusal_has_its_own_type(raw: bytes, error: type[Exception], seq: int | None) -> None:
    """Every reason a line is refused raises its own error type, carrying the seq when known."""
    with pytest.raises(error) as caught:
        decode_line(raw)
    assert getattr(caught.value, "seq", None) == seq


@pytest.mark.parametrize("amount", [1.5, "null", "12", None, -3, True], ids=repr)
def test_money_violations_raise_money_not_integer_without_the_amount(amount: object) -> None:
    """Each money violation is a MoneyNotInteger whose message names the field, not the value."""
    with pytest.raises(MoneyNotInteger) as caught:
        decode_line(spend(5, amount))
    assert caught.value.field == "committed_micro_usd"
    assert caught.value.seq == 5
    assert repr(amount) not in str(caught.value).replace("integer", "")


def test_unsupported_version_names_its_stream() -> None:
    """A hello of another major carries the stream id, so that stream alone is refused."""
    with pytest.raises(UnsupportedVersion) as caught:
        decode_line(hello("run-x", version="2.0"))
    assert caught.value.engine_run_id == "run-x"
    assert caught.value.kind == "unsupported_version"


def test_a_line_of_exactly_the_limit_is_read() -> None:
    """A line of exactly 1 MiB (newline included) is accepted; one byte more is refused."""
    base = line(2, "x", {"pad": ""})
    exact = base.replace(b'"pad":""', b'"pad":"' + b"y" * (LINE_BYTES_MAX - len(base)) + b'"')
    assert len(exact) == LINE_BYTES_MAX
    assert decode_line(exact).seq == 2
    with pytest.raises(LineTooLong):
        decode_line(exact.replace(b'"pad":"', b'"pad":"y'))


def _lines(path: Path, start: int = 0) -> list[tuple[int, bytes | LineTooLong]]:
    with Journal(path) as journal:
        return list(journal.lines(start))


def test_reader_yields_complete_lines_only(tmp_path: Path) -> None:
    """An unterminated last line is not yielded; offsets are where each line starts."""
    path = tmp_path / "events.jsonl"
    first, second = hello(), spend(2, 1)
    path.write_bytes(first + second + b'{"seq":3')
    assert _lines(path) == [(0, first), (len(first), second)]
    assert _lines(path, len(first)) == [(len(first), second)]


def test_over_long_line_is_skipped_in_bounded_memory(tmp_path: Path) -> None:
    """A 20 MiB line is reported (length and hash) while memory stays near the 1 MiB limit."""
    path = tmp_path / "events.jsonl"
    big = b'{"seq":2,"pad":"' + b"z" * (20 * 1024 * 1024) + b'"}\n'
    after = unit_done(3, "u-1", 0)
    path.write_bytes(hello() + big + after)
    tracemalloc.start()
    try:
        found = _lines(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * LINE_BYTES_MAX
    assert [offset for offset, _ in found] == [0, len(hello()), len(hello()) + len(big)]
    too_long = found[1][1]
    assert isinstance(too_long, LineTooLong)
    assert too_long.size_bytes == len(big)
    assert too_long.line_sha256 == hashlib.sha256(big).digest()
    assert found[2][1] == after


def test_over_long_unterminated_line_is_reported_not_consumed(tmp_path: Path) -> None:
    """An over-long line without its newline is reported, flagged unterminated, not consumed."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(hello() + b"{" + b"q" * (LINE_BYTES_MAX + 10))
    found = _lines(path)
    assert isinstance(found[-1][1], LineTooLong)
    assert not found[-1][1].terminated


def test_hint_is_verified_against_the_bytes_before_it(tmp_path: Path) -> None:
    """A hint holds only while the line before it is still there, in the same file."""
    path = tmp_path / "events.jsonl"
    first, second = hello(), spend(2, 1)
    path.write_bytes(first + second)
    identity = file_identity(path.stat())
    good = Hint(len(first + second), len(second), hashlib.sha256(second).digest(), identity)
    with Journal(path) as journal:
        assert journal.verify_hint(good)
        assert journal.verify_hint(Hint.start())
        assert not journal.verify_hint(Hint(good.offset, good.line_bytes, b"\0" * 32, identity))
        assert not journal.verify_hint(
            Hint(good.offset + 5, good.line_bytes, good.sha256, identity)
        )
        assert not journal.verify_hint(Hint(good.offset, good.line_bytes, good.sha256, "0:0"))
        wrong_start = Hint(good.offset, good.line_bytes - 1, good.sha256, identity)
        assert not journal.verify_hint(wrong_start)
    replaced = tmp_path / "copy"
    replaced.write_bytes(first + second)
    replaced.replace(path)
    with Journal(path) as journal:
        assert not journal.verify_hint(good)  # same bytes, another file: thrown away

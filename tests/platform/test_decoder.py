"""The decoder's typed refusals, and the journal reader's bounds (no database needed)."""

from __future__ import annotations

import hashlib
import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

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
from platform_ingest._decode import IDENTIFIER_BYTES_MAX, TEXT_BYTES_MAX
from platform_ingest._journal import Hint, Journal, file_identity
from platform_ingest.errors import (
    DuplicateKey,
    MalformedLine,
    NotCompact,
    NulCharacter,
    StringTooLong,
    WrongKeys,
)
from platform_journals import hello, line, spend, unit_done

T = "2026-11-30T02:08:57.213Z"


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
        (b" " + spend(2, 1), NotCompact, 2),
        (spend(2, 1).replace(b'"seq":2', b'"seq": 2'), NotCompact, 2),
        (spend(2, 1).replace(b"}}", b',"committed_micro_usd":1}}'), DuplicateKey, 2),
        (spend(2, 1).replace(b'"seq":2,', b'"seq":2,"seq":2,'), DuplicateKey, 2),
        (spend(2, 1).replace(b'"seq":2,"type":"spend"', b'"type":"spend","seq":2'), WrongKeys, 2),
        (spend(2, 1)[:-2] + b',"more":1}\n', WrongKeys, 2),
        (unit_done(3, "u\x00", 0), NulCharacter, 3),
        (line(3, "x", {"k\x00": 1}), NulCharacter, 3),
        (unit_done(3, "u" * 256, 0), StringTooLong, 3),
        (hello(run="r" * 256), StringTooLong, 1),
        (hello(run="r" * 256, version="2.0"), StringTooLong, 1),
        (line(3, "bank_stop", {"signature": "s" * 4097}), StringTooLong, 3),
        (spend(2, 1).replace(T.encode(), b"2026-02-30T02:08:57.213Z"), WrongType, 2),
        (line(2, "progress", {"phases": {"a": {"done": 3, "total": 2}}}), WrongType, 2),
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


STRING_FIELDS = [
    ("engine_run_id", IDENTIFIER_BYTES_MAX, lambda v: hello(run=v)),
    ("book_id", IDENTIFIER_BYTES_MAX, lambda v: hello(book=v)),
    (
        "stream_version",
        IDENTIFIER_BYTES_MAX,
        lambda v: hello(version="1." + "0" * (len(v.encode()) - 2)),
    ),
    ("unit", IDENTIFIER_BYTES_MAX, lambda v: unit_done(3, v, 0)),
    (
        "a phase name",
        IDENTIFIER_BYTES_MAX,
        lambda v: line(2, "progress", {"phases": {v: {"done": 0, "total": 0}}}),
    ),
    ("signature", TEXT_BYTES_MAX, lambda v: line(3, "bank_stop", {"signature": v})),
    (
        "scope",
        IDENTIFIER_BYTES_MAX,
        lambda v: line(3, "ceiling", {"halted": True, "scope": v}),
    ),
]


@pytest.mark.parametrize(
    ("field", "limit", "build"), STRING_FIELDS, ids=[f for f, _, _ in STRING_FIELDS]
)
def test_string_too_long_names_its_field_and_bound_not_its_value(
    field: str, limit: int, build: Callable[[str], bytes]
) -> None:
    """A string one byte over its bound (in UTF-8 bytes) is refused with the field, the bound and
    the seq; the value itself is never quoted (it may be a book's data)."""
    assert decode_line(build("€" * (limit // 3) + "a" * (limit % 3)))
    with pytest.raises(StringTooLong) as caught:
        decode_line(build("€" * (limit // 3) + "a" * (limit % 3 + 1)))
    assert (caught.value.field, caught.value.limit_bytes) == (field, limit)
    assert caught.value.seq is not None
    assert "€" not in str(caught.value)


def test_the_time_memo_never_lets_an_impossible_time_through() -> None:
    """Lines of one commit share their time, so the last valid time is remembered; a time that is
    not remembered is judged in full, whatever came before it."""
    for _ in range(2):
        assert decode_line(spend(2, 1)).time == T
        with pytest.raises(WrongType, match="time"):
            decode_line(spend(3, 1).replace(T.encode(), b"2026-11-30T24:00:00.000Z"))


def test_another_writers_escapes_read_like_the_emitters_bytes() -> None:
    """A line that is compact and in order but escaped otherwise (`json.dumps`'s ASCII escapes,
    `\\/`, an exponent) is read, to the same value as the canonical line."""
    data = {"unit": "été/ü", "index": 0, "ratio": 100.0}
    canonical = line(3, "unit_done", data)
    escaped = (
        json.dumps({"seq": 3, "type": "unit_done", "time": T, "data": data}, separators=(",", ":"))
        .replace("/", "\\/")
        .replace("100.0", "1E2")
        .encode()
        + b"\n"
    )
    assert escaped != canonical
    assert decode_line(escaped) == decode_line(canonical)


def test_an_escaped_backslash_before_u0000_is_not_nul() -> None:
    """`\\\\u0000` in a line is a backslash and the text u0000, which Postgres stores."""
    raw = unit_done(3, "C:\\u0000", 0)
    assert b"\\\\u0000" in raw
    assert decode_line(raw).data["unit"] == "C:\\u0000"


def test_unsupported_version_keeps_no_unstorable_book_id() -> None:
    """Another major's hello is refused without judging its book_id, but an id Postgres could not
    hold is not carried on the refusal."""
    with pytest.raises(UnsupportedVersion) as caught:
        decode_line(hello("run-x", book="b" * 300, version="2.0"))
    assert caught.value.book_id == ""


@pytest.mark.parametrize(
    "raw",
    [
        b" " + spend(2, 1),
        unit_done(3, "u\x00", 0),
        unit_done(3, "u" * 256, 0),
        line(2, "progress", {"phases": {"a": {"done": 3, "total": 2}}}),
    ],
)
def test_new_refusals_are_malformed(raw: bytes) -> None:
    """Each new refusal is a `MalformedLine`: the attempt is quarantined as malformed."""
    with pytest.raises(MalformedLine) as caught:
        decode_line(raw)
    assert caught.value.kind == "malformed"


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

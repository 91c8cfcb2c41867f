"""The decoder's typed refusals, and the journal reader's bounds (no database needed)."""

from __future__ import annotations

import hashlib
import json
import os
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_events.grammar import (
    IDENTIFIER_BYTES_MAX,
    LINE_BYTES_MAX,
    TEXT_BYTES_MAX,
    MalformedReason,
)
from platform_ingest.errors import LineRefused, MalformedLine, UnsupportedVersion
from platform_ingest.journal import decode as _decode
from platform_ingest.journal import memo as _memo
from platform_ingest.journal import reader as _journal
from platform_ingest.journal.decode import MEMO, decode_line
from platform_ingest.journal.hint import Hint
from platform_ingest.journal.line import Line
from platform_ingest.journal.memo import DecoderMemo
from platform_ingest.journal.precise import decode_precisely
from platform_ingest.journal.reader import (
    READ_PAST_SIZE_BYTES,
    Journal,
    complete_lines,
    file_identity,
)
from platform_journals import hello, line, progress, spend, unit_done

T = "2026-11-30T02:08:57.213Z"


@contextmanager
def refused(*reasons: MalformedReason, match: str | None = None) -> Iterator[Any]:
    """`pytest.raises` of the one `MalformedLine`, for one of the rules `reasons` names."""
    with pytest.raises(MalformedLine, match=match) as caught:
        yield caught
    assert caught.value.reason in reasons


@pytest.mark.parametrize(
    ("raw", "error", "seq"),
    [
        (b'{"seq":1,"type":"x\xff"}\n', "invalid_utf8", None),
        (b'{"seq":1,\n', "invalid_json", None),
        (b"\xef\xbb\xbf" + hello(), "invalid_json", None),
        (spend(2, 1)[:-1] + b"\r\n", "invalid_json", None),
        (
            b'{"seq":4,"type":"spend","time":"2026-11-30T02:08:57.213Z","data":{"a":NaN}}\n',
            "invalid_json",
            None,
        ),
        (b'"a string"\n', "not_an_object", None),
        (line(2, "x", {}).replace(b"{}}", b"[" * 65 + b"]" * 65 + b"}"), "nesting_too_deep", None),
        (spend(2, 1).replace(b'"seq":2', b'"seq":true'), "wrong_type", None),
        (spend(2, 1).replace(b'"type":"spend"', b'"type":""'), "wrong_type", 2),
        (line(3, "unit_done", {"unit": "", "index": 0}), "wrong_type", 3),
        (line(3, "progress", {"phases": {"a": {"done": 1}}}), "wrong_type", 3),
        (hello().replace(b'"seq":1', b'"seq":3'), "hello_not_first", 3),
        (hello(version="3.1"), UnsupportedVersion, 1),
        (line(9, "x", {"pad": "y" * LINE_BYTES_MAX}), "line_too_long", None),
        (b" " + spend(2, 1), "not_compact", 2),
        (spend(2, 1).replace(b'"seq":2', b'"seq": 2'), "not_compact", 2),
        (spend(2, 1).replace(b"}}", b',"committed_micro_usd":1}}'), "duplicate_key", 2),
        (spend(2, 1).replace(b'"seq":2,', b'"seq":2,"seq":2,'), "duplicate_key", 2),
        (
            spend(2, 1).replace(b'"seq":2,"type":"spend"', b'"type":"spend","seq":2'),
            "wrong_keys",
            2,
        ),
        (spend(2, 1)[:-2] + b',"more":1}\n', "wrong_keys", 2),
        (unit_done(3, "u\x00", 0), "nul_character", 3),
        (line(3, "x", {"k\x00": 1}), "nul_character", 3),
        (unit_done(3, "u" * 256, 0), "string_too_long", 3),
        (hello(run="r" * 256), "string_too_long", 1),
        (hello(run="r" * 256, version="2.0"), "string_too_long", 1),
        (line(3, "bank_stop", {"signature": "s" * 4097}), "string_too_long", 3),
        (spend(2, 1).replace(T.encode(), b"2026-02-30T02:08:57.213Z"), "wrong_type", 2),
        (line(2, "progress", {"phases": {"a": {"done": 3, "total": 2}}}), "wrong_type", 2),
        (
            line(2, "x", {}).replace(b"{}}", b"[" * 300 + b"]" * 300 + b"}"),
            "nesting_too_deep",
            None,
        ),
        (
            spend(2, 1).replace(b"1}}", b'1,"x":' + b"[" * 65 + b"]" * 65 + b"}}"),
            "nesting_too_deep",
            None,
        ),
        (line(3, "spend", {"committed_micro_usd": 1, "note": "a\x00"}), "nul_character", 3),
        (line(3, "progress", {"phases": {"a\x00": {"done": 0, "total": 1}}}), "nul_character", 3),
        (
            line(3, "progress", {"phases": {"a": {"done": 0, "total": 1, "k": ["\x00"]}}}),
            "nul_character",
            3,
        ),
        (line(3, "unit_done", {"unit": "u", "index": 0, "\x00": 1}), "nul_character", 3),
        (line(3, "unit_done", {"unit": "u"}), "wrong_type", 3),
        (line(3, "progress", {"phases": {"a": [0, 1]}}), "wrong_type", 3),
    ],
    ids=lambda value: value.__name__ if isinstance(value, type) else None,
)
def test_each_refusal_has_its_own_type(
    raw: bytes, error: MalformedReason | type[LineRefused], seq: int | None
) -> None:
    """Every reason a line is refused raises its own error type (or, malformed, its own
    `reason`), carrying the seq when known."""
    with pytest.raises(LineRefused) as caught:
        decode_line(raw)
    if isinstance(error, str):
        assert isinstance(caught.value, MalformedLine)
        assert caught.value.reason == error
    else:
        assert isinstance(caught.value, error)
    assert getattr(caught.value, "seq", None) == seq


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (line(3, "unit_done", {"unit": "u"}), "index"),
        (line(3, "unit_done", {"index": 0}), "unit"),
        (line(3, "unit_done", {"unit": "", "index": 0}), "unit"),
        (line(3, "unit_done", {"unit": "u", "index": -1}), "index"),
        (line(3, "unit_done", {"unit": 7, "index": "0"}), "unit"),
        (line(3, "spend", {"other": 1}), "committed_micro_usd"),
        (line(3, "progress", {}), "phases"),
        (line(3, "progress", {"phases": {"a": {"done": 0}}}), "phases.a.total"),
        (line(3, "progress", {"phases": {"a": {"total": 0}}}), "phases.a.done"),
        (line(3, "progress", {"phases": {"a": 1}}), "phases.a"),
        (
            line(3, "progress", {"phases": {"a": {"done": 0, "total": 1}, "b": {"done": 2}}}),
            "phases.b.total",
        ),
        (
            line(3, "progress", {"phases": {"a": {"done": 2, "total": 1}, "b": None}}),
            "phases.a.done",
        ),
    ],
)
def test_a_refusal_names_the_first_field_at_fault(raw: bytes, field: str) -> None:
    """A known field missing, of the wrong type or out of range is refused under its own name,
    the first in the data's order when several are wrong."""
    with refused("wrong_type", "money_not_integer") as caught:
        decode_line(raw)
    assert isinstance(caught.value, MalformedLine)
    assert (caught.value.field, caught.value.seq) == (field, 3)


@pytest.mark.parametrize("amount", [1.5, "null", "12", None, -3, True], ids=repr)
def test_money_violations_raise_money_not_integer_without_the_amount(amount: object) -> None:
    """Each money violation is a `money_not_integer` refusal whose message names the field, not the
    value."""
    with refused("money_not_integer") as caught:
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
    with refused("line_too_long"):
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
    with refused("string_too_long") as caught:
        decode_line(build("€" * (limit // 3) + "a" * (limit % 3 + 1)))
    assert (caught.value.field, caught.value.limit_bytes) == (field, limit)
    assert caught.value.seq is not None
    assert "€" not in str(caught.value)


@pytest.mark.parametrize(
    "impossible",
    [
        "2026-11-30T24:00:00.000Z",
        "2026-11-30T23:60:00.000Z",
        "2026-11-30T23:59:60.000Z",
        "2026-11-30T2:08:57.213Z",
        "2026-11-30T02:08:57.213",
        "2026-11-30T02:08:57.2130Z",
        "2026-11-30T\uff10\uff12:08:57.213Z",
        "2026-11-31T02:08:57.213Z",
        "2026-02-29T02:08:57.213Z",
        "2026-13-01T02:08:57.213Z",
    ],
)
def test_the_time_memo_never_lets_an_impossible_time_through(impossible: str) -> None:
    """Lines of one commit share their time, and commits of one day their day, so the last valid
    time and its day are remembered; on a remembered day the clock is still judged in full, and
    any other time is judged whole, whatever came before it."""
    for _ in range(2):
        assert decode_line(spend(2, 1)).time == T
        with refused("wrong_type", match="time"):
            decode_line(spend(3, 1).replace(T.encode(), impossible.encode()))
    assert decode_line(spend(4, 1).replace(T.encode(), b"2026-11-30T23:59:59.999Z"))
    assert decode_line(spend(5, 1).replace(T.encode(), b"2028-02-29T00:00:00.000Z"))


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


# -- the fast path and the precise judge -------------------------------------------------------

VALID_DATA: dict[str, dict[str, object]] = {
    "hello": {"stream_version": "1.4", "engine_run_id": "r", "book_id": "b", "chunker_version": ""},
    "progress": {"phases": {"draft": {"done": 1, "total": 2}, "edit": {"done": 0, "total": 0}}},
    "unit_done": {"unit": "unit-0001", "index": 0},
    "bank_stop": {"signature": "s"},
    "ceiling": {"halted": True, "scope": "book", "shortfall_micro_usd": 1},
    "spend": {"committed_micro_usd": 250_000},
    "finished": {
        "outcome": "clean",
        "exit_code": 0,
        "stop": None,
        "refusal": None,
        "volume": {"units_done": 1, "units_total": 1},
        "money": {"committed_micro_usd": 1},
    },
    "a_newer_type": {"note": [1, {"k": "v"}]},
}
"""A valid data object of every type, and of a type this reader does not know."""

strings = st.text(max_size=6) | st.sampled_from(
    ["", "\x00", "a\x00", "\\u0000", "a" * 63, "a" * 64, "é" * 127 + "a", "é" * 128, "€" * 86]
)
"""Strings around what the checks look at: U+0000 (and its look-alike), the bounds, emptiness."""
numbers = st.sampled_from([-1, 0, 1, 2, 255, 256, 2**63 - 1, 2**63, 2**64 - 1, 1.0, 0.5, True])
json_values = st.recursive(
    st.none() | st.booleans() | numbers | st.integers() | strings,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(strings, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def lines_near_valid(draw: st.DrawFn) -> bytes:
    """A valid line of any type with a few of its members replaced, added or removed, at the top
    of `data` or one object down (a phase's counts, `volume`, `money`), or in the frame; written
    as orjson writes it (the emitter's form) or, now and then, with another writer's escapes."""
    kind = draw(st.sampled_from(sorted(VALID_DATA)))
    data = orjson.loads(orjson.dumps(VALID_DATA[kind]))
    frame: dict[str, object] = {"seq": 1 if kind == "hello" else 2, "type": kind, "time": T}
    for _ in range(draw(st.integers(0, 3))):
        inner = [v for v in data.values() if isinstance(v, dict)]
        inner += [v for p in inner for v in p.values() if isinstance(v, dict)]
        target = draw(st.sampled_from([data, frame, *inner]))
        action = draw(st.sampled_from(["replace", "add", "remove"]))
        if action == "replace" and target:
            target[draw(st.sampled_from(sorted(target)))] = draw(json_values)
        elif action == "add":
            target[draw(strings)] = draw(json_values)
        elif action == "remove" and target:
            del target[draw(st.sampled_from(sorted(target)))]
    frame.setdefault("data", data)
    if draw(st.integers(0, 9)) == 0:
        frame = dict(draw(st.permutations(list(frame.items()))))
    if draw(st.integers(0, 9)) == 0:
        return json.dumps(frame, separators=(",", ":")).encode("utf-8", "surrogatepass") + b"\n"
    try:
        return orjson.dumps(frame, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:  # an integer past 64 bits
        return json.dumps(frame, separators=(",", ":")).encode() + b"\n"


def judged(decode: Callable[[bytes], Line], raw: bytes) -> object:
    try:
        return decode(raw)
    except LineRefused as error:
        return type(error), str(error), vars(error)


def judge_precisely(raw: bytes) -> Line:
    """The precise judge alone, with a memo of its own (what it remembers is only a path)."""
    return decode_precisely(raw, DecoderMemo())


def assert_fast_path_agrees(raw: bytes) -> None:
    assert judged(decode_line, raw) == judged(judge_precisely, raw), raw[:300]


@given(lines_near_valid())
def test_the_fast_path_reaches_the_precise_verdict(raw: bytes) -> None:
    """`decode_line` accepts a line it can prove valid in a few steps and leaves every other line
    to `decode_precisely`, which judges each rule in turn: on lines a step away from valid, of
    every type, the two reach the same line or the same refusal (type, detail, fields)."""
    assert_fast_path_agrees(raw)


@settings(max_examples=20_000)
@pytest.mark.slow
@given(lines_near_valid())
def test_the_fast_path_reaches_the_precise_verdict_thoroughly(raw: bytes) -> None:
    """The same check at a fuzzing budget (run with --run-slow)."""
    assert_fast_path_agrees(raw)


@pytest.mark.parametrize("kind", sorted(VALID_DATA))
def test_the_emitters_lines_take_the_fast_path(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every valid line as the emitter writes it is accepted without the precise judge (which is
    several times slower), with unknown fields beside the known ones too."""

    def not_called(raw: bytes, *args: object, **kwargs: object) -> Line:
        raise AssertionError(raw)

    seq = 1 if kind == "hello" else 2
    monkeypatch.setattr(_decode, "decode_precisely", not_called)
    for data in (VALID_DATA[kind], {**VALID_DATA[kind], "since_1_9": {"x": [None, 1.5]}}):
        raw = orjson.dumps({"seq": seq, "type": kind, "time": T, "data": data}) + b"\n"
        assert decode_line(raw) == Line(seq, kind, T, data)


# -- remembered skeletons ----------------------------------------------------------------------


@pytest.fixture
def fresh_skeletons() -> Iterator[dict[bytes, int]]:
    """The decoder's memo emptied for one test, and emptied again after it; its map of skeletons."""
    MEMO.forget()
    yield MEMO.skeletons
    MEMO.forget()


def skeleton(raw: bytes) -> bytes:
    return raw.translate(_memo.DIGITS_AS_ZERO)


digit_strings = st.text("0123456789", min_size=1, max_size=3)
counts = st.integers(0, 10**18 - 1) | st.sampled_from([0, 9, 10, 99, 100, 10**18, 2**63 - 1])
closed_data = st.one_of(
    st.tuples(
        st.just("progress"),
        st.dictionaries(
            st.sampled_from(["draft", "edit", "p1", "p2", "p10", "10", "01", "é9"]) | digit_strings,
            st.tuples(counts, counts).map(lambda c: {"done": min(c), "total": max(c)}),
            max_size=4,
        ).map(lambda phases: {"phases": phases}),
    ),
    st.tuples(
        st.just("unit_done"),
        st.fixed_dictionaries(
            {"unit": st.sampled_from(["unit-0001", "7", "u\\1", "u\x102", "é3"]), "index": counts}
        ),
    ),
    st.tuples(st.just("spend"), st.fixed_dictionaries({"committed_micro_usd": counts})),
)
"""Valid data of the types whose skeletons are remembered, with digits in names and strings,
numbers of every width up to 19 digits, escapes (`\\\\`, `\\u0010`) and non-ASCII."""


@st.composite
def remembered_and_redigited(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A valid line as the emitter writes it, and the same bytes with some of their digits
    replaced by others: the lines a remembered skeleton stands for, valid or not (a seq of 0, a
    leading zero, hour 24, 30 February, done over total, two phases of one name, U+0000)."""
    kind, data = draw(closed_data)
    seq = draw(st.integers(1, 10**18 - 1) | st.sampled_from([1, 9, 10, 99]))
    time = draw(st.sampled_from([T, "2028-02-29T23:59:59.999Z", "2026-12-31T00:00:00.000Z"]))
    raw = orjson.dumps({"seq": seq, "type": kind, "time": time, "data": data}) + b"\n"
    digits = [at for at, byte in enumerate(raw) if 0x30 <= byte <= 0x39]
    changed = bytearray(raw)
    for at in draw(st.lists(st.sampled_from(digits), max_size=4)) if digits else []:
        changed[at] = ord(draw(st.sampled_from("0123456789")))
    return raw, bytes(changed)


@given(remembered_and_redigited())
def test_a_remembered_skeleton_reaches_the_precise_verdict(lines: tuple[bytes, bytes]) -> None:
    """Once a valid line's skeleton is remembered, a line of the same skeleton (its digits
    changed) takes the short path: it reaches the same line or the same refusal as the precise
    judge. The map is emptied first, so the line decoded first is the one remembered."""
    raw, changed = lines
    MEMO.forget()
    assert decode_line(raw) == judge_precisely(raw)
    assert_fast_path_agrees(changed)


@settings(max_examples=20_000)
@pytest.mark.slow
@given(remembered_and_redigited())
def test_a_remembered_skeleton_reaches_the_precise_verdict_thoroughly(
    lines: tuple[bytes, bytes],
) -> None:
    """The same check at a fuzzing budget (run with --run-slow)."""
    raw, changed = lines
    MEMO.forget()
    assert decode_line(raw) == judge_precisely(raw)
    assert_fast_path_agrees(changed)


def test_a_remembered_skeleton_spares_the_re_encoding(
    fresh_skeletons: dict[bytes, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After one line of each usual type, the next lines of the same skeletons (other seqs,
    times, amounts, units, counts) are accepted without the re-encoding or the precise judge."""
    first = [
        progress(2, draft=(1, 10), edit=(0, 10)),
        unit_done(3, "unit-0001", 0),
        spend(4, 250_000),
        progress(5, **{"phase-0": (1, 10), "phase-1": (0, 10)}),
    ]
    for raw in first:
        decode_line(raw)
    assert set(fresh_skeletons) == {skeleton(raw) for raw in first}

    def not_called(*args: object, **kwargs: object) -> bytes:
        raise AssertionError(args)

    monkeypatch.setattr(_decode, "_dumps", not_called)
    monkeypatch.setattr(_decode, "decode_precisely", not_called)
    later = "2026-11-30T02:09:41.007Z"
    for raw, expected in [
        (progress(5, draft=(9, 10), edit=(3, 10)), {"draft": (9, 10), "edit": (3, 10)}),
        (unit_done(6, "unit-0972", 8), {"unit": "unit-0972", "index": 8}),
        (spend(7, 999_999), {"committed_micro_usd": 999_999}),
        (
            progress(8, **{"phase-4": (9, 10), "phase-7": (3, 10)}),
            {"phase-4": (9, 10), "phase-7": (3, 10)},
        ),
    ]:
        moved = raw.replace(T.encode(), later.encode())
        decoded = decode_line(moved)
        assert decoded == Line(*orjson.loads(moved).values())
        assert type(decoded) is Line
        assert decoded.time == later
        if decoded.type == "progress":
            found = {k: (v["done"], v["total"]) for k, v in decoded.data["phases"].items()}
            assert found == expected
        else:
            assert decoded.data == expected


@pytest.mark.parametrize(
    ("remembered", "same_skeleton", "error"),
    [
        (spend(2, 1), spend(0, 1), "wrong_type"),
        (spend(2, 10), spend(2, 10).replace(b":10}", b":01}"), "invalid_json"),
        (spend(2, 1), spend(2, 1).replace(b"T02:", b"T24:"), "wrong_type"),
        (spend(2, 1), spend(2, 1).replace(b":57.", b":60."), "wrong_type"),
        (spend(2, 1), spend(2, 1).replace(b"11-30T", b"02-30T"), "wrong_type"),
        (progress(2, a=(5, 7)), progress(2, a=(8, 7)), "wrong_type"),
        (progress(2, a=(1, 10), b=(0, 99)), progress(2, a=(1, 10), b=(0, 10)), None),
        (progress(2, p1=(0, 1), p2=(0, 1)), progress(2, p1=(0, 1), p2=(0, 1)), None),
        (
            progress(2, p1=(0, 1), p2=(0, 1)),
            progress(2, p1=(0, 1), p2=(0, 1)).replace(b'"p2"', b'"p1"'),
            "duplicate_key",
        ),
        (
            unit_done(3, "u\x10", 0),
            unit_done(3, "u\x10", 0).replace(b"u0010", b"u0000"),
            "nul_character",
        ),
        (
            spend(2, 10**18),
            spend(2, 10**18).replace(b"1000000000000000000", b"9999999999999999999"),
            "money_not_integer",
        ),
    ],
    ids=[
        "seq 0",
        "leading zero",
        "hour 24",
        "second 60",
        "30 February",
        "done over total",
        "counts of as many digits",
        "phases named with digits",
        "one phase twice",
        "U+0000 by escape",
        "money past 64 bits",
    ],
)
def test_a_remembered_skeleton_lets_no_broken_rule_through(
    fresh_skeletons: dict[bytes, int],
    remembered: bytes,
    same_skeleton: bytes,
    error: MalformedReason | None,
) -> None:
    """A line whose digits alone differ from a valid one's is still refused for every rule its
    digits can break, with the refusal of the precise judge."""
    decode_line(remembered)
    decode_line(remembered)
    assert skeleton(same_skeleton) == skeleton(remembered)
    assert_fast_path_agrees(same_skeleton)
    if error is None:
        assert decode_line(same_skeleton)
    else:
        with refused(error):
            decode_line(same_skeleton)


@pytest.mark.parametrize(
    ("raw", "remembered"),
    [
        (spend(2, 1), True),
        (unit_done(3, "unit-0001", 0), True),
        (progress(2, a=(0, 10)), True),
        (progress(2, p1=(0, 10), p2=(0, 10)), True),  # p1 and p2 share one: counted on a hit
        (unit_done(3, "a\\b", 0), False),  # an escape: digits could make it \u0000
        (unit_done(3, "a\x1fb", 0), False),
        (spend(2, 10**18), False),  # 19 digits: the same width may pass 2**63 - 1
        (line(3, "unit_done", {"unit": "u", "index": 0, "more": 1}), False),  # not closed
        (line(3, "ceiling", {"halted": True, "scope": "book", "shortfall_micro_usd": 1}), False),
        (hello(), False),
        (
            line(2, "progress", {"phases": {f"phase-{i}": {"done": 0, "total": 1} for i in "ab"}}),
            True,
        ),
        (progress(2, **{f"phase_{c * 30}": (0, 1) for c in "abcdefghijklmnop"}), False),  # long
    ],
)
def test_which_skeletons_are_remembered(
    fresh_skeletons: dict[bytes, int], raw: bytes, remembered: bool
) -> None:
    """Only a closed progress, unit_done or spend line that can stand for every line of its
    skeleton is remembered: no escape, no number of 19 digits, at most 1024
    bytes (phase names that read the same with their digits as 0 are counted on every hit)."""
    decode_line(raw)
    assert (skeleton(raw) in fresh_skeletons) is remembered


def test_the_map_of_skeletons_stays_bounded(fresh_skeletons: dict[bytes, int]) -> None:
    """Past `SKELETONS_MAX` skeletons the map starts again empty, so it never holds more."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    sizes = []
    for number in range(_memo.SKELETONS_MAX + 100):
        unit = "".join(letters[number // 26**at % 26] for at in range(3))
        decode_line(unit_done(3, unit, 0))
        sizes.append(len(fresh_skeletons))
    assert max(sizes) == _memo.SKELETONS_MAX
    assert sizes[-1] == 100


def _lines(path: Path, start: int = 0) -> list[tuple[int, bytes | MalformedLine]]:
    with Journal(path) as journal:
        return list(journal.lines(start))


def test_reader_yields_complete_lines_only(tmp_path: Path) -> None:
    """An unterminated last line is not yielded; offsets are where each line starts."""
    path = tmp_path / "events.jsonl"
    first, second = hello(), spend(2, 1)
    path.write_bytes(first + second + b'{"seq":3')
    assert _lines(path) == [(0, first), (len(first), second)]
    assert _lines(path, len(first)) == [(len(first), second)]


journal_bytes = st.lists(
    st.sampled_from([b"\n", b"\r", b"\r\n", b"{}", b"line"]) | st.binary(max_size=12), max_size=40
).map(b"".join)


@settings(max_examples=400)
@given(
    content=journal_bytes,
    start=st.integers(0, 40),
    read_max=st.integers(1, 70),
    limit=st.integers(2, 48),
)
def test_reader_cuts_any_bytes_into_their_lines(
    content: bytes, start: int, read_max: int, limit: int
) -> None:
    """Any bytes (carriage returns, empty lines, no newline at all), read from any offset in reads
    of any size, with a small line limit: the reader yields each line that ends in a newline, in
    order and at its offset, every one no longer than the limit as its bytes; a longer one perhaps
    as a `MalformedLine` (`line_too_long`) with its size and sha256; an unterminated rest only when it reached the limit,
    reported and never consumed."""
    start = min(start, len(content))

    def read(length: int, offset: int) -> bytes:
        return content[offset : offset + min(length, read_max)]

    with mock.patch.object(_journal, "LINE_BYTES_MAX", limit):
        found = list(complete_lines(read, start))
    position = start
    for index, (offset, item) in enumerate(found):
        assert offset == position
        if isinstance(item, MalformedLine) and not item.terminated:
            assert index == len(found) - 1
            assert b"\n" not in content[offset:]
            assert len(content) - offset >= limit
            return
        size = item.size_bytes if isinstance(item, MalformedLine) else len(item)
        whole = content[offset : offset + size]
        assert whole.endswith(b"\n")
        assert whole.count(b"\n") == 1
        if isinstance(item, MalformedLine):
            assert size > limit
            assert item.line_sha256 == hashlib.sha256(whole).digest()
        else:
            assert item == whole
        position += size
    rest = content[position:]
    assert b"\n" not in rest
    assert len(rest) < limit


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
    assert isinstance(too_long, MalformedLine)
    assert too_long.size_bytes == len(big)
    assert too_long.line_sha256 == hashlib.sha256(big).digest()
    assert found[2][1] == after


def test_over_long_unterminated_line_is_reported_not_consumed(tmp_path: Path) -> None:
    """An over-long line without its newline is reported, flagged unterminated, not consumed."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(hello() + b"{" + b"q" * (LINE_BYTES_MAX + 10))
    found = _lines(path)
    assert isinstance(found[-1][1], MalformedLine)
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


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(
        st.binary(max_size=40).map(lambda body: body.replace(b"\n", b"") + b"\n"),
        min_size=1,
        max_size=12,
    ),
    after=st.integers(min_value=0, max_value=11),
    news=st.binary(max_size=60),
    damage=st.booleans(),
)
def test_a_hint_read_ahead_reads_what_a_hint_and_its_lines_read(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[bytes],
    after: int,
    news: bytes,
    damage: bool,
) -> None:
    """The hint's check that also reads the news past it answers as the check alone does, and the
    lines from the hint are the file's, whatever the lines, the news and a hint gone stale."""
    path = tmp_path_factory.mktemp("ahead") / "events.jsonl"
    after = min(after, len(lines) - 1)
    content = b"".join(lines) + news
    path.write_bytes(content)
    offset = len(b"".join(lines[: after + 1]))
    line = lines[after]
    digest = hashlib.sha256(line + b"!" if damage else line).digest()
    hint = Hint(offset, len(line), digest, file_identity(path.stat()))
    with Journal(path) as journal:
        expected = (journal.verify_hint(hint), list(journal.lines(offset)), list(journal.lines(0)))
    with Journal(path) as journal:
        verified = journal.verify_hint(hint, read_ahead=True)
        assert (verified, list(journal.lines(offset)), list(journal.lines(0))) == expected
    assert expected[0] is not damage


def _journal_with_a_hint(path: Path, news: bytes) -> tuple[Hint, bytes]:
    """A journal of a hello and a spend, then `news`, at `path`; the hint just past the spend, and
    the bytes before it."""
    first, second = hello(), spend(2, 1)
    path.write_bytes(first + second + news)
    hint = Hint(
        len(first + second),
        len(second),
        hashlib.sha256(second).digest(),
        file_identity(path.stat()),
    )
    return hint, first + second


def test_a_hint_and_its_news_cost_one_read(tmp_path: Path) -> None:
    """A book with a line of news: its size is the one taken at open, and the hint's line and the
    news come in one `pread`; the end is known from that read coming back short."""
    path = tmp_path / "events.jsonl"
    news = spend(3, 2)
    hint, before = _journal_with_a_hint(path, news)
    with Journal(path) as journal, mock.patch("os.pread", wraps=os.pread) as pread:
        assert journal.size_at_open == len(before + news)
        assert journal.verify_hint(hint, read_ahead=True)
        assert list(journal.lines(hint.offset)) == [(hint.offset, news)]
        assert pread.call_count == 1
        assert journal.bytes_read == len(b"\n" + spend(2, 1) + news)


def test_lines_appended_after_a_hint_read_to_the_end_are_read_by_the_next_walk(
    tmp_path: Path,
) -> None:
    """The read ahead that reached the end answers "nothing more" to the walk made with it only:
    a journal walked again later (as a rebuild walks it) reads the lines appended since."""
    path = tmp_path / "events.jsonl"
    news, later = spend(3, 2), spend(4, 3)
    hint, _ = _journal_with_a_hint(path, news)
    with Journal(path) as journal:
        assert journal.verify_hint(hint, read_ahead=True)
        assert list(journal.lines(hint.offset)) == [(hint.offset, news)]
        with path.open("ab") as out:
            out.write(later)
        end = hint.offset + len(news)
        assert list(journal.lines(end)) == [(end, later)]
        assert list(journal.lines(hint.offset)) == [(hint.offset, news), (end, later)]


@pytest.mark.parametrize("read_ahead", [False, True])
def test_lines_appended_after_the_open_are_read_past_the_size_it_saw(
    tmp_path: Path, read_ahead: bool
) -> None:
    """Reads ask for the size the file had when opened and `READ_PAST_SIZE_BYTES` past it (a
    large buffer costs more than a small book's read): a file that grew by more than that since
    is still read to its end, in one walk, whether or not the hint's check read ahead."""
    path = tmp_path / "events.jsonl"
    hint, _ = _journal_with_a_hint(path, b"")
    appended = [spend(seq, seq) for seq in range(3, 3 + 3 * READ_PAST_SIZE_BYTES // 40)]
    with Journal(path) as journal:
        with path.open("ab") as out:
            out.write(b"".join(appended))
        assert sum(map(len, appended)) > 2 * READ_PAST_SIZE_BYTES
        assert journal.verify_hint(hint, read_ahead=read_ahead)
        assert [line for _, line in journal.lines(hint.offset)] == appended


# -- integers past 64 bits, in every lane ------------------------------------------------------

past_64_bits = (
    st.integers(2**63, 2**64 - 1)  # orjson reads these as ints: the fast lane sees a canonical line
    | st.integers(2**64, 10**30)  # and these as floats: no line orjson writes back
    | st.integers(-(10**30), -(2**63) - 1)
)
within_64_bits = st.integers(-(2**63), 2**63 - 1)


@pytest.mark.usefixtures("fresh_skeletons")
@given(
    data=closed_data,
    wide=past_64_bits,
    narrow=within_64_bits,
    where=st.sampled_from(["data", "nested", "phase"]),
)
def test_an_integer_past_64_bits_is_refused_by_every_lane(
    data: tuple[str, dict[str, object]], wide: int, narrow: int, where: str
) -> None:
    """A field this reader does not know holding an integer past signed 64 bits makes the line
    malformed in the memo's lane (its skeleton learned from the line without the field), the
    emitter-shaped lane and the precise judge alike; the same field within 64 bits is read."""
    kind, known = data

    def with_field(value: int) -> bytes:
        fields = json.loads(json.dumps(known))
        if where == "phase" and kind == "progress" and fields["phases"]:
            next(iter(fields["phases"].values()))["eta_s"] = value
        elif where == "nested":
            fields["x"] = [{"y": value}]
        else:
            fields["x"] = value
        return (
            json.dumps(
                {"seq": 2, "type": kind, "time": T, "data": fields},
                separators=(",", ":"),
                ensure_ascii=False,
            ).encode()
            + b"\n"
        )

    plain = orjson.dumps({"seq": 2, "type": kind, "time": T, "data": known}) + b"\n"
    decode_line(plain)  # its skeleton is learned
    refused_line = with_field(wide)
    with refused("integer_too_wide"):
        decode_line(refused_line)
    with refused("integer_too_wide"):
        decode_precisely(refused_line, DecoderMemo())
    read = with_field(narrow)
    assert decode_line(read) == decode_precisely(read, DecoderMemo())

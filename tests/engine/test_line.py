"""The one encoder of a journal line: round trip, byte stability, the 1 MiB bound, refusals."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine_events._decode import decode_line
from engine_events._events import (
    BankStop,
    Ceiling,
    Event,
    Finished,
    Hello,
    PhaseCount,
    Progress,
    Spend,
    UnitDone,
)
from engine_events._line import LINE_BYTES_MAX, encode_line, format_time
from engine_events.errors import EventError, LineTooLong, MoneyError

T = "2026-11-30T02:08:57.213Z"
TIME_SHAPE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
MICRO_USD_MAX = 2**63 - 1

texts = st.text(min_size=1, max_size=40)
counts = st.integers(min_value=0, max_value=2**63 - 1)
money = st.integers(min_value=0, max_value=MICRO_USD_MAX)
seqs = st.integers(min_value=1, max_value=2**63 - 1)
times = st.datetimes(
    min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2200, 1, 1), timezones=st.just(dt.UTC)
).map(format_time)

events: st.SearchStrategy[Event] = st.one_of(
    st.builds(
        Hello,
        engine_run_id=texts,
        book_id=texts,
        chunker_version=st.text(max_size=10),
        stream_version=st.from_regex(r"1\.[0-9]{1,2}", fullmatch=True),
    ),
    st.builds(
        Progress,
        phases=st.dictionaries(texts, st.builds(PhaseCount, done=counts, total=counts), max_size=5),
    ),
    st.builds(UnitDone, unit=texts, index=counts),
    st.builds(BankStop, signature=texts),
    st.builds(Ceiling, shortfall_micro_usd=money, halted=st.booleans()),
    st.builds(Spend, committed_micro_usd=money),
    st.builds(
        Finished,
        outcome=texts,
        exit_code=st.integers(0, 255),
        units_done=counts,
        units_total=counts,
        committed_micro_usd=money,
        stop=st.sampled_from([None, "soft", "hard"]),
        refusal=st.none() | texts,
    ),
)


@given(seqs, events, times)
def test_round_trip(seq: int, event: Event, time: str) -> None:
    """Decoding an encoded event gives back its seq, type, time and exactly `event.data()`."""
    seq = seq if event.type != "hello" else 1
    line = decode_line(encode_line(seq, event, time))
    assert (line.seq, line.type, line.time, line.data) == (seq, event.type, time, event.data())


@given(seqs, events, times)
def test_bytes_are_stable_and_canonical(seq: int, event: Event, time: str) -> None:
    """The same event encodes to the same bytes: compact, keys seq,type,time,data, one `\\n`."""
    raw = encode_line(seq, event, time)
    assert raw == encode_line(seq, event, time)
    assert raw.endswith(b"\n")
    assert raw.count(b"\n") == 1
    assert b"\r" not in raw
    body = raw[:-1]
    value = orjson.loads(body)
    assert list(value) == ["seq", "type", "time", "data"]
    assert list(value["data"]) == list(event.data())
    assert orjson.dumps(value) == body  # compact: no whitespace anywhere
    assert body.startswith(b'{"seq":' + str(seq).encode() + b',"type":"')
    raw.decode("utf-8")  # valid UTF-8, no byte-order mark
    assert not raw.startswith(b"\xef\xbb\xbf")


def sized_unit_line(size_bytes: int, filler: str = "u") -> tuple[UnitDone, bytes | None]:
    """A unit_done event whose line is `size_bytes` long, and the line (None if refused)."""
    base = len(encode_line(2, UnitDone(unit=filler, index=7), T))
    filler_bytes = len(filler.encode())
    extra = size_bytes - base
    assert extra % filler_bytes == 0
    event = UnitDone(unit=filler * (1 + extra // filler_bytes), index=7)
    try:
        return event, encode_line(2, event, T)
    except LineTooLong:
        return event, None


def test_line_of_exactly_the_limit_is_accepted() -> None:
    """A line of exactly LINE_BYTES_MAX bytes, newline included, is encoded and decodes back."""
    event, raw = sized_unit_line(LINE_BYTES_MAX)
    assert raw is not None
    assert len(raw) == LINE_BYTES_MAX
    assert decode_line(raw).data == event.data()


def test_line_one_byte_over_the_limit_is_refused() -> None:
    """One byte more than LINE_BYTES_MAX raises LineTooLong with both sizes."""
    event, _ = sized_unit_line(LINE_BYTES_MAX + 1)
    with pytest.raises(LineTooLong) as caught:
        encode_line(2, event, T)
    assert caught.value.size_bytes == LINE_BYTES_MAX + 1
    assert caught.value.limit_bytes == LINE_BYTES_MAX
    assert isinstance(caught.value, EventError)


def test_limit_counts_encoded_bytes_not_characters() -> None:
    """The bound is on UTF-8 bytes: two-byte characters reach it with half as many characters."""
    event, raw = sized_unit_line(LINE_BYTES_MAX, filler="é")
    assert raw is not None
    assert len(raw) == LINE_BYTES_MAX
    assert len(event.unit) < LINE_BYTES_MAX // 2
    over = UnitDone(unit=event.unit + "é", index=7)
    with pytest.raises(LineTooLong):
        encode_line(2, over, T)


def test_limit_applies_to_progress_phase_names() -> None:
    """A progress snapshot whose phase names pass 1 MiB is refused like any other line."""
    phases = {f"phase-{i:06d}-" + "x" * 1000: PhaseCount(done=1, total=2) for i in range(1100)}
    with pytest.raises(LineTooLong):
        encode_line(2, Progress(phases=phases), T)


@given(st.text(min_size=1, max_size=300).map(lambda s: s * 4000))
def test_encoder_never_emits_a_line_over_the_limit(unit: str) -> None:
    """For any unit id, the encoder returns at most LINE_BYTES_MAX bytes or raises LineTooLong."""
    try:
        raw = encode_line(2, UnitDone(unit=unit, index=0), T)
    except LineTooLong as error:
        assert error.size_bytes > LINE_BYTES_MAX
    else:
        assert len(raw) <= LINE_BYTES_MAX


BAD_MONEY: list[Any] = [1.5, 12.0, -1, True, False, "12", "null", None, Decimal("12"), 2**63]


@pytest.mark.parametrize("value", BAD_MONEY, ids=repr)
def test_money_fields_refuse_anything_but_non_negative_int(value: Any) -> None:
    """Every money field refuses floats, negatives, bools, strings, None and Decimals."""
    with pytest.raises(MoneyError):
        Spend(committed_micro_usd=value)
    with pytest.raises(MoneyError):
        Ceiling(shortfall_micro_usd=value)
    with pytest.raises(MoneyError):
        Finished(
            outcome="clean", exit_code=0, units_done=0, units_total=0, committed_micro_usd=value
        )


FINISHED_OK: dict[str, Any] = {
    "outcome": "x",
    "exit_code": 0,
    "units_done": 0,
    "units_total": 0,
    "committed_micro_usd": 0,
}
HELLO_OK: dict[str, Any] = {"engine_run_id": "r", "book_id": "b", "chunker_version": "c"}
BAD_FIELDS: list[tuple[type[Any], dict[str, Any]]] = [
    (Hello, {**HELLO_OK, "engine_run_id": ""}),
    (Hello, {**HELLO_OK, "engine_run_id": 7}),
    (Hello, {**HELLO_OK, "book_id": ""}),
    (Hello, {**HELLO_OK, "chunker_version": None}),
    (UnitDone, {"unit": "", "index": 0}),
    (UnitDone, {"unit": 3, "index": 0}),
    (UnitDone, {"unit": "u", "index": -1}),
    (UnitDone, {"unit": "u", "index": True}),
    (UnitDone, {"unit": "u", "index": 1.0}),
    (UnitDone, {"unit": "u", "index": "1"}),
    (PhaseCount, {"done": -1, "total": 1}),
    (PhaseCount, {"done": 1, "total": False}),
    (Progress, {"phases": {"draft": {"done": 1, "total": 2}}}),
    (Progress, {"phases": {3: PhaseCount(done=1, total=2)}}),
    (BankStop, {"signature": ""}),
    (Ceiling, {"shortfall_micro_usd": 1, "halted": "yes"}),
    (Ceiling, {"shortfall_micro_usd": 1, "scope": "run"}),
    (Finished, {**FINISHED_OK, "outcome": ""}),
    (Finished, {**FINISHED_OK, "exit_code": 256}),
    (Finished, {**FINISHED_OK, "exit_code": -1}),
    (Finished, {**FINISHED_OK, "exit_code": True}),
    (Finished, {**FINISHED_OK, "exit_code": 4.0}),
    (Finished, {**FINISHED_OK, "units_done": -2}),
    (Finished, {**FINISHED_OK, "stop": "gentle"}),
    (Finished, {**FINISHED_OK, "refusal": ""}),
]


@pytest.mark.parametrize(("kind", "fields"), BAD_FIELDS, ids=lambda v: getattr(v, "__name__", None))
def test_events_refuse_bad_fields(kind: type[Any], fields: dict[str, Any]) -> None:
    """An event with a field of the wrong type or range raises EventError when it is built."""
    with pytest.raises(EventError):
        kind(**fields)


def test_the_valid_fields_used_above_are_accepted() -> None:
    """The base fields of the refusals are valid, so each refusal is caused by its one bad field."""
    Hello(**HELLO_OK)
    Finished(**FINISHED_OK)


@pytest.mark.parametrize("seq", [0, -1, True, 1.0, "1", None])
def test_encoder_refuses_a_bad_seq(seq: Any) -> None:
    """The encoder refuses a seq that is not an integer >= 1."""
    with pytest.raises(EventError):
        encode_line(seq, Spend(committed_micro_usd=1), T)


offsets = st.integers(min_value=-23 * 60, max_value=23 * 60).map(
    lambda minutes: dt.timezone(dt.timedelta(minutes=minutes))
)


@given(
    st.datetimes(
        min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2200, 1, 1), timezones=offsets
    )
)
def test_format_time_is_utc_with_milliseconds(moment: dt.datetime) -> None:
    """format_time gives `YYYY-MM-DDTHH:MM:SS.mmmZ` in UTC, the moment truncated to milliseconds."""
    text = format_time(moment)
    assert TIME_SHAPE.fullmatch(text)
    back = dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    assert dt.timedelta(0) <= moment - back < dt.timedelta(milliseconds=1)


def test_format_time_example() -> None:
    """The example of the contract: an offset time becomes its UTC instant with a `Z`."""
    moment = dt.datetime(2026, 11, 30, 5, 8, 57, 213999, tzinfo=dt.timezone(dt.timedelta(hours=3)))
    assert format_time(moment) == T


@given(st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2200, 1, 1)))
def test_format_time_refuses_naive_datetimes(moment: dt.datetime) -> None:
    """A datetime without a time zone is refused: its instant is unknown."""
    with pytest.raises(EventError):
        format_time(moment)


@given(st.text(max_size=30))
def test_encoder_refuses_a_time_that_readers_refuse(time: str) -> None:
    """The encoder never emits a line its own reader would refuse for a badly shaped `time`."""
    try:
        raw = encode_line(2, Spend(committed_micro_usd=1), time)
    except EventError:
        return
    decode_line(raw)


@given(st.text(min_size=1, max_size=10))
def test_hello_refuses_a_stream_version_that_readers_refuse(version: str) -> None:
    """A hello is built only with a `MAJOR.MINOR` stream_version that readers can parse."""
    try:
        event = Hello(engine_run_id="r", book_id="b", chunker_version="c", stream_version=version)
    except EventError:
        return
    decode_line(encode_line(1, event, T))

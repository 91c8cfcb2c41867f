"""The one encoder of a journal line: round trip, byte stability, the 1 MiB bound, refusals.

The events refuse, when they are built, every value a reader would refuse: strings over their byte
bounds or holding U+0000, a phase with done > total; the encoder refuses an impossible time.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar

import orjson
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from engine_events import ExitCode
from engine_events._events import (
    IDENTIFIER_BYTES_MAX,
    TEXT_BYTES_MAX,
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
from engine_events.errors import EventError, LineTooLong, MalformedLine, MoneyError
from engine_events.readers.decode import decode_line

T = "2026-11-30T02:08:57.213Z"
TIME_SHAPE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
MICRO_USD_MAX = 2**63 - 1

# Any character a line can carry: every code point but U+0000 and the lone surrogates.
characters = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
texts = st.text(characters, min_size=1, max_size=40)
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
        chunker_version=st.text(characters, max_size=10),
        stream_version=st.from_regex(r"1\.[0-9]{1,2}", fullmatch=True),
    ),
    st.builds(
        Progress,
        phases=st.dictionaries(
            texts,
            counts.flatmap(
                lambda total: st.builds(PhaseCount, st.integers(0, total), st.just(total))
            ),
            max_size=5,
        ),
    ),
    st.builds(UnitDone, unit=texts, index=counts),
    st.builds(BankStop, signature=texts),
    st.builds(Ceiling, shortfall_micro_usd=money, halted=st.booleans()),
    st.builds(Spend, committed_micro_usd=money),
    st.builds(
        Finished,
        exit_code=st.sampled_from(ExitCode),
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


@dataclass(frozen=True)
class Padded(Event):
    """A host-defined event type (a newer minor's, say) whose one free field may be any size."""

    type: ClassVar[str] = "heartbeat"
    pad: str

    def data(self) -> dict[str, Any]:
        return {"pad": self.pad}


def sized_line(size_bytes: int, filler: str = "u") -> tuple[Padded, bytes | None]:
    """A heartbeat event whose line is `size_bytes` long, and the line (None if refused)."""
    base = len(encode_line(2, Padded(pad=filler), T))
    filler_bytes = len(filler.encode())
    extra = size_bytes - base
    ascii_prefix = "a" * (extra % filler_bytes)
    event = Padded(pad=ascii_prefix + filler * (1 + extra // filler_bytes))
    try:
        return event, encode_line(2, event, T)
    except LineTooLong:
        return event, None


def test_line_of_exactly_the_limit_is_accepted() -> None:
    """A line of exactly LINE_BYTES_MAX bytes, newline included, is encoded and decodes back."""
    event, raw = sized_line(LINE_BYTES_MAX)
    assert raw is not None
    assert len(raw) == LINE_BYTES_MAX
    assert decode_line(raw).data == event.data()


def test_line_one_byte_over_the_limit_is_refused() -> None:
    """One byte more than LINE_BYTES_MAX raises LineTooLong with both sizes."""
    event, _ = sized_line(LINE_BYTES_MAX + 1)
    with pytest.raises(LineTooLong) as caught:
        encode_line(2, event, T)
    assert caught.value.size_bytes == LINE_BYTES_MAX + 1
    assert caught.value.limit_bytes == LINE_BYTES_MAX
    assert isinstance(caught.value, EventError)


def test_limit_counts_encoded_bytes_not_characters() -> None:
    """The bound is on UTF-8 bytes: two-byte characters reach it with half as many characters."""
    event, raw = sized_line(LINE_BYTES_MAX, filler="é")
    assert raw is not None
    assert len(raw) == LINE_BYTES_MAX
    assert len(event.pad) < LINE_BYTES_MAX // 2
    over = Padded(pad=event.pad + "é")
    with pytest.raises(LineTooLong):
        encode_line(2, over, T)


def many_phases(count: int, name_chars: int = 240) -> dict[str, PhaseCount]:
    return {f"{i:07d}-" + "x" * (name_chars - 8): PhaseCount(done=1, total=2) for i in range(count)}


def test_limit_applies_to_progress_phase_names() -> None:
    """A progress snapshot of many phases, each name within its bound, may still pass 1 MiB."""
    with pytest.raises(LineTooLong):
        encode_line(2, Progress(phases=many_phases(4400)), T)
    assert len(encode_line(2, Progress(phases=many_phases(3000)), T)) < LINE_BYTES_MAX


@given(st.integers(1, 6000), st.integers(8, IDENTIFIER_BYTES_MAX))
def test_encoder_never_emits_a_line_over_the_limit(count: int, name_chars: int) -> None:
    """For any number and size of phases, the encoder returns at most LINE_BYTES_MAX bytes or
    raises LineTooLong."""
    try:
        raw = encode_line(2, Progress(phases=many_phases(count, name_chars)), T)
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
        Finished(exit_code=ExitCode.CLEAN, units_done=0, units_total=0, committed_micro_usd=value)


FINISHED_OK: dict[str, Any] = {
    "exit_code": ExitCode.CLEAN,
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
    (Finished, {**FINISHED_OK, "exit_code": 256}),
    (Finished, {**FINISHED_OK, "exit_code": -1}),
    (Finished, {**FINISHED_OK, "exit_code": True}),
    (Finished, {**FINISHED_OK, "exit_code": 4.0}),
    (Finished, {**FINISHED_OK, "exit_code": 0}),  # a code's value, not the code
    (Finished, {**FINISHED_OK, "units_done": -2}),
    (Finished, {**FINISHED_OK, "stop": "gentle"}),
    (Finished, {**FINISHED_OK, "refusal": ""}),
    (Hello, {**HELLO_OK, "engine_run_id": "r" * 256}),
    (Hello, {**HELLO_OK, "book_id": "é" * 128}),
    (Hello, {**HELLO_OK, "chunker_version": "c\x00"}),
    (Hello, {**HELLO_OK, "stream_version": "1." + "0" * 254}),
    (UnitDone, {"unit": "\x00", "index": 0}),
    (UnitDone, {"unit": "\ud800", "index": 0}),
    (PhaseCount, {"done": 3, "total": 2}),
    (Progress, {"phases": {"x" * 256: PhaseCount(done=1, total=2)}}),
    (Progress, {"phases": {"dr\x00ft": PhaseCount(done=1, total=2)}}),
    (BankStop, {"signature": "s" * 4097}),
    (BankStop, {"signature": "sig\x00"}),
    (Finished, {**FINISHED_OK, "refusal": "€" * 86}),
    (Finished, {**FINISHED_OK, "refusal": "\x00"}),
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


@pytest.mark.parametrize("outcome", ["clean", "ceiling", "", "o" * 256])
def test_finished_takes_its_outcome_from_its_exit_code_alone(outcome: str) -> None:
    """`finished.outcome` is the exit code's name, never given beside the code: the two cannot
    disagree."""
    with pytest.raises(TypeError):
        Finished(**FINISHED_OK, outcome=outcome)
    for code in ExitCode:
        finished = Finished(**{**FINISHED_OK, "exit_code": code})
        assert finished.data()["outcome"] == finished.outcome == code.name.lower()
        assert finished.data()["exit_code"] == code.value


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


def _edited(text: str, index: int, edit: str, character: str) -> str:
    """`text` with one character at `index` replaced, dropped, or `character` put before it."""
    index %= len(text) + 1
    if edit == "replace":
        return text[:index] + character + text[index + 1 :]
    if edit == "drop":
        return text[:index] + text[index + 1 :]
    return text[:index] + character + text[index:]


# Characters a near miss is made of: other digits (Arabic-Indic, fullwidth), the separators of
# the shapes nearby (space for T, lower-case z, a sign, a comma), and a line break.
near_characters = st.sampled_from("0159:-+.,TZtz \n\u0663\uff11") | characters
edits = st.sampled_from(["replace", "drop", "insert"])


# A `time` near the line's shape: its shape, each field a little past its range now and then
# (month 13, day 31 of a 30-day month, hour 24, second 60, year 0), or a real instant one
# character off it. Most are real instants, which the encoder must accept and its reader read.
near_times = st.one_of(
    st.tuples(
        st.integers(0, 9999),
        st.integers(1, 13),
        st.integers(1, 31),
        st.integers(0, 24),
        st.integers(0, 59),
        st.integers(0, 60),
    ).map(lambda fields: "{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}.000Z".format(*fields)),
    times,
    st.builds(_edited, times, st.integers(0, 24), edits, near_characters),
)


@given(near_times)
def test_encoder_refuses_a_time_that_readers_refuse(time: str) -> None:
    """The encoder never emits a line its own reader would refuse for a badly shaped `time`."""
    try:
        raw = encode_line(2, Spend(committed_micro_usd=1), time)
    except EventError:
        event("refused by the encoder")
        return
    event("accepted by the encoder: read back")
    decode_line(raw)


# A `stream_version` near `MAJOR.MINOR`: the shape with leading zeros and long numbers, or it
# one character off (a sign, a space, a third part, a non-ASCII digit, a line break after it).
near_versions = st.one_of(
    st.builds(
        "{}.{}".format,
        st.from_regex(r"[0-9]{1,6}", fullmatch=True),
        st.from_regex(r"[0-9]{1,6}", fullmatch=True),
    ),
    st.builds(
        _edited,
        st.builds("{}.{}".format, st.integers(0, 99), st.integers(0, 99)),
        st.integers(0, 6),
        edits,
        near_characters,
    ),
)


@given(near_versions)
def test_hello_refuses_a_stream_version_that_readers_refuse(version: str) -> None:
    """A hello is built only with a `MAJOR.MINOR` stream_version that readers can parse."""
    try:
        hello = Hello(engine_run_id="r", book_id="b", chunker_version="c", stream_version=version)
    except EventError:
        event("refused by the hello")
        return
    event("accepted by the hello: read back")
    decode_line(encode_line(1, hello, T))


STRING_FIELDS: list[tuple[str, int, Callable[[str], Event | PhaseCount]]] = [
    (
        "engine_run_id",
        IDENTIFIER_BYTES_MAX,
        lambda v: Hello(engine_run_id=v, book_id="b", chunker_version="c"),
    ),
    (
        "book_id",
        IDENTIFIER_BYTES_MAX,
        lambda v: Hello(engine_run_id="r", book_id=v, chunker_version="c"),
    ),
    (
        "chunker_version",
        IDENTIFIER_BYTES_MAX,
        lambda v: Hello(engine_run_id="r", book_id="b", chunker_version=v),
    ),
    ("unit", IDENTIFIER_BYTES_MAX, lambda v: UnitDone(unit=v, index=0)),
    (
        "phase name",
        IDENTIFIER_BYTES_MAX,
        lambda v: Progress(phases={v: PhaseCount(done=0, total=0)}),
    ),
    ("signature", TEXT_BYTES_MAX, lambda v: BankStop(signature=v)),
    ("refusal", IDENTIFIER_BYTES_MAX, lambda v: Finished(**{**FINISHED_OK, "refusal": v})),
]
"""Every string an event takes from its host, with its bound in UTF-8 bytes. (`stream_version` is
bounded too, but its shape `MAJOR.MINOR` leaves only digits to vary: tested on its own below;
`ceiling.scope` can only be `"book"`.)"""

WIDE = st.sampled_from(["é", "€", "😀", "\u07ff", "\U0010ffff"])
"""Characters of 2, 3 and 4 bytes of UTF-8: they put the byte bound in the middle of a character."""


@st.composite
def near_the_bound(draw: st.DrawFn, limit_bytes: int) -> str:
    """A string whose UTF-8 size is within a few bytes of `limit_bytes`, multi-byte characters at
    the edge (ASCII filler and a tail of wide characters, in either order)."""
    tail = draw(st.text(WIDE | characters, min_size=1, max_size=6))
    filler = "a" * draw(st.integers(max(0, limit_bytes - 24), limit_bytes + 4))
    return filler + tail if draw(st.booleans()) else tail + filler


@pytest.mark.parametrize(
    ("field", "limit_bytes", "build"), STRING_FIELDS, ids=[name for name, _, _ in STRING_FIELDS]
)
@given(data=st.data())
def test_strings_are_refused_iff_over_their_byte_bound(
    field: str, limit_bytes: int, build: Callable[[str], Event], data: st.DataObject
) -> None:
    """A string is accepted iff its UTF-8 form fits the field's bound; an accepted one is read
    back by the reader, so the bound the writer applies is the reader's."""
    value = data.draw(near_the_bound(limit_bytes))
    fits = len(value.encode()) <= limit_bytes
    try:
        event = build(value)
    except EventError as error:
        assert not fits, error
        assert field in str(error)
        return
    assert fits
    decode_line(encode_line(1 if event.type == "hello" else 2, event, T))


@pytest.mark.parametrize(
    ("field", "limit_bytes", "build"), STRING_FIELDS, ids=[name for name, _, _ in STRING_FIELDS]
)
@given(text=st.text(characters, max_size=20), data=st.data())
def test_strings_holding_nul_are_refused(
    field: str, limit_bytes: int, build: Callable[[str], Event], text: str, data: st.DataObject
) -> None:
    """U+0000 anywhere in any string an event takes is refused when the event is built."""
    at = data.draw(st.integers(0, len(text)))
    with pytest.raises(EventError, match="U\\+0000"):
        build(text[:at] + "\x00" + text[at:])


@given(st.integers(0, IDENTIFIER_BYTES_MAX + 4))
def test_stream_version_is_bounded_too(digits: int) -> None:
    """`stream_version` is an identifier like the others: `1.` and its digits fit 255 bytes."""
    version = "1." + "3" * max(1, digits - 2)
    try:
        Hello(engine_run_id="r", book_id="b", chunker_version="c", stream_version=version)
    except EventError:
        assert len(version) > IDENTIFIER_BYTES_MAX
    else:
        assert len(version) <= IDENTIFIER_BYTES_MAX


@given(counts, counts)
def test_phase_count_refuses_done_over_total(done: int, total: int) -> None:
    """A phase's done may reach its total, never pass it."""
    try:
        PhaseCount(done=done, total=total)
    except EventError:
        assert done > total
    else:
        assert done <= total


@dataclass(frozen=True)
class Note(Event):
    """A host-defined event type: its strings are only checked by the encoder."""

    type: ClassVar[str] = "note"
    payload: Any

    def data(self) -> dict[str, Any]:
        return {"payload": self.payload}


@pytest.mark.parametrize(
    "payload",
    ["\x00", "a\x00b", ["x", {"y": "\x00"}], {"k\x00": 1}, {"deep": [[["\x00"]]]}],
    ids=repr,
)
def test_encoder_refuses_nul_from_a_host_defined_event(payload: Any) -> None:
    """U+0000 anywhere in a host-defined event's data, keys included, is refused by the encoder."""
    with pytest.raises(EventError, match="U\\+0000"):
        encode_line(2, Note(payload=payload), T)


def test_an_escaped_backslash_before_u0000_is_not_nul() -> None:
    """A backslash followed by the text `u0000` is six ordinary characters, not U+0000."""
    unit = "C:\\u0000"  # written on the line as `C:\\\\u0000`
    raw = encode_line(2, UnitDone(unit=unit, index=0), T)
    assert b"\\\\u0000" in raw
    assert decode_line(raw).data["unit"] == unit
    assert decode_line(encode_line(2, Note(payload={"\\u0000": "\\u0000"}), T)).data


IMPOSSIBLE_TIMES = [
    "2026-02-30T00:00:00.000Z",
    "2026-02-29T00:00:00.000Z",
    "2026-04-31T00:00:00.000Z",
    "2026-13-01T00:00:00.000Z",
    "2026-00-10T00:00:00.000Z",
    "2026-11-00T00:00:00.000Z",
    "2026-11-30T24:00:00.000Z",
    "2026-11-30T23:60:00.000Z",
    "2026-11-30T23:59:60.000Z",
    "0000-01-01T00:00:00.000Z",
    "\uff12\uff10\uff12\uff16-11-30T02:08:57.213Z",  # fullwidth digits, which `\\d` matched
    "2026-11-30T02:08:57.\u0968\u0967\u0969Z",  # Devanagari digits
]


@pytest.mark.parametrize("time", IMPOSSIBLE_TIMES)
def test_impossible_times_are_refused_by_encoder_and_reader(time: str) -> None:
    """A time of the right shape that names no real instant is refused by both."""
    with pytest.raises(EventError):
        encode_line(2, Spend(committed_micro_usd=1), time)
    raw = encode_line(2, Spend(committed_micro_usd=1), T).replace(T.encode(), time.encode())
    with pytest.raises(MalformedLine, match="time"):
        decode_line(raw)


def test_a_leap_day_is_a_real_instant() -> None:
    """29 February of a leap year is accepted (and 2000 is a leap year, 2100 is not)."""
    for time in ("2024-02-29T23:59:59.999Z", "2000-02-29T00:00:00.000Z"):
        assert decode_line(encode_line(2, Spend(committed_micro_usd=1), time)).time == time
    with pytest.raises(EventError):
        encode_line(2, Spend(committed_micro_usd=1), "2100-02-29T00:00:00.000Z")


time_fields = st.tuples(
    st.integers(0, 9999),
    st.integers(0, 99),
    st.integers(0, 99),
    st.integers(0, 99),
    st.integers(0, 99),
    st.integers(0, 99),
    st.integers(0, 999),
)


def real_instant(fields: tuple[int, ...]) -> bool:
    try:
        dt.datetime(*fields[:6])
    except ValueError:
        return False
    return True


@given(time_fields)
def test_a_time_is_accepted_iff_it_is_a_real_instant(fields: tuple[int, ...]) -> None:
    """Any digits in the shape of `time`: the encoder and the reader accept exactly the real
    instants (years 1-9999 of the proleptic Gregorian calendar)."""
    year, month, day, hour, minute, second, millis = fields
    time = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{millis:03d}Z"
    line = f'{{"seq":2,"type":"spend","time":"{time}","data":{{"committed_micro_usd":1}}}}\n'
    try:
        encode_line(2, Spend(committed_micro_usd=1), time)
    except EventError:
        encoded = False
    else:
        encoded = True
    try:
        decode_line(line.encode())
    except MalformedLine:
        read = False
    else:
        read = True
    assert encoded == read == real_instant(fields)


@pytest.mark.parametrize("seq", [2**63, 2**64])
def test_encoder_refuses_a_seq_readers_refuse(seq: int) -> None:
    """A seq past 2**63 - 1 fits no reader's integer: the encoder refuses it too."""
    with pytest.raises(EventError):
        encode_line(seq, Spend(committed_micro_usd=1), T)

"""The two sides' decoders reach the same verdict on any line (differential, property-based).

`engine_events` and `platform_ingest` are deployed apart and share no code: each has its own reader.
The vectors pin the verdicts the contract names; this test looks for lines where the two disagree.
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_events._decode import decode_line as engine_decode
from engine_events._decode import require_supported
from engine_events.errors import LineError
from platform_ingest._decode import decode_line as platform_decode
from platform_ingest.errors import LineRefused


def engine_verdict(raw: bytes) -> str:
    try:
        line = engine_decode(raw)
        if line.type == "hello":
            require_supported(line)
    except LineError as error:
        return error.kind
    return "ok"


def platform_verdict(raw: bytes) -> str:
    try:
        platform_decode(raw)
    except LineRefused as error:
        return str(error.kind)
    return "ok"


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=12,
)
TYPES = ["hello", "progress", "unit_done", "bank_stop", "ceiling", "spend", "finished", "other"]
FIELDS = [
    "stream_version", "engine_run_id", "book_id", "chunker_version", "phases", "unit", "index",
    "signature", "halted", "scope", "shortfall_micro_usd", "committed_micro_usd", "outcome",
    "exit_code", "stop", "refusal", "volume", "money",
]
TIME = "2026-11-30T02:08:57.213Z"


@st.composite
def near_valid_lines(draw: st.DrawFn) -> bytes:
    """Lines shaped like the contract's, with fields of any JSON value: where verdicts split."""
    kind = draw(st.sampled_from(TYPES))
    data = draw(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6))
    if kind == "hello" and draw(st.booleans()):
        data.update(
            stream_version=draw(st.sampled_from(["1.3", "1.0", "2.0", "0.1", "1", "x.y", "10.3"])),
            engine_run_id=draw(st.sampled_from(["r", ""])),
            book_id="b",
            chunker_version="c",
        )
    line = {
        "seq": draw(st.one_of(st.integers(-1, 3), st.just(2**63), json_scalars)),
        "type": kind,
        "time": draw(st.sampled_from([TIME, "2026-11-30T02:08:57Z", 7])),
        "data": data,
    }
    return orjson.dumps(line) + b"\n"


@given(near_valid_lines())
def test_verdicts_agree_on_contract_shaped_lines(raw: bytes) -> None:
    """On lines shaped like the contract's, both readers accept or refuse, for the same reason."""
    assert engine_verdict(raw) == platform_verdict(raw), raw


@given(st.binary(max_size=200).map(lambda b: b + b"\n"))
def test_verdicts_agree_on_arbitrary_bytes(raw: bytes) -> None:
    """On any bytes, both readers reach the same verdict (nearly always: malformed)."""
    assert engine_verdict(raw) == platform_verdict(raw), raw


@pytest.mark.parametrize("depth", [1, 63, 64, 65, 200, 1100])
def test_verdicts_agree_on_nesting_depth(depth: int) -> None:
    """Deep nesting inside an unknown event's data: both sides draw the line at the same depth."""
    nested = "[" * depth + "]" * depth
    raw = f'{{"seq":2,"type":"other","time":"{TIME}","data":{{"x":{nested}}}}}\n'.encode()
    assert engine_verdict(raw) == platform_verdict(raw)


@settings(max_examples=20_000)
@pytest.mark.slow
@given(near_valid_lines() | st.binary(max_size=400).map(lambda b: b + b"\n"))
def test_verdicts_agree_thoroughly(raw: bytes) -> None:
    """The same differential check at a fuzzing budget (run with --run-slow)."""
    assert engine_verdict(raw) == platform_verdict(raw), raw

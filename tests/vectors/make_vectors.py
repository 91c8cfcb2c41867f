"""Writes the shared test-vector corpus: `lines.json`, `journals/*.jsonl` and `journals.json`.

Both sides read these files and must reach the verdicts written here: the engine's `verify` and the
platform's decoder and tailer. The files are committed; `test_vectors_are_current` checks that running
this script again changes nothing, so an edit here is an edit of the contract, made on purpose.

Run: python tests/vectors/make_vectors.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
T = "2026-11-30T02:08:57.213Z"
RUN_A = "0b6c1f3e-8a57-4d0b-9a63-2f7c4f0e5a11"
RUN_B = "5d2e9c40-3b1a-4f8e-8c7d-6a9b0c1d2e33"
BOOK = "book-vectors"


def line(seq: int, kind: str, data: dict[str, Any], time: str = T) -> str:
    """A line as the emitter writes it: compact, UTF-8 as it is (only what JSON must is escaped)."""
    return json.dumps(
        {"seq": seq, "type": kind, "time": time, "data": data},
        separators=(",", ":"),
        ensure_ascii=False,
    )


def hello(run: str, version: str = "1.3", book: str = BOOK) -> str:
    data = {
        "stream_version": version,
        "engine_run_id": run,
        "book_id": book,
        "chunker_version": "c1",
    }
    return line(1, "hello", data)


def with_envelope(text: str, **keys: Any) -> str:
    """The line with keys after `data`, as a newer minor may write them."""
    extra = "".join(
        "," + json.dumps(key) + ":" + json.dumps(value, separators=(",", ":"))
        for key, value in keys.items()
    )
    return text[:-1] + extra + "}"


def spend(seq: int, amount: Any) -> str:
    return line(seq, "spend", {"committed_micro_usd": amount})


def finished(seq: int, code: int = 0, outcome: str = "clean", stop: str | None = None) -> str:
    return line(
        seq,
        "finished",
        {
            "outcome": outcome,
            "exit_code": code,
            "stop": stop,
            "refusal": None,
            "volume": {"units_done": 2, "units_total": 2},
            "money": {"committed_micro_usd": 2000},
        },
    )


# Single lines. A verdict is "ok", "malformed" or "unsupported_version".
LINES: list[dict[str, Any]] = [
    {"name": "hello", "line": hello(RUN_A), "verdict": "ok"},
    {"name": "hello_newer_minor", "line": hello(RUN_A, "1.9"), "verdict": "ok"},
    {"name": "hello_older_minor", "line": hello(RUN_A, "1.2"), "verdict": "ok"},
    {"name": "hello_major_2", "line": hello(RUN_A, "2.0"), "verdict": "unsupported_version"},
    {"name": "hello_major_0", "line": hello(RUN_A, "0.9"), "verdict": "unsupported_version"},
    {"name": "hello_version_not_a_version", "line": hello(RUN_A, "one"), "verdict": "malformed"},
    {
        "name": "hello_not_seq_1",
        "line": hello(RUN_A).replace('"seq":1', '"seq":2'),
        "verdict": "malformed",
    },
    {"name": "hello_empty_run_id", "line": hello(""), "verdict": "malformed"},
    {
        "name": "progress",
        "line": line(2, "progress", {"phases": {"draft": {"done": 1, "total": 4}}}),
        "verdict": "ok",
    },
    {
        "name": "progress_negative_count",
        "line": line(2, "progress", {"phases": {"draft": {"done": -1, "total": 4}}}),
        "verdict": "malformed",
    },
    {
        "name": "unit_done",
        "line": line(3, "unit_done", {"unit": "u-0001", "index": 0}),
        "verdict": "ok",
    },
    {
        "name": "unit_done_index_string",
        "line": line(3, "unit_done", {"unit": "u", "index": "0"}),
        "verdict": "malformed",
    },
    {"name": "bank_stop", "line": line(3, "bank_stop", {"signature": "sig-7"}), "verdict": "ok"},
    {
        "name": "ceiling",
        "line": line(3, "ceiling", {"halted": True, "scope": "book", "shortfall_micro_usd": 250}),
        "verdict": "ok",
    },
    {
        "name": "ceiling_1_2_without_shortfall",
        "line": line(3, "ceiling", {"halted": True, "scope": "book"}),
        "verdict": "ok",
    },
    {
        "name": "ceiling_shortfall_float",
        "line": line(3, "ceiling", {"halted": True, "scope": "book", "shortfall_micro_usd": 2.5}),
        "verdict": "malformed",
    },
    {"name": "spend", "line": spend(4, 1250000), "verdict": "ok"},
    {"name": "spend_zero", "line": spend(4, 0), "verdict": "ok"},
    {"name": "spend_float", "line": spend(4, 1.5), "verdict": "malformed"},
    {"name": "spend_integral_float", "line": spend(4, 12.0), "verdict": "malformed"},
    {"name": "spend_string_null", "line": spend(4, "null"), "verdict": "malformed"},
    {"name": "spend_string_number", "line": spend(4, "12"), "verdict": "malformed"},
    {"name": "spend_null", "line": spend(4, None), "verdict": "malformed"},
    {"name": "spend_negative", "line": spend(4, -3), "verdict": "malformed"},
    {"name": "spend_bool", "line": spend(4, True), "verdict": "malformed"},
    {"name": "spend_missing", "line": line(4, "spend", {}), "verdict": "malformed"},
    {"name": "spend_over_int64", "line": spend(4, 2**63), "verdict": "malformed"},
    {"name": "finished", "line": finished(5), "verdict": "ok"},
    {
        "name": "finished_soft_stop",
        "line": finished(5, 5, "graceful_stop", "soft"),
        "verdict": "ok",
    },
    {
        "name": "finished_bad_stop",
        "line": finished(5, 5, "graceful_stop", "gentle"),
        "verdict": "malformed",
    },
    {
        "name": "finished_money_string",
        "line": finished(5).replace('"committed_micro_usd":2000', '"committed_micro_usd":"2000"'),
        "verdict": "malformed",
    },
    {"name": "unknown_type", "line": line(6, "heartbeat", {"anything": [1, 2]}), "verdict": "ok"},
    {
        "name": "unknown_field",
        "line": spend(4, 7).replace("}}", ',"currency":"USD"}}'),
        "verdict": "ok",
    },
    {"name": "not_json", "line": '{"seq":1,"type":', "verdict": "malformed"},
    {"name": "not_an_object", "line": "[1,2,3]", "verdict": "malformed"},
    {"name": "empty_line", "line": "", "verdict": "malformed"},
    {
        "name": "nan",
        "line": '{"seq":4,"type":"spend","time":"' + T + '","data":{"committed_micro_usd":NaN}}',
        "verdict": "malformed",
    },
    {"name": "seq_zero", "line": spend(4, 1).replace('"seq":4', '"seq":0'), "verdict": "malformed"},
    {
        "name": "seq_string",
        "line": spend(4, 1).replace('"seq":4', '"seq":"4"'),
        "verdict": "malformed",
    },
    {
        "name": "seq_float",
        "line": spend(4, 1).replace('"seq":4', '"seq":4.0'),
        "verdict": "malformed",
    },
    {
        "name": "time_without_millis",
        "line": spend(4, 1).replace(T, "2026-11-30T02:08:57Z"),
        "verdict": "malformed",
    },
    {
        "name": "time_with_offset",
        "line": spend(4, 1).replace(T, "2026-11-30T02:08:57.213+00:00"),
        "verdict": "malformed",
    },
    {
        "name": "data_not_object",
        "line": '{"seq":4,"type":"spend","time":"' + T + '","data":7}',
        "verdict": "malformed",
    },
    {
        "name": "deep_nesting",
        "line": line(4, "heartbeat", {}).replace("{}", "[" * 2000 + "]" * 2000),
        "verdict": "malformed",
    },
]

# The rules that bound the line (see docs/reference/stream-format.md, "Bounds and canonical
# form"): every string of a known field within its bound in UTF-8 bytes (identifiers 255, the bank
# signature 4096), no U+0000 anywhere, one compact object with exactly the keys seq, type, time, data
# in that order and no key twice at any depth, a time that names a real instant, done <= total.
IDENTIFIER_BYTES_MAX = 255
TEXT_BYTES_MAX = 4096


def sized(size_bytes: int, char: str = "a") -> str:
    """A string of exactly `size_bytes` bytes of UTF-8: `char` repeated, topped up with ASCII."""
    width = len(char.encode())
    return char * (size_bytes // width) + "a" * (size_bytes % width)


def hello_with(**fields: str) -> str:
    data = {
        "stream_version": "1.3",
        "engine_run_id": RUN_A,
        "book_id": BOOK,
        "chunker_version": "c1",
    }
    data.update(fields)
    return line(1, "hello", data)


def unit_done(unit: str, seq: int = 3) -> str:
    return line(seq, "unit_done", {"unit": unit, "index": 0})


def progress(phases: dict[str, Any]) -> str:
    return line(2, "progress", {"phases": phases})


def finished_with(**fields: Any) -> str:
    data: dict[str, Any] = {
        "outcome": "clean",
        "exit_code": 0,
        "stop": None,
        "refusal": None,
        "volume": {"units_done": 2, "units_total": 2},
        "money": {"committed_micro_usd": 2000},
    }
    data.update(fields)
    return line(5, "finished", data)


SPEND = spend(4, 7)
NUL_ESCAPE = "\\u0000"  # U+0000 as it stands in a line's text (JSON has no other way to write it)
LINES += [
    # String bounds, counted in UTF-8 bytes.
    {"name": "bound_run_id_255", "line": hello_with(engine_run_id=sized(255)), "verdict": "ok"},
    {
        "name": "bound_run_id_256",
        "line": hello_with(engine_run_id=sized(256)),
        "verdict": "malformed",
    },
    {
        "name": "bound_run_id_256_of_a_major_2_hello",
        "line": hello_with(stream_version="2.0", engine_run_id=sized(256)),
        "verdict": "malformed",
    },
    {
        "name": "bound_book_id_255_two_byte",
        "line": hello_with(book_id=sized(255, "é")),
        "verdict": "ok",
    },
    {
        "name": "bound_book_id_256_two_byte",
        "line": hello_with(book_id=sized(256, "é")),
        "verdict": "malformed",
    },
    {
        "name": "bound_chunker_version_256",
        "line": hello_with(chunker_version=sized(256)),
        "verdict": "malformed",
    },
    {
        "name": "bound_stream_version_255",
        "line": hello_with(stream_version="1." + "0" * 253),
        "verdict": "ok",
    },
    {
        "name": "bound_stream_version_256",
        "line": hello_with(stream_version="1." + "0" * 254),
        "verdict": "malformed",
    },
    {
        # Before the bound, a reader turned these digits into an integer and crashed on the
        # interpreter's limit of 4300 digits.
        "name": "bound_stream_version_5000_digits",
        "line": hello_with(stream_version="1" * 5000 + ".3"),
        "verdict": "malformed",
    },
    {"name": "bound_unit_255_three_byte", "line": unit_done(sized(255, "€")), "verdict": "ok"},
    {
        "name": "bound_unit_256_three_byte",
        "line": unit_done(sized(256, "€")),
        "verdict": "malformed",
    },
    {
        "name": "bound_unit_256_four_byte_at_the_edge",
        "line": unit_done("a" * 252 + "😀"),
        "verdict": "malformed",
    },
    {
        "name": "bound_phase_name_255_four_byte",
        "line": progress({sized(255, "😀"): {"done": 1, "total": 2}}),
        "verdict": "ok",
    },
    {
        "name": "bound_phase_name_256",
        "line": progress({sized(256): {"done": 1, "total": 2}}),
        "verdict": "malformed",
    },
    {
        "name": "bound_signature_4096",
        "line": line(3, "bank_stop", {"signature": sized(TEXT_BYTES_MAX, "é")}),
        "verdict": "ok",
    },
    {
        "name": "bound_signature_4097",
        "line": line(3, "bank_stop", {"signature": sized(TEXT_BYTES_MAX + 1, "é")}),
        "verdict": "malformed",
    },
    {
        "name": "bound_ceiling_scope_256",
        "line": line(3, "ceiling", {"halted": True, "scope": sized(256), "shortfall_micro_usd": 1}),
        "verdict": "malformed",
    },
    {
        "name": "bound_outcome_256",
        "line": finished_with(outcome=sized(256)),
        "verdict": "malformed",
    },
    {"name": "bound_refusal_255", "line": finished_with(refusal=sized(255)), "verdict": "ok"},
    {
        "name": "bound_refusal_256",
        "line": finished_with(refusal=sized(256)),
        "verdict": "malformed",
    },
    {
        "name": "bound_not_applied_to_unknown_fields",
        "line": SPEND.replace("}}", ',"note":"' + sized(8000) + '"}}'),
        "verdict": "ok",
    },
    {
        "name": "bound_not_applied_to_unknown_types",
        "line": line(6, "heartbeat", {"unit": sized(8000)}),
        "verdict": "ok",
    },
    # U+0000: Postgres text and jsonb cannot hold it, in any string or key, known or not.
    {"name": "nul_in_unit", "line": unit_done("u\x00"), "verdict": "malformed"},
    {"name": "nul_in_run_id", "line": hello_with(engine_run_id="\x00"), "verdict": "malformed"},
    {
        "name": "nul_in_type",
        "line": SPEND.replace('"spend"', '"sp' + NUL_ESCAPE + 'end"'),
        "verdict": "malformed",
    },
    {
        "name": "nul_in_unknown_field",
        "line": SPEND.replace("}}", ',"note":"' + NUL_ESCAPE + '"}}'),
        "verdict": "malformed",
    },
    {
        "name": "nul_in_a_key",
        "line": SPEND.replace("}}", ',"n' + NUL_ESCAPE + '":1}}'),
        "verdict": "malformed",
    },
    {
        "name": "nul_deep_in_an_unknown_type",
        "line": line(6, "heartbeat", {"x": [{"y": ["\x00"]}]}),
        "verdict": "malformed",
    },
    {
        # A backslash, then the text u0000: six ordinary characters.
        "name": "escaped_backslash_before_u0000",
        "line": unit_done("C:\\u0000"),  # written `C:\\\\u0000`
        "verdict": "ok",
    },
    # One compact object, keys seq, type, time, data in that order, no key twice.
    {"name": "leading_space", "line": " " + SPEND, "verdict": "malformed"},
    {"name": "trailing_space", "line": SPEND + " ", "verdict": "malformed"},
    {
        "name": "space_after_colon",
        "line": SPEND.replace('"seq":4', '"seq": 4'),
        "verdict": "malformed",
    },
    {
        "name": "tab_between_members",
        "line": SPEND.replace(',"type"', ',\t"type"'),
        "verdict": "malformed",
    },
    {"name": "space_inside_a_string", "line": unit_done("unit 1"), "verdict": "ok"},
    {
        "name": "keys_out_of_order",
        "line": '{"type":"spend","seq":4,"time":"' + T + '","data":{"committed_micro_usd":7}}',
        "verdict": "malformed",
    },
    {
        "name": "extra_top_level_key",
        "line": SPEND[:-1] + ',"crc":1}',
        "verdict": "malformed",
    },
    {
        "name": "duplicate_top_level_key",
        "line": SPEND.replace('"seq":4,', '"seq":4,"seq":4,'),
        "verdict": "malformed",
    },
    {
        "name": "duplicate_key_in_data",
        "line": SPEND.replace("}}", ',"committed_micro_usd":7}}'),
        "verdict": "malformed",
    },
    {
        "name": "duplicate_key_deep",
        "line": line(6, "heartbeat", {"x": [{"y": 1}]}).replace('"y":1', '"y":1,"y":1'),
        "verdict": "malformed",
    },
    {
        "name": "duplicate_key_through_an_escape",
        "line": SPEND.replace("}}", ',"\\u0063ommitted_micro_usd":7}}'),
        "verdict": "malformed",
    },
    {
        # What `json.dumps` writes by default: another writer's escapes are still one compact line.
        "name": "escaped_non_ascii",
        "line": unit_done("été").replace("é", "\\u00e9"),
        "verdict": "ok",
    },
    {"name": "escaped_slash", "line": unit_done("a/b").replace("/", "\\/"), "verdict": "ok"},
    {
        "name": "exponent_in_unknown_field",
        "line": SPEND.replace("}}", ',"ratio":1E2}}'),
        "verdict": "ok",
    },
    # A time of the right shape that names no instant.
    {
        "name": "time_february_30",
        "line": spend(4, 1).replace(T, "2026-02-30T02:08:57.213Z"),
        "verdict": "malformed",
    },
    {
        "name": "time_february_29_of_a_common_year",
        "line": spend(4, 1).replace(T, "2026-02-29T02:08:57.213Z"),
        "verdict": "malformed",
    },
    {
        "name": "time_february_29_of_a_leap_year",
        "line": spend(4, 1).replace(T, "2024-02-29T02:08:57.213Z"),
        "verdict": "ok",
    },
    {
        "name": "time_month_13",
        "line": spend(4, 1).replace(T, "2026-13-30T02:08:57.213Z"),
        "verdict": "malformed",
    },
    {
        "name": "time_hour_24",
        "line": spend(4, 1).replace(T, "2026-11-30T24:00:00.000Z"),
        "verdict": "malformed",
    },
    {
        "name": "time_minute_60",
        "line": spend(4, 1).replace(T, "2026-11-30T02:60:57.213Z"),
        "verdict": "malformed",
    },
    {
        "name": "time_second_60",
        "line": spend(4, 1).replace(T, "2026-11-30T23:59:60.000Z"),
        "verdict": "malformed",
    },
    {
        "name": "time_year_0",
        "line": spend(4, 1).replace(T, "0000-11-30T02:08:57.213Z"),
        "verdict": "malformed",
    },
    {
        "name": "time_fullwidth_digits",
        "line": spend(4, 1).replace(T, "\uff12\uff10\uff12\uff16" + T[4:]),
        "verdict": "malformed",
    },
    # Counters.
    {
        "name": "progress_done_over_total",
        "line": progress({"draft": {"done": 5, "total": 4}}),
        "verdict": "malformed",
    },
    {
        "name": "progress_done_equals_total",
        "line": progress({"draft": {"done": 4, "total": 4}}),
        "verdict": "ok",
    },
]

# Stream 1.4 adds one optional field, `hello.pid` (an integer from 1 to 2**63 - 1). A reader that
# knows it checks its type whenever it is present; a 1.3 reader ignores it as a newer minor's field.
PID_MAX = 2**63 - 1


def hello_with_pid(pid: Any, version: str = "1.4", run: str = RUN_A) -> str:
    data = {
        "stream_version": version,
        "engine_run_id": run,
        "book_id": BOOK,
        "chunker_version": "c1",
        "pid": pid,
    }
    return line(1, "hello", data)


LINES += [
    {"name": "hello_1_4_with_pid", "line": hello_with_pid(4242), "verdict": "ok"},
    {"name": "hello_1_4_without_pid", "line": hello(RUN_A, "1.4"), "verdict": "ok"},
    {"name": "hello_1_4_pid_1", "line": hello_with_pid(1), "verdict": "ok"},
    {"name": "hello_1_4_pid_int64_max", "line": hello_with_pid(PID_MAX), "verdict": "ok"},
    {"name": "hello_1_3_with_a_pid", "line": hello_with_pid(4242, "1.3"), "verdict": "ok"},
    {"name": "hello_pid_0", "line": hello_with_pid(0), "verdict": "malformed"},
    {"name": "hello_pid_negative", "line": hello_with_pid(-7), "verdict": "malformed"},
    {"name": "hello_pid_over_int64", "line": hello_with_pid(PID_MAX + 1), "verdict": "malformed"},
    {"name": "hello_pid_string", "line": hello_with_pid("4242"), "verdict": "malformed"},
    {"name": "hello_pid_float", "line": hello_with_pid(4242.0), "verdict": "malformed"},
    {"name": "hello_pid_null", "line": hello_with_pid(None), "verdict": "malformed"},
    {"name": "hello_pid_bool", "line": hello_with_pid(True), "verdict": "malformed"},
    {"name": "hello_pid_object", "line": hello_with_pid({"pid": 1}), "verdict": "malformed"},
    {
        "name": "hello_1_3_with_a_bad_pid",
        "line": hello_with_pid("x", "1.3"),
        "verdict": "malformed",
    },
    {
        "name": "hello_major_2_with_a_bad_pid",
        "line": hello_with_pid("x", "2.0"),
        "verdict": "unsupported_version",
    },
]

# A newer minor than any reader here (1.9): unknown fields in known events, at any depth, and
# unknown event types are read and ignored, as long as the line keeps the rules every line keeps.
HELLO_1_9 = hello_with_pid(4242, "1.9").replace("}}", ',"host":{"name":"n1","cores":8}}}')
PROGRESS_1_9 = line(2, "progress", {"phases": {"draft": {"done": 1, "total": 2, "eta_s": 1.5}}})
CHECKPOINT_1_9 = line(3, "checkpoint", {"pid": "not a field of any event type known here"})
UNIT_1_9 = line(4, "unit_done", {"unit": "u-0001", "index": 0, "pages": 12})
SPEND_1_9 = line(5, "spend", {"committed_micro_usd": 1500, "currency": "USD"})
FINISHED_1_9 = line(
    6,
    "finished",
    {
        "outcome": "clean",
        "exit_code": 0,
        "stop": None,
        "refusal": None,
        "volume": {"units_done": 1, "units_total": 1, "units_skipped": 0},
        "money": {"committed_micro_usd": 1500, "estimated_micro_usd": 1600},
        "duration_ms": 1234,
    },
)
LINES += [
    {"name": "hello_1_9_unknown_fields", "line": HELLO_1_9, "verdict": "ok"},
    {"name": "progress_1_9_unknown_phase_field", "line": PROGRESS_1_9, "verdict": "ok"},
    {"name": "unknown_type_1_9_with_a_known_field_name", "line": CHECKPOINT_1_9, "verdict": "ok"},
    {"name": "unit_done_1_9_unknown_field", "line": UNIT_1_9, "verdict": "ok"},
    {"name": "finished_1_9_unknown_fields", "line": FINISHED_1_9, "verdict": "ok"},
]

# A readable hello (valid JSON, type "hello", a storable engine_run_id in its data) starts its
# stream whatever else is wrong with it: another major is unsupported_version, whatever else is
# wrong; anything else wrong is that stream's malformed (docs/reference/stream-format.md, "A hello
# that starts its stream").
HELLO_2_0_KEY_AFTER_DATA = with_envelope(hello(RUN_B, "2.0"), trace="t-2")
HELLO_1_4_ENVELOPE_KEY = with_envelope(hello(RUN_B, "1.4"), trace="t-2")
HELLO_1_3_LONG_CHUNKER = line(
    1,
    "hello",
    {
        "stream_version": "1.3",
        "engine_run_id": RUN_B,
        "book_id": BOOK,
        "chunker_version": "c" * 300,
    },
)
HELLO_1_3_WIDE_INTEGER = line(
    1,
    "hello",
    {
        "stream_version": "1.3",
        "engine_run_id": RUN_B,
        "book_id": BOOK,
        "chunker_version": "c1",
        "host": {"cores": 2**64},
    },
)
LINES += [
    {"name": "hello_2_0_key_after_data", "line": HELLO_2_0_KEY_AFTER_DATA, "verdict": "unsupported_version"},
    {
        "name": "hello_2_0_not_compact_bad_time",
        "line": " " + hello(RUN_B, "2.0").replace(T, "2026-02-30T00:00:00.000Z"),
        "verdict": "unsupported_version",
    },
    {"name": "hello_1_4_envelope_key", "line": HELLO_1_4_ENVELOPE_KEY, "verdict": "malformed"},
    {"name": "hello_1_3_long_chunker_version", "line": HELLO_1_3_LONG_CHUNKER, "verdict": "malformed"},
    {"name": "hello_1_3_wide_integer", "line": HELLO_1_3_WIDE_INTEGER, "verdict": "malformed"},
]  # fmt: skip

# Every integer of a line, anywhere, fits a signed 64-bit integer (-2**63 .. 2**63 - 1). orjson
# reads one up to 2**64 - 1 as an int and a wider one as a float: readers judge the text.
LINES += [
    {"name": "unknown_field_int64_max", "line": line(2, "spend", {"committed_micro_usd": 1, "x": 2**63 - 1}), "verdict": "ok"},
    {"name": "unknown_field_int64_min", "line": line(2, "spend", {"committed_micro_usd": 1, "x": -(2**63)}), "verdict": "ok"},
    {"name": "unknown_field_2_pow_63", "line": line(2, "spend", {"committed_micro_usd": 1, "x": 2**63}), "verdict": "malformed"},
    {"name": "unknown_field_below_int64_min", "line": line(2, "spend", {"committed_micro_usd": 1, "x": -(2**63) - 1}), "verdict": "malformed"},
    {"name": "unknown_type_past_64_bits_nested", "line": line(2, "heartbeat", {"a": [{"b": 2**64 + 1}]}), "verdict": "malformed"},
    {"name": "envelope_key_past_64_bits_1_9", "line": with_envelope(spend(2, 1), trace=10**20 - 1), "verdict": "malformed"},
    {"name": "twenty_digits_in_a_string", "line": line(2, "heartbeat", {"a": "9" * 40}), "verdict": "ok"},
    {"name": "wide_float_is_not_an_integer", "line": line(2, "heartbeat", {"a": 1.8446744073709552e19}), "verdict": "ok"},
]  # fmt: skip

# Lines given as hex because they are not valid text.
BYTE_LINES: list[dict[str, Any]] = [
    {
        "name": "invalid_utf8",
        "hex": (b'{"seq":4,"type":"x\xff","time":"' + T.encode() + b'","data":{}}').hex(),
        "verdict": "malformed",
    },
    {
        "name": "byte_order_mark",
        "hex": (b"\xef\xbb\xbf" + hello(RUN_A).encode()).hex(),
        "verdict": "malformed",
    },
    {
        "name": "carriage_return",
        "hex": (spend(4, 1).encode() + b"\r").hex(),
        "verdict": "malformed",
    },
    {
        "name": "raw_nul_byte_in_a_string",
        "hex": unit_done("u\x00").replace(NUL_ESCAPE, "\x00").encode().hex(),
        "verdict": "malformed",
    },
]


def journal(*parts: str, tail: str = "") -> bytes:
    """The bytes of a journal: each part a complete line, then an optional unterminated tail."""
    return "".join(p + "\n" for p in parts).encode() + tail.encode()


a_spend_1 = spend(2, 1000)
a_spend_1_other = spend(2, 9999)

# Whole journals. Each stream's verdict: "ok", "gap", "payload_conflict", "malformed",
# "unsupported_version"; for a problem, the 1-based line number and byte offset where the offending
# line starts, and its seq (null when the line has none). Streams are listed in file order;
# problems before any hello belong to no stream ("engine_run_id": null).
JOURNALS: dict[str, tuple[bytes, list[dict[str, Any]]]] = {
    "clean": (
        journal(hello(RUN_A), a_spend_1, spend(3, 2000), finished(4)),
        [{"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 4}],
    ),
    "duplicates": (
        journal(
            hello(RUN_A),
            a_spend_1,
            spend(3, 2000),
            a_spend_1,
            spend(3, 2000),
            hello(RUN_A),
            finished(4),
        ),
        [{"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 4}],
    ),
    "gap": (
        journal(hello(RUN_A), a_spend_1, spend(4, 2000)),
        [{"engine_run_id": RUN_A, "verdict": "gap", "line": 3, "seq": 4}],
    ),
    "conflict_on_last": (
        journal(hello(RUN_A), a_spend_1, a_spend_1_other),
        [{"engine_run_id": RUN_A, "verdict": "payload_conflict", "line": 3, "seq": 2}],
    ),
    "conflict_on_earlier": (
        journal(hello(RUN_A), a_spend_1, spend(3, 2000), spend(4, 3000), a_spend_1_other),
        [{"engine_run_id": RUN_A, "verdict": "payload_conflict", "line": 5, "seq": 2}],
    ),
    "unterminated_tail": (
        journal(hello(RUN_A), a_spend_1, tail=spend(3, 2000)[:20]),
        [{"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 2}],
    ),
    "resume_two_streams": (
        journal(
            hello(RUN_A),
            a_spend_1,
            finished(3, 4, "ceiling"),
            hello(RUN_B),
            spend(2, 3000),
            finished(3),
        ),
        [
            {"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 3},
            {"engine_run_id": RUN_B, "verdict": "ok", "last_seq": 3},
        ],
    ),
    "line_before_hello": (
        journal(a_spend_1, hello(RUN_A), spend(2, 1000)),
        [
            {"engine_run_id": None, "verdict": "malformed", "line": 1, "seq": 2},
            {"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 2},
        ],
    ),
    "malformed_in_stream": (
        journal(hello(RUN_A), spend(2, "12"), spend(3, 2000)),
        [{"engine_run_id": RUN_A, "verdict": "malformed", "line": 2, "seq": 2}],
    ),
    "bad_json_in_stream": (
        journal(hello(RUN_A), a_spend_1, '{"seq":3,"type":"spe'),
        [{"engine_run_id": RUN_A, "verdict": "malformed", "line": 3, "seq": None}],
    ),
    "major_refused": (
        journal(hello(RUN_A, "2.0"), spend(2, 1000), hello(RUN_B), spend(2, 1000)),
        [
            {"engine_run_id": RUN_A, "verdict": "unsupported_version", "line": 1, "seq": 1},
            {"engine_run_id": RUN_B, "verdict": "ok", "last_seq": 2},
        ],
    ),
    "line_after_finished": (
        journal(hello(RUN_A), a_spend_1, finished(3), spend(4, 3000), spend(5, 4000)),
        [{"engine_run_id": RUN_A, "verdict": "malformed", "line": 4, "seq": 4}],
    ),
    "repeats_after_finished": (
        journal(hello(RUN_A), a_spend_1, finished(3), a_spend_1, finished(3), hello(RUN_A)),
        [{"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 3}],
    ),
    "resume_after_finished": (
        journal(hello(RUN_A), finished(2), hello(RUN_B), spend(2, 3000), finished(3)),
        [
            {"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 2},
            {"engine_run_id": RUN_B, "verdict": "ok", "last_seq": 3},
        ],
    ),
    "nul_in_stream": (
        journal(
            hello(RUN_A), a_spend_1, spend(3, 2000).replace("}}", ',"note":"' + NUL_ESCAPE + '"}}')
        ),
        [{"engine_run_id": RUN_A, "verdict": "malformed", "line": 3, "seq": 3}],
    ),
    "not_compact_in_stream": (
        journal(hello(RUN_A), a_spend_1, " " + spend(3, 2000)),
        [{"engine_run_id": RUN_A, "verdict": "malformed", "line": 3, "seq": 3}],
    ),
    "string_over_its_bound_in_stream": (
        journal(hello(RUN_A), a_spend_1, unit_done(sized(256), seq=3)),
        [{"engine_run_id": RUN_A, "verdict": "malformed", "line": 3, "seq": 3}],
    ),
    "impossible_time_in_stream": (
        journal(hello(RUN_A), a_spend_1, spend(3, 2000).replace(T, "2026-02-30T02:08:57.213Z")),
        [{"engine_run_id": RUN_A, "verdict": "malformed", "line": 3, "seq": 3}],
    ),
    "versions_1_3_then_1_4": (
        journal(
            hello(RUN_A),
            a_spend_1,
            finished(3, 4, "ceiling"),
            hello_with_pid(4242, "1.4", RUN_B),
            spend(2, 3000),
            finished(3),
        ),
        [
            {"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 3},
            {"engine_run_id": RUN_B, "verdict": "ok", "last_seq": 3},
        ],
    ),
    "newer_minor_1_9": (
        journal(HELLO_1_9, PROGRESS_1_9, CHECKPOINT_1_9, UNIT_1_9, SPEND_1_9, FINISHED_1_9),
        [{"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 6}],
    ),
    # A newer minor's envelope keys after `data` are ignored; in a minor the readers know they
    # are malformed (docs/reference/stream-format.md, "A newer minor's envelope keys").
    "newer_minor_envelope_keys": (
        journal(
            with_envelope(hello(RUN_A, "1.9"), trace="t-1"),
            with_envelope(line(2, "unit_done", {"unit": "u-1", "index": 1}), trace={"x": 1}),
            with_envelope(spend(3, 1000), span=[1, "s"], trace=None),
            finished(4),
        ),
        [{"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 4}],
    ),
    "envelope_key_in_a_known_minor": (
        journal(hello(RUN_A, "1.4"), with_envelope(spend(2, 1000), trace={"x": 1}), spend(3, 2000)),
        [{"engine_run_id": RUN_A, "verdict": "malformed", "line": 2, "seq": 2}],
    ),
    "newer_minor_unknown_type": (
        journal(hello(RUN_A, "1.7"), line(2, "heartbeat", {"x": 1}), spend(3, 1000)),
        [{"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 3}],
    ),
    # A readable hello starts its stream, whatever else is wrong with it: what is wrong is that
    # stream's problem, and the finished stream before it is left as it was.
    "hello_2_0_key_after_data_after_a_finished_1_3_stream": (
        journal(hello(RUN_A), a_spend_1, finished(3), HELLO_2_0_KEY_AFTER_DATA, spend(2, 900), finished(3)),
        [
            {"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 3},
            {"engine_run_id": RUN_B, "verdict": "unsupported_version", "line": 4, "seq": 1},
        ],
    ),
    "hello_2_0_key_after_data_after_a_finished_1_9_stream": (
        journal(hello(RUN_A, "1.9"), a_spend_1, finished(3), HELLO_2_0_KEY_AFTER_DATA, spend(2, 900)),
        [
            {"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 3},
            {"engine_run_id": RUN_B, "verdict": "unsupported_version", "line": 4, "seq": 1},
        ],
    ),
    "hello_2_0_key_after_data_first": (
        journal(HELLO_2_0_KEY_AFTER_DATA, spend(2, 900), hello(RUN_A), a_spend_1),
        [
            {"engine_run_id": RUN_B, "verdict": "unsupported_version", "line": 1, "seq": 1},
            {"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 2},
        ],
    ),
    "hello_1_4_envelope_key_after_a_finished_stream": (
        journal(hello(RUN_A), a_spend_1, finished(3), HELLO_1_4_ENVELOPE_KEY, spend(2, 900), finished(3)),
        [
            {"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 3},
            {"engine_run_id": RUN_B, "verdict": "malformed", "line": 4, "seq": 1},
        ],
    ),
    "hello_1_3_long_chunker_version_after_a_finished_stream": (
        journal(hello(RUN_A), a_spend_1, finished(3), HELLO_1_3_LONG_CHUNKER, spend(2, 900)),
        [
            {"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 3},
            {"engine_run_id": RUN_B, "verdict": "malformed", "line": 4, "seq": 1},
        ],
    ),
    "hello_1_3_wide_integer_after_a_finished_stream": (
        journal(hello(RUN_A), a_spend_1, finished(3), HELLO_1_3_WIDE_INTEGER, spend(2, 900)),
        [
            {"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 3},
            {"engine_run_id": RUN_B, "verdict": "malformed", "line": 4, "seq": 1},
        ],
    ),
    "hello_2_0_naming_a_stream_already_read": (
        journal(hello(RUN_A), a_spend_1, with_envelope(hello(RUN_A, "2.0"), trace="t-2")),
        [{"engine_run_id": RUN_A, "verdict": "payload_conflict", "line": 3, "seq": 1}],
    ),
    # A journal that returns to an earlier stream (its hello repeated) reads that stream's lines
    # by that stream's version, not by the version of the hello read last.
    "return_to_a_1_9_stream_duplicate_with_an_envelope_key": (
        journal(
            hello(RUN_A, "1.9"),
            with_envelope(a_spend_1, trace="t-2"),
            finished(3),
            hello(RUN_B, "1.4"),
            hello(RUN_A, "1.9"),
            with_envelope(a_spend_1, trace="t-2"),
        ),
        [
            {"engine_run_id": RUN_A, "verdict": "ok", "last_seq": 3},
            {"engine_run_id": RUN_B, "verdict": "ok", "last_seq": 1},
        ],
    ),
    "return_to_a_1_4_stream_duplicate_with_an_envelope_key": (
        journal(
            hello(RUN_A, "1.4"),
            a_spend_1,
            finished(3),
            hello(RUN_B, "1.9"),
            hello(RUN_A, "1.4"),
            with_envelope(a_spend_1, trace="t-2"),
        ),
        [
            {"engine_run_id": RUN_A, "verdict": "malformed", "line": 6, "seq": 2},
            {"engine_run_id": RUN_B, "verdict": "ok", "last_seq": 1},
        ],
    ),
    # Every integer of a line fits a signed 64-bit integer, a field this reader does not know too.
    "integer_past_64_bits_in_a_newer_minors_envelope": (
        journal(hello(RUN_A, "1.9"), with_envelope(a_spend_1, trace=10**20 - 1)),
        [{"engine_run_id": RUN_A, "verdict": "malformed", "line": 2, "seq": 2}],
    ),
    "integer_past_64_bits_in_an_unknown_data_field": (
        journal(hello(RUN_A), line(2, "spend", {"committed_micro_usd": 1, "x": 2**63})),
        [{"engine_run_id": RUN_A, "verdict": "malformed", "line": 2, "seq": 2}],
    ),
    "integer_past_64_bits_in_an_unknown_type": (
        journal(hello(RUN_A), line(2, "heartbeat", {"a": [{"b": 2**64 + 1}]})),
        [{"engine_run_id": RUN_A, "verdict": "malformed", "line": 2, "seq": 2}],
    ),
}  # fmt: skip


def _offset_of_line(content: bytes, number: int) -> int:
    offset = 0
    for _ in range(number - 1):
        offset = content.index(b"\n", offset) + 1
    return offset


def main() -> None:
    (HERE / "lines.json").write_text(
        json.dumps({"text_lines": LINES, "byte_lines": BYTE_LINES}, indent=1, ensure_ascii=False)
        + "\n"
    )
    manifest = []
    for name, (content, streams) in JOURNALS.items():
        (HERE / "journals" / f"{name}.jsonl").write_bytes(content)
        for stream in streams:
            if "line" in stream:
                stream["offset"] = _offset_of_line(content, stream["line"])
        manifest.append({"file": f"journals/{name}.jsonl", "streams": streams})
    (HERE / "journals.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()

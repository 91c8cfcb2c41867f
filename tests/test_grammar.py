"""One grammar of a line (`engine_events.grammar`), read by both halves: its refusal is one
`MalformedLine` naming the rule broken, the same refusal from the engine's reader and from the
platform's judge, and nothing of it is written a second time anywhere in the source.

The shared vectors (`tests/vectors/lines.json`) pin the verdicts; tests/test_decoders_agree.py
holds the platform's own fast lanes to the judge; tests/platform/test_decoder.py and
tests/engine/test_decode_vectors.py hold each refusal's reason and seq.
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
from pathlib import Path
from typing import Any, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

import engine_events
import platform_ingest
from engine_events.grammar import (
    NESTING_DEPTH_MAX,
    LineError,
    MalformedLine,
    MalformedReason,
    nesting_depth,
)
from engine_events.readers.decode import decode_line as engine_decode
from platform_ingest import errors as platform_errors
from platform_ingest.journal.memo import DecoderMemo
from platform_ingest.journal.precise import decode_precisely

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src"
GRAMMAR = SOURCE / "engine_events" / "grammar"
CORPUS: dict[str, list[dict[str, Any]]] = json.loads(
    (ROOT / "tests" / "vectors" / "lines.json").read_text()
)
VECTORS = CORPUS["text_lines"] + CORPUS["byte_lines"]

# -- the one refusal ----------------------------------------------------------------------------

SAMPLES: dict[str, MalformedLine] = {
    "invalid_utf8": MalformedLine("invalid_utf8", "not UTF-8 at byte 4"),
    "invalid_json": MalformedLine("invalid_json", "not JSON"),
    "not_compact": MalformedLine("not_compact", "not compact", seq=3),
    "duplicate_key": MalformedLine.duplicate_key("unit", seq=3),
    "not_an_object": MalformedLine("not_an_object", "not an object"),
    "wrong_keys": MalformedLine("wrong_keys", "wrong keys", seq=3),
    "nul_character": MalformedLine("nul_character", "U+0000", seq=3),
    "line_too_long": MalformedLine.too_long(2_000_000, 1_048_576, line_sha256=b"\x01" * 32),
    "nesting_too_deep": MalformedLine.nesting_too_deep(65, 64),
    "wrong_type": MalformedLine.wrong_type("seq", "an integer >= 1"),
    "string_too_long": MalformedLine.string_too_long("unit", 255, seq=3),
    "money_not_integer": MalformedLine.money_not_integer("committed_micro_usd", "a float", seq=3),
    "integer_too_wide": MalformedLine.integer_too_wide(seq=3),
    "hello_not_first": MalformedLine("hello_not_first", "seq 2", seq=2),
}


def test_every_reason_is_documented() -> None:
    """The reasons code may read are the ones docs/reference/stream-format.md lists."""
    page = (ROOT / "docs" / "reference" / "stream-format.md").read_text()
    table = page.split("| `reason` | the rule the line breaks |", 1)[1].split("\n\n", 1)[0]
    documented = re.findall(r"^\| `([a-z_0-9]+)` \| ", table, re.M)
    assert sorted(documented) == sorted(get_args(MalformedReason))


def test_every_reason_has_a_sample_here() -> None:
    """A new reason is held by the tests below too: it needs a sample in `SAMPLES`."""
    assert set(SAMPLES) == set(get_args(MalformedReason))
    assert all(sample.reason == reason for reason, sample in SAMPLES.items())


@pytest.mark.parametrize("reason", sorted(SAMPLES))
def test_a_refusal_found_at_an_offset_is_a_new_error(reason: str) -> None:
    """`at(offset)` gives a `MalformedLine` of the same reason, message, fields and cause, at
    `offset`; the refusal it was made from is unchanged (a log or a report may hold it)."""
    original = SAMPLES[reason]
    cause = ValueError("the parser's own")
    original.__cause__ = cause
    before = dict(vars(original))
    found = original.at(1234)
    assert type(found) is MalformedLine
    assert found is not original
    assert (str(found), found.args, found.offset, found.reason) == (
        str(original),
        original.args,
        1234,
        reason,
    )
    assert {**vars(found), "offset": before["offset"]} == before
    assert found.__cause__ is cause
    assert vars(original) == before


@pytest.mark.parametrize("reason", sorted(SAMPLES))
def test_a_refusal_of_a_readable_hello_names_its_stream_in_a_new_error(reason: str) -> None:
    original = SAMPLES[reason]
    before = dict(vars(original))
    named = original.of_hello("r-2", "1.4")
    assert type(named) is MalformedLine
    assert (named.engine_run_id, named.stream_version, str(named), named.reason) == (
        "r-2",
        "1.4",
        str(original),
        reason,
    )
    assert vars(original) == before


@pytest.mark.parametrize("vector", VECTORS, ids=[vector["name"] for vector in VECTORS])
def test_both_halves_refuse_a_line_alike_word_for_word(vector: dict[str, Any]) -> None:
    """The engine's reader (`verify`, `watch`, `status`) and the platform's judge give every
    shared vector the same refusal: its class, its reason, its detail (what `verify` prints and
    `show` prints), its seq and the stream it names."""
    raw = (
        bytes.fromhex(vector["hex"]) if "hex" in vector else str(vector["line"]).encode()
    ) + b"\n"
    engine = platform = None
    try:
        engine_decode(raw)
    except LineError as error:
        engine = error
    try:
        decode_precisely(raw, DecoderMemo())
    except LineError as error:
        platform = error
    if not isinstance(engine, MalformedLine):
        assert not isinstance(platform, MalformedLine)
        return
    assert type(platform) is MalformedLine
    assert (engine.reason, engine.detail, engine.seq) == (
        platform.reason,
        platform.detail,
        platform.seq,
    )
    assert (engine.engine_run_id, engine.stream_version) == (
        platform.engine_run_id,
        platform.stream_version,
    )


# -- no second grammar --------------------------------------------------------------------------

RULE_NAMES = {
    "LINE_BYTES_MAX",
    "IDENTIFIER_BYTES_MAX",
    "TEXT_BYTES_MAX",
    "NESTING_DEPTH_MAX",
    "INTEGER_MAX",
    "BIGINT_MAX",
    "SEQ_MAX",
    "STREAM_MAJOR",
    "STREAM_MINOR_KNOWN",
    "SUPPORTED_MAJORS",
    "STREAM_VERSION_PATTERN",
    "TIME_PATTERN",
    "MICRO_USD_PER_USD",
    "TYPE_CHECKS",
    "KNOWN_TYPES",
}
"""The grammar's numbers and tables: bound, in a module of their own, only in the grammar."""
RULE_FUNCTIONS = {
    "nesting_depth",
    "integer_too_wide",
    "contains_nul",
    "hello_identity",
    "is_newer_minor",
    "stream_major",
    "reads_major",
    "judge",
    "whose_refusal",
}
"""The grammar's judgements: defined only in the grammar."""


def written_rules(path: Path) -> list[str]:
    """The grammar's names `path` binds itself (an import of them is no copy)."""
    found = []
    for node in ast.parse(path.read_text()).body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        found += [t.id for t in targets if isinstance(t, ast.Name) and t.id in RULE_NAMES]
        if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") in RULE_FUNCTIONS:
            found.append(node.name)
        if isinstance(node, ast.ClassDef) and node.name in {"MalformedLine", "LineError"}:
            found.append(node.name)
    return found


SOURCES = sorted(path for path in SOURCE.rglob("*.py") if GRAMMAR not in path.parents)


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(SOURCE)) for p in SOURCES])
def test_no_module_outside_the_grammar_writes_a_rule_of_it(path: Path) -> None:
    """A bound, a version, the time's shape, a check of a type or a refusal of a line written
    outside `engine_events/grammar/` would be a second grammar, free to drift from the first."""
    assert written_rules(path) == []


def test_the_check_finds_a_second_grammar() -> None:
    """What the test above looks for, planted: a bound bound again, a judge of its own, a refusal
    class of its own; an import of the grammar's is none of these."""
    planted = ROOT / "tests" / "planted_rules.py"
    source = (
        "from engine_events.grammar import LINE_BYTES_MAX\n"
        "BIGINT_MAX = 2**63 - 1\n"
        "NESTING_DEPTH_MAX: int = 64\n"
        "def _nesting_depth(body): ...\n"
        "class MalformedLine(ValueError): ...\n"
    )
    try:
        planted.write_text(source)
        assert written_rules(planted) == [
            "BIGINT_MAX",
            "NESTING_DEPTH_MAX",
            "_nesting_depth",
            "MalformedLine",
        ]
    finally:
        planted.unlink()


def _all_modules() -> list[str]:
    names = []
    for package in (engine_events, platform_ingest):
        names += [
            info.name
            for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
            if ".testing" not in info.name and not info.name.endswith("__main__")
        ]
    return names


def test_malformed_line_is_one_class_and_the_old_shapes_are_gone() -> None:
    """Every module of both halves imported, `MalformedLine` has no subclass (a refusal is told
    by its `reason`), the platform's fourteen former classes are no names of it, and neither half
    has a grammar module of its own."""
    for name in _all_modules():
        importlib.import_module(name)
    assert MalformedLine.__subclasses__() == []
    assert platform_errors.MalformedLine is MalformedLine
    assert platform_errors.LineRefused is LineError
    for old in (
        "InvalidUtf8",
        "InvalidJson",
        "NotCompact",
        "DuplicateKey",
        "NotAnObject",
        "WrongKeys",
        "NulCharacter",
        "LineTooLong",
        "NestingTooDeep",
        "WrongType",
        "StringTooLong",
        "MoneyNotInteger",
        "IntegerTooWide",
        "HelloNotFirst",
    ):
        assert not hasattr(platform_errors, old), old
        assert old not in platform_ingest.__all__, old
    for gone in (
        "platform_ingest.journal.line_rules",
        "platform_ingest.journal.hello",
        "engine_events.readers.hello",
    ):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(gone)


# -- moved from the copies' test: what the one nesting depth must measure -----------------------

TRICKY_TEXT = st.text(st.sampled_from('[]{}"\\/aé\x00\n'), max_size=8) | st.text(max_size=6)
"""Strings full of what a depth counter must skip: brackets, quotes and backslashes (escaped by
the encoder), a NUL and a newline (escaped too), a non-ASCII character."""
SHALLOW = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TRICKY_TEXT,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(TRICKY_TEXT, children, max_size=3)
    ),
    max_leaves=10,
)


def _depth(value: Any) -> int:
    """The nesting depth of a Python JSON value: what `nesting_depth` must find in its text."""
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


@st.composite
def nested_values(draw: st.DrawFn) -> Any:
    """A JSON value nested to a chosen depth: often the bound, one below or one past it; at some
    levels the wrapper holds siblings too (shallow values, which may reach deeper still)."""
    target = draw(
        st.sampled_from([NESTING_DEPTH_MAX - 1, NESTING_DEPTH_MAX, NESTING_DEPTH_MAX + 1])
        | st.integers(0, NESTING_DEPTH_MAX + 2)
    )
    value = draw(SHALLOW)
    for _ in range(max(0, target - _depth(value))):
        members = draw(st.lists(SHALLOW, max_size=2))
        members.insert(draw(st.integers(0, len(members))), value)
        if draw(st.booleans()):
            value = members
        else:
            keys = draw(
                st.lists(TRICKY_TEXT, min_size=len(members), max_size=len(members), unique=True)
            )
            value = dict(zip(keys, members, strict=True))
    return value


@given(nested_values(), st.booleans(), st.sampled_from([None, 0, 2]))
def test_the_nesting_depth_of_any_json_text_is_its_values(
    value: Any, ascii_only: bool, indent: int | None
) -> None:
    """Whatever the text of a value (compact or spaced, escaped or not, brackets and quotes in
    its strings), `nesting_depth` finds the depth of the value it holds."""
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent).encode()
    assert nesting_depth(text) == _depth(value)

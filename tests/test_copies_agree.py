"""The copies the two halves keep of one another's code agree, by what they do.

`engine_events` and `platform_ingest` never import each other (an import-linter contract holds
it) and ship apart, as the `engine-events` and `platform-ingest` wheels: an engine host installs no
Postgres driver, a platform host no engine. So what both must do alike is written twice, once in
each half, and nothing but a test keeps the two copies in step. This file is where their agreement
is held:

- the JSON nesting-depth check (`_nesting_depth` in `engine_events/readers/decode.py`,
  `nesting_depth` in `platform_ingest/journal/line_rules.py`): the same depth for any JSON value, at the bound
  (`NESTING_DEPTH_MAX`) and one past it, and for any bytes at all;
- `is_newer_minor` beside it (same modules): the same answer for any stream version;
- the exit-code tables (`engine_events/_exit_codes.py`, `platform_ingest/decisions/exit_codes.py`):
  every code with the same name, the same `finished.outcome` and the same refusal band; both are
  also the shared table `tests/vectors/exit_codes.json`;
- the installed version, `_version.py` (both): the same version from every way of installing
  (each half's own wheel, the development install of both, or none);
- money in dollars for a person (`usd` in `engine_events/_money.py` and
  `platform_ingest/_plain.py`): the same text for any amount, so that `show`, `watch` and
  `status` say money alike.

Copies held by tests of their own subject, not repeated here: the log formatter (`_logs.py`,
both halves) in `tests/test_cli_traps.py` (`test_both_halves_format_a_record_alike`); the line's
bounds and the newest known minor (`STREAM_MINOR_KNOWN`) in
`tests/test_decoders_agree.py` (`test_the_two_sides_bounds_are_the_same_numbers`), whose
differential tests also hold the two decoders to one verdict on any line.

Each test here would fail if one copy drifted: a code, a name or the band changed on one side
changes the compared tables; a version lookup changed on one side answers differently in one of
the install shapes. For the nesting depth, the generated values are shown to tell apart the
likeliest drifts (brackets inside strings counted, escapes forgotten): a drifted copy disagrees
with the real one on some generated value, which the property test would then report.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

import engine_events._exit_codes as engine_exit_codes
import engine_events._money as engine_money
import engine_events._version as engine_version
import engine_events.readers.decode as engine_decoder
import platform_ingest._plain as platform_plain
import platform_ingest._version as platform_version
import platform_ingest.decisions.exit_codes as platform_exit_codes
import platform_ingest.journal.line_rules as platform_line_rules

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT / "tests" / "vectors"
BOUND = platform_line_rules.NESTING_DEPTH_MAX
"""The bound (the same number on both sides: `test_decoders_agree` holds it with the others)."""

# -- the nesting depth ----------------------------------------------------------------------------

TRICKY_TEXT = st.text(st.sampled_from('[]{}"\\/aé\x00\n'), max_size=8) | st.text(max_size=6)
"""Strings full of what a depth counter must skip: brackets, quotes and backslashes (escaped by
the encoder), a NUL and a newline (escaped too), a non-ASCII character."""

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TRICKY_TEXT
)
SHALLOW = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(TRICKY_TEXT, children, max_size=3)
    ),
    max_leaves=10,
)
"""Any JSON value of a few levels: lists, objects (keys as tricky as the strings) and scalars."""


def _depth(value: Any) -> int:
    """The nesting depth of a Python JSON value: what both copies must find in its text."""
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


@st.composite
def json_values(draw: st.DrawFn) -> Any:
    """A JSON value nested to a chosen depth: often the bound, one below or one past it.

    A shallow value is wrapped, level by level, in lists or objects up to the chosen depth; at a
    few levels the wrapper also holds siblings (shallow values of their own, which may reach deeper
    still), before or after the deeper one.
    """
    target = draw(st.sampled_from([BOUND - 1, BOUND, BOUND + 1]) | st.integers(0, BOUND + 2))
    value = draw(SHALLOW)
    levels = max(0, target - _depth(value))
    with_siblings = draw(st.sets(st.integers(0, max(0, levels - 1)), max_size=3))
    for level in range(levels):
        siblings = draw(st.lists(SHALLOW, min_size=1, max_size=2)) if level in with_siblings else []
        members = [*siblings]
        members.insert(draw(st.integers(0, len(members))), value)
        if draw(st.booleans()):
            value = members
        else:
            keys = draw(
                st.lists(TRICKY_TEXT, min_size=len(members), max_size=len(members), unique=True)
            )
            value = dict(zip(keys, members, strict=True))
    return value


@st.composite
def json_texts(draw: st.DrawFn) -> tuple[Any, bytes]:
    """A generated value and its JSON text: compact or spaced, ASCII-escaped or not."""
    value = draw(json_values())
    text = json.dumps(
        value,
        ensure_ascii=draw(st.booleans()),
        indent=draw(st.none() | st.integers(0, 2)),
        separators=draw(st.sampled_from([None, (",", ":"), (", ", ": ")])),
    )
    return value, text.encode()


@st.composite
def cut_json(draw: st.DrawFn) -> bytes:
    """A piece of a JSON text cut at any two bytes, or two such pieces joined: strings left open or
    entered halfway, escapes split from what they escape."""
    pieces = []
    for _ in range(draw(st.integers(1, 2))):
        text = draw(json_texts())[1]
        start = draw(st.integers(0, len(text)))
        pieces.append(text[start : draw(st.integers(start, len(text)))])
    return b"".join(pieces)


JSONISH_BYTES = (
    st.binary(max_size=80)
    | st.lists(
        st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b'\\"', b"a", b" ", b"\xc3\xa9"]),
        max_size=200,
    ).map(b"".join)
    | cut_json()
)
"""Bytes that are seldom JSON: unbalanced brackets, strings never closed, a backslash at the end,
JSON texts cut anywhere."""


@given(json_texts())
def test_both_copies_of_the_nesting_depth_measure_any_json_value_alike(
    case: tuple[Any, bytes],
) -> None:
    """Both `_nesting_depth` copies find the value's own depth in its JSON text, at the bound,
    one past it, or anywhere else."""
    value, body = case
    expected = _depth(value)
    assert engine_decoder._nesting_depth(body) == expected, body[:300]
    assert platform_line_rules.nesting_depth(body) == expected, body[:300]


@pytest.mark.parametrize("levels", [BOUND - 1, BOUND, BOUND + 1])
@pytest.mark.parametrize("container", ["[", '{"k":'])
def test_both_copies_of_the_nesting_depth_meet_the_bound(levels: int, container: str) -> None:
    """The bound and its neighbours, always generated (not only as the generator happens to)."""
    closer = "]" if container == "[" else "}"
    body = (container * levels + "0" + closer * levels).encode()
    assert engine_decoder._nesting_depth(body) == platform_line_rules.nesting_depth(body) == levels


@given(JSONISH_BYTES)
def test_both_copies_of_the_nesting_depth_read_any_bytes_alike(body: bytes) -> None:
    """Before the line is known to be JSON (the depth is checked first), any bytes: one answer."""
    assert engine_decoder._nesting_depth(body) == platform_line_rules.nesting_depth(body)


def _ignoring_strings(body: bytes) -> int:
    """A drifted copy: counts brackets inside strings too."""
    depth = deepest = 0
    for byte in body:
        if byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


def _ignoring_escapes(body: bytes) -> int:
    """A drifted copy: ends a string at an escaped quote."""
    depth = deepest = 0
    in_string = False
    for byte in body:
        if byte == 0x22:
            in_string = not in_string
        elif not in_string and byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif not in_string and byte in b"]}":
            depth -= 1
    return deepest


@pytest.mark.parametrize("drifted", [_ignoring_strings, _ignoring_escapes])
@pytest.mark.parametrize(
    "bodies",
    [json_texts().map(lambda case: case[1]), JSONISH_BYTES],
    ids=["json values", "any bytes"],
)
def test_the_generated_inputs_would_catch_a_drifted_copy(
    drifted: Callable[[bytes], int], bodies: st.SearchStrategy[bytes]
) -> None:
    """The property tests above are strong enough: each generator finds an input on which a copy
    drifted in a likely way disagrees with the real ones (so a drifted copy would fail them)."""
    found = find(
        bodies,
        lambda body: drifted(body) != platform_line_rules.nesting_depth(body),
        settings=settings(database=None, max_examples=2000, phases=[Phase.generate]),
    )
    assert drifted(found) != engine_decoder._nesting_depth(found)


# -- the newest known minor ----------------------------------------------------------------------

VERSIONS = (
    st.builds("{}.{}".format, st.integers(0, 3), st.integers(0, 12))
    | st.text(st.sampled_from("0123456789.-+ a\u0661"), max_size=8)
    | st.sampled_from(["1.04", "01.5", "1.5 ", "1.5\n", "\u0661.\u0665", "1.", ".5", "1.5.0"])
)


def _outcome(check: Callable[[str], bool], version: str) -> bool | str:
    try:
        return check(version)
    except ValueError as error:  # int() refuses a digit string past its limit: both alike
        return type(error).__name__


@given(VERSIONS)
def test_both_copies_tell_a_newer_minor_alike(version: str) -> None:
    """Whether a stream is of a minor newer than the reader knows (its extra envelope keys are then
    ignored): one answer from both halves for any version string."""
    assert _outcome(engine_decoder.is_newer_minor, version) == _outcome(
        platform_line_rules.is_newer_minor, version
    )


# -- the exit codes -------------------------------------------------------------------------------

EXIT_CODES = json.loads((VECTORS / "exit_codes.json").read_text())


def test_both_exit_code_tables_name_the_same_codes() -> None:
    """Every code, in both tables, with the same name; and each is the shared vector table."""
    engine = {code.value: code.name for code in engine_exit_codes.ExitCode}
    platform = {code.value: code.name for code in platform_exit_codes.ExitCode}
    assert engine == platform
    assert {value: name.lower() for value, name in engine.items()} == {
        case["code"]: case["name"] for case in EXIT_CODES["codes"]
    }


@pytest.mark.parametrize("code", list(engine_exit_codes.ExitCode), ids=lambda code: code.name)
def test_both_exit_code_tables_give_each_code_the_same_meaning(
    code: engine_exit_codes.ExitCode,
) -> None:
    """What the engine writes for a code (`finished.outcome`, whether it is a refusal) is what the
    platform reads from it (`code_name`, a `refused` reading with that class)."""
    reading = platform_exit_codes.read_exit_code(code.value)
    assert code.outcome == platform_exit_codes.code_name(code.value)
    assert code.is_refusal == (reading.state == "refused")
    if code.is_refusal:
        assert reading.refusal == code.outcome


def test_both_exit_code_tables_draw_the_same_refusal_band() -> None:
    """The band (10 to 19) is the same range, and every code a process can report (the negated
    signals too) falls inside it for both halves, or outside it for both."""
    assert engine_exit_codes.REFUSAL_BAND == platform_exit_codes.REFUSAL_BAND
    for status in range(-64, 256):
        engine_refuses = status in engine_exit_codes.REFUSAL_BAND
        assert engine_refuses == (platform_exit_codes.read_exit_code(status).state == "refused")


# -- the installed version -----------------------------------------------------------------------


def _distribution(pyproject: Path) -> str:
    name: str = tomllib.loads(pyproject.read_text())["project"]["name"]
    return name


OWN_WHEEL = {
    engine_version: _distribution(ROOT / "packaging" / "engine-events" / "pyproject.toml"),
    platform_version: _distribution(ROOT / "packaging" / "platform-ingest" / "pyproject.toml"),
}
"""Each half's own distribution, as its packaging/*/pyproject.toml names it."""
DEVELOPMENT = _distribution(ROOT / "pyproject.toml")
"""The development install of both halves, as the root pyproject.toml names it."""

INSTALLS = {
    "its own wheel": {"own": "9.1.0"},
    "the development install": {"development": "9.2.0"},
    "its own wheel beside the development install": {"own": "9.3.0", "development": "9.4.0"},
    "nothing (a source tree never installed)": {},
}
"""Ways of installing a half, each as the versions the metadata knows, by role."""


@pytest.mark.parametrize("installed", INSTALLS.values(), ids=INSTALLS.keys())
def test_both_version_copies_report_the_same_version(
    installed: Mapping[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Installed the same way, both halves report the same version: their own wheel's first,
    else the development install's, else `0+unknown`. (The real development install, where both
    say the root pyproject.toml's version, is `test_both_commands_say_their_installed_version` in
    tests/test_cli_traps.py; each wheel alone, tests/test_packaging.py.)"""
    reported = []
    for module, wheel in OWN_WHEEL.items():
        versions = {wheel: installed.get("own"), DEVELOPMENT: installed.get("development")}

        def version(distribution: str, versions: Mapping[str, str | None] = versions) -> str:
            found = versions.get(distribution)
            if found is None:
                raise metadata.PackageNotFoundError(distribution)
            return found

        monkeypatch.setattr(metadata, "version", version)
        reported.append(module._installed_version())
    expected = installed.get("own", installed.get("development", "0+unknown"))
    assert reported == [expected, expected]


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_both_copies_say_money_in_dollars_alike(micro_usd: int) -> None:
    assert engine_money.usd(micro_usd) == platform_plain.usd(micro_usd)


@pytest.mark.parametrize(
    ("micro_usd", "text"),
    [(0, "$0.00"), (1, "$0.000001"), (1_200_000, "$1.20"), (1_234_250_000, "$1,234.25")],
)
def test_money_in_dollars_keeps_every_micro_usd(micro_usd: int, text: str) -> None:
    assert platform_plain.usd(micro_usd) == text

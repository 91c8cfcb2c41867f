"""The helpers both halves use, written once in `engine_events` and imported by the platform: the
exit codes, the installed version, safe text and money for a person, the log style.

Each was a copy a side once; what the copies' test held that was more than their agreement is
held here, of the one module.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import engine_events._logs as engine_logs
import engine_events._version as engine_version
import engine_events.readers.plain as engine_plain
import platform_ingest._logs as platform_logs
import platform_ingest._plain as platform_plain
import platform_ingest._version as platform_version
import platform_ingest.decisions.exit_codes as platform_exit_codes
from engine_events._exit_codes import REFUSAL_BAND, ExitCode
from engine_events.readers.plain import plain, usd

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT / "tests" / "vectors"


def test_each_helper_is_the_engines_one() -> None:
    """The platform uses the engine's helpers themselves, not copies of them."""
    assert platform_plain.plain is engine_plain.plain
    assert platform_plain.usd is engine_plain.usd
    assert platform_logs.formatter is engine_logs.formatter
    assert platform_logs.add_options is engine_logs.add_options
    assert platform_exit_codes.ExitCode is ExitCode
    assert platform_exit_codes.REFUSAL_BAND is REFUSAL_BAND


# -- the exit codes -------------------------------------------------------------------------------

EXIT_CODES = json.loads((VECTORS / "exit_codes.json").read_text())


def test_the_exit_codes_are_the_shared_table() -> None:
    assert {code.value: code.name.lower() for code in ExitCode} == {
        case["code"]: case["name"] for case in EXIT_CODES["codes"]
    }


@pytest.mark.parametrize("code", list(ExitCode), ids=lambda code: code.name)
def test_the_platform_reads_each_code_as_the_engine_writes_it(code: ExitCode) -> None:
    """What the engine writes for a code (`finished.outcome`, whether it is a refusal) is what the
    platform reads from it (`code_name`, a `refused` reading with that class)."""
    reading = platform_exit_codes.read_exit_code(code.value)
    assert code.outcome == platform_exit_codes.code_name(code.value)
    assert code.is_refusal == (reading.state == "refused")
    if code.is_refusal:
        assert reading.refusal == code.outcome


def test_every_status_in_the_refusal_band_reads_as_a_refusal() -> None:
    """Every code a process can report (the negated signals too) is read as a refusal iff it
    falls in the band (10 to 19), named or not."""
    assert range(10, 20) == REFUSAL_BAND
    for status in range(-64, 256):
        refused = platform_exit_codes.read_exit_code(status).state == "refused"
        assert refused == (status in REFUSAL_BAND)


# -- the installed version -----------------------------------------------------------------------


def _distribution(pyproject: Path) -> str:
    name: str = tomllib.loads(pyproject.read_text())["project"]["name"]
    return name


OWN_WHEEL = {
    engine_version.DISTRIBUTIONS: _distribution(ROOT / "packaging/engine-events/pyproject.toml"),
    platform_version.DISTRIBUTIONS: _distribution(
        ROOT / "packaging/platform-ingest/pyproject.toml"
    ),
}
"""Each half's distributions, and its own wheel as its packaging/*/pyproject.toml names it."""
DEVELOPMENT = _distribution(ROOT / "pyproject.toml")
INSTALLS = {
    "its own wheel": {"own": "9.1.0"},
    "the development install": {"development": "9.2.0"},
    "its own wheel beside the development install": {"own": "9.3.0", "development": "9.4.0"},
    "nothing (a source tree never installed)": {},
}
"""Ways of installing a half, each as the versions the metadata knows, by role."""


@pytest.mark.parametrize("installed", INSTALLS.values(), ids=INSTALLS.keys())
def test_each_half_reports_its_own_wheels_version_else_the_development_installs(
    installed: Mapping[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Installed the same way, both halves report the same version: their own wheel's first,
    else the development install's, else `0+unknown`."""
    reported = []
    for distributions, wheel in OWN_WHEEL.items():
        assert distributions == (wheel, DEVELOPMENT)
        versions = {wheel: installed.get("own"), DEVELOPMENT: installed.get("development")}

        def version(distribution: str, versions: Mapping[str, str | None] = versions) -> str:
            found = versions.get(distribution)
            if found is None:
                raise metadata.PackageNotFoundError(distribution)
            return found

        monkeypatch.setattr(metadata, "version", version)
        reported.append(engine_version.installed_version(*distributions))
    expected = installed.get("own", installed.get("development", "0+unknown"))
    assert reported == [expected, expected]


# -- money and text for a person -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("micro_usd", "text"),
    [(0, "$0.00"), (1, "$0.000001"), (1_200_000, "$1.20"), (1_234_250_000, "$1,234.25")],
)
def test_money_in_dollars_keeps_every_micro_usd(micro_usd: int, text: str) -> None:
    assert usd(micro_usd) == text


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_money_in_dollars_reads_back_to_its_micro_usd(micro_usd: int) -> None:
    """No micro-USD is rounded away: the text reads back to the amount it was made from."""
    dollars, fraction = usd(micro_usd).removeprefix("$").replace(",", "").split(".")
    assert int(dollars) * 1_000_000 + int(fraction.ljust(6, "0")) == micro_usd


UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff\ud800-\udfff]"
)
"""What no view may show a person: controls, bidi controls, separators, a byte-order mark, and
lone surrogates (a name whose bytes are not UTF-8)."""


@given(st.text(), st.none() | st.integers(0, 40))
def test_plain_shows_what_the_text_holds_and_nothing_a_terminal_obeys(
    text: str, max_chars: int | None
) -> None:
    """Whatever a journal holds, `plain` gives text with none of the unsafe characters, each
    written as its escape, within `max_chars`; text without them is kept as it is."""
    shown = plain(text, max_chars)
    assert UNSAFE.search(shown) is None
    escaped = UNSAFE.sub(
        lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text
    )
    if max_chars is None or len(escaped) <= max_chars:
        assert shown == escaped
    else:
        assert len(shown) == max_chars
        assert max_chars == 0 or shown == escaped[: max_chars - 1] + "\N{HORIZONTAL ELLIPSIS}"

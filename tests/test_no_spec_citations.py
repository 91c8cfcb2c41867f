"""The code and its help texts cite the repository's own docs: users never see the design's SPEC.
A citation like "SPEC § 6" in any file of the repository or in a `--help` would send a user to a document they do not
have; the rules it names are in docs/reference/ and docs/platform/."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from engine_events._cli import main as engine_main
from platform_ingest.cli.main import main as platform_main

ROOT = Path(__file__).resolve().parents[1]
CITATION = re.compile(r"\bSPEC\b\s*(§|\.md|:)|§\s*[0-9]")
CHECKED = [
    *(ROOT / folder for folder in ("src", "tests", "bench", "scripts", "docs")),
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
]


def _files() -> list[Path]:
    found = [path for place in CHECKED if place.is_file() for path in [place]]
    for place in CHECKED:
        if place.is_dir():
            found += [path for path in place.rglob("*") if path.suffix in {".py", ".md", ""}]
    return sorted(path for path in found if path.is_file() and path != Path(__file__).resolve())


def test_no_file_cites_the_spec() -> None:
    """Neither the code, nor its tests and benchmarks, nor the docs: a test's docstring that
    says "as § 6 says" sends its reader to the same missing document."""
    cited = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in _files()
        for number, text in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if CITATION.search(text)
    ]
    assert len(_files()) > 100
    assert cited == []


def _help(main: Callable[[list[str]], int], argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main([*argv, "--help"])
    return out.getvalue()


PLATFORM_COMMANDS = [
    "migrate",
    "sweep",
    "run",
    "name",
    "show",
    "release",
    "exited",
    "skip",
    "disown",
    "undisown",
    "abandon",
    "repair",
    "rebuild",
    "compact",
    "prune",
]


@pytest.mark.parametrize("command", ["", *PLATFORM_COMMANDS])
def test_no_platform_help_cites_the_spec(command: str) -> None:
    text = _help(platform_main, [command] if command else [])
    assert text.strip()
    assert CITATION.search(text) is None, text


@pytest.mark.parametrize("command", ["", "demo", "status", "verify", "watch"])
def test_no_engine_help_cites_the_spec(command: str) -> None:
    text = _help(engine_main, [command] if command else [])
    assert text.strip()
    assert CITATION.search(text) is None, text

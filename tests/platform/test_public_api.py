"""The package's names are what a user needs: what the how-tos, the examples and the benchmarks
import, what those take and give, and the errors a caller catches. Everything else is reached
through its module (`platform_ingest.errors`, `platform_ingest.projections`, or the folders'
modules, which may move in any release)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import platform_ingest
from platform_ingest.errors import IngestError, LineRefused

ROOT = Path(__file__).resolve().parents[2]
USERS = [
    *sorted((ROOT / "docs").rglob("*.md")),
    ROOT / "README.md",
    *sorted((ROOT / "examples").glob("*.py")),
    *sorted((ROOT / "bench").glob("*.py")),
    *sorted((ROOT / "scripts").glob("*.py")),
]


def _used_names() -> set[str]:
    """The names imported from the package, or called on it, by the docs and the examples."""
    used: set[str] = set()
    for path in USERS:
        text = path.read_text()
        for imported in re.findall(r"from platform_ingest import \(?([^)\n]*)", text):
            used.update(name.strip() for name in imported.split("#")[0].split(","))
        used.update(re.findall(r"platform_ingest\.(\w+)\(", text))
    return {name for name in used if name}


def _what_they_take_and_give(names: set[str]) -> set[str]:
    """The names in the signatures of `names` (a settings class, a report returned)."""
    found: set[str] = set()
    for name in names:
        value = getattr(platform_ingest, name, None)
        if callable(value):
            found.update(re.findall(r"\w+", str(inspect.signature(value))))
    return found


def _errors() -> set[str]:
    return {
        name
        for name in platform_ingest.__all__
        if isinstance(getattr(platform_ingest, name), type)
        and issubclass(getattr(platform_ingest, name), BaseException)
    }


def test_every_public_name_but_the_errors_is_one_the_docs_use() -> None:
    used = _used_names() & set(platform_ingest.__all__)
    needed = used | (_what_they_take_and_give(used) & set(platform_ingest.__all__))
    others = set(platform_ingest.__all__) - _errors() - {"__version__"}
    assert others == needed


def test_the_public_errors_are_ones_a_caller_catches() -> None:
    """Every error at the top is an `IngestError`, and none is a line's problem: those are kept on
    the attempt (`show`), never raised to a caller of a pass."""
    public = {name: getattr(platform_ingest, name) for name in _errors()}
    assert {name for name, kind in public.items() if not issubclass(kind, IngestError)} == set()
    assert {name for name, kind in public.items() if issubclass(kind, LineRefused)} == set()
    assert "IngestError" in public

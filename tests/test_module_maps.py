"""Every module of each half is in its docs' map: a new module cannot land without its line."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAPS = {
    "engine_events": ROOT / "docs" / "explanation" / "architecture.md",
    "platform_ingest": ROOT / "docs" / "platform" / "README.md",
}


@pytest.mark.parametrize("package", sorted(MAPS))
def test_every_module_is_in_its_map(package: str) -> None:
    text = MAPS[package].read_text()
    modules = sorted(path.name for path in (ROOT / "src" / package).glob("*.py"))
    assert modules, f"no modules found for {package}"
    missing = [name for name in modules if f"`{name}`" not in text]
    assert missing == [], f"{MAPS[package].relative_to(ROOT)} does not name {missing}"


def test_the_platform_map_names_no_module_that_is_gone() -> None:
    """Each row of the platform's module table names a module that exists (a row left behind by
    a move fails)."""
    text = MAPS["platform_ingest"].read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    named = [row.split("`")[1] for row in rows if row.split("`")[1].endswith(".py")]
    assert len(named) > 30
    gone = [name for name in named if not (ROOT / "src" / "platform_ingest" / name).exists()]
    assert gone == []

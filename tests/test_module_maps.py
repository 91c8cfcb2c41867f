"""Every module of each half is in its docs' map, by its path in the package, and every folder
(a subpackage: a layer) is named: a new module cannot land without its line, nor a move leave a
row behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAPS = {
    "engine_events": ROOT / "docs" / "explanation" / "architecture.md",
    "platform_ingest": ROOT / "docs" / "platform" / "README.md",
}
ARCHITECTURE = MAPS["engine_events"]


def _modules(package: str) -> list[str]:
    """Each module's path inside its package (`ingest/apply.py`), a subpackage's `__init__.py`
    left out: its folder stands for it."""
    base = ROOT / "src" / package
    return sorted(
        path.relative_to(base).as_posix()
        for path in base.rglob("*.py")
        if not (path.name == "__init__.py" and path.parent != base)
    )


def _folders(package: str) -> list[str]:
    base = ROOT / "src" / package
    return sorted(
        f"{p.relative_to(base).as_posix()}/" for p in base.iterdir() if (p / "__init__.py").exists()
    )


@pytest.mark.parametrize("package", sorted(MAPS))
def test_every_module_is_in_its_map(package: str) -> None:
    text = MAPS[package].read_text()
    modules = _modules(package)
    assert len(modules) > 20, f"too few modules found for {package}: {modules}"
    missing = [name for name in modules if f"`{name}`" not in text]
    assert missing == [], f"{MAPS[package].relative_to(ROOT)} does not name {missing}"


@pytest.mark.parametrize("package", sorted(MAPS))
def test_every_folder_is_named_in_the_architecture(package: str) -> None:
    """The tree drawn in the architecture's explanation is the tree on disk."""
    text = ARCHITECTURE.read_text()
    folders = _folders(package)
    assert folders, f"{package} has no subpackages"
    missing = [f for f in folders if f"`{package}/{f}`" not in text]
    assert missing == [], f"{ARCHITECTURE.relative_to(ROOT)} does not name {missing}"


def test_the_platform_map_names_no_module_that_is_gone() -> None:
    """Each row of the platform's module table names a module or a folder that exists (a row
    left behind by a move fails)."""
    text = MAPS["platform_ingest"].read_text()
    rows = [line for line in text.splitlines() if line.startswith(("| `", "| **`"))]
    named = [row.split("`")[1] for row in rows]
    assert len(named) > 30
    base = ROOT / "src" / "platform_ingest"
    gone = [name for name in named if not (base / name).exists()]
    assert gone == []


def test_the_architecture_names_no_path_that_is_gone() -> None:
    """Every `engine_events/...` or `platform_ingest/...` path the architecture names exists."""
    text = ARCHITECTURE.read_text()
    named = set(re.findall(r"`((?:engine_events|platform_ingest)/[\w/]*(?:\.py)?)`", text))
    assert len(named) > 10
    gone = sorted(name for name in named if not (ROOT / "src" / name).exists())
    assert gone == []

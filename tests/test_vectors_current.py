"""The committed vector corpus is exactly what `tests/vectors/make_vectors.py` writes."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

VECTORS = Path(__file__).resolve().parent / "vectors"
HAND_WRITTEN = {"make_vectors.py", "exit_codes.json"}
"""Files of the corpus that the generator does not write."""
RELEASES = "releases"
"""Files written by earlier releases (tests/test_previous_release.py): kept as they were."""


def load_generator() -> ModuleType:
    """A fresh import of the generator, so no other test's import (or mutation) is shared."""
    spec = importlib.util.spec_from_file_location(
        "make_vectors_under_test", VECTORS / "make_vectors.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def corpus_files(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.relative_to(root).parts[0] != RELEASES
    }


@pytest.fixture
def generated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """The files `main()` writes into an empty directory (never into the repository)."""
    out = tmp_path / "vectors"
    (out / "journals").mkdir(parents=True)
    module = load_generator()
    monkeypatch.setattr(module, "HERE", out)
    module.main()
    return corpus_files(out)


def test_generated_files_equal_the_committed_ones(generated: dict[str, bytes]) -> None:
    """Every file the generator writes is byte-identical to the committed one."""
    committed = corpus_files(VECTORS)
    assert generated
    for name, content in generated.items():
        assert name in committed, f"{name} is generated but not committed"
        assert committed[name] == content, f"{name} differs from what make_vectors.py writes"


def test_no_committed_file_is_stale(generated: dict[str, bytes]) -> None:
    """Every committed corpus file is either generated or one of the hand-written ones."""
    committed = set(corpus_files(VECTORS))
    assert committed - set(generated) == HAND_WRITTEN


def test_generator_is_deterministic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Running the generator twice in one process writes the same bytes both times."""
    runs = []
    for attempt in ("first", "second"):
        out = tmp_path / attempt
        (out / "journals").mkdir(parents=True)
        module = load_generator()
        monkeypatch.setattr(module, "HERE", out)
        module.main()
        module.main()
        runs.append(corpus_files(out))
    assert runs[0] == runs[1]

"""Seed inputs for the fuzz targets: the shared test vectors (lines and journals)."""

from __future__ import annotations

import json
from pathlib import Path

VECTORS = Path(__file__).resolve().parent.parent / "tests" / "vectors"


def seed_lines() -> list[bytes]:
    """Every line of the shared vectors, with its newline."""
    vectors = json.loads((VECTORS / "lines.json").read_text())
    lines = [entry["line"].encode() + b"\n" for entry in vectors["text_lines"]]
    lines += [bytes.fromhex(entry["hex"]) + b"\n" for entry in vectors["byte_lines"]]
    return lines


def seed_journals() -> list[bytes]:
    """Every journal file of the shared vectors."""
    return [path.read_bytes() for path in sorted((VECTORS / "journals").glob("*.jsonl"))]


def write_corpus(directory: Path, seeds: list[bytes]) -> Path:
    """Write the seeds as a corpus directory (kept between runs: it grows with what is found)."""
    directory.mkdir(parents=True, exist_ok=True)
    for number, seed in enumerate(seeds):
        path = directory / f"seed-{number:03d}"
        if not path.exists():
            path.write_bytes(seed)
    return directory

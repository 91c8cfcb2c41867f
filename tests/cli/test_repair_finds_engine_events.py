"""`repair` runs the `engine-events` installed beside it when none is on `PATH`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cli_runs import BIN, bare_environment, demo_book


@pytest.mark.postgres
def test_repair_uses_the_engine_events_beside_it_without_path(dsn: str, tmp_path: Path) -> None:
    """A stopped demo book is repaired with the default status command although no
    `engine-events` is on `PATH`: the one beside the interpreter is used."""
    book = demo_book(tmp_path / "book-1")
    environment = bare_environment(PLATFORM_INGEST_DSN=dsn)
    ingest = str(BIN / "platform-ingest")
    swept = subprocess.run(
        [ingest, "sweep", "--auto", str(book)], env=environment, capture_output=True, check=False
    )
    assert swept.returncode == 0, swept.stderr
    repaired = subprocess.run(
        [ingest, "repair", str(book), "--reason", "test"],
        env=environment,
        capture_output=True,
        check=False,
        text=True,
    )
    assert repaired.returncode == 0, repaired.stderr
    assert json.loads(repaired.stdout)["reading"] == "ledger"

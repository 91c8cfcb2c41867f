"""Money amounts and book ids never reach log records at INFO or above."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.crash

BOOK_ID = "book-zq7-secret"
COST = 123_457


def run(book_dir: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "engine_events._cli",
            "--log-level",
            "INFO",
            "demo",
            str(book_dir),
            "--pace-ms",
            "0",
            "--unit-cost-micro-usd",
            str(COST),
            *options,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_info_logs_of_every_ending_carry_no_money_and_no_book_id(tmp_path: Path) -> None:
    """A ceiling stop, a resume to the end, a locked book and an unwritable journal log neither."""
    book_dir = tmp_path / BOOK_ID
    logs = []
    stopped = run(book_dir, "--units", "3", "--ceiling-micro-usd", str(COST * 4))
    assert stopped.returncode == 4
    logs.append(stopped.stderr)
    done = run(book_dir, "--units", "3")
    assert done.returncode == 0
    logs.append(done.stderr)
    (book_dir / "events.jsonl").rename(book_dir / "kept.jsonl")
    (book_dir / "events.jsonl").mkdir()
    failed = run(book_dir, "--units", "3", "--on-journal-error", "fail")
    assert failed.returncode == 1
    logs.append(failed.stderr)
    text = "\n".join(logs)
    assert "INFO" in text and "ERROR" in text, "the runs did log"
    for secret in (BOOK_ID, str(COST), str(COST * 4), str(COST * 6), "0.123457"):
        assert secret not in text, f"{secret!r} leaked into the logs"


def test_json_logs_carry_no_money_and_no_book_id_either(tmp_path: Path) -> None:
    """`--log-format json -v` (DEBUG): every line is one JSON object with the stream's time; the
    lines at INFO and above name neither the book nor an amount."""
    book_dir = tmp_path / BOOK_ID
    stopped = subprocess.run(
        [
            *(sys.executable, "-m", "engine_events._cli", "--log-format", "json", "-q", "-v"),
            *("demo", str(book_dir), "--pace-ms", "0", "--unit-cost-micro-usd", str(COST)),
            *("--units", "3", "--ceiling-micro-usd", str(COST * 4)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert stopped.returncode == 2, "-q and -v together are refused"
    stopped = subprocess.run(
        [
            *(sys.executable, "-m", "engine_events._cli", "--log-format", "json", "-v"),
            *("demo", str(book_dir), "--pace-ms", "0", "--unit-cost-micro-usd", str(COST)),
            *("--units", "3", "--ceiling-micro-usd", str(COST * 4)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert stopped.returncode == 4
    entries = [json.loads(line) for line in stopped.stderr.splitlines()]
    assert {entry["level"] for entry in entries} >= {"DEBUG", "INFO"}
    for entry in entries:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"]), entry
        assert entry["logger"].startswith("engine_events")
        if entry["level"] != "DEBUG":
            text = json.dumps(entry)
            for secret in (BOOK_ID, str(COST), str(COST * 4), "0.123457"):
                assert secret not in text, f"{secret!r} leaked into {text}"

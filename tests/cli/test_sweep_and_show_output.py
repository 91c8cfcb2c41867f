"""What `sweep` and `show` print: NDJSON over several books, a run's state said once, the phases
in stream order (progress an older version wrote still reads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_runs import demo_book, platform
from platform_ingest.decisions.runs import progress_from_jsonb


@pytest.mark.postgres
def test_sweep_json_over_several_books_is_one_object_a_line(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Concatenated indented objects parse as nothing; NDJSON parses line by line."""
    books = [demo_book(tmp_path / name) for name in ("book-1", "book-2", "book-3")]
    code, out, _ = platform(capsys, "--dsn", dsn, "sweep", "--auto", "--json", *map(str, books))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 3
    reports = [json.loads(line) for line in lines]
    assert [report["book_id"] for report in reports] == ["book-1", "book-2", "book-3"]
    assert all(report["lines_applied"] > 0 for report in reports)


@pytest.mark.postgres
def test_show_says_the_state_once_and_keeps_the_stream_order_of_phases(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """jsonb orders an object's keys by length: `zeta,a,mid` came back as `a,mid,zeta`."""
    book = demo_book(tmp_path / "book-1", "--stages", "zeta,a,mid")
    assert platform(capsys, "--dsn", dsn, "sweep", "--auto", str(book))[0] == 0
    code, out, _ = platform(capsys, "--dsn", dsn, "show", str(book), "--json")
    assert code == 0
    (run,) = json.loads(out)["books"][0]["runs"]
    assert run["state"] == "completed"
    assert list(run["progress"]) == ["zeta", "a", "mid"]
    assert run["progress"]["zeta"] == {"done": 2, "total": 2}
    code, out, _ = platform(capsys, "--dsn", dsn, "show", str(book))
    assert code == 0
    (run_line,) = [line for line in out.splitlines() if line.startswith("  run ")]
    assert run_line.count("completed") == 1, run_line


def test_progress_written_as_an_object_by_an_older_version_still_reads() -> None:
    assert progress_from_jsonb({"b": {"done": 0, "total": 1}}) == {"b": {"done": 0, "total": 1}}
    assert progress_from_jsonb(None) == {}
    pairs = [["zeta", {"done": 1, "total": 2}], ["a", {"done": 0, "total": 2}]]
    assert list(progress_from_jsonb(pairs)) == ["zeta", "a"]

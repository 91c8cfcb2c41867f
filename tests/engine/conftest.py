"""Fixtures for the engine side: a book directory and a host connection like a real engine's."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine_events._schema import DATABASE_FILE_NAME, connect


@pytest.fixture
def book_dir(tmp_path: Path) -> Path:
    path = tmp_path / "book-1"
    path.mkdir()
    return path


@pytest.fixture
def conn(book_dir: Path) -> Iterator[sqlite3.Connection]:
    connection = connect(book_dir / DATABASE_FILE_NAME)
    yield connection
    connection.close()


def check_journal_against_outbox(book_dir: Path) -> dict[str, int]:
    """The invariants every crash test ends on; returns counts for the test's own assertions.

    - every stream in the file starts with hello at seq 1 and is dense;
    - a repeated seq is byte-identical to its first appearance;
    - every line of the file is a committed outbox row, and every committed row is in the file,
      in (stream, seq) order of first appearance.
    """
    import orjson

    content = (book_dir / "events.jsonl").read_bytes()
    assert content == b"" or content.endswith(b"\n"), "the journal ends in a torn line"
    conn = sqlite3.connect(book_dir / DATABASE_FILE_NAME)
    rows = conn.execute(
        "SELECT s.engine_run_id, o.seq, o.line FROM engine_events_outbox o "
        "JOIN engine_events_stream s USING (stream_no) ORDER BY o.stream_no, o.seq"
    ).fetchall()
    conn.close()
    committed = {(run_id, seq): bytes(line) for run_id, seq, line in rows}
    seen: dict[tuple[str, int], bytes] = {}
    order: list[tuple[str, int]] = []
    stream: str | None = None
    duplicates = 0
    for raw in content.splitlines(keepends=True):
        line = orjson.loads(raw)
        if line["type"] == "hello":
            stream = line["data"]["engine_run_id"]
        assert stream is not None, "a line before any hello"
        key = (stream, line["seq"])
        if key in seen:
            assert seen[key] == raw, f"seq {key} repeated with other bytes"
            duplicates += 1
            continue
        last = max((seq for run, seq in seen if run == stream), default=0)
        assert line["seq"] == last + 1, f"stream {stream} not dense: {last} then {line['seq']}"
        assert committed.get(key) == raw, f"line {key} is not the committed row's bytes"
        seen[key] = raw
        order.append(key)
    assert set(seen) == set(committed), "committed rows missing from the file"
    return {"lines": len(order), "duplicates": duplicates, "streams": len({k[0] for k in order})}


@pytest.fixture
def check_journal() -> object:
    return check_journal_against_outbox

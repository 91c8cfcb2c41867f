"""The shared test vectors: the platform's decoder and tailer reach the verdicts written there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from platform_ingest import Database
from platform_ingest.decisions.exit_codes import REFUSAL_BAND, ExitCode, code_name, read_exit_code
from platform_ingest.errors import LineRefused
from platform_ingest.journal.decode import decode_line
from platform_journals import book_state, sweep

VECTORS = Path(__file__).resolve().parent.parent / "vectors"
LINES = json.loads((VECTORS / "lines.json").read_text())
JOURNALS = json.loads((VECTORS / "journals.json").read_text())
EXIT_CODES = json.loads((VECTORS / "exit_codes.json").read_text())

LINE_CASES = [
    pytest.param(case["line"].encode() + b"\n", case["verdict"], id=case["name"])
    for case in LINES["text_lines"]
] + [
    pytest.param(bytes.fromhex(case["hex"]) + b"\n", case["verdict"], id=case["name"])
    for case in LINES["byte_lines"]
]


def _verdict(raw: bytes) -> str:
    try:
        decode_line(raw)
    except LineRefused as error:
        return error.kind
    return "ok"


@pytest.mark.parametrize(("raw", "verdict"), LINE_CASES)
def test_decoder_reaches_each_line_verdict(raw: bytes, verdict: str) -> None:
    """The decoder's verdict on each vector line is the one the corpus names."""
    assert _verdict(raw) == verdict


STATE_OF_VERDICT = {
    "gap": "stalled",
    "payload_conflict": "quarantined",
    "malformed": "quarantined",
    "unsupported_version": "refused",
}


@pytest.mark.postgres
@pytest.mark.parametrize("entry", JOURNALS, ids=[entry["file"] for entry in JOURNALS])
def test_auto_sweep_reaches_each_journal_verdict(
    entry: dict[str, Any], db: Database, tmp_path: Path
) -> None:
    """Swept in auto mode, each vector journal ends in the attempt states its verdicts name."""
    book_dir = tmp_path / "book-vectors"
    book_dir.mkdir()
    shutil.copy(VECTORS / entry["file"], book_dir / "events.jsonl")
    sweep(db, book_dir)
    sweep(db, book_dir)  # a second pass changes nothing
    book = book_state(db, book_dir)
    attempts = {a["engine_run_id"]: a for run in book["runs"] for a in run["attempts"]}
    streams = [stream for stream in entry["streams"] if stream["engine_run_id"] is not None]
    assert sorted(attempts) == sorted(stream["engine_run_id"] for stream in streams)
    for stream in entry["streams"]:
        if stream["engine_run_id"] is None:
            # A problem before any hello belongs to no stream: it is kept on the book.
            assert book["error"] == {
                "kind": stream["verdict"],
                "seq": stream["seq"],
                "offset": stream["offset"],
                "detail": book["error"]["detail"],
            }
            continue
        attempt = attempts[stream["engine_run_id"]]
        if stream["verdict"] == "ok":
            assert attempt["state"] in ("active", "finished")
            assert attempt["last_seq"] == stream["last_seq"]
            assert attempt["error"] is None
        else:
            assert attempt["state"] == STATE_OF_VERDICT[stream["verdict"]]
            error = attempt["error"]
            assert (error["kind"], error["seq"], error["offset"]) == (
                stream["verdict"],
                stream["seq"],
                stream["offset"],
            )
    if all(stream["engine_run_id"] is not None for stream in entry["streams"]):
        assert book["error"] is None


@pytest.mark.parametrize("case", EXIT_CODES["codes"], ids=lambda case: str(case["code"]))
def test_exit_code_mirror_agrees_with_named_codes(case: dict[str, Any]) -> None:
    """Each named exit code has the vector's name and reading in the platform's own mirror."""
    assert ExitCode(case["code"]).name.lower() == case["name"] == code_name(case["code"])
    reading = read_exit_code(case["code"])
    assert reading.state == case["reading"]
    assert reading.outcome == case.get("outcome")
    assert reading.reason == case.get("reason")
    assert reading.refusal == case.get("refusal")


@pytest.mark.parametrize("case", EXIT_CODES["unnamed"], ids=lambda case: str(case["code"]))
def test_exit_code_mirror_reads_unnamed_codes_by_rule(case: dict[str, Any]) -> None:
    """An unnamed code inside 10-19 is a refusal, any other unnamed code is failed."""
    assert code_name(case["code"]) is None
    reading = read_exit_code(case["code"])
    assert reading.state == case["reading"]
    if case["code"] in REFUSAL_BAND:
        assert reading.refusal == f"refusal_{case['code']}"


def test_every_mirrored_code_is_in_the_vectors() -> None:
    """The mirror names no code the shared table does not (the two stay in step both ways)."""
    assert {code.value for code in ExitCode} == {case["code"] for case in EXIT_CODES["codes"]}
